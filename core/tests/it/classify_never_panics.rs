//! Whatever a server sends, classification returns a failure: it never panics, keeps the
//! message one bounded line, and reads delay hints only from delay headers, keeping huge ones.

use proptest::prelude::*;
use rebound_core::classify::{classify_error_body, classify_http, delay_hints};
use rebound_core::{Headers, ProviderKind};

const RETRY_AFTER_HEADERS: [&str; 4] = [
    "retry-after",
    "retry-after-ms",
    "llm_provider-retry-after",
    "llm_provider-retry-after-ms",
];

const HINT_HEADERS: [&str; 15] = [
    "retry-after",
    "retry-after-ms",
    "llm_provider-retry-after",
    "llm_provider-retry-after-ms",
    "x-should-retry",
    "request-id",
    "x-request-id",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
];

/// Header values: arbitrary text, and text shaped like the real thing but perturbed.
fn header_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "-?[0-9]{0,25}(\\.[0-9]{0,12})?",
        "[0-9.]{0,6}(h|m|s|ms|us|µs|ns|x)?[0-9.]{0,6}(h|m|s|ms)?",
        "(Mon|Sun|Zun|Sunday), [0-9]{1,3}[ -](Nov|Feb|Xyz)[ -][0-9]{2,5} [0-9]{2}:[0-9]{2}:[0-9]{2} (GMT|UTC)",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|[+-][0-9]{2}:[0-9]{2})?",
        Just("99999999999999999999".to_owned()),
        Just("NaN".to_owned()),
        Just("9999-12-31T23:59:59Z".to_owned()),
    ]
}

fn headers() -> impl Strategy<Value = Headers> {
    prop::collection::vec((0..HINT_HEADERS.len(), header_value()), 0..8).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(i, v)| (HINT_HEADERS[i], v))
            .collect()
    })
}

/// Bodies: random bytes, random text, and error-shaped JSON with random contents.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..512),
        any::<String>().prop_map(String::into_bytes),
        (any::<String>(), any::<String>(), any::<String>()).prop_map(|(t, m, c)| {
            serde_json::json!({"type": "error", "error": {"type": t, "message": m, "code": c}})
                .to_string()
                .into_bytes()
        }),
        (any::<String>(), 0usize..300).prop_map(|(m, cut)| {
            let full = serde_json::json!({"error": {"message": m, "type": "x"}}).to_string();
            full.into_bytes().into_iter().take(cut).collect()
        }),
    ]
}

fn provider() -> impl Strategy<Value = ProviderKind> {
    prop_oneof![Just(ProviderKind::Anthropic), Just(ProviderKind::OpenAi)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn classify_http_never_panics_and_stays_bounded(
        provider in provider(),
        status in any::<u16>(),
        headers in headers(),
        body in body(),
        now in prop::option::of(any::<u64>()),
    ) {
        let f = classify_http(provider, status, &headers, &body, now);
        prop_assert_eq!(f.status, Some(status));
        prop_assert!(f.message.chars().count() <= 2001);
        prop_assert!(!f.message.chars().any(char::is_control));
        let hints = delay_hints(&headers, now);
        prop_assert_eq!(f.retry_after_ms, hints.retry_after_ms);
        prop_assert_eq!(f.rate_limit_reset_ms, hints.rate_limit_reset_ms);
        if let Some(id) = &f.request_id {
            prop_assert!(!id.chars().any(char::is_control));
        }
    }

    #[test]
    fn classify_error_body_never_panics(
        provider in provider(),
        status in prop::option::of(any::<u16>()),
        body in body(),
    ) {
        let f = classify_error_body(provider, status, &body);
        prop_assert_eq!(f.status, status);
        prop_assert!(!f.message.is_empty());
    }

    #[test]
    fn delay_hints_come_only_from_delay_headers(
        headers in headers(),
        now in prop::option::of(any::<u64>()),
    ) {
        let hints = delay_hints(&headers, now);
        if RETRY_AFTER_HEADERS.iter().all(|h| headers.get(h).is_none()) {
            prop_assert_eq!(hints.retry_after_ms, None);
        }
        if HINT_HEADERS.iter().filter(|h| h.ends_with("-reset") || h.contains("-reset-")).all(|h| headers.get(h).is_none()) {
            prop_assert_eq!(hints.rate_limit_reset_ms, None);
        }
    }

    #[test]
    fn a_whole_number_of_seconds_is_kept_however_large(seconds in "[0-9]{1,45}") {
        let expected = seconds
            .parse::<u128>()
            .ok()
            .and_then(|s| s.checked_mul(1000))
            .and_then(|ms| u64::try_from(ms).ok())
            .unwrap_or(u64::MAX);
        let hints = delay_hints(&Headers::new().with("retry-after", seconds.as_str()), None);
        prop_assert_eq!(hints.retry_after_ms, Some(expected));
    }
}
