//! [`BudgetClient`]: every decision a process makes about the budget in Redis, as a state
//! machine with no I/O.

use super::script::{
    PollAnswer, RedisBudgetError, RedisBudgetStats, ScriptOp, ScriptReply, POLL_BATCH,
};
use crate::{BudgetNote, Millis, PermitAsk, PermitDecision, PermitKind};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A retry deadline the process's clock has passed by this much is over whatever Redis
/// says: a safety net for a Redis whose clock runs slow, or that took a real pause of the
/// whole fleet for a step of its clock.
pub const DEADLINE_GRACE_MS: u64 = 1_000;

/// How long a process lets pass, at least, between two polls for its waiters' deadlines: a
/// retry is denied at most this late, and a fleet whose deadlines come every millisecond
/// polls for them a few times a second, not a thousand.
pub const DEADLINE_POLL_MS: u64 = 200;

/// The pauses that shape how a process reaches the budget in Redis (the defaults of the
/// Redis store's options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientTiming {
    /// How often a process with retries waiting in the queue reads its inbox while it
    /// cannot be woken by Redis (no live subscription; default 50 ms).
    pub poll_interval_ms: u64,
    /// How long a process that fell back decides locally before trying Redis again, and how
    /// often it tries to subscribe again after a subscription failed (default 1,000 ms).
    pub retry_redis_after_ms: u64,
    /// A process with retries waiting reads its inbox at least every half of this (default
    /// 2,000 ms): Redis takes a process silent for this long for dead.
    pub waiter_stale_after_ms: u64,
}

impl Default for ClientTiming {
    fn default() -> Self {
        ClientTiming {
            poll_interval_ms: 50,
            retry_redis_after_ms: 1_000,
            waiter_stale_after_ms: 2_000,
        }
    }
}

impl ClientTiming {
    /// Sets [`poll_interval_ms`](Self::poll_interval_ms).
    #[must_use]
    pub fn with_poll_interval_ms(mut self, ms: u64) -> Self {
        self.poll_interval_ms = ms;
        self
    }

    /// Sets [`retry_redis_after_ms`](Self::retry_redis_after_ms).
    #[must_use]
    pub fn with_retry_redis_after_ms(mut self, ms: u64) -> Self {
        self.retry_redis_after_ms = ms;
        self
    }

    /// Sets [`waiter_stale_after_ms`](Self::waiter_stale_after_ms).
    #[must_use]
    pub fn with_waiter_stale_after_ms(mut self, ms: u64) -> Self {
        self.waiter_stale_after_ms = ms;
        self
    }

    /// The pause between inbox reads without a live subscription, and with one.
    fn pauses(&self) -> (u64, u64) {
        let half_stale = self.waiter_stale_after_ms / 2;
        let fast = self.poll_interval_ms.min(half_stale).max(1);
        (fast, half_stale.max(fast))
    }
}

/// Names one operation of the caller ([`BudgetClient::ask`], [`BudgetClient::note`],
/// [`BudgetClient::check`]) until its end is told ([`Output::Answer`], [`Output::Noted`],
/// [`Output::Checked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

/// Names one call of the script ([`Output::Call`]); its outcome goes back to
/// [`BudgetClient::handle_reply`] with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

/// The end of an ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The budget in Redis decided (a wait is on the process's clock).
    Decided(PermitDecision),
    /// Redis failed, or this process decides locally for now: ask the local budget (same
    /// configuration, same clock) with the same ask.
    Local,
}

