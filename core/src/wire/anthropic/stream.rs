//! Anthropic stream assembly (`message_start` … `message_stop`) and non-streaming bodies.

use crate::classify::classify_error_body;
use crate::failure::{ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason};
use crate::wire::assemble::{Assembly, Part};
use crate::wire::render::read_anthropic_usage;
use crate::wire::sse::SseEvent;
use crate::wire::{malformed, stream_cut, StreamDelta};
use serde_json::Value;
use std::collections::BTreeSet;

/// Assembly state for one Anthropic stream.
#[derive(Debug)]
pub(crate) struct StreamState {
    asm: Assembly,
    stop_reason: Option<StopReason>,
    /// Blocks of kinds rebound does not model (server tools, redacted thinking…): skipped.
    skipped: BTreeSet<u64>,
}

impl StreamState {
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        StreamState {
            asm: Assembly::new(max_message_bytes),
            stop_reason: None,
            skipped: BTreeSet::new(),
        }
    }

    /// Handles one event; `Ok(true)` when it was the terminal `message_stop`.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        deltas: &mut Vec<StreamDelta>,
    ) -> Result<bool, ProviderFailure> {
        if event.event.as_deref() == Some("error") {
            return Err(classify_error_body(
                ProviderKind::Anthropic,
                None,
                event.data.as_bytes(),
            ));
        }
        let v: Value = serde_json::from_str(&event.data)
            .map_err(|e| malformed(&format!("event data is not JSON: {e}")))?;
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        match ty {
            "error" => {
                return Err(classify_error_body(
                    ProviderKind::Anthropic,
                    None,
                    event.data.as_bytes(),
                ))
            }
            "message_start" => {
                if let Some(usage) = v.get("message").and_then(|m| m.get("usage")) {
                    read_anthropic_usage(usage, &mut self.asm.usage);
                }
            }
            "content_block_start" => {
                let index = index_of(&v)?;
                let block = v.get("content_block").unwrap_or(&Value::Null);
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let part = match block.get("type").and_then(Value::as_str) {
                    Some("text") => Part::Text(text("text")),
                    Some("thinking") => Part::Thinking {
                        thinking: text("thinking"),
                        signature: text("signature"),
                    },
                    Some("tool_use") => Part::ToolUse {
                        id: text("id"),
                        name: text("name"),
                        json: String::new(),
                        initial: block.get("input").cloned(),
                        closed: false,
                    },
                    _ => {
                        self.skipped.insert(index);
                        return Ok(false);
                    }
                };
                self.asm.start(index, part, deltas)?;
            }
            "content_block_delta" => {
                let index = index_of(&v)?;
                if self.skipped.contains(&index) {
                    return Ok(false);
                }
                let delta = v.get("delta").unwrap_or(&Value::Null);
                let field = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or_default();
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => self.asm.push_text(index, field("text"), deltas)?,
                    Some("input_json_delta") => {
                        self.asm.push_json(index, field("partial_json"), deltas)?;
                    }
                    Some("thinking_delta") => {
                        self.asm.push_thinking(index, field("thinking"), deltas)?;
                    }
                    Some("signature_delta") => self.asm.set_signature(index, field("signature"))?,
                    // citations_delta and future kinds carry nothing rebound keeps.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(&v)?;
                if !self.skipped.contains(&index) {
                    self.asm.close(index)?;
                }
            }
            "message_delta" => {
                if let Some(reason) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop_reason = Some(StopReason::from(reason.to_owned()));
                }
                if let Some(usage) = v.get("usage") {
                    read_anthropic_usage(usage, &mut self.asm.usage);
                }
            }
            "message_stop" => return Ok(true),
            // ping, and event types added later.
            _ => {}
        }
        Ok(false)
    }

    pub(crate) fn finish(self, complete: bool) -> Result<AssistantResponse, ProviderFailure> {
        if !complete {
            return Err(stream_cut("no message_stop event"));
        }
        let stop = self.stop_reason.unwrap_or(if self.asm.has_tool_calls() {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        self.asm.finish(stop)
    }
}

fn index_of(v: &Value) -> Result<u64, ProviderFailure> {
    v.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("content block event without an index"))
}

/// A non-streaming Messages response body.
pub(crate) fn parse_response(v: &Value, body: &[u8]) -> Result<AssistantResponse, ProviderFailure> {
    if v.get("type").and_then(Value::as_str) == Some("error") || v.get("error").is_some() {
        return Err(classify_error_body(ProviderKind::Anthropic, None, body));
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("response has no content array"))?;
    let mut asm = Assembly::new(usize::MAX);
    let mut ignored = Vec::new();
    for (i, block) in (0u64..).zip(blocks) {
        let text = |key: &str| {
            block
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let part = match block.get("type").and_then(Value::as_str) {
            Some("text") => Part::Text(text("text")),
            Some("thinking") => Part::Thinking {
                thinking: text("thinking"),
                signature: text("signature"),
            },
            Some("tool_use") => Part::ToolUse {
                id: text("id"),
                name: text("name"),
                json: String::new(),
                initial: Some(block.get("input").cloned().unwrap_or(Value::Null)),
                closed: true,
            },
            _ => continue,
        };
        asm.start(i, part, &mut ignored)?;
    }
    if let Some(usage) = v.get("usage") {
        read_anthropic_usage(usage, &mut asm.usage);
    }
    let stop = match v.get("stop_reason").and_then(Value::as_str) {
        Some(r) => StopReason::from(r.to_owned()),
        None if asm.has_tool_calls() => StopReason::ToolUse,
        None => StopReason::EndTurn,
    };
    asm.finish(stop)
}
