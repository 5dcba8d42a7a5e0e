//! ConverseStream assembly (AWS event-stream messages from `messageStart` to `metadata`) and
//! non-streaming Converse bodies.
//!
//! Each event-stream message is one event: `:message-type` `event` with its name in
//! `:event-type` and its JSON as the payload, which also carries a padding field `p` (a run
//! of `abc…` of random length, against length side channels) that is ignored like every
//! field rebound does not read. The events, in order:
//!
//! - `messageStart` `{role}`;
//! - per content block, `contentBlockStart` `{contentBlockIndex, start: {toolUse:
//!   {toolUseId, name}}}` — sent for tool calls only: text and reasoning blocks begin with
//!   their first delta —, `contentBlockDelta` `{contentBlockIndex, delta}` whose delta is
//!   `{text}`, `{toolUse: {input}}` (a fragment of the arguments' JSON) or
//!   `{reasoningContent: {text} | {signature} | {redactedContent}}`, and
//!   `contentBlockStop` `{contentBlockIndex}`;
//! - `messageStop` `{stopReason, additionalModelResponseFields}`;
//! - `metadata` `{usage: {inputTokens, outputTokens, totalTokens, cacheReadInputTokens,
//!   cacheWriteInputTokens}, metrics: {latencyMs}}`.
//!
//! A block's index is its key ([`StreamDelta`]'s `index` is the `contentBlockIndex`). Blocks
//! the service runs itself (a `toolUse` start of type `server_tool_use`, `toolResult` and
//! `image` starts) are skipped, as are deltas rebound does not model (citations).
//!
//! **Completion.** The stream is complete when `metadata` follows `messageStop`
//! ([`StreamState::on_frame`] says so); a body that ends cleanly — between two messages —
//! after `messageStop` but before `metadata` is accepted too, without usage (usage is
//! optional to rebound, as an OpenAI stream without its usage chunk is). A body that ends
//! before `messageStop`, or inside a message, is [`TransportFault::StreamCut`].
//!
//! **Failures.** A message of `:message-type` `exception` is the service's error inside the
//! 200 response: its `:exception-type` (`throttlingException`, `modelStreamErrorException`,
//! `internalServerException`, `serviceUnavailableException`, `validationException`, …) is
//! the error's type and its payload `{"message": …}` the body, classified as the HTTP error
//! of that type would be (so a `validationException` saying the input is too long is a
//! context overflow). A message of type `error` carries its code and message in
//! `:error-code` and `:error-message`, and is classified the same way. A message whose
//! checksums or lengths are wrong is [`TransportFault::MalformedStream`] (the framing cannot
//! be trusted past it).
//!
//! [`TransportFault::StreamCut`]: crate::TransportFault::StreamCut
//! [`TransportFault::MalformedStream`]: crate::TransportFault::MalformedStream

use crate::classify::classify_aws_error;
use crate::failure::ProviderFailure;
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::assemble::{Assembly, Part};
use crate::wire::borrow::{as_is, or_empty, parse_json, Str};
use crate::wire::eventstream::{Frame, FrameDecoder, FrameError};
use crate::wire::render::count;
use crate::wire::scan::{fast_index, first_time, Scan};
use crate::wire::{malformed, stream_cut, Deltas, StreamDelta};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Assembly state for one ConverseStream response, fed one event-stream message at a time.
#[derive(Debug)]
pub(crate) struct StreamState {
    asm: Assembly,
    /// `Some` once `messageStop` arrived.
    stop: Option<StopReason>,
    /// Blocks the service runs itself (server tool calls and their results, images):
    /// skipped.
    skipped: BTreeSet<u64>,
}