/// What the caller must do, drained with [`BudgetClient::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Output {
    /// Make this call of the script and hand its outcome to
    /// [`handle_reply`](BudgetClient::handle_reply). `fresh`: on a new connection (drop
    /// the one kept: it lost a reply, broke, or went silent).
    Call {
        /// Names the call.
        call: CallId,
        /// What to call.
        op: ScriptOp,
        /// Whether to open a new connection for it.
        fresh: bool,
    },
    /// Subscribe to this process's wake-up channel, and tell
    /// [`handle_subscription`](BudgetClient::handle_subscription) when it is live and when
    /// it ends (or could not be made).
    Subscribe,
    /// The answer to an ask.
    Answer {
        /// Which ask.
        op: OpId,
        /// What to do.
        answer: Answer,
        /// For a charged permit Redis granted (a token taken): its request, to hand to
        /// [`unheard`](BudgetClient::unheard) should the asker stop waiting before it hears
        /// the answer, so the token goes back. `None` for every other answer.
        unheard: Option<u64>,
    },
    /// Tell the local budget this note too (a rate limit always; a deposit while Redis
    /// cannot take it).
    RecordLocally(BudgetNote),
    /// A note is done.
    Noted {
        /// Which note.
        op: OpId,
    },
    /// A check is done.
    Checked {
        /// Which check.
        op: OpId,
        /// Redis's figures, or why it did not answer.
        result: Result<RedisBudgetStats, RedisBudgetError>,
    },
    /// Redis failed: this process decides locally. Told once per fall, and once more when
    /// the failure turns out to be permanent.
    FellBack(RedisBudgetError),
    /// Redis answered again: the shared budget decides again.
    Restored,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Shared,
    Local {
        next_try: Millis,
    },
    /// This Redis cannot keep the budget, or the budget has other settings: local for good.
    Refused,
}

/// What a call in flight is for.
#[derive(Debug, Clone)]
enum Purpose {
    Ask { op: OpId, request: u64 },
    Note { op: OpId, note: BudgetNote },
    Inbox,
    Poll { requests: Vec<u64> },
    Cancel { requests: Vec<u64> },
    Check { op: OpId },
}

#[derive(Debug, Clone)]
struct InFlight {
    purpose: Purpose,
    op: ScriptOp,
    /// Whether it already is the second try of an idempotent call.
    repeat: bool,
}

/// An ask not yet answered: its call on the way, or waiting in Redis's queue.
#[derive(Debug, Clone, Copy)]
struct Asked {
    ask: PermitAsk,
    request: u64,
    queued: bool,
}

/// The one loop that reads the inbox of the process's queued requests.
#[derive(Debug, Clone)]
enum Loop {
    /// Not running: the next queued request starts it.
    Idle,
    /// Pausing until then, or a wake-up.
    Sleeping { until: Millis },
    /// An inbox read (then polls of requests one by one, if any) on its way.
    Reading {
        expected: BTreeSet<u64>,
        retry_in_ms: u64,
        polls: VecDeque<Vec<u64>>,
    },
}

