//! Classification of real provider error bodies (see `fixtures/errors/SOURCES.md`), plus the
//! wordings and hostile inputs that have no byte-exact capture.

use rebound_core::classify::{
    classify_error_body, classify_http, classify_transport, classify_transport_error,
    TransportError,
};
use rebound_core::{FailureAction, FailureKind, Headers, ProviderKind, TransportFault};

use FailureKind::*;
use ProviderKind::{Anthropic, OpenAi};

macro_rules! fixture {
    ($name:literal) => {
        (
            $name,
            &include_bytes!(concat!("../../fixtures/errors/", $name))[..],
        )
    };
}

struct Case {
    fixture: (&'static str, &'static [u8]),
    provider: ProviderKind,
    status: u16,
    kind: FailureKind,
    error_type: Option<&'static str>,
    message_starts: &'static str,
    request_id: Option<&'static str>,
}

/// AWS (Bedrock) names the error in `x-amzn-errortype` (or a body's `__type`) and its request
/// id in `x-amzn-requestid`, as botocore's `RestJSONParser` reads them. The bodies carry only
/// a message: the ones quoted in public reports of Bedrock clients (promptfoo #1508,
/// aws-samples/aws-genai-llm-chatbot #220, litellm #21647) and AWS's API reference.
#[test]
fn aws_errors_are_read_from_their_header_as_botocore_reads_them() {
    let throttled = r#"{"message":"Too many requests, please wait before trying again. You have sent too many requests.  Wait before trying again."}"#;
    let cases: [(u16, &str, &str, FailureKind); 7] = [
        (
            429,
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            throttled,
            RateLimited,
        ),
        (
            400,
            "ServiceQuotaExceededException",
            r#"{"message":"Your request exceeds the service quota for your account."}"#,
            QuotaExhausted,
        ),
        (
            424,
            "ModelNotReadyException",
            r#"{"message":"Model is not ready for inference. Wait and try your request again."}"#,
            Unavailable,
        ),
        (
            429,
            "ModelNotReadyException",
            r#"{"message":"Model is not ready for inference."}"#,
            Unavailable,
        ),
        (
            400,
            "ExpiredTokenException",
            r#"{"message":"The security token included in the request is expired"}"#,
            AuthFailed,
        ),
        (
            403,
            "UnrecognizedClientException",
            r#"{"Message":"The security token included in the request is invalid."}"#,
            AuthFailed,
        ),
        (
            400,
            "ValidationException",
            r#"{"message":"Input is too long for requested model."}"#,
            ContextOverflow,
        ),
    ];
    for (status, error_type, body, kind) in cases {
        let mut headers = Headers::new();
        headers.push("x-amzn-errortype", error_type);
        headers.push("x-amzn-requestid", "bc9af776-2940-485e-ba33-d7933e178873");
        let f = classify_http(OpenAi, status, &headers, body.as_bytes(), None);
        assert_eq!(f.kind, kind, "{error_type}: {f:?}");
        assert_eq!(
            f.error_type.as_deref(),
            error_type.split(':').next(),
            "{error_type}"
        );
        assert_eq!(
            f.request_id.as_deref(),
            Some("bc9af776-2940-485e-ba33-d7933e178873")
        );
        assert!(
            !f.message.starts_with('{'),
            "the message, not the body: {f:?}"
        );
    }
    // The JSON protocols' form: the type in the body, namespaced, with a 400.
    let body =
        br#"{"__type":"com.amazon.coral.service#ThrottlingException","message":"Rate exceeded"}"#;
    let f = classify_http(OpenAi, 400, &Headers::new(), body, None);
    assert_eq!(
        (f.kind, f.error_type.as_deref()),
        (RateLimited, Some("ThrottlingException"))
    );
}

