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
//! ([`BudgetStore::origin`]).
//!
//! # The queue across processes: tickets polled in Redis
//!
//! In one process a waiting retry is woken the moment a deposit pays for it. Across
//! processes that would need Redis to call back (pub/sub, keyspace notifications), which adds
//! a second connection and a failure mode per process for little gain. Instead the queue
//! lives in Redis as core's queue does in memory — a sorted set of tickets ordered by the age
//! of their request (oldest turn first, ties in order of asking) — and each decision the
//! script makes settles it exactly as core does: a deposit from any process grants the
//! head of the queue at once, in Redis, and a waiter whose deadline came is denied. The
//! waiting process learns its answer by polling its ticket: every `poll_interval` (50 ms by
//! default), sooner when the script says refill or its deadline decides it earlier. So
//! tokens go to the oldest request first, as in one process; the differences are that a
//! granted retry may start up to one poll interval later, and that a request's age is read
//! on its process's clock just before the call, so an ask that reaches Redis late (a busy
//! process, a slow network) counts as younger by that delay. A poll also says "I am still
//! here": a ticket not polled for `waiter_stale_after` (its process died or was killed) leaves
//! the queue, as a canceled waiter does in core, and a dropped wait cancels its ticket.
//!
//! # Keys
//!
//! Five keys per budget name, `rebound:budget:{NAME}:state|limits|queue|waiters|decided`, one
//! hash tag so they live on one Redis Cluster slot. They hold counters, milli-tokens,
//! Redis times, target indexes and ticket numbers: no prompt, key, URL or host name. All
//! expire together after `idle_expiry` (10 minutes) without a call; the next call starts a
//! fresh budget with its initial tokens. Each call carries the caller's [`BudgetConfig`]:
//! processes sharing a name should share a configuration.
//!
//! # When Redis fails
//!
//! Agents never wait on Redis. Every call is bounded (`call_timeout`, 50 ms, connecting
//! included). A connection error, a timeout, a script error or a reply the budget does not
//! understand sends this process to a local budget ([`SharedBudget`], same configuration, on
//! the same clock as the machines): a [`BudgetEvent::FellBack`] is reported once, and
//! decisions are local from then on. Every `retry_redis_after` (1 s) the next decision tries
//! Redis again; when it answers, a [`BudgetEvent::Restored`] is reported and decisions are
//! shared again. A retry waiting in the Redis queue when Redis fails asks the local budget
//! instead, with the same deadline. Rate limits are also noted locally, so a process that
//! falls back still honours the window it heard of.

use super::{BudgetStore, RedisUrl, SharedBudget};
use async_trait::async_trait;
use rebound_core::{
    BudgetConfig, BudgetNote, BudgetStats, Millis, PermitAsk, PermitDecision, PermitKind,
};
use redis::aio::MultiplexedConnection;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// The script: core's budget rules for Redis (see the module documentation).
pub const SCRIPT: &str = include_str!("redis.lua");

/// A retry deadline the local clock has passed by this much is over whatever Redis says:
/// a safety net for a Redis whose clock runs slow.
const DEADLINE_GRACE_MS: u64 = 1_000;

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
        /// The budget (its URL, password masked).
        budget: String,
        /// What failed.
        error: RedisBudgetError,
    },
    /// Redis answered again: the shared budget decides again.
    Restored {
        /// The budget (its URL, password masked).
        budget: String,
    },
}

impl fmt::Display for BudgetEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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

/// What went wrong between this process and the budget in Redis. None of them stops a run:
/// each sends the process to its local budget (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisBudgetError {
    /// The client could not be set up from the URL.
    #[error("bad redis address: {message}")]
    Address {
        /// The client's reason (never the password).
        message: String,
    },
    /// No connection, or it broke.
    #[error("cannot reach redis: {message}")]
    Connection {
        /// The client's reason.
        message: String,
    },
    /// No answer within the call timeout.
    #[error("redis did not answer within {timeout_ms} ms")]
    Timeout {
        /// The bound that passed.
        timeout_ms: u64,
    },
    /// Redis answered with an error (the script failed, a command was refused).
    #[error("redis refused the budget script: {message}")]
    Script {
        /// Redis's error.
        message: String,
    },
    /// Redis answered something the budget does not understand.
    #[error("malformed reply from the budget script: {reply}")]
    MalformedReply {
        /// The reply, abridged.
        reply: String,
    },
}

