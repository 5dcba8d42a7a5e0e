//! Gemini stream assembly (`streamGenerateContent?alt=sse`: each `data:` a whole
//! `GenerateContentResponse`) and non-streaming bodies.
//!
//! The stream has no terminal event: it is complete with the chunk whose candidate names a
//! `finishReason` (which carries the final `usageMetadata` too). A body that ends before one
//! is a cut stream. Finish reasons:
//!
//! - `STOP` → end of turn (tool use when the answer made calls), `MAX_TOKENS` → max tokens;
//! - `SAFETY`, `RECITATION`, `PROHIBITED_CONTENT`, `BLOCKLIST`, `SPII`, `IMAGE_SAFETY`,
//!   `IMAGE_PROHIBITED_CONTENT`, `IMAGE_RECITATION`, `MODEL_ARMOR` → the answer so far,
//!   stopped by [`StopReason::ContentFilter`]; with nothing before it,
//!   [`FailureKind::ContentBlocked`] (not retried), as is a prompt refused outright
//!   (`promptFeedback.blockReason`, no candidates);
//! - `MALFORMED_FUNCTION_CALL`, `UNEXPECTED_TOOL_CALL`, `TOO_MANY_TOOL_CALLS`,
//!   `MALFORMED_RESPONSE` → [`FailureKind::StreamMalformed`] with the reason as its type: the
//!   model's output could not be used, and the same request usually succeeds (retried within
//!   the retry policy's attempts);
//! - `MISSING_THOUGHT_SIGNATURE` → a bad request (the request lacked what Gemini needs);
//! - any other (`LANGUAGE`, `OTHER`, …) → the answer with that stop reason, verbatim.
//!
//! A chunk holding an `error` object (a failure after the stream began) is classified like
//! the HTTP error it names.

use super::SIGNATURE;
use crate::classify::classify_error_body;
use crate::failure::{FailureKind, ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::assemble::{json_kind, read_identity, Assembly, Part};
use crate::wire::borrow::{parse_json, text, trim};
use crate::wire::render::count;
use crate::wire::sse::SseEventRef;
use crate::wire::{malformed, stream_cut, Deltas, StreamDelta};
use serde_json::Value;

/// What kind of streamed text a block holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Thought,
}

/// Assembly state for one Gemini stream.
#[derive(Debug)]
pub(crate) struct StreamState {
    asm: Assembly,
    /// The key of the next block.
    next: u64,
    /// The text block still being streamed into, and its key.
    open: Option<(Open, u64)>,
    /// Function calls seen so far (for minted ids).
    calls: u64,
    /// The response's `responseId`, for minted call ids.
    response_id: Option<String>,
    finish_reason: Option<String>,
}

