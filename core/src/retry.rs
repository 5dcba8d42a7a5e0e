//! Retry policy: how many attempts, how long to wait between them, and how server hints win.

use crate::failure::ProviderFailure;
use serde::{Deserialize, Serialize};

/// How provider failures are retried.
///
/// `max_attempts` counts the first attempt: the default 4 is one try plus up to three retries.
/// The delay before retry `n` (n = 1 for the first retry) is
/// `min(max_delay_ms, initial_delay_ms * multiplier^(n-1))`, and with `jitter` a value drawn
/// uniformly from `[delay / 2, delay]` with the machine's seeded RNG ("equal jitter": agents
/// that failed together spread out, but nobody retries much sooner than the policy says).
///
/// A server hint wins over the computed delay:
/// - an explicit `retry-after` / `retry-after-ms` is used as it is when it is at most
///   `max_retry_after_ms`. **Above the cap the machine does not retry this target at all**:
///   retrying sooner than the server asked only earns another refusal, and waiting longer than
///   the cap is what the cap forbids, so the failure goes to the fallback target or to the
///   embedder at once ([`RetryDelay::HintTooLong`]).
/// - a rate-limit reset time (a weaker hint: the window's full reset, not the earliest moment a
///   request can succeed) is used when at most the cap, and ignored in favour of the computed
///   delay when above it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryConfig {
    /// Attempts per request, counting the first. Values below 1 are treated as 1.
    pub max_attempts: u32,
    /// Delay before the first retry, in ms.
    pub initial_delay_ms: u64,
    /// Upper bound of the computed delay, in ms.
    pub max_delay_ms: u64,
    /// Growth factor per retry; values below 1 (or not finite) are treated as 1.
    pub multiplier: f64,
    /// Whether to jitter computed delays (server hints are never jittered).
    pub jitter: bool,
    /// The longest server-requested delay the policy will honour, in ms.
    pub max_retry_after_ms: u64,
    /// Empty assistant responses tolerated per request before giving up (a small cap: an
    /// empty answer is more often the model's choice than a fault).
    pub max_empty_responses: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 4,
            initial_delay_ms: 500,
            max_delay_ms: 10_000,
            multiplier: 2.0,
            jitter: true,
            max_retry_after_ms: 60_000,
            max_empty_responses: 2,
        }
    }
}

/// The delay chosen before a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryDelay {
    /// The policy's own (jittered) exponential backoff.
    Backoff(u64),
    /// The server's hint, within the cap.
    ServerHint(u64),
    /// The server asked for more than `max_retry_after_ms`: do not retry this target.
    HintTooLong(u64),
}

impl RetryDelay {
    /// The delay to wait, or `None` when the retry must not happen.
    #[must_use]
    pub fn wait_ms(self) -> Option<u64> {
        match self {
            RetryDelay::Backoff(ms) | RetryDelay::ServerHint(ms) => Some(ms),
            RetryDelay::HintTooLong(_) => None,
        }
    }
}

impl RetryConfig {
    /// `max_attempts`, at least 1.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }

    /// The un-jittered delay before retry `retry` (1 = first retry).
    #[must_use]
    pub fn base_delay_ms(&self, retry: u32) -> u64 {
        let multiplier = if self.multiplier.is_finite() && self.multiplier >= 1.0 {
            self.multiplier
        } else {
            1.0
        };
        let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        let delay = self.initial_delay_ms as f64 * multiplier.powi(exponent);
        let capped = delay.min(self.max_delay_ms as f64);
        if capped.is_finite() && capped >= 0.0 {
            // In range by the `min` above; `as` saturates anyway.
            capped as u64
        } else {
            self.max_delay_ms
        }
    }

    /// The computed delay before retry `retry`, jittered with `rng` when `jitter` is on.
    pub fn backoff_ms(&self, retry: u32, rng: &mut fastrand::Rng) -> u64 {
        let base = self.base_delay_ms(retry);
        if self.jitter && base > 0 {
            // Uniform in [base - base/2, base].
            base - rng.u64(0..=base / 2)
        } else {
            base
        }
    }

