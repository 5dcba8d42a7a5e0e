//! What Bedrock's Converse and ConverseStream send: event-stream messages, response bodies,
//! error bodies.
//!
//! Streams are framed as AWS sends them: each event one event-stream message with the
//! string headers `:event-type` (the event's name), `:content-type` (`application/json`)
//! and `:message-type` (`event`), in that order (as botocore's debug log prints a live
//! stream's headers, boto/boto3#4584), and a JSON payload with its keys in alphabetical
//! order and the padding field `p`, as the service writes them. Neither the stream nor the
//! body names the model or a message id (the request id is the `x-amzn-requestid` header),
//! so `model` and `message_id` are not encoded.

use crate::conversation::ContentBlock;
use crate::response::{AssistantResponse, InputProblemKind, StopReason, Usage};
use crate::wire::eventstream::{encode_frame, HeaderValue};
use crate::wire::render::pieces;
use serde_json::{json, Map, Value};

/// The `latencyMs` of encoded responses: fixed, so output is a pure function of input.
const LATENCY_MS: u64 = 250;

/// What the padding field `p` is cut from.
const PAD: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/// The namespace AWS appends to the error type in `x-amzn-errortype`.
const ERROR_TYPE_NAMESPACE: &str = "http://internal.amazon.com/coral/com.amazon.bedrock/";

/// Event number `n` of a stream: its payload with `p` added (a length that varies with `n`,
/// as the service's does with the event), framed.
fn event(event_type: &str, n: usize, payload: Value) -> Vec<u8> {
    let mut payload = match payload {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let pad = (n * 17 + 5) % (PAD.len() - 1) + 1;
    payload.insert("p".into(), PAD[..pad].into());
    encode_frame(
        &[
            (":event-type", HeaderValue::String(event_type)),
            (":content-type", HeaderValue::String("application/json")),
            (":message-type", HeaderValue::String("event")),
        ],
        Value::Object(payload).to_string().as_bytes(),
    )
}

/// The stop reason's wire name: the content filter is `content_filtered`; the rest in the
/// vocabulary Converse shares with Anthropic (`end_turn`, `tool_use`, `max_tokens`,
/// `stop_sequence`), others verbatim.
fn stop_reason(stop: &StopReason) -> &str {
    match stop {
        StopReason::ContentFilter => "content_filtered",
        other => other.as_str(),
    }
}

/// The usage object: cache counts only when known, so decoding gives back what was encoded.
fn usage_json(usage: &Usage) -> Value {
    let cache_read = usage.cache_read_input_tokens.unwrap_or(0);
    let cache_write = usage.cache_creation_input_tokens.unwrap_or(0);
    let mut v = json!({
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens
            .saturating_add(usage.output_tokens)
            .saturating_add(cache_read)
            .saturating_add(cache_write),
    });
    if let Some(n) = usage.cache_read_input_tokens {
        v["cacheReadInputTokens"] = n.into();
    }
    if let Some(n) = usage.cache_creation_input_tokens {
        v["cacheWriteInputTokens"] = n.into();
    }
    v
}

/// The stream, one event-stream message per event: `messageStart`; per block its deltas
/// (a tool call opened by `contentBlockStart`, as the service does; text and reasoning
/// start with their first delta) and `contentBlockStop`; `messageStop`; `metadata`. A tool
/// call listed in `response.input_problems` is sent with the problem's raw text as its
/// input (a truncated one never gets its `contentBlockStop`: output ended first). OpenAI
/// reasoning items are left out.
pub(crate) fn stream(
    response: &AssistantResponse,
    _model: &str,
    _message_id: &str,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let push = |out: &mut Vec<Vec<u8>>, ty: &str, payload: Value| {
        let n = out.len();
        out.push(event(ty, n, payload));
    };
    push(&mut out, "messageStart", json!({"role": "assistant"}));
    let mut index = 0u64;
    for block in &response.message.content {
        let delta = |delta: Value| json!({"contentBlockIndex": index, "delta": delta});
        let mut close = true;
        match block {
            ContentBlock::Text { text } => {
                for piece in pieces(text) {
                    push(&mut out, "contentBlockDelta", delta(json!({"text": piece})));
                }
            }
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => {
                for piece in pieces(thinking) {
                    let d = delta(json!({"reasoningContent": {"text": piece}}));
                    push(&mut out, "contentBlockDelta", d);
                }
                if !signature.is_empty() {
                    let d = delta(json!({"reasoningContent": {"signature": signature}}));
                    push(&mut out, "contentBlockDelta", d);
                }
            }
            ContentBlock::RedactedThinking { data, .. } => {
                let d = delta(json!({"reasoningContent": {"redactedContent": data}}));
                push(&mut out, "contentBlockDelta", d);
            }
            ContentBlock::ToolUse { id, name, input } => {
                push(
                    &mut out,
                    "contentBlockStart",
                    json!({"contentBlockIndex": index,
                           "start": {"toolUse": {"toolUseId": id, "name": name}}}),
                );
                let problem = response
                    .input_problems()
                    .iter()
                    .find(|p| &p.tool_use_id == id);
                let input = match problem {
                    Some(p) => {
                        close = p.kind != InputProblemKind::Truncated;
                        p.raw.clone()
                    }
                    None => input.to_string(),
                };
                for piece in pieces(&input) {
                    let d = delta(json!({"toolUse": {"input": piece}}));
                    push(&mut out, "contentBlockDelta", d);
                }
            }
            // Results and images never appear in an assistant message; Bedrock has no
            // OpenAI reasoning items.
            ContentBlock::ToolResult(_)
            | ContentBlock::Image { .. }
            | ContentBlock::Reasoning { .. } => continue,
        }
        if close {
            push(
                &mut out,
                "contentBlockStop",
                json!({ "contentBlockIndex": index }),
            );
        }
        index += 1;
    }
    push(
        &mut out,
        "messageStop",
        json!({"stopReason": stop_reason(&response.stop_reason)}),
    );
    push(
        &mut out,
        "metadata",
        json!({"metrics": {"latencyMs": LATENCY_MS}, "usage": usage_json(&response.usage)}),
    );
    out
}

/// The non-streaming Converse body.
pub(crate) fn response_json(
    response: &AssistantResponse,
    _model: &str,
    _message_id: &str,
) -> Value {
    let content: Vec<Value> = response
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(json!({ "text": text })),
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => {
                let mut text = json!({ "text": thinking });
                if !signature.is_empty() {
                    text["signature"] = signature.as_str().into();
                }
                Some(json!({"reasoningContent": {"reasoningText": text}}))
            }
            ContentBlock::RedactedThinking { data, .. } => {
                Some(json!({"reasoningContent": {"redactedContent": data}}))
            }
            ContentBlock::ToolUse { id, name, input } => {
                Some(json!({"toolUse": {"toolUseId": id, "name": name, "input": &**input}}))
            }
            ContentBlock::ToolResult(_)
            | ContentBlock::Image { .. }
            | ContentBlock::Reasoning { .. } => None,
        })
        .collect();
    json!({
        "metrics": {"latencyMs": LATENCY_MS},
        "output": {"message": {"content": content, "role": "assistant"}},
        "stopReason": stop_reason(&response.stop_reason),
        "usage": usage_json(&response.usage),
    })
}

