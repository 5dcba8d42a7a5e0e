//! Where a fleet's retry budget lives: in this process ([`SharedBudget`]) or in Redis
//! ([`RedisBudget`]), behind one interface, [`BudgetStore`], that the runner drives.
//!
//! The rules — token arithmetic, the first-come, first-served queue of waiting retries, the
//! provider's shared rate-limit window — are core's [`RetryBudget`](rebound_core::RetryBudget).
//! A store only gives them a clock, a place and a way to wake the runner whose permit was
//! decided:
//!
//! | store | for | clock | the queue |
//! |---|---|---|---|
//! | [`SharedBudget`] | the runners of one process | a monotonic `Instant` (the budget's creation) | core's queue; a waiter is woken the moment its permit is decided |
//! | [`RedisBudget`] | processes on any number of machines | Redis's own `TIME`, never going back | the same rules run in a Lua script; each process polls the answers of all its waiters in one call (see [`redis`]) |
//!
//! Pick one with a [`BudgetLocation`] (what `rebound run --budget` takes): `local` or
//! `redis://HOST:PORT/NAME`.
//!
//! [`RedisBudget`] needs the `redis` feature.
//!
//! ```
//! # #[cfg(feature = "redis")] {
//! use rebound_core::{BudgetConfig, MachineConfig};
//! use rebound_effects::budget::{BudgetLocation, RedisBudget, RedisOptions, SharedBudget};
//! use rebound_effects::runner::Runner;
//!
//! let location: BudgetLocation = "redis://127.0.0.1:6379/evals".parse()?;
//! let BudgetLocation::Redis(url) = location else { unreachable!() };
//! // No I/O yet: the first decision connects, and falls back to a local budget when Redis
//! // does not answer.
//! let budget = RedisBudget::new(&url, BudgetConfig::default(), RedisOptions::default())?;
//! let runner = Runner::new(MachineConfig::resilient(), vec![]).budget(budget.clone());
//! # let _ = (runner, SharedBudget::new(BudgetConfig::default()));
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod local;
#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "redis")]
pub use self::redis::{BudgetEvent, BudgetEventHook, RedisBudget, RedisBudgetError, RedisOptions};
pub use local::SharedBudget;

use async_trait::async_trait;
use rebound_core::{BudgetNote, PermitAsk, PermitDecision};
use std::fmt;
use std::str::FromStr;
use tokio::time::Instant;

/// A retry budget as the runner sees it: somewhere to ask for permits and to tell what
/// happened, on a clock every runner sharing it agrees on.
///
/// The runner runs its machine on the store's clock (milliseconds since
/// [`origin`](Self::origin)): times in a [`PermitAsk`] and in a [`BudgetNote`] are on it.
/// A store never fails: whatever goes wrong behind it (Redis down, a malformed reply), it
/// decides anyway, locally if it must, because a budget exists to keep agents running.
#[async_trait]
pub trait BudgetStore: Send + Sync + fmt::Debug {
    /// The instant the budget's clock counts from.
    fn origin(&self) -> Instant;

    /// Asks for a permit and waits for the answer: at once, or when a deposit, refill, a
    /// rate limit or the ask's deadline decides it. Dropping the future withdraws the ask.
    async fn acquire(&self, ask: PermitAsk) -> PermitDecision;

    /// Tells the budget what a machine noted: a success (a deposit) or a rate limit (every
    /// sharer waits until it ends).
    async fn record(&self, note: BudgetNote);

    /// The tokens in the budget now, for telemetry (`rebound.budget.tokens`), when the
    /// store can tell without I/O; `None` (the default) when it cannot.
    fn tokens(&self) -> Option<f64> {
        None
    }
}

/// A shared store is a store: a runner can take the `Arc<dyn BudgetStore>` an application
/// chose at run time (local or Redis) and shares with its other runners.
#[async_trait]
impl<T: BudgetStore + ?Sized> BudgetStore for std::sync::Arc<T> {
    fn origin(&self) -> Instant {
        (**self).origin()
    }

    async fn acquire(&self, ask: PermitAsk) -> PermitDecision {
        (**self).acquire(ask).await
    }

    async fn record(&self, note: BudgetNote) {
        (**self).record(note).await;
    }

    fn tokens(&self) -> Option<f64> {
        (**self).tokens()
    }
}

/// Where `rebound run --budget` keeps the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetLocation {
    /// In this process: [`SharedBudget`].
    Local,
    /// In Redis, shared by every process that names it: [`RedisBudget`].
    Redis(RedisUrl),
}