impl StreamState {
    /// A stream whose assembled message may take at most `max_message_bytes`
    /// ([`StreamLimits::max_message_bytes`](crate::wire::StreamLimits)).
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        StreamState {
            asm: Assembly::new(max_message_bytes),
            stop: None,
            skipped: BTreeSet::new(),
        }
    }

    /// Handles one message of the stream, lending the deltas it completes; `Ok(true)` when it
    /// completed the stream (`metadata` after `messageStop`). An `exception` or `error`
    /// message, or an event that is not what its type says, is the failure.
    pub(crate) fn on_frame(
        &mut self,
        frame: &Frame<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        match frame.string(":message-type") {
            // AWS always names the type; a message without one is read as an event.
            Some("event") | None => {}
            Some("exception") => {
                let ty = frame.string(":exception-type");
                return Err(classify_aws_error(None, ty, frame.payload()));
            }
            Some("error") => {
                let body = json!({"message": frame.string(":error-message").unwrap_or_default()});
                let ty = frame.string(":error-code");
                return Err(classify_aws_error(None, ty, body.to_string().as_bytes()));
            }
            Some(other) => {
                return Err(malformed(&format!(
                    "event-stream message of unknown :message-type `{other}`"
                )))
            }
        }
        let ty = frame
            .string(":event-type")
            .ok_or_else(|| malformed("event-stream event without an :event-type header"))?;
        if !READ.contains(&ty) {
            // Events added later (and the payloads of those rebound does not read).
            return Ok(false);
        }
        let mut lossy = String::new();
        let v: Event<'_> = match fast_delta(ty, frame.payload()) {
            Some(v) => v,
            None => parse_json(frame.payload(), &mut lossy, as_is)
                .map_err(|e| malformed(&format!("{ty} payload is not a valid event: {e}")))?,
        };
        match ty {
            "contentBlockStart" => {
                let index = index_of(&v)?;
                let start = v.start.as_ref().unwrap_or(&Value::Null);
                if let Some(call) = start.get("toolUse").filter(|c| c.is_object()) {
                    if str_field(call, "type") == "server_tool_use" {
                        self.skip(index)?;
                    } else {
                        let part = tool_part(call, String::new(), None, false);
                        self.asm.start(index, part, deltas)?;
                    }
                } else if start.get("toolResult").is_some() || start.get("image").is_some() {
                    self.skip(index)?;
                }
                // Any other start (none is sent for text and reasoning): the block begins
                // with its first delta.
            }
            "contentBlockDelta" => {
                let index = index_of(&v)?;
                if self.skipped.contains(&index) {
                    return Ok(false);
                }
                if let Some(delta) = &v.delta {
                    self.on_delta(index, delta, deltas)?;
                }
            }
            "contentBlockStop" => {
                let index = index_of(&v)?;
                // A block that never had a delta (an empty text) has nothing to close.
                if !self.skipped.contains(&index) && self.asm.has(index) {
                    self.asm.close(index)?;
                }
            }
            "messageStop" => {
                let reason = v.stop_reason.as_ref().map(Str::as_str);
                self.stop = Some(match reason {
                    Some(reason) => stop_reason(reason),
                    None => default_stop(&self.asm),
                });
            }
            "metadata" => {
                if let Some(usage) = v.usage.as_ref().filter(|u| u.is_object()) {
                    read_usage(usage, &mut self.asm.usage);
                }
                return Ok(self.stop.is_some());
            }
            // messageStart: the role is always the assistant's; Bedrock sends no id.
            _ => {}
        }
        Ok(false)
    }

    fn skip(&mut self, index: u64) -> Result<(), ProviderFailure> {
        self.asm.charge_block()?;
        self.skipped.insert(index);
        Ok(())
    }

    /// Starts block `index` as `part` unless it has started.
    fn ensure(
        &mut self,
        index: u64,
        part: impl FnOnce() -> Part,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        if self.asm.has(index) {
            return Ok(());
        }
        self.asm.start(index, part(), deltas)
    }

    fn on_delta(
        &mut self,
        index: u64,
        delta: &Delta<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        if let Some(text) = &delta.text {
            self.ensure(index, || Part::Text(String::new()), deltas)?;
            return self.asm.push_text(index, text.as_str(), deltas);
        }
        if let Some(call) = &delta.tool_use {
            // A tool call's block starts with its id and name: a fragment before them is
            // a malformed stream.
            return self.asm.push_json(index, or_empty(&call.input), deltas);
        }
        if let Some(reasoning) = &delta.reasoning_content {
            if let Some(data) = &reasoning.redacted_content {
                self.ensure(index, || Part::RedactedThinking(String::new()), deltas)?;
                return self.asm.push_redacted(index, data.as_str());
            }
            let thinking = || Part::Thinking {
                thinking: String::new(),
                signature: String::new(),
            };
            if let Some(text) = &reasoning.text {
                self.ensure(index, thinking, deltas)?;
                self.asm.push_thinking(index, text.as_str(), deltas)?;
            }
            if let Some(signature) = &reasoning.signature {
                self.ensure(index, thinking, deltas)?;
                self.asm.push_signature(index, signature.as_str())?;
            }
        }
        // Citations, images and server tool results: nothing rebound keeps.
        Ok(())
    }

    /// Ends the stream: the assembled response once `messageStop` arrived (`complete` or
    /// not: `metadata` only adds usage), else [`TransportFault::StreamCut`].
    ///
    /// [`TransportFault::StreamCut`]: crate::TransportFault::StreamCut
    pub(crate) fn finish(self, complete: bool) -> Result<AssistantResponse, ProviderFailure> {
        debug_assert!(
            !complete || self.stop.is_some(),
            "a stream completes only after messageStop"
        );
        match self.stop {
            Some(stop) => self.asm.finish(stop),
            None => Err(stream_cut("no messageStop event")),
        }
    }
}

