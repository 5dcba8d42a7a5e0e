//! What the Responses API sends: event streams, response objects, error bodies.

use crate::conversation::ContentBlock;
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::render::pieces;
use serde_json::{json, Value};

/// The `created_at` of encoded responses: fixed, so output is a pure function of input.
const CREATED: u64 = 1_700_000_000;

/// The output items of `response`, in order, as the API lists them in `output`: each text
/// block a `message` item (a refusal's text in a `refusal` part), each tool call a
/// `function_call` item (with a problem's raw text as its arguments), each reasoning item
/// verbatim. Thinking blocks (another provider's) are left out.
fn items(response: &AssistantResponse, message_id: &str) -> Vec<Value> {
    let refusal = response.stop_reason == StopReason::Refusal;
    let mut out = Vec::new();
    for (n, block) in response.message.content.iter().enumerate() {
        match block {
            ContentBlock::Text { text } => {
                let part = if refusal {
                    json!({"type": "refusal", "refusal": text})
                } else {
                    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
                };
                out.push(json!({
                    "id": format!("msg_{message_id}_{n}"),
                    "type": "message",
                    "status": "completed",
                    "content": [part],
                    "role": "assistant",
                }));
            }
            ContentBlock::ToolUse { id, name, input } => {
                let arguments = match response
                    .input_problems()
                    .iter()
                    .find(|p| &p.tool_use_id == id)
                {
                    Some(p) => p.raw.clone(),
                    None => input.to_string(),
                };
                out.push(json!({
                    "id": format!("fc_{message_id}_{n}"),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": arguments,
                    "call_id": id,
                    "name": name,
                }));
            }
            ContentBlock::Reasoning { item, .. } => {
                if item.get("type").and_then(Value::as_str) == Some("reasoning") {
                    out.push(item.clone());
                }
            }
            ContentBlock::Thinking { .. }
            | ContentBlock::RedactedThinking { .. }
            | ContentBlock::ToolResult(_)
            | ContentBlock::Image { .. } => {}
        }
    }
    out
}

/// The usage object; `input_tokens_details` only when a cached count is known, so
/// decoding gives back exactly what was encoded.
fn usage_json(usage: &Usage) -> Value {
    let mut v = json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens.saturating_add(usage.output_tokens),
    });
    if let Some(n) = usage.cache_read_input_tokens {
        v["input_tokens_details"] = json!({"cached_tokens": n});
    }
    v
}

/// `(status, incomplete_details)` for a stop reason: output cut by the token limit or the
/// content filter is `incomplete`, anything else `completed`.
fn status(stop: &StopReason) -> (&'static str, Value) {
    match stop {
        StopReason::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        StopReason::ContentFilter => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// A response object, in the API's field order.
fn response_object(
    id: &str,
    model: &str,
    status: &str,
    incomplete: Value,
    output: Vec<Value>,
    usage: Value,
) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": {},
    })
}

/// One event: `event:` line and `data:` line, the data's `sequence_number` counting from 0.
struct Events {
    out: Vec<Vec<u8>>,
}

impl Events {
    fn push(&mut self, ty: &str, mut data: Value) {
        if let Value::Object(map) = &mut data {
            map.insert("sequence_number".into(), self.out.len().into());
        }
        self.out
            .push(format!("event: {ty}\ndata: {data}\n\n").into_bytes());
    }
}

