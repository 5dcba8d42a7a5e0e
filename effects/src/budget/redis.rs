//! A retry budget shared by processes on any number of machines, kept in Redis.
//!
//! # The same rules, in one place at a time
//!
//! A fleet of processes against one provider account shares the account's rate limit and its
//! overloads, so it must share the retry budget too: twenty processes with a budget each
//! spend twenty budgets in a total outage. [`RedisBudget`] keeps one budget in Redis. Every
//! decision is one call of a Lua script (`redis.lua`, beside this file) that runs core's
//! [`RetryBudget`](rebound_core::RetryBudget) rules atomically on the server — refill,
//! deposits from first attempts and successes, charged permits, the queue, the shared
//! "rate-limited until" time of each target — so a decision costs one round trip (see
//! `docs/performance.md` for what that costs on loopback). The script is a second copy of
//! core's rules, in the one language Redis runs atomically; a parity test drives both with
//! the same random operations and compares every answer, so the two cannot drift apart
//! silently.
//!
//! # One clock: Redis's
//!
//! The budget's clock is Redis's `TIME`, read inside the script. Nothing the script keeps is
//! a time of a caller's clock: a process sends durations (how long its retry may wait, how
//! old its request is, how long the server asked to wait) and receives durations (how long to
//! wait before asking again). Processes on machines whose clocks disagree by minutes agree on
//! refill, deadlines and the rate-limit window, because only Redis's clock is ever compared
//! with itself. Each process runs its machines on its own monotonic clock
//! ([`BudgetStore::origin`]). The budget's clock never goes back: when `TIME` steps back
//! (NTP, a failover to a host whose clock is behind), the script carries on from the last
//! time it saw, at `TIME`'s pace, so a retry allowed to wait still waits and a shared rate
//! limit still holds. Nor does it jump while retries wait: a process with a retry in the
//! queue calls at least every `waiter_stale_after / 2`, so a gap longer than
//! `waiter_stale_after` between two calls while one waits is `TIME` stepping forward, and
//! the script carries on from the last time it saw too, instead of denying every waiter at
//! once. A budget nobody waits on takes any gap as time (refill, the end of a rate-limit
//! window). Each process still ends its waits at their deadlines on its own clock (and a
//! grace of a second), whatever Redis's clock does.
//!
//! # Where it does not work
//!
//! Redis 5 or later, standalone (or a replicated master named directly). The first call on
//! each connection reads `INFO server` and refuses Redis Cluster, a Sentinel and a Redis
//! older than 5 with [`RedisBudgetError::Unsupported`]: the process decides locally for the
//! rest of its life, says so once, and [`RedisBudget::check`] returns the error so a command
//! line can stop at start instead.
//!
//! One budget, one set of rules: the budget keeps the settings it was made with (its
//! [`BudgetConfig`]), and a process naming it with other settings is refused the same way
//! ([`RedisBudgetError::OtherSettings`], naming both), never left to mix two sets of rules.
//! A budget that expired (idle) starts again with the settings of its next caller.
//!
//! # The queue across processes: requests polled in Redis, one call per process
//!
//! In one process a waiting retry is woken the moment a deposit pays for it. Across
//! processes the queue lives in Redis as core's queue does in memory — a sorted set of
//! requests ordered by the age of their turn (oldest first, ties in order of asking) — and
//! each decision the script makes settles it exactly as core does: a deposit from any
//! process grants the head of the queue at once, in Redis, and a waiter whose deadline came
//! is denied. Nothing in the script walks the queue: deadlines are a second sorted set,
//! answers are read by field, so a decision costs O(log n) with n retries waiting (see
//! `docs/performance.md`).
//!
//! A process learns the answers of all its waiting retries with one call, which reads the
//! process's inbox in Redis — the answers the queue gave its requests since the last read —
//! at a cost that does not grow with its waiters. It makes that call when it is told to:
//! the script publishes on the process's channel (`rebound:budget:{NAME}:wake:OWNER`, one
//! subscription per process) when it grants one of the process's requests or sends it to
//! wait, so a retry paid by another process's success starts within a round trip. Besides,
//! a process polls when refill alone could pay the head of the queue, at its own earliest
//! waiter's deadline (denials are not published: a process knows its deadlines; it polls
//! for them at most every 200 ms, so a denial may come that much late), and every
//! `waiter_stale_after / 2` (1 s) to say it is still here and to find requests Redis
//! forgot or a wake-up that was lost. Without a live subscription (it
//! could not be made, or broke; retried every `retry_redis_after`) it polls every
//! `poll_interval` (50 ms) as well, so a lost message costs time, never an answer. A fleet
//! of 50 processes with 10,000 retries waiting in a total outage thus makes a few hundred
//! cheap calls a second besides its asks (see `docs/performance.md`). The retries of a
//! process that stopped polling for `waiter_stale_after` (it died) leave the queue when
//! they reach its head or their deadline, as canceled waiters do in core, and a dropped
//! wait cancels its request. A request's age is read on its process's clock just before
//! the call, so an ask that reaches Redis late counts as younger by that delay.
//!
//! # Requests: named once, decided once
//!
//! Each ask is named by its process: a random owner id (one per [`RedisBudget`]) and a
//! counter. A flush of Redis or a failover to a lagging replica cannot make two asks share a
//! name (the script's own counters restart; the names do not), so an old waiter never
//! reads or cancels a newcomer's place. An answer is kept in Redis for `waiter_stale_after`
//! and reading it does not take it: when a reply misses the call timeout, the process asks
//! once more under the same name and reads what the first call decided, instead of having a
//! token spent in Redis and another one locally. When that second call fails too, the
//! process decides locally and, once Redis answers again, withdraws the request: a token
//! granted to it but never used is paid back.
//!
//! # Keys
//!
//! Thirteen keys per budget name, `rebound:budget:{NAME}:` then `state`, `limits`, `queue`,
//! `deadlines`, `waiters`, `decided`, `answered`, `owners`, `mine`, `paced`, `sent`,
//! `seconds` and `served` (what each holds: the top of `redis.lua`), one hash tag so they
//! would live on one Redis Cluster slot. They hold counters,
//! milli-tokens, Redis times, target indexes and request ids (random numbers): no prompt,
//! key, URL or host name. All
//! expire together after `idle_expiry` (10 minutes) without a call; the next call starts a
//! fresh budget with its initial tokens. Each call carries the caller's [`BudgetConfig`]:
//! processes sharing a name should share a configuration.
//!
//! # When Redis fails
//!
//! Agents never wait on Redis. Every call is bounded (`call_timeout`, 50 ms), and so is
//! opening a connection, separately (`connect_timeout`, 1 s: connecting, `AUTH`,
//! `INFO server` and loading the script), so that a fleet started at once on a loaded
//! machine, whose first connections take longer than a call, shares one budget instead of
//! falling back at its first call. An ask, a poll or a withdrawal whose reply is lost (a
//! timeout, a broken connection) is made once more on a fresh connection, so a decision
//! waits at most twice the call bound and a connect. A connection error, a timeout, a
//! script error or a reply the budget does not understand sends this process to a local
//! budget ([`SharedBudget`], same configuration, on the same clock as the machines): a
//! [`BudgetEvent::FellBack`] is reported once, and decisions are local from then on. Every
//! `retry_redis_after` (1 s) the next decision tries Redis again; when it answers, a
//! [`BudgetEvent::Restored`] is reported and decisions are shared again. A Redis that
//! answers but refuses this process — a password it does not take
//! ([`RedisBudgetError::Authentication`]), a read-only replica
//! ([`RedisBudgetError::ReadOnly`]) — is reported as what it is, once, since it will not
//! end by itself, although it is tried again in the same way. A retry waiting in the Redis
//! queue when Redis fails asks the local budget instead, with the same deadline. Rate
//! limits are also noted locally, so a process that falls back still honours the window it
//! heard of.
//!
//! # One state machine, two drivers
//!
//! Every decision above — where to decide, what to call again, when to read the inbox,
//! what to withdraw — is made by core's [`BudgetClient`], a state machine with no I/O. This
//! store executes what it asks for over a real connection (and its timers on tokio's
//! clock); the simulator (`rebound-sim`) executes the same machine over a virtual Redis, so
//! a simulated fleet runs this very logic.

