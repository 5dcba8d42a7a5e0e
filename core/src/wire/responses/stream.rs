//! Responses stream assembly (typed events from `response.created` to `response.completed`)
//! and non-streaming bodies.
//!
//! Content arrives twice: as deltas (`response.output_text.delta`,
//! `response.function_call_arguments.delta`, reasoning text deltas), shown to the UI as they
//! come, and whole, in `response.output_item.done` and again in the terminal event's
//! `response.output`. The whole form wins: each item settles the blocks its deltas built (a
//! reasoning item replaces the thinking text streamed for it and is kept verbatim). Streams
//! that send only deltas, or only whole items, assemble as well.

use crate::classify::classify_error_body;
use crate::failure::{ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::assemble::{read_identity, Assembly, Part};
use crate::wire::borrow::{or_empty, parse_json, text, trim, Str};
use crate::wire::render::count;
use crate::wire::scan::{first_time, Scan};
use crate::wire::sse::SseEventRef;
use crate::wire::{malformed, stream_cut, Deltas, StreamDelta};
use serde::Deserialize;
use serde_json::Value;

/// Block keys per output item: content part `c` of output item `o` is block
/// `o * SLOTS + min(c, SLOTS - 1)`.
pub(crate) const SLOTS: u64 = 64;

/// The block key of content part `content` of output item `output`.
pub(crate) fn key(output: u64, content: u64) -> u64 {
    output
        .saturating_mul(SLOTS)
        .saturating_add(content.min(SLOTS - 1))
}

/// Assembly state for one Responses stream.
#[derive(Debug)]
pub(crate) struct StreamState {
    asm: Assembly,
    /// `Some` once `response.completed` or `response.incomplete` arrived.
    stop: Option<StopReason>,
    refusal: bool,
}

/// The event types whose shape rebound reads; a malformed one of these fails the stream,
/// a malformed event of another type is skipped.
const READ: &[&str] = &[
    "response.output_text.delta",
    "response.refusal.delta",
    "response.function_call_arguments.delta",
    "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
    "response.output_item.added",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
];

impl StreamState {
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        StreamState {
            asm: Assembly::new(max_message_bytes),
            stop: None,
            refusal: false,
        }
    }

    /// Handles one event; `Ok(true)` when it was the terminal `response.completed` or
    /// `response.incomplete`.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEventRef<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        let data = trim(event.data);
        let fail = || {
            classify_error_body(
                ProviderKind::OpenAiResponses,
                None,
                text(event.data).as_bytes(),
            )
        };
        if matches!(event.event, Some("error" | "response.failed")) {
            return Err(fail());
        }
        // Some servers end with Chat's sentinel; only `response.completed` completes.
        if data == b"[DONE]" {
            return Ok(false);
        }
        let mut lossy = String::new();
        let v: Event<'_> =
            match fast_event(data).map_or_else(|| parse_json(data, &mut lossy, str::trim), Ok) {
                Ok(v) => v,
                Err(e) => {
                    // An event of a type rebound does not read may have any shape.
                    let mut lossy = String::new();
                    let ty = parse_json::<TypeOnly<'_>>(data, &mut lossy, str::trim)
                        .ok()
                        .and_then(|t| t.ty.map(|s| s.0.into_owned()));
                    return match ty {
                        Some(ty) if !READ.contains(&ty.as_str()) && ty != "error" => Ok(false),
                        _ => Err(malformed(&format!("event data is not a valid event: {e}"))),
                    };
                }
            };
        let ty =
            v.ty.as_ref()
                .map(Str::as_str)
                .or(event.event)
                .unwrap_or_default();
        let output = v.output_index.unwrap_or(0);
        match ty {
            "error" | "response.failed" => return Err(fail()),
            "response.output_text.delta" | "response.refusal.delta" => {
                let k = key(output, v.content_index.unwrap_or(0));
                if !self.asm.has(k) {
                    self.asm.start(k, Part::Text(String::new()), deltas)?;
                }
                self.asm.push_text(k, or_empty(&v.delta), deltas)?;
                self.refusal |= ty == "response.refusal.delta";
            }
            "response.function_call_arguments.delta" => {
                let k = key(output, 0);
                if !self.asm.has(k) {
                    self.asm
                        .start(k, tool_part("", "", String::new(), false), deltas)?;
                }
                self.asm.push_json(k, or_empty(&v.delta), deltas)?;
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let k = key(output, 0);
                if !self.asm.has(k) {
                    let part = Part::Thinking {
                        thinking: String::new(),
                        signature: String::new(),
                    };
                    self.asm.start(k, part, deltas)?;
                }
                self.asm.push_thinking(k, or_empty(&v.delta), deltas)?;
            }
            "response.output_item.added" => {
                let item = v.item.as_ref().unwrap_or(&Value::Null);
                if str_field(item, "type") == "function_call" {
                    let (id, name) = (str_field(item, "call_id"), str_field(item, "name"));
                    let k = key(output, 0);
                    if self.asm.has(k) {
                        self.asm.tool_identity(k, id, name);
                    } else {
                        let part = tool_part(id, name, String::new(), false);
                        self.asm.start(k, part, deltas)?;
                    }
                }
            }
            "response.output_item.done" => {
                let item = v.item.as_ref().unwrap_or(&Value::Null);
                self.refusal |= settle(&mut self.asm, output, item, deltas)?;
            }
            "response.completed" | "response.incomplete" => {
                let response = v.response.as_ref().unwrap_or(&Value::Null);
                self.refusal |= read_response(&mut self.asm, response, deltas)?;
                self.stop = Some(stop_reason(
                    response,
                    self.refusal,
                    self.asm.has_tool_calls(),
                ));
                return Ok(true);
            }
            _ => {}
        }
        Ok(false)
    }

    pub(crate) fn finish(self, complete: bool) -> Result<AssistantResponse, ProviderFailure> {
        match self.stop {
            Some(stop) if complete => self.asm.finish(stop),
            _ => Err(stream_cut("no response.completed")),
        }
    }
}