impl StreamState {
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        StreamState {
            asm: Assembly::new(max_message_bytes),
            next: 0,
            open: None,
            calls: 0,
            response_id: None,
            finish_reason: None,
        }
    }

    /// Handles one event; `Ok(true)` when its candidate named a finish reason.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEventRef<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        let data = trim(event.data);
        if data.is_empty() {
            return Ok(false);
        }
        let mut lossy = String::new();
        let chunk: Value = parse_json(data, &mut lossy, str::trim)
            .map_err(|e| malformed(&format!("chunk is not JSON: {e}")))?;
        if event.event == Some("error") || chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(classify_error_body(
                ProviderKind::Gemini,
                None,
                text(event.data).as_bytes(),
            ));
        }
        self.on_chunk(&chunk, deltas)
    }

    /// Handles one `GenerateContentResponse`.
    pub(crate) fn on_chunk(
        &mut self,
        chunk: &Value,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        if !chunk.is_object() {
            return Err(malformed(&format!(
                "chunk is {}, not a response",
                json_kind(chunk)
            )));
        }
        if self.asm.id.is_none() {
            let identity = serde_json::json!({
                "id": chunk.get("responseId"),
                "model": chunk.get("modelVersion"),
            });
            read_identity(&identity, &mut self.asm);
            self.response_id.clone_from(&self.asm.id);
        }
        if let Some(usage) = chunk.get("usageMetadata").filter(|u| u.is_object()) {
            read_usage(usage, &mut self.asm.usage);
        }
        let candidate = chunk
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
            });
        let Some(candidate) = candidate else {
            if let Some(reason) = chunk
                .get("promptFeedback")
                .and_then(|f| f.get("blockReason"))
                .and_then(Value::as_str)
            {
                return Err(blocked(&reason_name(reason), "the prompt was blocked"));
            }
            return Ok(false);
        };
        let parts = candidate
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            self.on_part(part, deltas)?;
        }
        if let Some(reason) = candidate
            .get("finishReason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty() && *r != "FINISH_REASON_UNSPECIFIED")
        {
            self.finish_reason = Some(reason_name(reason));
            return Ok(true);
        }
        Ok(false)
    }

    fn on_part(&mut self, part: &Value, deltas: &mut Deltas<'_>) -> Result<(), ProviderFailure> {
        let signature = part
            .get(SIGNATURE)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            let kind = if part.get("thought").and_then(Value::as_bool) == Some(true) {
                Open::Thought
            } else {
                Open::Text
            };
            let continuing = matches!(self.open, Some((k, _)) if k == kind);
            if let Some(signature) = signature {
                if continuing {
                    // The signature ends the text streamed so far; what follows is new.
                    self.push_text(kind, text, deltas)?;
                    self.open = None;
                    return self.signature(signature, deltas);
                }
                self.open = None;
                self.signature(signature, deltas)?;
            }
            return self.push_text(kind, text, deltas);
        }
        if let Some(call) = part.get("functionCall") {
            self.open = None;
            if let Some(signature) = signature {
                self.signature(signature, deltas)?;
            }
            return self.call(call, deltas);
        }
        // A signature on a part of a kind rebound does not keep (code execution, …) is
        // kept on its own.
        if let Some(signature) = signature {
            self.open = None;
            self.signature(signature, deltas)?;
        }
        Ok(())
    }

    fn key(&mut self) -> u64 {
        let key = self.next;
        self.next += 1;
        key
    }

    fn push_text(
        &mut self,
        kind: Open,
        text: &str,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        let key = match self.open {
            Some((k, key)) if k == kind => key,
            _ => {
                if text.is_empty() {
                    return Ok(());
                }
                let key = self.key();
                let part = match kind {
                    Open::Text => Part::Text(String::new()),
                    Open::Thought => Part::Thinking {
                        thinking: String::new(),
                        signature: String::new(),
                    },
                };
                self.asm.start(key, part, deltas)?;
                self.open = Some((kind, key));
                key
            }
        };
        match kind {
            Open::Text => self.asm.push_text(key, text, deltas),
            Open::Thought => self.asm.push_thinking(key, text, deltas),
        }
    }

    fn signature(
        &mut self,
        signature: &str,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        let key = self.key();
        let item = serde_json::json!({ SIGNATURE: signature });
        self.asm.start(key, Part::Reasoning(item), deltas)
    }

    fn call(&mut self, call: &Value, deltas: &mut Deltas<'_>) -> Result<(), ProviderFailure> {
        let n = self.calls;
        self.calls += 1;
        let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
        let id = match call
            .get("id")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty())
        {
            Some(id) => id.to_owned(),
            None => match &self.response_id {
                Some(r) => format!("gc_{r}_{n}"),
                None => format!("gc_{n}"),
            },
        };
        let args = call.get("args").cloned();
        let (json, initial) = match args {
            Some(v @ Value::Object(_)) => (String::new(), Some(v)),
            None | Some(Value::Null) => (String::new(), None),
            // Not an object: read as the text it is, so the problem is named as for the
            // other formats.
            Some(other) => (other.to_string(), None),
        };
        let key = self.key();
        let part = Part::ToolUse {
            id,
            name: name.to_owned(),
            json,
            initial,
            closed: true,
        };
        self.asm.start(key, part, deltas)
    }

    pub(crate) fn finish(self, complete: bool) -> Result<AssistantResponse, ProviderFailure> {
        let Some(reason) = self.finish_reason.filter(|_| complete) else {
            return Err(stream_cut("no candidate named a finish reason"));
        };
        let has_calls = self.asm.has_tool_calls();
        let stop = match reason.as_str() {
            "STOP" if has_calls => StopReason::ToolUse,
            "STOP" => StopReason::EndTurn,
            "MAX_TOKENS" => StopReason::MaxTokens,
            r if is_blocked(r) => StopReason::ContentFilter,
            r if is_unusable(r) => {
                return Err(ProviderFailure::new(
                    FailureKind::StreamMalformed,
                    format!("the model's output could not be used ({r})"),
                )
                .with_error_type(r))
            }
            "MISSING_THOUGHT_SIGNATURE" => {
                return Err(ProviderFailure::new(
                    FailureKind::BadRequest,
                    "a function call in the request lacks its thought signature",
                )
                .with_error_type("MISSING_THOUGHT_SIGNATURE"))
            }
            other => StopReason::Other(other.to_owned()),
        };
        match self.asm.finish(stop) {
            Err(f) if f.kind == FailureKind::ContentBlocked => Err(blocked(
                &reason,
                "the answer was withheld by the provider's filters",
            )),
            other => other,
        }
    }
}