use super::{BudgetStore, RedisUrl, SharedBudget};
use async_trait::async_trait;
use rebound_core::shared_budget::{Answer, BudgetClient, ClientTiming, OpId, Output};
pub use rebound_core::shared_budget::{
    PollAnswer, RedisBudgetError, RedisBudgetStats, ScriptOp, ScriptReply, POLL_BATCH,
};
use rebound_core::{
    BudgetConfig, BudgetNote, BudgetStats, Millis, PermitAsk, PermitDecision, PermitKind,
};
use redis::aio::MultiplexedConnection;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
/// The script: core's budget rules for Redis (see the module documentation).
pub const SCRIPT: &str = include_str!("redis.lua");

/// The largest milli-token figure sent to the script: Lua counts in doubles, exact to 2^53.
const MAX_MILLI: u64 = 1 << 40;

/// Called with each change of a [`RedisBudget`]'s health.
pub type BudgetEventHook = Arc<dyn Fn(&BudgetEvent) + Send + Sync>;

/// A change in where a [`RedisBudget`] decides. Each is reported once per change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BudgetEvent {
    /// Redis failed: this process decides with a local budget until Redis answers again.
    FellBack {
        /// The budget (its URL, credentials masked).
        budget: String,
        /// What failed.
        error: RedisBudgetError,
    },
    /// Redis answered again: the shared budget decides again.
    Restored {
        /// The budget (its URL, credentials masked).
        budget: String,
    },
}

impl fmt::Display for BudgetEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetEvent::FellBack { budget, error } if error.is_permanent() => write!(
                f,
                "retry budget {budget} cannot be used ({error}): using a local budget for \
                 this process"
            ),
            BudgetEvent::FellBack { budget, error } if error.is_refusal() => write!(
                f,
                "retry budget {budget} cannot be used ({error}): using a local budget for \
                 this process until that is fixed"
            ),
            BudgetEvent::FellBack { budget, error } => write!(
                f,
                "retry budget {budget} unavailable ({error}): using a local budget for this \
                 process until redis answers again"
            ),
            BudgetEvent::Restored { budget } => {
                write!(
                    f,
                    "retry budget {budget} answers again: shared budget in use"
                )
            }
        }
    }
}

/// The settings the script keeps with a budget (milli-tokens: capacity, initial, deposit
/// per request, per success, refill per second, per answered retry), as a person would read
/// them.
fn settings_text(milli: &str) -> String {
    let numbers: Vec<f64> = milli
        .split_whitespace()
        .filter_map(|n| n.parse::<f64>().ok())
        .map(|n| n / 1000.0)
        .collect();
    match numbers[..] {
        [capacity, initial, per_request, per_success, refill, per_answered] => format!(
            "capacity {capacity}, initial {initial}, {per_request} per request, \
             {per_success} per success, {refill} per second, {per_answered} per answered retry"
        ),
        _ => milli.chars().take(80).collect(),
    }
}

