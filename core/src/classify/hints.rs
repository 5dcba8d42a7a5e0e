//! Server delay hints from response headers: `retry-after-ms`, `retry-after` (also as
//! forwarded by the LiteLLM proxy), and the providers' rate-limit reset headers.

use super::go_duration::{decimal_scaled, parse_go_duration_ms};
use super::http_date::parse_http_date;
use super::rfc3339::parse_rfc3339;
use crate::headers::Headers;

/// Server delay hints read from response headers.
///
/// Every value is a delay from now in milliseconds, already checked: garbage, negative, NaN
/// or past values leave the field `None`.
///
/// A well-formed value is kept however large (saturating at `u64::MAX` ms): a server that
/// asks for 25 hours asks for a wait longer than any sane cap, which is a clear answer ("not
/// this target, not now"), not noise. Dropping it would turn the longest waits into no hint at
/// all and a retry within a second; the retry policy's `max_retry_after_ms` decides instead
/// (see [`RetryConfig`](crate::RetryConfig)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelayHints {
    /// The first valid of `retry-after-ms` (milliseconds, fractions allowed), `retry-after`
    /// as seconds (fractions allowed, e.g. `1.5`), or `retry-after` as an HTTP date relative
    /// to the wall time passed in; then the same two as forwarded by the LiteLLM proxy,
    /// `llm_provider-retry-after-ms` and `llm_provider-retry-after` (the answering server's
    /// own word comes first). Fractions are rounded up to the next millisecond.
    pub retry_after_ms: Option<u64>,
    /// The provider's rate-limit reset headers, as ms from now.
    ///
    /// Read from Anthropic's `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset`
    /// (RFC 3339 timestamps; need the wall time) and OpenAI's
    /// `x-ratelimit-reset-{requests,tokens}` (Go durations such as `6m0s`). Which window is
    /// used: if any window reports `…-remaining: 0`, the **latest** reset among those
    /// exhausted windows (a retry before then fails again); otherwise the **earliest** reset
    /// still ahead (the first moment capacity returns).
    pub rate_limit_reset_ms: Option<u64>,
}

/// Reads the server's delay hints from `headers`.
///
/// `now_unix_ms` is the current wall time in Unix milliseconds, passed in because core reads
/// no clock; without it, HTTP-date `retry-after` and Anthropic's timestamp reset headers are
/// ignored (OpenAI's reset durations are relative and still read).
///
/// ```
/// use rebound_core::classify::delay_hints;
/// use rebound_core::Headers;
///
/// let headers = Headers::new()
///     .with("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")
///     .with("x-ratelimit-reset-tokens", "6m0s")
///     .with("x-ratelimit-remaining-tokens", "0");
/// let hints = delay_hints(&headers, Some(784_111_770_000)); // 7 s before that date
/// assert_eq!(hints.retry_after_ms, Some(7_000));
/// assert_eq!(hints.rate_limit_reset_ms, Some(360_000));
/// ```
#[must_use]
pub fn delay_hints(headers: &Headers, now_unix_ms: Option<u64>) -> DelayHints {
    DelayHints {
        retry_after_ms: retry_after_ms(headers, now_unix_ms),
        rate_limit_reset_ms: rate_limit_reset_ms(headers, now_unix_ms),
    }
}

/// `(milliseconds header, seconds-or-date header)`, in the order they are believed.
///
/// The LiteLLM proxy forwards every header of the provider's response prefixed with
/// `llm_provider-` (`_get_llm_provider_headers` in BerriAI/litellm,
/// `litellm/litellm_core_utils/llm_response_utils/get_headers.py`), so a provider's
/// `retry-after` reaches the client as `llm_provider-retry-after`. A plain `retry-after` is
/// the proxy's own (its rate limiter, its cooldowns) and wins.
const RETRY_AFTER_HEADERS: [(&str, &str); 2] = [
    ("retry-after-ms", "retry-after"),
    ("llm_provider-retry-after-ms", "llm_provider-retry-after"),
];