/// The event types whose payload rebound reads; the payloads of others are not parsed.
const READ: &[&str] = &[
    "messageStart",
    "contentBlockStart",
    "contentBlockDelta",
    "contentBlockStop",
    "messageStop",
    "metadata",
];

fn index_of(v: &Event<'_>) -> Result<u64, ProviderFailure> {
    v.content_block_index
        .ok_or_else(|| malformed("content block event without a contentBlockIndex"))
}

fn str_field<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A tool call's part from a `toolUse` object (`toolUseId`, `name`).
fn tool_part(call: &Value, json: String, initial: Option<Value>, closed: bool) -> Part {
    Part::ToolUse {
        id: str_field(call, "toolUseId").to_owned(),
        name: str_field(call, "name").to_owned(),
        json,
        initial,
        closed,
    }
}

/// Converse's stop reasons in rebound's terms: `guardrail_intervened` and
/// `content_filtered` are the content filter; the names Anthropic shares (`end_turn`,
/// `tool_use`, `max_tokens`, `stop_sequence`) read as theirs; anything else
/// (`malformed_model_output`, `malformed_tool_use`, `model_context_window_exceeded`) is
/// kept verbatim.
pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "guardrail_intervened" | "content_filtered" => StopReason::ContentFilter,
        other => StopReason::from(other.to_owned()),
    }
}

fn default_stop(asm: &Assembly) -> StopReason {
    if asm.has_tool_calls() {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    }
}

/// `inputTokens` → input, `outputTokens` → output, `cacheReadInputTokens` → cache read,
/// `cacheWriteInputTokens` → cache creation. Bedrock's `inputTokens`, like Anthropic's,
/// leave out the tokens read from and written to the cache.
fn read_usage(v: &Value, usage: &mut Usage) {
    if let Some(n) = count(v, "inputTokens") {
        usage.input_tokens = n;
    }
    if let Some(n) = count(v, "outputTokens") {
        usage.output_tokens = n;
    }
    if let Some(n) = count(v, "cacheReadInputTokens") {
        usage.cache_read_input_tokens = Some(n);
    }
    if let Some(n) = count(v, "cacheWriteInputTokens") {
        usage.cache_creation_input_tokens = Some(n);
    }
}

/// A framing error: the stream cannot be read past it.
pub(crate) fn frame_failure(e: &FrameError) -> ProviderFailure {
    malformed(&e.to_string())
}