/// Google's `RetryInfo` is the delay to wait; a `retry-after` header, when one came, wins.
#[test]
fn googles_retry_info_is_the_delay_unless_a_header_says_otherwise() {
    let (_, body) = fixture!("gemini_quota_per_minute_quoted_429.json");
    let f = classify_http(OpenAi, 429, &Headers::new(), body, None);
    assert_eq!((f.kind, f.retry_after_ms), (RateLimited, Some(26_000)));
    let mut headers = Headers::new();
    headers.push("retry-after", "3");
    let f = classify_http(OpenAi, 429, &headers, body, None);
    assert_eq!(f.retry_after_ms, Some(3_000));
    // The same error inside a stream (no status): still a rate limit with its delay.
    let quoted: serde_json::Value = serde_json::from_slice(body).expect("JSON");
    let inner = quoted["error"]["message"]
        .as_str()
        .expect("the quoted body");
    let f = classify_error_body(OpenAi, None, inner.as_bytes());
    assert_eq!((f.kind, f.retry_after_ms), (RateLimited, Some(26_000)));
    // A per-day quota is spent till the day ends: no wait makes it work, whatever the hint.
    let (_, body) = fixture!("gemini_quota_per_day_429.json");
    let f = classify_http(OpenAi, 429, &Headers::new(), body, None);
    assert_eq!(f.kind, QuotaExhausted);
    assert_eq!(f.action(), FailureAction::Fail); // the next target, when there is one
}