/// How a [`RedisBudget`] talks to Redis. The defaults suit a Redis on the same network.
#[derive(Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The longest one call may take once its connection is open (default 50 ms). Past it
    /// the call counts as a failure and the process decides locally.
    pub call_timeout: Duration,
    /// The longest opening a connection may take (default 1 s): connecting, the
    /// handshake (`AUTH`), reading what this Redis is (`INFO server`) and loading the
    /// script, before a call's own `call_timeout` starts. A process's first call opens one,
    /// and so does a call after a connection broke or went silent: on a loaded machine (a
    /// fleet started at once) that takes longer than a call, and a first call must not send
    /// the process to its local budget for it. A Redis that drops packets costs a decision
    /// this long, once per `retry_redis_after`.
    pub connect_timeout: Duration,
    /// How often a process with retries waiting in the queue asks whether they were
    /// decided when it cannot be woken by Redis (no live subscription to its channel;
    /// default 50 ms).
    pub poll_interval: Duration,
    /// How long a process that fell back decides locally before trying Redis again
    /// (default 1 s).
    pub retry_redis_after: Duration,
    /// How long the budget's keys live without a call (default 10 minutes).
    pub idle_expiry: Duration,
    /// A queued retry whose process has not polled for this long has left (the process
    /// died), and an answer is kept this long for its process to read (default 2 s). A
    /// process with retries waiting polls every half of it, woken or not: how late it
    /// notices that Redis forgot its requests (a flush, a failover) or lost a wake-up.
    pub waiter_stale_after: Duration,
    /// Told when the budget falls back to a local one and when it returns to Redis.
    pub on_event: Option<BudgetEventHook>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            call_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            poll_interval: Duration::from_millis(50),
            retry_redis_after: Duration::from_secs(1),
            idle_expiry: Duration::from_secs(600),
            waiter_stale_after: Duration::from_secs(2),
            on_event: None,
        }
    }
}

impl RedisOptions {
    /// Sets [`call_timeout`](Self::call_timeout), the longest one call may take.
    #[must_use]
    pub fn with_call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout), the longest opening a connection
    /// may take.
    #[must_use]
    pub fn with_connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Sets [`poll_interval`](Self::poll_interval), how often a queued retry asks.
    #[must_use]
    pub fn with_poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Sets [`retry_redis_after`](Self::retry_redis_after), how long a process that fell back
    /// decides locally.
    #[must_use]
    pub fn with_retry_redis_after(mut self, retry_redis_after: Duration) -> Self {
        self.retry_redis_after = retry_redis_after;
        self
    }

    /// Sets [`idle_expiry`](Self::idle_expiry), how long the keys live without a call.
    #[must_use]
    pub fn with_idle_expiry(mut self, idle_expiry: Duration) -> Self {
        self.idle_expiry = idle_expiry;
        self
    }

    /// Sets [`waiter_stale_after`](Self::waiter_stale_after), when a queued retry counts as gone.
    #[must_use]
    pub fn with_waiter_stale_after(mut self, waiter_stale_after: Duration) -> Self {
        self.waiter_stale_after = waiter_stale_after;
        self
    }

    /// Sets [`on_event`](Self::on_event), told of each fallback and return.
    #[must_use]
    pub fn with_on_event(mut self, on_event: BudgetEventHook) -> Self {
        self.on_event = Some(on_event);
        self
    }
}

impl fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisOptions")
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("retry_redis_after", &self.retry_redis_after)
            .field("idle_expiry", &self.idle_expiry)
            .field("waiter_stale_after", &self.waiter_stale_after)
            .field("on_event", &self.on_event.as_ref().map(|_| "<fn>"))
            .finish()
    }
}

/// A handle to one retry budget in Redis, cheap to clone, shared by every
/// [`Runner`](crate::runner::Runner) of this process and every process naming the same
/// budget. Creating it does no I/O; see the [module documentation](self) for the design.
///
/// ```no_run
/// use rebound_core::{BudgetConfig, MachineConfig};
/// use rebound_effects::budget::{RedisBudget, RedisOptions};
/// use rebound_effects::runner::Runner;
///
/// let url = "redis://127.0.0.1:6379/evals".parse()?;
/// let budget = RedisBudget::new(&url, BudgetConfig::default(), RedisOptions::default())?;
/// let runner = Runner::new(MachineConfig::resilient(), vec![]).budget(budget.clone());
/// # let _ = runner;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct RedisBudget {
    inner: Arc<Inner>,
}

struct Inner {
    url: RedisUrl,
    client: redis::Client,
    script: redis::Script,
    keys: [String; 13],
    /// capacity, initial, deposit per request, per success, refill per second, per answered
    /// retry: milli-tokens.
    config: [u64; 6],
    options: RedisOptions,
    fallback: SharedBudget,
    /// This process's random name in the budget: the first half of its request ids.
    owner: u64,
    connection: Mutex<Option<MultiplexedConnection>>,
    /// Held while one input is handed to the machine and its outputs executed, so outputs
    /// are executed in the order the machine gave them.
    exec: Mutex<()>,
    machine: Mutex<Driven>,
    /// Rung when the machine's next timeout may have changed.
    timer: Notify,
    /// The task holding this process's subscription to its wake-up channel.
    listener: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.listener).take() {
            task.abort();
        }
    }
}

