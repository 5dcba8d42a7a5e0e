//! A virtual Redis holding the retry budget shared by many processes, and the processes
//! that reach it, in virtual time.
//!
//! [`RedisStore`] is a budget as the simulator's driver sees one — asked for permits
//! ([`request`](RedisStore::request)), told what machines noted
//! ([`record`](RedisStore::record)), ticked at [`next_wakeup`](RedisStore::next_wakeup), its
//! later answers drained with [`poll_decision`](RedisStore::poll_decision) — and
//! [`simulate_fleet_in_redis`](crate::driver::simulate_fleet_in_redis) runs a fleet of
//! processes on it. It is made of three parts, none of which is a copy of another:
//!
//! - **The processes' side is core's [`BudgetClient`]**, the state machine the Redis store
//!   of `rebound-effects` runs over a real connection: one per process, with a local
//!   [`RetryBudget`] it falls back to. What a process calls, when it reads its inbox,
//!   repeats a call, falls back, comes back and withdraws is decided there; this module
//!   only executes what it asks for, as the real store does.
//! - **The virtual Redis runs the budget script's operations** ([`ScriptOp`]) with core's
//!   [`RetryBudget`] as the rules, as the Lua script runs them: requests named by their
//!   process, answers kept for `waiter_stale_after` and read again by a repeated ask, each
//!   process's inbox of answers until it acknowledges them, wake-ups published for grants
//!   and waits (not denials, nor to the process whose own inbox read decided), a token
//!   granted to a request withdrawn unheard paid back.
//! - **The network** ([`RedisTiming`]): a call reaches Redis half a
//!   [`round_trip_ms`](RedisTiming::round_trip_ms) after it is made and its reply comes
//!   back half a round trip later; a wake-up takes the way back too, and reaches a process
//!   only while its subscription is live ([`subscribe_ms`](RedisTiming::subscribe_ms) after
//!   it is asked for). Slow calls ([`CallStalls`]) come back late, or past
//!   [`call_timeout_ms`](RedisTiming::call_timeout_ms) never (the client hears a
//!   timeout); a new connection may stall on its own, past
//!   [`connect_timeout_ms`](RedisTiming::connect_timeout_ms) without the call reaching
//!   Redis. Redis stopped ([`RedisOutage`]) refuses every call and breaks every
//!   subscription, and starts again empty.
//!
//! What it leaves out: a call takes the round trip, or a stall more, drawn for each call on
//! its own (on a loaded machine a process that waits for a CPU stalls all its calls at
//! once); a stall delays the reply, never the call's arrival in Redis; a connection takes no
//! round trips of its own to open, only its stall; the subscription never stalls; Redis's
//! clock is the simulation's (never stepping); an owner that stops polling is never dropped
//! from the queue as stale (the simulated processes never die); and when tokens wait for
//! the pace, `retry_in` is core's next wake-up, which also counts the earliest deadline of
//! any process's waiter.
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

use rebound_core::shared_budget::{
    Answer, BudgetClient, CallId, ClientTiming, OpId, Output, PollAnswer, RedisBudgetError,
    RedisBudgetStats, ScriptOp, ScriptReply,
};
use rebound_core::{
    BudgetConfig, BudgetNote, BudgetStats, Millis, PermitAsk, PermitDecision, PermitKind,
    RetryBudget, Ticket,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use rebound_core::shared_budget::DEADLINE_POLL_MS;

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
}