/// How a [`RedisBudget`] talks to Redis. The defaults suit a Redis on the same network.
#[derive(Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The longest one call may take, connecting included (default 50 ms). Past it the call
    /// counts as a failure and the process decides locally.
    pub call_timeout: Duration,
    /// How often a retry waiting in the queue asks whether it was granted (default 50 ms).
    pub poll_interval: Duration,
    /// How long a process that fell back decides locally before trying Redis again
    /// (default 1 s).
    pub retry_redis_after: Duration,
    /// How long the budget's keys live without a call (default 10 minutes).
    pub idle_expiry: Duration,
    /// A queued retry not polled for this long has left (its process died), and so has an
    /// answer nobody collected (default 2 s).
    pub waiter_stale_after: Duration,
    /// Told when the budget falls back to a local one and when it returns to Redis.
    pub on_event: Option<BudgetEventHook>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            call_timeout: Duration::from_millis(50),
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
            .field("poll_interval", &self.poll_interval)
            .field("retry_redis_after", &self.retry_redis_after)
            .field("idle_expiry", &self.idle_expiry)
            .field("waiter_stale_after", &self.waiter_stale_after)
            .field("on_event", &self.on_event.as_ref().map(|_| "<fn>"))
            .finish()
    }
}

/// One operation of the budget script, with times relative to the script's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptOp {
    /// Ask for a permit.
    Ask {
        /// What for.
        kind: PermitKind,
        /// The target asked for.
        target: usize,
        /// How long a charged permit may wait (its deadline minus now).
        wait_ms: u64,
        /// How old the request is (now minus its `since`).
        age_ms: u64,
    },
    /// Ask whether a queued ticket was decided (and say its asker is still waiting).
    Poll {
        /// The ticket.
        ticket: u64,
    },
    /// Withdraw a queued ticket.
    Cancel {
        /// The ticket.
        ticket: u64,
    },
    /// A request to `target` succeeded.
    Succeeded {
        /// The target.
        target: usize,
    },
    /// `target` is rate-limited for `for_ms` from now.
    RateLimited {
        /// The target.
        target: usize,
        /// How long.
        for_ms: u64,
    },
    /// Read the budget's figures.
    Stats,
}

/// The script's answer to a [`ScriptOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptReply {
    /// Go ahead.
    Granted,
    /// Do not retry.
    Denied,
    /// The target is rate-limited for this many more ms.
    Wait(u64),
    /// Waiting in the queue under `ticket`: poll again within `retry_in_ms`.
    Queued {
        /// The ticket to poll.
        ticket: u64,
        /// When the script expects the answer may change, at the latest.
        retry_in_ms: u64,
    },
    /// The ticket polled is not known (it expired, or Redis restarted empty).
    Gone,
    /// Done.
    Ok,
    /// The budget's figures.
    Stats(RedisBudgetStats),
}

/// What the budget in Redis holds and did, shared by every process using it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedisBudgetStats {
    /// Milli-tokens in the bucket.
    pub balance_milli: u64,
    /// The counters, as core's budget keeps them.
    pub stats: BudgetStats,
    /// Charged permits waiting in the queue.
    pub waiting: u64,
    /// The budget's clock (Redis's `TIME`, in ms).
    pub now_ms: u64,
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
    keys: [String; 5],
    /// capacity, initial, deposit per request, per success, refill per second: milli-tokens.
    config: [u64; 5],
    options: RedisOptions,
    fallback: SharedBudget,
    connection: Mutex<Option<MultiplexedConnection>>,
    health: Mutex<Health>,
}

