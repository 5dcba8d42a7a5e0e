//! A shared retry budget: a pure token bucket, funded by successes, with a first-come,
//! first-served queue of waiting retries and the provider's shared rate-limit state.
//!
//! One budget is shared by every machine of a fleet (a process, or a simulation). It tells a
//! partial failure from a total outage by the only signal that differs between them:
//! **successes**. While some requests succeed, their deposits keep retries funded; when
//! nothing succeeds, only first attempts and the slow refill fund them, so a total outage
//! costs a bounded number of retries however many agents share the budget.

use crate::time::Millis;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Parameters of a [`RetryBudget`].
///
/// Tokens are counted in thousandths so the arithmetic is exact and deterministic. One charged
/// retry (a retry on the policy's own backoff) costs one token; what each source of tokens
/// buys:
///
/// - `initial` and `capacity`: the burst a quiet fleet may spend at once. A lone agent never
///   waits for a token (its twelve attempts cost eleven, and its backoffs refill
///   more than that); a total outage hitting the whole fleet
///   spends at most `capacity` at once.
/// - `deposit_per_request`: every first attempt pays this much towards future retries, so a
///   busy fleet can afford retries in proportion to its traffic (0.1: about one retry per ten
///   requests) even when nothing has succeeded yet.
/// - `deposit_per_success`: every successful response pays this much. This is what keeps a
///   partial failure funded (a brownout where half the attempts work, a blip every agent must
///   retry through twice) while a total outage, where nothing succeeds, still starves. Above
///   the retries a success needs (two in the blip), the supply grows with the recovery.
/// - `deposit_per_answered_retry`: a request whose retry is being answered pays this much,
///   once: the first sign that retries work again after an outage of the whole fleet, a
///   round trip before the success itself. The default refills the whole bucket, so the
///   fleet's queued retries go out as fast as the budget's pace allows (see below), and the
///   recovery takes about as long as without a budget. A total outage, where no retry is
///   ever answered, never pays it.
/// - `refill_per_sec`: time alone pays this much, whatever the traffic, so a fleet that
///   exhausted its budget in an outage can probe again later. It is the only source that
///   funds retries during a long total outage: keep it small.
///
/// Whatever the tokens, the budget paces charged retries: in any one second it grants no
/// more permits than the fleet asked for in its busiest second of the last ten, or than the
/// provider served in its busiest second of the last ten seconds in which it served anything
/// (or than `capacity`, for a small fleet). So a queue of retries never leaves as one burst,
/// and after an outage of any length it drains at least at the rate the provider was serving
/// before it: the seconds of an outage, in which nothing succeeds, do not push the rate it
/// served out of memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BudgetConfig {
    /// Most tokens the bucket holds.
    pub capacity: f64,
    /// Tokens in the bucket at the start.
    pub initial: f64,
    /// Tokens each first attempt deposits.
    pub deposit_per_request: f64,
    /// Tokens each successful response deposits.
    pub deposit_per_success: f64,
    /// Tokens added per second of elapsed time, whatever the traffic.
    pub refill_per_sec: f64,
    /// Tokens a request deposits when one of its retries is answered (its answer began, or
    /// it succeeded): evidence that retries work right now, worth more than a first-try
    /// success. Paid once per request, on top of `deposit_per_success`.
    pub deposit_per_answered_retry: f64,
}

crate::objects_only!(BudgetConfig, "an object of budget settings");

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            capacity: 10.0,
            initial: 10.0,
            deposit_per_request: 0.1,
            deposit_per_success: 3.0,
            refill_per_sec: 0.5,
            deposit_per_answered_retry: 10.0,
        }
    }
}

impl BudgetConfig {
    /// Sets [`capacity`](Self::capacity), the most tokens the bucket holds.
    #[must_use]
    pub fn with_capacity(mut self, tokens: f64) -> Self {
        self.capacity = tokens;
        self
    }

    /// Sets [`initial`](Self::initial), the tokens in the bucket at the start.
    #[must_use]
    pub fn with_initial(mut self, tokens: f64) -> Self {
        self.initial = tokens;
        self
    }

    /// Sets [`deposit_per_request`](Self::deposit_per_request), what each first attempt
    /// pays.
    #[must_use]
    pub fn with_deposit_per_request(mut self, tokens: f64) -> Self {
        self.deposit_per_request = tokens;
        self
    }

    /// Sets [`deposit_per_success`](Self::deposit_per_success), what each success pays.
    #[must_use]
    pub fn with_deposit_per_success(mut self, tokens: f64) -> Self {
        self.deposit_per_success = tokens;
        self
    }

    /// Sets [`deposit_per_answered_retry`](Self::deposit_per_answered_retry), what a request
    /// whose retry is being answered pays.
    #[must_use]
    pub fn with_deposit_per_answered_retry(mut self, tokens: f64) -> Self {
        self.deposit_per_answered_retry = tokens;
        self
    }

    /// Sets [`refill_per_sec`](Self::refill_per_sec), what time alone pays.
    #[must_use]
    pub fn with_refill_per_sec(mut self, tokens: f64) -> Self {
        self.refill_per_sec = tokens;
        self
    }
}

/// What a permit is asked for. Only [`Charged`](PermitKind::Charged) permits cost a token;
/// every kind waits while the target is rate-limited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermitKind {
    /// The first attempt of a request: deposits `deposit_per_request`, never refused, only
    /// delayed while the target is rate-limited.
    FirstAttempt,
    /// A retry that waited out a server-given delay (or a compaction retry): not charged.
    Hinted,
    /// A retry on the policy's own backoff: costs one token, waits for one (first come,
    /// first served) until its deadline.
    #[default]
    Charged,
}

/// The budget's answer to a permit request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PermitDecision {
    /// Go ahead now (for a charged permit, a token was withdrawn).
    Granted,
    /// The target told an agent of this budget to wait until this time (a 429 with a
    /// server delay): wait until then, then ask again.
    WaitUntil(Millis),
    /// No token before the asker's deadline: do not retry.
    Denied,
}

/// Something a machine tells its budget, in [`Command::NoteBudget`](crate::Command::NoteBudget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "note")]
pub enum BudgetNote {
    /// A request to `target` succeeded: deposits `deposit_per_success`.
    Succeeded {
        /// Index of the target in the fallback chain.
        target: usize,
    },
    /// A retry to `target` is being answered (its answer began, or it succeeded): retries
    /// work right now. Deposits `deposit_per_answered_retry`.
    RetryAnswered {
        /// Index of the target in the fallback chain.
        target: usize,
    },
    /// `target` answered 429 with a delay: every agent of the budget waits until `until`
    /// before its next request to that target.
    RateLimited {
        /// Index of the target in the fallback chain.
        target: usize,
        /// When the server said it is ready again.
        until: Millis,
    },
}