/// The machine, and who waits for the end of each of its operations.
struct Driven {
    client: BudgetClient,
    ends: BTreeMap<OpId, oneshot::Sender<End>>,
    /// Whether the task running the machine's timeouts runs.
    timer_running: bool,
}

/// The end of an operation of the machine, for the task awaiting it.
#[derive(Debug)]
enum End {
    /// The answer, and the request to withdraw should it not be heard.
    Answer(Answer, Option<u64>),
    Noted,
    Checked(Result<RedisBudgetStats, RedisBudgetError>),
}

/// What executing the machine's outputs does, once its lock is released.
enum Todo {
    End(oneshot::Sender<End>, End),
    Do(Output),
}
impl fmt::Debug for RedisBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBudget")
            .field("url", &self.inner.url)
            .field("shared", &self.is_shared())
            .finish_non_exhaustive()
    }
}

fn milli(tokens: f64) -> u64 {
    if tokens.is_finite() && tokens > 0.0 {
        ((tokens * 1_000.0).round() as u64).min(MAX_MILLI)
    } else {
        0
    }
}

fn millis_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain values replaced whole: a panic elsewhere cannot leave them half-changed.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A random owner id: from the operating system, or (should it fail) from the clock, the
/// process id and fastrand.
fn random_owner() -> u64 {
    crate::entropy::os_u64().unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nanos ^ u64::from(std::process::id()).rotate_left(32) ^ fastrand::u64(..)
    })
}

/// What `INFO server` says of a Redis: refused when the budget cannot live there.
fn supported(info: &str) -> Result<(), RedisBudgetError> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let Some(version) = field("redis_version") else {
        return Err(malformed(&format!(
            "INFO server without redis_version: {info}"
        )));
    };
    let major: u32 = version
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if major < 5 {
        return Err(RedisBudgetError::Unsupported {
            reason: format!(
                "redis {version} is too old for the retry budget: it needs Redis 5 or later \
                 (its script writes after reading TIME)"
            ),
        });
    }
    match field("redis_mode") {
        Some("cluster") => Err(RedisBudgetError::Unsupported {
            reason: "this redis is a Redis Cluster node, which the retry budget does not \
                     support: use a standalone Redis (or a replicated master named directly)"
                .to_owned(),
        }),
        Some("sentinel") => Err(RedisBudgetError::Unsupported {
            reason: "this redis is a Sentinel, which the retry budget does not support: name \
                     the master it watches as redis://HOST:PORT/NAME"
                .to_owned(),
        }),
        _ => Ok(()),
    }
}

impl RedisBudget {
    /// A budget named by `url` with `config` (what it starts with when Redis has none of
    /// that name, and how it refills). No I/O: the first decision connects.
    pub fn new(
        url: &RedisUrl,
        config: BudgetConfig,
        options: RedisOptions,
    ) -> Result<Self, RedisBudgetError> {
        let client = redis::Client::open(url.server()).map_err(|e| RedisBudgetError::Address {
            message: e.to_string().replace(url.server(), &url.to_string()),
        })?;
        let name = url.name();
        let keys = [
            "state",
            "limits",
            "queue",
            "deadlines",
            "waiters",
            "decided",
            "answered",
            "owners",
            "mine",
            "paced",
            "sent",
            "seconds",
            "served",
        ]
        .map(|part| format!("rebound:budget:{{{name}}}:{part}"));
        let timing = ClientTiming::default()
            .with_poll_interval_ms(millis_of(options.poll_interval))
            .with_retry_redis_after_ms(millis_of(options.retry_redis_after))
            .with_waiter_stale_after_ms(millis_of(options.waiter_stale_after));
        Ok(RedisBudget {
            inner: Arc::new(Inner {
                url: url.clone(),
                client,
                script: redis::Script::new(SCRIPT),
                keys,
                config: [
                    milli(config.capacity),
                    milli(config.initial),
                    milli(config.deposit_per_request),
                    milli(config.deposit_per_success),
                    milli(config.refill_per_sec),
                    milli(config.deposit_per_answered_retry),
                ],
                options,
                fallback: SharedBudget::new(config),
                owner: random_owner(),
                connection: Mutex::new(None),
                exec: Mutex::new(()),
                machine: Mutex::new(Driven {
                    client: BudgetClient::new(timing),
                    ends: BTreeMap::new(),
                    timer_running: false,
                }),
                timer: Notify::new(),
                listener: Mutex::new(None),
            }),
        })
    }

    /// The budget's URL (credentials masked) and name.
    #[must_use]
    pub fn url(&self) -> &RedisUrl {
        &self.inner.url
    }

    /// Whether decisions go to Redis (`false`: this process fell back to its local budget).
    #[must_use]
    pub fn is_shared(&self) -> bool {
        lock(&self.inner.machine).client.is_shared()
    }

    /// The local budget this process falls back to when Redis fails.
    #[must_use]
    pub fn fallback(&self) -> &SharedBudget {
        &self.inner.fallback
    }