/// A whole ConverseStream response body: event-stream framing ([`FrameDecoder`]) and
/// assembly ([`StreamState`]) together, bytes in, deltas out, one outcome at the end, with
/// the rules [`StreamDecoder`](crate::wire::StreamDecoder) follows for SSE: a failure is
/// returned by the feed that found it and by every later call; bytes after the stream
/// completed are ignored, even broken ones (a message must not fail for its trailing bytes).
#[derive(Debug)]
pub(crate) struct Decoder {
    frames: FrameDecoder,
    state: StreamState,
    failure: Option<ProviderFailure>,
    complete: bool,
}

impl Decoder {
    /// A decoder at the start of a body, for a message of at most `max_message_bytes`.
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        Decoder {
            frames: FrameDecoder::new(),
            state: StreamState::new(max_message_bytes),
            failure: None,
            complete: false,
        }
    }

    /// Feeds the next bytes of the body, lending each delta they complete to `on_delta`.
    pub(crate) fn feed_with(
        &mut self,
        bytes: &[u8],
        mut on_delta: impl FnMut(StreamDelta<&str>),
    ) -> Result<(), ProviderFailure> {
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        if self.complete {
            return Ok(());
        }
        let Decoder {
            frames,
            state,
            failure,
            complete,
        } = self;
        let framed = frames.feed_with(bytes, |frame| {
            if *complete || failure.is_some() {
                return;
            }
            match state.on_frame(&frame, &mut on_delta) {
                Ok(done) => *complete = done,
                Err(f) => *failure = Some(f),
            }
        });
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        match framed {
            Err(e) if !self.complete => {
                let f = frame_failure(&e);
                self.failure = Some(f.clone());
                Err(f)
            }
            _ => Ok(()),
        }
    }

    /// Whether `metadata` arrived after `messageStop`.
    pub(crate) fn is_complete(&self) -> bool {
        self.complete && self.failure.is_none()
    }

    /// Ends the body: the assembled response, or the failure. A body that ended inside a
    /// message, or before `messageStop`, is [`TransportFault::StreamCut`].
    ///
    /// [`TransportFault::StreamCut`]: crate::TransportFault::StreamCut
    pub(crate) fn finish(self) -> Result<AssistantResponse, ProviderFailure> {
        if let Some(f) = self.failure {
            return Err(f);
        }
        if !self.complete && !self.frames.is_between_frames() {
            return Err(stream_cut("the body ended inside an event-stream message"));
        }
        self.state.finish(self.complete)
    }
}

/// A non-streaming Converse body: `{"output": {"message": {"role", "content"}},
/// "stopReason", "usage", "metrics"}`; an AWS error body (`{"message"}`, `__type`) is
/// classified as an error.
pub(crate) fn parse_response(v: &Value, body: &[u8]) -> Result<AssistantResponse, ProviderFailure> {
    let Some(output) = v.get("output").filter(|o| o.is_object()) else {
        if v.get("message").is_some() || v.get("Message").is_some() || v.get("__type").is_some() {
            return Err(classify_aws_error(None, None, body));
        }
        return Err(malformed("response has no output"));
    };
    let blocks = output
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("response has no output.message.content array"))?;
    let mut asm = Assembly::new(usize::MAX);
    let mut ignored = |_: StreamDelta<&str>| {};
    for (i, block) in (0u64..).zip(blocks) {
        let part = if let Some(text) = block.get("text").and_then(Value::as_str) {
            Part::Text(text.to_owned())
        } else if let Some(call) = block.get("toolUse").filter(|c| c.is_object()) {
            if str_field(call, "type") == "server_tool_use" {
                continue;
            }
            let input = call.get("input").cloned().unwrap_or(Value::Null);
            tool_part(call, String::new(), Some(input), true)
        } else if let Some(reasoning) = block.get("reasoningContent") {
            if let Some(text) = reasoning.get("reasoningText") {
                Part::Thinking {
                    thinking: str_field(text, "text").to_owned(),
                    signature: str_field(text, "signature").to_owned(),
                }
            } else if let Some(data) = reasoning.get("redactedContent").and_then(Value::as_str) {
                Part::RedactedThinking(data.to_owned())
            } else {
                continue;
            }
        } else {
            // Server tool results, images, citations: not rebound's.
            continue;
        };
        asm.start(i, part, &mut ignored)?;
    }
    if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
        read_usage(usage, &mut asm.usage);
    }
    let stop = match v.get("stopReason").and_then(Value::as_str) {
        Some(reason) => stop_reason(reason),
        None => default_stop(&asm),
    };
    asm.finish(stop)
}

