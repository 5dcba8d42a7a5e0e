//! Choosing the [`FailureKind`] from a status, the parsed error body and known phrasings.
//!
//! The same rules serve both providers: OpenAI-compatible proxies put Anthropic models behind
//! OpenAI's shape and vice versa, so an error type from either family is understood
//! everywhere. The order, first match wins:
//!
//! 1. **Context overflow** — status 413, an overflow type or code (`request_too_large`,
//!    `context_length_exceeded`, `exceed_context_size_error`), or a known overflow phrase in
//!    the message (not for a 429: a rate limit that mentions tokens is still a rate limit).
//! 2. **Google's details** — a `google.rpc.QuotaFailure` naming a per-day quota: quota
//!    exhausted; only shorter quotas (per minute), for a 429 or in a stream: rate limited; a
//!    `google.rpc.ErrorInfo` reason `API_KEY_…`: auth failed.
//! 3. **Reasoning rejected** — for a 4xx other than 429, or an error without an error
//!    status (mid-stream): the code `invalid_encrypted_content`, or a phrase saying encrypted
//!    content or a thinking signature could not be verified (OpenAI "The encrypted content …
//!    could not be verified", Anthropic "Invalid `signature` in `thinking` block").
//! 4. **Quota exhausted** — status 402, a quota type or code (`insufficient_quota`,
//!    `billing_error`, Anthropic's `details.error_code` `enforced_spend_limit_reached`), or a
//!    spend/credit phrase (not for a 5xx).
//! 5. **Model not found** — the `model_not_found` code, unless the status says 429 or 5xx.
//! 6. **By status**, when there is an HTTP error status (300 and above): 401/403 auth; 404
//!    model not found; 408/409/425 server error (retryable: the server answered, so this is not
//!    a transport fault); 429 rate limited; 503/529 or an "overloaded" type or message on any
//!    5xx unavailable; other 5xx server error; other 3xx/4xx bad request; above 599 server
//!    error.
//! 7. **By error type or code**, when there is no status or it is below 300 (a mid-stream
//!    error event, or a 200 whose body is an error): the table in [`kind_from_type`]; an
//!    unknown type is a server error; a body that is not an error object at all is a
//!    malformed stream.

use super::body::ErrorBody;
use super::markers;
use crate::failure::FailureKind;

/// Decides the kind. `scan` is the lowercase text to look for phrases in: the parsed message,
/// type and code, or the raw body when it did not parse.
pub(crate) fn decide(status: Option<u16>, body: Option<&ErrorBody>, scan: &str) -> FailureKind {
    let codes: Vec<String> = body
        .map(|b| {
            [&b.code, &b.error_type, &b.detail_code]
                .into_iter()
                .flatten()
                .map(|c| c.trim().to_ascii_lowercase())
                .collect()
        })
        .unwrap_or_default();
    let any_code = |pred: fn(&str) -> bool| codes.iter().any(|c| pred(c));

    let rate_limited_status = status == Some(429);
    let server_status = status.is_some_and(|s| s >= 500);

    if status == Some(413)
        || any_code(markers::is_overflow_code)
        || (!rate_limited_status && markers::mentions_overflow(scan))
    {
        return FailureKind::ContextOverflow;
    }
    if let Some(kind) = body.and_then(|b| google_kind(status, b)) {
        return kind;
    }
    // Only for a request refused as a whole (a 400, or an error event that blames it): a
    // 5xx or 429 that happens to quote such a message is still that.
    let request_refused = status.map_or(true, |s| s < 300 || ((400..500).contains(&s) && s != 429));
    if request_refused
        && (any_code(markers::is_rejected_reasoning_code)
            || markers::mentions_rejected_reasoning(scan))
    {
        return FailureKind::ReasoningRejected;
    }
    if status == Some(402)
        || any_code(markers::is_quota_code)
        || (!server_status && markers::mentions_quota(scan))
    {
        return FailureKind::QuotaExhausted;
    }
    if !rate_limited_status && !server_status && any_code(|c| c == "model_not_found") {
        return FailureKind::ModelNotFound;
    }

    // Bedrock loading the model: try again shortly, whatever status it came with (424, 429).
    if any_code(|c| c == "modelnotreadyexception") {
        return FailureKind::Unavailable;
    }
    match status {
        Some(s) if s >= 300 => kind_from_status(s, &codes, scan),
        _ => match codes.iter().find_map(|c| kind_from_type(c)) {
            Some(kind) => kind,
            None if markers::mentions_overload(scan) => FailureKind::Unavailable,
            None if body.is_some() => FailureKind::ServerError,
            None => FailureKind::StreamMalformed,
        },
    }
}

