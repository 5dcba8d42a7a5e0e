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

use super::{BudgetStore, RedisUrl, SharedBudget};
use async_trait::async_trait;
use rebound_core::{
    BudgetConfig, BudgetNote, BudgetStats, Millis, PermitAsk, PermitDecision, PermitKind,
};
use redis::aio::MultiplexedConnection;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// The script: core's budget rules for Redis (see the module documentation).
pub const SCRIPT: &str = include_str!("redis.lua");

/// A retry deadline the local clock has passed by this much is over whatever Redis says:
/// a safety net for a Redis whose clock runs slow, or that took a real pause of the whole
/// fleet for a step of its clock (see the module documentation).
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
    /// Redis refused this process's credentials: none where Redis asks for a password
    /// (`NOAUTH`), or a wrong user name or password (`WRONGPASS`, a refused `AUTH`). Asked
    /// again every `retry_redis_after`, in case the server's password changes.
    #[error("authentication failed: {message}")]
    Authentication {
        /// What Redis refused (never the password).
        message: String,
    },
    /// The Redis named is a read-only replica (`READONLY`): the budget's script writes.
    /// Asked again every `retry_redis_after`, in case a failover promotes it.
    #[error("read-only replica: this redis is a replica and the budget writes: name its master")]
    ReadOnly,
    /// No connection opened within the connect timeout (connecting, the handshake and
    /// reading what this Redis is).
    #[error("no connection to redis within {timeout_ms} ms")]
    ConnectTimeout {
        /// The bound that passed.
        timeout_ms: u64,
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
    /// This Redis cannot keep the budget: a Redis Cluster, a Sentinel, or a version before
    /// 5. Not retried: the process decides locally for the rest of its life.
    #[error("{reason}")]
    Unsupported {
        /// What it is and what to do instead.
        reason: String,
    },
    /// The budget in Redis was made with other settings than this process's: processes
    /// sharing a budget must share its settings. Not retried, as [`Self::Unsupported`].
    #[error(
        "the budget in redis has other settings ({theirs}) than this process ({ours}): \
         processes sharing a budget must share its settings, or name another budget"
    )]
    OtherSettings {
        /// The budget's, as kept in Redis.
        theirs: String,
        /// This process's.
        ours: String,
    },
}

impl RedisBudgetError {
    /// Whether asking again cannot help: this Redis cannot keep the budget, or the budget
    /// has other settings. The process decides locally for the rest of its life, and a
    /// command line stops at start.
    #[must_use]
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            RedisBudgetError::Unsupported { .. } | RedisBudgetError::OtherSettings { .. }
        )
    }

    /// Whether Redis answered but refused this process (its credentials, or a read-only
    /// replica): not an outage that ends by itself but a setting to fix, although Redis is
    /// asked again every `retry_redis_after` in case it changes.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            RedisBudgetError::Authentication { .. } | RedisBudgetError::ReadOnly
        )
    }

    /// A short stable name of what went wrong, for programs (the `error_kind` of
    /// `rebound run`'s `budget_fallback` event): `address`, `unreachable`,
    /// `authentication`, `read_only`, `connect_timeout`, `timeout`, `script`,
    /// `malformed_reply`, `unsupported`, `other_settings`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            RedisBudgetError::Address { .. } => "address",
            RedisBudgetError::Connection { .. } => "unreachable",
            RedisBudgetError::Authentication { .. } => "authentication",
            RedisBudgetError::ReadOnly => "read_only",
            RedisBudgetError::ConnectTimeout { .. } => "connect_timeout",
            RedisBudgetError::Timeout { .. } => "timeout",
            RedisBudgetError::Script { .. } => "script",
            RedisBudgetError::MalformedReply { .. } => "malformed_reply",
            RedisBudgetError::Unsupported { .. } => "unsupported",
            RedisBudgetError::OtherSettings { .. } => "other_settings",
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

