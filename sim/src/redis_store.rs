//! A model of the retry budget kept in Redis and shared by many processes: what the Redis
//! store of `rebound-effects` (`RedisBudget`) does differently from one budget in memory.
//!
//! [`RedisStore`] is a budget as the simulator's driver sees one — asked for permits
//! ([`request`](RedisStore::request)), told what machines noted
//! ([`record`](RedisStore::record)), ticked at [`next_wakeup`](RedisStore::next_wakeup), its
//! later answers drained with [`poll_decision`](RedisStore::poll_decision) — and
//! [`simulate_fleet_in_redis`](crate::driver::simulate_fleet_in_redis) runs a fleet of
//! processes on it. The rules are core's [`RetryBudget`], kept in one place (the server) as
//! the Lua script keeps them; what the model adds is the way the processes reach them. Each
//! piece, and the code it models (`effects/src/budget/redis.rs` unless named otherwise):
//!
//! - **Every decision is a call.** An ask or a note reaches the server half a
//!   [`round_trip_ms`](RedisTiming::round_trip_ms) after it is made and its answer comes
//!   back half a round trip later, even a grant that needed no wait (`acquire_shared`, lines
//!   1143–1202; `record`, 1618–1654). A request's wait and age are read on its process's
//!   clock before the call (lines 1145–1156), so the server sees it younger, and its
//!   deadline later, by the way there.
//! - **The server decides only when called.** Redis runs no timer: refill and deadlines take
//!   effect at the next call of any process, and a reply tells the caller when refill could
//!   pay the head of the queue (`retry_in`, `redis.lua` lines 437–452).
//! - **A grant reaches a queued waiter when its process reads its inbox.** One poll loop per
//!   process with waiters (`poll_waiters`, lines 1249–1321): it reads the answers of all its
//!   waiters in one call, at once when woken, else after a pause — the first at most
//!   [`poll_interval_ms`](RedisTiming::poll_interval_ms), then the least of the script's
//!   `retry_in`, the earliest own deadline (at least [`DEADLINE_POLL_MS`] away, line 1396)
//!   and `waiter_stale_after / 2` (or `poll_interval` while the subscription is not live).
//!   A loop that found no waiter left ends only at the end of its pause, so a retry queued
//!   meanwhile waits for that pause unless a wake-up comes.
//! - **Wake-ups.** A call that grants a queued request (or sends it to wait out a rate
//!   limit) publishes on its process's channel, except to the process whose own inbox read
//!   decided it (`decide`, `redis.lua` lines 245–253 and 685–695); denials are not
//!   published. A message reaches a process only while its subscription is live: it is
//!   made when the loop first runs, [`subscribe_ms`](RedisTiming::subscribe_ms) later, and
//!   tried again at most every `retry_redis_after` after it broke (`listen`, lines
//!   1326–1347 and 1402–1426). A wake-up that comes while the process polls is kept for its
//!   next pause, as a tokio `Notify` keeps one.
//! - **Redis down** ([`RedisOutage`]): every call fails, each subscription breaks, and the
//!   process decides with its own local budget (same configuration): a first failure is a
//!   [`StoreEvent::FellBack`]; every `retry_redis_after` the next decision tries Redis
//!   again, and the first answer is a [`StoreEvent::Restored`] (lines 104–124, 1056–1114,
//!   1602–1654). A retry queued in Redis asks the local budget with the same deadline when
//!   its process's poll fails (lines 1380–1390). Rate limits are noted locally as well.
//!   Redis comes back empty (no persistence, as the fleet experiment runs it): the requests
//!   it held are gone, and a process that still waits for one asks again (line
//!   1190).
//! - **Slow calls** ([`CallStalls`], none by default): with a chance drawn per call from
//!   the store's seeded RNG, a call stalls: its reply comes back late. A call on a new
//!   connection (a process's first, the repeat of a call that timed out, the call after two
//!   timeouts in a row, a refusal or a connection that did not open) connects first, and its
//!   connecting stalls with a chance of its own, bounded on its own: past
//!   [`connect_timeout_ms`](RedisTiming::connect_timeout_ms) (1 s) the process gives up
//!   without the call reaching Redis and falls back, not trying again (`call_idempotent`);
//!   within it the call leaves that much later. Past
//!   [`call_timeout_ms`](RedisTiming::call_timeout_ms) (50 ms) from then without a reply,
//!   the process hears a timeout instead (`call`, lines 855–888) and does what the real store does. An ask or an inbox
//!   read is made once more under the same request (`call_idempotent`, lines 897–906), and
//!   Redis reads the answer it already decided or the place already taken instead of
//!   deciding twice (`redis.lua` lines 485–491). A second timeout, or a note's first (a note
//!   is not repeated: `record`, lines 1642–1653), sends the process to its local budget
//!   with a [`StoreEvent::FellBack`], for `retry_redis_after`, exactly as a refused call
//!   does: the ask is decided locally, a deposit is made locally. A charged ask given up so
//!   may hold a token or a place in Redis: it is an orphan (lines 1170–1177), withdrawn by
//!   its process's next call that Redis answers (`succeeded` and `release`, lines
//!   1097–1139), and a token granted to it goes back to the bucket (`redis.lua` lines
//!   597–622) while Redis still remembers the answer (`waiter_stale_after`). A poll loop
//!   whose read times out twice ends, and each of its waiters is withdrawn from Redis and
//!   asks the local budget (`poll_failed`, lines 1380–1390; each waiter's drop, lines
//!   1223–1235 and 1436–1445).
//! - **The check at start** ([`check`](RedisStore::check)): a process that checks Redis at
//!   its start, as `rebound run` does, makes its first call then, on a new connection
//!   (its connecting bounded by the connect timeout, its call by the call timeout); a
//!   timeout falls back for `retry_redis_after` like any failed call.
//!
//! What it leaves out: a call takes the round trip, or a stall more, drawn for each call on
//! its own (on a loaded machine a process that waits for a CPU stalls all its calls at
//! once); a stall on an open connection delays the reply, never the call's arrival in
//! Redis; a connection takes no round trips of its own to open (the handshake, `INFO` and
//! the script's load), only its stall; concurrent calls of a process share the connection
//! its first one opens (the real ones each open one while none is kept); the subscription
//! never stalls; an outage is Redis stopped (calls refused at once, an idempotent one not
//! repeated), not a Redis that stops answering (that is every call stalling); a note's round trip does not hold its agent (the runner awaits
//! `record`); a withdrawal reaches the server at once, except an orphan's and a failed poll
//! loop's waiters', which are calls, and a withdrawal of a request whose machine stopped
//! waiting pays back no grant (the real one does); an owner that stops polling is never
//! dropped from the queue as stale (the simulated processes never die); a denial reaches
//! its agent at its process's next poll, never later through the local `deadline + 1 s`
//! limit; and when tokens wait for the pace, `retry_in` is core's next wake-up, which also
//! counts the earliest deadline of any process's waiter (the script leaves deadlines to
//! their processes), so processes poll a little more often than the real ones there.
//!
//! ```
//! use rebound_core::{BudgetConfig, Millis, PermitAsk, PermitDecision, PermitKind, Ticket};
//! use rebound_sim::redis_store::{ProcessId, RedisStore, RedisTiming};
//!
//! let timing = RedisTiming::default().with_round_trip_ms(2);
//! let mut store = RedisStore::new(BudgetConfig::default(), timing);
//! let ask = PermitAsk {
//!     kind: PermitKind::Charged,
//!     target: 0,
//!     deadline: Millis(5_000),
//!     since: Millis(0),
//! };
//! // A token is there, but the answer takes a round trip.
//! assert_eq!(store.request(Millis(100), ProcessId(0), Ticket(1), ask), None);
//! assert_eq!(store.next_wakeup(), Some(Millis(101)));
//! store.tick(Millis(101));
//! store.tick(Millis(102));
//! assert_eq!(store.poll_decision(), Some((Ticket(1), PermitDecision::Granted)));
//! ```

