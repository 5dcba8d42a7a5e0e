//! The less common shapes of an error body, and what a client says about a failed exchange,
//! read through the public classifiers: every field that is there is used, and a field that
//! says nothing (blank) never hides one that says something.

use rebound_core::classify::{
    classify_error_body, classify_http, classify_transport_error, TransportError,
};
use rebound_core::{FailureKind, Headers, ProviderKind, TransportFault};

fn classify(provider: ProviderKind, status: u16, body: &str) -> rebound_core::ProviderFailure {
    classify_http(provider, status, &Headers::new(), body.as_bytes(), None)
}

#[test]
fn a_one_element_array_around_the_error_is_read_as_the_error() {
    // Google-style proxies wrap the error object in an array.
    let failure = classify(
        ProviderKind::OpenAi,
        429,
        r#"[{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]"#,
    );
    assert_eq!(
        &*failure.message,
        "Resource has been exhausted (e.g. check quota)."
    );
    assert_eq!(failure.error_type.as_deref(), Some("RESOURCE_EXHAUSTED"));
    // An empty array is no error object: its text is the message.
    let failure = classify(ProviderKind::OpenAi, 500, "[]");
    assert_eq!(&*failure.message, "[]");
    assert_eq!(failure.error_type, None);
}

#[test]
fn an_error_with_only_a_code_or_only_a_type_is_still_read() {
    let failure = classify(
        ProviderKind::OpenAi,
        400,
        r#"{"error":{"code":"model_not_found"}}"#,
    );
    assert_eq!(failure.kind, FailureKind::ModelNotFound);
    assert_eq!(failure.error_type.as_deref(), Some("model_not_found"));
    let failure = classify(
        ProviderKind::Anthropic,
        400,
        r#"{"type":"error","error":{"type":"billing_error"}}"#,
    );
    assert_eq!(failure.kind, FailureKind::QuotaExhausted);
    assert_eq!(failure.error_type.as_deref(), Some("billing_error"));
}

#[test]
fn a_blank_code_does_not_hide_the_type() {
    // OpenAI's code wins over its type when both say something; a blank one says nothing.
    let failure = classify(
        ProviderKind::OpenAi,
        429,
        r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","code":"  "}}"#,
    );
    assert_eq!(failure.error_type.as_deref(), Some("insufficient_quota"));
    assert_eq!(failure.kind, FailureKind::QuotaExhausted);
}

#[test]
fn a_transport_failure_keeps_what_the_client_said() {
    let failure = classify_transport_error(
        &TransportError::new("error sending request: connection reset by peer")
            .with_response_started(false),
    );
    assert!(
        failure
            .message
            .ends_with("error sending request: connection reset by peer"),
        "{}",
        failure.message
    );
    // Nothing said: the fault's own words, no dangling separator.
    let failure = classify_transport_error(&TransportError::new("  ").with_timed_out(true));
    assert_eq!(failure.transport, Some(TransportFault::Timeout));
    assert!(!failure.message.ends_with(':') && !failure.message.ends_with(": "));
}

#[test]
fn the_delay_written_in_a_rate_limit_message_is_read_only_without_a_status() {
    use rebound_core::classify::classify_error_body;
    let body = br#"{"error":{"message":"Rate limit reached for gpt-4o on tokens per min (TPM). Please try again in 1.898s.","type":"tokens","code":"rate_limit_exceeded"}}"#;
    // Inside a stream, the message is the only hint there is.
    let in_stream = classify_error_body(ProviderKind::OpenAi, None, body);
    assert_eq!(in_stream.kind, FailureKind::RateLimited);
    assert_eq!(in_stream.retry_after_ms, Some(1_898));
    // With a status, the headers carry the hints (classify_http reads them).
    let with_status = classify_error_body(ProviderKind::OpenAi, Some(429), body);
    assert_eq!(with_status.retry_after_ms, None);
    // Another kind of failure that mentions a delay gets none.
    let server = br#"{"error":{"message":"The server had an error. Please try again in 5s.","type":"server_error"}}"#;
    let failure = classify_error_body(ProviderKind::OpenAi, None, server);
    assert_ne!(failure.kind, FailureKind::RateLimited);
    assert_eq!(failure.retry_after_ms, None);
}

/// A Responses `response.failed` event, as it arrives inside a 200 stream.
fn failed_response(code: &str) -> String {
    format!(
        r#"{{"type":"response.failed","sequence_number":3,"response":{{"id":"resp_1","status":"failed","error":{{"code":"{code}","message":"m"}}}}}}"#
    )
}

#[test]
fn a_failed_response_that_blames_the_request_is_a_bad_request_not_a_retry() {
    // The codes of OpenAI's `ResponseError.code` enum that say the request itself is wrong: the
    // same request would fail again, so it is not retried.
    for code in [
        "invalid_prompt",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    ] {
        let failure =
            classify_error_body(ProviderKind::OpenAi, None, failed_response(code).as_bytes());
        assert_eq!(failure.kind, FailureKind::BadRequest, "{code}");
        assert_eq!(failure.error_type.as_deref(), Some(code));
    }
    // The server's own slowness or failure is retried.
    for code in [
        "vector_store_timeout",
        "server_error",
        "rate_limit_exceeded",
    ] {
        let failure =
            classify_error_body(ProviderKind::OpenAi, None, failed_response(code).as_bytes());
        assert_ne!(failure.kind, FailureKind::BadRequest, "{code}");
    }
}

