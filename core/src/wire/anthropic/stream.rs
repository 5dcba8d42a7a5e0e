//! Anthropic stream assembly (`message_start` … `message_stop`) and non-streaming bodies.

use crate::classify::classify_error_body;
use crate::failure::{ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason};
use crate::wire::assemble::{read_identity, Assembly, Part};
use crate::wire::borrow::{as_is, or_empty, parse_json, text, Str};
use crate::wire::render::read_anthropic_usage;
use crate::wire::scan::{string_after_quote, Scan};
use crate::wire::sse::SseEventRef;
use crate::wire::{malformed, stream_cut, Deltas, StreamDelta};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeSet;

/// Assembly state for one Anthropic stream.
#[derive(Debug)]
pub(crate) struct StreamState {
    asm: Assembly,
    stop_reason: Option<StopReason>,
    /// Blocks of kinds rebound does not model (server tools…): skipped.
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
        event: &SseEventRef<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        let fail =
            || classify_error_body(ProviderKind::Anthropic, None, text(event.data).as_bytes());
        if event.event == Some("error") {
            return Err(fail());
        }
        if let Some(delta) = delta_event(event.data) {
            return self.on_delta(delta, deltas).map(|()| false);
        }
        let mut lossy = String::new();
        let v: Event<'_> = parse_json(event.data, &mut lossy, as_is)
            .map_err(|e| malformed(&format!("event data is not a valid event: {e}")))?;
        let ty =
            v.ty.as_ref()
                .map(Str::as_str)
                .or(event.event)
                .unwrap_or_default();
        match ty {
            "error" => return Err(fail()),
            "message_start" => {
                if let Some(message) = v.message.as_ref() {
                    read_identity(message, &mut self.asm);
                    if let Some(usage) = message.get("usage") {
                        read_anthropic_usage(usage, &mut self.asm.usage);
                    }
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
                    Some("redacted_thinking") if !text("data").is_empty() => {
                        Part::RedactedThinking(text("data"))
                    }
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

    /// Handles a `content_block_delta` read by [`delta_event`], exactly as the same event read
    /// by serde_json.
    fn on_delta(
        &mut self,
        delta: DeltaEvent<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        let DeltaEvent { index, kind, text } = delta;
        if self.skipped.contains(&index) {
            return Ok(());
        }
        match kind {
            DeltaKind::Text => self.asm.push_text(index, &text, deltas),
            DeltaKind::InputJson => self.asm.push_json(index, &text, deltas),
            DeltaKind::Thinking => self.asm.push_thinking(index, &text, deltas),
        }
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
#[derive(Debug, PartialEq, Deserialize)]
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
#[derive(Debug, PartialEq, Deserialize)]
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

/// The kinds of `content_block_delta` [`delta_event`] reads: the delta's kind, and the start
/// of its data from that kind's type to the opening quote of the string it carries.
const DELTA_SHAPES: [(DeltaKind, &[u8]); 3] = [
    (DeltaKind::Text, br#"text_delta","text":""#),
    (
        DeltaKind::InputJson,
        br#"input_json_delta","partial_json":""#,
    ),
    (DeltaKind::Thinking, br#"thinking_delta","thinking":""#),
];

/// The kind of a `content_block_delta` read by [`delta_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeltaKind {
    /// `text_delta`, carrying `text`.
    Text,
    /// `input_json_delta`, carrying `partial_json`.
    InputJson,
    /// `thinking_delta`, carrying `thinking`.
    Thinking,
}

/// A `content_block_delta` read by [`delta_event`]: its block, kind and string.
#[derive(Debug, PartialEq)]
struct DeltaEvent<'a> {
    index: u64,
    kind: DeltaKind,
    text: Cow<'a, str>,
}

impl<'a> DeltaEvent<'a> {
    /// The event as serde_json reads it, to hold [`delta_event`] to serde_json's reading.
    #[cfg(test)]
    fn into_event(self) -> Event<'a> {
        let (ty, value) = (
            Some(Str(Cow::Borrowed(self.kind.name()))),
            Some(Str(self.text)),
        );
        let mut delta = Delta {
            ty,
            text: None,
            partial_json: None,
            thinking: None,
            signature: None,
            stop_reason: None,
        };
        match self.kind {
            DeltaKind::Text => delta.text = value,
            DeltaKind::InputJson => delta.partial_json = value,
            DeltaKind::Thinking => delta.thinking = value,
        }
        Event {
            ty: Some(Str(Cow::Borrowed("content_block_delta"))),
            index: Some(self.index),
            delta: Some(delta),
            content_block: None,
            message: None,
            usage: None,
        }
    }
}

impl DeltaKind {
    /// The delta's `type`.
    #[cfg(test)]
    fn name(self) -> &'static str {
        match self {
            DeltaKind::Text => "text_delta",
            DeltaKind::InputJson => "input_json_delta",
            DeltaKind::Thinking => "thinking_delta",
        }
    }
}

/// A `content_block_delta` read without serde_json, when its data have exactly the API's own
/// shape: `{"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}`
/// (or `input_json_delta` with `partial_json`, `thinking_delta` with `thinking`).
///
/// Nearly every event of a stream is one of these, and serde_json's generic reading of them
/// was most of the decoding time (issue 21). Anything else — other fields or another order,
/// whitespace, a `\u` escape, a control character, invalid UTF-8, an index with a leading
/// zero — gives `None`, and the event goes to serde_json; so whenever this reads an event, it
/// reads what serde_json would (a test holds it to that).
fn delta_event(data: &[u8]) -> Option<DeltaEvent<'_>> {
    let mut scan = Scan::new(data);
    scan.literal(br#"{"type":"content_block_delta","index":"#)?;
    let index = scan.uint()?;
    scan.literal(br#","delta":{"type":""#)?;
    let kind = DELTA_SHAPES
        .iter()
        .find_map(|&(kind, shape)| scan.literal(shape).map(|()| kind))?;
    let (text, rest) = string_after_quote(scan.rest())?;
    (rest == b"}}").then_some(DeltaEvent { index, kind, text })
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
    let mut ignored = |_: StreamDelta<&str>| {};
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
            Some("redacted_thinking") if !text("data").is_empty() => {
                Part::RedactedThinking(text("data"))
            }
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
    read_identity(v, &mut asm);
    let stop = match v.get("stop_reason").and_then(Value::as_str) {
        Some(r) => StopReason::from(r.to_owned()),
        None if asm.has_tool_calls() => StopReason::ToolUse,
        None => StopReason::EndTurn,
    };
    asm.finish(stop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serde_event(data: &[u8]) -> Option<Event<'_>> {
        serde_json::from_slice(data).ok()
    }

    #[test]
    fn delta_events_of_the_api_shape_read_like_serde_json() {
        let cases: [&[u8]; 8] = [
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
            br#"{"type":"content_block_delta","index":12,"delta":{"type":"input_json_delta","partial_json":"{\"a\": \"b\\n\/"}}"#,
            br#"{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"d\u00e9j\u00e0"}}"#,
            br#"{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}"#,
            br#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}} "#,
            br#"{"type":"content_block_delta","index":99999999999999999999,"delta":{"type":"text_delta","text":"x"}}"#,
            br#"{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"x"}}"#,
            "{\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"中文 😀\"}}".as_bytes(),
        ];
        let mut read = 0;
        for data in cases {
            if let Some(fast) = delta_event(data) {
                assert_eq!(
                    Some(fast.into_event()),
                    serde_event(data),
                    "{}",
                    String::from_utf8_lossy(data)
                );
                read += 1;
            }
        }
        // `\u` escapes, a leading zero, trailing space, an overflowing index and another
        // delta type are left to serde_json.
        assert_eq!(read, 3);
    }

    proptest! {
        #[test]
        fn delta_event_never_disagrees_with_serde_json(
            index in prop_oneof![Just("0".to_owned()), "[0-9]{1,21}"],
            kind in 0usize..3,
            text in "(?s).{0,40}",
            raw in proptest::collection::vec(any::<u8>(), 0..40),
            quoted in any::<bool>(),
            tail in prop_oneof![Just(b"}}".to_vec()), proptest::collection::vec(any::<u8>(), 0..4)],
        ) {
            let (name, field) = [("text_delta", "text"), ("input_json_delta", "partial_json"),
                ("thinking_delta", "thinking")][kind];
            let mut data = format!(
                r#"{{"type":"content_block_delta","index":{index},"delta":{{"type":"{name}","{field}":"#
            ).into_bytes();
            if quoted {
                data.extend_from_slice(serde_json::to_string(&text).unwrap().as_bytes());
            } else {
                data.push(b'"');
                data.extend_from_slice(&raw);
                data.push(b'"');
            }
            data.extend_from_slice(&tail);
            if let Some(fast) = delta_event(&data) {
                prop_assert_eq!(Some(fast.into_event()), serde_event(&data));
            } else if quoted && tail == b"}}" && index.len() < 20 && !index.starts_with('0')
                && !serde_json::to_string(&text).unwrap().contains("\\u")
            {
                prop_assert!(false, "the API's own shape was not read: {:?}", String::from_utf8_lossy(&data));
            }
        }
    }
}
