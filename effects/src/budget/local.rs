//! A retry budget shared by the runners of one process: one clock, one queue, and waiting
//! retries woken the moment the budget decides.
//!
//! The arithmetic and the queue policy are core's [`RetryBudget`]; this module only gives it
//! a clock, a lock, and a way to wake the runner whose permit was decided — so the runner
//! and the simulator apply the same rules. It is also what a [`RedisBudget`] falls back to
//! when Redis fails.
//!
//! [`RedisBudget`]: super::RedisBudget

use super::BudgetStore;
use async_trait::async_trait;
use rebound_core::{
    BudgetConfig, BudgetNote, BudgetStats, Millis, PermitAsk, PermitDecision, RetryBudget, Ticket,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// A handle to one retry budget, cheap to clone, shared by every [`Runner`] of a fleet.
///
/// The budget has its own time origin (the moment it was created): every runner that shares
/// it runs its machine on that clock, so runs started at different times (seconds or hours
/// apart) agree on refill, deposits, deadlines and the provider's rate-limit window.
///
/// ```
/// use rebound_core::{BudgetConfig, MachineConfig};
/// use rebound_effects::budget::SharedBudget;
/// use rebound_effects::runner::Runner;
///
/// let budget = SharedBudget::new(BudgetConfig::default());
/// let runners: Vec<Runner> = (0..3)
///     .map(|_| Runner::new(MachineConfig::resilient(), vec![]).budget(budget.clone()))
///     .collect();
/// assert_eq!(runners.len(), 3);
/// ```
///
/// [`Runner`]: crate::runner::Runner
#[derive(Clone)]
pub struct SharedBudget {
    inner: Arc<Inner>,
}

struct Inner {
    origin: Instant,
    state: Mutex<State>,
}

struct State {
    budget: RetryBudget,
    waiters: BTreeMap<Ticket, oneshot::Sender<PermitDecision>>,
    next_ticket: u64,
}

impl State {
    /// Hands every decided permit to its waiter.
    fn dispatch(&mut self) {
        while let Some((ticket, decision)) = self.budget.poll_decision() {
            if let Some(waiter) = self.waiters.remove(&ticket) {
                // A waiter that is gone was canceled; nothing to tell.
                let _ = waiter.send(decision);
            }
        }
    }
}

impl std::fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBudget")
            .field("now", &self.now())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl SharedBudget {
    /// A budget with `config`, its clock starting now.
    #[must_use]
    pub fn new(config: BudgetConfig) -> Self {
        SharedBudget {
            inner: Arc::new(Inner {
                origin: Instant::now(),
                state: Mutex::new(State {
                    budget: RetryBudget::new(config),
                    waiters: BTreeMap::new(),
                    next_ticket: 0,
                }),
            }),
        }
    }

    /// The instant the budget's clock counts from.
    #[must_use]
    pub fn origin(&self) -> Instant {
        self.inner.origin
    }

    /// The budget's clock now.
    #[must_use]
    pub fn now(&self) -> Millis {
        self.at(Instant::now())
    }

    /// `instant` on the budget's clock.
    #[must_use]
    pub fn at(&self, instant: Instant) -> Millis {
        let elapsed = instant.saturating_duration_since(self.inner.origin);
        Millis(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }

    /// What the budget did so far.
    #[must_use]
    pub fn stats(&self) -> BudgetStats {
        self.lock().budget.stats()
    }

    /// Tokens available now.
    #[must_use]
    pub fn balance(&self) -> f64 {
        let now = self.now();
        let mut state = self.lock();
        let balance = state.budget.balance(now);
        state.dispatch();
        balance
    }

    /// Asks for a permit (times in `ask` are on the budget's clock) and waits for the answer:
    /// at once, or when a deposit, refill, a rate limit or the deadline decides it. Dropping
    /// the future takes the request out of the queue.
    pub async fn acquire(&self, ask: PermitAsk) -> PermitDecision {
        let (ticket, mut answer) = {
            let now = self.now();
            let mut state = self.lock();
            state.next_ticket += 1;
            let ticket = Ticket(state.next_ticket);
            let decided = state.budget.request(now, ticket, ask);
            let waiting = decided.is_none().then(|| {
                let (send, receive) = oneshot::channel();
                state.waiters.insert(ticket, send);
                receive
            });
            state.dispatch();
            match (decided, waiting) {
                (Some(decision), _) => return decision,
                (None, Some(receive)) => (ticket, receive),
                (None, None) => unreachable!("a request without a decision waits"),
            }
        };
        let _leave = LeaveQueue {
            budget: self,
            ticket,
        };
        loop {
            let wakeup = self.lock().budget.next_wakeup();
            let tick = async {
                match wakeup {
                    Some(at) => {
                        let when = self.inner.origin + std::time::Duration::from_millis(at.0);
                        tokio::time::sleep_until(when).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                decision = &mut answer => {
                    // The sender is dropped only with the budget's state: deny.
                    return decision.unwrap_or(PermitDecision::Denied);
                }
                () = tick => {
                    let now = self.now();
                    let mut state = self.lock();
                    state.budget.tick(now);
                    state.dispatch();
                }
            }
        }
    }

    /// Tells the budget what a machine noted (a success, a rate limit).
    pub fn record(&self, note: BudgetNote) {
        let now = self.now();
        let mut state = self.lock();
        state.budget.record(now, note);
        state.dispatch();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is plain data updated in single calls: a panic elsewhere cannot leave it
        // half-changed, so a poisoned lock is still usable.
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl BudgetStore for SharedBudget {
    fn origin(&self) -> Instant {
        SharedBudget::origin(self)
    }

    async fn acquire(&self, ask: PermitAsk) -> PermitDecision {
        SharedBudget::acquire(self, ask).await
    }

    async fn record(&self, note: BudgetNote) {
        SharedBudget::record(self, note);
    }

    fn tokens(&self) -> Option<f64> {
        Some(self.balance())
    }
}

/// Takes a request out of the queue when its waiter stops waiting for any reason.
struct LeaveQueue<'a> {
    budget: &'a SharedBudget,
    ticket: Ticket,
}

impl Drop for LeaveQueue<'_> {
    fn drop(&mut self) {
        let mut state = self.budget.lock();
        state.budget.cancel(self.ticket);
        state.waiters.remove(&self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::PermitKind;
    use std::time::Duration;

    fn config(initial: f64, success: f64, refill: f64) -> BudgetConfig {
        BudgetConfig::default()
            .with_capacity(10.0)
            .with_initial(initial)
            .with_deposit_per_request(0.0)
            .with_deposit_per_success(success)
            .with_refill_per_sec(refill)
    }

    fn charged(budget: &SharedBudget, wait_ms: u64) -> PermitAsk {
        let now = budget.now();
        PermitAsk {
            kind: PermitKind::Charged,
            target: 0,
            deadline: now.plus(wait_ms),
            since: now,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_retry_is_granted_when_a_success_arrives() {
        let budget = SharedBudget::new(config(0.0, 1.0, 0.0));
        let waiter = {
            let budget = budget.clone();
            let ask = charged(&budget, 10_000);
            tokio::spawn(async move { budget.acquire(ask).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished());
        budget.record(BudgetNote::Succeeded { target: 0 });
        assert_eq!(waiter.await.ok(), Some(PermitDecision::Granted));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_retry_is_denied_at_its_deadline_and_leaves_the_queue() {
        let budget = SharedBudget::new(config(0.0, 1.0, 0.0));
        let started = Instant::now();
        let decision = budget.acquire(charged(&budget, 2_000)).await;
        assert_eq!(decision, PermitDecision::Denied);
        assert_eq!(started.elapsed(), Duration::from_millis(2_000));
        // Nobody waits any more: a success now stays in the bucket.
        budget.record(BudgetNote::Succeeded { target: 0 });
        assert!((budget.balance() - 1.0).abs() < f64::EPSILON);
    }

    #[tokio::test(start_paused = true)]
    async fn a_canceled_waiter_takes_no_token() {
        let budget = SharedBudget::new(config(0.0, 1.0, 0.0));
        let ask = charged(&budget, 10_000);
        let canceled = tokio::time::timeout(Duration::from_millis(100), budget.acquire(ask)).await;
        assert!(canceled.is_err());
        budget.record(BudgetNote::Succeeded { target: 0 });
        assert!((budget.balance() - 1.0).abs() < f64::EPSILON);
    }

    #[tokio::test(start_paused = true)]
    async fn refill_wakes_a_waiter_without_any_other_event() {
        let budget = SharedBudget::new(config(0.0, 0.0, 2.0));
        let started = Instant::now();
        let decision = budget.acquire(charged(&budget, 5_000)).await;
        assert_eq!(decision, PermitDecision::Granted);
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }
}
