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

use super::chunk::{fast_chunk, Call, Chunk, ChunkPart, Counts};
use super::SIGNATURE;
use crate::classify::classify_error_body;
use crate::failure::{FailureKind, ProviderFailure, ProviderKind};
use crate::response::{AssistantResponse, StopReason, Usage};
use crate::wire::assemble::{Assembly, Part};
use crate::wire::borrow::{or_empty, parse_json, text, trim, Str};
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
    finish_reason: Option<String>,
}

impl StreamState {
    pub(crate) fn new(max_message_bytes: usize) -> Self {
        StreamState {
            asm: Assembly::new(max_message_bytes),
            next: 0,
            open: None,
            calls: 0,
            finish_reason: None,
        }
    }

    /// Handles one event; `Ok(true)` when its candidate named a finish reason.
    ///
    /// The chunk is read by the scanner when it has the API's shape, else parsed into a
    /// `Value` (see [`super::chunk`]): data that are not JSON, or JSON that is not an object,
    /// are a malformed stream.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEventRef<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        let data = trim(event.data);
        if data.is_empty() {
            return Ok(false);
        }
        let fail = || classify_error_body(ProviderKind::Gemini, None, text(event.data).as_bytes());
        let value: Value;
        let mut lossy = String::new();
        let chunk = match fast_chunk(data, self.asm.id.is_none()) {
            Some(chunk) => chunk,
            None => {
                value = parse_json(data, &mut lossy, str::trim)
                    .map_err(|e| malformed(&format!("chunk is not JSON: {e}")))?;
                match Chunk::from_value(&value) {
                    Ok(chunk) => chunk,
                    Err(_) if event.event == Some("error") => return Err(fail()),
                    Err(kind) => {
                        return Err(malformed(&format!("chunk is {kind}, not a response")))
                    }
                }
            }
        };
        if event.event == Some("error") || chunk.error {
            return Err(fail());
        }
        self.on_chunk(&chunk, deltas)
    }

    /// Handles one `GenerateContentResponse`.
    fn on_chunk(
        &mut self,
        chunk: &Chunk<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        if self.asm.id.is_none() {
            let id = chunk.response_id.as_ref().map(Str::as_str);
            let model = chunk.model_version.as_ref().map(Str::as_str);
            self.asm.identity(id, model);
        }
        if let Some(usage) = &chunk.usage {
            read_usage(usage, &mut self.asm.usage);
        }
        let Some(candidate) = &chunk.candidate else {
            if let Some(reason) = &chunk.block_reason {
                return Err(blocked(
                    &reason_name(reason.as_str()),
                    "the prompt was blocked",
                ));
            }
            return Ok(false);
        };
        for part in candidate.parts.iter() {
            self.on_part(part, deltas)?;
        }
        if let Some(reason) = candidate
            .finish_reason
            .as_ref()
            .map(Str::as_str)
            .filter(|r| !r.is_empty() && *r != "FINISH_REASON_UNSPECIFIED")
        {
            self.finish_reason = Some(reason_name(reason));
            return Ok(true);
        }
        Ok(false)
    }

    fn on_part(
        &mut self,
        part: &ChunkPart<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<(), ProviderFailure> {
        let signature = Some(or_empty(&part.signature)).filter(|s| !s.is_empty());
        if let Some(text) = &part.text {
            let text = text.as_str();
            let kind = if part.thought {
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
        if let Some(call) = &part.call {
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

    /// Starts a function call's block: its arguments are kept as the JSON text they came
    /// as, parsed once when the answer is assembled (no `args` are `{}`; arguments that are
    /// not an object are an input problem with that text).
    fn call(&mut self, call: &Call<'_>, deltas: &mut Deltas<'_>) -> Result<(), ProviderFailure> {
        let n = self.calls;
        self.calls += 1;
        let id = match Some(or_empty(&call.id)).filter(|i| !i.is_empty()) {
            Some(id) => id.to_owned(),
            None => match &self.asm.id {
                Some(r) => format!("gc_{r}_{n}"),
                None => format!("gc_{n}"),
            },
        };
        let key = self.key();
        let part = Part::ToolUse {
            id,
            name: or_empty(&call.name).to_owned(),
            json: call
                .args
                .as_ref()
                .map_or_else(String::new, |args| args.0.as_ref().to_owned()),
            initial: None,
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
fn read_usage(counts: &Counts, usage: &mut Usage) {
    if let Some(n) = counts.prompt {
        usage.input_tokens = n;
    }
    if counts.candidates.is_some() || counts.thoughts.is_some() {
        usage.output_tokens = counts
            .candidates
            .unwrap_or(0)
            .saturating_add(counts.thoughts.unwrap_or(0));
    }
    if let Some(n) = counts.cached {
        usage.cache_read_input_tokens = Some(n);
    }
}

/// A non-streaming `generateContent` body: one whole response.
pub(crate) fn parse_response(v: &Value, body: &[u8]) -> Result<AssistantResponse, ProviderFailure> {
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(classify_error_body(ProviderKind::Gemini, None, body));
    }
    let chunk = Chunk::from_value(v)
        .map_err(|kind| malformed(&format!("chunk is {kind}, not a response")))?;
    let mut state = StreamState::new(usize::MAX);
    let mut ignore = |_: StreamDelta<&str>| {};
    let complete = state.on_chunk(&chunk, &mut ignore)?;
    state.finish(complete)
}