fn retry_after_ms(headers: &Headers, now_unix_ms: Option<u64>) -> Option<u64> {
    RETRY_AFTER_HEADERS.iter().find_map(|(ms_header, header)| {
        let from_ms = headers
            .get(ms_header)
            .and_then(|v| decimal_scaled(v, 0))
            .map(saturating_ms);
        from_ms.or_else(|| {
            let value = headers.get(header)?;
            decimal_scaled(value, 3)
                .map(saturating_ms)
                .or_else(|| until(parse_http_date(value)?, now_unix_ms?))
        })
    })
}

/// `(reset header, remaining header)` for each Anthropic window.
const ANTHROPIC_WINDOWS: [(&str, &str); 4] = [
    (
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-requests-remaining",
    ),
    (
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-tokens-remaining",
    ),
    (
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-input-tokens-remaining",
    ),
    (
        "anthropic-ratelimit-output-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining",
    ),
];

/// `(reset header, remaining header)` for each OpenAI window.
const OPENAI_WINDOWS: [(&str, &str); 2] = [
    (
        "x-ratelimit-reset-requests",
        "x-ratelimit-remaining-requests",
    ),
    ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens"),
];

fn rate_limit_reset_ms(headers: &Headers, now_unix_ms: Option<u64>) -> Option<u64> {
    // (ms until reset, window exhausted)
    let mut windows: Vec<(u64, bool)> = Vec::new();
    let exhausted = |remaining_header: &str| {
        headers
            .get(remaining_header)
            .and_then(|v| v.parse::<u64>().ok())
            == Some(0)
    };
    if let Some(now) = now_unix_ms {
        for (reset, remaining) in ANTHROPIC_WINDOWS {
            let delay = headers
                .get(reset)
                .and_then(parse_rfc3339)
                .and_then(|at| until(at, now));
            if let Some(delay) = delay {
                windows.push((delay, exhausted(remaining)));
            }
        }
    }
    for (reset, remaining) in OPENAI_WINDOWS {
        if let Some(delay) = headers.get(reset).and_then(parse_go_duration_ms) {
            windows.push((delay, exhausted(remaining)));
        }
    }
    let latest_exhausted = windows
        .iter()
        .filter(|(_, exhausted)| *exhausted)
        .map(|(delay, _)| *delay)
        .max();
    latest_exhausted.or_else(|| windows.iter().map(|(delay, _)| *delay).min())
}

/// The delay from `now_unix_ms` until `at_unix_ms`; `None` if it is in the past.
fn until(at_unix_ms: i64, now_unix_ms: u64) -> Option<u64> {
    let delta = i128::from(at_unix_ms) - i128::from(now_unix_ms);
    u128::try_from(delta).ok().map(saturating_ms)
}