    /// Checks that Redis answers (one call) and can keep the budget, falling back or
    /// returning to Redis as a decision would. A command line calls it at start, so a Redis
    /// that is down is reported before the first request rather than at the first retry,
    /// and one that can never work ([`RedisBudgetError::is_permanent`]) can stop the run.
    pub async fn check(&self) -> Result<RedisBudgetStats, RedisBudgetError> {
        let (send, receive) = oneshot::channel();
        self.drive(|d, now| {
            let op = d.client.check(now);
            d.ends.insert(op, send);
        });
        match receive.await {
            Ok(End::Checked(result)) => result,
            _ => Err(RedisBudgetError::Connection {
                message: "the check was not made: no tokio runtime runs the budget's calls"
                    .to_owned(),
            }),
        }
    }

    /// The shared budget's figures, read from Redis (no fallback: an error when it does not
    /// answer).
    pub async fn stats(&self) -> Result<RedisBudgetStats, RedisBudgetError> {
        match self.call(ScriptOp::Stats, None).await? {
            ScriptReply::Stats(stats) => Ok(stats),
            other => Err(malformed(&format!("{other:?}"))),
        }
    }

    /// One raw call of the budget script, without fallback: on a connection opened first if
    /// there is none (bounded by the connect timeout), then bounded by the call timeout.
    /// `now_ms` replaces Redis's clock (tests compare the script with core's budget at
    /// chosen times); `None` uses Redis's `TIME`, as every decision of the budget does.
    pub async fn call(
        &self,
        op: ScriptOp,
        now_ms: Option<u64>,
    ) -> Result<ScriptReply, RedisBudgetError> {
        let connection = self.connection().await?;
        let timeout = self.inner.options.call_timeout;
        let result =
            tokio::time::timeout(timeout, self.call_unbounded(connection, op, now_ms)).await;
        match result {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                if matches!(e, RedisBudgetError::Connection { .. }) {
                    *lock(&self.inner.connection) = None;
                }
                Err(e)
            }
            Err(_) => Err(RedisBudgetError::Timeout {
                timeout_ms: millis_of(timeout),
            }),
        }
    }
    async fn call_unbounded(
        &self,
        mut connection: MultiplexedConnection,
        op: ScriptOp,
        now_ms: Option<u64>,
    ) -> Result<ScriptReply, RedisBudgetError> {
        let inner = &self.inner;
        let mut invocation = inner.script.prepare_invoke();
        for key in &inner.keys {
            invocation.key(key);
        }
        let (name, args) = op_args(&op, inner.owner);
        invocation
            .arg(name)
            .arg(now_ms.map(|n| n.to_string()).unwrap_or_default());
        for value in inner.config {
            invocation.arg(value);
        }
        invocation
            .arg(millis_of(inner.options.idle_expiry))
            .arg(millis_of(inner.options.waiter_stale_after))
            .arg(format!("{:016x}", inner.owner));
        for arg in args {
            invocation.arg(arg);
        }
        let value: redis::Value = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(|e| self.error_of(&e))?;
        decode(&value)
    }

    /// The shared connection, or a new one (bounded by the connect timeout) once
    /// `INFO server` says this Redis can keep the budget and the script is loaded.
    async fn connection(&self) -> Result<MultiplexedConnection, RedisBudgetError> {
        if let Some(c) = lock(&self.inner.connection).clone() {
            return Ok(c);
        }
        let timeout = self.inner.options.connect_timeout;
        match tokio::time::timeout(timeout, self.connect()).await {
            Ok(Ok(c)) => {
                *lock(&self.inner.connection) = Some(c.clone());
                Ok(c)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RedisBudgetError::ConnectTimeout {
                timeout_ms: millis_of(timeout),
            }),
        }
    }

    /// Opens a connection: connecting and its handshake, `INFO server`, and loading the
    /// script, so a call's own bound does not pay for a first `EVALSHA` that misses.
    async fn connect(&self) -> Result<MultiplexedConnection, RedisBudgetError> {
        // While it opens, the bound is ours (`connect_timeout`, around this); the client's
        // own is a backstop that must not fire first. Once open, the client's response
        // timeout is the call timeout again (a reply it gives up on drops the connection).
        let options = &self.inner.options;
        let backstop = 2 * options.connect_timeout.max(options.call_timeout);
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(backstop))
            .set_response_timeout(Some(backstop));
        let mut c = self
            .inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.error_of(&e))?;
        let info: redis::Value = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut c)
            .await
            .map_err(|e| self.error_of(&e))?;
        let info = match &info {
            redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            redis::Value::VerbatimString { text, .. } => text.clone(),
            redis::Value::SimpleString(s) => s.clone(),
            other => return Err(malformed(&format!("INFO server: {other:?}"))),
        };
        supported(&info)?;
        self.inner
            .script
            .load_async(&mut c)
            .await
            .map_err(|e| self.error_of(&e))?;
        c.set_response_timeout(options.call_timeout);
        Ok(c)
    }

    fn error_of(&self, e: &redis::RedisError) -> RedisBudgetError {
        // The client's messages name the server; make sure a password never follows.
        let message = e
            .to_string()
            .replace(self.inner.url.server(), &self.inner.url.to_string());
        if let Some((theirs, ours)) = message
            .split_once("REBOUND_SETTINGS")
            .and_then(|(_, both)| both.split_once('/'))
        {
            return RedisBudgetError::OtherSettings {
                theirs: settings_text(theirs),
                ours: settings_text(ours),
            };
        }
        let refused = match e.code() {
            Some("NOAUTH") => Some("redis asks for a password and got none"),
            Some("WRONGPASS") => Some("redis refused the user name or password"),
            _ if e.kind() == redis::ErrorKind::AuthenticationFailed => {
                Some("redis refused the user name or password")
            }
            _ => None,
        };
        if let Some(message) = refused {
            return RedisBudgetError::Authentication {
                message: message.to_owned(),
            };
        }
        match e.kind() {
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly) => {
                RedisBudgetError::ReadOnly
            }
            redis::ErrorKind::Server(
                redis::ServerErrorKind::Moved
                | redis::ServerErrorKind::Ask
                | redis::ServerErrorKind::CrossSlot
                | redis::ServerErrorKind::ClusterDown,
            ) => RedisBudgetError::Unsupported {
                reason: format!(
                    "this redis is part of a Redis Cluster ({message}), which the retry budget \
                     does not support: use a standalone Redis"
                ),
            },
            redis::ErrorKind::Server(_) | redis::ErrorKind::Extension => {
                RedisBudgetError::Script { message }
            }
            redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType => {
                RedisBudgetError::MalformedReply { reply: message }
            }
            _ => RedisBudgetError::Connection { message },
        }
    }

    /// The budget's clock: ms since the fallback budget's origin, which the machines use.
    fn now(&self) -> Millis {
        self.inner.fallback.now()
    }

    /// Hands one input to the machine (with the time), then executes what it asks for, in
    /// order: calls and the subscription on tasks of their own, answers to their waiters,
    /// notes to the local budget, events to the hook; and keeps the timer task running
    /// while the machine has a timeout.
    fn drive<R>(&self, input: impl FnOnce(&mut Driven, Millis) -> R) -> R {
        let _exec = lock(&self.inner.exec);
        let now = self.now();
        let (result, todo, start_timer) = {
            let mut driven = lock(&self.inner.machine);
            let result = input(&mut driven, now);
            let mut todo = Vec::new();
            while let Some(output) = driven.client.poll() {
                let (op, end) = match output {
                    Output::Answer {
                        op,
                        answer,
                        unheard,
                    } => (op, End::Answer(answer, unheard)),
                    Output::Noted { op } => (op, End::Noted),
                    Output::Checked { op, result } => (op, End::Checked(result)),
                    other => {
                        todo.push(Todo::Do(other));
                        continue;
                    }
                };
                if let Some(waiter) = driven.ends.remove(&op) {
                    todo.push(Todo::End(waiter, end));
                }
            }
            let start_timer = driven.client.poll_timeout().is_some() && !driven.timer_running;
            if start_timer {
                driven.timer_running = true;
            }
            (result, todo, start_timer)
        };
        for item in todo {
            match item {
                // A waiter that stopped waiting withdraws its ask itself.
                Todo::End(waiter, end) => drop(waiter.send(end)),
                Todo::Do(output) => self.execute(output),
            }
        }
        if start_timer {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(self.clone().run_timer());
            } else {
                lock(&self.inner.machine).timer_running = false;
            }
        } else {
            self.inner.timer.notify_one();
        }
        result
    }

    fn execute(&self, output: Output) {
        match output {
            Output::Call { call, op, fresh } => {
                if fresh {
                    *lock(&self.inner.connection) = None;
                }
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                let budget = self.clone();
                runtime.spawn(async move {
                    let outcome = budget.call(op, None).await;
                    budget.drive(|d, now| d.client.handle_reply(now, call, outcome));
                });
            }
            Output::Subscribe => self.subscribe(),
            Output::RecordLocally(note) => self.inner.fallback.record(note),
            Output::FellBack(error) => self.tell(&BudgetEvent::FellBack {
                budget: self.inner.url.to_string(),
                error,
            }),
            Output::Restored => self.tell(&BudgetEvent::Restored {
                budget: self.inner.url.to_string(),
            }),
            // Ends of operations are taken in `drive`; later outputs of core are not ours.
            _ => {}
        }
    }

    /// Runs the machine's timeouts (its inbox reads, its waiters' deadlines) on tokio's
    /// clock until it has none.
    async fn run_timer(self) {
        loop {
            let next = {
                let mut driven = lock(&self.inner.machine);
                match driven.client.poll_timeout() {
                    Some(next) => next,
                    None => {
                        driven.timer_running = false;
                        return;
                    }
                }
            };
            let at = self.origin() + Duration::from_millis(next.0);
            tokio::select! {
                () = tokio::time::sleep_until(at) => {
                    self.drive(|d, now| d.client.handle_timeout(now));
                }
                () = self.inner.timer.notified() => {}
            }
        }
    }

    fn tell(&self, event: &BudgetEvent) {
        if let Some(hook) = &self.inner.options.on_event {
            hook(event);
        }
    }

    /// Subscribes this process to its wake-up channel, on a task of its own (replacing one
    /// that ended).
    fn subscribe(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = runtime.spawn(listen(
            self.inner.client.clone(),
            format!("{}wake:{:016x}", self.channel_prefix(), self.inner.owner),
            self.inner.options.connect_timeout,
            Arc::downgrade(&self.inner),
        ));
        if let Some(old) = lock(&self.inner.listener).replace(task.abort_handle()) {
            old.abort();
        }
    }

    /// `rebound:budget:{NAME}:`, the prefix of the budget's keys and channels.
    fn channel_prefix(&self) -> &str {
        let state = &self.inner.keys[0];
        &state[..state.len() - "state".len()]
    }
}