use rebound_core::{
    BudgetConfig, BudgetNote, BudgetStats, Millis, PermitAsk, PermitDecision, PermitKind,
    RetryBudget, Ticket,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// How long a process lets pass, at least, between two polls for its waiters' deadlines
/// (`DEADLINE_POLL_MS` in `effects/src/budget/redis.rs`).
pub const DEADLINE_POLL_MS: u64 = 200;

/// How late past its deadline a retry may still be answered by a second ask after Redis
/// forgot it (`DEADLINE_GRACE_MS` in `effects/src/budget/redis.rs`).
const DEADLINE_GRACE_MS: u64 = 1_000;

/// The times that shape how processes reach the budget in Redis: the network's round trip
/// and the store's own pauses (`RedisOptions`' defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisTiming {
    /// One call there and back, in ms (default 1: loopback on a busy machine). A call
    /// reaches Redis after half of it (rounded down).
    pub round_trip_ms: u64,
    /// How long a process takes to subscribe to its wake-up channel (its own connection and
    /// a `SUBSCRIBE`), in ms (default 2).
    pub subscribe_ms: u64,
    /// How often a process with waiters polls while its subscription is not live
    /// (`RedisOptions::poll_interval`, default 50 ms).
    pub poll_interval_ms: u64,
    /// A process with waiters polls at least every half of this
    /// (`RedisOptions::waiter_stale_after`, default 2,000 ms).
    pub waiter_stale_after_ms: u64,
    /// How long a process that fell back decides locally before trying Redis again, and
    /// how often it tries to subscribe (`RedisOptions::retry_redis_after`, default 1,000 ms).
    pub retry_redis_after_ms: u64,
    /// The longest a process waits for a call's reply once connected
    /// (`RedisOptions::call_timeout`, default 50 ms): a reply later than this is a timeout.
    pub call_timeout_ms: u64,
    /// The longest a process waits for a new connection to open
    /// (`RedisOptions::connect_timeout`, default 1,000 ms): a call on a new connection
    /// whose connecting stalls longer than this never reaches Redis.
    pub connect_timeout_ms: u64,
    /// Calls whose reply comes back late (default [`CallStalls::NONE`]: none).
    pub stalls: CallStalls,
}

impl Default for RedisTiming {
    fn default() -> Self {
        RedisTiming {
            round_trip_ms: 1,
            subscribe_ms: 2,
            poll_interval_ms: 50,
            waiter_stale_after_ms: 2_000,
            retry_redis_after_ms: 1_000,
            call_timeout_ms: 50,
            connect_timeout_ms: 1_000,
            stalls: CallStalls::NONE,
        }
    }
}

impl RedisTiming {
    /// Sets [`round_trip_ms`](Self::round_trip_ms), one call there and back.
    #[must_use]
    pub fn with_round_trip_ms(mut self, ms: u64) -> Self {
        self.round_trip_ms = ms;
        self
    }

    /// Sets [`subscribe_ms`](Self::subscribe_ms), how long subscribing takes.
    #[must_use]
    pub fn with_subscribe_ms(mut self, ms: u64) -> Self {
        self.subscribe_ms = ms;
        self
    }

    /// Sets [`poll_interval_ms`](Self::poll_interval_ms), the poll period without a live
    /// subscription.
    #[must_use]
    pub fn with_poll_interval_ms(mut self, ms: u64) -> Self {
        self.poll_interval_ms = ms;
        self
    }

    /// Sets [`waiter_stale_after_ms`](Self::waiter_stale_after_ms) (processes poll at least
    /// every half of it).
    #[must_use]
    pub fn with_waiter_stale_after_ms(mut self, ms: u64) -> Self {
        self.waiter_stale_after_ms = ms;
        self
    }

    /// Sets [`retry_redis_after_ms`](Self::retry_redis_after_ms), how long a process that
    /// fell back decides locally.
    #[must_use]
    pub fn with_retry_redis_after_ms(mut self, ms: u64) -> Self {
        self.retry_redis_after_ms = ms;
        self
    }

    /// Sets [`call_timeout_ms`](Self::call_timeout_ms), the longest a process waits for a
    /// reply.
    #[must_use]
    pub fn with_call_timeout_ms(mut self, ms: u64) -> Self {
        self.call_timeout_ms = ms;
        self
    }

    /// Sets [`connect_timeout_ms`](Self::connect_timeout_ms), the longest a process waits
    /// for a new connection.
    #[must_use]
    pub fn with_connect_timeout_ms(mut self, ms: u64) -> Self {
        self.connect_timeout_ms = ms;
        self
    }

    /// Sets [`stalls`](Self::stalls), the calls whose reply comes back late.
    #[must_use]
    pub fn with_stalls(mut self, stalls: CallStalls) -> Self {
        self.stalls = stalls;
        self
    }

    /// The way there (a call reaches Redis after it).
    fn there(&self) -> u64 {
        self.round_trip_ms / 2
    }

    /// The way back (a reply or a message reaches its process after it).
    fn back(&self) -> u64 {
        self.round_trip_ms - self.there()
    }

    /// The pause between polls without a live subscription, and with one.
    fn pauses(&self) -> (u64, u64) {
        let half_stale = self.waiter_stale_after_ms / 2;
        let fast = self.poll_interval_ms.min(half_stale).max(1);
        (fast, half_stale.max(fast))
    }
}

/// Calls to Redis that take longer than the round trip: each call, with a chance drawn
/// from the store's seeded RNG, stalls — its reply comes back [`ms`](Self::ms) late. A
/// reply later than [`RedisTiming::call_timeout_ms`] is lost to the process, which then does
/// what the real store does on a timeout (see the [module documentation](self)).
///
/// A call on a new connection first connects, and its connecting (with reading
/// `INFO server` and loading the script) stalls with a chance of its own
/// ([`fresh_per_million`](Self::fresh_per_million)), bounded by
/// [`RedisTiming::connect_timeout_ms`] on its own, before the call's own bound starts
/// (`connection`, lines 942–995): past it the call never reaches Redis. A
/// process connects at its first call, again for the repeat of a call that timed out
/// (`call_idempotent`, lines 897–906), after two timeouts in a row (`call`, lines
/// 875–886) and after a refused call or a connection that did not open.
///
/// A stall delays the way back: Redis ran the call in time (a script runs in
/// microseconds), and the process, or its connection's task, heard the reply late — on a
/// loaded machine, the part of a call that waits for a CPU. So a call that timed out may
/// still have taken a token, queued a request or made a deposit in Redis, which is what
/// the real store's idempotent retry and its orphans are for.
///
/// ```
/// use rebound_sim::redis_store::{CallStalls, RedisTiming};
///
/// // One call in a hundred comes back 60 ms late: past the 50 ms call timeout.
/// let timing = RedisTiming::default().with_stalls(CallStalls::new(10_000, 60));
/// assert_eq!(timing.stalls.chance(), 0.01);
/// assert!(timing.round_trip_ms + timing.stalls.ms > timing.call_timeout_ms);
/// // And one connecting in three, 60 ms late: well within the 1 s connect timeout.
/// let stalls = timing.stalls.with_fresh_per_million(333_333);
/// assert_eq!(stalls.per_million, 10_000);
/// assert!(stalls.ms < timing.connect_timeout_ms);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CallStalls {
    /// How many calls in a million stall (at most a million).
    pub per_million: u32,
    /// How many connectings in a million stall, for the calls on a new connection (at most
    /// a million).
    pub fresh_per_million: u32,
    /// How much later a stalled call's reply comes back, or a stalled connecting ends, in
    /// ms.
    pub ms: u64,
}

