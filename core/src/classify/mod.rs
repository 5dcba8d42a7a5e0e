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
//! | Google `details`: a `QuotaFailure` naming a per-day quota / only per-minute quotas (429 or no status) / an `ErrorInfo` reason `API_KEY_…` | `QuotaExhausted` / `RateLimited` / `AuthFailed` |
//! | 4xx but 429, or no error status: `invalid_encrypted_content`; "The encrypted content … could not be verified", ``Invalid `signature` in `thinking` block``, ``Invalid `data` in `redacted_thinking` block``, "a final `assistant` message must start with a thinking block" | `ReasoningRejected` (retried once without reasoning) |
//! | 402; `insufficient_quota`, `billing_error`, Anthropic `details.error_code: enforced_spend_limit_reached`; "credit balance is too low", "API usage limits", "spend limit", "exceeded your current quota" unless 5xx | `QuotaExhausted` |
//! | code `model_not_found` (unless 429/5xx); 404 | `ModelNotFound` |
//! | 401, 403 | `AuthFailed` |
//! | 408, 409, 425 | `ServerError` (retryable; the server answered, so not `Transport`) |
//! | 429 | `RateLimited` |
//! | 503, 529; any 5xx whose type or message says "overloaded" | `Unavailable` |
//! | other 5xx (and nonsense statuses above 599) | `ServerError` |
//! | AWS's `ModelNotReadyException` (Bedrock loading the model, 424 or 429) | `Unavailable` |
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
    // AWS names the error in a header (`ThrottlingException:http://internal.amazon.com/…`),
    // which wins over the body's, as in botocore's `RestJSONParser`.
    let aws_type = headers
        .get("x-amzn-errortype")
        .and_then(|t| t.split(':').next())
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let mut failure = classify_body(provider, Some(status), body, aws_type);
    let hints = delay_hints(headers, now_unix_ms);
    // A header's delay first; else the body's (Google's `RetryInfo`).
    failure.retry_after_ms = hints.retry_after_ms.or(failure.retry_after_ms);
    failure.rate_limit_reset_ms = hints.rate_limit_reset_ms;
    failure.should_retry = match headers.get("x-should-retry") {
        Some(v) if v.eq_ignore_ascii_case("true") => Some(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    };
    let (first, second) = match provider {
        ProviderKind::Anthropic => ("request-id", "x-request-id"),
        ProviderKind::Bedrock => ("x-amzn-requestid", "x-request-id"),
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses | ProviderKind::Gemini => {
            ("x-request-id", "request-id")
        }
    };
    let header_id = headers
        .get(first)
        .or_else(|| headers.get(second))
        .or_else(|| headers.get("x-amzn-requestid"))
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
/// Google's `google.rpc.RetryInfo.retryDelay` in the body's `details` is the failure's
/// `retry_after_ms` (a header's delay, read by [`classify_http`], wins over it). A rate limit
/// without a status (inside a stream) and without that gets the delay OpenAI writes in its
/// message ("Please try again in 644ms."): it has no headers to carry one.
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
    classify_body(provider, status, body, None)
}

/// Classifies an AWS error whose type travels beside its body rather than in it: the
/// `:exception-type` (or `:error-code`) header of an event-stream message inside a 200
/// ConverseStream response (`status` `None`), whose payload is `{"message": "…"}`. The type
/// wins over any the body names, as `x-amzn-errortype` does in [`classify_http`]; so
/// `throttlingException` is a rate limit, `serviceUnavailableException` unavailable, and a
/// `validationException` saying the input is too long a context overflow.
pub(crate) fn classify_aws_error(
    status: Option<u16>,
    error_type: Option<&str>,
    body: &[u8],
) -> ProviderFailure {
    let error_type = error_type.map(str::trim).filter(|t| !t.is_empty());
    classify_body(ProviderKind::Bedrock, status, body, error_type)
}