fn tool_part(id: &str, name: &str, json: String, closed: bool) -> Part {
    Part::ToolUse {
        id: id.to_owned(),
        name: name.to_owned(),
        json,
        initial: None,
        closed,
    }
}

fn str_field<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Puts output item `output` in its final form; `Ok(true)` when it holds a refusal.
/// Items of other types (built-in tool calls and the like) are not rebound's and are
/// skipped.
fn settle(
    asm: &mut Assembly,
    output: u64,
    item: &Value,
    deltas: &mut Deltas<'_>,
) -> Result<bool, ProviderFailure> {
    let mut refusal = false;
    match str_field(item, "type") {
        "message" => {
            let parts = item.get("content").and_then(Value::as_array);
            for (c, part) in (0u64..).zip(parts.into_iter().flatten()) {
                let text = match str_field(part, "type") {
                    "output_text" => str_field(part, "text"),
                    "refusal" => {
                        refusal = true;
                        str_field(part, "refusal")
                    }
                    _ => continue,
                };
                asm.settle(key(output, c), Part::Text(text.to_owned()), deltas)?;
            }
        }
        "function_call" => {
            let part = tool_part(
                str_field(item, "call_id"),
                str_field(item, "name"),
                str_field(item, "arguments").to_owned(),
                true,
            );
            asm.settle(key(output, 0), part, deltas)?;
        }
        "reasoning" => {
            asm.settle(key(output, 0), Part::Reasoning(item.clone()), deltas)?;
        }
        _ => {}
    }
    Ok(refusal)
}

/// Reads a response object's output items (when it lists any) and usage; `Ok(true)` when an
/// item holds a refusal.
fn read_response(
    asm: &mut Assembly,
    response: &Value,
    deltas: &mut Deltas<'_>,
) -> Result<bool, ProviderFailure> {
    let mut refusal = false;
    if let Some(items) = response.get("output").and_then(Value::as_array) {
        for (o, item) in (0u64..).zip(items) {
            refusal |= settle(asm, o, item, deltas)?;
        }
    }
    if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
        read_usage(usage, &mut asm.usage);
    }
    read_identity(response, asm);
    Ok(refusal)
}

