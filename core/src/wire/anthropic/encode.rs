//! What the Anthropic Messages API sends: streams, JSON bodies, error bodies.

use crate::conversation::ContentBlock;
use crate::response::{AssistantResponse, InputProblemKind, Usage};
use crate::wire::render::{pieces, quote};
use serde_json::{json, Value};

fn event(name: &str, data: &str) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

fn usage_fields(usage: &Usage, output_tokens: u64) -> String {
    let mut s = format!("{{\"input_tokens\":{}", usage.input_tokens);
    if let Some(n) = usage.cache_creation_input_tokens {
        s.push_str(&format!(",\"cache_creation_input_tokens\":{n}"));
    }
    if let Some(n) = usage.cache_read_input_tokens {
        s.push_str(&format!(",\"cache_read_input_tokens\":{n}"));
    }
    s.push_str(&format!(",\"output_tokens\":{output_tokens}}}"));
    s
}

/// The stream, one chunk per event, shaped like the API's own (field order included).
pub(crate) fn stream(response: &AssistantResponse, model: &str, message_id: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    out.push(event(
        "message_start",
        &format!(
            "{{\"type\":\"message_start\",\"message\":{{\"id\":{},\"type\":\"message\",\
             \"role\":\"assistant\",\"model\":{},\"content\":[],\"stop_reason\":null,\
             \"stop_sequence\":null,\"usage\":{}}}}}",
            quote(message_id),
            quote(model),
            usage_fields(&response.usage, response.usage.output_tokens.min(1)),
        ),
    ));
    let mut index = 0u64;
    for block in &response.message.content {
        let start = |block: &str| {
            event(
                "content_block_start",
                &format!(
                    "{{\"type\":\"content_block_start\",\"index\":{index},\"content_block\":{block}}}"
                ),
            )
        };
        let delta = |delta: &str| {
            event(
                "content_block_delta",
                &format!(
                    "{{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{delta}}}"
                ),
            )
        };
        let mut close = true;
        let start_at = out.len();
        match block {
            ContentBlock::Text { text } => {
                out.push(start("{\"type\":\"text\",\"text\":\"\"}"));
                for piece in pieces(text) {
                    out.push(delta(&format!(
                        "{{\"type\":\"text_delta\",\"text\":{}}}",
                        quote(piece)
                    )));
                }
            }
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => {
                out.push(start(
                    "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}",
                ));
                for piece in pieces(thinking) {
                    out.push(delta(&format!(
                        "{{\"type\":\"thinking_delta\",\"thinking\":{}}}",
                        quote(piece)
                    )));
                }
                if !signature.is_empty() {
                    out.push(delta(&format!(
                        "{{\"type\":\"signature_delta\",\"signature\":{}}}",
                        quote(signature)
                    )));
                }
            }
            // The whole block comes in its start; no delta follows.
            ContentBlock::RedactedThinking { data, .. } => out.push(start(&format!(
                "{{\"type\":\"redacted_thinking\",\"data\":{}}}",
                quote(data)
            ))),
            ContentBlock::ToolUse { id, name, input } => {
                out.push(start(&format!(
                    "{{\"type\":\"tool_use\",\"id\":{},\"name\":{},\"input\":{{}}}}",
                    quote(id),
                    quote(name)
                )));
                let problem = response
                    .input_problems()
                    .iter()
                    .find(|p| &p.tool_use_id == id);
                let json = match problem {
                    Some(p) => {
                        // A truncated call never got its block stop: output ended first.
                        close = p.kind != InputProblemKind::Truncated;
                        p.raw.clone()
                    }
                    None => input.to_string(),
                };
                out.push(delta(
                    "{\"type\":\"input_json_delta\",\"partial_json\":\"\"}",
                ));
                for piece in pieces(&json) {
                    out.push(delta(&format!(
                        "{{\"type\":\"input_json_delta\",\"partial_json\":{}}}",
                        quote(piece)
                    )));
                }
            }
            // Results and images never appear in an assistant message; Anthropic has no
            // OpenAI reasoning items.
            ContentBlock::ToolResult(_)
            | ContentBlock::Image { .. }
            | ContentBlock::Reasoning { .. } => continue,
        }
        if close {
            out.push(event(
                "content_block_stop",
                &format!("{{\"type\":\"content_block_stop\",\"index\":{index}}}"),
            ));
        }
        if index == 0 {
            // The API pings once right after the first block starts.
            out.insert(start_at + 1, event("ping", "{\"type\": \"ping\"}"));
        }
        index += 1;
    }
    out.push(event(
        "message_delta",
        &format!(
            "{{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":{},\"stop_sequence\":null}},\
             \"usage\":{{\"output_tokens\":{}}}}}",
            quote(response.stop_reason.as_str()),
            response.usage.output_tokens
        ),
    ));
    out.push(event("message_stop", "{\"type\":\"message_stop\"}"));
    out
}

/// The non-streaming body.
pub(crate) fn response_json(response: &AssistantResponse, model: &str, message_id: &str) -> Value {
    let content: Vec<Value> = response
        .message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => Some(json!({"type": "thinking", "thinking": thinking, "signature": signature})),
            ContentBlock::RedactedThinking { data, .. } => {
                Some(json!({"type": "redacted_thinking", "data": data}))
            }
            ContentBlock::ToolUse { id, name, input } => {
                Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
            }
            ContentBlock::ToolResult(_)
            | ContentBlock::Image { .. }
            | ContentBlock::Reasoning { .. } => None,
        })
        .collect();
    let mut usage = json!({
        "input_tokens": response.usage.input_tokens,
        "output_tokens": response.usage.output_tokens,
    });
    if let Some(n) = response.usage.cache_creation_input_tokens {
        usage["cache_creation_input_tokens"] = n.into();
    }
    if let Some(n) = response.usage.cache_read_input_tokens {
        usage["cache_read_input_tokens"] = n.into();
    }
    json!({
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": response.stop_reason.as_str(),
        "stop_sequence": null,
        "usage": usage,
    })
}

/// The error type Anthropic uses for `status`.
fn default_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

fn error_json(error_type: &str, message: &str) -> String {
    format!(
        "{{\"type\":\"error\",\"error\":{{\"type\":{},\"message\":{}}}}}",
        quote(error_type),
        quote(message)
    )
}

pub(crate) fn error_body(status: u16, error_type: Option<&str>, message: &str) -> Vec<u8> {
    error_json(
        error_type.unwrap_or_else(|| default_error_type(status)),
        message,
    )
    .into_bytes()
}

pub(crate) fn stream_error_event(error_type: &str, message: &str) -> Vec<u8> {
    event("error", &error_json(error_type, message))
}