/// [`classify_error_body`], with the error's type from a header (AWS's
/// `x-amzn-errortype`) when there is one: it wins over the body's.
fn classify_body(
    provider: ProviderKind,
    status: Option<u16>,
    body: &[u8],
    header_type: Option<&str>,
) -> ProviderFailure {
    let mut parsed = body::parse(body);
    if let Some(t) = header_type {
        parsed.get_or_insert_with(Default::default).error_type = Some(t.to_owned());
    }
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
    let retry_delay_ms = parsed.as_ref().and_then(|p| p.retry_delay_ms);

    let (message, error_type, request_id) = match parsed {
        Some(p) => {
            let telling = |t: &String| !says_nothing(t, status);
            let (error_type, code) = (p.error_type.filter(telling), p.code.filter(telling));
            let error_type = match provider {
                // Google's `status` (`RESOURCE_EXHAUSTED`) names the error; its `code` is
                // the HTTP status.
                // AWS names the error by its type (a header or `__type`); it has no code.
                ProviderKind::Anthropic | ProviderKind::Gemini | ProviderKind::Bedrock => {
                    error_type.or(code)
                }
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
    failure.retry_after_ms = retry_delay_ms;
    if failure.retry_after_ms.is_none()
        && status.is_none()
        && kind == crate::failure::FailureKind::RateLimited
    {
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
///
/// When all you have is an HTTP client's error, [`classify_transport_error`] picks the
/// fault for you.
#[must_use]
pub fn classify_transport(fault: TransportFault, detail: Option<&str>) -> ProviderFailure {
    let detail = detail.map(|d| one_line(d, 500));
    ProviderFailure::transport(fault, detail.as_deref())
}

/// What an HTTP client says about an exchange that produced no usable response, in the terms
/// every client has: its error text and three yes-or-no facts. The input of
/// [`classify_transport_error`]; any client fills it (reqwest, hyper, ureq, a platform's
/// own), so the decision stays here instead of in each driver.
///
/// More facts may come in a minor release (it is `#[non_exhaustive]`): build it with
/// [`new`](Self::new) and the `with_*` methods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportError<'a> {
    /// The client's error with its sources, as text (e.g. `error sending request: dns
    /// error: failed to lookup address information`). Searched for DNS and TLS markers,
    /// and kept as the failure's detail (one line, at most 500 characters, keys redacted).
    pub description: &'a str,
    /// The client says the exchange timed out (connect, headers, or a read).
    pub timed_out: bool,
    /// The client says connecting failed.
    pub connect_failed: bool,
    /// The response had started (status and headers arrived) when the exchange failed: a
    /// break is then a cut stream, and a timeout a stream gone idle.
    pub response_started: bool,
}

impl<'a> TransportError<'a> {
    /// An error described by `description`, with every fact false.
    #[must_use]
    pub fn new(description: &'a str) -> Self {
        TransportError {
            description,
            ..TransportError::default()
        }
    }

    /// Sets [`timed_out`](Self::timed_out).
    #[must_use]
    pub fn with_timed_out(mut self, timed_out: bool) -> Self {
        self.timed_out = timed_out;
        self
    }

    /// Sets [`connect_failed`](Self::connect_failed).
    #[must_use]
    pub fn with_connect_failed(mut self, connect_failed: bool) -> Self {
        self.connect_failed = connect_failed;
        self
    }

    /// Sets [`response_started`](Self::response_started).
    #[must_use]
    pub fn with_response_started(mut self, response_started: bool) -> Self {
        self.response_started = response_started;
        self
    }

    /// The fault it is, first match wins: a timeout ([`IdleTimeout`] once the response
    /// started, else [`Timeout`]); any other failure once the response started
    /// ([`StreamCut`]); a description naming a failed name lookup ([`Dns`]) or TLS or a
    /// certificate ([`Tls`]); a failed connect, or a description saying the connection was
    /// refused ([`Connect`]); anything else ([`Reset`]).
    ///
    /// [`IdleTimeout`]: TransportFault::IdleTimeout
    /// [`Timeout`]: TransportFault::Timeout
    /// [`StreamCut`]: TransportFault::StreamCut
    /// [`Dns`]: TransportFault::Dns
    /// [`Tls`]: TransportFault::Tls
    /// [`Connect`]: TransportFault::Connect
    /// [`Reset`]: TransportFault::Reset
    #[must_use]
    pub fn fault(&self) -> TransportFault {
        if self.timed_out {
            return if self.response_started {
                TransportFault::IdleTimeout
            } else {
                TransportFault::Timeout
            };
        }
        if self.response_started {
            return TransportFault::StreamCut;
        }
        let text = self.description.to_ascii_lowercase();
        let says = |markers: &[&str]| markers.iter().any(|m| text.contains(m));
        if says(&[
            "dns",
            "failed to lookup address",
            "name or service not known",
            "no such host",
            "nodename nor servname",
        ]) {
            TransportFault::Dns
        } else if says(&["certificate", "tls", "ssl", "handshake"]) {
            TransportFault::Tls
        } else if self.connect_failed || says(&["connection refused"]) {
            TransportFault::Connect
        } else {
            TransportFault::Reset
        }
    }
}

/// Classifies a failed exchange from what the HTTP client said about it: the fault
/// [`TransportError::fault`] picks, with the description as detail (see
/// [`classify_transport`]). Every such failure is retried.
///
/// ```
/// use rebound_core::classify::{classify_transport_error, TransportError};
/// use rebound_core::{FailureKind, TransportFault};
///
/// // Before any response: what the client's error says decides.
/// let error = TransportError::new("error sending request: dns error: failed to lookup address")
///     .with_connect_failed(true);
/// let failure = classify_transport_error(&error);
/// assert_eq!(failure.transport, Some(TransportFault::Dns));
/// assert_eq!(failure.kind, FailureKind::Transport);
///
/// // After the headers: the stream was cut, whatever the text.
/// let cut = TransportError::new("connection reset by peer").with_response_started(true);
/// assert_eq!(classify_transport_error(&cut).kind, FailureKind::StreamMalformed);
/// ```
#[must_use]
pub fn classify_transport_error(error: &TransportError<'_>) -> ProviderFailure {
    let detail = Some(error.description.trim()).filter(|d| !d.is_empty());
    classify_transport(error.fault(), detail)
}
