//! Failure classification: pure functions from (status, headers, body) or a transport fault to
//! a [`ProviderFailure`].
//!
//! Nothing here reads a clock: an HTTP-date `retry-after` and Anthropic's timestamp reset
//! headers need the current wall time, which the caller passes in as `now_unix_ms` (`None`
//! when unknown; those hints are then ignored). Nothing here panics on what a server sends:
//! bodies that are empty, HTML, truncated, not UTF-8 or nested absurdly deep fall back to the
//! status and a short, sanitized excerpt; header values that are garbage, negative, NaN or
//! past are ignored, and well-formed delays too large to represent saturate at `u64::MAX` ms
//! (the retry policy's cap, not the parser, decides what an absurdly long wait means).
//!
//! What decides the [`FailureKind`](crate::FailureKind) (first match wins; details in the `kind` module source):
//!
//! | evidence | kind |
//! |---|---|
//! | 413; `request_too_large`, `context_length_exceeded`, `exceed_context_size_error`; an overflow phrase ([`is_context_overflow_message`]) unless 429 | `ContextOverflow` |
//! | 402; `insufficient_quota`, `billing_error`, Anthropic `details.error_code: enforced_spend_limit_reached`; "credit balance is too low", "API usage limits", "spend limit", "exceeded your current quota" unless 5xx | `QuotaExhausted` |
//! | code `model_not_found` (unless 429/5xx); 404 | `ModelNotFound` |
//! | 401, 403 | `AuthFailed` |
//! | 408, 409, 425 | `ServerError` (retryable; the server answered, so not `Transport`) |
//! | 429 | `RateLimited` |
//! | 503, 529; any 5xx whose type or message says "overloaded" | `Unavailable` |
//! | other 5xx (and nonsense statuses above 599) | `ServerError` |
//! | other 3xx and 4xx | `BadRequest` |
//! | no status or below 300 (mid-stream error event, 200 with an error body) | by error type: `overloaded_error` → `Unavailable`, `rate_limit_error` → `RateLimited`, `api_error`/`server_error` → `ServerError`, …; unknown type → `ServerError`; not an error object → `StreamMalformed` |
//!
//! ```
//! use rebound_core::classify::classify_http;
//! use rebound_core::{FailureAction, FailureKind, Headers, ProviderKind};
//!
//! let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 205351 tokens > 200000 maximum"},"request_id":"req_011"}"#;
//! let f = classify_http(ProviderKind::Anthropic, 400, &Headers::new(), body, None);
//! assert_eq!(f.kind, FailureKind::ContextOverflow);
//! assert_eq!(f.action(), FailureAction::Compact);
//! assert_eq!(f.request_id.as_deref(), Some("req_011"));
//! ```

mod body;
mod calendar;
mod go_duration;
mod hints;
mod http_date;
mod kind;
mod markers;
mod rfc3339;
mod sanitize;

pub use hints::{delay_hints, DelayHints};
pub use markers::is_context_overflow_message;

use crate::failure::{ProviderFailure, ProviderKind, TransportFault};
use crate::headers::Headers;
use sanitize::{one_line, MAX_MESSAGE_CHARS, MAX_REQUEST_ID_CHARS};

/// Classifies an HTTP error response of `provider`.
///
/// `body` may be anything (truncated JSON, HTML from a proxy, empty); it never panics.
/// `now_unix_ms` is the current wall time, for date-valued delay hints (see [`delay_hints`]).
///
/// Besides what [`classify_error_body`] fills, this records the delay hints, the server's
/// `x-should-retry: true|false` verdict (anything else is `None`), and the request id from
/// the `request-id` (Anthropic) or `x-request-id` (OpenAI) header, falling back to the body's
/// `request_id`.
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
    let (first, second) = match provider {
        ProviderKind::Anthropic => ("request-id", "x-request-id"),
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => ("x-request-id", "request-id"),
    };
    let header_id = headers
        .get(first)
        .or_else(|| headers.get(second))
        .map(|id| one_line(id, MAX_REQUEST_ID_CHARS))
        .filter(|id| !id.is_empty());
    if header_id.is_some() {
        failure.request_id = header_id;
    }
    failure
}