/// A process's side of the retry budget in Redis: every decision the Redis store makes,
/// with no I/O, no clock and no threads. The Redis store of `rebound-effects` drives it
/// over a real connection; the simulator drives it over a virtual Redis.
///
/// # What it decides
///
/// - Where a decision is made: in Redis while it answers; locally (the caller's own budget,
///   [`Answer::Local`]) from a failure on, for `retry_redis_after`, then Redis again
///   ([`Output::FellBack`], [`Output::Restored`]); locally for good once Redis cannot keep
///   the budget ([`RedisBudgetError::is_permanent`]).
/// - Asks: each named by a fresh request number; an ask or an inbox read whose reply was
///   lost (a timeout, a broken connection) is made once more, on a new connection, under
///   the same name, so Redis reads what it decided instead of deciding twice; the second
///   call after two timeouts in a row opens a new connection. A charged ask given up so is
///   an *orphan*, withdrawn ([`ScriptOp::Cancel`]) once Redis answers again, which pays
///   back a token granted to it.
/// - Waiting: a charged ask queued in Redis is answered by the process's one inbox loop,
///   which reads at once when woken ([`handle_wake`](Self::handle_wake)), else after a
///   pause: the least of the script's `retry_in`, the earliest waiter's deadline (at
///   least [`DEADLINE_POLL_MS`] away) and `waiter_stale_after / 2`, or `poll_interval`
///   without a live subscription. A request Redis forgot is asked again as a newcomer; a
///   waiter past its deadline and [`DEADLINE_GRACE_MS`] is denied and withdrawn; one the
///   caller stopped waiting for ([`withdraw`](Self::withdraw)) is withdrawn.
///
/// # Driving it
///
/// Methods come in three kinds, as quinn-proto's `Connection`'s do:
///
/// - getters (`&self`): [`is_shared`](Self::is_shared), [`poll_timeout`](Self::poll_timeout),
///   [`waiting`](Self::waiting), [`orphaned`](Self::orphaned);
/// - inputs, each with `now` (ms on the process's clock, never going back): from the
///   caller [`ask`](Self::ask), [`note`](Self::note), [`check`](Self::check),
///   [`withdraw`](Self::withdraw); from the world [`handle_reply`](Self::handle_reply),
///   [`handle_wake`](Self::handle_wake), [`handle_subscription`](Self::handle_subscription),
///   [`handle_timeout`](Self::handle_timeout);
/// - the output, [`poll`](Self::poll): drain it after every input and execute each
///   [`Output`]: make the calls (each outcome back to `handle_reply`), subscribe, hand
///   answers to their askers, tell the events. Call `handle_timeout` when the clock reaches
///   [`poll_timeout`](Self::poll_timeout).
///
/// ```
/// use rebound_core::shared_budget::{Answer, BudgetClient, ClientTiming, Output, ScriptReply};
/// use rebound_core::{Millis, PermitAsk, PermitDecision, PermitKind};
///
/// let mut client = BudgetClient::new(ClientTiming::default());
/// let ask = PermitAsk { kind: PermitKind::Charged, target: 0, deadline: Millis(5_000), since: Millis(0) };
/// let op = client.ask(Millis(10), ask);
/// let Some(Output::Call { call, op: script_op, .. }) = client.poll() else { panic!() };
/// // ... the shell sends `script_op` to Redis; Redis grants it ...
/// # let _ = script_op;
/// client.handle_reply(Millis(11), call, Ok(ScriptReply::Granted));
/// assert_eq!(
///     client.poll(),
///     Some(Output::Answer { op, answer: Answer::Decided(PermitDecision::Granted), unheard: Some(1) })
/// );
/// assert_eq!(client.poll(), None);
/// ```
#[derive(Debug, Clone)]
pub struct BudgetClient {
    timing: ClientTiming,
    health: Health,
    next_request: u64,
    next_call: u64,
    next_op: u64,
    asks: BTreeMap<OpId, Asked>,
    /// The queued asks by request.
    queued: BTreeMap<u64, OpId>,
    calls: BTreeMap<CallId, InFlight>,
    /// Calls that timed out since the last answer (two in a row: a new connection).
    timeouts_in_row: u32,
    /// The next call goes on a new connection.
    fresh: bool,
    /// Requests to withdraw once Redis answers again (their asks were decided locally).
    orphans: Vec<u64>,
    orphaned: u64,
    inbox: Loop,
    /// Answers delivered, to acknowledge at the next inbox read.
    acks: Vec<u64>,
    /// A wake-up rang that no pause took yet.
    woken: bool,
    subscription: Subscription,
    /// Not before this may it subscribe again.
    subscribe_again: Option<Millis>,
    outputs: VecDeque<Output>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscription {
    Off,
    Subscribing,
    Live,
}

impl BudgetClient {
    /// A client that has not called Redis yet (and counts it as answering).
    #[must_use]
    pub fn new(timing: ClientTiming) -> BudgetClient {
        BudgetClient {
            timing,
            health: Health::Shared,
            next_request: 1,
            next_call: 0,
            next_op: 0,
            asks: BTreeMap::new(),
            queued: BTreeMap::new(),
            calls: BTreeMap::new(),
            timeouts_in_row: 0,
            fresh: false,
            orphans: Vec::new(),
            orphaned: 0,
            inbox: Loop::Idle,
            acks: Vec::new(),
            woken: false,
            subscription: Subscription::Off,
            subscribe_again: None,
            outputs: VecDeque::new(),
        }
    }

    // ----- getters -----

    /// The timing it was made with.
    #[must_use]
    pub fn timing(&self) -> ClientTiming {
        self.timing
    }

