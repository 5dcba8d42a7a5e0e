//! Chat Completions stream assembly (`choices[0].delta` chunks, `data: [DONE]`) and
//! non-streaming bodies.

use crate::classify::classify_error_body;
use crate::failure::{ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::assemble::{read_identity, Assembly, Part};
use crate::wire::borrow::{or_empty, parse_json, text, trim, Str};
use crate::wire::render::count;
use crate::wire::scan::{fast_index, fast_str, first_time, list, or_null, Scan};
use crate::wire::sse::SseEventRef;
use crate::wire::{malformed, stream_cut, Deltas, StreamDelta};
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
    /// Whether the first chunk was read for the response's `id` and `model`.
    identity_read: bool,
}

impl StreamState {
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        StreamState {
            asm: Assembly::new(max_message_bytes),
            finish_reason: None,
            refusal: false,
            identity_read: false,
        }
    }

    /// Handles one event; `Ok(true)` when it was the terminal `data: [DONE]`.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEventRef<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        let fail = || classify_error_body(ProviderKind::OpenAi, None, text(event.data).as_bytes());
        if event.event == Some("error") {
            return Err(fail());
        }
        let data = trim(event.data);
        if data == b"[DONE]" {
            return Ok(true);
        }
        if !self.identity_read {
            // Every chunk repeats the response's `id` and `model`; the first is read for them
            // once, as a whole (the fast reader below skips them, as it does every field it
            // does not need, whatever its type).
            self.identity_read = true;
            let mut lossy = String::new();
            if let Ok(first) = parse_json::<Value>(data, &mut lossy, str::trim) {
                read_identity(&first, &mut self.asm);
            }
        }
        let mut lossy = String::new();
        let chunk: Chunk<'_> = match fast_chunk(data) {
            Some(chunk) => chunk,
            None => parse_json(data, &mut lossy, str::trim)
                .map_err(|e| malformed(&format!("chunk is not a valid chunk: {e}")))?,
        };
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
        deltas: &mut Deltas<'_>,
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
    let mut ignored = |_: StreamDelta<&str>| {};
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
    read_identity(v, &mut asm);
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let stop = stop_reason(finish, refusal, asm.has_tool_calls());
    asm.finish(stop)
}

/// A `chat.completion.chunk` read without serde_json, when it has the API's compact shape:
/// `{"id":…,"object":"chat.completion.chunk",…,"choices":[{"index":0,"delta":{"content":"…"},
/// "logprobs":null,"finish_reason":null}]}`, with text, refusal, reasoning or tool call
/// deltas, in any order, other fields holding strings, integers, `null`, `true`, `false`,
/// `[]` or `{}`, and `usage` and `error` `null`.
///
/// Nearly every event of a Chat stream is one of these, and serde_json's reading of them was
/// three quarters of the decoding time (issue 21). Anything else — whitespace, a `\u` escape,
/// a nested value in a field rebound does not read, a duplicate field, a usage object, an
/// error — gives `None`, and the chunk goes to serde_json; so whenever this reads a chunk, it
/// reads what serde_json would (a proptest holds it to that).
fn fast_chunk(data: &[u8]) -> Option<Chunk<'_>> {
    let mut scan = Scan::new(data);
    let mut chunk = Chunk {
        choices: None,
        usage: None,
        error: None,
    };
    let mut seen = [false; 3];
    scan.object(|scan, key| match key {
        b"choices" => {
            first_time(&mut seen[0])?;
            chunk.choices = or_null(scan, |scan| list(scan, fast_choice))?;
            Some(())
        }
        b"usage" => first_time(&mut seen[1]).and_then(|()| scan.null()),
        b"error" => first_time(&mut seen[2]).and_then(|()| scan.null()),
        _ => scan.skip(),
    })?;
    scan.at_end().then_some(chunk)
}

fn fast_choice<'a>(scan: &mut Scan<'a>) -> Option<Choice<'a>> {
    let mut choice = Choice {
        index: None,
        delta: None,
        finish_reason: None,
    };
    let mut seen = [false; 3];
    scan.object(|scan, key| {
        match key {
            b"index" => choice.index = fast_index(scan, &mut seen[0])?,
            b"delta" => {
                first_time(&mut seen[1])?;
                choice.delta = or_null(scan, fast_delta)?;
            }
            b"finish_reason" => choice.finish_reason = fast_str(scan, &mut seen[2])?,
            _ => scan.skip()?,
        }
        Some(())
    })?;
    Some(choice)
}

fn fast_delta<'a>(scan: &mut Scan<'a>) -> Option<ChunkDelta<'a>> {
    let mut delta = ChunkDelta {
        reasoning_content: None,
        reasoning: None,
        content: None,
        refusal: None,
        tool_calls: None,
    };
    let mut seen = [false; 5];
    scan.object(|scan, key| {
        match key {
            b"content" => delta.content = fast_str(scan, &mut seen[0])?,
            b"refusal" => delta.refusal = fast_str(scan, &mut seen[1])?,
            b"reasoning_content" => delta.reasoning_content = fast_str(scan, &mut seen[2])?,
            b"reasoning" => delta.reasoning = fast_str(scan, &mut seen[3])?,
            b"tool_calls" => {
                first_time(&mut seen[4])?;
                delta.tool_calls = or_null(scan, |scan| list(scan, fast_tool_call))?;
            }
            _ => scan.skip()?,
        }
        Some(())
    })?;
    Some(delta)
}