/// The subscription to a process's wake-up channel: tells the machine when it is live, of
/// every message, and when it ends (or could not be made). Needs its own connection (a
/// subscribed connection runs no script), opened and subscribed within `timeout` (the
/// connect timeout). Holds the budget weakly: a budget dropped ends it.
async fn listen(client: redis::Client, channel: String, timeout: Duration, budget: Weak<Inner>) {
    use futures_util::StreamExt;
    let tell = |input: fn(&mut BudgetClient, Millis)| {
        budget.upgrade().map(|inner| {
            RedisBudget { inner }.drive(|d, now| input(&mut d.client, now));
        })
    };
    let subscribed = tokio::time::timeout(timeout, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    })
    .await;
    if let Ok(Ok(pubsub)) = subscribed {
        if tell(|c, now| c.handle_subscription(now, true)).is_none() {
            return;
        }
        let mut messages = pubsub.into_on_message();
        while messages.next().await.is_some() {
            if tell(BudgetClient::handle_wake).is_none() {
                return;
            }
        }
    }
    tell(|c, now| c.handle_subscription(now, false));
}

/// An ask on its way or waiting, with the way its answer comes: withdrawn when its wait
/// ends without the answer heard (a canceled run), so Redis drops its place or pays back a
/// token granted to it — also when the grant had already come but was not yet read.
struct Withdraw<'a> {
    budget: &'a RedisBudget,
    op: OpId,
    answer: oneshot::Receiver<End>,
    armed: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.armed {
            let op = self.op;
            let answer = &mut self.answer;
            // Under the budget's lock: no answer is sent meanwhile.
            self.budget.drive(|d, now| {
                d.ends.remove(&op);
                d.client.withdraw(now, op);
                if let Ok(End::Answer(_, Some(request))) = answer.try_recv() {
                    d.client.unheard(now, request);
                }
            });
        }
    }
}