#[test]
fn without_a_status_the_code_decides_before_the_type() {
    // The code is the specific reason, the type only its family: a generic type beside it
    // (as gateways add) does not turn a server-side failure into a refused request, nor the
    // reverse.
    for (code, error_type, kind) in [
        (
            "server_error",
            "invalid_request_error",
            FailureKind::ServerError,
        ),
        (
            "api_error",
            "invalid_request_error",
            FailureKind::ServerError,
        ),
        (
            "internal_error",
            "invalid_request_error",
            FailureKind::ServerError,
        ),
        (
            "internal_server_error",
            "invalid_request_error",
            FailureKind::ServerError,
        ),
        (
            "timeout_error",
            "invalid_request_error",
            FailureKind::ServerError,
        ),
        (
            "vector_store_timeout",
            "invalid_request_error",
            FailureKind::ServerError,
        ),
        ("invalid_prompt", "server_error", FailureKind::BadRequest),
        ("image_too_large", "server_error", FailureKind::BadRequest),
    ] {
        let body =
            format!(r#"{{"error":{{"type":"{error_type}","code":"{code}","message":"m"}}}}"#);
        let failure = classify_error_body(ProviderKind::OpenAi, None, body.as_bytes());
        assert_eq!(failure.kind, kind, "{code} beside {error_type}");
        assert_eq!(failure.error_type.as_deref(), Some(code));
    }
}

#[test]
fn reasoning_is_rejected_by_its_code_alone_and_only_by_the_whole_phrase() {
    // OpenAI's code says it whatever the message's words.
    let failure = classify(
        ProviderKind::OpenAi,
        400,
        r#"{"error":{"message":"Bad request.","type":"invalid_request_error","code":"invalid_encrypted_content"}}"#,
    );
    assert_eq!(failure.kind, FailureKind::ReasoningRejected);
    // The phrase needs both halves: "the encrypted content" and "could not be verified". Other
    // things that could not be verified, or encrypted content with another complaint, are the
    // request's other faults.
    for message in [
        "The webhook signature could not be verified.",
        "The encrypted content is missing its id.",
    ] {
        let body =
            format!(r#"{{"error":{{"message":"{message}","type":"invalid_request_error"}}}}"#);
        let failure = classify(ProviderKind::OpenAi, 400, &body);
        assert_eq!(failure.kind, FailureKind::BadRequest, "{message}");
    }
    let failure = classify(
        ProviderKind::OpenAi,
        400,
        r#"{"error":{"message":"The encrypted content gAAA==Rg could not be verified.","type":"invalid_request_error"}}"#,
    );
    assert_eq!(failure.kind, FailureKind::ReasoningRejected);
}

#[test]
fn an_error_event_typed_request_too_large_is_an_overflow_whatever_its_words() {
    // Anthropic's `request_too_large` (its 413), as an error event in a stream: no status, and
    // a message that names no context window; the type says the request must shrink.
    let failure = classify_error_body(
        ProviderKind::Anthropic,
        None,
        br#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#,
    );
    assert_eq!(failure.kind, FailureKind::ContextOverflow);
}

#[test]
fn a_body_that_is_no_error_object_is_scanned_for_its_words_up_to_64_kib() {
    // A proxy's plain-text or HTML refusal still says what went wrong.
    let failure = classify(
        ProviderKind::OpenAi,
        400,
        "prompt is too long: 300000 tokens > 200000 maximum",
    );
    assert_eq!(failure.kind, FailureKind::ContextOverflow);
    // Far into the body, but within the first 64 KiB, the words count; past them, not.
    let padding = "x".repeat(60 * 1024);
    let within = format!("{padding} prompt is too long");
    assert_eq!(
        classify(ProviderKind::OpenAi, 400, &within).kind,
        FailureKind::ContextOverflow
    );
    let beyond = format!("{padding}{padding} prompt is too long");
    assert_eq!(
        classify(ProviderKind::OpenAi, 400, &beyond).kind,
        FailureKind::BadRequest
    );
}

#[test]
fn a_long_message_is_cut_at_2000_characters_spaces_included() {
    let message = "ab ".repeat(1000);
    let body = format!(r#"{{"error":{{"message":"{message}","type":"invalid_request_error"}}}}"#);
    let failure = classify(ProviderKind::OpenAi, 400, &body);
    assert_eq!(failure.message.chars().count(), 2001, "{}", failure.message);
    assert!(failure.message.ends_with("ab…"), "{}", failure.message);
}

#[test]
fn an_html_page_keeps_the_greater_than_signs_of_its_text() {
    let failure = classify(
        ProviderKind::OpenAi,
        502,
        "<html><body><p>upstream latency > 30 s</p></body></html>",
    );
    assert_eq!(&*failure.message, "upstream latency > 30 s");
}