impl FromStr for BudgetLocation {
    type Err = BudgetLocationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "local" {
            return Ok(BudgetLocation::Local);
        }
        if s.starts_with("redis://") || s.starts_with("rediss://") {
            return s.parse().map(BudgetLocation::Redis);
        }
        if s.starts_with("redis+sentinel://") || s.starts_with("redis-sentinel://") {
            return Err(BudgetLocationError::Sentinel);
        }
        Err(BudgetLocationError::Scheme)
    }
}

/// `value` with the credentials of a URL (`USER:PASSWORD@`, `:PASSWORD@` or `SECRET@`)
/// replaced by `***`, the user name as well as the password: a password written without its
/// colon reads as a user name. What an error about a `--budget` value may repeat of it,
/// whatever else is wrong with it.
///
/// ```
/// use rebound_effects::budget::redact;
/// assert_eq!(redact("redis://bot:hunter2@cache"), "redis://***:***@cache");
/// assert_eq!(redact("redis://:hunter2@cache"), "redis://:***@cache");
/// assert_eq!(redact("redis://hunter2@cache:x/y"), "redis://***@cache:x/y");
/// assert_eq!(redact("local"), "local");
/// ```
#[must_use]
pub fn redact(value: &str) -> String {
    let Some((scheme, rest)) = value.split_once("://") else {
        return value.to_owned();
    };
    // Up to the last `@`, whatever it holds: a password may contain `/`, `?` or `#`, and
    // showing too little is better than showing a secret.
    let Some((userinfo, rest)) = rest.rsplit_once('@') else {
        return value.to_owned();
    };
    format!("{scheme}://{}@{rest}", masked(userinfo))
}

/// A URL's `USER[:PASSWORD]` as shown: each part that is there as `***`.
fn masked(userinfo: &str) -> &'static str {
    match userinfo.split_once(':') {
        Some(("", _)) => ":***",
        Some(_) => "***:***",
        None => "***",
    }
}

/// A budget in Redis: the server, and the budget's name (its keys' namespace).
///
/// Written `redis://[USER[:PASSWORD]@]HOST[:PORT]/NAME` (`rediss://` for TLS is refused:
/// this build has no TLS for Redis). The port defaults to 6379. `NAME` is 1 to 64 letters,
/// digits, `.`, `_` or `-`. The credentials, if any, are used to connect and never shown:
/// [`Display`](fmt::Display) writes `***` in place of the password and of the user name (a
/// password written without its colon, `redis://SECRET@HOST`, reads as a user name).
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// `redis://[USER[:PASSWORD]@]HOST:PORT`, what the client connects to.
    server: String,
    /// The same with the user name and the password masked.
    shown: String,
    name: String,
}

impl RedisUrl {
    /// The budget's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's URL without the name, password included (to connect; never print it).
    #[must_use]
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether the URL carries credentials (`USER[:PASSWORD]@`).
    #[must_use]
    pub fn has_credentials(&self) -> bool {
        self.server.contains('@')
    }

    /// The same server with `password` (Redis `AUTH` with the default user), for a password
    /// kept out of the command line, where every process on the machine could read it. A URL
    /// that already has credentials keeps them.
    #[must_use]
    pub fn with_password(mut self, password: &str) -> RedisUrl {
        if self.has_credentials() || password.is_empty() {
            return self;
        }
        let hostport = self.server.trim_start_matches("redis://").to_owned();
        let encoded: String = password
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        self.server = format!("redis://:{encoded}@{hostport}");
        self.shown = format!("redis://:***@{hostport}");
        self
    }
}

impl fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.shown, self.name)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisUrl({self})")
    }
}

impl FromStr for RedisUrl {
    type Err = BudgetLocationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("rediss://") {
            return Err(BudgetLocationError::Tls);
        }
        let rest = s
            .strip_prefix("redis://")
            .ok_or(BudgetLocationError::Scheme)?;
        let (authority, name) = rest.split_once('/').ok_or(BudgetLocationError::NoName)?;
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid_name {
            return Err(BudgetLocationError::BadName);
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            // An IPv6 literal in brackets keeps its colons.
            Some((host, port)) if !port.contains(']') => (
                host,
                port.parse::<u16>()
                    .map_err(|_| BudgetLocationError::BadPort)?,
            ),
            _ => (hostport, 6379),
        };
        if host.is_empty() || host.contains(['/', '?', '#', ' ']) {
            return Err(BudgetLocationError::NoHost);
        }
        let (server, shown) = match userinfo {
            None => {
                let server = format!("redis://{host}:{port}");
                (server.clone(), server)
            }
            Some(userinfo) => (
                format!("redis://{userinfo}@{host}:{port}"),
                format!("redis://{}@{host}:{port}", masked(userinfo)),
            ),
        };
        Ok(RedisUrl {
            server,
            shown,
            name: name.to_owned(),
        })
    }
}