#[test]
fn real_error_bodies_classify_to_the_expected_kind_type_message_and_request_id() {
    let cases = [
        Case {
            fixture: fixture!("anthropic_overloaded_529.json"),
            provider: Anthropic,
            status: 529,
            kind: Unavailable,
            error_type: Some("overloaded_error"),
            message_starts: "Overloaded",
            request_id: Some("req_011CX7J5ZXp3npD8nY7VYZvm"),
        },
        Case {
            fixture: fixture!("anthropic_prompt_too_long_400.json"),
            provider: Anthropic,
            status: 400,
            kind: ContextOverflow,
            error_type: Some("invalid_request_error"),
            message_starts: "prompt is too long: 219898 tokens > 200000 maximum",
            request_id: Some("req_011CVjxiYzEFcAQC4Fk87zw2"),
        },
        Case {
            fixture: fixture!("anthropic_max_tokens_exceed_context_400.json"),
            provider: Anthropic,
            status: 400,
            kind: ContextOverflow,
            error_type: Some("invalid_request_error"),
            message_starts: "input length and `max_tokens` exceed context limit",
            request_id: Some("req_011CUWu7a8bGeMSvA9d7DRLa"),
        },
        Case {
            fixture: fixture!("anthropic_credit_balance_400.json"),
            provider: Anthropic,
            status: 400,
            kind: QuotaExhausted,
            error_type: Some("invalid_request_error"),
            message_starts: "Your credit balance is too low",
            request_id: Some("req_011CZ47RMLnx1JoJXRrzzSde"),
        },
        Case {
            fixture: fixture!("anthropic_spend_limit_429.json"),
            provider: Anthropic,
            status: 429,
            kind: QuotaExhausted,
            error_type: Some("rate_limit_error"),
            message_starts: "You have reached your API usage limits",
            request_id: Some("req_018EeWyXxfu5pfWkrYcMdjWG"),
        },
        Case {
            fixture: fixture!("anthropic_rate_limit_429.json"),
            provider: Anthropic,
            status: 429,
            kind: RateLimited,
            error_type: Some("rate_limit_error"),
            message_starts: "Rate limited",
            request_id: Some("req_011CcEKSiJyvQLd8zW1kBxWe"),
        },
        Case {
            fixture: fixture!("anthropic_authentication_401.json"),
            provider: Anthropic,
            status: 401,
            kind: AuthFailed,
            error_type: Some("authentication_error"),
            message_starts: "invalid x-api-key",
            request_id: None,
        },
        Case {
            fixture: fixture!("openai_context_length_exceeded_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            error_type: Some("context_length_exceeded"),
            message_starts: "This model's maximum context length is 4097 tokens.",
            request_id: None,
        },
        Case {
            fixture: fixture!("openai_insufficient_quota_429.json"),
            provider: OpenAi,
            status: 429,
            kind: QuotaExhausted,
            error_type: Some("insufficient_quota"),
            message_starts: "You exceeded your current quota",
            request_id: None,
        },
        Case {
            fixture: fixture!("openai_invalid_api_key_401.json"),
            provider: OpenAi,
            status: 401,
            kind: AuthFailed,
            error_type: Some("invalid_api_key"),
            // The (already masked) key is redacted entirely.
            message_starts: "Incorrect API key provided: sk-***. You can find your API key",
            request_id: None,
        },
        Case {
            fixture: fixture!("openai_overloaded_503.json"),
            provider: OpenAi,
            status: 503,
            kind: Unavailable,
            error_type: Some("server_error"),
            message_starts: "That model is currently overloaded",
            request_id: None,
        },
        Case {
            fixture: fixture!("vllm_context_length_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            error_type: Some("BadRequestError"),
            message_starts: "This model's maximum context length is 3 tokens.",
            request_id: None,
        },
        Case {
            fixture: fixture!("vllm_context_length_max_tokens_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            error_type: Some("BadRequestError"),
            message_starts: "This model's maximum context length is 2048 tokens.",
            request_id: None,
        },
        Case {
            fixture: fixture!("litellm_context_window_exceeded_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            // LiteLLM's `code` only repeats the status: not an error type.
            error_type: None,
            message_starts: "litellm.BadRequestError: litellm.ContextWindowExceededError",
            request_id: None,
        },
        Case {
            fixture: fixture!("litellm_context_window_exceeded_wrapped_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            error_type: None,
            message_starts: "litellm.ContextWindowExceededError",
            request_id: None,
        },
        Case {
            fixture: fixture!("gemini_input_token_count_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            error_type: Some("INVALID_ARGUMENT"),
            message_starts: "The input token count (1196265) exceeds the maximum number of tokens",
            request_id: None,
        },
        Case {
            fixture: fixture!("bedrock_input_too_long_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            error_type: None,
            message_starts: "Input is too long for requested model.",
            request_id: None,
        },
        Case {
            fixture: fixture!("llamacpp_exceed_context_size_400.json"),
            provider: OpenAi,
            status: 400,
            kind: ContextOverflow,
            error_type: Some("exceed_context_size_error"),
            message_starts: "the request exceeds the available context size",
            request_id: None,
        },
        Case {
            fixture: fixture!("openai_invalid_encrypted_content_400.json"),
            provider: ProviderKind::OpenAiResponses,
            status: 400,
            kind: ReasoningRejected,
            error_type: Some("invalid_encrypted_content"),
            message_starts: "The encrypted content gAAA...Rg== could not be verified.",
            request_id: None,
        },
        Case {
            fixture: fixture!("openai_invalid_encrypted_content_reason_400.json"),
            provider: ProviderKind::OpenAiResponses,
            status: 400,
            kind: ReasoningRejected,
            error_type: Some("invalid_encrypted_content"),
            message_starts: "The encrypted content - **",
            request_id: None,
        },
        Case {
            fixture: fixture!("anthropic_invalid_thinking_signature_400.json"),
            provider: Anthropic,
            status: 400,
            kind: ReasoningRejected,
            error_type: Some("invalid_request_error"),
            message_starts: "messages.1.content.0: Invalid `signature` in `thinking` block",
            request_id: Some("req_011CUdL49e3Fu9bCKbWF6cXD"),
        },
        Case {
            fixture: fixture!("anthropic_invalid_redacted_thinking_data_400.json"),
            provider: Anthropic,
            status: 400,
            kind: ReasoningRejected,
            error_type: Some("invalid_request_error"),
            message_starts: "messages.23.content.2: Invalid `data` in `redacted_thinking` block",
            request_id: Some("req_011CamM5VpyWaVCeoug2xCBT"),
        },
        Case {
            fixture: fixture!("anthropic_thinking_missing_in_tool_loop_400.json"),
            provider: Anthropic,
            status: 400,
            kind: ReasoningRejected,
            error_type: Some("invalid_request_error"),
            message_starts: "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`.",
            request_id: Some("req_vrtx_011CXHqiZPJzdrvgn43AHAoA"),
        },
        Case {
            fixture: fixture!("gemini_api_key_invalid_400.json"),
            provider: OpenAi,
            status: 400,
            kind: AuthFailed,
            error_type: Some("INVALID_ARGUMENT"),
            message_starts: "API key not valid. Please pass a valid API key.",
            request_id: None,
        },
        Case {
            fixture: fixture!("gemini_api_key_invalid_quoted_400.json"),
            provider: OpenAi,
            status: 400,
            kind: AuthFailed,
            error_type: Some("INVALID_ARGUMENT"),
            message_starts: "API key not valid. Please pass a valid API key.",
            request_id: None,
        },
        Case {
            fixture: fixture!("gemini_quota_per_minute_quoted_429.json"),
            provider: OpenAi,
            status: 429,
            kind: RateLimited,
            error_type: Some("RESOURCE_EXHAUSTED"),
            message_starts: "You exceeded your current quota, please check your plan",
            request_id: None,
        },
        Case {
            fixture: fixture!("gemini_quota_per_day_429.json"),
            provider: OpenAi,
            status: 429,
            kind: QuotaExhausted,
            error_type: Some("RESOURCE_EXHAUSTED"),
            message_starts: "You exceeded your current quota, please check your plan",
            request_id: None,
        },
        Case {
            fixture: fixture!("vertex_resource_exhausted_429.json"),
            provider: OpenAi,
            status: 429,
            kind: RateLimited,
            error_type: Some("RESOURCE_EXHAUSTED"),
            message_starts: "Resource exhausted. Please try again later.",
            request_id: None,
        },
        Case {
            fixture: fixture!("nginx_bad_gateway_502.html"),
            provider: OpenAi,
            status: 502,
            kind: ServerError,
            error_type: None,
            message_starts: "502 Bad Gateway 502 Bad Gateway nginx",
            request_id: None,
        },
    ];
    for case in cases {
        let (name, body) = case.fixture;
        let f = classify_http(case.provider, case.status, &Headers::new(), body, None);
        assert_eq!(f.kind, case.kind, "{name}");
        assert_eq!(f.status, Some(case.status), "{name}");
        assert_eq!(f.error_type.as_deref(), case.error_type, "{name}");
        assert!(
            f.message.starts_with(case.message_starts),
            "{name}: message {:?}",
            f.message
        );
        assert_eq!(f.request_id.as_deref(), case.request_id, "{name}");
        assert!(!f.message.contains('\n'), "{name}: message is one line");
    }
}

#[test]
fn anthropic_mid_stream_overloaded_event_is_retryable_unavailability() {
    let (_, data) = fixture!("anthropic_stream_error_overloaded.json");
    let f = classify_error_body(Anthropic, None, data);
    assert_eq!(f.kind, Unavailable);
    assert_eq!(f.status, None);
    assert_eq!(f.error_type.as_deref(), Some("overloaded_error"));
    assert_eq!(&*f.message, "Overloaded");
    assert_eq!(f.action(), FailureAction::Retry);
    // The same event after a 200 status line.
    assert_eq!(
        classify_error_body(Anthropic, Some(200), data).kind,
        Unavailable
    );
}

#[test]
fn the_design_documents_overflow_examples_compact() {
    let anthropic = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 205351 tokens > 200000 maximum"}}"#;
    let f = classify_http(Anthropic, 400, &Headers::new(), anthropic, None);
    assert_eq!(f.kind, ContextOverflow);
    assert_eq!(f.action(), FailureAction::Compact);

    let openai = br#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
    let f = classify_http(OpenAi, 400, &Headers::new(), openai, None);
    assert_eq!(f.kind, ContextOverflow);
}

#[test]
fn compatible_server_wordings_without_captures_are_recognized() {
    let cases: [(&[u8], u16, FailureKind); 8] = [
        // Ollama's native error shape.
        (
            br#"{"error":"the input length exceeds the context length"}"#,
            400,
            ContextOverflow,
        ),
        // OpenRouter.
        (
            br#"{"error":{"message":"This endpoint's maximum context length is 131072 tokens. However, you requested about 138956 tokens (7884 of text input, 131072 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.","code":400}}"#,
            400,
            ContextOverflow,
        ),
        // OpenAI rate limit with type "tokens".
        (
            br#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
            429,
            RateLimited,
        ),
        // OpenAI unknown model, sometimes sent as a 400.
        (
            br#"{"error":{"message":"The model `gpt-4-1106-preview` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
            400,
            ModelNotFound,
        ),
        // Anthropic workspace spend limit you set yourself: a 400.
        (
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-01-01 at 00:00 UTC."}}"#,
            400,
            QuotaExhausted,
        ),
        // Anthropic billing problem.
        (
            br#"{"type":"error","error":{"type":"billing_error","message":"Billing error"}}"#,
            402,
            QuotaExhausted,
        ),
        // Anthropic 413 comes from Cloudflare before the API: whatever the body.
        (b"<html><body>413 Request Entity Too Large</body></html>", 413, ContextOverflow),
        // Ollama model-not-found through the OpenAI-compatible endpoint.
        (
            br#"{"error":{"message":"model \"llama9\" not found, try pulling it first","type":"api_error","param":null,"code":null}}"#,
            404,
            ModelNotFound,
        ),
    ];
    for (body, status, kind) in cases {
        let f = classify_http(OpenAi, status, &Headers::new(), body, None);
        assert_eq!(f.kind, kind, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn a_status_a_gateway_puts_in_the_error_code_is_not_repeated() {
    // The LiteLLM proxy answers with its `ProxyException`: `code` is `str(status_code)` and
    // `type` the exception's own, `null` or the string "None" when it has none
    // (BerriAI/litellm, `litellm/proxy/_types.py` and `proxy/proxy_server.py`; its own limiter
    // uses `throttling_error`). See fixtures/errors/SOURCES.md.
    let message = "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached \
                   for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used \
                   29937, Requested 385. Please try again in 644ms.";
    for (error_type, shown) in [
        ("null", "rate limited (HTTP 429): litellm.RateLimitError"),
        (
            r#""None""#,
            "rate limited (HTTP 429): litellm.RateLimitError",
        ),
        (
            r#""throttling_error""#,
            "rate limited (HTTP 429 throttling_error): litellm.RateLimitError",
        ),
    ] {
        let body = format!(
            r#"{{"error":{{"message":"{message}","type":{error_type},"param":null,"code":"429"}}}}"#
        );
        let f = classify_http(OpenAi, 429, &Headers::new(), body.as_bytes(), None);
        assert_eq!(f.kind, RateLimited);
        let line = f.to_string();
        assert!(line.starts_with(shown), "{line}");
        assert!(!line.contains("429 429"), "{line}");
    }
    // Any failure whose type merely repeats its status shows the status once.
    let mut f = rebound_core::ProviderFailure::new(ServerError, "boom").with_status(502);
    f.error_type = Some("502".into());
    assert_eq!(f.to_string(), "provider server error (HTTP 502): boom");
}

#[test]
fn limits_that_compaction_cannot_fix_are_not_context_overflow() {
    let cases: [(&[u8], u16, FailureKind); 3] = [
        // max_tokens above the model's output limit: the request is wrong, not too long.
        (
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 128000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-20250514"}}"#,
            400,
            BadRequest,
        ),
        // A per-minute token rate limit mentions tokens and limits but is a rate limit.
        (
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 40,000 input tokens per minute. Please reduce the prompt length or the maximum tokens requested, or try again later."}}"#,
            429,
            RateLimited,
        ),
        // A 429 quoting an overflow phrase is still a rate limit.
        (
            br#"{"error":{"message":"maximum context length rate limit","type":"requests","code":"rate_limit_exceeded"}}"#,
            429,
            RateLimited,
        ),
    ];
    for (body, status, kind) in cases {
        let f = classify_http(Anthropic, status, &Headers::new(), body, None);
        assert_eq!(f.kind, kind, "{}", String::from_utf8_lossy(body));
    }
}

#[test]
fn openai_mid_stream_error_line_is_classified_by_its_type() {
    let data = br#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#;
    let f = classify_error_body(OpenAi, None, data);
    assert_eq!(f.kind, ServerError);
    assert_eq!(f.error_type.as_deref(), Some("server_error"));
    let overflow =
        br#"{"error":{"message":"the request exceeds the available context size","code":400}}"#;
    assert_eq!(
        classify_error_body(OpenAi, None, overflow).kind,
        ContextOverflow
    );
    assert_eq!(
        classify_error_body(OpenAi, None, b"data: [DONE").kind,
        StreamMalformed
    );
}

#[test]
fn request_id_comes_from_the_providers_header_then_the_body() {
    let (_, body) = fixture!("anthropic_overloaded_529.json");
    let headers = Headers::new()
        .with("x-request-id", "x-id")
        .with("request-id", "req_header");
    let f = classify_http(Anthropic, 529, &headers, body, None);
    assert_eq!(f.request_id.as_deref(), Some("req_header"));
    let f = classify_http(OpenAi, 503, &headers, b"", None);
    assert_eq!(f.request_id.as_deref(), Some("x-id"));
    let f = classify_http(Anthropic, 529, &Headers::new(), body, None);
    assert_eq!(
        f.request_id.as_deref(),
        Some("req_011CX7J5ZXp3npD8nY7VYZvm")
    );
}

#[test]
fn x_should_retry_is_recorded_and_overrides_the_decision() {
    let (_, body) = fixture!("anthropic_overloaded_529.json");
    for (value, recorded, action) in [
        ("true", Some(true), FailureAction::Retry),
        ("FALSE", Some(false), FailureAction::Fail),
        ("maybe", None, FailureAction::Retry),
    ] {
        let headers = Headers::new().with("x-should-retry", value);
        let f = classify_http(Anthropic, 529, &headers, body, None);
        assert_eq!(f.should_retry, recorded, "{value}");
        assert_eq!(f.action(), action, "{value}");
    }
    let f = classify_http(
        OpenAi,
        400,
        &Headers::new().with("x-should-retry", "true"),
        b"{}",
        None,
    );
    assert_eq!(f.kind, BadRequest);
    assert_eq!(f.action(), FailureAction::Retry);
}

#[test]
fn delay_hints_are_attached_to_the_failure() {
    let (_, body) = fixture!("anthropic_rate_limit_429.json");
    let headers = Headers::new()
        .with("retry-after", "17")
        .with("anthropic-ratelimit-tokens-remaining", "0")
        .with("anthropic-ratelimit-tokens-reset", "2023-09-29T16:27:07Z");
    let f = classify_http(Anthropic, 429, &headers, body, Some(1_696_004_797_000));
    assert_eq!(f.retry_after_ms, Some(17_000));
    assert_eq!(f.rate_limit_reset_ms, Some(30_000));
    let reset_only = Headers::new()
        .with("x-ratelimit-remaining-requests", "0")
        .with("x-ratelimit-reset-requests", "3ms");
    let limited = classify_http(OpenAi, 429, &reset_only, b"{}", None);
    assert_eq!(limited.rate_limit_reset_ms, Some(3));
    let down = classify_http(OpenAi, 503, &reset_only, b"{}", None);
    assert_eq!(down.rate_limit_reset_ms, Some(3));
}

#[test]
fn unparsable_bodies_fall_back_to_the_status_and_a_short_clean_excerpt() {
    let huge = vec![b'x'; 10 * 1024 * 1024];
    let mut deep = vec![b'['; 10_000];
    deep.extend(vec![b']'; 10_000]);
    let cases: [(&[u8], u16, FailureKind); 7] = [
        (b"", 502, ServerError),
        (
            b"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_er",
            529,
            Unavailable,
        ),
        (b"\xff\xfe\x00\x01garbage\x1b[0m", 500, ServerError),
        (&deep, 400, BadRequest),
        (&huge, 503, Unavailable),
        (
            b"upstream connect error or disconnect/reset before headers",
            503,
            Unavailable,
        ),
        (b"null", 401, AuthFailed),
    ];
    for (body, status, kind) in cases {
        let f = classify_http(OpenAi, status, &Headers::new(), body, None);
        assert_eq!(f.kind, kind, "{status}");
        assert!(f.message.chars().count() <= 301, "{status}: bounded");
        assert!(
            !f.message.chars().any(char::is_control),
            "{status}: no control characters in {:?}",
            f.message
        );
        assert_eq!(f.error_type, None);
    }
    assert_eq!(
        &*classify_http(OpenAi, 502, &Headers::new(), b"", None).message,
        "(empty body)"
    );
}

#[test]
fn transport_faults_map_through_their_kind_with_a_clean_detail() {
    let f = classify_transport(TransportFault::Timeout, Some("after 30s\nretrying"));
    assert_eq!(f.kind, Transport);
    assert_eq!(f.transport, Some(TransportFault::Timeout));
    assert_eq!(&*f.message, "request timed out: after 30s retrying");
    assert_eq!(
        classify_transport(TransportFault::StreamCut, None).kind,
        StreamMalformed
    );
    assert_eq!(
        classify_transport(TransportFault::EmptyMessage, None).kind,
        EmptyResponse
    );
}

/// What clients say about failed exchanges (reqwest/hyper, curl, Go's net/http, Python's
/// httpx, ureq), and the fault each is.
#[test]
fn a_client_error_description_is_classified_without_the_client() {
    let before = TransportError::new;
    for (error, fault) in [
        (
            before("connect error: dns error: failed to lookup address information: Name or service not known"),
            TransportFault::Dns,
        ),
        (before("dial tcp: lookup api.example: no such host"), TransportFault::Dns),
        (
            before("connect error: invalid peer certificate: UnknownIssuer").with_connect_failed(true),
            TransportFault::Tls,
        ),
        (before("SSL: CERTIFICATE_VERIFY_FAILED"), TransportFault::Tls),
        (
            before("connect error: tcp connect error: Connection refused (os error 111)")
                .with_connect_failed(true),
            TransportFault::Connect,
        ),
        (before("[Errno 111] Connection refused"), TransportFault::Connect),
        (before("connection closed before message completed"), TransportFault::Reset),
        (before("operation timed out").with_timed_out(true), TransportFault::Timeout),
        (
            before("operation timed out").with_timed_out(true).with_response_started(true),
            TransportFault::IdleTimeout,
        ),
        (
            // Once the response started, a break is a cut stream, whatever the text says.
            before("dns error").with_response_started(true),
            TransportFault::StreamCut,
        ),
    ] {
        assert_eq!(error.fault(), fault, "{error:?}");
        let failure = classify_transport_error(&error);
        assert_eq!(failure.transport, Some(fault), "{error:?}");
        assert_eq!(failure.kind, fault.kind(), "{error:?}");
        assert!(failure.message.starts_with(fault.phrase()), "{}", failure.message);
    }
    // The detail is cleaned like any other: one line, bounded, keys redacted.
    let noisy = format!("reset\nby peer sk-ant-api03-{}", "x".repeat(2_000));
    let failure = classify_transport_error(&TransportError::new(&noisy));
    assert!(!failure.message.contains('\n'), "{}", failure.message);
    assert!(
        !failure.message.contains("sk-ant-api03-xxxx"),
        "{}",
        failure.message
    );
    assert!(failure.message.len() < 700, "{}", failure.message.len());
    // No description: the fault's phrase alone.
    assert_eq!(
        &*classify_transport_error(&TransportError::new("  ")).message,
        TransportFault::Reset.phrase()
    );
}