fn fast_tool_call<'a>(scan: &mut Scan<'a>) -> Option<ToolCallDelta<'a>> {
    let mut call = ToolCallDelta {
        index: None,
        id: None,
        function: None,
    };
    let mut seen = [false; 3];
    scan.object(|scan, key| {
        match key {
            b"index" => call.index = fast_index(scan, &mut seen[0])?,
            b"id" => call.id = fast_str(scan, &mut seen[1])?,
            b"function" => {
                first_time(&mut seen[2])?;
                call.function = or_null(scan, fast_function)?;
            }
            _ => scan.skip()?,
        }
        Some(())
    })?;
    Some(call)
}

fn fast_function<'a>(scan: &mut Scan<'a>) -> Option<FunctionDelta<'a>> {
    let mut function = FunctionDelta {
        name: None,
        arguments: None,
    };
    let mut seen = [false; 2];
    scan.object(|scan, key| {
        match key {
            b"name" => function.name = fast_str(scan, &mut seen[0])?,
            b"arguments" => function.arguments = fast_str(scan, &mut seen[1])?,
            _ => scan.skip()?,
        }
        Some(())
    })?;
    Some(function)
}

/// One `chat.completion.chunk` (or an error object). Only the fields rebound reads; the
/// delta strings are borrowed from the chunk text.
#[derive(Debug, PartialEq, Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<Value>,
    /// Present (and not null) when the server reports an error in the stream.
    #[serde(default)]
    error: Option<IgnoredAny>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Debug, PartialEq, Deserialize)]
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

#[derive(Debug, PartialEq, Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    id: Option<Str<'a>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Debug, PartialEq, Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Str<'a>>,
    #[serde(default, borrow)]
    arguments: Option<Str<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::borrow::trim;
    use crate::wire::scan::strategies::{object, plain_extras, text_or_null};
    use proptest::prelude::*;
    use serde_json::json;

    fn serde_chunk(data: &[u8]) -> Option<Chunk<'_>> {
        serde_json::from_str(std::str::from_utf8(data).ok()?).ok()
    }

    #[test]
    fn api_chunks_read_like_serde_json() {
        let capture = include_str!("../../../fixtures/streams/openai/text_with_usage.sse");
        let mut read = 0;
        for data in capture.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let data = trim(data.as_bytes());
            if let Some(fast) = fast_chunk(data) {
                assert_eq!(Some(fast), serde_chunk(data), "{}", text(data));
                read += 1;
            }
        }
        // Every chunk but the usage chunk and `[DONE]`.
        assert_eq!(read, capture.matches("data: ").count() - 2);
        let declined: [&[u8]; 5] = [
            br#"{"choices":[{"index":0,"delta":{"content":"\u00e9"}}]}"#,
            br#"{"choices": [{"index":0,"delta":{"content":"x"}}]}"#,
            br#"{"choices":[{"index":0,"index":1,"delta":{"content":"x"}}]}"#,
            br#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            br#"{"error":{"message":"overloaded"}}"#,
        ];
        for data in declined {
            assert_eq!(fast_chunk(data), None, "{}", text(data));
        }
    }

    fn chunk() -> impl Strategy<Value = Value> {
        let function = object(vec![
            ("name", text_or_null().boxed()),
            ("arguments", text_or_null().boxed()),
        ]);
        let call = object(vec![
            ("index", (0u64..3).prop_map(Value::from).boxed()),
            ("id", text_or_null().boxed()),
            ("type", Just(json!("function")).boxed()),
            ("function", function),
        ]);
        let delta = object(vec![
            ("role", Just(json!("assistant")).boxed()),
            ("content", text_or_null().boxed()),
            ("refusal", text_or_null().boxed()),
            ("reasoning_content", text_or_null().boxed()),
            (
                "tool_calls",
                proptest::collection::vec(call, 0..2)
                    .prop_map(Value::from)
                    .boxed(),
            ),
        ]);
        let choice = object(vec![
            ("index", (0u64..2).prop_map(Value::from).boxed()),
            ("delta", delta),
            ("logprobs", Just(Value::Null).boxed()),
            ("finish_reason", text_or_null().boxed()),
        ]);
        object(vec![
            ("id", Just(json!("chatcmpl-1")).boxed()),
            ("object", Just(json!("chat.completion.chunk")).boxed()),
            ("created", Just(json!(1_723_024_748)).boxed()),
            (
                "choices",
                proptest::collection::vec(choice, 0..2)
                    .prop_map(Value::from)
                    .boxed(),
            ),
            (
                "usage",
                prop_oneof![Just(Value::Null), Just(json!({"prompt_tokens": 1}))].boxed(),
            ),
        ])
    }

    proptest! {
        #[test]
        fn fast_chunk_never_disagrees_with_serde_json(
            chunk in chunk(),
            cut in any::<prop::sample::Index>(),
            insert in proptest::collection::vec(any::<u8>(), 0..3),
            mutate in any::<bool>(),
        ) {
            let json = chunk.to_string();
            let mut data = json.clone().into_bytes();
            if mutate {
                let at = cut.index(data.len() + 1);
                data.splice(at..at, insert);
            }
            let mut lossy = String::new();
            let serde: Option<Chunk<'_>> = parse_json(&data, &mut lossy, str::trim).ok();
            match fast_chunk(&data) {
                Some(fast) => prop_assert_eq!(Some(fast), serde),
                None => {
                    // Declining is allowed; declining the API's own shape is not.
                    let plain = chunk.get("usage").map_or(true, Value::is_null)
                        && !json.contains("\\u")
                        && plain_extras(&chunk);
                    prop_assert!(mutate || !plain, "declined {}", json);
                }
            }
        }
    }
}