/// `completed` (or no status): tool use when there are calls, else end of turn (a refusal
/// when the answer was one); `incomplete`: why, from `incomplete_details.reason`.
fn stop_reason(response: &Value, refusal: bool, has_calls: bool) -> StopReason {
    if str_field(response, "status") == "incomplete" {
        let reason = response
            .get("incomplete_details")
            .map_or("", |d| str_field(d, "reason"));
        return match reason {
            // `max_tokens` is the wording of the API reference's example.
            "max_output_tokens" | "max_tokens" => StopReason::MaxTokens,
            "content_filter" => StopReason::ContentFilter,
            "" => StopReason::Other("incomplete".to_owned()),
            other => StopReason::Other(other.to_owned()),
        };
    }
    if has_calls {
        StopReason::ToolUse
    } else if refusal {
        StopReason::Refusal
    } else {
        StopReason::EndTurn
    }
}

/// `input_tokens` → input (cached included), `output_tokens` → output, cached input tokens
/// → cache read.
fn read_usage(v: &Value, usage: &mut Usage) {
    if let Some(n) = count(v, "input_tokens") {
        usage.input_tokens = n;
    }
    if let Some(n) = count(v, "output_tokens") {
        usage.output_tokens = n;
    }
    if let Some(n) = v
        .get("input_tokens_details")
        .and_then(|d| count(d, "cached_tokens"))
    {
        usage.cache_read_input_tokens = Some(n);
    }
}

/// A non-streaming response body: a response object (or an error body).
pub(crate) fn parse_response(v: &Value, body: &[u8]) -> Result<AssistantResponse, ProviderFailure> {
    let failed = str_field(v, "status") == "failed";
    if failed || v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(classify_error_body(
            ProviderKind::OpenAiResponses,
            None,
            body,
        ));
    }
    if !v.get("output").is_some_and(Value::is_array) {
        return Err(malformed("response has no output"));
    }
    let mut asm = Assembly::new(usize::MAX);
    let mut ignored = |_: StreamDelta<&str>| {};
    let refusal = read_response(&mut asm, v, &mut ignored)?;
    let stop = stop_reason(v, refusal, asm.has_tool_calls());
    asm.finish(stop)
}

/// One stream event. Only the fields rebound reads; delta strings are borrowed from the
/// event text. Whole items and responses (rarer, and kept verbatim) are parsed as values.
#[derive(Debug, PartialEq, Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Str<'a>>,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default)]
    content_index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Str<'a>>,
    #[serde(default)]
    item: Option<Value>,
    #[serde(default)]
    response: Option<Value>,
}

/// An event read without serde_json, when it has the API's compact shape and holds no whole
/// item or response: the deltas (`{"type":"response.output_text.delta","sequence_number":9,
/// "item_id":"msg_1","output_index":0,"content_index":0,"delta":"…","logprobs":[]}`, fields
/// in any order) and the small events between them.
///
/// Nearly every event of a Responses stream is a delta, and serde_json's reading of them was
/// most of the decoding time (issue 21). Anything else — whitespace, a `\u` escape, an `item`
/// or `response` object, a nested value in a field rebound does not read, a duplicate field —
/// gives `None`, and the event goes to serde_json; so whenever this reads an event, it reads
/// what serde_json would (a proptest holds it to that).
fn fast_event(data: &[u8]) -> Option<Event<'_>> {
    let mut scan = Scan::new(data);
    let mut event = Event {
        ty: None,
        output_index: None,
        content_index: None,
        delta: None,
        item: None,
        response: None,
    };
    let mut seen = [false; 6];
    scan.object(|scan, key| {
        match key {
            b"type" => {
                first_time(&mut seen[0])?;
                event.ty = scan.string_or_null()?.map(Str);
            }
            b"output_index" => {
                first_time(&mut seen[1])?;
                event.output_index = scan.uint_or_null()?;
            }
            b"content_index" => {
                first_time(&mut seen[2])?;
                event.content_index = scan.uint_or_null()?;
            }
            b"delta" => {
                first_time(&mut seen[3])?;
                event.delta = scan.string_or_null()?.map(Str);
            }
            b"item" => first_time(&mut seen[4]).and_then(|()| scan.null())?,
            b"response" => first_time(&mut seen[5]).and_then(|()| scan.null())?,
            _ => scan.skip()?,
        }
        Some(())
    })?;
    scan.at_end().then_some(event)
}

