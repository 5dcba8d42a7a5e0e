//! Server delay hints from response headers: `retry-after-ms`, `retry-after`, and the
//! providers' rate-limit reset headers.

use super::go_duration::{decimal_scaled, parse_go_duration_ms};
use super::http_date::parse_http_date;
use super::rfc3339::parse_rfc3339;
use crate::headers::Headers;

/// Hints longer than this (one day, in ms) are ignored as absurd rather than clamped.
///
/// A value that large is far more likely a misread (a Unix timestamp sent as seconds, a year
/// 9999 date) than a real request to wait a day, and obeying it would stall the loop; the
/// retry policy then falls back to the next hint or its own backoff. Sane but long hints are
/// capped separately by the policy's `max_retry_after_ms`.
pub const MAX_HINT_MS: u64 = 86_400_000;

/// Server delay hints read from response headers.
///
/// Every value is a delay from now in milliseconds, already checked: garbage, negative,
/// NaN, overflowing, past or absurd (over [`MAX_HINT_MS`]) values leave the field `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelayHints {
    /// The first valid of `retry-after-ms` (milliseconds, fractions allowed), `retry-after`
    /// as seconds (fractions allowed, e.g. `1.5`), or `retry-after` as an HTTP date relative
    /// to the wall time passed in. Fractions are rounded up to the next millisecond.
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

fn retry_after_ms(headers: &Headers, now_unix_ms: Option<u64>) -> Option<u64> {
    let from_ms = headers
        .get("retry-after-ms")
        .and_then(|v| decimal_scaled(v, 0))
        .and_then(plausible);
    from_ms.or_else(|| {
        let value = headers.get("retry-after")?;
        decimal_scaled(value, 3)
            .and_then(plausible)
            .or_else(|| until(parse_http_date(value)?, now_unix_ms?))
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
        if let Some(delay) = headers
            .get(reset)
            .and_then(parse_go_duration_ms)
            .and_then(|ms| plausible(u128::from(ms)))
        {
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

/// The delay from `now_unix_ms` until `at_unix_ms`; `None` if it is in the past or absurd.
fn until(at_unix_ms: i64, now_unix_ms: u64) -> Option<u64> {
    let delta = i128::from(at_unix_ms) - i128::from(now_unix_ms);
    if delta < 0 {
        return None;
    }
    plausible(u128::try_from(delta).ok()?)
}

/// A delay in ms if it is at most [`MAX_HINT_MS`].
fn plausible(ms: u128) -> Option<u64> {
    u64::try_from(ms).ok().filter(|ms| *ms <= MAX_HINT_MS)
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
        // The table of openai-python's test_parse_retry_after_header, minus its 60 s cap
        // (the retry policy caps hints; here only absurd values are dropped).
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
            ("99999999999999999999999999999999999", None),
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
            "99999999999999999999",
            "86400.001",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Thu, 01 Jan 1970 00:00:00 GMT",
            "\u{0}",
            "🙂",
        ] {
            assert_eq!(retry_after(value), None, "{value:?}");
        }
        assert_eq!(retry_after("86400"), Some(MAX_HINT_MS));
        let h = Headers::new().with("retry-after-ms", "86400001");
        assert_eq!(delay_hints(&h, None).retry_after_ms, None);
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
            .with("anthropic-ratelimit-tokens-reset", "9999-12-31T23:59:59Z")
            .with("anthropic-ratelimit-requests-reset", "not a date")
            .with(
                "anthropic-ratelimit-input-tokens-reset",
                "0000-01-01T00:00:00Z",
            )
            .with("x-ratelimit-reset-requests", "-6m0s")
            .with("x-ratelimit-reset-tokens", "99999999999999999999h");
        assert_eq!(delay_hints(&h, Some(NOW)), DelayHints::default());
        assert_eq!(delay_hints(&h, Some(u64::MAX)), DelayHints::default());
        assert_eq!(delay_hints(&h, Some(0)).rate_limit_reset_ms, None);
    }
}
