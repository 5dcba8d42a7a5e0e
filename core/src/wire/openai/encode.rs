//! What the Chat Completions API sends: streams, JSON bodies, error bodies.

use crate::conversation::ContentBlock;
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::render::{pieces, quote};
use serde_json::{json, Value};

/// The `created` timestamp of encoded chunks: fixed, so output is a pure function of input.
const CREATED: u64 = 1_700_000_000;
const FINGERPRINT: &str = "fp_rebound";

/// The `finish_reason` for a stop reason.
fn finish_reason(stop: &StopReason) -> &str {
    match stop {
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::ContentFilter => "content_filter",
        StopReason::EndTurn
        | StopReason::StopSequence
        | StopReason::Refusal
        | StopReason::PauseTurn => "stop",
        StopReason::Other(s) => s,
    }
}

fn usage_json(usage: &Usage) -> String {
    let mut s = format!(
        "{{\"prompt_tokens\":{},\"completion_tokens\":{},\"total_tokens\":{}",
        usage.input_tokens,
        usage.output_tokens,
        usage.input_tokens.saturating_add(usage.output_tokens)
    );
    if let Some(n) = usage.cache_read_input_tokens {
        s.push_str(&format!(
            ",\"prompt_tokens_details\":{{\"cached_tokens\":{n}}}"
        ));
    }
    s.push('}');
    s
}

/// The answer text: all text blocks joined (Chat has one text part per message).
fn text_of(response: &AssistantResponse) -> String {
    response
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The stream, one chunk per event, shaped like the API's own (field order included).
pub(crate) fn stream(response: &AssistantResponse, model: &str, message_id: &str) -> Vec<Vec<u8>> {
    let prefix = format!(
        "data: {{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{CREATED},\
         \"model\":{},\"system_fingerprint\":\"{FINGERPRINT}\",\"choices\":",
        quote(message_id),
        quote(model)
    );
    let chunk = |delta: &str, finish: &str| {
        format!(
            "{prefix}[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
        )
        .into_bytes()
    };
    let mut out = vec![chunk(
        "{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}",
        "null",
    )];
    // A refusal's text travels in the `refusal` field.
    let text_key = if response.stop_reason == StopReason::Refusal {
        "refusal"
    } else {
        "content"
    };
    for piece in pieces(&text_of(response)) {
        out.push(chunk(
            &format!("{{\"{text_key}\":{}}}", quote(piece)),
            "null",
        ));
    }
    for (i, (id, name, input)) in response.message.tool_uses().enumerate() {
        out.push(chunk(
            &format!(
                "{{\"tool_calls\":[{{\"index\":{i},\"id\":{},\"type\":\"function\",\
                 \"function\":{{\"name\":{},\"arguments\":\"\"}}}}]}}",
                quote(id),
                quote(name)
            ),
            "null",
        ));
        let args = match response
            .input_problems()
            .iter()
            .find(|p| p.tool_use_id == id)
        {
            Some(p) => p.raw.clone(),
            None => input.to_string(),
        };
        for piece in pieces(&args) {
            out.push(chunk(
                &format!(
                    "{{\"tool_calls\":[{{\"index\":{i},\"function\":{{\"arguments\":{}}}}}]}}",
                    quote(piece)
                ),
                "null",
            ));
        }
    }
    out.push(chunk("{}", &quote(finish_reason(&response.stop_reason))));
    out.push(format!("{prefix}[],\"usage\":{}}}\n\n", usage_json(&response.usage)).into_bytes());
    out.push(b"data: [DONE]\n\n".to_vec());
    out
}

/// The non-streaming body.
pub(crate) fn response_json(response: &AssistantResponse, model: &str, message_id: &str) -> Value {
    let text = text_of(response);
    let refusal = response.stop_reason == StopReason::Refusal;
    let text_value = if text.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    let (content, refusal_value) = if refusal {
        (Value::Null, text_value)
    } else {
        (text_value, Value::Null)
    };
    let mut message = json!({
        "role": "assistant",
        "content": content,
        "refusal": refusal_value,
    });
    let calls: Vec<Value> = response
        .message
        .tool_uses()
        .map(|(id, name, input)| {
            json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })
        })
        .collect();
    if !calls.is_empty() {
        message["tool_calls"] = calls.into();
    }
    let usage: Value = serde_json::from_str(&usage_json(&response.usage)).unwrap_or(Value::Null);
    json!({
        "id": message_id,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": finish_reason(&response.stop_reason),
        }],
        "usage": usage,
        "system_fingerprint": FINGERPRINT,
    })
}

/// `(type, param, code)` for an error type or known error code.
fn error_fields(
    status: u16,
    error_type: Option<&str>,
) -> (String, Option<&'static str>, Option<String>) {
    match error_type {
        Some(code @ ("context_length_exceeded" | "string_above_max_length")) => (
            "invalid_request_error".into(),
            Some("messages"),
            Some(code.to_owned()),
        ),
        Some(code @ ("invalid_api_key" | "model_not_found")) => {
            ("invalid_request_error".into(), None, Some(code.to_owned()))
        }
        Some(code @ "rate_limit_exceeded") => ("requests".into(), None, Some(code.to_owned())),
        Some(t @ "insufficient_quota") => (t.to_owned(), None, Some(t.to_owned())),
        Some(t) => (t.to_owned(), None, None),
        None => match status {
            401 => (
                "invalid_request_error".into(),
                None,
                Some("invalid_api_key".into()),
            ),
            404 => (
                "invalid_request_error".into(),
                None,
                Some("model_not_found".into()),
            ),
            429 => ("requests".into(), None, Some("rate_limit_exceeded".into())),
            500..=599 => ("server_error".into(), None, None),
            _ => ("invalid_request_error".into(), None, None),
        },
    }
}

fn error_json(status: u16, error_type: Option<&str>, message: &str) -> String {
    let (ty, param, code) = error_fields(status, error_type);
    let opt = |v: Option<&str>| v.map_or_else(|| "null".to_owned(), quote);
    format!(
        "{{\"error\":{{\"message\":{},\"type\":{},\"param\":{},\"code\":{}}}}}",
        quote(message),
        quote(&ty),
        opt(param),
        opt(code.as_deref())
    )
}

pub(crate) fn error_body(status: u16, error_type: Option<&str>, message: &str) -> Vec<u8> {
    error_json(status, error_type, message).into_bytes()
}

pub(crate) fn stream_error_event(error_type: &str, message: &str) -> Vec<u8> {
    format!("data: {}\n\n", error_json(200, Some(error_type), message)).into_bytes()
}