/// Just the type of an event, to tell an unread event type from a broken event.
#[derive(Deserialize)]
struct TypeOnly<'a> {
    #[serde(rename = "type", default, borrow)]
    ty: Option<Str<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::scan::strategies::{object, plain_extras, text_or_null};
    use proptest::prelude::*;
    use serde_json::json;

    fn serde_event(data: &[u8]) -> Option<Event<'_>> {
        serde_json::from_str(std::str::from_utf8(data).ok()?).ok()
    }

    #[test]
    fn api_events_read_like_serde_json() {
        let capture = include_str!("../../../fixtures/streams/responses/text_stream.sse");
        let mut read = Vec::new();
        for data in capture.lines().filter_map(|l| l.strip_prefix("data: ")) {
            let data = trim(data.as_bytes());
            if let Some(fast) = fast_event(data) {
                assert_eq!(Some(&fast), serde_event(data).as_ref(), "{}", text(data));
                read.extend(fast.ty.map(|t| t.0.into_owned()));
            }
        }
        // The deltas and the small events; not those holding a whole item or response.
        assert!(read.iter().any(|t| t == "response.output_text.delta"));
        assert!(!read.iter().any(|t| t == "response.completed"));
        let api_order = br#"{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hi","logprobs":[],"obfuscation":"aB3"}"#;
        assert_eq!(
            fast_event(api_order).and_then(|e| e.delta),
            Some(Str("Hi".into()))
        );
    }

    fn event() -> impl Strategy<Value = Value> {
        let ty = prop_oneof![
            Just(json!("response.output_text.delta")),
            Just(json!("response.function_call_arguments.delta")),
            Just(json!("response.content_part.added")),
            Just(Value::Null),
        ];
        let index = prop_oneof![(0u64..3).prop_map(Value::from), Just(Value::Null)];
        object(vec![
            ("type", ty.boxed()),
            (
                "sequence_number",
                (0u64..1000).prop_map(Value::from).boxed(),
            ),
            ("item_id", Just(json!("msg_1")).boxed()),
            ("output_index", index.clone().boxed()),
            ("content_index", index.boxed()),
            ("delta", text_or_null().boxed()),
            ("logprobs", Just(json!([])).boxed()),
            (
                "item",
                prop_oneof![Just(Value::Null), Just(json!({"type": "message"}))].boxed(),
            ),
        ])
    }

    proptest! {
        #[test]
        fn fast_event_never_disagrees_with_serde_json(
            event in event(),
            at in any::<prop::sample::Index>(),
            insert in proptest::collection::vec(any::<u8>(), 0..3),
            mutate in any::<bool>(),
        ) {
            let json = event.to_string();
            let mut data = json.clone().into_bytes();
            if mutate {
                let at = at.index(data.len() + 1);
                data.splice(at..at, insert);
            }
            let mut lossy = String::new();
            let serde: Option<Event<'_>> = parse_json(&data, &mut lossy, str::trim).ok();
            match fast_event(&data) {
                Some(fast) => prop_assert_eq!(Some(fast), serde),
                None => {
                    // Declining is allowed; declining the API's own shape is not.
                    let plain = event.get("item").map_or(true, Value::is_null)
                        && !json.contains("\\u")
                        && plain_extras(&event);
                    prop_assert!(mutate || !plain, "declined {}", json);
                }
            }
        }
    }
}