    /// The delay before retry `retry` after `failure`, honouring server hints as documented on
    /// [`RetryConfig`].
    pub fn delay_for(
        &self,
        retry: u32,
        failure: &ProviderFailure,
        rng: &mut fastrand::Rng,
    ) -> RetryDelay {
        if let Some(hint) = failure.retry_after_ms {
            return if hint <= self.max_retry_after_ms {
                RetryDelay::ServerHint(hint)
            } else {
                RetryDelay::HintTooLong(hint)
            };
        }
        match failure.rate_limit_reset_ms {
            Some(reset) if reset <= self.max_retry_after_ms => RetryDelay::ServerHint(reset),
            _ => RetryDelay::Backoff(self.backoff_ms(retry, rng)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    fn failure() -> ProviderFailure {
        ProviderFailure::new(FailureKind::Unavailable, "Overloaded").with_status(529)
    }

    #[test]
    fn defaults_match_the_design() {
        let c = RetryConfig::default();
        assert_eq!(
            (
                c.max_attempts,
                c.initial_delay_ms,
                c.max_delay_ms,
                c.max_retry_after_ms
            ),
            (4, 500, 10_000, 60_000)
        );
        assert!(c.jitter);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_without_jitter() {
        let c = RetryConfig {
            jitter: false,
            ..RetryConfig::default()
        };
        let mut rng = fastrand::Rng::with_seed(1);
        let delays: Vec<u64> = (1..=7).map(|n| c.backoff_ms(n, &mut rng)).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
    }

    #[test]
    fn jittered_backoff_stays_within_half_and_full_delay() {
        let c = RetryConfig::default();
        let mut rng = fastrand::Rng::with_seed(7);
        for n in 1..=10 {
            let base = c.base_delay_ms(n);
            for _ in 0..200 {
                let d = c.backoff_ms(n, &mut rng);
                assert!(
                    d >= base - base / 2 && d <= base,
                    "retry {n}: {d} vs {base}"
                );
            }
        }
    }

    #[test]
    fn absurd_multipliers_and_huge_retry_numbers_do_not_overflow() {
        for multiplier in [f64::NAN, f64::INFINITY, -3.0, 0.0, 1e300] {
            let c = RetryConfig {
                multiplier,
                jitter: false,
                ..RetryConfig::default()
            };
            let d = c.base_delay_ms(u32::MAX);
            assert!(d <= c.max_delay_ms, "{multiplier}: {d}");
        }
    }

    #[test]
    fn retry_after_within_the_cap_wins_over_backoff() {
        let c = RetryConfig::default();
        let mut f = failure();
        f.retry_after_ms = Some(5_000);
        f.rate_limit_reset_ms = Some(1_000);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(c.delay_for(1, &f, &mut rng), RetryDelay::ServerHint(5_000));
    }

    #[test]
    fn retry_after_above_the_cap_means_no_retry_on_this_target() {
        let c = RetryConfig::default();
        let mut f = failure();
        f.retry_after_ms = Some(3_600_000);
        let mut rng = fastrand::Rng::with_seed(1);
        let d = c.delay_for(1, &f, &mut rng);
        assert_eq!(d, RetryDelay::HintTooLong(3_600_000));
        assert_eq!(d.wait_ms(), None);
    }

    #[test]
    fn rate_limit_reset_above_the_cap_falls_back_to_backoff() {
        let c = RetryConfig {
            jitter: false,
            ..RetryConfig::default()
        };
        let mut f = failure();
        f.rate_limit_reset_ms = Some(120_000);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(c.delay_for(2, &f, &mut rng), RetryDelay::Backoff(1_000));
        f.rate_limit_reset_ms = Some(2_500);
        assert_eq!(c.delay_for(2, &f, &mut rng), RetryDelay::ServerHint(2_500));
    }
}
