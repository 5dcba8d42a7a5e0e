//! Chat Completions stream assembly (`choices[0].delta` chunks, `data: [DONE]`) and
//! non-streaming bodies.

use crate::classify::classify_error_body;
use crate::failure::{ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::assemble::{Assembly, Part};
use crate::wire::borrow::{or_empty, parse_json, text, trim, Str};
use crate::wire::render::count;
use crate::wire::sse::SseEventRef;
use crate::wire::{malformed, stream_cut, StreamDelta};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

/// The block key of reasoning text some compatible servers send (`reasoning_content`,
/// `reasoning`); it becomes an unsigned thinking block, which no request ever sends back.
const THINKING: u64 = 0;
/// The block key of the message text.
const TEXT: u64 = 1;
/// The block key of tool call `i` is `TOOLS + i`.
const TOOLS: u64 = 2;

/// Assembly state for one Chat Completions stream.
#[derive(Debug)]
pub(crate) struct StreamState {
    asm: Assembly,
    finish_reason: Option<String>,
    refusal: bool,
}

impl StreamState {
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        StreamState {
            asm: Assembly::new(max_message_bytes),
            finish_reason: None,
            refusal: false,
        }
    }

    /// Handles one event; `Ok(true)` when it was the terminal `data: [DONE]`.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEventRef<'_>,
        deltas: &mut Vec<StreamDelta>,
    ) -> Result<bool, ProviderFailure> {
        let fail = || classify_error_body(ProviderKind::OpenAi, None, text(event.data).as_bytes());
        if event.event == Some("error") {
            return Err(fail());
        }
        let data = trim(event.data);
        if data == b"[DONE]" {
            return Ok(true);
        }
        let mut lossy = String::new();
        let chunk: Chunk<'_> = parse_json(data, &mut lossy, str::trim)
            .map_err(|e| malformed(&format!("chunk is not a valid chunk: {e}")))?;
        if chunk.error.is_some() {
            return Err(fail());
        }
        if let Some(usage) = chunk.usage.as_ref().filter(|u| u.is_object()) {
            read_usage(usage, &mut self.asm.usage);
        }
        for choice in chunk.choices.iter().flatten() {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = &choice.delta {
                self.on_delta(delta, deltas)?;
            }
            if let Some(reason) = &choice.finish_reason {
                self.finish_reason = Some(reason.as_str().to_owned());
            }
        }
        Ok(false)
    }

    fn on_delta(
        &mut self,
        delta: &ChunkDelta<'_>,
        deltas: &mut Vec<StreamDelta>,
    ) -> Result<(), ProviderFailure> {
        for reasoning in [&delta.reasoning_content, &delta.reasoning] {
            let reasoning = or_empty(reasoning);
            if reasoning.is_empty() {
                continue;
            }
            if !self.asm.has(THINKING) {
                let part = Part::Thinking {
                    thinking: String::new(),
                    signature: String::new(),
                };
                self.asm.start(THINKING, part, deltas)?;
            }
            self.asm.push_thinking(THINKING, reasoning, deltas)?;
        }
        for (text, refusal) in [(&delta.content, false), (&delta.refusal, true)] {
            let text = or_empty(text);
            if text.is_empty() {
                continue;
            }
            if !self.asm.has(TEXT) {
                self.asm.start(TEXT, Part::Text(String::new()), deltas)?;
            }
            self.asm.push_text(TEXT, text, deltas)?;
            self.refusal |= refusal;
        }
        for (pos, call) in (0u64..).zip(delta.tool_calls.iter().flatten()) {
            let key = call.index.unwrap_or(pos).saturating_add(TOOLS);
            let id = or_empty(&call.id);
            let (name, args) = match &call.function {
                Some(f) => (or_empty(&f.name), f.arguments.as_ref()),
                None => ("", None),
            };
            if self.asm.has(key) {
                self.asm.tool_identity(key, id, name);
            } else {
                let part = Part::ToolUse {
                    id: id.to_owned(),
                    name: name.to_owned(),
                    json: String::new(),
                    initial: None,
                    // Chat has no per-call stop event.
                    closed: true,
                };
                self.asm.start(key, part, deltas)?;
            }
            if let Some(args) = args {
                self.asm.push_json(key, args.as_str(), deltas)?;
            }
        }
        Ok(())
    }

    pub(crate) fn finish(self, complete: bool) -> Result<AssistantResponse, ProviderFailure> {
        if !complete && self.finish_reason.is_none() {
            return Err(stream_cut("no finish_reason and no [DONE]"));
        }
        let stop = stop_reason(self.finish_reason, self.refusal, self.asm.has_tool_calls());
        self.asm.finish(stop)
    }
}

