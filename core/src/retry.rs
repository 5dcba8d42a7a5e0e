//! Retry policy: how many attempts, how long to wait between them, and how server hints win.

use crate::failure::{FailureKind, ProviderFailure};
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
///   `max_retry_after_ms` (default 10 minutes), and waited out visibly and cancellably: a
///   server that names its delay is telling the truth more often than not (the official
///   SDKs wait any `retry-after`), and an agent with nowhere else to go loses less by
///   waiting 90 s than by failing a task a person must restart. Ten minutes is about the
///   longest a person watching a countdown keeps a task alive rather than cancelling it, and
///   the longest a provider's windows usually run (per-minute limits, short overload
///   shedding); a longer hint (an hourly or daily quota) is a quota, not a delay.
///   When the fallback chain has a next target, a server delay above `fallback_after_ms`
///   (default 30 s) is not waited: the machine moves on at once ([`Self::moves_on`]).
///   **Above the cap the machine does not retry this target at all**,
///   whatever the hint's size (an hour, a day, year 9999): retrying sooner than the server
///   asked only earns another refusal, and waiting longer than the cap is what the cap
///   forbids, so the failure goes to the fallback target or to the embedder at once
///   ([`RetryDelay::HintTooLong`]). Only an unreadable or negative header is no hint.
/// - a rate-limit reset time (`x-ratelimit-reset-*`, `anthropic-ratelimit-*-reset`) shapes
///   the delay of a **rate-limited failure (429) only**. OpenAI sends these headers on every
///   response, so on a 5xx, a transport failure or a cut stream they describe a quota that was
///   not the problem, and the computed backoff is used. On a 429 the reset is a **lower
///   bound**, not a replacement: the delay is `max(reset, jittered backoff)`. A reset of a
///   few milliseconds (the requests window of a busy key) would otherwise turn the backoff
///   into an immediate, unjittered retry by every agent that hit the limit together; a reset
///   longer than the backoff is waited out ([`RetryDelay::ServerHint`]). A reset above the cap
///   is a weaker hint than `retry-after` (the window's full reset, not the earliest moment a
///   request can succeed) and is ignored in favour of the backoff.
///
/// ```
/// use rebound_core::{FailureKind, ProviderFailure, RetryConfig, RetryDelay};
///
/// let policy = RetryConfig::default().with_jitter(false);
/// let mut rng = fastrand::Rng::with_seed(1);
/// let mut limited = ProviderFailure::new(FailureKind::RateLimited, "slow down").with_status(429);
/// limited.rate_limit_reset_ms = Some(3);
/// // A 3 ms reset does not undercut the 500 ms backoff of the first retry…
/// assert_eq!(policy.delay_for(1, &limited, &mut rng), RetryDelay::Backoff(500));
/// // …a 6 s one is waited out…
/// limited.rate_limit_reset_ms = Some(6_000);
/// assert_eq!(policy.delay_for(1, &limited, &mut rng), RetryDelay::ServerHint(6_000));
/// // …and on a 503 the reset headers say nothing about the outage.
/// let mut down = ProviderFailure::new(FailureKind::Unavailable, "down").with_status(503);
/// down.rate_limit_reset_ms = Some(6_000);
/// assert_eq!(policy.delay_for(1, &down, &mut rng), RetryDelay::Backoff(500));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
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
    /// The longest server-requested delay worth waiting while the fallback chain has a next
    /// target, in ms: above it the machine moves to that target at once. Missing from a
    /// configuration, it is the default's 30 s, as every other missing field takes the
    /// default's value (a trace recorded before this field existed is read with `u64::MAX`,
    /// never moving on early, as those runs did: the trace reader sees to that).
    pub fallback_after_ms: u64,
    /// Empty assistant responses tolerated per request before giving up (a small cap: an
    /// empty answer is more often the model's choice than a fault).
    pub max_empty_responses: u32,
}

crate::objects_only!(RetryConfig, "an object of retry settings");

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 4,
            initial_delay_ms: 500,
            max_delay_ms: 10_000,
            multiplier: 2.0,
            jitter: true,
            max_retry_after_ms: 600_000,
            fallback_after_ms: 30_000,
            max_empty_responses: 2,
        }
    }
}

impl RetryConfig {
    /// Sets [`max_attempts`](Self::max_attempts), counting the first attempt.
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets [`initial_delay_ms`](Self::initial_delay_ms), the delay before the first retry.
    #[must_use]
    pub fn with_initial_delay_ms(mut self, ms: u64) -> Self {
        self.initial_delay_ms = ms;
        self
    }

    /// Sets [`max_delay_ms`](Self::max_delay_ms), the cap of the computed delay.
    #[must_use]
    pub fn with_max_delay_ms(mut self, ms: u64) -> Self {
        self.max_delay_ms = ms;
        self
    }

    /// Sets [`multiplier`](Self::multiplier), the growth factor per retry.
    #[must_use]
    pub fn with_multiplier(mut self, multiplier: f64) -> Self {
        self.multiplier = multiplier;
        self
    }

