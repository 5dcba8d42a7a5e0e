//! What the Gemini API sends: `alt=sse` streams, response bodies, error bodies.

use super::{signature_of, status_name, SIGNATURE};
use crate::conversation::ContentBlock;
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::render::pieces;
use serde_json::{json, Map, Value};

/// The parts of `response`'s message as Gemini sends them: text in pieces when `split`
/// (several parts, as a stream delivers them), thinking as `thought` text, each call whole
/// (a problem's raw text as `args` when it is not an object, a string otherwise), and each
/// thought signature on the part after it (on an empty text part when none follows).
fn parts(response: &AssistantResponse, split: bool) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut pending: Option<&str> = None;
    let mut push = |mut part: Value, pending: &mut Option<&str>| {
        if let Some(signature) = pending.take() {
            part[SIGNATURE] = signature.into();
        }
        out.push(part);
    };
    for block in &response.message.content {
        match block {
            ContentBlock::Text { text } => {
                for piece in text_pieces(text, split) {
                    push(json!({"text": piece}), &mut pending);
                }
            }
            ContentBlock::Thinking { thinking, .. } => {
                for piece in text_pieces(thinking, split) {
                    push(json!({"text": piece, "thought": true}), &mut pending);
                }
            }
            ContentBlock::ToolUse { id, name, input } => {
                let args = match response
                    .input_problems()
                    .iter()
                    .find(|p| &p.tool_use_id == id)
                {
                    Some(p) => serde_json::from_str::<Value>(&p.raw)
                        .unwrap_or_else(|_| Value::String(p.raw.clone())),
                    None => (**input).clone(),
                };
                let mut call = Map::new();
                // A minted id is rebound's, not Gemini's: sent back only when Gemini made it.
                if !id.starts_with("gc_") {
                    call.insert("id".into(), id.as_str().into());
                }
                call.insert("name".into(), name.as_str().into());
                call.insert("args".into(), args);
                push(json!({ "functionCall": call }), &mut pending);
            }
            ContentBlock::Reasoning { item, .. } => {
                if let Some(signature) = signature_of(item) {
                    if let Some(earlier) = pending.replace(signature) {
                        push(json!({"text": ""}), &mut Some(earlier));
                    }
                }
            }
            ContentBlock::RedactedThinking { .. }
            | ContentBlock::ToolResult(_)
            | ContentBlock::Image { .. } => {}
        }
    }
    if let Some(signature) = pending {
        push(json!({"text": ""}), &mut Some(signature));
    }
    out
}

fn text_pieces(text: &str, split: bool) -> Vec<&str> {
    if split {
        pieces(text).collect()
    } else {
        vec![text]
    }
}

/// The finish reason Gemini names for `stop`.
fn finish_reason(stop: &StopReason) -> &str {
    match stop {
        StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence => "STOP",
        StopReason::MaxTokens => "MAX_TOKENS",
        StopReason::ContentFilter | StopReason::Refusal => "SAFETY",
        StopReason::PauseTurn => "OTHER",
        StopReason::Other(other) => other,
    }
}

fn usage_metadata(usage: &Usage) -> Value {
    let mut v = json!({
        "promptTokenCount": usage.input_tokens,
        "candidatesTokenCount": usage.output_tokens,
        "totalTokenCount": usage.input_tokens.saturating_add(usage.output_tokens),
    });
    if let Some(cached) = usage.cache_read_input_tokens {
        v["cachedContentTokenCount"] = cached.into();
    }
    v
}

fn candidate(parts: Vec<Value>, finish: Option<&str>) -> Value {
    let mut c = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if let Some(reason) = finish {
        c["finishReason"] = reason.into();
    }
    c
}

/// The stream, one `data:` event per chunk: a chunk per part, then one naming the finish
/// reason, with the usage and an empty text part (as the API often ends a stream; a fault
/// injector then always has content before the finish), CRLF-delimited as the API sends.
pub(crate) fn stream(response: &AssistantResponse, model: &str, message_id: &str) -> Vec<Vec<u8>> {
    let mut chunks: Vec<Value> = parts(response, true)
        .into_iter()
        .map(|p| {
            json!({
                "candidates": [candidate(vec![p], None)],
                "modelVersion": model,
                "responseId": message_id,
            })
        })
        .collect();
    chunks.push(json!({
        "candidates": [candidate(vec![json!({"text": ""})], Some(finish_reason(&response.stop_reason)))],
        "usageMetadata": usage_metadata(&response.usage),
        "modelVersion": model,
        "responseId": message_id,
    }));
    chunks
        .into_iter()
        .map(|c| format!("data: {c}\r\n\r\n").into_bytes())
        .collect()
}

/// The non-streaming body: one response with every part whole.
pub(crate) fn response_json(response: &AssistantResponse, model: &str, message_id: &str) -> Value {
    json!({
        "candidates": [candidate(parts(response, false), Some(finish_reason(&response.stop_reason)))],
        "usageMetadata": usage_metadata(&response.usage),
        "modelVersion": model,
        "responseId": message_id,
    })
}

/// The Google status name for an error type of any format: a status name as it is; the
/// other providers' types as the status Google gives the same failure (so one scenario plays
/// on every format); `None` for one that has no counterpart.
fn google_status(error_type: &str) -> Option<&str> {
    if !error_type.is_empty()
        && error_type
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'_')
    {
        return Some(error_type);
    }
    Some(match error_type {
        "overloaded_error" | "service_unavailable" => "UNAVAILABLE",
        "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => "RESOURCE_EXHAUSTED",
        "api_error" | "server_error" => "INTERNAL",
        "invalid_request_error" | "context_length_exceeded" => "INVALID_ARGUMENT",
        "authentication_error" | "invalid_api_key" => "UNAUTHENTICATED",
        "permission_error" => "PERMISSION_DENIED",
        "not_found_error" | "model_not_found" => "NOT_FOUND",
        "timeout_error" => "DEADLINE_EXCEEDED",
        _ => return None,
    })
}

/// Google's error body: `{"error":{"code","message","status"}}`; `error_type` is the
/// status name (`RESOURCE_EXHAUSTED`, …, or another format's type, translated), by default
/// the one the HTTP status has.
pub(crate) fn error_body(status: u16, error_type: Option<&str>, message: &str) -> Vec<u8> {
    let status_name = error_type
        .and_then(google_status)
        .unwrap_or_else(|| status_name(status));
    json!({"error": {"code": status, "message": message, "status": status_name}})
        .to_string()
        .into_bytes()
}

/// A failure after the stream began: a chunk holding only an `error` object, whose status
/// name is `error_type` (and its code the HTTP status that name has).
pub(crate) fn stream_error_event(error_type: &str, message: &str) -> Vec<u8> {
    let error_type = google_status(error_type).unwrap_or("INTERNAL");
    let code = [400, 401, 403, 404, 409, 429, 499, 501, 503, 504, 500]
        .into_iter()
        .find(|s| status_name(*s) == error_type)
        .unwrap_or(500);
    let body = json!({"error": {"code": code, "message": message, "status": error_type}});
    format!("data: {body}\r\n\r\n").into_bytes()
}
