//! Provider-neutral assembly of content blocks from streamed pieces, and the final checks
//! that turn them into one [`AssistantResponse`] or a failure.

use super::{malformed, Deltas, StreamDelta};
use crate::conversation::{ContentBlock, Message, Role};
use crate::failure::{FailureKind, ProviderFailure, TransportFault};
use crate::response::{AssistantResponse, InputProblemKind, StopReason, ToolInputProblem, Usage};
use crate::tool::{nests_deeper_than, MAX_TOOL_INPUT_DEPTH};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one block costs against the message budget beyond its text, in bytes.
const BLOCK_OVERHEAD: usize = 64;

/// A content block being built.
#[derive(Debug)]
pub(crate) enum Part {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    ToolUse {
        id: String,
        name: String,
        /// The streamed argument text.
        json: String,
        /// Input given whole in the block's start event (used when no fragments follow).
        initial: Option<Value>,
        /// Whether the block's stop event arrived.
        closed: bool,
    },
    /// Thinking the provider encrypted whole (Anthropic's `redacted_thinking`): its data.
    RedactedThinking(String),
    /// An opaque provider item kept verbatim (an OpenAI Responses reasoning item).
    Reasoning(Value),
}

/// What a part costs against the message budget beyond [`BLOCK_OVERHEAD`].
fn part_bytes(part: &Part) -> usize {
    match part {
        Part::Text(text) => text.len(),
        Part::Thinking {
            thinking,
            signature,
        } => thinking.len() + signature.len(),
        Part::ToolUse { id, name, json, .. } => id.len() + name.len() + json.len(),
        Part::RedactedThinking(data) => data.len(),
        Part::Reasoning(item) => item.to_string().len(),
    }
}

/// Blocks keyed by their stream index, plus usage, the response's identity and a size
/// budget.
#[derive(Debug)]
pub(crate) struct Assembly {
    parts: BTreeMap<u64, Part>,
    pub(crate) usage: Usage,
    /// The provider's id of the response (`msg_…`, `chatcmpl-…`, `resp_…`), when it sent one.
    pub(crate) id: Option<String>,
    /// The model that answered, as the provider names it, when it said.
    pub(crate) model: Option<String>,
    bytes: usize,
    max_bytes: usize,
}

impl Assembly {
    pub(crate) fn new(max_bytes: usize) -> Self {
        Assembly {
            parts: BTreeMap::new(),
            usage: Usage::default(),
            id: None,
            model: None,
            bytes: 0,
            max_bytes,
        }
    }

    /// Keeps the response's `id` and `model` from strings read from the wire: bounded (an
    /// identifier, not a payload), and only the first seen of each.
    pub(crate) fn identity(&mut self, id: Option<&str>, model: Option<&str>) {
        /// Longer is not an id or a model name; it is dropped rather than copied into spans.
        const MAX: usize = 256;
        let keep = |s: Option<&str>| {
            s.filter(|s| !s.is_empty() && s.len() <= MAX)
                .map(str::to_owned)
        };
        if self.id.is_none() {
            self.id = keep(id);
        }
        if self.model.is_none() {
            self.model = keep(model);
        }
    }

    pub(crate) fn has(&self, index: u64) -> bool {
        self.parts.contains_key(&index)
    }

    /// Charges the bookkeeping of one block, so a flood of empty blocks is bounded too.
    pub(crate) fn charge_block(&mut self) -> Result<(), ProviderFailure> {
        self.charge(BLOCK_OVERHEAD)
    }