/// What Google's `details` decide, when they do. A violated quota counted per day stays
/// spent until the day ends (quota exhausted: the next target, or fail); quotas counted per
/// minute are a rate limit to wait out (`RetryInfo` says how long), whatever the message says
/// of "your current quota". An `ErrorInfo` reason `API_KEY_…` is the key refused, which the
/// Gemini API answers with a 400.
fn google_kind(status: Option<u16>, body: &ErrorBody) -> Option<FailureKind> {
    // Google's quota ids name their window: `GenerateRequestsPerDayPerProjectPerModel-…`.
    let daily = |id: &String| id.to_ascii_lowercase().contains("perday");
    if body.quota_ids.iter().any(daily) {
        return Some(FailureKind::QuotaExhausted);
    }
    if !body.quota_ids.is_empty() && status.map_or(true, |s| s == 429) {
        return Some(FailureKind::RateLimited);
    }
    if body.reasons.iter().any(|r| r.starts_with("API_KEY_")) {
        return Some(FailureKind::AuthFailed);
    }
    None
}

fn kind_from_status(status: u16, codes: &[String], scan: &str) -> FailureKind {
    match status {
        401 | 403 => FailureKind::AuthFailed,
        404 => FailureKind::ModelNotFound,
        408 | 409 | 425 => FailureKind::ServerError,
        429 => FailureKind::RateLimited,
        503 | 529 => FailureKind::Unavailable,
        500..=599 => {
            let overloaded = codes
                .iter()
                .any(|c| kind_from_type(c) == Some(FailureKind::Unavailable))
                || markers::mentions_overload(scan);
            if overloaded {
                FailureKind::Unavailable
            } else {
                FailureKind::ServerError
            }
        }
        // Another 4xx whose type says a refused key or a rate limit: AWS answers
        // `ExpiredTokenException` and, in its JSON protocols, `ThrottlingException` with a 400.
        300..=499 => codes
            .iter()
            .filter_map(|c| kind_from_type(c))
            .find(|k| matches!(k, FailureKind::AuthFailed | FailureKind::RateLimited))
            .unwrap_or(FailureKind::BadRequest),
        _ => FailureKind::ServerError,
    }
}