/// The stream, one chunk per event, shaped like the API's own: `response.created`, then per
/// item `output_item.added`, its deltas and `output_item.done`, then `response.completed`
/// (`response.incomplete` when output stopped at the token limit or the filter).
pub(crate) fn stream(response: &AssistantResponse, model: &str, message_id: &str) -> Vec<Vec<u8>> {
    let id = message_id;
    let output = items(response, message_id);
    let mut ev = Events { out: Vec::new() };
    let created = response_object(
        id,
        model,
        "in_progress",
        Value::Null,
        Vec::new(),
        Value::Null,
    );
    ev.push(
        "response.created",
        json!({"type": "response.created", "response": created}),
    );
    for (o, item) in output.iter().enumerate() {
        let item_id = item.get("id").cloned().unwrap_or(Value::Null);
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let added = json!({"id": item_id, "type": "message", "status": "in_progress",
                                   "content": [], "role": "assistant"});
                ev.push(
                    "response.output_item.added",
                    json!({"type": "response.output_item.added", "output_index": o, "item": added}),
                );
                let part = &item["content"][0];
                let (text, delta_ty, done_ty, empty) = if part["type"] == "refusal" {
                    (
                        part["refusal"].as_str().unwrap_or_default(),
                        "response.refusal.delta",
                        "response.refusal.done",
                        json!({"type": "refusal", "refusal": ""}),
                    )
                } else {
                    (
                        part["text"].as_str().unwrap_or_default(),
                        "response.output_text.delta",
                        "response.output_text.done",
                        json!({"type": "output_text", "annotations": [], "text": ""}),
                    )
                };
                ev.push(
                    "response.content_part.added",
                    json!({"type": "response.content_part.added", "item_id": item_id,
                           "output_index": o, "content_index": 0, "part": empty}),
                );
                for piece in pieces(text) {
                    ev.push(
                        delta_ty,
                        json!({"type": delta_ty, "item_id": item_id, "output_index": o,
                               "content_index": 0, "delta": piece, "logprobs": []}),
                    );
                }
                let done_key = if part["type"] == "refusal" {
                    "refusal"
                } else {
                    "text"
                };
                let mut done = json!({"type": done_ty, "item_id": item_id, "output_index": o,
                                      "content_index": 0});
                done[done_key] = text.into();
                ev.push(done_ty, done);
                ev.push(
                    "response.content_part.done",
                    json!({"type": "response.content_part.done", "item_id": item_id,
                           "output_index": o, "content_index": 0, "part": part}),
                );
            }
            Some("function_call") => {
                let mut added = item.clone();
                added["status"] = "in_progress".into();
                added["arguments"] = "".into();
                ev.push(
                    "response.output_item.added",
                    json!({"type": "response.output_item.added", "output_index": o, "item": added}),
                );
                let arguments = item["arguments"].as_str().unwrap_or_default();
                for piece in pieces(arguments) {
                    ev.push(
                        "response.function_call_arguments.delta",
                        json!({"type": "response.function_call_arguments.delta",
                               "item_id": item_id, "output_index": o, "delta": piece}),
                    );
                }
                ev.push(
                    "response.function_call_arguments.done",
                    json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                           "output_index": o, "arguments": arguments}),
                );
            }
            _ => {
                // A reasoning item: announced without its content, then whole.
                let added = json!({"id": item_id, "type": item["type"], "summary": []});
                ev.push(
                    "response.output_item.added",
                    json!({"type": "response.output_item.added", "output_index": o, "item": added}),
                );
            }
        }
        ev.push(
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": o, "item": item}),
        );
    }
    let (status, incomplete) = status(&response.stop_reason);
    let terminal = if status == "incomplete" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    let done = response_object(
        id,
        model,
        status,
        incomplete,
        output,
        usage_json(&response.usage),
    );
    ev.push(terminal, json!({"type": terminal, "response": done}));
    ev.out
}

/// The non-streaming body: the response object.
pub(crate) fn response_json(response: &AssistantResponse, model: &str, message_id: &str) -> Value {
    let (status, incomplete) = status(&response.stop_reason);
    response_object(
        message_id,
        model,
        status,
        incomplete,
        items(response, message_id),
        usage_json(&response.usage),
    )
}

/// The `response.failed` event of a stream that fails after it started: the response's
/// `error` holds `code` and `message`.
pub(crate) fn stream_error_event(code: &str, message: &str) -> Vec<u8> {
    let mut failed = response_object(
        "resp_failed",
        "",
        "failed",
        Value::Null,
        Vec::new(),
        Value::Null,
    );
    failed["error"] = json!({"code": code, "message": message});
    let data = json!({"type": "response.failed", "sequence_number": 0, "response": failed});
    format!("event: response.failed\ndata: {data}\n\n").into_bytes()
}

/// The `error` event's data for `code` (kept for tests of the other in-stream failure).
#[cfg(test)]
pub(crate) fn error_event(code: &str, message: &str) -> Vec<u8> {
    let data = json!({"type": "error", "code": code, "message": message, "param": null,
                      "sequence_number": 1});
    format!("event: error\ndata: {data}\n\n").into_bytes()
}