/// One permit request: what for, to which target, and how long the asker will wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitAsk {
    /// What the permit is for.
    pub kind: PermitKind,
    /// Index of the target the request goes to.
    pub target: usize,
    /// The latest time a charged permit may be granted; ignored for the other kinds.
    pub deadline: Millis,
    /// When the request being retried first asked (its turn's start): the queue serves the
    /// oldest request first, so tokens finish turns instead of spreading over many.
    pub since: Millis,
}

/// Names one permit request while it waits in a budget's queue. The driver chooses it, unique
/// among the requests waiting in one budget, and maps it back to the machine that asked.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Ticket(pub u64);

/// Counters of what a budget did, for reports and invariant checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStats {
    /// Charged permits granted (tokens withdrawn).
    pub granted: u64,
    /// Charged permits denied.
    pub denied: u64,
    /// Charged permits that waited in the queue before their answer.
    pub queued: u64,
    /// Milli-tokens deposited by first attempts and successes (before the capacity cap).
    pub deposited_milli: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Waiter {
    since: Millis,
    ticket: Ticket,
    target: usize,
    deadline: Millis,
}

/// A token bucket of retries, shared by every machine of a fleet, as plain data fed with
/// `now`.
///
/// The driver owns it and forwards what the machines say: each
/// [`Command::AcquirePermit`](crate::Command::AcquirePermit) goes to
/// [`request`](Self::request), each [`Command::NoteBudget`](crate::Command::NoteBudget) to
/// [`record`](Self::record). A charged permit that finds no token waits in a first-come,
/// first-served queue, ordered by when each waiter's *request* arrived (its
/// [`PermitAsk::since`]), so the oldest turns are finished first: deposits (first attempts,
/// successes) and refill grant waiters in that order, and a waiter still unserved at its
/// deadline is denied. The driver collects those
/// later answers with [`poll_decision`](Self::poll_decision) after every call, and calls
/// [`tick`](Self::tick) at [`next_wakeup`](Self::next_wakeup) so refill and deadlines take
/// effect when nothing else happens. Time must not go backwards: an earlier `now` counts as
/// the latest one seen. Modelled on gRPC retry throttling (successes fund retries), the AWS
/// SDKs' retry quota and Finagle's `RetryBudget` (traffic funds retries).
///
/// ```
/// use rebound_core::budget::{BudgetConfig, BudgetNote, PermitAsk, PermitDecision, PermitKind, RetryBudget, Ticket};
/// use rebound_core::Millis;
///
/// let mut budget = RetryBudget::new(
///     BudgetConfig::default()
///         .with_capacity(1.0)
///         .with_initial(1.0)
///         .with_deposit_per_request(0.0)
///         .with_deposit_per_success(1.0)
///         .with_refill_per_sec(0.0),
/// );
/// let retry = PermitAsk { kind: PermitKind::Charged, target: 0, deadline: Millis(5_000), since: Millis(0) };
/// assert_eq!(budget.request(Millis(0), Ticket(1), retry), Some(PermitDecision::Granted));
/// // Empty: the next retry waits in the queue...
/// assert_eq!(budget.request(Millis(10), Ticket(2), retry), None);
/// // ...until a success pays for it.
/// budget.record(Millis(700), BudgetNote::Succeeded { target: 0 });
/// assert_eq!(budget.poll_decision(), Some((Ticket(2), PermitDecision::Granted)));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryBudget {
    capacity: u64,
    deposit_request: u64,
    deposit_success: u64,
    #[serde(default)]
    deposit_answered_retry: u64,
    refill_per_sec: u64,
    balance: u64,
    /// Refill earned but not yet a whole milli-token, in thousandths of a milli-token.
    carry: u64,
    now: Millis,
    waiting: VecDeque<Waiter>,
    /// No waiter's deadline is earlier than this: lets [`settle`](Self::settle) skip the
    /// queue when nothing can expire, which made each permit of a fleet cost a walk over
    /// everyone waiting.
    #[serde(skip)]
    deadline_floor: DeadlineFloor,
    decided: VecDeque<(Ticket, PermitDecision)>,
    rate_limited: BTreeMap<usize, Millis>,
    stats: BudgetStats,
    #[serde(default)]
    pace: Pace,
}

/// How fast the budget lets requests go: a charged retry is granted only while the permits
/// granted in the last second (first attempts and retries alike) are fewer than the most
/// permits asked for in one second of the last ten, or than the most successes in one of
/// the last ten seconds that had any (or than the bucket holds, for a small fleet). First
/// attempts and hinted retries are never held back by it. A queue of retries that formed
/// while tokens were short therefore drains at the pace the fleet asked for requests or the
/// provider last served them, never in one burst, and a fleet recovering from an outage
/// sends no more per second than it would without a budget.
///
/// The successes are remembered by the seconds that had one, not by the clock: an outage
/// longer than ten seconds, in which the fleet's waiting retries ask little and nothing
/// succeeds, would otherwise leave the pace at the bucket's capacity when the provider
/// recovers, and a large queue would drain too slowly for its waiters' deadlines.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Pace {
    /// Permits asked for in each of the last seconds: (second, count), oldest first.
    per_second: VecDeque<(u64, u64)>,
    /// Successes in each of the last seconds that had one: (second, count), oldest first,
    /// at most [`MEMORY_S`](Self::MEMORY_S) of them.
    #[serde(default)]
    served: VecDeque<(u64, u64)>,
    /// When each permit of the last second was asked for, oldest first.
    asked: VecDeque<Millis>,
    /// When each permit of the last second was granted, oldest first.
    granted: VecDeque<Millis>,
}

impl Pace {
    /// The window a grant counts in.
    const WINDOW_MS: u64 = 1_000;
    /// How many seconds of asks the pace remembers.
    const MEMORY_S: u64 = 10;

    /// A permit was asked for at `now`.
    fn ask(&mut self, now: Millis) {
        self.asked.push_back(now);
        let second = now.0 / 1_000;
        match self.per_second.back_mut() {
            Some((s, count)) if *s == second => *count += 1,
            _ => self.per_second.push_back((second, 1)),
        }
    }

    /// A permit was granted at `now`.
    fn grant(&mut self, now: Millis) {
        self.granted.push_back(now);
    }

    /// A request succeeded at `now`.
    fn serve(&mut self, now: Millis) {
        let second = now.0 / 1_000;
        match self.served.back_mut() {
            Some((s, count)) if *s == second => *count += 1,
            _ => {
                self.served.push_back((second, 1));
                if self.served.len() as u64 > Self::MEMORY_S {
                    self.served.pop_front();
                }
            }
        }
    }