#[derive(Debug, Clone, Copy)]
enum Health {
    Shared,
    Local { next_try: Instant },
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
        let keys = ["state", "limits", "queue", "waiters", "decided"]
            .map(|part| format!("rebound:budget:{{{name}}}:{part}"));
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
                ],
                options,
                fallback: SharedBudget::new(config),
                connection: Mutex::new(None),
                health: Mutex::new(Health::Shared),
            }),
        })
    }

    /// The budget's URL (password masked) and name.
    #[must_use]
    pub fn url(&self) -> &RedisUrl {
        &self.inner.url
    }

    /// Whether decisions go to Redis (`false`: this process fell back to its local budget).
    #[must_use]
    pub fn is_shared(&self) -> bool {
        matches!(*lock(&self.inner.health), Health::Shared)
    }

    /// The local budget this process falls back to when Redis fails.
    #[must_use]
    pub fn fallback(&self) -> &SharedBudget {
        &self.inner.fallback
    }

    /// Checks that Redis answers (one call), falling back or returning to Redis as a
    /// decision would. A command line calls it at start, so a Redis that is down is reported
    /// before the first request rather than at the first retry.
    pub async fn check(&self) -> Result<RedisBudgetStats, RedisBudgetError> {
        let result = match self.call(ScriptOp::Stats, None).await {
            Ok(ScriptReply::Stats(stats)) => Ok(stats),
            Ok(other) => Err(malformed(&format!("{other:?}"))),
            Err(e) => Err(e),
        };
        match &result {
            Ok(_) => self.succeeded(),
            Err(e) => self.failed(e.clone()),
        }
        result
    }

    /// The shared budget's figures, read from Redis (no fallback: an error when it does not
    /// answer).
    pub async fn stats(&self) -> Result<RedisBudgetStats, RedisBudgetError> {
        match self.call(ScriptOp::Stats, None).await? {
            ScriptReply::Stats(stats) => Ok(stats),
            other => Err(malformed(&format!("{other:?}"))),
        }
    }

    /// One raw call of the budget script, bounded by the call timeout, without fallback.
    /// `now_ms` replaces Redis's clock (tests compare the script with core's budget at
    /// chosen times); `None` uses Redis's `TIME`, as every decision of the budget does.
    pub async fn call(
        &self,
        op: ScriptOp,
        now_ms: Option<u64>,
    ) -> Result<ScriptReply, RedisBudgetError> {
        let timeout = self.inner.options.call_timeout;
        let result = tokio::time::timeout(timeout, self.call_unbounded(op, now_ms)).await;
        match result {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => {
                if matches!(e, RedisBudgetError::Connection { .. }) {
                    *lock(&self.inner.connection) = None;
                }
                Err(e)
            }
            Err(_) => {
                // The connection may be stuck behind a slow command: start afresh.
                *lock(&self.inner.connection) = None;
                Err(RedisBudgetError::Timeout {
                    timeout_ms: millis_of(timeout),
                })
            }
        }
    }

    async fn call_unbounded(
        &self,
        op: ScriptOp,
        now_ms: Option<u64>,
    ) -> Result<ScriptReply, RedisBudgetError> {
        let mut connection = self.connection().await?;
        let inner = &self.inner;
        let mut invocation = inner.script.prepare_invoke();
        for key in &inner.keys {
            invocation.key(key);
        }
        let (name, args) = op_args(op);
        invocation
            .arg(name)
            .arg(now_ms.map(|n| n.to_string()).unwrap_or_default());
        for value in inner.config {
            invocation.arg(value);
        }
        invocation
            .arg(millis_of(inner.options.idle_expiry))
            .arg(millis_of(inner.options.waiter_stale_after));
        for arg in args {
            invocation.arg(arg);
        }
        let value: redis::Value = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(|e| self.error_of(&e))?;
        decode(&value)
    }

    async fn connection(&self) -> Result<MultiplexedConnection, RedisBudgetError> {
        if let Some(c) = lock(&self.inner.connection).clone() {
            return Ok(c);
        }
        let timeout = Some(self.inner.options.call_timeout);
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout);
        let c = self
            .inner
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| self.error_of(&e))?;
        *lock(&self.inner.connection) = Some(c.clone());
        Ok(c)
    }

    fn error_of(&self, e: &redis::RedisError) -> RedisBudgetError {
        // The client's messages name the server; make sure a password never follows.
        let message = e
            .to_string()
            .replace(self.inner.url.server(), &self.inner.url.to_string());
        match e.kind() {
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

    /// Whether this decision should try Redis: always while shared; once per
    /// `retry_redis_after` while fallen back.
    fn try_redis(&self) -> bool {
        let mut health = lock(&self.inner.health);
        match *health {
            Health::Shared => true,
            Health::Local { next_try } => {
                let now = Instant::now();
                if now < next_try {
                    return false;
                }
                *health = Health::Local {
                    next_try: now + self.inner.options.retry_redis_after,
                };
                true
            }
        }
    }

    fn failed(&self, error: RedisBudgetError) {
        let next_try = Instant::now() + self.inner.options.retry_redis_after;
        let was = std::mem::replace(&mut *lock(&self.inner.health), Health::Local { next_try });
        if matches!(was, Health::Shared) {
            self.tell(&BudgetEvent::FellBack {
                budget: self.inner.url.to_string(),
                error,
            });
        }
    }

    fn succeeded(&self) {
        let was = std::mem::replace(&mut *lock(&self.inner.health), Health::Shared);
        if matches!(was, Health::Local { .. }) {
            self.tell(&BudgetEvent::Restored {
                budget: self.inner.url.to_string(),
            });
        }
    }

    fn tell(&self, event: &BudgetEvent) {
        if let Some(hook) = &self.inner.options.on_event {
            hook(event);
        }
    }

    /// Asks Redis, polling a queued ticket until it is decided. `None`: Redis failed (the
    /// failure is recorded), decide locally.
    async fn acquire_shared(&self, ask: PermitAsk) -> Option<PermitDecision> {
        let mut queued: Option<Waiting<'_>> = None;
        let mut retry_in_ms = 0;
        loop {
            let now = self.now();
            let op = match &queued {
                None => ScriptOp::Ask {
                    kind: ask.kind,
                    target: ask.target,
                    wait_ms: ask.deadline.since(now),
                    age_ms: now.since(ask.since),
                },
                Some(waiting) => {
                    if now > ask.deadline.plus(DEADLINE_GRACE_MS) {
                        // The ticket is withdrawn as `waiting` drops.
                        return Some(PermitDecision::Denied);
                    }
                    let pause = retry_in_ms
                        .min(millis_of(self.inner.options.poll_interval))
                        .max(1);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    ScriptOp::Poll {
                        ticket: waiting.ticket,
                    }
                }
            };
            let reply = match self.call(op, None).await {
                Ok(reply) => reply,
                Err(e) => {
                    if let Some(waiting) = queued.as_mut() {
                        // Redis is failing: nobody to withdraw the ticket from.
                        waiting.withdraw = false;
                    }
                    self.failed(e);
                    return None;
                }
            };
            let now = self.now();
            let decided = match reply {
                ScriptReply::Granted => PermitDecision::Granted,
                ScriptReply::Denied => PermitDecision::Denied,
                ScriptReply::Wait(ms) => PermitDecision::WaitUntil(now.plus(ms)),
                ScriptReply::Queued {
                    ticket,
                    retry_in_ms: next,
                } if ask.kind == PermitKind::Charged => {
                    self.succeeded();
                    retry_in_ms = next;
                    match &queued {
                        Some(waiting) if waiting.ticket == ticket => {}
                        _ => {
                            queued = Some(Waiting {
                                budget: self,
                                ticket,
                                withdraw: true,
                            });
                        }
                    }
                    continue;
                }
                // Redis forgot the ticket (restarted empty, or the ticket went stale): ask
                // again, as a newcomer with the same request age.
                ScriptReply::Gone if queued.is_some() => {
                    if let Some(mut waiting) = queued.take() {
                        waiting.withdraw = false;
                    }
                    self.succeeded();
                    continue;
                }
                other => {
                    self.failed(malformed(&format!("{other:?}")));
                    return None;
                }
            };
            if let Some(mut waiting) = queued.take() {
                waiting.withdraw = false;
            }
            self.succeeded();
            return Some(decided);
        }
    }
}

/// A ticket waiting in Redis's queue: withdrawn when its wait is dropped (canceled run).
struct Waiting<'a> {
    budget: &'a RedisBudget,
    ticket: u64,
    withdraw: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.withdraw {
            return;
        }
        // Best effort, off the dropping task: a ticket left behind goes stale anyway.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let budget = self.budget.clone();
            let ticket = self.ticket;
            runtime.spawn(async move {
                let _ = budget.call(ScriptOp::Cancel { ticket }, None).await;
            });
        }
    }
}