/// One operation of the budget script, with times relative to the script's clock. Requests
/// are named by a number the caller chooses, unique among its own asks; the script sees it
/// prefixed with the caller's random owner id.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptOp {
    /// Ask for a permit. Asking again under the same `request` reads the answer already
    /// decided (or the place already taken) instead of deciding again.
    Ask {
        /// Names this ask.
        request: u64,
        /// What for.
        kind: PermitKind,
        /// The target asked for.
        target: usize,
        /// How long a charged permit may wait (its deadline minus now).
        wait_ms: u64,
        /// How old the request is (now minus its `since`).
        age_ms: u64,
    },
    /// Read this process's answers from the queue (and say it is still waiting), after
    /// acknowledging those it got from the previous read.
    Inbox {
        /// Requests whose answers this process got: forgotten now.
        acks: Vec<u64>,
    },
    /// Ask whether queued requests were decided, one by one (and say their process is still
    /// waiting).
    Poll {
        /// The requests, at most [`POLL_BATCH`].
        requests: Vec<u64>,
    },
    /// Withdraw requests: a queued one leaves the queue; a charged permit granted to one but
    /// never used is paid back.
    Cancel {
        /// The requests.
        requests: Vec<u64>,
    },
    /// A request to `target` succeeded.
    Succeeded {
        /// The target.
        target: usize,
    },
    /// A retry of a request to `target` is being answered (once a request).
    RetryAnswered {
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

/// The most requests one [`ScriptOp::Poll`] carries (Redis's Lua unpacks at most 8,000
/// values; a process with more waiters polls in several calls).
pub const POLL_BATCH: usize = 1_000;

/// The script's answer to a [`ScriptOp`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptReply {
    /// Go ahead.
    Granted,
    /// Do not retry.
    Denied,
    /// The target is rate-limited for this many more ms.
    Wait(u64),
    /// Waiting in the queue: poll within `retry_in_ms`.
    Queued {
        /// When the script expects the answer may change, at the latest.
        retry_in_ms: u64,
    },
    /// This process's requests still waiting, and its answers not yet acknowledged.
    Inbox {
        /// When the script expects an answer may change, at the latest.
        retry_in_ms: u64,
        /// How many of this process's requests wait in the queue.
        waiting: u64,
        /// Answered requests (never [`PollAnswer::Queued`]).
        answers: Vec<(u64, PollAnswer)>,
    },
    /// The answers of the requests polled, in the order polled.
    Polled {
        /// When the script expects an answer may change, at the latest.
        retry_in_ms: u64,
        /// One per request polled.
        answers: Vec<PollAnswer>,
    },
    /// Done.
    Ok,
    /// The budget's figures.
    Stats(RedisBudgetStats),
}

/// What a poll says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollAnswer {
    /// Granted.
    Granted,
    /// Denied.
    Denied,
    /// The target is rate-limited for this many more ms.
    Wait(u64),
    /// Still waiting.
    Queued,
    /// Not known here (it went stale, or Redis restarted empty): ask again.
    Gone,
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
    /// The budget's clock (Redis's `TIME`, never going back, in ms).
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
    keys: [String; 13],
    /// capacity, initial, deposit per request, per success, refill per second, per answered
    /// retry: milli-tokens.
    config: [u64; 6],
    options: RedisOptions,
    fallback: SharedBudget,
    /// This process's random name in the budget: the first half of its request ids.
    owner: u64,
    next_request: AtomicU64,
    connection: Mutex<Option<MultiplexedConnection>>,
    /// Calls that timed out since the last answer (two in a row: a new connection).
    timeouts_in_row: AtomicU64,
    health: Mutex<Health>,
    waiters: Mutex<Waiters>,
    /// Requests to withdraw once Redis answers again (their process decided locally).
    orphans: Mutex<Vec<u64>>,
    /// Rung when the script wakes this process (its channel) or the subscription changes.
    wake: Arc<Notify>,
    /// The subscription to this process's wake-up channel.
    listener: Mutex<Listener>,
    /// Whether that subscription is live, so waiters need not be polled for often.
    listening: Arc<AtomicBool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.listener).task.take() {
            task.abort();
        }
    }
}

/// The task holding this process's subscription to its wake-up channel, and when to try
/// subscribing again after it failed.
#[derive(Default)]
struct Listener {
    task: Option<tokio::task::AbortHandle>,
    next_try: Option<Instant>,
}

/// The requests of this process waiting in Redis's queue, each with the way to tell its
/// waiter and its deadline, and whether the one task polling them all runs.
#[derive(Default)]
struct Waiters {
    slots: BTreeMap<u64, (oneshot::Sender<Heard>, Millis)>,
    polling: bool,
}

/// What the polling task tells a waiter.
#[derive(Debug)]
enum Heard {
    Decided(PermitDecision),
    /// Redis does not know the request (any more): ask again.
    Gone,
    /// Redis failed: decide locally.
    Failed,
}