/// Calls to Redis that take longer than the round trip: each call, with a chance drawn
/// from the store's seeded RNG, stalls — its reply comes back [`ms`](Self::ms) late. A
/// reply later than [`RedisTiming::call_timeout_ms`] is lost to the process, which then does
/// what the real store does on a timeout: its [`BudgetClient`] hears the timeout.
///
/// A call on a new connection first connects, and its connecting (with reading
/// `INFO server` and loading the script) stalls with a chance of its own
/// ([`fresh_per_million`](Self::fresh_per_million)), bounded by
/// [`RedisTiming::connect_timeout_ms`] on its own, before the call's own bound starts:
/// past it the call never reaches Redis. A process connects at its first call, and again
/// whenever core's [`BudgetClient`] asks for a new connection (the repeat of a call that
/// timed out, the call after two timeouts in a row, after a broken connection) or the last
/// one did not open.
///
/// A stall delays the way back: Redis ran the call in time (a script runs in
/// microseconds), and the process, or its connection's task, heard the reply late — on a
/// loaded machine, the part of a call that waits for a CPU. So a call that timed out may
/// still have taken a token, queued a request or made a deposit in Redis, which is what
/// the client's idempotent repeat and its orphans are for.
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
    /// Charged asks given up because their call failed (a second timeout, a refusal),
    /// which Redis may have granted or queued: withdrawn once Redis answers their process
    /// again.
    pub orphaned: u64,
    /// Tokens paid back by a withdrawal: granted in Redis to a request whose process never
    /// heard the grant.
    pub repaid: u64,
}

/// A request as the virtual Redis names it: its process, and the process's number for it
/// (the real script's request id is the process's random owner id, then that number).
type Req = (ProcessId, u64);

/// An answer Redis decided, kept for `waiter_stale_after` (the script's `decided`).
#[derive(Debug, Clone, Copy)]
struct Kept {
    decision: PermitDecision,
    /// A charged permit granted: a token left the bucket (paid back if withdrawn unheard).
    took_token: bool,
    at: Millis,
}

/// What Redis holds: the budget (core's rules, as the script runs them), its queued
/// requests, the answers it decided, and each process's inbox of answers it has not
/// acknowledged.
#[derive(Debug, Clone)]
struct Server {
    budget: RetryBudget,
    up: bool,
    /// The queued requests, by the ticket the budget knows each by.
    queued: BTreeMap<Ticket, Req>,
    tickets: BTreeMap<Req, Ticket>,
    next_ticket: u64,
    answers: BTreeMap<Req, Kept>,
    /// When each answer was decided, oldest first: forgotten `waiter_stale_after` later.
    answered: VecDeque<(Millis, Req)>,
    inbox: BTreeMap<ProcessId, BTreeSet<u64>>,
}

/// What one operation did besides its reply: the processes to wake, the tokens paid back.
#[derive(Debug, Default)]
struct Effects {
    wake: BTreeSet<ProcessId>,
    repaid: u64,
}

impl Server {
    fn new(config: &BudgetConfig) -> Server {
        Server {
            budget: RetryBudget::new(config.clone()),
            up: true,
            queued: BTreeMap::new(),
            tickets: BTreeMap::new(),
            next_ticket: 0,
            answers: BTreeMap::new(),
            answered: VecDeque::new(),
            inbox: BTreeMap::new(),
        }
    }