/// Why a `--budget` value was refused. The messages never repeat a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetLocationError {
    /// Neither `local` nor a `redis://` URL.
    #[error("a budget is `local` or `redis://HOST:PORT/NAME`")]
    Scheme,
    /// `rediss://`.
    #[error("rediss:// (TLS) is not supported for the budget: use redis:// on a trusted network or a TLS tunnel")]
    Tls,
    /// No `/NAME` after the server.
    #[error("the redis budget needs a name: redis://HOST:PORT/NAME")]
    NoName,
    /// A name with other characters than letters, digits, `.`, `_`, `-`, or too long.
    #[error("the budget name must be 1 to 64 letters, digits, `.`, `_` or `-`")]
    BadName,
    /// A port that is not a number up to 65535.
    #[error("the redis port must be a number from 0 to 65535")]
    BadPort,
    /// No host.
    #[error("the redis URL needs a host: redis://HOST:PORT/NAME")]
    NoHost,
    /// `redis+sentinel://`: the budget needs the master itself.
    #[error("Redis Sentinel is not supported for the budget: name the current master as redis://HOST:PORT/NAME")]
    Sentinel,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_url_is_shown_without_its_password() {
        for (raw, shown) in [
            ("redis://u:hunter2@h:99999/x", "redis://***:***@h:99999/x"),
            ("redis://:hunter2@h", "redis://:***@h"),
            ("redis://hunter2@h/{x}", "redis://***@h/{x}"),
            ("rediss://u:p@ss:w@h/x", "rediss://***:***@h/x"),
            ("memcached://u:hunter2@h/x", "memcached://***:***@h/x"),
            ("redis://u:pa/ss@h/x", "redis://***:***@h/x"),
            ("redis://h:1/a@b", "redis://***:***@b"),
            ("local", "local"),
        ] {
            assert_eq!(redact(raw), shown, "{raw}");
        }
    }

    #[test]
    fn a_password_from_elsewhere_is_used_to_connect_and_never_shown() {
        let url: RedisUrl = "redis://10.0.0.5:6380/fleet".parse().unwrap();
        assert!(!url.has_credentials());
        let url = url.with_password("p@ss word");
        assert_eq!(url.server(), "redis://:p%40ss%20word@10.0.0.5:6380");
        assert_eq!(url.to_string(), "redis://:***@10.0.0.5:6380/fleet");
        assert!(!format!("{url:?}").contains("ss"));
        // Credentials in the URL win; an empty password changes nothing.
        let given: RedisUrl = "redis://u:pw@h:1/n".parse().unwrap();
        assert_eq!(
            given.clone().with_password("other").server(),
            "redis://u:pw@h:1"
        );
        let plain: RedisUrl = "redis://h:1/n".parse().unwrap();
        assert_eq!(plain.clone().with_password(""), plain);
    }

    #[test]
    fn budget_locations_parse_and_never_show_a_password() {
        assert_eq!("local".parse(), Ok(BudgetLocation::Local));
        let BudgetLocation::Redis(url) = "redis://10.0.0.5:6380/evals-1".parse().unwrap() else {
            panic!("a redis location");
        };
        assert_eq!(url.name(), "evals-1");
        assert_eq!(url.server(), "redis://10.0.0.5:6380");
        let url: RedisUrl = "redis://bot:s3cret@cache/fleet".parse().unwrap();
        assert_eq!(url.server(), "redis://bot:s3cret@cache:6379");
        assert_eq!(url.to_string(), "redis://***:***@cache:6379/fleet");
        assert!(!format!("{url:?}").contains("s3cret"));
        // A password without its colon reads as a user name: masked all the same.
        let url: RedisUrl = "redis://s3cret@cache:6380/fleet".parse().unwrap();
        assert_eq!(url.server(), "redis://s3cret@cache:6380");
        assert_eq!(url.to_string(), "redis://***@cache:6380/fleet");
        assert!(!format!("{url:?}").contains("s3cret"));
        let url: RedisUrl = "redis://:s3cret@cache/fleet".parse().unwrap();
        assert_eq!(url.to_string(), "redis://:***@cache:6379/fleet");
        for (bad, error) in [
            ("redis", BudgetLocationError::Scheme),
            ("redis://host:6379", BudgetLocationError::NoName),
            ("redis://host:6379/", BudgetLocationError::BadName),
            ("redis://host/{tag}", BudgetLocationError::BadName),
            ("redis://host:99999/x", BudgetLocationError::BadPort),
            ("redis://:1/x", BudgetLocationError::NoHost),
            ("rediss://host/x", BudgetLocationError::Tls),
            (
                "redis+sentinel://s1:26379/mymaster",
                BudgetLocationError::Sentinel,
            ),
        ] {
            assert_eq!(bad.parse::<BudgetLocation>(), Err(error), "{bad}");
        }
    }
}
