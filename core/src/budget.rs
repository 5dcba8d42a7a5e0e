//! A shared retry budget: a pure token bucket that stops many agents from multiplying an outage.

use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Parameters of a [`RetryBudget`].
///
/// Tokens are counted in thousandths so the arithmetic is exact and deterministic. Every first
/// attempt of a request deposits `deposit_per_request` tokens; time adds `refill_per_sec`;
/// every charged retry withdraws one token; the balance never exceeds `capacity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BudgetConfig {
    /// Most tokens the bucket holds.
    pub capacity: f64,
    /// Tokens in the bucket at the start.
    pub initial: f64,
    /// Tokens each first attempt deposits (0.1 lets retries add at most ~10 % load).
    pub deposit_per_request: f64,
    /// Tokens added per second of elapsed time, whatever the traffic.
    pub refill_per_sec: f64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            capacity: 10.0,
            initial: 10.0,
            deposit_per_request: 0.1,
            refill_per_sec: 1.0,
        }
    }
}

/// The budget's answer to a request for a retry permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermitDecision {
    /// A token was withdrawn: retry now.
    Granted,
    /// No token now, but refill will provide one at this time, before the asker's deadline:
    /// ask again then.
    WaitUntil(Millis),
    /// No token before the deadline: do not retry.
    Denied,
}

/// A token bucket of retries, shared by every machine in a process (or a simulation).
///
/// It is plain data fed with `now`; the driver owns it and answers the machine's
/// [`Command::AcquirePermit`](crate::Command::AcquirePermit) with
/// [`RetryBudget::try_acquire`], and calls [`RetryBudget::record_request`] for every
/// first attempt it sends. Modelled on gRPC retry throttling and Finagle's `RetryBudget`.
///
/// ```
/// use rebound_core::{BudgetConfig, Millis, PermitDecision, RetryBudget};
///
/// let mut budget = RetryBudget::new(BudgetConfig {
///     capacity: 1.0,
///     initial: 1.0,
///     deposit_per_request: 0.0,
///     refill_per_sec: 0.5,
/// });
/// assert_eq!(budget.try_acquire(Millis(0), Millis(0)), PermitDecision::Granted);
/// // Empty: refill brings the next token two seconds later.
/// assert_eq!(budget.try_acquire(Millis(0), Millis(5_000)), PermitDecision::WaitUntil(Millis(2_000)));
/// assert_eq!(budget.try_acquire(Millis(0), Millis(1_000)), PermitDecision::Denied);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryBudget {
    capacity: u64,
    deposit: u64,
    refill_per_sec: u64,
    balance: u64,
    last: Millis,
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
            deposit: milli_tokens(config.deposit_per_request),
            refill_per_sec: milli_tokens(config.refill_per_sec),
            balance: milli_tokens(config.initial).min(capacity),
            last: Millis::ZERO,
        }
    }

    /// Tokens available now (after refilling up to `now`).
    pub fn balance(&mut self, now: Millis) -> f64 {
        self.refill(now);
        self.balance as f64 / ONE as f64
    }

    fn refill(&mut self, now: Millis) {
        if now <= self.last {
            return;
        }
        let elapsed = now.since(self.last);
        let added = elapsed.saturating_mul(self.refill_per_sec) / 1_000;
        // Keep the remainder of partial milli-tokens by advancing `last` only as far as the
        // whole milli-tokens account for.
        if self.refill_per_sec == 0 {
            self.last = now;
        } else if added > 0 {
            let used_ms = added.saturating_mul(1_000) / self.refill_per_sec;
            self.last = self.last.plus(used_ms).min(now);
        }
        self.balance = self.balance.saturating_add(added).min(self.capacity);
        if self.balance == self.capacity {
            self.last = now;
        }
    }

    /// Records a first attempt: deposits `deposit_per_request` tokens.
    pub fn record_request(&mut self, now: Millis) {
        self.refill(now);
        self.balance = self.balance.saturating_add(self.deposit).min(self.capacity);
    }

    /// Asks for one retry token at `now`, willing to wait until `deadline`.
    pub fn try_acquire(&mut self, now: Millis, deadline: Millis) -> PermitDecision {
        self.refill(now);
        if self.balance >= ONE {
            self.balance -= ONE;
            return PermitDecision::Granted;
        }
        if self.refill_per_sec == 0 || ONE > self.capacity {
            return PermitDecision::Denied;
        }
        let missing = ONE - self.balance;
        let wait = missing.saturating_mul(1_000).div_ceil(self.refill_per_sec);
        let at = now.plus(wait);
        if at <= deadline {
            PermitDecision::WaitUntil(at)
        } else {
            PermitDecision::Denied
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(capacity: f64, deposit: f64, refill: f64) -> RetryBudget {
        RetryBudget::new(BudgetConfig {
            capacity,
            initial: capacity,
            deposit_per_request: deposit,
            refill_per_sec: refill,
        })
    }

    #[test]
    fn withdrawals_stop_when_the_bucket_is_empty() {
        let mut b = budget(3.0, 0.0, 0.0);
        let granted = (0..10)
            .filter(|_| b.try_acquire(Millis(0), Millis(0)) == PermitDecision::Granted)
            .count();
        assert_eq!(granted, 3);
    }

    #[test]
    fn first_attempts_deposit_fractions_of_a_token() {
        let mut b = budget(5.0, 0.25, 0.0);
        while b.try_acquire(Millis(0), Millis(0)) == PermitDecision::Granted {}
        for _ in 0..4 {
            b.record_request(Millis(1));
        }
        assert_eq!(b.try_acquire(Millis(1), Millis(1)), PermitDecision::Granted);
        assert_eq!(b.try_acquire(Millis(1), Millis(1)), PermitDecision::Denied);
    }

    #[test]
    fn refill_is_exact_over_many_small_steps() {
        let mut b = budget(100.0, 0.0, 3.0);
        while b.try_acquire(Millis(0), Millis(0)) == PermitDecision::Granted {}
        // 3 tokens/s over 10 s in 1 ms steps must add 30 tokens, not lose remainders.
        for t in 1..=10_000 {
            b.refill(Millis(t));
        }
        assert!((b.balance(Millis(10_000)) - 30.0).abs() < 0.01);
    }

    #[test]
    fn capacity_bounds_the_balance() {
        let mut b = budget(2.0, 5.0, 1000.0);
        b.record_request(Millis(10_000));
        assert!((b.balance(Millis(20_000)) - 2.0).abs() < f64::EPSILON);
    }

    #[test]
    fn hostile_parameters_do_not_panic() {
        for v in [f64::NAN, f64::INFINITY, -1.0, 0.0, 1e300] {
            let mut b = budget(v, v, v);
            b.record_request(Millis(u64::MAX));
            let _ = b.try_acquire(Millis(u64::MAX), Millis(u64::MAX));
            let _ = b.balance(Millis(0));
        }
    }
}