/// The error type Bedrock answers `status` with (the service model's errors of Converse and
/// ConverseStream, by their `httpStatusCode`; a refused key is AWS's
/// `UnrecognizedClientException`).
/// The AWS error type for an error type of any format: an AWS type (`…Exception`) as it
/// is; the other providers' types as the type Bedrock gives the same failure (so one
/// scenario plays on every format); `None` for one that has no counterpart.
fn aws_type(error_type: &str) -> Option<&str> {
    if error_type.ends_with("Exception") {
        return Some(error_type);
    }
    Some(match error_type {
        "overloaded_error" | "service_unavailable" | "UNAVAILABLE" => "ServiceUnavailableException",
        "rate_limit_error" | "rate_limit_exceeded" | "RESOURCE_EXHAUSTED" => "ThrottlingException",
        "insufficient_quota" => "ServiceQuotaExceededException",
        "api_error" | "server_error" | "INTERNAL" => "InternalServerException",
        "invalid_request_error" | "context_length_exceeded" | "INVALID_ARGUMENT" => {
            "ValidationException"
        }
        "authentication_error" | "invalid_api_key" | "UNAUTHENTICATED" => {
            "UnrecognizedClientException"
        }
        "permission_error" | "PERMISSION_DENIED" => "AccessDeniedException",
        "not_found_error" | "model_not_found" | "NOT_FOUND" => "ResourceNotFoundException",
        "timeout_error" | "DEADLINE_EXCEEDED" => "ModelTimeoutException",
        _ => return None,
    })
}

fn default_error_type(status: u16) -> &'static str {
    match status {
        401 => "UnrecognizedClientException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 | 529 => "ServiceUnavailableException",
        500..=599 => "InternalServerException",
        _ => "ValidationException",
    }
}

/// The value of the `x-amzn-errortype` header that names an HTTP error's type (the body
/// does not): `error_type`, or the type Bedrock uses for `status`, followed by AWS's
/// namespace (`ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/`).
///
/// The fake server sends an error response as `status`, this header, `content-type:
/// application/json` and [`error_body`]; classification reads the type from the header
/// (`classify_http`), as botocore does.
pub(crate) fn error_type_header(status: u16, error_type: Option<&str>) -> String {
    let ty = error_type
        .and_then(aws_type)
        .unwrap_or_else(|| default_error_type(status));
    format!("{ty}:{ERROR_TYPE_NAMESPACE}")
}

/// An HTTP error's body as Bedrock sends it (restJson1): `{"message": "…"}`. Its type goes
/// in the `x-amzn-errortype` header ([`error_type_header`]); `status` and `error_type` are
/// taken for the dispatch's signature and do not change the body.
pub(crate) fn error_body(_status: u16, _error_type: Option<&str>, message: &str) -> Vec<u8> {
    json!({ "message": message }).to_string().into_bytes()
}

/// The event-stream message Bedrock sends when a stream fails after it started: `:message-type`
/// `exception`, the error's type in `:exception-type` and `{"message": …}` as the payload.
/// In a stream the type is the event's member name, lower camel case
/// (`throttlingException`), so an `…Exception` type given as its HTTP name
/// (`ThrottlingException`) has its first letter lowered; other types go as given.
pub(crate) fn stream_error_event(error_type: &str, message: &str) -> Vec<u8> {
    let mut ty = aws_type(error_type)
        .unwrap_or("InternalServerException")
        .to_owned();
    if ty.ends_with("Exception") {
        if let Some(first) = ty.get_mut(0..1) {
            first.make_ascii_lowercase();
        }
    }
    encode_frame(
        &[
            (":exception-type", HeaderValue::String(&ty)),
            (":content-type", HeaderValue::String("application/json")),
            (":message-type", HeaderValue::String("exception")),
        ],
        json!({ "message": message }).to_string().as_bytes(),
    )
}