fn malformed(reply: &str) -> RedisBudgetError {
    let mut reply = reply.to_owned();
    if reply.len() > 200 {
        let mut end = 200;
        while !reply.is_char_boundary(end) {
            end -= 1;
        }
        reply.truncate(end);
        reply.push('…');
    }
    RedisBudgetError::MalformedReply { reply }
}

fn op_args(op: ScriptOp) -> (&'static str, Vec<String>) {
    match op {
        ScriptOp::Ask {
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
                    kind.to_owned(),
                    target.to_string(),
                    wait_ms.min(MAX_MILLI).to_string(),
                    age_ms.min(MAX_MILLI).to_string(),
                ],
            )
        }
        ScriptOp::Poll { ticket } => ("poll", vec![ticket.to_string()]),
        ScriptOp::Cancel { ticket } => ("cancel", vec![ticket.to_string()]),
        ScriptOp::Succeeded { target } => ("success", vec![target.to_string()]),
        ScriptOp::RateLimited { target, for_ms } => (
            "limited",
            vec![target.to_string(), for_ms.min(MAX_MILLI).to_string()],
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
    let word = match items.first() {
        Some(redis::Value::BulkString(bytes)) => std::str::from_utf8(bytes).map_err(|_| bad())?,
        Some(redis::Value::SimpleString(s)) => s.as_str(),
        _ => return Err(bad()),
    };
    let number = |at: usize| -> Result<u64, RedisBudgetError> {
        match items.get(at) {
            Some(redis::Value::Int(n)) => u64::try_from(*n).map_err(|_| bad()),
            _ => Err(bad()),
        }
    };
    let reply = match (word, items.len()) {
        ("granted", 1) => ScriptReply::Granted,
        ("denied", 1) => ScriptReply::Denied,
        ("gone", 1) => ScriptReply::Gone,
        ("ok", 1) => ScriptReply::Ok,
        ("wait", 2) => ScriptReply::Wait(number(1)?),
        ("queued", 3) => ScriptReply::Queued {
            ticket: number(1)?,
            retry_in_ms: number(2)?,
        },
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
        if self.try_redis() {
            if let Some(decision) = self.acquire_shared(ask).await {
                return decision;
            }
        }
        self.inner.fallback.acquire(ask).await
    }

    async fn record(&self, note: BudgetNote) {
        if let BudgetNote::RateLimited { .. } = note {
            // Also here, so a fall back keeps honouring the window.
            self.inner.fallback.record(note);
        }
        if !self.try_redis() {
            if let BudgetNote::Succeeded { .. } = note {
                self.inner.fallback.record(note);
            }
            return;
        }
        let now = self.now();
        let op = match note {
            BudgetNote::Succeeded { target } => ScriptOp::Succeeded { target },
            BudgetNote::RateLimited { target, until } => ScriptOp::RateLimited {
                target,
                for_ms: until.since(now),
            },
        };
        match self.call(op, None).await {
            Ok(ScriptReply::Ok) => self.succeeded(),
            other => {
                self.failed(match other {
                    Err(e) => e,
                    Ok(reply) => malformed(&format!("{reply:?}")),
                });
                if let BudgetNote::Succeeded { .. } = note {
                    self.inner.fallback.record(note);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> redis::Value {
        redis::Value::BulkString(s.as_bytes().to_vec())
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
            decode(&Array(vec![bulk("queued"), Int(7), Int(40)])),
            Ok(ScriptReply::Queued {
                ticket: 7,
                retry_in_ms: 40
            })
        );
        for hostile in [
            Nil,
            Int(1),
            Array(vec![]),
            Array(vec![bulk("granted"), Int(1)]),
            Array(vec![bulk("wait"), Int(-5)]),
            Array(vec![bulk("wait"), bulk("soon")]),
            Array(vec![bulk("queued"), Int(1)]),
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