    fn charge(&mut self, n: usize) -> Result<(), ProviderFailure> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.max_bytes {
            return Err(malformed(&format!(
                "message larger than {} bytes",
                self.max_bytes
            )));
        }
        Ok(())
    }

    /// Starts block `index`, emitting the deltas a UI needs.
    pub(crate) fn start(
        &mut self,
        index: u64,
        part: Part,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        if self.parts.contains_key(&index) {
            return Err(malformed(&format!("content block {index} started twice")));
        }
        self.charge_block()?;
        match &part {
            Part::Text(text) => {
                self.charge(text.len())?;
                if !text.is_empty() {
                    deltas(StreamDelta::Text { index, text });
                }
            }
            Part::Thinking {
                thinking,
                signature,
            } => {
                self.charge(thinking.len() + signature.len())?;
                if !thinking.is_empty() {
                    deltas(StreamDelta::Thinking { index, thinking });
                }
            }
            Part::ToolUse { id, name, json, .. } => {
                self.charge(id.len() + name.len() + json.len())?;
                deltas(StreamDelta::ToolCallStart { index, id, name });
            }
            Part::RedactedThinking(_) | Part::Reasoning(_) => self.charge(part_bytes(&part))?,
        }
        self.parts.insert(index, part);
        Ok(())
    }

    /// Puts the final form of block `index` in place (a Responses `output_item.done`): a new
    /// block is started (its deltas emitted, so a UI shows content that arrived only whole);
    /// an existing one is replaced silently, its cost swapped for the new one's.
    pub(crate) fn settle(
        &mut self,
        index: u64,
        part: Part,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        let Some(old) = self.parts.get(&index) else {
            return self.start(index, part, deltas);
        };
        self.bytes = self.bytes.saturating_sub(part_bytes(old));
        self.charge(part_bytes(&part))?;
        self.parts.insert(index, part);
        Ok(())
    }

    fn part(&mut self, index: u64) -> Result<&mut Part, ProviderFailure> {
        self.parts
            .get_mut(&index)
            .ok_or_else(|| malformed(&format!("delta for content block {index} before its start")))
    }

    pub(crate) fn push_text(
        &mut self,
        index: u64,
        text: &str,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        self.charge(text.len())?;
        match self.part(index)? {
            Part::Text(t) => t.push_str(text),
            _ => return Err(mismatch(index, "text")),
        }
        if !text.is_empty() {
            deltas(StreamDelta::Text { index, text });
        }
        Ok(())
    }

    pub(crate) fn push_thinking(
        &mut self,
        index: u64,
        text: &str,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        self.charge(text.len())?;
        match self.part(index)? {
            Part::Thinking { thinking, .. } => thinking.push_str(text),
            _ => return Err(mismatch(index, "thinking")),
        }
        if !text.is_empty() {
            deltas(StreamDelta::Thinking {
                index,
                thinking: text,
            });
        }
        Ok(())
    }

    pub(crate) fn set_signature(&mut self, index: u64, sig: &str) -> Result<(), ProviderFailure> {
        self.charge(sig.len())?;
        match self.part(index)? {
            Part::Thinking { signature, .. } => {
                signature.clear();
                signature.push_str(sig);
                Ok(())
            }
            _ => Err(mismatch(index, "signature")),
        }
    }

    /// Appends to a thinking block's signature (Bedrock streams it as deltas, which may come
    /// in pieces; Anthropic's single `signature_delta` goes to [`set_signature`]).
    ///
    /// [`set_signature`]: Assembly::set_signature
    pub(crate) fn push_signature(&mut self, index: u64, sig: &str) -> Result<(), ProviderFailure> {
        self.charge(sig.len())?;
        match self.part(index)? {
            Part::Thinking { signature, .. } => {
                signature.push_str(sig);
                Ok(())
            }
            _ => Err(mismatch(index, "signature")),
        }
    }

    /// Appends to redacted thinking's data (Bedrock's `redactedContent` deltas).
    pub(crate) fn push_redacted(&mut self, index: u64, more: &str) -> Result<(), ProviderFailure> {
        self.charge(more.len())?;
        match self.part(index)? {
            Part::RedactedThinking(data) => {
                data.push_str(more);
                Ok(())
            }
            _ => Err(mismatch(index, "redacted reasoning")),
        }
    }

    pub(crate) fn push_json(
        &mut self,
        index: u64,
        fragment: &str,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        self.charge(fragment.len())?;
        match self.part(index)? {
            Part::ToolUse { json, .. } => json.push_str(fragment),
            _ => return Err(mismatch(index, "tool input")),
        }
        if !fragment.is_empty() {
            deltas(StreamDelta::ToolInputJson {
                index,
                partial_json: fragment,
            });
        }
        Ok(())
    }

    /// Fills in a tool call's id or name if the start fragment lacked it (OpenAI).
    pub(crate) fn tool_identity(&mut self, index: u64, new_id: &str, new_name: &str) {
        if let Some(Part::ToolUse { id, name, .. }) = self.parts.get_mut(&index) {
            if id.is_empty() {
                new_id.clone_into(id);
            }
            if name.is_empty() {
                new_name.clone_into(name);
            }
        }
    }

    pub(crate) fn close(&mut self, index: u64) -> Result<(), ProviderFailure> {
        if let Part::ToolUse { closed, .. } = self.part(index)? {
            *closed = true;
        }
        Ok(())
    }

    pub(crate) fn has_tool_calls(&self) -> bool {
        self.parts
            .values()
            .any(|p| matches!(p, Part::ToolUse { .. }))
    }

    /// The final checks: tool inputs parsed (problems recorded), empty text dropped, and an
    /// empty message refused.
    pub(crate) fn finish(
        self,
        stop_reason: StopReason,
    ) -> Result<AssistantResponse, ProviderFailure> {
        let mut content = Vec::with_capacity(self.parts.len());
        let mut input_problems = Vec::new();
        let output_stopped = stop_reason == StopReason::MaxTokens;
        for part in self.parts.into_values() {
            match part {
                Part::Text(text) => {
                    if !text.is_empty() {
                        content.push(ContentBlock::Text { text });
                    }
                }
                Part::Thinking {
                    thinking,
                    signature,
                } => content.push(ContentBlock::thinking(thinking, signature)),
                Part::RedactedThinking(data) => content.push(ContentBlock::redacted_thinking(data)),
                Part::Reasoning(item) => content.push(ContentBlock::reasoning(item)),
                Part::ToolUse {
                    id,
                    name,
                    json,
                    initial,
                    closed,
                } => {
                    let input = match tool_input(&json, initial, output_stopped, closed) {
                        Ok(input) => input,
                        Err((kind, detail)) => {
                            input_problems.push(ToolInputProblem {
                                tool_use_id: id.clone(),
                                kind,
                                raw: json,
                                detail,
                            });
                            Value::Object(Map::new())
                        }
                    };
                    content.push(ContentBlock::ToolUse {
                        id,
                        name,
                        input: Arc::new(input),
                    });
                }
            }
        }
        let message = Message {
            role: Role::Assistant,
            content,
        };
        if message.is_empty() {
            // Withheld by the provider's filters: the same request would be withheld again.
            if matches!(stop_reason, StopReason::ContentFilter | StopReason::Refusal) {
                return Err(ProviderFailure::new(
                    FailureKind::ContentBlocked,
                    format!("the provider withheld the whole answer (stop reason {stop_reason})"),
                ));
            }
            return Err(ProviderFailure::transport(
                TransportFault::EmptyMessage,
                Some(&format!("stop reason {stop_reason}")),
            ));
        }
        let mut response = AssistantResponse::new(message, stop_reason)
            .with_usage(self.usage)
            .with_input_problems(input_problems);
        if let Some(id) = self.id {
            response = response.with_id(id);
        }
        if let Some(model) = self.model {
            response = response.with_model(model);
        }
        Ok(response)
    }
}