    /// Whether one more grant at `now` keeps the last second's grants within the busiest
    /// second of asks or of successes (or within `floor`).
    fn may_grant(&mut self, now: Millis, floor: u64) -> bool {
        for times in [&mut self.asked, &mut self.granted] {
            while times
                .front()
                .is_some_and(|t| t.plus(Self::WINDOW_MS) <= now)
            {
                times.pop_front();
            }
        }
        let second = now.0 / 1_000;
        while self
            .per_second
            .front()
            .is_some_and(|(s, _)| s.saturating_add(Self::MEMORY_S) <= second)
        {
            self.per_second.pop_front();
        }
        let busiest = self
            .per_second
            .iter()
            .map(|(_, count)| *count)
            .max()
            .unwrap_or(0)
            .max(self.asked.len() as u64);
        let served = self
            .served
            .iter()
            .map(|(_, count)| *count)
            .max()
            .unwrap_or(0);
        (self.granted.len() as u64) < busiest.max(served).max(floor)
    }

    /// When the oldest grant of the window leaves it.
    fn next_slot(&self) -> Option<Millis> {
        self.granted.front().map(|t| t.plus(Self::WINDOW_MS))
    }
}

const ONE: u64 = 1_000;

fn milli_tokens(tokens: f64) -> u64 {
    if tokens.is_finite() && tokens > 0.0 {
        // Saturating float-to-int conversion.
        (tokens * ONE as f64).round() as u64
    } else {
        0
    }
}

impl RetryBudget {
    /// A budget with `config`; negative or non-finite parameters count as zero.
    #[must_use]
    pub fn new(config: BudgetConfig) -> Self {
        let capacity = milli_tokens(config.capacity);
        RetryBudget {
            capacity,
            deposit_request: milli_tokens(config.deposit_per_request),
            deposit_success: milli_tokens(config.deposit_per_success),
            deposit_answered_retry: milli_tokens(config.deposit_per_answered_retry),
            refill_per_sec: milli_tokens(config.refill_per_sec),
            balance: milli_tokens(config.initial).min(capacity),
            carry: 0,
            now: Millis::ZERO,
            waiting: VecDeque::new(),
            deadline_floor: DeadlineFloor::default(),
            decided: VecDeque::new(),
            rate_limited: BTreeMap::new(),
            stats: BudgetStats::default(),
            pace: Pace::default(),
        }
    }

    /// Tokens available now (after refilling up to `now`).
    pub fn balance(&mut self, now: Millis) -> f64 {
        self.tick(now);
        self.balance as f64 / ONE as f64
    }

    /// What the budget did so far.
    #[must_use]
    pub fn stats(&self) -> BudgetStats {
        self.stats
    }

    /// Charged permits waiting in the queue.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Until when `target` is rate-limited, if it is at `now`.
    #[must_use]
    pub fn rate_limited_until(&self, target: usize, now: Millis) -> Option<Millis> {
        self.rate_limited
            .get(&target)
            .copied()
            .filter(|until| *until > now.max(self.now))
    }

    /// Asks for a permit at `now`. Returns the decision when it is known at once; `None` when
    /// the request waits in the queue under `ticket`: its answer comes later from
    /// [`poll_decision`](Self::poll_decision). Drain `poll_decision` after every call: a first
    /// attempt's deposit may grant earlier waiters.
    pub fn request(
        &mut self,
        now: Millis,
        ticket: Ticket,
        ask: PermitAsk,
    ) -> Option<PermitDecision> {
        self.advance(now);
        if let Some(until) = self.rate_limited_until(ask.target, self.now) {
            self.settle();
            return Some(PermitDecision::WaitUntil(until));
        }
        let decision = match ask.kind {
            PermitKind::FirstAttempt => {
                self.pace.ask(self.now);
                self.pace.grant(self.now);
                self.deposit(self.deposit_request);
                Some(PermitDecision::Granted)
            }
            PermitKind::Hinted => {
                self.pace.ask(self.now);
                self.pace.grant(self.now);
                Some(PermitDecision::Granted)
            }
            PermitKind::Charged => {
                self.pace.ask(self.now);
                if self.waiting.is_empty() && self.balance >= ONE && self.may_grant() {
                    self.balance -= ONE;
                    self.stats.granted += 1;
                    self.pace.grant(self.now);
                    Some(PermitDecision::Granted)
                } else if ask.deadline <= self.now || !self.can_ever_pay() {
                    self.stats.denied += 1;
                    Some(PermitDecision::Denied)
                } else {
                    self.stats.queued += 1;
                    // First come, first served by the request's own arrival: behind every
                    // waiter whose request is as old or older.
                    let at = self.waiting.partition_point(|w| w.since <= ask.since);
                    self.deadline_floor.lower_to(ask.deadline);
                    self.waiting.insert(
                        at,
                        Waiter {
                            since: ask.since,
                            ticket,
                            target: ask.target,
                            deadline: ask.deadline,
                        },
                    );
                    None
                }
            }
        };
        self.settle();
        decision
    }

    /// Takes what a machine noted: a success deposits, a rate limit delays every request to
    /// that target (waiting charged permits for it are answered `WaitUntil` and leave the
    /// queue). Drain [`poll_decision`](Self::poll_decision) afterwards.
    pub fn record(&mut self, now: Millis, note: BudgetNote) {
        self.advance(now);
        match note {
            BudgetNote::Succeeded { .. } => {
                self.pace.serve(self.now);
                self.deposit(self.deposit_success);
            }
            BudgetNote::RetryAnswered { .. } => self.deposit(self.deposit_answered_retry),
            BudgetNote::RateLimited { target, until } => {
                if until > self.now {
                    let entry = self.rate_limited.entry(target).or_insert(until);
                    *entry = (*entry).max(until);
                    let until = *entry;
                    let decided = &mut self.decided;
                    self.waiting.retain(|w| {
                        let keep = w.target != target;
                        if !keep {
                            decided.push_back((w.ticket, PermitDecision::WaitUntil(until)));
                        }
                        keep
                    });
                }
            }
        }
        self.settle();
    }

    /// Lets time pass: refill, grants it pays for, and denials of waiters whose deadline came.
    /// Drain [`poll_decision`](Self::poll_decision) afterwards.
    pub fn tick(&mut self, now: Millis) {
        self.advance(now);
        self.settle();
    }