/// The bulk of a stream, a `contentBlockDelta` whose delta is text or a tool input fragment
/// (`{"contentBlockIndex":0,"delta":{"text":"…"},"p":"abc"}`, keys in any order, compact as
/// Bedrock sends them), read without serde; `None` for anything else (another event, another
/// delta, an unknown or repeated key, `null`, a `\u` escape), which the full reading then
/// reads. What it reads equals what the full reading makes of the same payload (a proptest
/// holds it to that).
fn fast_delta<'a>(ty: &str, payload: &'a [u8]) -> Option<Event<'a>> {
    if ty != "contentBlockDelta" {
        return None;
    }
    let mut scan = Scan::new(payload);
    let (mut index, mut seen_index) = (None, false);
    let (mut delta, mut seen_delta) = (None, false);
    let mut seen_pad = false;
    scan.object(|scan, key| match key {
        b"contentBlockIndex" => {
            index = fast_index(scan, &mut seen_index)?;
            Some(())
        }
        b"delta" => {
            first_time(&mut seen_delta)?;
            let mut read = None;
            scan.object(|scan, key| {
                if read.is_some() {
                    return None;
                }
                read = Some(match key {
                    b"text" => Delta::text(Str(scan.string()?)),
                    b"toolUse" => {
                        let mut input = None;
                        scan.object(|scan, key| match (key, &input) {
                            (b"input", None) => {
                                input = Some(Str(scan.string()?));
                                Some(())
                            }
                            _ => None,
                        })?;
                        Delta::input(input?)
                    }
                    _ => return None,
                });
                Some(())
            })?;
            delta = Some(read?);
            Some(())
        }
        b"p" => {
            first_time(&mut seen_pad)?;
            scan.skip()
        }
        _ => None,
    })?;
    if !scan.at_end() {
        return None;
    }
    Some(Event {
        content_block_index: index,
        start: None,
        delta,
        stop_reason: None,
        usage: None,
    })
}

/// One event's payload: only the fields rebound reads; delta strings borrow the payload.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    #[serde(default)]
    content_block_index: Option<u64>,
    #[serde(default)]
    start: Option<Value>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    stop_reason: Option<Str<'a>>,
    #[serde(default)]
    usage: Option<Value>,
}

/// A `contentBlockDelta`'s `delta`: one of its members is set.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta<'a> {
    #[serde(default, borrow)]
    text: Option<Str<'a>>,
    #[serde(default, borrow)]
    tool_use: Option<ToolUseDelta<'a>>,
    #[serde(default, borrow)]
    reasoning_content: Option<ReasoningDelta<'a>>,
}

impl<'a> Delta<'a> {
    fn text(text: Str<'a>) -> Self {
        Delta {
            text: Some(text),
            tool_use: None,
            reasoning_content: None,
        }
    }

    fn input(input: Str<'a>) -> Self {
        Delta {
            text: None,
            tool_use: Some(ToolUseDelta { input: Some(input) }),
            reasoning_content: None,
        }
    }
}

#[derive(Debug, PartialEq, Deserialize)]
struct ToolUseDelta<'a> {
    #[serde(default, borrow)]
    input: Option<Str<'a>>,
}