#[derive(Debug, Clone, Copy)]
enum Health {
    Shared,
    Local {
        next_try: Instant,
    },
    /// This Redis cannot keep the budget, or the budget has other settings
    /// ([`RedisBudgetError::is_permanent`]): local for good.
    Refused,
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
    getrandom::u64().unwrap_or_else(|_| {
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
                next_request: AtomicU64::new(1),
                connection: Mutex::new(None),
                timeouts_in_row: AtomicU64::new(0),
                health: Mutex::new(Health::Shared),
                waiters: Mutex::new(Waiters::default()),
                orphans: Mutex::new(Vec::new()),
                wake: Arc::new(Notify::new()),
                listener: Mutex::new(Listener::default()),
                listening: Arc::new(AtomicBool::new(false)),
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
        matches!(*lock(&self.inner.health), Health::Shared)
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
            Ok(Ok(reply)) => {
                self.inner.timeouts_in_row.store(0, Ordering::SeqCst);
                Ok(reply)
            }
            Ok(Err(e)) => {
                if matches!(e, RedisBudgetError::Connection { .. }) {
                    *lock(&self.inner.connection) = None;
                }
                Err(e)
            }
            Err(_) => {
                // One late reply is a busy Redis (or a busy machine): a new connection would
                // only add a connect and a handshake to the wait. Two in a row may be a
                // connection that went silent: the next call starts afresh.
                if self.inner.timeouts_in_row.fetch_add(1, Ordering::SeqCst) >= 1 {
                    self.inner.timeouts_in_row.store(0, Ordering::SeqCst);
                    *lock(&self.inner.connection) = None;
                }
                Err(RedisBudgetError::Timeout {
                    timeout_ms: millis_of(timeout),
                })
            }
        }
    }