    /// Runs one operation of the script for `process` at `now`.
    fn run(
        &mut self,
        now: Millis,
        process: ProcessId,
        op: ScriptOp,
        stale_ms: u64,
        refill_milli: u64,
        effects: &mut Effects,
    ) -> ScriptReply {
        self.forget(now, stale_ms);
        let reader = matches!(op, ScriptOp::Inbox { .. }).then_some(process);
        if !matches!(op, ScriptOp::Cancel { .. }) {
            self.budget.tick(now);
            self.settle(now, reader, effects);
        }
        let reply = match op {
            ScriptOp::Ask {
                request,
                kind,
                target,
                wait_ms,
                age_ms,
            } => {
                let req = (process, request);
                if let Some(known) = self.answers.get(&req) {
                    ask_reply(known.decision, now)
                } else if self.tickets.contains_key(&req) {
                    ScriptReply::Queued {
                        retry_in_ms: self.retry_in(now, stale_ms, refill_milli),
                    }
                } else {
                    self.next_ticket += 1;
                    let ticket = Ticket(self.next_ticket);
                    let seen = PermitAsk {
                        kind,
                        target,
                        deadline: now.plus(wait_ms),
                        since: Millis(now.0.saturating_sub(age_ms)),
                    };
                    match self.budget.request(now, ticket, seen) {
                        Some(decision) => {
                            let took_token =
                                kind == PermitKind::Charged && decision == PermitDecision::Granted;
                            self.remember(now, req, decision, took_token);
                            ask_reply(decision, now)
                        }
                        None => {
                            self.queued.insert(ticket, req);
                            self.tickets.insert(req, ticket);
                            self.settle(now, reader, effects);
                            match self.answers.get(&req) {
                                Some(known) => ask_reply(known.decision, now),
                                None => ScriptReply::Queued {
                                    retry_in_ms: self.retry_in(now, stale_ms, refill_milli),
                                },
                            }
                        }
                    }
                }
            }
            ScriptOp::Inbox { acks } => {
                for request in acks {
                    self.unremember((process, request));
                }
                let waiting = self.tickets.keys().filter(|(p, _)| *p == process).count();
                let answers = self
                    .inbox
                    .get(&process)
                    .into_iter()
                    .flatten()
                    .take(1_000)
                    .map(|r| (*r, self.poll_answer((process, *r), now)))
                    .collect();
                ScriptReply::Inbox {
                    retry_in_ms: self.retry_in(now, stale_ms, refill_milli),
                    waiting: waiting as u64,
                    answers,
                }
            }
            ScriptOp::Poll { requests } => ScriptReply::Polled {
                retry_in_ms: self.retry_in(now, stale_ms, refill_milli),
                answers: requests
                    .iter()
                    .map(|r| self.poll_answer((process, *r), now))
                    .collect(),
            },
            ScriptOp::Cancel { requests } => {
                let mut repaid = false;
                for request in requests {
                    let req = (process, request);
                    if let Some(ticket) = self.tickets.remove(&req) {
                        self.queued.remove(&ticket);
                        self.budget.cancel(ticket);
                    } else if self.answers.get(&req).is_some_and(|k| k.took_token) {
                        self.budget.repay(now);
                        effects.repaid += 1;
                        repaid = true;
                    }
                    self.unremember(req);
                }
                if repaid {
                    self.budget.tick(now);
                    self.settle(now, None, effects);
                }
                ScriptReply::Ok
            }
            ScriptOp::Succeeded { target } => {
                self.note(now, BudgetNote::Succeeded { target }, effects)
            }
            ScriptOp::RetryAnswered { target } => {
                self.note(now, BudgetNote::RetryAnswered { target }, effects)
            }
            ScriptOp::RateLimited { target, for_ms } => self.note(
                now,
                BudgetNote::RateLimited {
                    target,
                    until: now.plus(for_ms),
                },
                effects,
            ),
            ScriptOp::Stats => ScriptReply::Stats(RedisBudgetStats {
                balance_milli: milli(self.budget.balance(now)),
                stats: self.budget.stats(),
                waiting: self.budget.waiting() as u64,
                now_ms: now.0,
            }),
        };
        reply
    }

    fn note(&mut self, now: Millis, note: BudgetNote, effects: &mut Effects) -> ScriptReply {
        self.budget.record(now, note);
        self.settle(now, None, effects);
        ScriptReply::Ok
    }

    /// What a poll says of `req`.
    fn poll_answer(&self, req: Req, now: Millis) -> PollAnswer {
        match self.answers.get(&req) {
            Some(kept) => match kept.decision {
                PermitDecision::Denied => PollAnswer::Denied,
                PermitDecision::WaitUntil(until) => PollAnswer::Wait(until.since(now)),
                _ => PollAnswer::Granted,
            },
            None if self.tickets.contains_key(&req) => PollAnswer::Queued,
            None => PollAnswer::Gone,
        }
    }

    fn remember(&mut self, now: Millis, req: Req, decision: PermitDecision, took_token: bool) {
        self.answers.insert(
            req,
            Kept {
                decision,
                took_token,
                at: now,
            },
        );
        self.answered.push_back((now, req));
    }

    fn unremember(&mut self, req: Req) {
        self.answers.remove(&req);
        if let Some(inbox) = self.inbox.get_mut(&req.0) {
            inbox.remove(&req.1);
        }
    }

    /// Forgets the answers decided more than `stale_ms` ago (the script's `forget`).
    fn forget(&mut self, now: Millis, stale_ms: u64) {
        while let Some(&(at, req)) = self.answered.front() {
            if at.plus(stale_ms) >= now {
                break;
            }
            self.answered.pop_front();
            if self.answers.get(&req).is_some_and(|k| k.at == at) {
                self.unremember(req);
            }
        }
    }