impl CallStalls {
    /// No call stalls: every call takes the round trip.
    pub const NONE: CallStalls = CallStalls {
        per_million: 0,
        fresh_per_million: 0,
        ms: 0,
    };

    /// `per_million` calls in a million (at most all) come back `ms` late, and as many
    /// connectings of a new connection end `ms` late.
    #[must_use]
    pub fn new(per_million: u32, ms: u64) -> CallStalls {
        let per_million = per_million.min(1_000_000);
        CallStalls {
            per_million,
            fresh_per_million: per_million,
            ms,
        }
    }

    /// Sets [`fresh_per_million`](Self::fresh_per_million), the chance that opening a new
    /// connection stalls (at most all).
    #[must_use]
    pub fn with_fresh_per_million(mut self, per_million: u32) -> CallStalls {
        self.fresh_per_million = per_million.min(1_000_000);
        self
    }

    /// The chance that a call stalls, between 0 and 1.
    #[must_use]
    pub fn chance(&self) -> f64 {
        f64::from(self.per_million) / 1e6
    }
}

/// A window of time in which Redis is stopped: every call is refused, every subscription
/// breaks, and at its end Redis starts again empty (no persistence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisOutage {
    from: Millis,
    until: Millis,
}

impl RedisOutage {
    /// Redis stopped from `from_ms` until `until_ms`; `None` when the window is empty.
    #[must_use]
    pub fn new(from_ms: u64, until_ms: u64) -> Option<RedisOutage> {
        (from_ms < until_ms).then_some(RedisOutage {
            from: Millis(from_ms),
            until: Millis(until_ms),
        })
    }

    /// When Redis stops.
    #[must_use]
    pub fn from(&self) -> Millis {
        self.from
    }

    /// When Redis is back, empty.
    #[must_use]
    pub fn until(&self) -> Millis {
        self.until
    }
}

/// One process sharing the store, named by the caller (processes come into being at their
/// first call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcessId(pub usize);

/// A change in where a process decides, as `BudgetEvent` reports it in the real store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreEvent {
    /// A call failed: the process decides with its local budget.
    FellBack,
    /// Redis answered again: the shared budget decides again.
    Restored,
}

/// A [`StoreEvent`] of one process, and when it happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Notification {
    /// When the process noticed.
    pub at: Millis,
    /// Which process.
    pub process: ProcessId,
    /// What changed.
    pub event: StoreEvent,
}

/// What the processes did with the store, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreCounts {
    /// Calls made to Redis (asks, notes, inbox reads and withdrawals), refused and timed
    /// out ones included, each retry counted.
    pub calls: u64,
    /// Of those, the inbox reads of the processes' poll loops.
    pub polls: u64,
    /// Wake-up messages that reached a process.
    pub wakes: u64,
    /// Permits a local budget decided (Redis was down, or not tried yet).
    pub local_decisions: u64,
    /// [`StoreEvent::FellBack`] notifications.
    pub fell_back: u64,
    /// [`StoreEvent::Restored`] notifications.
    pub restored: u64,
    /// Calls whose reply came back later than the call timeout, or whose connection did
    /// not open within the connect timeout ([`CallStalls`]).
    pub timed_out: u64,
    /// Charged asks given up after their second timeout, which Redis may have granted or
    /// queued: withdrawn once Redis answers their process again.
    pub orphaned: u64,
    /// Tokens paid back by a withdrawal: granted in Redis to a request whose process never
    /// heard the grant.
    pub repaid: u64,
}

/// A decision as it crosses the wire: a wait is a duration, read on the receiver's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    Granted,
    Denied,
    Wait(u64),
}

impl Heard {
    fn of(decision: PermitDecision, now: Millis) -> Heard {
        match decision {
            PermitDecision::WaitUntil(until) => Heard::Wait(until.since(now)),
            PermitDecision::Denied => Heard::Denied,
            // Granted, and whatever core adds later: go ahead, as core's default.
            _ => Heard::Granted,
        }
    }

    fn at(self, now: Millis) -> PermitDecision {
        match self {
            Heard::Granted => PermitDecision::Granted,
            Heard::Denied => PermitDecision::Denied,
            Heard::Wait(ms) => PermitDecision::WaitUntil(now.plus(ms)),
        }
    }
}

/// A request as Redis knows it, named by the store when its ticket is first sent to Redis
/// (the real process names each ask, `acquire_shared`, line 1149), so an answer or a
/// withdrawal of an old request never meets a later one under a reused ticket. A request
/// asked again after Redis restarted keeps its name: the new Redis knows nothing of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Req(u64);

impl Req {
    /// Its name in the budget's queue.
    fn ticket(self) -> Ticket {
        Ticket(self.0)
    }
}

/// Redis did not answer (it is stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Refused;

/// A call from a process to Redis.
#[derive(Debug, Clone)]
enum Call {
    Ask {
        req: Req,
        ask: PermitAsk,
    },
    Note(BudgetNote),
    Inbox,
    /// Withdraw requests the process no longer waits for in Redis (`release`, lines
    /// 1124–1139).
    Cancel(Vec<Req>),
    /// Read the budget's figures, to see that Redis answers (`check`, lines 829–840).
    Check,
}

/// What Redis said to an ask.
#[derive(Debug, Clone, Copy)]
enum AskAnswer {
    Decided(Heard),
    /// Waiting in the queue of Redis's `generation` (it changes when Redis restarts).
    Queued {
        retry_in: u64,
        generation: u64,
    },
}

/// A reply on its way back to its process.
#[derive(Debug, Clone)]
enum Reply {
    Ask {
        req: Req,
        ask: PermitAsk,
        answer: Result<AskAnswer, Refused>,
    },
    Note {
        note: BudgetNote,
        answer: Result<(), Refused>,
    },
    Inbox(Result<Inbox, Refused>),
    Cancel {
        reqs: Vec<Req>,
        answer: Result<(), Refused>,
    },
    Check(Result<(), Refused>),
}

impl Reply {
    fn refused(&self) -> bool {
        match self {
            Reply::Ask { answer, .. } => answer.is_err(),
            Reply::Note { answer, .. } | Reply::Cancel { answer, .. } | Reply::Check(answer) => {
                answer.is_err()
            }
            Reply::Inbox(answer) => answer.is_err(),
        }
    }
}

/// What an inbox read returns: the process's answers (`None`: Redis does not know the
/// request) and `retry_in`.
#[derive(Debug, Clone)]
struct Inbox {
    answers: Vec<(Req, Option<Heard>)>,
    retry_in: u64,
}

/// What comes due, in order of time, then of scheduling.
#[derive(Debug, Clone)]
enum Due {
    Stop,
    Restart,
    Arrive {
        process: ProcessId,
        sent: Millis,
        call: Call,
        /// How much later than the round trip its reply comes back.
        late: u64,
        /// Whether its reply comes back within the call timeout (else it is never heard).
        heard: bool,
    },
    Reply {
        process: ProcessId,
        reply: Reply,
    },
    /// A call's reply did not come within the call timeout, or its connection did not
    /// open within the connect timeout.
    TimedOut {
        process: ProcessId,
        call: Call,
        /// Whether it was already the second try of an idempotent call.
        retried: bool,
        /// Whether its new connection never opened (the call never reached Redis).
        connecting: bool,
    },
    Wake {
        process: ProcessId,
    },
    Poll {
        process: ProcessId,
        id: u64,
    },
    Subscribed {
        process: ProcessId,
        epoch: u64,
    },
}