fn malformed(reply: &str) -> RedisBudgetError {
    RedisBudgetError::malformed(reply)
}
/// A request's id in Redis: the owner's random id, then the owner's own number for it.
fn request_id(owner: u64, request: u64) -> String {
    format!("{owner:016x}{request:016x}")
}

fn op_args(op: &ScriptOp, owner: u64) -> (&'static str, Vec<String>) {
    match op {
        ScriptOp::Ask {
            request,
            kind,
            target,
            wait_ms,
            age_ms,
        } => {
            let kind = match kind {
                PermitKind::FirstAttempt => "first",
                PermitKind::Hinted => "hinted",
                PermitKind::Charged => "charged",
            };
            (
                "ask",
                vec![
                    request_id(owner, *request),
                    kind.to_owned(),
                    target.to_string(),
                    (*wait_ms).min(MAX_MILLI).to_string(),
                    (*age_ms).min(MAX_MILLI).to_string(),
                ],
            )
        }
        ScriptOp::Inbox { acks } => (
            "inbox",
            acks.iter().map(|r| request_id(owner, *r)).collect(),
        ),
        ScriptOp::Poll { requests } => (
            "poll",
            requests.iter().map(|r| request_id(owner, *r)).collect(),
        ),
        ScriptOp::Cancel { requests } => (
            "cancel",
            requests.iter().map(|r| request_id(owner, *r)).collect(),
        ),
        ScriptOp::Succeeded { target } => ("success", vec![target.to_string()]),
        ScriptOp::RetryAnswered { target } => ("answered", vec![target.to_string()]),
        ScriptOp::RateLimited { target, for_ms } => (
            "limited",
            vec![target.to_string(), (*for_ms).min(MAX_MILLI).to_string()],
        ),
        ScriptOp::Stats => ("stats", vec![]),
    }
}

/// Reads the script's reply; anything unexpected is a [`RedisBudgetError::MalformedReply`].
fn decode(value: &redis::Value) -> Result<ScriptReply, RedisBudgetError> {
    let bad = || malformed(&format!("{value:?}"));
    let redis::Value::Array(items) = value else {
        return Err(bad());
    };
    let text = |item: Option<&redis::Value>| -> Result<String, RedisBudgetError> {
        match item {
            Some(redis::Value::BulkString(bytes)) => std::str::from_utf8(bytes)
                .map(str::to_owned)
                .map_err(|_| bad()),
            Some(redis::Value::SimpleString(s)) => Ok(s.clone()),
            _ => Err(bad()),
        }
    };
    let word = text(items.first())?;
    let number = |at: usize| -> Result<u64, RedisBudgetError> {
        match items.get(at) {
            Some(redis::Value::Int(n)) => u64::try_from(*n).map_err(|_| bad()),
            _ => Err(bad()),
        }
    };
    let code = |a: &str| -> Result<PollAnswer, RedisBudgetError> {
        Ok(match a {
            "g" => PollAnswer::Granted,
            "d" => PollAnswer::Denied,
            "q" => PollAnswer::Queued,
            "x" => PollAnswer::Gone,
            _ => PollAnswer::Wait(
                a.strip_prefix('w')
                    .and_then(|ms| ms.parse().ok())
                    .ok_or_else(bad)?,
            ),
        })
    };
    let reply = match (word.as_str(), items.len()) {
        ("granted", 1) => ScriptReply::Granted,
        ("denied", 1) => ScriptReply::Denied,
        ("ok", 1) => ScriptReply::Ok,
        ("wait", 2) => ScriptReply::Wait(number(1)?),
        ("queued", 2) => ScriptReply::Queued {
            retry_in_ms: number(1)?,
        },
        ("polled", n) if n >= 2 => {
            let answers = items[2..]
                .iter()
                .map(|item| code(&text(Some(item))?))
                .collect::<Result<Vec<_>, RedisBudgetError>>()?;
            ScriptReply::Polled {
                retry_in_ms: number(1)?,
                answers,
            }
        }
        ("inbox", n) if n >= 3 && n % 2 == 1 => {
            let answers = items[3..]
                .chunks(2)
                .map(|pair| {
                    let request =
                        u64::from_str_radix(&text(pair.first())?, 16).map_err(|_| bad())?;
                    Ok((request, code(&text(pair.get(1))?)?))
                })
                .collect::<Result<Vec<_>, RedisBudgetError>>()?;
            ScriptReply::Inbox {
                retry_in_ms: number(1)?,
                waiting: number(2)?,
                answers,
            }
        }
        ("stats", 8) => ScriptReply::Stats(RedisBudgetStats {
            balance_milli: number(1)?,
            stats: BudgetStats {
                granted: number(2)?,
                denied: number(3)?,
                queued: number(4)?,
                deposited_milli: number(5)?,
            },
            waiting: number(6)?,
            now_ms: number(7)?,
        }),
        _ => return Err(bad()),
    };
    Ok(reply)
}