/// The kind an error type or code (lowercase) stands for, from either provider family.
fn kind_from_type(code: &str) -> Option<FailureKind> {
    Some(match code {
        // Anthropic rate_limit_error; OpenAI rate_limit_exceeded with type "tokens"/"requests".
        "rate_limit_error"
        | "rate_limit_exceeded"
        | "tokens"
        | "requests"
        | "too_many_requests"
        | "resource_exhausted"
        // AWS (Bedrock): HTTP 429, or an in-stream `throttlingException` event.
        | "throttlingexception" => FailureKind::RateLimited,
        // Anthropic overloaded_error (HTTP 529, also sent mid-stream); Google UNAVAILABLE.
        "overloaded_error"
        | "server_overloaded"
        | "overloaded"
        | "unavailable"
        | "service_unavailable"
        | "serviceunavailableexception"
        | "modelnotreadyexception" => FailureKind::Unavailable,
        // Anthropic api_error (500), timeout_error (504), conflict_error (409); OpenAI
        // server_error.
        "api_error"
        | "server_error"
        | "internal_error"
        | "internal_server_error"
        | "timeout_error"
        | "conflict_error"
        | "internal"
        // AWS (Bedrock), in-stream events too.
        | "internalserverexception"
        | "modelstreamerrorexception"
        | "modeltimeoutexception" => FailureKind::ServerError,
        "authentication_error"
        | "permission_error"
        | "invalid_api_key"
        | "permission_denied"
        | "unauthenticated"
        | "accessdeniedexception"
        | "unrecognizedclientexception"
        | "expiredtokenexception"
        | "invalidsignatureexception" => FailureKind::AuthFailed,
        "not_found_error" | "model_not_found" | "not_found" | "resourcenotfoundexception" => {
            FailureKind::ModelNotFound
        }
        "invalid_request_error" | "badrequesterror" | "invalid_argument" | "validationexception" => {
            FailureKind::BadRequest
        }
        // The codes of a Responses `response.failed` event that blame the request (the
        // `ResponseError.code` enum of OpenAI's OpenAPI description): as a 400 would be.
        "invalid_prompt"
        | "invalid_image"
        | "invalid_image_format"
        | "invalid_base64_image"
        | "invalid_image_url"
        | "image_too_large"
        | "image_too_small"
        | "image_parse_error"
        | "image_content_policy_violation"
        | "invalid_image_mode"
        | "image_file_too_large"
        | "unsupported_image_media_type"
        | "empty_image_file"
        | "failed_to_download_image"
        | "image_file_not_found" => FailureKind::BadRequest,
        // Its `vector_store_timeout`: the server's own slowness, retryable.
        "vector_store_timeout" => FailureKind::ServerError,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(error_type: &str) -> ErrorBody {
        ErrorBody {
            error_type: Some(error_type.to_owned()),
            message: Some("m".to_owned()),
            ..ErrorBody::default()
        }
    }

    #[test]
    fn http_statuses_map_to_kinds_without_a_body() {
        use FailureKind::*;
        for (status, kind) in [
            (400, BadRequest),
            (401, AuthFailed),
            (402, QuotaExhausted),
            (403, AuthFailed),
            (404, ModelNotFound),
            (405, BadRequest),
            (408, ServerError),
            (409, ServerError),
            (413, ContextOverflow),
            (422, BadRequest),
            (425, ServerError),
            (429, RateLimited),
            (500, ServerError),
            (502, ServerError),
            (503, Unavailable),
            (504, ServerError),
            (529, Unavailable),
            (301, BadRequest),
            (999, ServerError),
        ] {
            assert_eq!(decide(Some(status), None, ""), kind, "{status}");
        }
    }

    #[test]
    fn mid_stream_error_types_map_to_kinds() {
        use FailureKind::*;
        for (error_type, kind) in [
            ("overloaded_error", Unavailable),
            ("api_error", ServerError),
            ("rate_limit_error", RateLimited),
            ("invalid_request_error", BadRequest),
            ("authentication_error", AuthFailed),
            ("not_found_error", ModelNotFound),
            ("server_error", ServerError),
            ("something_new", ServerError),
        ] {
            assert_eq!(
                decide(None, Some(&typed(error_type)), "m"),
                kind,
                "{error_type}"
            );
            assert_eq!(
                decide(Some(200), Some(&typed(error_type)), "m"),
                kind,
                "{error_type}"
            );
        }
        assert_eq!(decide(None, None, "garbage"), StreamMalformed);
    }

    #[test]
    fn a_server_error_that_says_it_is_overloaded_is_unavailable_by_type_or_by_words() {
        let untyped = ErrorBody {
            message: Some("m".into()),
            ..ErrorBody::default()
        };
        // A 5xx other than 503/529: its type alone, or its words alone, say overloaded.
        assert_eq!(
            decide(Some(500), Some(&typed("overloaded_error")), "m"),
            FailureKind::Unavailable
        );
        assert_eq!(
            decide(Some(502), Some(&untyped), "upstream is overloaded"),
            FailureKind::Unavailable
        );
        assert_eq!(
            decide(Some(500), Some(&typed("api_error")), "m"),
            FailureKind::ServerError
        );
        // An error event mid-stream with no known type: its words decide.
        assert_eq!(
            decide(None, Some(&untyped), "overloaded, try later"),
            FailureKind::Unavailable
        );
        assert_eq!(
            decide(None, Some(&untyped), "something broke"),
            FailureKind::ServerError
        );
    }

    #[test]
    fn unverifiable_reasoning_is_its_own_kind_only_when_the_request_is_refused() {
        let openai = ErrorBody {
            error_type: Some("invalid_request_error".into()),
            code: Some("invalid_encrypted_content".into()),
            message: Some("The encrypted content gAAA...Rg== could not be verified.".into()),
            ..ErrorBody::default()
        };
        let scan = "the encrypted content gaaa...rg== could not be verified.";
        assert_eq!(
            decide(Some(400), Some(&openai), scan),
            FailureKind::ReasoningRejected
        );
        assert_eq!(
            decide(None, Some(&openai), scan),
            FailureKind::ReasoningRejected
        );
        let anthropic = typed("invalid_request_error");
        let scan = "messages.1.content.0: invalid `signature` in `thinking` block";
        assert_eq!(
            decide(Some(400), Some(&anthropic), scan),
            FailureKind::ReasoningRejected
        );
        // An error event in a 200 stream refuses the request as a whole too; a 3xx (a
        // redirect the client did not follow) quoting it is not a refusal of the reasoning.
        assert_eq!(
            decide(Some(200), Some(&openai), scan),
            FailureKind::ReasoningRejected
        );
        assert_eq!(
            decide(Some(299), Some(&openai), scan),
            FailureKind::ReasoningRejected
        );
        assert_ne!(
            decide(Some(300), Some(&openai), scan),
            FailureKind::ReasoningRejected
        );
        // A server error or a rate limit that quotes it is still what its status says.
        assert_eq!(
            decide(Some(500), Some(&openai), scan),
            FailureKind::ServerError
        );
        assert_eq!(
            decide(Some(429), Some(&openai), scan),
            FailureKind::RateLimited
        );
    }

    #[test]
    fn a_rate_limit_that_mentions_context_is_still_a_rate_limit() {
        assert_eq!(
            decide(Some(429), None, "maximum context length is 5"),
            FailureKind::RateLimited
        );
    }

    #[test]
    fn a_server_error_that_mentions_a_spend_limit_is_not_quota() {
        assert_eq!(
            decide(Some(500), None, "spend limit service unavailable"),
            FailureKind::ServerError
        );
    }
}