/// A reason as the API names them (`SAFETY`, `MALFORMED_FUNCTION_CALL`): kept when it is
/// such a name, at most 64 characters; anything else from the wire is `OTHER`, so a reason
/// never carries a payload into a message, a type or a stop reason.
fn reason_name(reason: &str) -> String {
    let name = !reason.is_empty()
        && reason.len() <= 64
        && reason
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if name {
        reason.to_owned()
    } else {
        "OTHER".to_owned()
    }
}

/// Finish reasons of a filter: the answer (or what is left of it) was withheld.
fn is_blocked(reason: &str) -> bool {
    matches!(
        reason,
        "SAFETY"
            | "RECITATION"
            | "PROHIBITED_CONTENT"
            | "BLOCKLIST"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION"
            | "MODEL_ARMOR"
    )
}

/// Finish reasons of output the model could not make usable: the same request may succeed.
fn is_unusable(reason: &str) -> bool {
    matches!(
        reason,
        "MALFORMED_FUNCTION_CALL"
            | "UNEXPECTED_TOOL_CALL"
            | "TOO_MANY_TOOL_CALLS"
            | "MALFORMED_RESPONSE"
    )
}

fn blocked(reason: &str, what: &str) -> ProviderFailure {
    ProviderFailure::new(FailureKind::ContentBlocked, format!("{what} ({reason})"))
        .with_error_type(reason)
}

/// `promptTokenCount` → input (cached tokens included, as OpenAI counts them),
/// `candidatesTokenCount` + `thoughtsTokenCount` → output (thoughts are billed as output),
/// `cachedContentTokenCount` → cache read.
fn read_usage(v: &Value, usage: &mut Usage) {
    if let Some(n) = count(v, "promptTokenCount") {
        usage.input_tokens = n;
    }
    let output = count(v, "candidatesTokenCount");
    let thoughts = count(v, "thoughtsTokenCount");
    if output.is_some() || thoughts.is_some() {
        usage.output_tokens = output.unwrap_or(0).saturating_add(thoughts.unwrap_or(0));
    }
    if let Some(n) = count(v, "cachedContentTokenCount") {
        usage.cache_read_input_tokens = Some(n);
    }
}

/// A non-streaming `generateContent` body: one whole response.
pub(crate) fn parse_response(v: &Value, body: &[u8]) -> Result<AssistantResponse, ProviderFailure> {
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(classify_error_body(ProviderKind::Gemini, None, body));
    }
    let mut state = StreamState::new(usize::MAX);
    let mut ignore = |_: StreamDelta<&str>| {};
    let complete = state.on_chunk(v, &mut ignore)?;
    state.finish(complete)
}