/// A delay in ms, `u64::MAX` if it is longer than that.
fn saturating_ms(ms: u128) -> u64 {
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fri, 29 Sep 2023 16:26:37 GMT, the "now" of the official SDKs' retry-after tests.
    const NOW: u64 = 1_696_004_797_000;

    fn retry_after(value: &str) -> Option<u64> {
        delay_hints(&Headers::new().with("retry-after", value), Some(NOW)).retry_after_ms
    }

    #[test]
    fn retry_after_values_from_the_official_sdk_tests_parse_or_are_ignored() {
        // The table of openai-python's test_parse_retry_after_header, minus its 60 s cap:
        // the retry policy caps hints; here only garbage, negative and past values are
        // dropped, and a huge number is kept (saturated), not taken for "no hint".
        for (value, expected) in [
            ("20", Some(20_000)),
            ("0", Some(0)),
            ("-10", None),
            ("60", Some(60_000)),
            ("61", Some(61_000)),
            ("Fri, 29 Sep 2023 16:26:57 GMT", Some(20_000)),
            ("Fri, 29 Sep 2023 16:26:37 GMT", Some(0)),
            ("Fri, 29 Sep 2023 16:26:27 GMT", None),
            ("Fri, 29 Sep 2023 16:27:37 GMT", Some(60_000)),
            ("Fri, 29 Sep 2023 16:27:38 GMT", Some(61_000)),
            ("99999999999999999999999999999999999", Some(u64::MAX)),
            ("Zun, 29 Sep 2023 16:26:27 GMT", None),
            ("", None),
        ] {
            assert_eq!(retry_after(value), expected, "{value:?}");
        }
    }

    #[test]
    fn fractional_seconds_and_milliseconds_round_up() {
        assert_eq!(retry_after("1.5"), Some(1500));
        assert_eq!(retry_after("0.0001"), Some(1));
        let h = Headers::new().with("retry-after-ms", "12.5");
        assert_eq!(delay_hints(&h, None).retry_after_ms, Some(13));
    }

    #[test]
    fn retry_after_ms_wins_over_retry_after_and_falls_through_when_invalid() {
        let both = Headers::new()
            .with("retry-after", "9")
            .with("retry-after-ms", "250");
        assert_eq!(delay_hints(&both, None).retry_after_ms, Some(250));
        let bad_ms = Headers::new()
            .with("retry-after-ms", "soon")
            .with("retry-after", "9");
        assert_eq!(delay_hints(&bad_ms, None).retry_after_ms, Some(9000));
    }

    #[test]
    fn http_date_needs_the_wall_time() {
        let h = Headers::new().with("retry-after", "Fri, 29 Sep 2023 16:26:57 GMT");
        assert_eq!(delay_hints(&h, None).retry_after_ms, None);
        assert_eq!(delay_hints(&h, Some(NOW)).retry_after_ms, Some(20_000));
    }

    #[test]
    fn hostile_retry_after_values_are_ignored() {
        for value in [
            "-1",
            "-0.5",
            "NaN",
            "nan",
            "inf",
            "Infinity",
            "1e3",
            "+5",
            "0x10",
            " 5 s",
            "5,5",
            "١٢",
            "５",
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "\u{0}",
            "🙂",
        ] {
            assert_eq!(retry_after(value), None, "{value:?}");
        }
    }

    #[test]
    fn huge_well_formed_retry_after_values_are_kept_not_dropped() {
        // 25 hours is a real "wait longer than any cap", not garbage.
        assert_eq!(retry_after("90000"), Some(90_000_000));
        assert_eq!(retry_after("86400.001"), Some(86_400_001));
        assert_eq!(retry_after("99999999999999999999"), Some(u64::MAX));
        assert_eq!(
            retry_after("Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(253_402_300_799_000 - NOW)
        );
        for value in ["86400001", "18446744073709551616", &"9".repeat(100)] {
            let h = Headers::new().with("retry-after-ms", value);
            assert!(
                delay_hints(&h, None).retry_after_ms >= Some(86_400_001),
                "{value}"
            );
        }
    }

    #[test]
    fn retry_after_forwarded_by_litellm_is_read_after_the_servers_own() {
        let forwarded = Headers::new().with("llm_provider-retry-after", "7");
        assert_eq!(delay_hints(&forwarded, None).retry_after_ms, Some(7_000));
        let forwarded_ms = Headers::new()
            .with("llm_provider-retry-after", "7")
            .with("llm_provider-retry-after-ms", "1500");
        assert_eq!(delay_hints(&forwarded_ms, None).retry_after_ms, Some(1_500));
        let date = Headers::new().with("llm_provider-retry-after", "Fri, 29 Sep 2023 16:26:57 GMT");
        assert_eq!(delay_hints(&date, Some(NOW)).retry_after_ms, Some(20_000));
        let both = Headers::new()
            .with("llm_provider-retry-after", "7")
            .with("retry-after", "2");
        assert_eq!(delay_hints(&both, None).retry_after_ms, Some(2_000));
        let garbage_own = Headers::new()
            .with("retry-after", "soon")
            .with("llm_provider-retry-after", "7");
        assert_eq!(delay_hints(&garbage_own, None).retry_after_ms, Some(7_000));
    }

    #[test]
    fn rate_limit_reset_prefers_the_latest_exhausted_window() {
        // Anthropic headers as sent on a 429: tokens exhausted until 30 s, requests
        // still available until 5 s.
        let h = Headers::new()
            .with("anthropic-ratelimit-requests-remaining", "12")
            .with("anthropic-ratelimit-requests-reset", "2023-09-29T16:26:42Z")
            .with("anthropic-ratelimit-tokens-remaining", "0")
            .with("anthropic-ratelimit-tokens-reset", "2023-09-29T16:27:07Z")
            .with("anthropic-ratelimit-input-tokens-remaining", "0")
            .with(
                "anthropic-ratelimit-input-tokens-reset",
                "2023-09-29T16:26:52.5Z",
            )
            .with("anthropic-ratelimit-output-tokens-remaining", "900")
            .with(
                "anthropic-ratelimit-output-tokens-reset",
                "2023-09-29T16:26:38Z",
            );
        assert_eq!(delay_hints(&h, Some(NOW)).rate_limit_reset_ms, Some(30_000));
    }

    #[test]
    fn rate_limit_reset_without_an_exhausted_window_is_the_earliest_ahead() {
        let h = Headers::new()
            .with("anthropic-ratelimit-requests-reset", "2023-09-29T16:26:42Z")
            .with("anthropic-ratelimit-tokens-reset", "2023-09-29T16:27:07Z")
            // In the past: ignored.
            .with(
                "anthropic-ratelimit-output-tokens-reset",
                "2023-09-29T16:26:00Z",
            );
        assert_eq!(delay_hints(&h, Some(NOW)).rate_limit_reset_ms, Some(5_000));
        assert_eq!(delay_hints(&h, None).rate_limit_reset_ms, None);
    }

    #[test]
    fn openai_reset_durations_are_read_without_the_wall_time() {
        let h = Headers::new()
            .with("x-ratelimit-remaining-requests", "0")
            .with("x-ratelimit-reset-requests", "12ms")
            .with("x-ratelimit-remaining-tokens", "14000")
            .with("x-ratelimit-reset-tokens", "6m0s");
        assert_eq!(delay_hints(&h, None).rate_limit_reset_ms, Some(12));
        let h = Headers::new()
            .with("x-ratelimit-reset-requests", "1s")
            .with("x-ratelimit-reset-tokens", "0.5s");
        assert_eq!(delay_hints(&h, None).rate_limit_reset_ms, Some(500));
    }

    #[test]
    fn hostile_reset_headers_are_ignored() {
        let h = Headers::new()
            .with("anthropic-ratelimit-tokens-remaining", "-1")
            .with("anthropic-ratelimit-tokens-reset", "not a date")
            .with("anthropic-ratelimit-requests-reset", "2023-09-29T16:26:42")
            .with(
                "anthropic-ratelimit-input-tokens-reset",
                "0000-01-01T00:00:00Z",
            )
            .with("x-ratelimit-reset-requests", "-6m0s")
            .with("x-ratelimit-reset-tokens", "1e9h");
        assert_eq!(delay_hints(&h, Some(NOW)), DelayHints::default());
        assert_eq!(delay_hints(&h, Some(u64::MAX)), DelayHints::default());
        assert_eq!(delay_hints(&h, Some(0)).rate_limit_reset_ms, None);
    }

    #[test]
    fn huge_well_formed_reset_headers_are_kept_not_dropped() {
        let h = Headers::new()
            .with("anthropic-ratelimit-tokens-remaining", "0")
            .with("anthropic-ratelimit-tokens-reset", "9999-12-31T23:59:59Z");
        assert_eq!(
            delay_hints(&h, Some(NOW)).rate_limit_reset_ms,
            Some(253_402_300_799_000 - NOW)
        );
        let h = Headers::new()
            .with("x-ratelimit-remaining-tokens", "0")
            .with("x-ratelimit-reset-tokens", "99999999999999999999h");
        assert_eq!(delay_hints(&h, None).rate_limit_reset_ms, Some(u64::MAX));
    }
}