fn stop_reason(finish_reason: Option<String>, refusal: bool, has_calls: bool) -> StopReason {
    let stop = match finish_reason {
        Some(r) => StopReason::from(r),
        None if has_calls => StopReason::ToolUse,
        None => StopReason::EndTurn,
    };
    if refusal && stop == StopReason::EndTurn {
        StopReason::Refusal
    } else {
        stop
    }
}

/// `prompt_tokens` → input, `completion_tokens` → output, cached prompt tokens → cache read.
fn read_usage(v: &Value, usage: &mut Usage) {
    if let Some(n) = count(v, "prompt_tokens") {
        usage.input_tokens = n;
    }
    if let Some(n) = count(v, "completion_tokens") {
        usage.output_tokens = n;
    }
    if let Some(n) = v
        .get("prompt_tokens_details")
        .and_then(|d| count(d, "cached_tokens"))
    {
        usage.cache_read_input_tokens = Some(n);
    }
}

/// A non-streaming Chat Completions response body.
pub(crate) fn parse_response(v: &Value, body: &[u8]) -> Result<AssistantResponse, ProviderFailure> {
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(classify_error_body(ProviderKind::OpenAi, None, body));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| {
            c.iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        })
        .ok_or_else(|| malformed("response has no choices"))?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let mut asm = Assembly::new(usize::MAX);
    let mut ignored = Vec::new();
    let mut refusal = false;
    let mut text = String::new();
    if let Some(t) = message.get("content").and_then(Value::as_str) {
        text.push_str(t);
    }
    if let Some(t) = message.get("refusal").and_then(Value::as_str) {
        refusal = !t.is_empty();
        text.push_str(t);
    }
    for key in ["reasoning_content", "reasoning"] {
        if let Some(thinking) = message.get(key).and_then(Value::as_str) {
            if !thinking.is_empty() && !asm.has(THINKING) {
                let part = Part::Thinking {
                    thinking: thinking.to_owned(),
                    signature: String::new(),
                };
                asm.start(THINKING, part, &mut ignored)?;
            }
        }
    }
    asm.start(TEXT, Part::Text(text), &mut ignored)?;
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in (TOOLS..).zip(calls) {
            let function = call.get("function").unwrap_or(&Value::Null);
            let field = |v: &Value, key: &str| {
                v.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let part = Part::ToolUse {
                id: field(call, "id"),
                name: field(function, "name"),
                json: field(function, "arguments"),
                initial: None,
                closed: true,
            };
            asm.start(i, part, &mut ignored)?;
        }
    }
    if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
        read_usage(usage, &mut asm.usage);
    }
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let stop = stop_reason(finish, refusal, asm.has_tool_calls());
    asm.finish(stop)
}

/// One `chat.completion.chunk` (or an error object). Only the fields rebound reads; the
/// delta strings are borrowed from the chunk text.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Value>,
    /// Present (and not null) when the server reports an error in the stream.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct ChunkDelta<'a> {
    #[serde(default, borrow)]
    reasoning_content: Option<Str<'a>>,
    #[serde(default, borrow)]
    reasoning: Option<Str<'a>>,
    #[serde(default, borrow)]
    content: Option<Str<'a>>,
    #[serde(default, borrow)]
    refusal: Option<Str<'a>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Str<'a>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Str<'a>>,
    #[serde(default, borrow)]
    arguments: Option<Str<'a>>,
}