    /// Forgets a waiting request (its machine stopped waiting: canceled or ended). Returns
    /// whether it was waiting.
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        let before = self.waiting.len();
        self.waiting.retain(|w| w.ticket != ticket);
        self.waiting.len() != before
    }

    /// Takes back a charged permit that was granted but never used: its asker stopped waiting
    /// before it heard the grant (a process whose call to a shared store timed out decides
    /// locally instead). The token goes back, up to the capacity, to the next waiter if any,
    /// and the grant is no longer counted; as the Redis store's `cancel` does (`redis.lua`).
    /// Drain [`poll_decision`](Self::poll_decision) afterwards.
    ///
    /// ```
    /// use rebound_core::{BudgetConfig, Millis, PermitAsk, PermitDecision, PermitKind, RetryBudget, Ticket};
    ///
    /// let mut budget = RetryBudget::new(BudgetConfig::default().with_capacity(1.0).with_initial(1.0));
    /// let ask = PermitAsk { kind: PermitKind::Charged, target: 0, deadline: Millis(5_000), since: Millis(0) };
    /// assert_eq!(budget.request(Millis(0), Ticket(1), ask), Some(PermitDecision::Granted));
    /// assert_eq!(budget.request(Millis(0), Ticket(2), ask), None); // waits for a token
    /// budget.repay(Millis(10)); // ticket 1's asker never heard its grant
    /// assert_eq!(budget.poll_decision(), Some((Ticket(2), PermitDecision::Granted)));
    /// ```
    pub fn repay(&mut self, now: Millis) {
        self.stats.granted = self.stats.granted.saturating_sub(1);
        self.balance = self.balance.saturating_add(ONE).min(self.capacity);
        self.advance(now);
        self.settle();
    }

    /// The next answer decided for a waiting request, in the order decided.
    pub fn poll_decision(&mut self) -> Option<(Ticket, PermitDecision)> {
        self.decided.pop_front()
    }

    /// When [`tick`](Self::tick) next changes something without any other input: refill
    /// paying the head of the queue, or the earliest waiter's deadline. `None` when nobody
    /// waits.
    #[must_use]
    pub fn next_wakeup(&self) -> Option<Millis> {
        let deadline = self.waiting.iter().map(|w| w.deadline).min()?;
        if self.balance >= ONE {
            // Tokens wait for the pace: the oldest grant of the last second leaves it.
            let slot = self
                .pace
                .next_slot()
                .unwrap_or(self.now)
                .max(self.now.plus(1));
            return Some(slot.min(deadline));
        }
        let refill = (self.refill_per_sec > 0).then(|| {
            let missing = ONE.saturating_sub(self.balance);
            let needed = missing.saturating_mul(1_000).saturating_sub(self.carry);
            // Always in the future: a wakeup at `now` would change nothing.
            let ms = needed.div_ceil(self.refill_per_sec).max(1);
            self.now.plus(ms)
        });
        Some(refill.map_or(deadline, |at| at.min(deadline)))
    }

    /// Whether one more charged permit may be granted now without granting more in the
    /// last second than the pace allows (see [`Pace`]).
    fn may_grant(&mut self) -> bool {
        self.pace.may_grant(self.now, self.capacity / ONE)
    }

    fn can_ever_pay(&self) -> bool {
        self.capacity >= ONE
            && (self.refill_per_sec > 0
                || self.deposit_request > 0
                || self.deposit_success > 0
                || self.deposit_answered_retry > 0)
    }

    fn deposit(&mut self, milli: u64) {
        self.stats.deposited_milli = self.stats.deposited_milli.saturating_add(milli);
        self.balance = self.balance.saturating_add(milli).min(self.capacity);
    }

    /// Moves the clock to `now` (never back) and refills.
    fn advance(&mut self, now: Millis) {
        if now <= self.now {
            return;
        }
        let elapsed = now.since(self.now);
        self.now = now;
        self.rate_limited.retain(|_, until| *until > now);
        if self.refill_per_sec == 0 {
            return;
        }
        // Exact: what does not make a whole milli-token is carried to the next step.
        let earned = elapsed
            .saturating_mul(self.refill_per_sec)
            .saturating_add(self.carry);
        self.carry = earned % 1_000;
        self.balance = self
            .balance
            .saturating_add(earned / 1_000)
            .min(self.capacity);
        if self.balance == self.capacity {
            self.carry = 0;
        }
    }

    /// Grants waiters in order while tokens last, then denies those whose deadline came. A
    /// waiter whose deadline passed before `now` is denied first: time may have jumped past
    /// it, and a token that is here now was not necessarily here then.
    fn settle(&mut self) {
        self.expire(|deadline, now| deadline < now);
        while self.balance >= ONE && !self.waiting.is_empty() && self.may_grant() {
            let Some(head) = self.waiting.pop_front() else {
                break;
            };
            self.balance -= ONE;
            self.stats.granted += 1;
            self.pace.grant(self.now);
            self.decided
                .push_back((head.ticket, PermitDecision::Granted));
        }
        self.expire(|deadline, now| deadline <= now);
    }

    /// Denies the waiters whose deadline is `expired` at `now` (a test monotone in the
    /// deadline: if the floor has not expired, no later deadline has).
    fn expire(&mut self, expired: impl Fn(Millis, Millis) -> bool) {
        let now = self.now;
        if let DeadlineFloor(Some(floor)) = self.deadline_floor {
            if !expired(floor, now) {
                return;
            }
        }
        let decided = &mut self.decided;
        let stats = &mut self.stats;
        let mut floor = Millis(u64::MAX);
        self.waiting.retain(|w| {
            let gone = expired(w.deadline, now);
            if gone {
                stats.denied += 1;
                decided.push_back((w.ticket, PermitDecision::Denied));
            } else {
                floor = floor.min(w.deadline);
            }
            !gone
        });
        self.deadline_floor = DeadlineFloor(Some(floor));
    }
}

/// A lower bound on the deadlines of a budget's waiters (`Millis(u64::MAX)` when nobody
/// waits), or `None` when unknown: a budget just read from its serialized form, whose next
/// settle walks the queue once to learn it. A cache, not part of the budget's value:
/// equality ignores it and serde skips it.
#[derive(Debug, Clone, Copy, Default)]
struct DeadlineFloor(Option<Millis>);

impl DeadlineFloor {
    /// A waiter with `deadline` joins the queue.
    fn lower_to(&mut self, deadline: Millis) {
        if let Some(floor) = &mut self.0 {
            *floor = (*floor).min(deadline);
        }
    }
}

impl PartialEq for DeadlineFloor {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(capacity: f64, deposit: f64, success: f64, refill: f64) -> RetryBudget {
        RetryBudget::new(BudgetConfig {
            capacity,
            initial: capacity,
            deposit_per_request: deposit,
            deposit_per_success: success,
            refill_per_sec: refill,
            deposit_per_answered_retry: 0.0,
        })
    }

    fn charged(deadline: u64) -> PermitAsk {
        PermitAsk {
            kind: PermitKind::Charged,
            target: 0,
            deadline: Millis(deadline),
            since: Millis(0),
        }
    }

    fn first() -> PermitAsk {
        PermitAsk {
            kind: PermitKind::FirstAttempt,
            target: 0,
            deadline: Millis(0),
            since: Millis(0),
        }
    }

    fn drain(b: &mut RetryBudget) -> Vec<(Ticket, PermitDecision)> {
        std::iter::from_fn(|| b.poll_decision()).collect()
    }