/// Reads the response's `id` and `model` from `v` (a message, chunk or response object):
/// strings only, bounded (an identifier, not a payload), and only the first seen of each.
pub(crate) fn read_identity(v: &Value, asm: &mut Assembly) {
    let field = |key: &str| v.get(key).and_then(Value::as_str);
    asm.identity(field("id"), field("model"));
}

fn mismatch(index: u64, what: &str) -> ProviderFailure {
    malformed(&format!(
        "{what} delta for content block {index} of another type"
    ))
}

/// Parses streamed tool arguments. Empty arguments mean the start event's input, or `{}`.
pub(crate) fn tool_input(
    json: &str,
    initial: Option<Value>,
    output_stopped: bool,
    closed: bool,
) -> Result<Value, (InputProblemKind, String)> {
    if json.trim().is_empty() {
        return match initial {
            Some(v @ Value::Object(_)) => shallow(v),
            None => Ok(Value::Object(Map::new())),
            Some(other) => Err((
                InputProblemKind::NotAnObject,
                format!("tool input is {}, not an object", json_kind(&other)),
            )),
        };
    }
    match serde_json::from_str::<Value>(json) {
        Ok(v @ Value::Object(_)) => shallow(v),
        Ok(other) => Err((
            InputProblemKind::NotAnObject,
            format!("tool input is {}, not an object", json_kind(&other)),
        )),
        Err(e) => {
            let cut_short = e.is_eof() || !closed;
            let kind = if output_stopped && cut_short {
                InputProblemKind::Truncated
            } else {
                InputProblemKind::InvalidJson
            };
            Err((kind, e.to_string()))
        }
    }
}

/// `input` if it nests at most [`MAX_TOOL_INPUT_DEPTH`] levels, else the problem.
fn shallow(input: Value) -> Result<Value, (InputProblemKind, String)> {
    if nests_deeper_than(&input, MAX_TOOL_INPUT_DEPTH) {
        return Err((
            InputProblemKind::TooDeep,
            format!("tool input nests deeper than {MAX_TOOL_INPUT_DEPTH} levels"),
        ));
    }
    Ok(input)
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