    /// Takes the decisions the budget made for queued requests into their processes'
    /// inboxes, and wakes each process with a grant or a wait (not `reader`, whose inbox
    /// read is the reply).
    fn settle(&mut self, now: Millis, reader: Option<ProcessId>, effects: &mut Effects) {
        while let Some((ticket, decision)) = self.budget.poll_decision() {
            let Some(req) = self.queued.remove(&ticket) else {
                continue;
            };
            self.tickets.remove(&req);
            self.remember(now, req, decision, decision == PermitDecision::Granted);
            self.inbox.entry(req.0).or_default().insert(req.1);
            if decision != PermitDecision::Denied && reader != Some(req.0) {
                effects.wake.insert(req.0);
            }
        }
    }

    /// The script's `retry_in`: when refill alone could pay the head of the queue (or the
    /// pace let a paid one go), else `waiter_stale_after`.
    fn retry_in(&mut self, now: Millis, stale_ms: u64, refill_milli: u64) -> u64 {
        let budget = &mut self.budget;
        if budget.waiting() == 0 {
            return stale_ms;
        }
        let balance = milli(budget.balance(now));
        if balance >= 1_000 {
            return budget
                .next_wakeup()
                .map_or(stale_ms, |at| at.since(now).max(1));
        }
        if refill_milli == 0 {
            return stale_ms;
        }
        ((1_000 - balance) * 1_000).div_ceil(refill_milli).max(1)
    }
}

fn ask_reply(decision: PermitDecision, now: Millis) -> ScriptReply {
    match decision {
        PermitDecision::Denied => ScriptReply::Denied,
        PermitDecision::WaitUntil(until) => ScriptReply::Wait(until.since(now)),
        // Granted, and whatever core adds later: go ahead, as core's default.
        _ => ScriptReply::Granted,
    }
}

/// What comes due, in order of time, then of scheduling.
#[derive(Debug, Clone)]
enum Due {
    Stop,
    Restart,
    /// A call reaches Redis.
    Arrive {
        process: ProcessId,
        call: CallId,
        op: ScriptOp,
        /// How much later than the round trip its reply comes back.
        late: u64,
        /// Whether its reply comes back within the call timeout (else it is never heard).
        heard: bool,
    },
    /// A call's outcome reaches its process: a reply, a refusal, a timeout.
    Outcome {
        process: ProcessId,
        call: CallId,
        outcome: Result<ScriptReply, RedisBudgetError>,
    },
    Wake {
        process: ProcessId,
    },
    Subscribed {
        process: ProcessId,
        epoch: u64,
    },
    SubscriptionFailed {
        process: ProcessId,
        epoch: u64,
    },
}

/// One process sharing the budget: the client that decides, the local budget it falls back
/// to, and what the network knows of it.
#[derive(Debug, Clone)]
struct Process {
    client: BudgetClient,
    local: RetryBudget,
    /// The asks its client has not answered, with the caller's ticket.
    asks: BTreeMap<OpId, (Ticket, PermitAsk)>,
    /// Whether it has a connection to Redis (its next call makes one if not).
    connected: bool,
    /// Whether its subscription is live (wake-ups reach it).
    live: bool,
    /// The subscription being made, if any.
    subscribing: Option<u64>,
}

/// Where a permit request is until its answer reaches its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Shared { process: ProcessId, op: OpId },
    Local(ProcessId),
}