    /// Sets [`jitter`](Self::jitter): whether computed delays are jittered.
    #[must_use]
    pub fn with_jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets [`max_retry_after_ms`](Self::max_retry_after_ms), the longest server delay
    /// honoured.
    #[must_use]
    pub fn with_max_retry_after_ms(mut self, ms: u64) -> Self {
        self.max_retry_after_ms = ms;
        self
    }

    /// Sets [`fallback_after_ms`](Self::fallback_after_ms), the longest server delay worth
    /// waiting with a next target at hand.
    #[must_use]
    pub fn with_fallback_after_ms(mut self, ms: u64) -> Self {
        self.fallback_after_ms = ms;
        self
    }

    /// Sets [`max_empty_responses`](Self::max_empty_responses), the empty answers tolerated
    /// per request.
    #[must_use]
    pub fn with_max_empty_responses(mut self, count: u32) -> Self {
        self.max_empty_responses = count;
        self
    }
}

/// The delay chosen before a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RetryDelay {
    /// The policy's own (jittered) exponential backoff.
    Backoff(u64),
    /// The server's hint, within the cap.
    ServerHint(u64),
    /// The server asked for more than `max_retry_after_ms`: do not retry this target.
    HintTooLong(u64),
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
        // The growth is kept finite, so a zero initial delay stays zero (0 × ∞ would be NaN);
        // the product is never negative, and an infinite one is capped like any other.
        let growth = multiplier.powi(exponent).min(f64::MAX);
        let delay = self.initial_delay_ms as f64 * growth;
        delay.min(self.max_delay_ms as f64) as u64
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

    /// Whether a server delay of `server_delay_ms` should move the run to the next target at
    /// once (when there is one) instead of being waited out: it is above
    /// `fallback_after_ms`, or above the cap.
    ///
    /// ```
    /// use rebound_core::RetryConfig;
    ///
    /// let policy = RetryConfig::default();
    /// assert!(!policy.moves_on(30_000));
    /// assert!(policy.moves_on(90_000));
    /// ```
    #[must_use]
    pub fn moves_on(&self, server_delay_ms: u64) -> bool {
        server_delay_ms > self.fallback_after_ms.min(self.max_retry_after_ms)
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
        let reset = failure
            .rate_limit_reset_ms
            .filter(|_| failure.kind == FailureKind::RateLimited)
            .filter(|reset| *reset <= self.max_retry_after_ms);
        match reset {
            // At or above the un-jittered delay the reset wins whatever the jitter draws; the
            // RNG is left alone, so the draws of later retries do not depend on this hint.
            Some(reset) if reset >= self.base_delay_ms(retry) => RetryDelay::ServerHint(reset),
            Some(reset) => {
                let backoff = self.backoff_ms(retry, rng);
                if reset > backoff {
                    RetryDelay::ServerHint(reset)
                } else {
                    RetryDelay::Backoff(backoff)
                }
            }
            None => RetryDelay::Backoff(self.backoff_ms(retry, rng)),
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
            (4, 500, 10_000, 600_000)
        );
        assert_eq!(c.fallback_after_ms, 30_000);
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
    fn the_builders_set_what_an_embedder_cannot_write_as_a_literal() {
        // The config is `#[non_exhaustive]`: outside this crate the builders are the only way
        // to set it, so each must set its own field and no other.
        let built = RetryConfig::default()
            .with_max_attempts(7)
            .with_initial_delay_ms(11)
            .with_max_delay_ms(13_000)
            .with_multiplier(3.0)
            .with_jitter(false)
            .with_max_retry_after_ms(17_000)
            .with_fallback_after_ms(19_000)
            .with_max_empty_responses(5);
        assert_eq!(
            built,
            RetryConfig {
                max_attempts: 7,
                initial_delay_ms: 11,
                max_delay_ms: 13_000,
                multiplier: 3.0,
                jitter: false,
                max_retry_after_ms: 17_000,
                fallback_after_ms: 19_000,
                max_empty_responses: 5,
            }
        );
        assert_ne!(built, RetryConfig::default(), "no builder is the default");
        assert_eq!(
            (1..=3).map(|r| built.base_delay_ms(r)).collect::<Vec<_>>(),
            [11, 33, 99]
        );
    }

    #[test]
    fn a_zero_backoff_draws_nothing_from_the_seeded_rng() {
        // A run's jitter comes from one seeded RNG: a retry with nothing to jitter must leave
        // it where it was, so the draws after it are the ones a replay of the trace expects.
        let c = RetryConfig::default()
            .with_initial_delay_ms(0)
            .with_jitter(true);
        let mut rng = fastrand::Rng::with_seed(7);
        assert_eq!(c.backoff_ms(1, &mut rng), 0);
        assert_eq!(rng.u64(..), fastrand::Rng::with_seed(7).u64(..));
        let zero_cap = RetryConfig::default()
            .with_max_delay_ms(0)
            .with_jitter(true);
        assert_eq!(zero_cap.backoff_ms(3, &mut rng), 0);
    }

    #[test]
    fn an_unbounded_product_is_capped_whatever_the_initial_delay() {
        // Growth past f64's range: a zero initial delay stays zero, any other is the cap.
        for initial in [0, 1, u64::MAX] {
            let c = RetryConfig::default()
                .with_initial_delay_ms(initial)
                .with_multiplier(1e300)
                .with_max_delay_ms(9_000);
            assert_eq!(
                c.base_delay_ms(u32::MAX),
                if initial == 0 { 0 } else { 9_000 }
            );
        }
    }

    #[test]
    fn a_multiplier_below_one_or_not_finite_keeps_the_delay_at_its_initial_value() {
        // As documented on `multiplier`: such values count as 1, so delays neither shrink to
        // nothing nor jump to the cap.
        for multiplier in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -3.0,
            0.0,
            0.5,
            0.999,
            1.0,
        ] {
            let c = RetryConfig::default().with_multiplier(multiplier);
            let delays: Vec<u64> = (1..=5).map(|retry| c.base_delay_ms(retry)).collect();
            assert_eq!(delays, [c.initial_delay_ms; 5], "{multiplier}");
        }
        let growing = RetryConfig::default().with_multiplier(1.5);
        assert_eq!(
            (1..=3)
                .map(|retry| growing.base_delay_ms(retry))
                .collect::<Vec<_>>(),
            [
                growing.initial_delay_ms,
                growing.initial_delay_ms * 3 / 2,
                growing.initial_delay_ms * 9 / 4
            ]
        );
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
    }

    fn rate_limited() -> ProviderFailure {
        ProviderFailure::new(FailureKind::RateLimited, "Too many requests").with_status(429)
    }

    #[test]
    fn rate_limit_reset_above_the_cap_falls_back_to_backoff() {
        let c = RetryConfig {
            jitter: false,
            ..RetryConfig::default()
        };
        let mut f = rate_limited();
        f.rate_limit_reset_ms = Some(700_000);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(c.delay_for(2, &f, &mut rng), RetryDelay::Backoff(1_000));
        f.rate_limit_reset_ms = Some(2_500);
        assert_eq!(c.delay_for(2, &f, &mut rng), RetryDelay::ServerHint(2_500));
    }

    #[test]
    fn rate_limit_reset_is_a_lower_bound_under_the_jittered_backoff() {
        let c = RetryConfig::default();
        let mut f = rate_limited();
        // Between the lowest jittered delay (250 ms) and the un-jittered one (500 ms).
        f.rate_limit_reset_ms = Some(400);
        let (mut hinted, mut backed_off) = (0, 0);
        for seed in 0..200 {
            let backoff = c.backoff_ms(1, &mut fastrand::Rng::with_seed(seed));
            let delay = c.delay_for(1, &f, &mut fastrand::Rng::with_seed(seed));
            if backoff < 400 {
                assert_eq!(delay, RetryDelay::ServerHint(400), "seed {seed}");
                hinted += 1;
            } else {
                assert_eq!(delay, RetryDelay::Backoff(backoff), "seed {seed}");
                backed_off += 1;
            }
        }
        assert!(hinted > 0 && backed_off > 0, "{hinted} / {backed_off}");
    }

    #[test]
    fn rate_limit_reset_is_ignored_for_every_failure_but_a_rate_limit() {
        let c = RetryConfig {
            jitter: false,
            ..RetryConfig::default()
        };
        let mut rng = fastrand::Rng::with_seed(1);
        for kind in [
            FailureKind::Unavailable,
            FailureKind::ServerError,
            FailureKind::Transport,
            FailureKind::StreamMalformed,
            FailureKind::EmptyResponse,
        ] {
            let mut f = ProviderFailure::new(kind, "x");
            f.rate_limit_reset_ms = Some(2_500);
            assert_eq!(
                c.delay_for(2, &f, &mut rng),
                RetryDelay::Backoff(1_000),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn a_partial_retry_config_takes_every_missing_setting_from_the_default() {
        let c: RetryConfig = serde_json::from_str(r#"{"jitter": false}"#).unwrap();
        assert_eq!(c, RetryConfig::default().with_jitter(false));
        assert_eq!(c.fallback_after_ms, 30_000);
        assert!(c.moves_on(30_001));
    }

    #[test]
    fn a_long_rate_limit_reset_leaves_the_jitter_rng_untouched() {
        // Old traces replay: a reset at or above the un-jittered delay draws nothing.
        let c = RetryConfig::default();
        let mut f = rate_limited();
        f.rate_limit_reset_ms = Some(500);
        let mut rng = fastrand::Rng::with_seed(9);
        assert_eq!(c.delay_for(1, &f, &mut rng), RetryDelay::ServerHint(500));
        assert_eq!(rng.u64(..), fastrand::Rng::with_seed(9).u64(..));
    }
}