/// Classifies an error body without headers: a mid-stream error event, or a 200 response
/// whose body is an error object. `status` is the HTTP status when there was one.
///
/// A rate limit without a status (inside a stream) also gets the delay OpenAI writes in its
/// message ("Please try again in 644ms."), as `retry_after_ms`: it has no headers to carry one.
///
/// Fills `kind`, `status`, `error_type` (Anthropic's `error.type`; for OpenAI the more
/// specific `error.code` when it is a string, else `error.type`; neither when it only repeats
/// the status, as gateways' codes do, or is the string `None`), `message` (the provider's,
/// made one line, at most 2000 characters, API keys redacted; or an excerpt of at most 300
/// characters of a body that is not an error object) and the body's `request_id`.
///
/// ```
/// use rebound_core::classify::classify_error_body;
/// use rebound_core::{FailureKind, ProviderKind};
///
/// // The `data:` of Anthropic's mid-stream `event: error`.
/// let data = br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
/// let f = classify_error_body(ProviderKind::Anthropic, None, data);
/// assert_eq!(f.kind, FailureKind::Unavailable);
/// assert_eq!(f.error_type.as_deref(), Some("overloaded_error"));
/// assert_eq!(&*f.message, "Overloaded");
/// ```
#[must_use]
pub fn classify_error_body(
    provider: ProviderKind,
    status: Option<u16>,
    body: &[u8],
) -> ProviderFailure {
    let parsed = body::parse(body);
    let scan = match &parsed {
        Some(p) => [&p.message, &p.error_type, &p.code, &p.detail_code]
            .into_iter()
            .flatten()
            .map(|s| s.to_lowercase())
            .collect::<Vec<_>>()
            .join(" "),
        None => sanitize::scan_text(body),
    };
    let kind = kind::decide(status, parsed.as_ref(), &scan);

    let (message, error_type, request_id) = match parsed {
        Some(p) => {
            let telling = |t: &String| !says_nothing(t, status);
            let (error_type, code) = (p.error_type.filter(telling), p.code.filter(telling));
            let error_type = match provider {
                ProviderKind::Anthropic => error_type.or(code),
                ProviderKind::OpenAi | ProviderKind::OpenAiResponses => code.or(error_type),
            };
            let message = p
                .message
                .map(|m| one_line(&m, MAX_MESSAGE_CHARS))
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| sanitize::excerpt(body));
            (message, error_type, p.request_id)
        }
        None => (sanitize::excerpt(body), None, None),
    };

    let mut failure = ProviderFailure::new(kind, message);
    if status.is_none() && kind == crate::failure::FailureKind::RateLimited {
        failure.retry_after_ms = try_again_in_ms(&failure.message);
    }
    failure.status = status;
    failure.error_type = error_type
        .map(|t| one_line(&t, MAX_REQUEST_ID_CHARS))
        .filter(|t| !t.is_empty());
    failure.request_id = request_id
        .map(|id| one_line(&id, MAX_REQUEST_ID_CHARS))
        .filter(|id| !id.is_empty());
    failure
}

/// OpenAI's delay in a rate-limit message ("… Please try again in 644ms." / "in 1.898s"):
/// the only hint a failure inside a 200 stream (a Responses `response.failed`) can carry,
/// having no headers. Read like a Go duration; anything else is no hint.
fn try_again_in_ms(message: &str) -> Option<u64> {
    const MARK: &str = "try again in ";
    let at = message.to_ascii_lowercase().find(MARK)? + MARK.len();
    let word = message.get(at..)?.split_whitespace().next()?;
    go_duration::parse_go_duration_ms(word.trim_end_matches(['.', ',', ')']))
}

/// Whether an error type or code says nothing the status does not: the status itself (the
/// LiteLLM proxy sends `"code": str(status_code)`), or Python's `None` printed as a string
/// (its default `type`; BerriAI/litellm, `litellm/proxy/_types.py`, `ProxyException`, and
/// `proxy/proxy_server.py`).
fn says_nothing(value: &str, status: Option<u16>) -> bool {
    let value = value.trim();
    value == "None" || status.is_some_and(|s| value == s.to_string())
}

/// Classifies a transport fault (no usable HTTP response): a thin mapping through
/// [`TransportFault::kind`], with `detail` (made one line, at most 500 characters, API keys
/// redacted) appended to the fault's phrase.
#[must_use]
pub fn classify_transport(fault: TransportFault, detail: Option<&str>) -> ProviderFailure {
    let detail = detail.map(|d| one_line(d, 500));
    ProviderFailure::transport(fault, detail.as_deref())
}
