//! Anthropic stream assembly (`message_start` … `message_stop`) and non-streaming bodies.

use crate::classify::classify_error_body;
use crate::failure::{ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason};
use crate::wire::assemble::{Assembly, Part};
use crate::wire::borrow::{or_empty, Str};
use crate::wire::render::read_anthropic_usage;
use crate::wire::sse::SseEvent;
use crate::wire::{malformed, stream_cut, StreamDelta};
use serde::Deserialize;
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
        let v: Event<'_> = serde_json::from_str(&event.data)
            .map_err(|e| malformed(&format!("event data is not a valid event: {e}")))?;
        let ty =
            v.ty.as_ref()
                .map(Str::as_str)
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
                if let Some(usage) = v.message.as_ref().and_then(|m| m.get("usage")) {
                    read_anthropic_usage(usage, &mut self.asm.usage);
                }
            }
            "content_block_start" => {
                let index = index_of(v.index)?;
                let block = v.content_block.as_ref().unwrap_or(&Value::Null);
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
                        self.asm.charge_block()?;
                        self.skipped.insert(index);
                        return Ok(false);
                    }
                };
                self.asm.start(index, part, deltas)?;
            }
            "content_block_delta" => {
                let index = index_of(v.index)?;
                if self.skipped.contains(&index) {
                    return Ok(false);
                }
                let Some(delta) = &v.delta else {
                    return Ok(false);
                };
                match delta.ty.as_ref().map(Str::as_str) {
                    Some("text_delta") => {
                        self.asm.push_text(index, or_empty(&delta.text), deltas)?
                    }
                    Some("input_json_delta") => {
                        self.asm
                            .push_json(index, or_empty(&delta.partial_json), deltas)?;
                    }
                    Some("thinking_delta") => {
                        self.asm
                            .push_thinking(index, or_empty(&delta.thinking), deltas)?;
                    }
                    Some("signature_delta") => {
                        self.asm.set_signature(index, or_empty(&delta.signature))?;
                    }
                    // citations_delta and future kinds carry nothing rebound keeps.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(v.index)?;
                if !self.skipped.contains(&index) {
                    self.asm.close(index)?;
                }
            }
            "message_delta" => {
                if let Some(reason) = v.delta.as_ref().and_then(|d| d.stop_reason.as_ref()) {
                    self.stop_reason = Some(StopReason::from(reason.as_str().to_owned()));
                }
                if let Some(usage) = &v.usage {
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

fn index_of(index: Option<u64>) -> Result<u64, ProviderFailure> {
    index.ok_or_else(|| malformed("content block event without an index"))
}

/// One stream event. Rare parts (`message`, `content_block`, `usage`) stay generic; the
/// frequent delta strings are borrowed from the event text.
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Str<'a>>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
}

/// A `content_block_delta`'s or `message_delta`'s `delta`.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Str<'a>>,
    #[serde(default, borrow)]
    text: Option<Str<'a>>,
    #[serde(default, borrow)]
    partial_json: Option<Str<'a>>,
    #[serde(default, borrow)]
    thinking: Option<Str<'a>>,
    #[serde(default, borrow)]
    signature: Option<Str<'a>>,
    #[serde(default, borrow)]
    stop_reason: Option<Str<'a>>,
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