/// One retry budget in a virtual Redis shared by many processes, in virtual time: see the
/// [module documentation](self). Fed with `now` like core's [`RetryBudget`]; time must not
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
    due: BTreeMap<(Millis, u64), Due>,
    seq: u64,
    epochs: u64,
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
            server: Server::new(&config),
            config,
            timing,
            outage: None,
            now: Millis::ZERO,
            processes: BTreeMap::new(),
            tickets: BTreeMap::new(),
            due: BTreeMap::new(),
            seq: 0,
            epochs: 0,
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
        let mut counts = self.counts;
        counts.orphaned = self.processes.values().map(|p| p.client.orphaned()).sum();
        counts
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
            .is_none_or(|p| p.client.is_shared())
    }

    /// Asks for a permit for a machine of `process` at `now`. Returns the decision when it
    /// is made at once (its local budget decides, Redis being down); `None` otherwise: the
    /// answer comes from [`poll_decision`](Self::poll_decision) once it reaches the
    /// process, a round trip later at the soonest.
    pub fn request(
        &mut self,
        now: Millis,
        process: ProcessId,
        ticket: Ticket,
        ask: PermitAsk,
    ) -> Option<PermitDecision> {
        self.advance(now);
        let now = self.now;
        let p = self.process(process);
        let op = p.client.ask(now, ask);
        p.asks.insert(op, (ticket, ask));
        self.tickets.insert(ticket, Place::Shared { process, op });
        self.run(process);
        // Without latency the answer is already back.
        self.advance(now);
        let at = self.decided.iter().position(|(t, _)| *t == ticket)?;
        self.decided.remove(at).map(|(_, decision)| decision)
    }

    /// Tells the budget what a machine of `process` noted at `now`, as its client decides:
    /// sent to Redis (a rate limit also kept locally), or to the local budget while Redis
    /// is down.
    pub fn record(&mut self, now: Millis, process: ProcessId, note: BudgetNote) {
        self.advance(now);
        let now = self.now;
        self.process(process).client.note(now, note);
        self.run(process);
        self.advance(now);
    }

    /// `process` checks at `now` that Redis answers, as a process sharing the budget does
    /// at its start (`rebound run`, the fleet example): one call, its first, so on a new
    /// connection. A timeout or a refusal sends it to its local budget for
    /// `retry_redis_after`, with a [`StoreEvent::FellBack`]; an answer changes nothing.
    pub fn check(&mut self, now: Millis, process: ProcessId) {
        self.advance(now);
        let now = self.now;
        self.process(process).client.check(now);
        self.run(process);
        self.advance(now);
    }

    /// Withdraws a request whose machine stopped waiting. Returns whether it was waiting.
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        let Some(place) = self.tickets.remove(&ticket) else {
            return false;
        };
        let now = self.now;
        match place {
            Place::Shared { process, op } => {
                let p = self.process(process);
                p.asks.remove(&op);
                p.client.withdraw(now, op);
                self.run(process);
            }
            Place::Local(process) => {
                self.process(process).local.cancel(ticket);
            }
        }
        true
    }

    /// Lets time pass to `now`: calls and replies arrive, processes read their inboxes and
    /// are woken, local budgets refill. Drain [`poll_decision`](Self::poll_decision)
    /// afterwards.
    pub fn tick(&mut self, now: Millis) {
        self.advance(now);
    }

    /// The next answer that reached its process, in the order they did.
    pub fn poll_decision(&mut self) -> Option<(Ticket, PermitDecision)> {
        self.decided.pop_front()
    }

    /// When [`tick`](Self::tick) next has something to do: a call, reply or wake-up
    /// arriving, a timeout, a client's timer, a local budget's refill or deadline. `None`
    /// when nothing is on its way and nobody waits.
    #[must_use]
    pub fn next_wakeup(&self) -> Option<Millis> {
        let due = self.due.keys().next().map(|(at, _)| *at);
        let processes = self
            .processes
            .values()
            .flat_map(|p| [p.client.poll_timeout(), p.local.next_wakeup()])
            .flatten()
            .min();
        due.into_iter().chain(processes).min()
    }

    fn process(&mut self, id: ProcessId) -> &mut Process {
        let config = &self.config;
        let timing = self.timing;
        self.processes.entry(id).or_insert_with(|| Process {
            client: BudgetClient::new(
                ClientTiming::default()
                    .with_poll_interval_ms(timing.poll_interval_ms)
                    .with_retry_redis_after_ms(timing.retry_redis_after_ms)
                    .with_waiter_stale_after_ms(timing.waiter_stale_after_ms),
            ),
            local: RetryBudget::new(config.clone()),
            asks: BTreeMap::new(),
            connected: false,
            live: false,
            subscribing: None,
        })
    }

    fn schedule(&mut self, at: Millis, due: Due) {
        self.seq += 1;
        self.due.insert((at, self.seq), due);
    }

    /// Runs what comes due and the clients' timers, in order of time, up to `now`.
    fn advance(&mut self, now: Millis) {
        let now = now.max(self.now);
        loop {
            let due = self.due.keys().next().map(|(at, _)| *at);
            let timer = self
                .processes
                .iter()
                .filter_map(|(id, p)| p.client.poll_timeout().map(|t| (t, *id)))
                .min();
            match (due, timer) {
                (Some(at), timer) if at <= now && timer.is_none_or(|(t, _)| at <= t) => {
                    if let Some(((at, _), due)) = self.due.pop_first() {
                        self.now = self.now.max(at);
                        self.handle(due);
                    }
                }
                (_, Some((at, id))) if at <= now => {
                    self.now = self.now.max(at);
                    let now = self.now;
                    self.process(id).client.handle_timeout(now);
                    self.run(id);
                }
                _ => break,
            }
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
        let now = self.now;
        match due {
            Due::Stop => {
                self.server.up = false;
                let ids: Vec<ProcessId> = self.processes.keys().copied().collect();
                for id in ids {
                    let p = self.process(id);
                    if p.live || p.subscribing.is_some() {
                        // The subscription's stream ends.
                        p.live = false;
                        p.subscribing = None;
                        p.client.handle_subscription(now, false);
                        self.run(id);
                    }
                }
            }
            Due::Restart => self.server = Server::new(&self.config),
            Due::Arrive {
                process,
                call,
                op,
                late,
                heard,
            } => self.arrive(process, call, op, late, heard),
            Due::Outcome {
                process,
                call,
                outcome,
            } => {
                self.process(process)
                    .client
                    .handle_reply(now, call, outcome);
                self.run(process);
            }
            Due::Wake { process } => {
                let p = self.process(process);
                if p.live {
                    p.client.handle_wake(now);
                    self.counts.wakes += 1;
                    self.run(process);
                }
            }
            Due::Subscribed { process, epoch } => {
                let up = self.server.up;
                let p = self.process(process);
                if p.subscribing == Some(epoch) {
                    p.subscribing = None;
                    p.live = up;
                    p.client.handle_subscription(now, up);
                    self.run(process);
                }
            }
            Due::SubscriptionFailed { process, epoch } => {
                let p = self.process(process);
                if p.subscribing == Some(epoch) {
                    p.subscribing = None;
                    p.client.handle_subscription(now, false);
                    self.run(process);
                }
            }
        }
    }

    /// Executes what the client of `process` asks for.
    fn run(&mut self, process: ProcessId) {
        while let Some(output) = self.process(process).client.poll() {
            let now = self.now;
            match output {
                Output::Call { call, op, fresh } => self.send(process, call, op, fresh),
                Output::Subscribe => {
                    self.epochs += 1;
                    let epoch = self.epochs;
                    self.process(process).subscribing = Some(epoch);
                    if self.server.up {
                        let at = now.plus(self.timing.subscribe_ms);
                        self.schedule(at, Due::Subscribed { process, epoch });
                    } else {
                        // Refused at once.
                        self.schedule(now, Due::SubscriptionFailed { process, epoch });
                    }
                }
                Output::Answer { op, answer, .. } => {
                    let Some((ticket, ask)) = self.process(process).asks.remove(&op) else {
                        continue;
                    };
                    if self.tickets.get(&ticket) != Some(&Place::Shared { process, op }) {
                        continue;
                    }
                    match answer {
                        Answer::Decided(decision) => {
                            self.tickets.remove(&ticket);
                            self.decided.push_back((ticket, decision));
                        }
                        Answer::Local => self.ask_locally(process, ticket, ask),
                    }
                }
                Output::RecordLocally(note) => {
                    self.process(process).local.record(now, note);
                    self.drain_local(process);
                }
                Output::FellBack(_) => {
                    self.counts.fell_back += 1;
                    self.notify(process, StoreEvent::FellBack);
                }
                Output::Restored => {
                    self.counts.restored += 1;
                    self.notify(process, StoreEvent::Restored);
                }
                // A note's or a check's end: nothing waits on it here.
                _ => {}
            }
        }
    }

    /// Sends a call from `process`. On a new connection it first connects, which may stall
    /// with the chance of a new connection: past the connect timeout the process hears
    /// that, the call never reaching Redis; within it the call leaves that much later.
    /// Then, like any call, it may stall with the chance of a call: it reaches Redis half a
    /// round trip later, and its reply comes back after the rest of the round trip and its
    /// stall — or, past the call timeout, never: the process hears a timeout instead.
    fn send(&mut self, process: ProcessId, call: CallId, op: ScriptOp, fresh: bool) {
        self.counts.calls += 1;
        if matches!(op, ScriptOp::Inbox { .. }) {
            self.counts.polls += 1;
        }
        let stalls = self.timing.stalls;
        let now = self.now;
        let p = self.process(process);
        let new = fresh || !p.connected;
        p.connected = true;
        let connecting = if new && self.stalls(stalls.fresh_per_million) {
            stalls.ms
        } else {
            0
        };
        if connecting > self.timing.connect_timeout_ms {
            self.counts.timed_out += 1;
            self.process(process).connected = false;
            let timeout_ms = self.timing.connect_timeout_ms;
            let outcome = Err(RedisBudgetError::ConnectTimeout { timeout_ms });
            let at = now.plus(timeout_ms);
            self.schedule(
                at,
                Due::Outcome {
                    process,
                    call,
                    outcome,
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
            self.counts.timed_out += 1;
            let timeout_ms = self.timing.call_timeout_ms;
            let at = now.plus(connecting).plus(timeout_ms);
            let outcome = Err(RedisBudgetError::Timeout { timeout_ms });
            self.schedule(
                at,
                Due::Outcome {
                    process,
                    call,
                    outcome,
                },
            );
        }
        let at = now.plus(connecting).plus(self.timing.there());
        self.schedule(
            at,
            Due::Arrive {
                process,
                call,
                op,
                late,
                heard,
            },
        );
    }

    /// Whether a call (or its connecting) stalls, with `per_million` chances in a million.
    fn stalls(&mut self, per_million: u32) -> bool {
        per_million > 0 && self.rng.u32(..1_000_000) < per_million
    }

    /// What Redis does with a call that reaches it now, and the reply it sends back (heard
    /// by its process if it comes within the call timeout).
    fn arrive(&mut self, process: ProcessId, call: CallId, op: ScriptOp, late: u64, heard: bool) {
        let now = self.now;
        let outcome = if self.server.up {
            let mut effects = Effects::default();
            let reply = self.server.run(
                now,
                process,
                op,
                self.timing.waiter_stale_after_ms,
                milli(self.config.refill_per_sec),
                &mut effects,
            );
            self.counts.repaid += effects.repaid;
            let at = now.plus(self.timing.back());
            for owner in effects.wake {
                // Published; heard only on a live subscription.
                if self.processes.get(&owner).is_some_and(|p| p.live) {
                    self.schedule(at, Due::Wake { process: owner });
                }
            }
            Ok(reply)
        } else {
            Err(RedisBudgetError::Connection {
                message: "connection refused".to_owned(),
            })
        };
        if heard {
            let at = now.plus(self.timing.back()).plus(late);
            self.schedule(
                at,
                Due::Outcome {
                    process,
                    call,
                    outcome,
                },
            );
        }
    }

    fn notify(&mut self, process: ProcessId, event: StoreEvent) {
        self.notifications.push(Notification {
            at: self.now,
            process,
            event,
        });
    }

    /// The local budget of `process` decides `ask`: now, or later.
    fn ask_locally(&mut self, process: ProcessId, ticket: Ticket, ask: PermitAsk) {
        self.counts.local_decisions += 1;
        let now = self.now;
        match self.process(process).local.request(now, ticket, ask) {
            Some(decision) => {
                self.tickets.remove(&ticket);
                self.decided.push_back((ticket, decision));
            }
            None => {
                self.tickets.insert(ticket, Place::Local(process));
            }
        }
        self.drain_local(process);
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