    /// Whether decisions go to Redis (`false`: this process fell back to its local budget).
    #[must_use]
    pub fn is_shared(&self) -> bool {
        self.health == Health::Shared
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due: the inbox loop's next read
    /// or a queued ask's deadline (and its grace). `None`: nothing is timed.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Millis> {
        let read = match self.inbox {
            Loop::Sleeping { until } => Some(until),
            _ => None,
        };
        let deadline = self
            .queued
            .values()
            .filter_map(|op| self.asks.get(op))
            .map(|a| a.ask.deadline.plus(DEADLINE_GRACE_MS))
            .min();
        read.into_iter().chain(deadline).min()
    }

    /// Asks not yet answered (on their way, or queued in Redis).
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.asks.len()
    }

    /// Charged asks given up after their reply was lost (Redis may have granted or queued
    /// them), since the start: each is withdrawn once Redis answers again.
    #[must_use]
    pub fn orphaned(&self) -> u64 {
        self.orphaned
    }

    // ----- inputs from the caller -----

    /// A machine of this process asks for a permit. Answered by an [`Output::Answer`] with
    /// the returned id: at once when this process decides locally, else once Redis answers.
    pub fn ask(&mut self, now: Millis, ask: PermitAsk) -> OpId {
        let op = self.op_id();
        if self.try_redis(now) {
            self.asks.insert(
                op,
                Asked {
                    ask,
                    request: 0,
                    queued: false,
                },
            );
            self.ask_shared(now, op);
        } else {
            self.answer(op, Answer::Local);
        }
        op
    }

    /// A machine of this process noted something. Ends with an [`Output::Noted`] with the
    /// returned id, after its call when Redis takes it; an [`Output::RecordLocally`] comes
    /// first for a rate limit (so a fall back keeps honouring the window) and for a deposit
    /// Redis does not take.
    pub fn note(&mut self, now: Millis, note: BudgetNote) -> OpId {
        let op = self.op_id();
        if let BudgetNote::RateLimited { .. } = note {
            self.outputs.push_back(Output::RecordLocally(note));
        }
        if !self.try_redis(now) {
            if is_deposit(note) {
                self.outputs.push_back(Output::RecordLocally(note));
            }
            self.outputs.push_back(Output::Noted { op });
            return op;
        }
        let script_op = match note {
            BudgetNote::Succeeded { target } => ScriptOp::Succeeded { target },
            BudgetNote::RetryAnswered { target } => ScriptOp::RetryAnswered { target },
            BudgetNote::RateLimited { target, until } => ScriptOp::RateLimited {
                target,
                for_ms: until.since(now),
            },
        };
        self.call(Purpose::Note { op, note }, script_op, false);
        op
    }

    /// Checks that Redis answers and can keep the budget (one call, made whatever the
    /// health), falling back or returning to Redis as a decision would. Ends with an
    /// [`Output::Checked`] with the returned id.
    pub fn check(&mut self, _now: Millis) -> OpId {
        let op = self.op_id();
        self.call(Purpose::Check { op }, ScriptOp::Stats, false);
        op
    }

    /// The asker stopped waiting (its run was canceled): the ask is forgotten, and a request
    /// Redis may hold for it is withdrawn (a token granted to it too late is paid back).
    /// Nothing for an ask already answered or unknown.
    pub fn withdraw(&mut self, _now: Millis, op: OpId) {
        let Some(asked) = self.asks.remove(&op) else {
            return;
        };
        if asked.queued {
            self.queued.remove(&asked.request);
            self.cancel(vec![asked.request]);
        } else if asked.ask.kind == PermitKind::Charged {
            // On its way: Redis may queue it or grant it a token nobody uses.
            self.cancel(vec![asked.request]);
        }
    }

    /// The asker of an ask answered with a grant stopped waiting before it heard it (the
    /// answer was on its way to it): `request`, named by the answer's
    /// [`unheard`](Output::Answer::unheard), is withdrawn, so the token Redis granted to it
    /// goes back instead of being spent on nothing.
    pub fn unheard(&mut self, _now: Millis, request: u64) {
        self.acks.retain(|r| *r != request);
        self.cancel(vec![request]);
    }