    #[test]
    fn waiters_are_denied_at_their_deadlines_in_any_order_even_after_a_round_trip() {
        let mut b = budget(1.0, 0.0, 1.0, 0.0);
        assert_eq!(
            b.request(Millis(0), Ticket(0), charged(100)),
            Some(PermitDecision::Granted)
        );
        // Deadlines out of arrival order: the latest first, the earliest last.
        for (ticket, deadline) in [(1, 900), (2, 300), (3, 600)] {
            assert_eq!(
                b.request(Millis(1), Ticket(ticket), charged(deadline)),
                None
            );
        }
        b.tick(Millis(299));
        assert_eq!(drain(&mut b), []);
        b.tick(Millis(300));
        assert_eq!(drain(&mut b), [(Ticket(2), PermitDecision::Denied)]);
        // A budget read back from its serialized form knows no bound yet and still denies.
        let mut b: RetryBudget = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        b.tick(Millis(600));
        assert_eq!(drain(&mut b), [(Ticket(3), PermitDecision::Denied)]);
        assert_eq!(
            b.request(Millis(700), Ticket(4), charged(650)),
            Some(PermitDecision::Denied)
        );
        assert_eq!(b.request(Millis(700), Ticket(5), charged(800)), None);
        b.tick(Millis(800));
        assert_eq!(drain(&mut b), [(Ticket(5), PermitDecision::Denied)]);
        b.tick(Millis(900));
        assert_eq!(drain(&mut b), [(Ticket(1), PermitDecision::Denied)]);
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn withdrawals_stop_when_the_bucket_is_empty() {
        let mut b = budget(3.0, 0.0, 0.0, 0.0);
        let granted = (0..10)
            .filter(|i| {
                b.request(Millis(0), Ticket(*i), charged(0)) == Some(PermitDecision::Granted)
            })
            .count();
        assert_eq!(granted, 3);
    }

    #[test]
    fn first_attempts_deposit_fractions_of_a_token() {
        let mut b = budget(5.0, 0.25, 0.0, 0.0);
        while b.request(Millis(0), Ticket(0), charged(0)) == Some(PermitDecision::Granted) {}
        for _ in 0..4 {
            assert_eq!(
                b.request(Millis(1), Ticket(0), first()),
                Some(PermitDecision::Granted)
            );
        }
        assert_eq!(
            b.request(Millis(1), Ticket(1), charged(1)),
            Some(PermitDecision::Granted)
        );
        assert_eq!(
            b.request(Millis(1), Ticket(2), charged(1)),
            Some(PermitDecision::Denied)
        );
    }

    #[test]
    fn successes_grant_waiting_retries_first_come_first_served() {
        let mut b = budget(2.0, 0.0, 1.0, 0.0);
        for i in 0..2 {
            assert_eq!(
                b.request(Millis(0), Ticket(i), charged(100)),
                Some(PermitDecision::Granted)
            );
        }
        for i in 10..13 {
            assert_eq!(b.request(Millis(1), Ticket(i), charged(1_000)), None);
        }
        b.record(Millis(50), BudgetNote::Succeeded { target: 0 });
        b.record(Millis(60), BudgetNote::Succeeded { target: 0 });
        assert_eq!(
            drain(&mut b),
            [
                (Ticket(10), PermitDecision::Granted),
                (Ticket(11), PermitDecision::Granted)
            ]
        );
        // The third waits on; its deadline comes and it is denied, never granted after it.
        assert_eq!(b.next_wakeup(), Some(Millis(1_000)));
        b.tick(Millis(1_000));
        assert_eq!(drain(&mut b), [(Ticket(12), PermitDecision::Denied)]);
        b.record(Millis(1_001), BudgetNote::Succeeded { target: 0 });
        assert!(drain(&mut b).is_empty());
    }

    #[test]
    fn a_newcomer_does_not_jump_the_queue() {
        let mut b = budget(1.0, 0.0, 0.0, 1.0);
        assert_eq!(
            b.request(Millis(0), Ticket(1), charged(0)),
            Some(PermitDecision::Granted)
        );
        assert_eq!(b.request(Millis(0), Ticket(2), charged(5_000)), None);
        assert_eq!(b.next_wakeup(), Some(Millis(1_000)));
        // At 1 s refill has paid a token: it goes to the waiter, not to a newcomer.
        assert_eq!(b.request(Millis(1_000), Ticket(3), charged(5_000)), None);
        assert_eq!(drain(&mut b), [(Ticket(2), PermitDecision::Granted)]);
        b.tick(Millis(2_000));
        assert_eq!(drain(&mut b), [(Ticket(3), PermitDecision::Granted)]);
    }

    #[test]
    fn the_oldest_request_is_served_first() {
        let mut b = budget(1.0, 0.0, 1.0, 0.0);
        b.request(Millis(0), Ticket(1), charged(0));
        let ask = |since| PermitAsk {
            since: Millis(since),
            ..charged(9_000)
        };
        assert_eq!(b.request(Millis(10), Ticket(2), ask(8)), None);
        assert_eq!(b.request(Millis(20), Ticket(3), ask(1)), None);
        assert_eq!(b.request(Millis(30), Ticket(4), ask(8)), None);
        for t in [100, 200, 300] {
            b.record(Millis(t), BudgetNote::Succeeded { target: 0 });
        }
        let order: Vec<Ticket> = drain(&mut b).into_iter().map(|(t, _)| t).collect();
        assert_eq!(order, [Ticket(3), Ticket(2), Ticket(4)]);
    }

    #[test]
    fn a_rate_limit_delays_every_kind_of_request_to_its_target_only() {
        let mut b = budget(10.0, 0.1, 1.0, 0.0);
        b.record(
            Millis(100),
            BudgetNote::RateLimited {
                target: 0,
                until: Millis(5_100),
            },
        );
        for kind in [
            PermitKind::FirstAttempt,
            PermitKind::Hinted,
            PermitKind::Charged,
        ] {
            let ask = PermitAsk {
                kind,
                target: 0,
                deadline: Millis(9_000),
                since: Millis(0),
            };
            assert_eq!(
                b.request(Millis(200), Ticket(1), ask),
                Some(PermitDecision::WaitUntil(Millis(5_100)))
            );
        }
        let other = PermitAsk {
            kind: PermitKind::FirstAttempt,
            target: 1,
            deadline: Millis(0),
            since: Millis(0),
        };
        assert_eq!(
            b.request(Millis(200), Ticket(2), other),
            Some(PermitDecision::Granted)
        );
        assert_eq!(
            b.request(Millis(5_100), Ticket(3), first()),
            Some(PermitDecision::Granted)
        );
    }

    #[test]
    fn a_rate_limit_sends_waiting_retries_for_that_target_to_wait() {
        let mut b = budget(1.0, 0.0, 0.0, 0.1);
        b.request(Millis(0), Ticket(1), charged(0));
        assert_eq!(b.request(Millis(0), Ticket(2), charged(9_000)), None);
        b.record(
            Millis(10),
            BudgetNote::RateLimited {
                target: 0,
                until: Millis(3_000),
            },
        );
        assert_eq!(
            drain(&mut b),
            [(Ticket(2), PermitDecision::WaitUntil(Millis(3_000)))]
        );
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn refill_is_exact_over_many_small_steps() {
        let mut b = budget(100.0, 0.0, 0.0, 3.0);
        while b.request(Millis(0), Ticket(0), charged(0)) == Some(PermitDecision::Granted) {}
        // 3 tokens/s over 10 s in 1 ms steps must add 30 tokens, not lose remainders.
        for t in 1..=10_000 {
            b.tick(Millis(t));
        }
        assert!((b.balance(Millis(10_000)) - 30.0).abs() < 0.01);
    }

    #[test]
    fn refill_at_an_uneven_rate_is_exact_and_never_counted_twice() {
        // 2.5 tokens/s in 1 ms steps: 0.4 ms per milli-token, so every step leaves a
        // remainder. Over 4 s that is exactly 10 tokens.
        let mut b = budget(100.0, 0.0, 0.0, 2.5);
        while b.request(Millis(0), Ticket(0), charged(0)) == Some(PermitDecision::Granted) {}
        for t in 1..=4_000 {
            b.tick(Millis(t));
        }
        assert!((b.balance(Millis(4_000)) - 10.0).abs() < f64::EPSILON);
    }

    #[test]
    fn the_next_wakeup_is_in_the_future_and_a_tick_there_pays_the_head() {
        // A waiter whose token is partly refilled: the wakeup must not be `now` (a driver
        // ticking there would spin), and ticking at the wakeup must grant it.
        let mut b = budget(1.0, 0.0, 0.0, 2.5);
        b.request(Millis(0), Ticket(1), charged(0));
        b.tick(Millis(1));
        assert_eq!(b.request(Millis(1), Ticket(2), charged(60_000)), None);
        let mut now = Millis(1);
        while drain(&mut b).is_empty() {
            let at = b.next_wakeup().expect("someone waits");
            assert!(at > now, "wakeup {at} is not after {now}");
            now = at;
            b.tick(now);
        }
        assert_eq!(now, Millis(400));
    }

    #[test]
    fn capacity_bounds_the_balance() {
        let mut b = budget(2.0, 5.0, 5.0, 1000.0);
        b.request(Millis(10_000), Ticket(0), first());
        b.record(Millis(10_000), BudgetNote::Succeeded { target: 0 });
        assert!((b.balance(Millis(20_000)) - 2.0).abs() < f64::EPSILON);
    }

    #[test]
    fn a_budget_that_can_never_pay_denies_at_once() {
        let mut b = budget(0.5, 1.0, 1.0, 1.0);
        assert_eq!(
            b.request(Millis(0), Ticket(0), charged(10_000)),
            Some(PermitDecision::Denied)
        );
        let mut b = budget(1.0, 0.0, 0.0, 0.0);
        b.request(Millis(0), Ticket(0), charged(0));
        assert_eq!(
            b.request(Millis(0), Ticket(1), charged(10_000)),
            Some(PermitDecision::Denied)
        );
    }

    #[test]
    fn a_canceled_waiter_gets_no_token() {
        let mut b = budget(1.0, 0.0, 1.0, 0.0);
        b.request(Millis(0), Ticket(1), charged(0));
        assert_eq!(b.request(Millis(0), Ticket(2), charged(9_000)), None);
        assert!(b.cancel(Ticket(2)));
        b.record(Millis(5), BudgetNote::Succeeded { target: 0 });
        assert!(drain(&mut b).is_empty());
        assert!((b.balance(Millis(5)) - 1.0).abs() < f64::EPSILON);
    }

    #[test]
    fn a_grant_nobody_heard_is_repaid_to_the_next_waiter_and_then_up_to_the_capacity() {
        let mut b = budget(2.0, 0.0, 1.0, 0.0);
        assert_eq!(
            b.request(Millis(0), Ticket(1), charged(10_000)),
            Some(PermitDecision::Granted)
        );
        assert_eq!(
            b.request(Millis(0), Ticket(2), charged(10_000)),
            Some(PermitDecision::Granted)
        );
        assert_eq!(b.request(Millis(0), Ticket(3), charged(10_000)), None);
        assert_eq!(b.stats().granted, 2);
        // Ticket 1's asker never heard its grant: the token serves the waiter at once.
        b.repay(Millis(1));
        assert_eq!(drain(&mut b), vec![(Ticket(3), PermitDecision::Granted)]);
        assert_eq!(b.stats().granted, 2);
        assert_eq!(b.balance(Millis(1)), 0.0);
        // With nobody waiting it stays in the bucket, never above the capacity.
        b.repay(Millis(2));
        assert_eq!(b.balance(Millis(2)), 1.0);
        assert_eq!(b.stats().granted, 1);
        b.repay(Millis(3));
        b.repay(Millis(4));
        b.repay(Millis(5));
        assert_eq!(b.balance(Millis(5)), 2.0);
        assert_eq!(b.stats().granted, 0);
        assert!(drain(&mut b).is_empty());
    }

    #[test]
    fn hostile_parameters_do_not_panic() {
        for v in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e300] {
            let mut b = budget(v, v, v, v);
            b.request(Millis(u64::MAX), Ticket(0), first());
            let _ = b.request(Millis(u64::MAX), Ticket(1), charged(u64::MAX));
            b.record(Millis(u64::MAX), BudgetNote::Succeeded { target: 0 });
            b.record(
                Millis(u64::MAX),
                BudgetNote::RateLimited {
                    target: 0,
                    until: Millis(u64::MAX),
                },
            );
            let _ = b.next_wakeup();
            let _ = b.balance(Millis(0));
        }
    }

    #[test]
    fn an_answered_retry_pays_its_deposit_and_grants_the_queue() {
        let mut b = RetryBudget::new(
            BudgetConfig::default()
                .with_capacity(3.0)
                .with_initial(0.0)
                .with_deposit_per_request(0.0)
                .with_deposit_per_success(0.0)
                .with_refill_per_sec(0.0)
                .with_deposit_per_answered_retry(2.0),
        );
        for t in 1..=3 {
            assert_eq!(b.request(Millis(0), Ticket(t), charged(10_000)), None);
        }
        b.record(Millis(100), BudgetNote::Succeeded { target: 0 });
        assert_eq!(drain(&mut b), []);
        b.record(Millis(200), BudgetNote::RetryAnswered { target: 0 });
        assert_eq!(
            drain(&mut b),
            [
                (Ticket(1), PermitDecision::Granted),
                (Ticket(2), PermitDecision::Granted)
            ]
        );
        assert_eq!(b.waiting(), 1);
    }

    #[test]
    fn a_queue_drains_no_faster_per_second_than_the_fleet_asked_for_permits() {
        // Twenty retries ask in the first second while the bucket is empty; the next second,
        // deposits would pay for all of them at once, but the pace lets through no more in
        // a second than were asked for in the busiest second (twenty, counted with the five
        // first attempts of the next second).
        let mut b = RetryBudget::new(
            BudgetConfig::default()
                .with_capacity(10.0)
                .with_initial(0.0)
                .with_deposit_per_request(0.0)
                .with_deposit_per_success(10.0)
                .with_refill_per_sec(0.0)
                .with_deposit_per_answered_retry(0.0),
        );
        for t in 0..20 {
            assert_eq!(b.request(Millis(t * 10), Ticket(t), charged(60_000)), None);
        }
        for t in 20..25 {
            assert_eq!(
                b.request(Millis(1_500), Ticket(t), first()),
                Some(PermitDecision::Granted)
            );
        }
        // 20 tokens: only 15 of the 20 waiters may go in this second (20 asked in the
        // busiest second; 5 first attempts already went).
        b.record(Millis(1_500), BudgetNote::Succeeded { target: 0 });
        b.record(Millis(1_500), BudgetNote::Succeeded { target: 0 });
        assert_eq!(drain(&mut b).len(), 15);
        assert_eq!(b.waiting(), 5);
        // The pace says when to come back: when this second's grants leave the window.
        assert_eq!(b.next_wakeup(), Some(Millis(2_500)));
        b.tick(Millis(2_499));
        assert_eq!(drain(&mut b), []);
        b.tick(Millis(2_500));
        assert_eq!(drain(&mut b).len(), 5);
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn a_small_fleet_is_paced_only_by_its_bucket() {
        // One agent asks once a second; the pace's floor is the bucket's capacity.
        let mut b = budget(3.0, 0.0, 0.0, 0.0);
        for t in 0..3 {
            assert_eq!(
                b.request(Millis(t), Ticket(t), charged(0)),
                Some(PermitDecision::Granted)
            );
        }
    }

    #[test]
    fn a_config_written_before_answered_retries_reads_with_the_default_deposit() {
        let old = r#"{"capacity":5.0,"initial":5.0,"deposit_per_request":0.1,"deposit_per_success":3.0,"refill_per_sec":0.5}"#;
        let config: BudgetConfig = serde_json::from_str(old).expect("an older config reads");
        assert_eq!(config.capacity, 5.0);
        assert_eq!(
            config.deposit_per_answered_retry,
            BudgetConfig::default().deposit_per_answered_retry
        );
        assert_eq!(BudgetConfig::default().deposit_per_answered_retry, 10.0);
    }

    #[test]
    fn each_builder_sets_the_parameter_it_names_and_no_other() {
        let base = BudgetConfig::default();
        let built = base
            .clone()
            .with_capacity(7.0)
            .with_initial(2.0)
            .with_deposit_per_request(0.3)
            .with_deposit_per_success(4.0)
            .with_refill_per_sec(1.5)
            .with_deposit_per_answered_retry(6.0);
        assert_eq!(
            built,
            BudgetConfig {
                capacity: 7.0,
                initial: 2.0,
                deposit_per_request: 0.3,
                deposit_per_success: 4.0,
                refill_per_sec: 1.5,
                deposit_per_answered_retry: 6.0,
            }
        );
        assert_ne!(built, base);
    }

    #[test]
    fn after_ten_quiet_seconds_a_queue_drains_at_the_buckets_pace() {
        // Five retries wait from the start; eleven seconds later the asks are forgotten and a
        // deposit pays for all five: the pace's floor (the bucket's five) lets them all go.
        let mut b = RetryBudget::new(
            BudgetConfig::default()
                .with_capacity(5.0)
                .with_initial(0.0)
                .with_deposit_per_request(0.0)
                .with_deposit_per_success(5.0)
                .with_refill_per_sec(0.0)
                .with_deposit_per_answered_retry(0.0),
        );
        for t in 0..5 {
            assert_eq!(b.request(Millis(0), Ticket(t), charged(60_000)), None);
        }
        b.record(Millis(11_000), BudgetNote::Succeeded { target: 0 });
        assert_eq!(drain(&mut b).len(), 5);
        assert_eq!(b.waiting(), 0);
    }

    /// A budget whose tokens come only from answered retries (one each) and whose successes
    /// pay nothing, so that what it grants shows the pace alone: three successes in second
    /// 0, one in each of seconds 1 to `last_second`, then three retries waiting from 9.5 s.
    fn served_then_silent(last_second: u64) -> RetryBudget {
        let mut b = RetryBudget::new(
            BudgetConfig::default()
                .with_capacity(1.0)
                .with_initial(0.0)
                .with_deposit_per_request(0.0)
                .with_deposit_per_success(0.0)
                .with_refill_per_sec(0.0)
                .with_deposit_per_answered_retry(1.0),
        );
        for _ in 0..3 {
            b.record(Millis(0), BudgetNote::Succeeded { target: 0 });
        }
        for second in 1..=last_second {
            b.record(Millis(second * 1_000), BudgetNote::Succeeded { target: 0 });
        }
        for t in 0..3 {
            assert_eq!(b.request(Millis(9_500), Ticket(t), charged(100_000)), None);
        }
        b
    }

    /// Tokens one at a time from 20 s, a tenth of a second apart: what the pace grants.
    fn granted_within_a_second(b: &mut RetryBudget) -> usize {
        (0..3)
            .map(|k| {
                b.record(
                    Millis(20_000 + k * 100),
                    BudgetNote::RetryAnswered { target: 0 },
                );
                drain(b).len()
            })
            .sum()
    }

    #[test]
    fn the_busiest_second_of_successes_is_remembered_through_any_silence() {
        // Ten seconds with successes (0 to 9), the busiest with three; then ten silent
        // seconds: the asks are forgotten, the three served a second are not.
        let mut b = served_then_silent(9);
        assert_eq!(granted_within_a_second(&mut b), 3);
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn a_second_of_successes_is_forgotten_after_ten_later_seconds_with_successes() {
        // An eleventh second with a success pushes out second 0 and its three: one grant a
        // second (the bucket's floor), the next when the first is a second old.
        let mut b = served_then_silent(10);
        assert_eq!(granted_within_a_second(&mut b), 1);
        assert_eq!(b.waiting(), 2);
        b.tick(Millis(21_000));
        assert_eq!(drain(&mut b).len(), 1);
    }

    #[test]
    fn a_grant_leaves_the_pace_window_exactly_one_second_later() {
        // One ask a second (the busiest second holds one) and a one-token bucket (a floor of
        // one): one grant a second, the next exactly when the last is a second old.
        let mut b = RetryBudget::new(
            BudgetConfig::default()
                .with_capacity(1.0)
                .with_initial(0.0)
                .with_deposit_per_request(0.0)
                .with_deposit_per_success(1.0)
                .with_refill_per_sec(0.0)
                .with_deposit_per_answered_retry(0.0),
        );
        for t in 0..4 {
            assert_eq!(
                b.request(Millis(t * 1_000), Ticket(t), charged(60_000)),
                None
            );
        }
        // One success in each of two seconds: the provider served one a second too.
        b.record(Millis(3_900), BudgetNote::Succeeded { target: 0 });
        assert_eq!(drain(&mut b), [(Ticket(0), PermitDecision::Granted)]);
        // A token, but no room in this second.
        b.record(Millis(4_500), BudgetNote::Succeeded { target: 0 });
        assert_eq!(drain(&mut b), []);
        assert_eq!(b.next_wakeup(), Some(Millis(4_900)));
        b.tick(Millis(4_899));
        assert_eq!(drain(&mut b), []);
        b.tick(Millis(4_900));
        assert_eq!(drain(&mut b), [(Ticket(1), PermitDecision::Granted)]);
    }

    #[test]
    fn an_infinite_or_nan_parameter_counts_as_zero() {
        // "Negative or non-finite parameters count as zero": an infinite bucket is no bucket.
        for odd in [f64::INFINITY, f64::NAN, -3.0] {
            let mut b = RetryBudget::new(
                BudgetConfig::default()
                    .with_capacity(odd)
                    .with_initial(odd)
                    .with_deposit_per_request(0.0)
                    .with_deposit_per_success(0.0)
                    .with_refill_per_sec(0.0)
                    .with_deposit_per_answered_retry(0.0),
            );
            assert_eq!(
                b.request(Millis(0), Ticket(1), charged(5_000)),
                Some(PermitDecision::Denied),
                "{odd}"
            );
            assert_eq!(b.balance(Millis(0)), 0.0, "{odd}");
        }
    }

    #[test]
    fn a_rate_limit_window_is_over_at_its_end() {
        let mut b = budget(1.0, 0.0, 0.0, 0.0);
        b.record(
            Millis(0),
            BudgetNote::RateLimited {
                target: 0,
                until: Millis(1_000),
            },
        );
        assert_eq!(b.rate_limited_until(0, Millis(999)), Some(Millis(1_000)));
        assert_eq!(b.rate_limited_until(0, Millis(1_000)), None);
        assert_eq!(b.rate_limited_until(1, Millis(0)), None);
    }

    #[test]
    fn a_budget_forgets_a_rate_limit_window_once_it_ends() {
        // A long-lived budget (a fleet's, saved between runs) must not keep a window for every
        // target it ever saw limited: once the window ends it is gone from the saved state.
        let mut b = budget(1.0, 0.0, 0.0, 0.0);
        b.record(
            Millis(0),
            BudgetNote::RateLimited {
                target: 7,
                until: Millis(1_000),
            },
        );
        let saved = |b: &RetryBudget| serde_json::to_value(b).unwrap()["rate_limited"].clone();
        assert_eq!(saved(&b), serde_json::json!({"7": 1_000}));
        b.record(Millis(999), BudgetNote::Succeeded { target: 0 });
        assert_eq!(saved(&b), serde_json::json!({"7": 1_000}), "still limited");
        b.record(Millis(1_000), BudgetNote::Succeeded { target: 0 });
        assert_eq!(saved(&b), serde_json::json!({}), "ended at its end");
    }

    #[test]
    fn the_stats_count_each_denial_and_each_wait() {
        let mut b = budget(1.0, 0.0, 1.0, 0.0);
        assert_eq!(
            b.request(Millis(0), Ticket(1), charged(5_000)),
            Some(PermitDecision::Granted)
        );
        assert_eq!(b.request(Millis(0), Ticket(2), charged(5_000)), None);
        assert_eq!(
            b.request(Millis(0), Ticket(3), charged(0)),
            Some(PermitDecision::Denied)
        );
        assert_eq!(
            b.stats(),
            BudgetStats {
                granted: 1,
                denied: 1,
                queued: 1,
                deposited_milli: 0,
            }
        );
    }

    #[test]
    fn a_rate_limit_ending_now_sends_no_waiter_away() {
        let mut b = budget(1.0, 0.0, 1.0, 0.0);
        b.request(Millis(0), Ticket(1), charged(5_000));
        assert_eq!(b.request(Millis(0), Ticket(2), charged(5_000)), None);
        b.record(
            Millis(100),
            BudgetNote::RateLimited {
                target: 0,
                until: Millis(100),
            },
        );
        assert_eq!(drain(&mut b), []);
        assert_eq!(b.waiting(), 1);
    }

    #[test]
    fn a_bucket_funded_only_by_first_attempts_queues_a_retry() {
        // Empty, but first attempts will pay: the retry waits rather than being refused.
        let mut b = RetryBudget::new(
            BudgetConfig::default()
                .with_capacity(1.0)
                .with_initial(0.0)
                .with_deposit_per_request(0.5)
                .with_deposit_per_success(0.0)
                .with_refill_per_sec(0.0)
                .with_deposit_per_answered_retry(0.0),
        );
        assert_eq!(b.request(Millis(0), Ticket(1), charged(5_000)), None);
        for t in [2, 3] {
            b.request(Millis(10), Ticket(t), first());
        }
        assert_eq!(drain(&mut b), [(Ticket(1), PermitDecision::Granted)]);
    }

    #[test]
    fn a_waiter_whose_deadline_is_now_still_takes_a_token_that_comes_now() {
        let mut b = budget(1.0, 0.0, 1.0, 0.0);
        b.request(Millis(0), Ticket(1), charged(5_000));
        assert_eq!(b.request(Millis(0), Ticket(2), charged(800)), None);
        b.record(Millis(800), BudgetNote::Succeeded { target: 0 });
        assert_eq!(drain(&mut b), [(Ticket(2), PermitDecision::Granted)]);
    }

    #[test]
    fn a_waiter_denied_at_its_deadline_is_counted_and_a_budget_equals_its_round_trip() {
        let mut b = budget(1.0, 0.0, 1.0, 0.0);
        b.request(Millis(0), Ticket(1), charged(5_000));
        assert_eq!(b.request(Millis(0), Ticket(2), charged(800)), None);
        b.tick(Millis(800));
        assert_eq!(drain(&mut b), [(Ticket(2), PermitDecision::Denied)]);
        assert_eq!(b.stats().denied, 1);
        // The deadline cache is not part of the budget's value.
        let read: RetryBudget = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(read, b);
    }
}