#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta<'a> {
    #[serde(default, borrow)]
    text: Option<Str<'a>>,
    #[serde(default, borrow)]
    signature: Option<Str<'a>>,
    /// A blob: base64 text in JSON, kept as it came.
    #[serde(default, borrow)]
    redacted_content: Option<Str<'a>>,
}

#[cfg(test)]
mod fast_tests {
    use super::*;
    use proptest::prelude::*;

    /// The full reading of `payload`, as `on_frame` does it without the fast path.
    fn full(payload: &[u8]) -> Option<Event<'_>> {
        let mut lossy = String::new();
        let v: Event<'_> = parse_json(payload, &mut lossy, as_is).ok()?;
        // Borrowed from `payload` only when nothing was replaced: compare owned text.
        Some(Event {
            content_block_index: v.content_block_index,
            start: v.start,
            delta: v.delta.map(|d| Delta {
                text: d.text.map(|t| Str(t.0.into_owned().into())),
                tool_use: d.tool_use.map(|u| ToolUseDelta {
                    input: u.input.map(|i| Str(i.0.into_owned().into())),
                }),
                reasoning_content: d.reasoning_content.map(|r| ReasoningDelta {
                    text: r.text.map(|t| Str(t.0.into_owned().into())),
                    signature: r.signature.map(|t| Str(t.0.into_owned().into())),
                    redacted_content: r.redacted_content.map(|t| Str(t.0.into_owned().into())),
                }),
            }),
            stop_reason: v.stop_reason.map(|t| Str(t.0.into_owned().into())),
            usage: v.usage,
        })
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z ]{0,30}",
            "\\PC{0,20}",
            Just("quote \" backslash \\ tab \t newline \n".to_owned()),
            Just("\u{1F600} é \u{7f}".to_owned()),
        ]
    }

    fn field() -> impl Strategy<Value = (String, serde_json::Value)> {
        use serde_json::json;
        prop_oneof![
            (0u64..5).prop_map(|i| ("contentBlockIndex".to_owned(), json!(i))),
            Just(("contentBlockIndex".to_owned(), serde_json::Value::Null)),
            text().prop_map(|t| ("delta".to_owned(), json!({"text": t}))),
            text().prop_map(|t| ("delta".to_owned(), json!({"toolUse": {"input": t}}))),
            text().prop_map(|t| ("delta".to_owned(), json!({"reasoningContent": {"text": t}}))),
            Just(("delta".to_owned(), json!({"text": null}))),
            Just((
                "delta".to_owned(),
                json!({"text": "a", "toolUse": {"input": "b"}})
            )),
            "[a-p]{0,16}".prop_map(|p| ("p".to_owned(), json!(p))),
            Just(("other".to_owned(), json!(1))),
        ]
    }

    /// Fields written as an object in the given order, duplicates kept.
    fn object(fields: &[(String, serde_json::Value)]) -> String {
        let inner: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{}:{v}", serde_json::Value::String(k.clone())))
            .collect();
        format!("{{{}}}", inner.join(","))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(0xb3d), ..ProptestConfig::default() })]

        #[test]
        fn the_fast_reading_agrees_with_the_full_one(
            fields in proptest::collection::vec(field(), 0..5),
        ) {
            let payload = object(&fields);
            if let Some(fast) = fast_delta("contentBlockDelta", payload.as_bytes()) {
                prop_assert_eq!(Some(fast), full(payload.as_bytes()), "{}", payload);
            }
        }

        #[test]
        fn the_common_events_take_the_fast_path(index in 0u64..100, t in "[a-zA-Z0-9 .,]{0,40}", tool in any::<bool>()) {
            let delta = if tool {
                serde_json::json!({"toolUse": {"input": t}})
            } else {
                serde_json::json!({"text": t})
            };
            let payload = serde_json::json!({"contentBlockIndex": index, "delta": delta, "p": "abcdef"}).to_string();
            prop_assert!(fast_delta("contentBlockDelta", payload.as_bytes()).is_some(), "{}", payload);
            prop_assert!(fast_delta("messageStop", payload.as_bytes()).is_none());
        }
    }
}