    // ----- inputs from the world -----

    /// The outcome of a call: Redis's reply, or what went wrong (a timeout, a broken
    /// connection, a refusal, a reply that could not be read). Unknown calls are ignored.
    pub fn handle_reply(
        &mut self,
        now: Millis,
        call: CallId,
        outcome: Result<ScriptReply, RedisBudgetError>,
    ) {
        let Some(flight) = self.calls.remove(&call) else {
            return;
        };
        match &outcome {
            Ok(_) => self.timeouts_in_row = 0,
            Err(RedisBudgetError::Connection { .. }) => self.fresh = true,
            Err(RedisBudgetError::Timeout { .. }) => {
                // One late reply is a busy Redis (or a busy machine): a new connection would
                // only add a connect and a handshake to the wait. Two in a row may be a
                // connection that went silent: the next call starts afresh.
                if self.timeouts_in_row >= 1 {
                    self.timeouts_in_row = 0;
                    self.fresh = true;
                } else {
                    self.timeouts_in_row += 1;
                }
            }
            Err(_) => {}
        }
        if let Err(e) = &outcome {
            if e.may_be_lost() && !flight.repeat && flight.op.is_idempotent() {
                // Once more, on a new connection (the one that lost a reply may have gone
                // silent), under the same name: Redis reads what it decided.
                self.timeouts_in_row = 0;
                self.fresh = true;
                self.call(flight.purpose, flight.op, true);
                return;
            }
        }
        match flight.purpose {
            Purpose::Ask { op, request } => self.ask_replied(now, op, request, outcome),
            Purpose::Note { op, note } => {
                match outcome {
                    Ok(ScriptReply::Ok) => self.succeeded(now),
                    other => {
                        self.failed(now, error_of(other));
                        if is_deposit(note) {
                            self.outputs.push_back(Output::RecordLocally(note));
                        }
                    }
                }
                self.outputs.push_back(Output::Noted { op });
            }
            Purpose::Inbox => self.inbox_replied(now, outcome),
            Purpose::Poll { requests } => self.poll_replied(now, requests, outcome),
            Purpose::Cancel { requests } => {
                if !matches!(outcome, Ok(ScriptReply::Ok)) {
                    self.orphans.extend(requests);
                }
            }
            Purpose::Check { op } => {
                let result = match outcome {
                    Ok(ScriptReply::Stats(stats)) => Ok(stats),
                    other => Err(error_of(other)),
                };
                match &result {
                    Ok(_) => self.succeeded(now),
                    Err(e) => self.failed(now, e.clone()),
                }
                self.outputs.push_back(Output::Checked { op, result });
            }
        }
    }

    /// Redis published on this process's channel (it answered one of its requests): the
    /// inbox loop reads now if it pauses, else at the end of what it does.
    pub fn handle_wake(&mut self, now: Millis) {
        if matches!(self.inbox, Loop::Sleeping { .. }) {
            self.read_inbox(now);
        } else {
            self.woken = true;
        }
    }

    /// The subscription asked for by [`Output::Subscribe`] is live (`true`), or ended or
    /// could not be made (`false`). Either rings the inbox loop, so it reads its inbox and
    /// its pace again.
    pub fn handle_subscription(&mut self, now: Millis, live: bool) {
        self.subscription = if live {
            Subscription::Live
        } else {
            Subscription::Off
        };
        self.handle_wake(now);
    }

    /// The clock reached [`poll_timeout`](Self::poll_timeout) (or passed it): queued asks
    /// past their deadline and its grace are denied and withdrawn; the inbox loop reads.
    pub fn handle_timeout(&mut self, now: Millis) {
        let over: Vec<(u64, OpId)> = self
            .queued
            .iter()
            .filter(|(_, op)| {
                self.asks
                    .get(op)
                    .is_some_and(|a| now >= a.ask.deadline.plus(DEADLINE_GRACE_MS))
            })
            .map(|(r, op)| (*r, *op))
            .collect();
        for (request, op) in over {
            self.queued.remove(&request);
            self.asks.remove(&op);
            self.answer(op, Answer::Decided(PermitDecision::Denied));
            self.cancel(vec![request]);
        }
        if let Loop::Sleeping { until } = self.inbox {
            if now >= until {
                self.read_inbox(now);
            }
        }
    }