/// Where a process decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Shared,
    Local { next_try: Millis },
}

/// A process's poll loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Poll {
    /// Not running: the next queued request starts it.
    Idle,
    /// Pausing until its `Due::Poll` with this id, or a wake-up.
    Sleeping { id: u64 },
    /// An inbox read is on its way.
    Reading,
}

/// A process's subscription to its wake-up channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscription {
    /// None running (never made, or it broke).
    Off,
    /// Being made; live at its `Due::Subscribed` with this epoch.
    Connecting { epoch: u64 },
    /// Live: wake-ups reach the process.
    Live,
}

/// A request of a process waiting in Redis's queue.
#[derive(Debug, Clone, Copy)]
struct Waiter {
    /// The caller's name for it.
    ticket: Ticket,
    /// As the machine asked, on the process's clock.
    ask: PermitAsk,
    /// The Redis that queued it.
    generation: u64,
}

#[derive(Debug, Clone)]
struct Process {
    health: Health,
    /// The budget it falls back to.
    local: RetryBudget,
    waiters: BTreeMap<Req, Waiter>,
    poll: Poll,
    /// A wake-up rang that no pause has taken yet.
    woken: bool,
    subscription: Subscription,
    /// Not before this may it subscribe again.
    subscribe_again: Millis,
    /// Requests to withdraw once Redis answers this process again (`orphans`: lines
    /// 1170–1177, 1097–1114, 1124–1139).
    orphans: Vec<Req>,
    /// Whether it has a connection to Redis (its next call makes one if not).
    connected: bool,
    /// Calls that timed out since the last answer (the second in a row drops the
    /// connection).
    timeouts_in_row: u32,
}

/// Where a permit request is until its answer reaches its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Asking { process: ProcessId, req: Req },
    InRedis { process: ProcessId, req: Req },
    Local(ProcessId),
}

/// An answer Redis decided, as the script keeps it (`decided`): whether it took a token.
#[derive(Debug, Clone, Copy)]
struct Answer {
    decision: PermitDecision,
    /// A charged permit granted: a token left the bucket.
    took_token: bool,
}

/// What Redis holds: the budget, for each queued request its process, the answers not yet
/// read, and every answer decided for `waiter_stale_after`.
#[derive(Debug, Clone)]
struct Server {
    budget: RetryBudget,
    up: bool,
    generation: u64,
    owner_of: BTreeMap<Req, ProcessId>,
    inbox: BTreeMap<ProcessId, Vec<(Req, PermitDecision)>>,
    /// Read again by an ask under the same request, and looked up by a withdrawal that
    /// pays back a grant nobody heard (the script's `decided` and `answered`, `redis.lua`
    /// lines 233–267 and 455–468).
    answers: BTreeMap<Req, Answer>,
    /// When each answer was decided, oldest first: forgotten `waiter_stale_after` later.
    answered: VecDeque<(Millis, Req)>,
}

impl Server {
    fn new(config: &BudgetConfig, generation: u64) -> Server {
        Server {
            budget: RetryBudget::new(config.clone()),
            up: true,
            generation,
            owner_of: BTreeMap::new(),
            inbox: BTreeMap::new(),
            answers: BTreeMap::new(),
            answered: VecDeque::new(),
        }
    }

    fn remember(&mut self, now: Millis, req: Req, decision: PermitDecision, took_token: bool) {
        self.answers.insert(
            req,
            Answer {
                decision,
                took_token,
            },
        );
        self.answered.push_back((now, req));
    }

    /// Forgets the answers decided more than `stale_ms` ago (the script's `forget`).
    fn forget(&mut self, now: Millis, stale_ms: u64) {
        while let Some(&(at, req)) = self.answered.front() {
            if at.plus(stale_ms) >= now {
                break;
            }
            self.answered.pop_front();
            self.answers.remove(&req);
        }
    }
}

/// One retry budget in Redis shared by many processes, in virtual time: see the
/// [module documentation](self) for what it models. Fed with `now` like core's
/// [`RetryBudget`], which it holds (one in "Redis", one local per process); time must not
/// go backwards (an earlier `now` counts as the latest one seen). Tickets are the caller's,
/// unique among the requests it has waiting, as for `RetryBudget`. Slow calls
/// ([`CallStalls`]) are drawn from an RNG seeded with [`with_seed`](Self::with_seed): one
/// seed, one run.
#[derive(Debug, Clone)]
pub struct RedisStore {
    config: BudgetConfig,
    timing: RedisTiming,
    outage: Option<RedisOutage>,
    now: Millis,
    server: Server,
    processes: BTreeMap<ProcessId, Process>,
    tickets: BTreeMap<Ticket, Place>,
    /// The caller's ticket of each request asked of Redis and not yet answered.
    asks: BTreeMap<Req, Ticket>,
    next_req: u64,
    due: BTreeMap<(Millis, u64), Due>,
    seq: u64,
    /// Names each subscription attempt and each pause, so a superseded one is skipped.
    ids: u64,
    decided: VecDeque<(Ticket, PermitDecision)>,
    counts: StoreCounts,
    notifications: Vec<Notification>,
    seed: u64,
    /// Draws which calls stall; used only when some do.
    rng: fastrand::Rng,
}

impl RedisStore {
    /// A budget with `config` in a Redis that never fails, reached with `timing`, its slow
    /// calls (if any) drawn with seed 0.
    #[must_use]
    pub fn new(config: BudgetConfig, timing: RedisTiming) -> RedisStore {
        RedisStore {
            server: Server::new(&config, 0),
            config,
            timing,
            outage: None,
            now: Millis::ZERO,
            processes: BTreeMap::new(),
            tickets: BTreeMap::new(),
            asks: BTreeMap::new(),
            next_req: 0,
            due: BTreeMap::new(),
            seq: 0,
            ids: 0,
            decided: VecDeque::new(),
            counts: StoreCounts::default(),
            notifications: Vec::new(),
            seed: 0,
            rng: fastrand::Rng::with_seed(0),
        }
    }

    /// The same store with Redis stopped during `outage` (replacing an earlier one).
    #[must_use]
    pub fn with_outage(mut self, outage: RedisOutage) -> RedisStore {
        self.due
            .retain(|_, due| !matches!(due, Due::Stop | Due::Restart));
        self.outage = Some(outage);
        self.schedule(outage.from, Due::Stop);
        self.schedule(outage.until, Due::Restart);
        self
    }