#[async_trait]
impl BudgetStore for RedisBudget {
    fn origin(&self) -> Instant {
        self.inner.fallback.origin()
    }

    async fn acquire(&self, ask: PermitAsk) -> PermitDecision {
        let (send, receive) = oneshot::channel();
        let op = self.drive(|d, now| {
            let op = d.client.ask(now, ask);
            d.ends.insert(op, send);
            op
        });
        let mut withdraw = Withdraw {
            budget: self,
            op,
            answer: receive,
            armed: true,
        };
        let end = (&mut withdraw.answer).await;
        withdraw.armed = false;
        match end {
            Ok(End::Answer(Answer::Decided(decision), _)) => decision,
            _ => self.inner.fallback.acquire(ask).await,
        }
    }

    /// The local budget's tokens while this process decides locally (fallen back or
    /// refused); `None` while Redis decides, since its balance is Redis's to tell (one call:
    /// [`RedisBudget::stats`]).
    fn tokens(&self) -> Option<f64> {
        (!self.is_shared()).then(|| self.inner.fallback.balance())
    }

    async fn record(&self, note: BudgetNote) {
        let (send, receive) = oneshot::channel();
        self.drive(|d, now| {
            let op = d.client.note(now, note);
            d.ends.insert(op, send);
        });
        let _ = receive.await;
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> redis::Value {
        redis::Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn redis_5_and_later_standalone_is_supported_and_the_rest_refused_saying_why() {
        let info = |version: &str, mode: &str| {
            format!("# Server\r\nredis_version:{version}\r\nredis_mode:{mode}\r\nos:Linux\r\n")
        };
        for ok in [info("5.0.0", "standalone"), info("7.2.4", "standalone")] {
            assert_eq!(supported(&ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            (info("4.0.14", "standalone"), "Redis 5 or later"),
            (info("3.2.1", "standalone"), "Redis 5 or later"),
            (info("7.0.15", "cluster"), "Redis Cluster"),
            (info("7.0.15", "sentinel"), "Sentinel"),
        ] {
            match supported(&bad) {
                Err(RedisBudgetError::Unsupported { reason }) => {
                    assert!(reason.contains(says), "{reason}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(matches!(
            supported("42"),
            Err(RedisBudgetError::MalformedReply { .. })
        ));
    }

    #[test]
    fn replies_decode_and_anything_else_is_a_typed_error() {
        use redis::Value::{Array, Int, Nil};
        assert_eq!(
            decode(&Array(vec![bulk("granted")])),
            Ok(ScriptReply::Granted)
        );
        assert_eq!(
            decode(&Array(vec![bulk("wait"), Int(1500)])),
            Ok(ScriptReply::Wait(1500))
        );
        assert_eq!(
            decode(&Array(vec![bulk("queued"), Int(40)])),
            Ok(ScriptReply::Queued { retry_in_ms: 40 })
        );
        assert_eq!(
            decode(&Array(vec![
                bulk("polled"),
                Int(9),
                bulk("g"),
                bulk("d"),
                bulk("w1500"),
                bulk("q"),
                bulk("x")
            ])),
            Ok(ScriptReply::Polled {
                retry_in_ms: 9,
                answers: vec![
                    PollAnswer::Granted,
                    PollAnswer::Denied,
                    PollAnswer::Wait(1500),
                    PollAnswer::Queued,
                    PollAnswer::Gone
                ]
            })
        );
        for hostile in [
            Nil,
            Int(1),
            Array(vec![]),
            Array(vec![bulk("granted"), Int(1)]),
            Array(vec![bulk("wait"), Int(-5)]),
            Array(vec![bulk("wait"), bulk("soon")]),
            Array(vec![bulk("queued")]),
            Array(vec![bulk("polled"), Int(1), bulk("w-3")]),
            Array(vec![bulk("polled"), Int(1), Int(2)]),
            Array(vec![redis::Value::BulkString(vec![0xff, 0xfe])]),
            Array(vec![bulk("stats"), Int(1)]),
            Array(vec![bulk(&"x".repeat(10_000))]),
        ] {
            match decode(&hostile) {
                Err(RedisBudgetError::MalformedReply { reply }) => {
                    assert!(reply.len() <= 204, "abridged: {}", reply.len());
                }
                other => panic!("{hostile:?} decoded as {other:?}"),
            }
        }
    }
}