    // ----- output -----

    /// The next thing to do, in order.
    pub fn poll(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    // ----- the decisions -----

    fn op_id(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }

    fn answer(&mut self, op: OpId, answer: Answer) {
        self.outputs.push_back(Output::Answer {
            op,
            answer,
            unheard: None,
        });
    }

    /// Answers `op` with what Redis decided for its `request`.
    fn answer_shared(
        &mut self,
        op: OpId,
        kind: PermitKind,
        request: u64,
        decision: PermitDecision,
    ) {
        let unheard =
            (kind == PermitKind::Charged && decision == PermitDecision::Granted).then_some(request);
        self.outputs.push_back(Output::Answer {
            op,
            answer: Answer::Decided(decision),
            unheard,
        });
    }

    fn call(&mut self, purpose: Purpose, op: ScriptOp, repeat: bool) {
        self.next_call += 1;
        let call = CallId(self.next_call);
        let fresh = std::mem::take(&mut self.fresh);
        self.calls.insert(
            call,
            InFlight {
                purpose,
                op: op.clone(),
                repeat,
            },
        );
        self.outputs.push_back(Output::Call { call, op, fresh });
    }

    fn cancel(&mut self, requests: Vec<u64>) {
        for chunk in requests.chunks(POLL_BATCH) {
            self.call(
                Purpose::Cancel {
                    requests: chunk.to_vec(),
                },
                ScriptOp::Cancel {
                    requests: chunk.to_vec(),
                },
                false,
            );
        }
    }

    /// Whether this decision should try Redis: always while shared; once per
    /// `retry_redis_after` while fallen back; never once refused.
    fn try_redis(&mut self, now: Millis) -> bool {
        match self.health {
            Health::Shared => true,
            Health::Refused => false,
            Health::Local { next_try } if now < next_try => false,
            Health::Local { .. } => {
                self.health = Health::Local {
                    next_try: now.plus(self.timing.retry_redis_after_ms),
                };
                true
            }
        }
    }

    fn failed(&mut self, now: Millis, error: RedisBudgetError) {
        if self.health == Health::Refused {
            return;
        }
        let next = if error.is_permanent() {
            Health::Refused
        } else {
            Health::Local {
                next_try: now.plus(self.timing.retry_redis_after_ms),
            }
        };
        let was = std::mem::replace(&mut self.health, next);
        if was == Health::Shared || next == Health::Refused {
            self.outputs.push_back(Output::FellBack(error));
        }
    }

    fn succeeded(&mut self, _now: Millis) {
        if self.health == Health::Refused {
            return;
        }
        let was = std::mem::replace(&mut self.health, Health::Shared);
        if matches!(was, Health::Local { .. }) {
            self.outputs.push_back(Output::Restored);
        }
        let orphans = std::mem::take(&mut self.orphans);
        if !orphans.is_empty() {
            self.cancel(orphans);
        }
    }

    /// Sends the ask `op` to Redis under a new request (a charged one past its deadline and
    /// grace is denied without a call).
    fn ask_shared(&mut self, now: Millis, op: OpId) {
        let Some(asked) = self.asks.get_mut(&op) else {
            return;
        };
        let ask = asked.ask;
        if ask.kind == PermitKind::Charged && now > ask.deadline.plus(DEADLINE_GRACE_MS) {
            self.asks.remove(&op);
            self.answer(op, Answer::Decided(PermitDecision::Denied));
            return;
        }
        let request = self.next_request;
        self.next_request += 1;
        asked.request = request;
        asked.queued = false;
        let script_op = ScriptOp::Ask {
            request,
            kind: ask.kind,
            target: ask.target,
            wait_ms: ask.deadline.since(now),
            age_ms: now.since(ask.since),
        };
        self.call(Purpose::Ask { op, request }, script_op, false);
    }

    fn ask_replied(
        &mut self,
        now: Millis,
        op: OpId,
        request: u64,
        outcome: Result<ScriptReply, RedisBudgetError>,
    ) {
        let Some(asked) = self
            .asks
            .get(&op)
            .copied()
            .filter(|a| a.request == request && !a.queued)
        else {
            // Withdrawn while on its way (its request was withdrawn then).
            return;
        };
        let charged = asked.ask.kind == PermitKind::Charged;
        let decision = match outcome {
            Ok(ScriptReply::Granted) => PermitDecision::Granted,
            Ok(ScriptReply::Denied) => PermitDecision::Denied,
            Ok(ScriptReply::Wait(ms)) => PermitDecision::WaitUntil(now.plus(ms)),
            Ok(ScriptReply::Queued { retry_in_ms }) if charged => {
                self.succeeded(now);
                if let Some(a) = self.asks.get_mut(&op) {
                    a.queued = true;
                }
                self.queued.insert(request, op);
                if matches!(self.inbox, Loop::Idle) {
                    let (fast, _) = self.timing.pauses();
                    self.pause(now, retry_in_ms.clamp(1, fast));
                }
                return;
            }
            Err(e) => {
                if charged {
                    // Redis may have granted or queued it: a token it took goes back once
                    // Redis answers again.
                    self.orphans.push(request);
                    self.orphaned += 1;
                }
                self.asks.remove(&op);
                self.failed(now, e);
                self.answer(op, Answer::Local);
                return;
            }
            Ok(other) => {
                self.asks.remove(&op);
                self.failed(now, malformed(&other));
                self.answer(op, Answer::Local);
                return;
            }
        };
        self.asks.remove(&op);
        self.succeeded(now);
        self.answer_shared(op, asked.ask.kind, request, decision);
    }

    /// The inbox loop pauses `ms` (keeping the process subscribed), or reads at once when a
    /// wake-up already rang.
    fn pause(&mut self, now: Millis, ms: u64) {
        self.listen(now);
        if self.woken {
            self.read_inbox(now);
        } else {
            self.inbox = Loop::Sleeping {
                until: now.plus(ms),
            };
        }
    }

    /// Keeps this process subscribed to its wake-up channel while its loop runs: subscribes
    /// when no subscription is live or being made, at most once per `retry_redis_after`.
    fn listen(&mut self, now: Millis) {
        if self.subscription != Subscription::Off || self.subscribe_again.is_some_and(|t| now < t) {
            return;
        }
        self.subscribe_again = Some(now.plus(self.timing.retry_redis_after_ms));
        self.subscription = Subscription::Subscribing;
        self.outputs.push_back(Output::Subscribe);
    }

    /// The inbox loop's turn: it ends when no waiter is left, else reads the inbox.
    fn read_inbox(&mut self, _now: Millis) {
        self.woken = false;
        if self.queued.is_empty() {
            self.inbox = Loop::Idle;
            return;
        }
        let expected = self.queued.keys().copied().collect();
        let take = self.acks.len().min(POLL_BATCH);
        let acks: Vec<u64> = self.acks.drain(..take).collect();
        self.inbox = Loop::Reading {
            expected,
            retry_in_ms: 0,
            polls: VecDeque::new(),
        };
        self.call(Purpose::Inbox, ScriptOp::Inbox { acks }, false);
    }

    fn inbox_replied(&mut self, now: Millis, outcome: Result<ScriptReply, RedisBudgetError>) {
        let (retry_in_ms, waiting, answers) = match outcome {
            Ok(ScriptReply::Inbox {
                retry_in_ms,
                waiting,
                answers,
            }) => (retry_in_ms, waiting, answers),
            other => return self.poll_failed(now, error_of(other)),
        };
        self.succeeded(now);
        let answered: BTreeSet<u64> = answers.iter().map(|(r, _)| *r).collect();
        self.deliver(now, answers);
        let Loop::Reading { expected, .. } = &self.inbox else {
            return;
        };
        let unanswered: Vec<u64> = expected.difference(&answered).copied().collect();
        let polls: VecDeque<Vec<u64>> = if waiting < unanswered.len() as u64 {
            // Some of ours are neither waiting nor answered: ask for each.
            unanswered.chunks(POLL_BATCH).map(<[u64]>::to_vec).collect()
        } else {
            VecDeque::new()
        };
        self.inbox = Loop::Reading {
            expected: BTreeSet::new(),
            retry_in_ms,
            polls,
        };
        self.next_poll(now);
    }

    /// Sends the next poll of requests one by one, or ends the turn.
    fn next_poll(&mut self, now: Millis) {
        let Loop::Reading {
            polls, retry_in_ms, ..
        } = &mut self.inbox
        else {
            return;
        };
        let retry_in_ms = *retry_in_ms;
        if let Some(requests) = polls.pop_front() {
            self.call(
                Purpose::Poll {
                    requests: requests.clone(),
                },
                ScriptOp::Poll { requests },
                false,
            );
            return;
        }
        let (fast, slow) = self.timing.pauses();
        let most = if self.subscription == Subscription::Live {
            slow
        } else {
            fast
        };
        let deadline = self
            .queued
            .values()
            .filter_map(|op| self.asks.get(op))
            .map(|a| a.ask.deadline)
            .min()
            .map_or(u64::MAX, |d| d.since(now).max(DEADLINE_POLL_MS));
        self.pause(now, most.min(retry_in_ms.max(1)).min(deadline));
    }

    fn poll_replied(
        &mut self,
        now: Millis,
        requests: Vec<u64>,
        outcome: Result<ScriptReply, RedisBudgetError>,
    ) {
        match outcome {
            Ok(ScriptReply::Polled { answers, .. }) if answers.len() == requests.len() => {
                self.deliver(now, requests.into_iter().zip(answers).collect());
                self.next_poll(now);
            }
            other => self.poll_failed(now, error_of(other)),
        }
    }

    /// Hands answers to their waiters; acknowledges those delivered at the next read. An
    /// answer whose waiter stopped waiting is not acknowledged: its withdrawal pays back a
    /// token it was granted.
    fn deliver(&mut self, now: Millis, answers: Vec<(u64, PollAnswer)>) {
        for (request, answer) in answers {
            let decided = match answer {
                PollAnswer::Queued => continue,
                PollAnswer::Granted => Some(PermitDecision::Granted),
                PollAnswer::Denied => Some(PermitDecision::Denied),
                PollAnswer::Wait(ms) => Some(PermitDecision::WaitUntil(now.plus(ms))),
                PollAnswer::Gone => None,
            };
            let Some(op) = self.queued.remove(&request) else {
                continue;
            };
            self.acks.push(request);
            match decided {
                Some(decision) => {
                    let kind = self
                        .asks
                        .remove(&op)
                        .map_or(PermitKind::Charged, |a| a.ask.kind);
                    self.answer_shared(op, kind, request, decision);
                }
                // Redis forgot the request (restarted empty, or it went stale): ask again,
                // as a newcomer with the same request age.
                None => self.ask_shared(now, op),
            }
        }
    }

    /// The inbox read failed: every waiter of this process decides locally, and its request
    /// is withdrawn from Redis (once Redis answers, if not now).
    fn poll_failed(&mut self, now: Millis, error: RedisBudgetError) {
        self.failed(now, error);
        let queued = std::mem::take(&mut self.queued);
        let mut requests = Vec::new();
        for (request, op) in queued {
            self.asks.remove(&op);
            self.answer(op, Answer::Local);
            requests.push(request);
        }
        self.inbox = Loop::Idle;
        if !requests.is_empty() {
            self.cancel(requests);
        }
    }
}

fn is_deposit(note: BudgetNote) -> bool {
    matches!(
        note,
        BudgetNote::Succeeded { .. } | BudgetNote::RetryAnswered { .. }
    )
}

fn malformed(reply: &ScriptReply) -> RedisBudgetError {
    RedisBudgetError::malformed(&format!("{reply:?}"))
}

fn error_of(outcome: Result<ScriptReply, RedisBudgetError>) -> RedisBudgetError {
    match outcome {
        Err(e) => e,
        Ok(reply) => malformed(&reply),
    }
}