    /// A call that reads the same answer when repeated ([`ScriptOp::Ask`] under the same
    /// request, a poll, a cancel, the figures), made once more when the first one's reply
    /// was lost (a timeout or a broken connection): what the first call decided is read, not
    /// decided again. The repeat always goes on a fresh connection: the one that lost a reply
    /// may have gone silent, and waiting on it again would turn one lost reply into a
    /// fallback. A connection that could not be opened in time is not tried again: the call
    /// never reached Redis, and a second connect would double the wait.
    async fn call_idempotent(&self, op: ScriptOp) -> Result<ScriptReply, RedisBudgetError> {
        match self.call(op.clone(), None).await {
            Err(RedisBudgetError::Timeout { .. } | RedisBudgetError::Connection { .. }) => {
                self.inner.timeouts_in_row.store(0, Ordering::SeqCst);
                *lock(&self.inner.connection) = None;
                self.call(op, None).await
            }
            other => other,
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

    /// Whether this decision should try Redis: always while shared; once per
    /// `retry_redis_after` while fallen back; never once refused.
    fn try_redis(&self) -> bool {
        let mut health = lock(&self.inner.health);
        match *health {
            Health::Shared => true,
            Health::Refused => false,
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
        let next = if error.is_permanent() {
            Health::Refused
        } else {
            Health::Local {
                next_try: Instant::now() + self.inner.options.retry_redis_after,
            }
        };
        let was = {
            let mut health = lock(&self.inner.health);
            if matches!(*health, Health::Refused) {
                return;
            }
            std::mem::replace(&mut *health, next)
        };
        if matches!(was, Health::Shared) || matches!(next, Health::Refused) {
            self.tell(&BudgetEvent::FellBack {
                budget: self.inner.url.to_string(),
                error,
            });
        }
    }

    fn succeeded(&self) {
        let was = {
            let mut health = lock(&self.inner.health);
            if matches!(*health, Health::Refused) {
                return;
            }
            std::mem::replace(&mut *health, Health::Shared)
        };
        if matches!(was, Health::Local { .. }) {
            self.tell(&BudgetEvent::Restored {
                budget: self.inner.url.to_string(),
            });
        }
        let orphans = std::mem::take(&mut *lock(&self.inner.orphans));
        if !orphans.is_empty() {
            self.release(orphans);
        }
    }

    fn tell(&self, event: &BudgetEvent) {
        if let Some(hook) = &self.inner.options.on_event {
            hook(event);
        }
    }

    /// Withdraws `requests` from Redis, off the calling task; when Redis does not answer,
    /// keeps them to withdraw once it does.
    fn release(&self, requests: Vec<u64>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let budget = self.clone();
        runtime.spawn(async move {
            for chunk in requests.chunks(POLL_BATCH) {
                let op = ScriptOp::Cancel {
                    requests: chunk.to_vec(),
                };
                if !matches!(budget.call(op, None).await, Ok(ScriptReply::Ok)) {
                    lock(&budget.inner.orphans).extend_from_slice(chunk);
                }
            }
        });
    }

    /// Asks Redis, waiting for a queued request's answer from this process's poll. `None`:
    /// Redis failed (the failure is recorded), decide locally.
    async fn acquire_shared(&self, ask: PermitAsk) -> Option<PermitDecision> {
        loop {
            let now = self.now();
            if now > ask.deadline.plus(DEADLINE_GRACE_MS) && ask.kind == PermitKind::Charged {
                return Some(PermitDecision::Denied);
            }
            let request = self.inner.next_request.fetch_add(1, Ordering::Relaxed);
            let op = ScriptOp::Ask {
                request,
                kind: ask.kind,
                target: ask.target,
                wait_ms: ask.deadline.since(now),
                age_ms: now.since(ask.since),
            };
            // Dropped while the ask is on its way (the run was canceled): Redis may have
            // queued the request, which would hold its place until its deadline, or granted
            // it a token nobody uses; either goes back.
            let mut in_flight = Registered {
                budget: self,
                request,
                armed: ask.kind == PermitKind::Charged,
            };
            let reply = self.call_idempotent(op).await;
            in_flight.armed = false;
            drop(in_flight);
            let reply = match reply {
                Ok(reply) => reply,
                Err(e) => {
                    if ask.kind == PermitKind::Charged {
                        // Redis may have granted or queued it: a token it took goes back
                        // once Redis answers again.
                        lock(&self.inner.orphans).push(request);
                    }
                    self.failed(e);
                    return None;
                }
            };
            let decided = match reply {
                ScriptReply::Granted => PermitDecision::Granted,
                ScriptReply::Denied => PermitDecision::Denied,
                ScriptReply::Wait(ms) => PermitDecision::WaitUntil(self.now().plus(ms)),
                ScriptReply::Queued { retry_in_ms } if ask.kind == PermitKind::Charged => {
                    self.succeeded();
                    match self.wait_queued(request, ask.deadline, retry_in_ms).await {
                        Heard::Decided(decision) => return Some(decision),
                        // Redis forgot the request (restarted empty, or it went stale): ask
                        // again, as a newcomer with the same request age.
                        Heard::Gone => continue,
                        Heard::Failed => return None,
                    }
                }
                other => {
                    self.failed(malformed(&format!("{other:?}")));
                    return None;
                }
            };
            self.succeeded();
            return Some(decided);
        }
    }

    /// Waits for the answer to `request`, queued in Redis, from this process's poll; past
    /// the deadline (and a grace for a Redis whose clock runs slow) it is denied.
    async fn wait_queued(&self, request: u64, deadline: Millis, retry_in_ms: u64) -> Heard {
        let (send, answer) = oneshot::channel();
        let mut registered = Registered {
            budget: self,
            request,
            armed: true,
        };
        let start_polling = {
            let mut waiters = lock(&self.inner.waiters);
            waiters.slots.insert(request, (send, deadline));
            !std::mem::replace(&mut waiters.polling, true)
        };
        if start_polling {
            let budget = self.clone();
            tokio::spawn(async move { budget.poll_waiters(retry_in_ms).await });
        }
        let limit = self.origin() + Duration::from_millis(deadline.plus(DEADLINE_GRACE_MS).0);
        tokio::select! {
            // An answer delivered in the same instant as the limit is still the answer: Redis
            // spent a token on it, and the poll acknowledged it.
            biased;
            heard = answer => {
                let heard = heard.unwrap_or(Heard::Failed);
                // Decided or gone: nothing left in Redis to withdraw. Failed: withdrawn once
                // Redis answers again.
                registered.armed = matches!(heard, Heard::Failed);
                heard
            }
            () = tokio::time::sleep_until(limit) => Heard::Decided(PermitDecision::Denied),
        }
    }

    /// The one task of this process that polls the answers of all its waiters, until none
    /// is left: one [`ScriptOp::Inbox`] per poll, whatever the number of waiters, and one by
    /// one only when Redis holds fewer of them than this process waits for (some went stale,
    /// or Redis forgot them).
    ///
    /// When it polls: at once when the script wakes this process (it answered one of its
    /// requests); when refill could pay the head of the queue; at its earliest waiter's
    /// deadline (at most every [`DEADLINE_POLL_MS`]); and at least every
    /// `waiter_stale_after / 2`, which says the process is still here and finds requests
    /// Redis forgot (a flush, a failover) or a wake-up that was lost. Without a live
    /// subscription (it could not be made, or broke) also every `poll_interval`.
    async fn poll_waiters(self, first_in_ms: u64) {
        let stale = millis_of(self.inner.options.waiter_stale_after);
        let fast = millis_of(self.inner.options.poll_interval)
            .min(stale / 2)
            .max(1);
        let slow = (stale / 2).max(fast);
        let mut pause = first_in_ms.clamp(1, fast);
        let mut acks: Vec<u64> = Vec::new();
        loop {
            self.listen();
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(pause)) => {}
                () = self.inner.wake.notified() => {}
            }
            let expected: BTreeSet<u64> = {
                let mut waiters = lock(&self.inner.waiters);
                if waiters.slots.is_empty() {
                    waiters.polling = false;
                    return;
                }
                waiters.slots.keys().copied().collect()
            };
            // At most a batch at a time (Lua unpacks at most 8,000 values); the rest next time.
            let op = ScriptOp::Inbox {
                acks: acks.drain(..acks.len().min(POLL_BATCH)).collect(),
            };
            let (retry_in_ms, waiting, answers) = match self.call_idempotent(op).await {
                Ok(ScriptReply::Inbox {
                    retry_in_ms,
                    waiting,
                    answers,
                }) => (retry_in_ms, waiting, answers),
                other => {
                    self.poll_failed(other);
                    return;
                }
            };
            self.succeeded();
            let answered: BTreeSet<u64> = answers.iter().map(|(r, _)| *r).collect();
            acks.extend(self.deliver(answers));
            let unanswered: Vec<u64> = expected.difference(&answered).copied().collect();
            if waiting < unanswered.len() as u64 {
                // Some of ours are neither waiting nor answered: ask for each.
                for chunk in unanswered.chunks(POLL_BATCH) {
                    let op = ScriptOp::Poll {
                        requests: chunk.to_vec(),
                    };
                    match self.call_idempotent(op).await {
                        Ok(ScriptReply::Polled { answers, .. }) if answers.len() == chunk.len() => {
                            let answers = chunk.iter().copied().zip(answers).collect();
                            acks.extend(self.deliver(answers));
                        }
                        other => {
                            self.poll_failed(other);
                            return;
                        }
                    }
                }
            }
            let most = if self.inner.listening.load(Ordering::SeqCst) {
                slow
            } else {
                fast
            };
            let deadline = lock(&self.inner.waiters)
                .slots
                .values()
                .map(|(_, deadline)| *deadline)
                .min()
                .map_or(u64::MAX, |d| d.since(self.now()).max(DEADLINE_POLL_MS));
            pause = most.min(retry_in_ms.max(1)).min(deadline);
        }
    }

    /// Keeps this process subscribed to its wake-up channel while it has waiters: starts
    /// the subscribing task when none runs (at most once per `retry_redis_after` after a
    /// failure).
    fn listen(&self) {
        let mut listener = lock(&self.inner.listener);
        if listener.task.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let now = Instant::now();
        if listener.next_try.is_some_and(|t| now < t) {
            return;
        }
        listener.next_try = Some(now + self.inner.options.retry_redis_after);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let task = runtime.spawn(listen(
            self.inner.client.clone(),
            format!("{}wake:{:016x}", self.channel_prefix(), self.inner.owner),
            self.inner.options.connect_timeout,
            Arc::clone(&self.inner.wake),
            Arc::clone(&self.inner.listening),
        ));
        listener.task = Some(task.abort_handle());
    }

    /// `rebound:budget:{NAME}:`, the prefix of the budget's keys and channels.
    fn channel_prefix(&self) -> &str {
        let state = &self.inner.keys[0];
        &state[..state.len() - "state".len()]
    }

    /// Hands answers to their waiters; returns those delivered (to acknowledge). An answer
    /// whose waiter stopped waiting is not acknowledged: its withdrawal pays back a token it
    /// was granted.
    fn deliver(&self, answers: Vec<(u64, PollAnswer)>) -> Vec<u64> {
        let now = self.now();
        let mut waiters = lock(&self.inner.waiters);
        let mut delivered = Vec::new();
        for (request, answer) in answers {
            let heard = match answer {
                PollAnswer::Queued => continue,
                PollAnswer::Granted => Heard::Decided(PermitDecision::Granted),
                PollAnswer::Denied => Heard::Decided(PermitDecision::Denied),
                PollAnswer::Wait(ms) => Heard::Decided(PermitDecision::WaitUntil(now.plus(ms))),
                PollAnswer::Gone => Heard::Gone,
            };
            if let Some((waiter, _)) = waiters.slots.remove(&request) {
                if waiter.send(heard).is_ok() {
                    delivered.push(request);
                }
            }
        }
        delivered
    }

    /// The poll failed: every waiter of this process decides locally.
    fn poll_failed(&self, outcome: Result<ScriptReply, RedisBudgetError>) {
        self.failed(match outcome {
            Err(e) => e,
            Ok(reply) => malformed(&format!("{reply:?}")),
        });
        let mut waiters = lock(&self.inner.waiters);
        for (_, (waiter, _)) in std::mem::take(&mut waiters.slots) {
            let _ = waiter.send(Heard::Failed);
        }
        waiters.polling = false;
    }
}

/// How long a process lets pass between two polls for its waiters' deadlines: a retry is
/// denied at most this late, and a fleet whose deadlines come every millisecond polls for
/// them a few times a second, not a thousand.
const DEADLINE_POLL_MS: u64 = 200;

/// The subscription to a process's wake-up channel: rings `wake` on every message, and once
/// when it starts or ends (so the polling task re-reads its inbox, and its pace). Needs its
/// own connection (a subscribed connection runs no script), opened and subscribed within
/// `timeout` (the connect timeout).
async fn listen(
    client: redis::Client,
    channel: String,
    timeout: Duration,
    wake: Arc<Notify>,
    listening: Arc<AtomicBool>,
) {
    use futures_util::StreamExt;
    let subscribed = tokio::time::timeout(timeout, async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(&channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    })
    .await;
    if let Ok(Ok(pubsub)) = subscribed {
        listening.store(true, Ordering::SeqCst);
        wake.notify_one();
        let mut messages = pubsub.into_on_message();
        while messages.next().await.is_some() {
            wake.notify_one();
        }
    }
    listening.store(false, Ordering::SeqCst);
    wake.notify_one();
}

/// A request asked of Redis or waiting in its queue: withdrawn when its wait ends without
/// an answer (canceled run, deadline passed), paying back a token granted to it too late.
struct Registered<'a> {
    budget: &'a RedisBudget,
    request: u64,
    armed: bool,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        lock(&self.budget.inner.waiters).slots.remove(&self.request);
        if self.armed {
            // Best effort, off the dropping task: a request left behind leaves the queue
            // at its deadline anyway.
            self.budget.release(vec![self.request]);
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
        if self.try_redis() {
            if let Some(decision) = self.acquire_shared(ask).await {
                return decision;
            }
        }
        self.inner.fallback.acquire(ask).await
    }

    /// The local budget's tokens while this process decides locally (fallen back or
    /// refused); `None` while Redis decides, since its balance is Redis's to tell (one call:
    /// [`RedisBudget::stats`]).
    fn tokens(&self) -> Option<f64> {
        (!self.is_shared()).then(|| self.inner.fallback.balance())
    }

    async fn record(&self, note: BudgetNote) {
        if let BudgetNote::RateLimited { .. } = note {
            // Also here, so a fall back keeps honouring the window.
            self.inner.fallback.record(note);
        }
        let deposit = matches!(
            note,
            BudgetNote::Succeeded { .. } | BudgetNote::RetryAnswered { .. }
        );
        if !self.try_redis() {
            if deposit {
                self.inner.fallback.record(note);
            }
            return;
        }
        let now = self.now();
        let op = match note {
            BudgetNote::Succeeded { target } => ScriptOp::Succeeded { target },
            BudgetNote::RetryAnswered { target } => ScriptOp::RetryAnswered { target },
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
                if deposit {
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