    /// The same store drawing its slow calls ([`RedisTiming::stalls`]) from `seed`. Call it
    /// before the first request: the draws start again from the seed.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> RedisStore {
        self.seed = seed;
        self.rng = fastrand::Rng::with_seed(seed);
        self
    }

    /// The budget's configuration (Redis's, and each local one's).
    #[must_use]
    pub fn config(&self) -> &BudgetConfig {
        &self.config
    }

    /// How processes reach Redis.
    #[must_use]
    pub fn timing(&self) -> RedisTiming {
        self.timing
    }

    /// The seed slow calls are drawn from.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// When Redis is stopped, if ever.
    #[must_use]
    pub fn outage(&self) -> Option<RedisOutage> {
        self.outage
    }

    /// What the processes did with the store.
    #[must_use]
    pub fn counts(&self) -> StoreCounts {
        self.counts
    }

    /// Every [`StoreEvent`], in order.
    #[must_use]
    pub fn notifications(&self) -> &[Notification] {
        &self.notifications
    }

    /// What the budget in Redis did (since Redis last started).
    #[must_use]
    pub fn shared_stats(&self) -> BudgetStats {
        self.server.budget.stats()
    }

    /// Tokens in the budget in Redis at `now` (after refill), as Redis's `stats` reads
    /// them; lets time pass to `now` like [`tick`](Self::tick).
    pub fn shared_balance(&mut self, now: Millis) -> f64 {
        self.advance(now);
        let now = self.now;
        self.server.budget.balance(now)
    }

    /// Whether `process` decides with the budget in Redis (a process that never called
    /// does).
    #[must_use]
    pub fn is_shared(&self, process: ProcessId) -> bool {
        self.processes
            .get(&process)
            .is_none_or(|p| p.health == Health::Shared)
    }

    /// Asks for a permit for a machine of `process` at `now`. Returns the decision when its
    /// local budget decides at once (Redis is down); `None` otherwise: the answer comes from
    /// [`poll_decision`](Self::poll_decision) once it reaches the process, a round trip
    /// later at the soonest.
    pub fn request(
        &mut self,
        now: Millis,
        process: ProcessId,
        ticket: Ticket,
        ask: PermitAsk,
    ) -> Option<PermitDecision> {
        self.advance(now);
        self.process(process);
        if self.try_redis(process) {
            self.next_req += 1;
            let req = Req(self.next_req);
            self.tickets.insert(ticket, Place::Asking { process, req });
            self.asks.insert(req, ticket);
            self.send(process, Call::Ask { req, ask });
            // Without latency the answer is already back.
            self.advance(now);
            return None;
        }
        self.ask_locally(process, ticket, ask)
    }

    /// Tells the budget what a machine of `process` noted at `now`: sent to Redis (and a
    /// rate limit also kept locally), or to the local budget while Redis is down.
    pub fn record(&mut self, now: Millis, process: ProcessId, note: BudgetNote) {
        self.advance(now);
        let now = self.now;
        if let BudgetNote::RateLimited { .. } = note {
            self.process(process).local.record(now, note);
        }
        if self.try_redis(process) {
            self.send(process, Call::Note(note));
            self.advance(now);
        } else if !matches!(note, BudgetNote::RateLimited { .. }) {
            self.process(process).local.record(now, note);
        }
        self.drain_local(process);
    }

    /// `process` checks at `now` that Redis answers, as a process sharing the budget does
    /// at its start (`rebound run`, the fleet example: `RedisBudget::check`, lines
    /// 829–840): one call, its first, so on a new connection. A timeout or a refusal sends
    /// it to its local budget for `retry_redis_after`, with a [`StoreEvent::FellBack`];
    /// an answer changes nothing.
    pub fn check(&mut self, now: Millis, process: ProcessId) {
        self.advance(now);
        self.process(process);
        self.send(process, Call::Check);
        self.advance(now);
    }

    /// Withdraws a request whose machine stopped waiting. Returns whether it was waiting.
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        let Some(place) = self.tickets.remove(&ticket) else {
            return false;
        };
        match place {
            // Its reply (or timeout) is dropped when it comes, and a place it took
            // withdrawn.
            Place::Asking { .. } => {}
            Place::InRedis { process, req } => {
                self.process(process).waiters.remove(&req);
                self.asks.remove(&req);
                self.withdraw(req);
            }
            Place::Local(process) => {
                self.process(process).local.cancel(ticket);
            }
        }
        true
    }

    /// Lets time pass to `now`: calls and replies arrive, polls and wake-ups happen, local
    /// budgets refill. Drain [`poll_decision`](Self::poll_decision) afterwards.
    pub fn tick(&mut self, now: Millis) {
        self.advance(now);
    }

    /// The next answer that reached its process, in the order they did.
    pub fn poll_decision(&mut self) -> Option<(Ticket, PermitDecision)> {
        self.decided.pop_front()
    }

    /// When [`tick`](Self::tick) next has something to do: a call, reply or wake-up
    /// arriving, a timeout, a poll, a local budget's refill or deadline. `None` when
    /// nothing is on its way and nobody waits locally.
    #[must_use]
    pub fn next_wakeup(&self) -> Option<Millis> {
        let due = self.due.keys().next().map(|(at, _)| *at);
        let local = self
            .processes
            .values()
            .filter_map(|p| p.local.next_wakeup())
            .min();
        due.into_iter().chain(local).min()
    }

    fn process(&mut self, id: ProcessId) -> &mut Process {
        let config = &self.config;
        self.processes.entry(id).or_insert_with(|| Process {
            health: Health::Shared,
            local: RetryBudget::new(config.clone()),
            waiters: BTreeMap::new(),
            poll: Poll::Idle,
            woken: false,
            subscription: Subscription::Off,
            subscribe_again: Millis::ZERO,
            orphans: Vec::new(),
            connected: false,
            timeouts_in_row: 0,
        })
    }

    fn schedule(&mut self, at: Millis, due: Due) {
        self.seq += 1;
        self.due.insert((at, self.seq), due);
    }

    fn next_id(&mut self) -> u64 {
        self.ids += 1;
        self.ids
    }

    fn advance(&mut self, now: Millis) {
        let now = now.max(self.now);
        while let Some(entry) = self.due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((at, _), due) = entry.remove_entry();
            self.now = at;
            self.handle(due);
        }
        self.now = now;
        let waiting: Vec<ProcessId> = self
            .processes
            .iter()
            .filter(|(_, p)| p.local.waiting() > 0)
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            self.process(id).local.tick(now);
            self.drain_local(id);
        }
    }

    fn handle(&mut self, due: Due) {
        match due {
            Due::Stop => {
                self.server.up = false;
                let ids: Vec<ProcessId> = self.processes.keys().copied().collect();
                for id in ids {
                    let p = self.process(id);
                    if p.subscription != Subscription::Off {
                        // The subscription's stream ends: its task rings the poll loop.
                        p.subscription = Subscription::Off;
                        self.ring(id);
                    }
                }
            }
            Due::Restart => self.server = Server::new(&self.config, self.server.generation + 1),
            Due::Arrive {
                process,
                sent,
                call,
                late,
                heard,
            } => self.arrive(process, sent, call, late, heard),
            Due::Reply { process, reply } => self.on_reply(process, reply),
            Due::TimedOut {
                process,
                call,
                retried,
                connecting,
            } => self.timed_out(process, call, retried, connecting),
            Due::Wake { process } => {
                if self.process(process).subscription == Subscription::Live {
                    self.counts.wakes += 1;
                    self.ring(process);
                }
            }
            Due::Poll { process, id } => {
                if self.process(process).poll == (Poll::Sleeping { id }) {
                    self.read_inbox(process);
                }
            }
            Due::Subscribed { process, epoch } => {
                let up = self.server.up;
                let p = self.process(process);
                if p.subscription == (Subscription::Connecting { epoch }) {
                    p.subscription = if up {
                        Subscription::Live
                    } else {
                        Subscription::Off
                    };
                    self.ring(process);
                }
            }
        }
    }

    /// Sends `call` to Redis from `process`, now, for the first time.
    fn send(&mut self, process: ProcessId, call: Call) {
        self.send_try(process, call, false);
    }

    /// Sends `call` from `process` (`retried`: the second try of an idempotent call). On a
    /// new connection it first connects, which may stall with the chance of a new
    /// connection: past the connect timeout the process gives up without the call ever
    /// reaching Redis; within it the call leaves that much later (`connection`, lines
    /// 942–995). Then, like any call, it may stall with the chance of a call: it reaches
    /// Redis half a round trip later, and its reply comes back after the rest of the round
    /// trip and its stall — or, past the call timeout, never: the process hears a timeout
    /// at the call timeout instead (`call`, lines 855–888).
    fn send_try(&mut self, process: ProcessId, call: Call, retried: bool) {
        self.counts.calls += 1;
        let stalls = self.timing.stalls;
        let fresh = !std::mem::replace(&mut self.process(process).connected, true);
        let connecting = if fresh && self.stalls(stalls.fresh_per_million) {
            stalls.ms
        } else {
            0
        };
        let now = self.now;
        if connecting > self.timing.connect_timeout_ms {
            let at = now.plus(self.timing.connect_timeout_ms);
            self.schedule(
                at,
                Due::TimedOut {
                    process,
                    call,
                    retried,
                    connecting: true,
                },
            );
            return;
        }
        let late = if self.stalls(stalls.per_million) {
            stalls.ms
        } else {
            0
        };
        let heard = self.timing.round_trip_ms.saturating_add(late) <= self.timing.call_timeout_ms;
        if !heard {
            let at = now.plus(connecting).plus(self.timing.call_timeout_ms);
            self.schedule(
                at,
                Due::TimedOut {
                    process,
                    call: call.clone(),
                    retried,
                    connecting: false,
                },
            );
        }
        let at = now.plus(connecting).plus(self.timing.there());
        self.schedule(
            at,
            Due::Arrive {
                process,
                sent: now,
                call,
                late,
                heard,
            },
        );
    }

    /// Whether a call (or its connecting) stalls, with `per_million` chances in a million.
    fn stalls(&mut self, per_million: u32) -> bool {
        per_million > 0 && self.rng.u32(..1_000_000) < per_million
    }

    /// What Redis does with a call that reaches it now (and the reply it sends, if its
    /// process will hear it).
    fn arrive(&mut self, process: ProcessId, sent: Millis, call: Call, late: u64, heard: bool) {
        let now = self.now;
        let back = now.plus(self.timing.back()).plus(late);
        let reply = if !self.server.up {
            match call {
                Call::Ask { req, ask } => Reply::Ask {
                    req,
                    ask,
                    answer: Err(Refused),
                },
                Call::Note(note) => Reply::Note {
                    note,
                    answer: Err(Refused),
                },
                Call::Inbox => Reply::Inbox(Err(Refused)),
                Call::Cancel(reqs) => Reply::Cancel {
                    reqs,
                    answer: Err(Refused),
                },
                Call::Check => Reply::Check(Err(Refused)),
            }
        } else {
            self.server.forget(now, self.timing.waiter_stale_after_ms);
            match call {
                Call::Ask { req, ask } => Reply::Ask {
                    req,
                    ask,
                    answer: Ok(self.ask_in_redis(process, sent, req, ask)),
                },
                Call::Note(note) => {
                    let seen = match note {
                        BudgetNote::RateLimited { target, until } => BudgetNote::RateLimited {
                            target,
                            until: now.plus(until.since(sent)),
                        },
                        other => other,
                    };
                    self.server.budget.record(now, seen);
                    self.settle(None);
                    Reply::Note {
                        note,
                        answer: Ok(()),
                    }
                }
                Call::Inbox => Reply::Inbox(Ok(self.inbox_in_redis(process, heard))),
                Call::Cancel(reqs) => {
                    self.cancel_in_redis(&reqs);
                    Reply::Cancel {
                        reqs,
                        answer: Ok(()),
                    }
                }
                Call::Check => Reply::Check(Ok(())),
            }
        };
        if heard {
            self.schedule(back, Due::Reply { process, reply });
        }
    }

    /// The script's `ask` (`redis.lua` lines 476–538): an ask under a request Redis already
    /// answered or queued reads that (a second try after a lost reply); else Redis decides.
    fn ask_in_redis(
        &mut self,
        process: ProcessId,
        sent: Millis,
        req: Req,
        ask: PermitAsk,
    ) -> AskAnswer {
        let now = self.now;
        let known = |server: &Server| {
            server
                .answers
                .get(&req)
                .map(|a| AskAnswer::Decided(Heard::of(a.decision, now)))
        };
        if let Some(answer) = known(&self.server) {
            self.server.budget.tick(now);
            self.settle(None);
            return answer;
        }
        if self.server.owner_of.contains_key(&req) {
            self.server.budget.tick(now);
            self.settle(None);
            return known(&self.server).unwrap_or(AskAnswer::Queued {
                retry_in: self.retry_in(),
                generation: self.server.generation,
            });
        }
        // Durations read on the process's clock when it sent the call.
        let wait_ms = ask.deadline.since(sent);
        let age_ms = sent.since(ask.since);
        let seen = PermitAsk {
            deadline: now.plus(wait_ms),
            since: Millis(now.0.saturating_sub(age_ms)),
            ..ask
        };
        let answer = match self.server.budget.request(now, req.ticket(), seen) {
            Some(decision) => {
                let took_token =
                    ask.kind == PermitKind::Charged && decision == PermitDecision::Granted;
                self.server.remember(now, req, decision, took_token);
                AskAnswer::Decided(Heard::of(decision, now))
            }
            None => {
                self.server.owner_of.insert(req, process);
                AskAnswer::Queued {
                    retry_in: self.retry_in(),
                    generation: self.server.generation,
                }
            }
        };
        self.settle(None);
        answer
    }

    /// The script's `inbox` (lines 539–570): the answers of `process` that it knows to
    /// wait for. They stay in Redis until the process has them (`heard`): the real process
    /// acknowledges only the answers it could deliver, at its next read.
    fn inbox_in_redis(&mut self, process: ProcessId, heard: bool) -> Inbox {
        let now = self.now;
        self.server.budget.tick(now);
        self.settle(Some(process));
        let retry_in = self.retry_in();
        self.settle(Some(process));
        // An answer stays in the inbox until its process knows the request (its ask's
        // reply may still be on its way).
        let inbox = self.server.inbox.remove(&process).unwrap_or_default();
        let (asks, tickets) = (&self.asks, &self.tickets);
        let (known, unknown): (Vec<_>, Vec<_>) = inbox
            .into_iter()
            .filter(|(req, _)| asks.contains_key(req))
            .partition(|(req, _)| {
                asks.get(req).and_then(|t| tickets.get(t))
                    == Some(&Place::InRedis { process, req: *req })
            });
        let mut answers: Vec<(Req, Option<Heard>)> = known
            .iter()
            .map(|(req, decision)| (*req, Some(Heard::of(*decision, now))))
            .collect();
        let kept: Vec<(Req, PermitDecision)> = if heard {
            unknown
        } else {
            // The reply is lost: nothing is acknowledged.
            known.into_iter().chain(unknown).collect()
        };
        if !kept.is_empty() {
            self.server.inbox.insert(process, kept);
        }
        // Requests of an earlier Redis are unknown here (the real process finds them with
        // a `poll` of each).
        let generation = self.server.generation;
        answers.extend(
            self.process(process)
                .waiters
                .iter()
                .filter(|(_, w)| w.generation != generation)
                .map(|(req, _)| (*req, None)),
        );
        Inbox { answers, retry_in }
    }

    /// The script's `cancel` (lines 597–622): a queued request leaves the queue; a charged
    /// permit granted but never heard pays its token back, which may grant the next waiter.
    fn cancel_in_redis(&mut self, reqs: &[Req]) {
        let mut repaid = false;
        for req in reqs {
            if self.server.owner_of.remove(req).is_some() {
                self.server.budget.cancel(req.ticket());
            } else if self.server.answers.get(req).is_some_and(|a| a.took_token) {
                let now = self.now;
                self.server.budget.repay(now);
                self.counts.repaid += 1;
                repaid = true;
            }
            self.server.answers.remove(req);
            for entries in self.server.inbox.values_mut() {
                entries.retain(|(r, _)| r != req);
            }
        }
        if repaid {
            self.settle(None);
        }
    }

    /// Takes the decisions Redis made for queued requests into their processes' inboxes,
    /// and wakes each process with a grant or a wait (not `reader`, whose inbox read is
    /// the reply).
    fn settle(&mut self, reader: Option<ProcessId>) {
        let now = self.now;
        let mut wake = BTreeSet::new();
        while let Some((ticket, decision)) = self.server.budget.poll_decision() {
            let req = Req(ticket.0);
            let Some(owner) = self.server.owner_of.remove(&req) else {
                continue;
            };
            let took_token = decision == PermitDecision::Granted;
            self.server.remember(now, req, decision, took_token);
            self.server
                .inbox
                .entry(owner)
                .or_default()
                .push((req, decision));
            if decision != PermitDecision::Denied && reader != Some(owner) {
                wake.insert(owner);
            }
        }
        let at = self.now.plus(self.timing.back());
        for owner in wake {
            // Published; heard only on a live subscription.
            if self.process(owner).subscription == Subscription::Live {
                self.schedule(at, Due::Wake { process: owner });
            }
        }
    }

    /// The script's `retry_in`: when refill alone could pay the head of the queue (or the
    /// pace let a paid one go), else `waiter_stale_after`.
    fn retry_in(&mut self) -> u64 {
        let now = self.now;
        let stale = self.timing.waiter_stale_after_ms;
        let budget = &mut self.server.budget;
        if budget.waiting() == 0 {
            return stale;
        }
        let balance = milli(budget.balance(now));
        if balance >= 1_000 {
            return budget
                .next_wakeup()
                .map_or(stale, |at| at.since(now).max(1));
        }
        let refill = milli(self.config.refill_per_sec);
        if refill == 0 {
            return stale;
        }
        ((1_000 - balance) * 1_000).div_ceil(refill).max(1)
    }

    /// A request leaves Redis's queue (a withdrawal the model lets reach Redis at once).
    fn withdraw(&mut self, req: Req) {
        if self.server.owner_of.remove(&req).is_some() {
            self.server.budget.cancel(req.ticket());
        }
    }

    /// The ticket of `req` if `process` still waits for the answer to its ask.
    fn asking(&self, process: ProcessId, req: Req) -> Option<Ticket> {
        let ticket = *self.asks.get(&req)?;
        (self.tickets.get(&ticket) == Some(&Place::Asking { process, req })).then_some(ticket)
    }

    fn on_reply(&mut self, process: ProcessId, reply: Reply) {
        let p = self.process(process);
        if reply.refused() {
            // A connection error drops the connection (`call`, lines 869–874).
            p.connected = false;
        } else {
            p.timeouts_in_row = 0;
        }
        match reply {
            Reply::Ask { req, ask, answer } => {
                let Some(ticket) = self.asking(process, req) else {
                    // Withdrawn while asking.
                    self.asks.remove(&req);
                    self.withdraw(req);
                    return;
                };
                match answer {
                    Err(Refused) => {
                        self.asks.remove(&req);
                        self.failed(process);
                        if let Some(decision) = self.ask_locally(process, ticket, ask) {
                            self.decided.push_back((ticket, decision));
                        }
                    }
                    Ok(AskAnswer::Decided(heard)) => {
                        self.asks.remove(&req);
                        self.succeeded(process);
                        self.tickets.remove(&ticket);
                        self.decided.push_back((ticket, heard.at(self.now)));
                    }
                    Ok(AskAnswer::Queued {
                        retry_in,
                        generation,
                    }) => {
                        self.succeeded(process);
                        self.tickets.insert(ticket, Place::InRedis { process, req });
                        let (fast, _) = self.timing.pauses();
                        let p = self.process(process);
                        p.waiters.insert(
                            req,
                            Waiter {
                                ticket,
                                ask,
                                generation,
                            },
                        );
                        if p.poll == Poll::Idle {
                            self.pause(process, retry_in.clamp(1, fast));
                        }
                    }
                }
            }
            Reply::Note { note, answer } => match answer {
                Ok(()) => self.succeeded(process),
                Err(Refused) => self.note_failed(process, note),
            },
            Reply::Inbox(Err(Refused)) => self.poll_failed(process, false),
            Reply::Inbox(Ok(Inbox { answers, retry_in })) => {
                self.succeeded(process);
                let now = self.now;
                for (req, heard) in answers {
                    let Some(waiter) = self.process(process).waiters.remove(&req) else {
                        continue;
                    };
                    let ticket = waiter.ticket;
                    match heard {
                        Some(heard) => {
                            self.asks.remove(&req);
                            self.tickets.remove(&ticket);
                            self.decided.push_back((ticket, heard.at(now)));
                        }
                        // Redis forgot it: ask again, as a newcomer with the same age.
                        None if waiter.ask.kind == PermitKind::Charged
                            && now > waiter.ask.deadline.plus(DEADLINE_GRACE_MS) =>
                        {
                            self.asks.remove(&req);
                            self.tickets.remove(&ticket);
                            self.decided.push_back((ticket, PermitDecision::Denied));
                        }
                        None => {
                            self.tickets.insert(ticket, Place::Asking { process, req });
                            self.send(
                                process,
                                Call::Ask {
                                    req,
                                    ask: waiter.ask,
                                },
                            );
                        }
                    }
                }
                let (fast, slow) = self.timing.pauses();
                let p = self.process(process);
                let most = if p.subscription == Subscription::Live {
                    slow
                } else {
                    fast
                };
                let deadline = p
                    .waiters
                    .values()
                    .map(|w| w.ask.deadline)
                    .min()
                    .map_or(u64::MAX, |d| d.since(now).max(DEADLINE_POLL_MS));
                self.pause(process, most.min(retry_in.max(1)).min(deadline));
            }
            Reply::Cancel { reqs, answer } => {
                if answer.is_err() {
                    // Withdrawn once Redis answers again (`release`, lines 1134–1136).
                    self.process(process).orphans.extend(reqs);
                }
            }
            Reply::Check(Ok(())) => self.succeeded(process),
            Reply::Check(Err(Refused)) => self.failed(process),
        }
    }

    /// A call's reply missed the call timeout, or its connection the connect timeout
    /// (`connecting`). After a call timeout an ask or an inbox read is made once more,
    /// under the same request (`call_idempotent`, lines 897–906); a second timeout, a
    /// connect timeout, or a note's first (`record`, lines 1642–1653), sends the process to
    /// its local budget as a refused call does. An ask given up may have been granted or
    /// queued in Redis: it is an orphan, withdrawn once Redis answers again (lines
    /// 1170–1177); so is one whose connection never opened, as the real process does not
    /// tell them apart.
    fn timed_out(&mut self, process: ProcessId, call: Call, retried: bool, connecting: bool) {
        self.counts.timed_out += 1;
        // A call whose connection never opened is not repeated: it never reached Redis,
        // and a second connect would double the wait.
        let retried = retried || connecting;
        let repeat = !retried && matches!(call, Call::Ask { .. } | Call::Inbox);
        let p = self.process(process);
        if connecting {
            // No connection was made; the call timeouts in a row are the open one's.
            p.connected = false;
        } else if repeat || p.timeouts_in_row >= 1 {
            // The repeat goes on a new connection; so does the call after a second
            // timeout in a row (`call`, lines 875–886; `call_idempotent`, 897–906).
            p.timeouts_in_row = 0;
            p.connected = false;
        } else {
            p.timeouts_in_row += 1;
        }
        match call {
            Call::Ask { req, ask } => {
                let Some(ticket) = self.asking(process, req) else {
                    // Withdrawn while asking.
                    self.asks.remove(&req);
                    self.withdraw(req);
                    return;
                };
                if !retried {
                    self.send_try(process, Call::Ask { req, ask }, true);
                    return;
                }
                self.asks.remove(&req);
                if ask.kind == PermitKind::Charged {
                    self.counts.orphaned += 1;
                    self.process(process).orphans.push(req);
                }
                self.failed(process);
                if let Some(decision) = self.ask_locally(process, ticket, ask) {
                    self.decided.push_back((ticket, decision));
                }
            }
            Call::Note(note) => self.note_failed(process, note),
            Call::Inbox if !retried => {
                self.counts.polls += 1;
                self.send_try(process, Call::Inbox, true);
            }
            Call::Inbox => self.poll_failed(process, true),
            Call::Cancel(reqs) => self.process(process).orphans.extend(reqs),
            Call::Check => self.failed(process),
        }
    }

    /// A note did not reach Redis: the process falls back, and a deposit is made locally
    /// (a rate limit already was).
    fn note_failed(&mut self, process: ProcessId, note: BudgetNote) {
        self.failed(process);
        if !matches!(note, BudgetNote::RateLimited { .. }) {
            let now = self.now;
            self.process(process).local.record(now, note);
            self.drain_local(process);
        }
    }

    /// The poll loop's read failed (`poll_failed`, lines 1380–1390): the process falls
    /// back, its loop ends, and each of its waiters asks the local budget with the same
    /// deadline. After a timeout Redis still holds those requests: each is withdrawn at
    /// once, as each waiter's drop does (lines 1223–1235, 1436–1445); while Redis is down
    /// (`withdraw_in_redis` false) nothing is sent: Redis comes back empty.
    fn poll_failed(&mut self, process: ProcessId, withdraw_in_redis: bool) {
        self.failed(process);
        let p = self.process(process);
        p.poll = Poll::Idle;
        let waiters = std::mem::take(&mut p.waiters);
        for (req, waiter) in waiters {
            self.asks.remove(&req);
            if withdraw_in_redis {
                self.send(process, Call::Cancel(vec![req]));
            }
            if let Some(decision) = self.ask_locally(process, waiter.ticket, waiter.ask) {
                self.decided.push_back((waiter.ticket, decision));
            }
        }
    }

    /// The poll loop of `process` pauses `ms`, or less when a wake-up rings (one may
    /// already have).
    fn pause(&mut self, process: ProcessId, ms: u64) {
        self.listen(process);
        let p = self.process(process);
        if p.woken {
            self.read_inbox(process);
            return;
        }
        let id = self.next_id();
        let at = self.now.plus(ms);
        self.process(process).poll = Poll::Sleeping { id };
        self.schedule(at, Due::Poll { process, id });
    }

    /// A wake-up rings for `process`: its pausing loop reads its inbox now; a loop reading
    /// it, or none, keeps it for its next pause.
    fn ring(&mut self, process: ProcessId) {
        let p = self.process(process);
        if matches!(p.poll, Poll::Sleeping { .. }) {
            self.read_inbox(process);
        } else {
            p.woken = true;
        }
    }

    /// The poll loop's turn: it ends when no waiter is left, else reads the inbox.
    fn read_inbox(&mut self, process: ProcessId) {
        let p = self.process(process);
        p.woken = false;
        if p.waiters.is_empty() {
            p.poll = Poll::Idle;
            return;
        }
        p.poll = Poll::Reading;
        self.counts.polls += 1;
        self.send(process, Call::Inbox);
    }

    /// Keeps `process` subscribed while its loop runs: subscribes when no subscription is
    /// live or being made, at most once per `retry_redis_after`.
    fn listen(&mut self, process: ProcessId) {
        let now = self.now;
        let retry = self.timing.retry_redis_after_ms;
        let up = self.server.up;
        let p = self.process(process);
        if p.subscription != Subscription::Off || now < p.subscribe_again {
            return;
        }
        p.subscribe_again = now.plus(retry);
        if !up {
            // Refused at once: the task ends and rings the loop.
            p.woken = true;
            return;
        }
        let epoch = self.next_id();
        self.process(process).subscription = Subscription::Connecting { epoch };
        let at = now.plus(self.timing.subscribe_ms);
        self.schedule(at, Due::Subscribed { process, epoch });
    }

    /// Whether a decision of `process` tries Redis: always while shared; once per
    /// `retry_redis_after` while fallen back.
    fn try_redis(&mut self, process: ProcessId) -> bool {
        let now = self.now;
        let retry = self.timing.retry_redis_after_ms;
        let p = self.process(process);
        match p.health {
            Health::Shared => true,
            Health::Local { next_try } if now < next_try => false,
            Health::Local { .. } => {
                p.health = Health::Local {
                    next_try: now.plus(retry),
                };
                true
            }
        }
    }

    fn failed(&mut self, process: ProcessId) {
        let now = self.now;
        let next_try = now.plus(self.timing.retry_redis_after_ms);
        let p = self.process(process);
        let was = std::mem::replace(&mut p.health, Health::Local { next_try });
        if was == Health::Shared {
            self.counts.fell_back += 1;
            self.notify(process, StoreEvent::FellBack);
        }
    }

    /// Redis answered `process`: it decides in Redis again, and withdraws its orphans
    /// (`succeeded`, lines 1097–1114).
    fn succeeded(&mut self, process: ProcessId) {
        let p = self.process(process);
        let was = std::mem::replace(&mut p.health, Health::Shared);
        let orphans = std::mem::take(&mut p.orphans);
        if was != Health::Shared {
            self.counts.restored += 1;
            self.notify(process, StoreEvent::Restored);
        }
        if !orphans.is_empty() {
            self.send(process, Call::Cancel(orphans));
        }
    }

    fn notify(&mut self, process: ProcessId, event: StoreEvent) {
        self.notifications.push(Notification {
            at: self.now,
            process,
            event,
        });
    }

    /// The local budget of `process` decides `ask`: now, or later through
    /// [`poll_decision`](Self::poll_decision).
    fn ask_locally(
        &mut self,
        process: ProcessId,
        ticket: Ticket,
        ask: PermitAsk,
    ) -> Option<PermitDecision> {
        self.counts.local_decisions += 1;
        let now = self.now;
        let decision = self.process(process).local.request(now, ticket, ask);
        match decision {
            Some(_) => self.tickets.remove(&ticket),
            None => self.tickets.insert(ticket, Place::Local(process)),
        };
        self.drain_local(process);
        decision
    }

    /// Hands on the answers `process`'s local budget gave its waiters.
    fn drain_local(&mut self, process: ProcessId) {
        let mut answers = Vec::new();
        while let Some(answer) = self.process(process).local.poll_decision() {
            answers.push(answer);
        }
        for (ticket, decision) in answers {
            if self.tickets.get(&ticket) == Some(&Place::Local(process)) {
                self.tickets.remove(&ticket);
                self.decided.push_back((ticket, decision));
            }
        }
    }
}

/// Tokens as exact milli-tokens, as core and the script count them (nothing for a negative
/// or non-finite figure).
fn milli(tokens: f64) -> u64 {
    if tokens.is_finite() && tokens > 0.0 {
        (tokens * 1_000.0).round() as u64
    } else {
        0
    }
}
