//! The CLI's two views of a run: a human one and a JSON event stream.

use crate::receiver::{Receiver, ReceiverError};
use anstyle::{AnsiColor, Style};
use rebound_core::wire::StreamDelta;
use rebound_core::{
    FallbackInfo, FinishReason, Message, ProviderRetryInfo, Role, RunError, ToolCall,
    ToolResultBlock,
};
use serde_json::{json, Value};
use std::io::Write;

fn io_error(e: std::io::Error) -> ReceiverError {
    ReceiverError(format!("could not write to the terminal: {e}"))
}

/// Writes one JSON object per line to stdout (`--events json`). The schema is in the README.
#[derive(Debug, Default)]
pub struct JsonEvents;

impl JsonEvents {
    fn emit(&mut self, value: Value) -> Result<(), ReceiverError> {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, &value)
            .map_err(|e| ReceiverError(format!("could not write an event: {e}")))?;
        out.write_all(b"\n").map_err(io_error)?;
        out.flush().map_err(io_error)
    }
}

impl JsonEvents {
    /// Writes the first event of a run: `{"type": "start", "seed": …}`, the jitter seed, so
    /// the run can be reproduced with `--seed` (it is also in the trace header).
    pub fn start(&mut self, seed: u64) -> Result<(), ReceiverError> {
        self.emit(json!({"type": "start", "seed": seed}))
    }
}

/// The JSON form of `error`, as printed for every hard failure.
#[must_use]
pub fn error_event(error: &RunError) -> Value {
    json!({
        "type": "error",
        "kind": error.kind(),
        "status": error.provider_failure().and_then(|f| f.status),
        "message": error.to_string(),
    })
}

impl Receiver for JsonEvents {
    fn delta(&mut self, delta: &StreamDelta) -> Result<(), ReceiverError> {
        match delta {
            StreamDelta::Text { text, .. } => {
                self.emit(json!({"type": "text_delta", "text": text}))
            }
            _ => Ok(()),
        }
    }

    fn stream_reset(&mut self, attempt: u32) -> Result<(), ReceiverError> {
        self.emit(json!({"type": "stream_reset", "attempt": attempt}))
    }

    fn message(&mut self, message: &Message) -> Result<(), ReceiverError> {
        self.emit(json!({"type": "message", "role": message.role, "content": message.content}))
    }

    fn provider_retry(&mut self, info: &ProviderRetryInfo) -> Result<(), ReceiverError> {
        self.emit(json!({
            "type": "provider_retry",
            "attempt": info.attempt,
            "max_attempts": info.max_attempts,
            "delay_ms": info.delay_ms,
            "kind": info.kind,
            "status": info.status,
            "retry_after_ms": info.retry_after_ms,
            "message": info.message,
        }))
    }

    fn fallback(&mut self, info: &FallbackInfo) -> Result<(), ReceiverError> {
        self.emit(json!({
            "type": "fallback",
            "from": info.from_label,
            "to": info.to_label,
            "kind": info.kind,
            "message": info.message,
        }))
    }

    fn compaction(&mut self, before: usize, after: usize) -> Result<(), ReceiverError> {
        self.emit(json!({"type": "compaction", "before_messages": before, "after_messages": after}))
    }

    fn tool_start(&mut self, call: &ToolCall) -> Result<(), ReceiverError> {
        self.emit(
            json!({"type": "tool_start", "id": call.id, "name": call.name, "input": call.input}),
        )
    }

    fn tool_result(&mut self, result: &ToolResultBlock) -> Result<(), ReceiverError> {
        self.emit(json!({
            "type": "tool_result",
            "tool_use_id": result.tool_use_id,
            "is_error": result.is_error,
            "text": result.text(),
        }))
    }

    fn finished(&mut self, reason: &FinishReason, turns: u32) -> Result<(), ReceiverError> {
        self.emit(json!({"type": "done", "stop_reason": reason.to_string(), "turns": turns}))
    }

    fn error(&mut self, error: &RunError) {
        // Best effort: the run is failing already.
        let _ = self.emit(error_event(error));
    }
}

/// Streams text to stdout and status lines (dim) to stderr, for people (`--events human`).
#[derive(Debug, Default)]
pub struct HumanView {
    /// Whether the cursor is mid-line on stdout (streamed text without a newline yet).
    mid_line: bool,
}

const DIM: Style = Style::new().dimmed();
const TOOL: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Cyan)));
const BAD: Style = Style::new()
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Red)))
    .bold();

impl HumanView {
    fn end_line(&mut self) -> Result<(), ReceiverError> {
        if self.mid_line {
            self.mid_line = false;
            let mut out = anstream::stdout();
            out.write_all(b"\n").map_err(io_error)?;
            out.flush().map_err(io_error)?;
        }
        Ok(())
    }

    fn status(&mut self, style: Style, line: &str) -> Result<(), ReceiverError> {
        self.end_line()?;
        let mut err = anstream::stderr();
        writeln!(err, "{style}{line}{style:#}").map_err(io_error)
    }
}

/// One line for a tool input, cut to fit a terminal line.
fn short_json(value: &Value) -> String {
    let s = value.to_string();
    match s.char_indices().nth(100) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
    }
}

/// The one-line hint that goes with a final error: what to do about it.
#[must_use]
pub fn advice(error: &RunError) -> &'static str {
    use rebound_core::FailureKind as K;
    match error {
        RunError::Canceled => "canceled; the session holds every complete message",
        RunError::Host { .. } => "a local failure stopped the run; fix it and resume with --session",
        RunError::EmptyUserMessage => "give the run a prompt with some text",
        RunError::Invariant { .. } => "this is a bug or a corrupt session; please report it with the trace",
        RunError::Provider { failure, .. } => match failure.kind {
            K::AuthFailed => "check the API key (--api-key-env) and its permissions",
            K::QuotaExhausted => "the account's quota or spend limit is used up; raise it or add --fallback",
            K::ModelNotFound => "check --model and --base-url",
            K::BadRequest => "the provider rejected the request; see its message above",
            K::ContextOverflow => "the conversation no longer fits; start a new session",
            _ => "the provider kept failing; try again later, raise --max-attempts, or add --fallback",
        },
    }
}

impl Receiver for HumanView {
    fn delta(&mut self, delta: &StreamDelta) -> Result<(), ReceiverError> {
        if let StreamDelta::Text { text, .. } = delta {
            let mut out = anstream::stdout();
            out.write_all(text.as_bytes()).map_err(io_error)?;
            out.flush().map_err(io_error)?;
            self.mid_line = !text.ends_with('\n');
        }
        Ok(())
    }

    fn stream_reset(&mut self, attempt: u32) -> Result<(), ReceiverError> {
        self.status(
            DIM,
            &format!("(the partial answer of attempt {attempt} was discarded)"),
        )
    }

    fn message(&mut self, message: &Message) -> Result<(), ReceiverError> {
        if message.role == Role::Assistant {
            self.end_line()?;
        }
        Ok(())
    }

    fn provider_retry(&mut self, info: &ProviderRetryInfo) -> Result<(), ReceiverError> {
        self.status(DIM, &info.to_string())
    }

    fn fallback(&mut self, info: &FallbackInfo) -> Result<(), ReceiverError> {
        self.status(DIM, &info.to_string())
    }

    fn compaction(&mut self, before: usize, after: usize) -> Result<(), ReceiverError> {
        self.status(
            DIM,
            &format!("compacted the conversation: {before} → {after} messages"),
        )
    }

    fn tool_start(&mut self, call: &ToolCall) -> Result<(), ReceiverError> {
        self.status(
            TOOL,
            &format!("→ {} {}", call.name, short_json(&call.input)),
        )
    }

    fn tool_result(&mut self, result: &ToolResultBlock) -> Result<(), ReceiverError> {
        if result.is_error {
            let first = result.text().lines().next().unwrap_or_default().to_owned();
            self.status(DIM, &format!("  tool error: {first}"))
        } else {
            Ok(())
        }
    }

    fn finished(&mut self, reason: &FinishReason, turns: u32) -> Result<(), ReceiverError> {
        self.end_line()?;
        if !matches!(
            reason,
            FinishReason::Model(rebound_core::StopReason::EndTurn)
        ) {
            self.status(DIM, &format!("done: {reason} after {turns} turns"))?;
        }
        Ok(())
    }

    fn error(&mut self, error: &RunError) {
        let _ = self.status(BAD, &format!("error: {error} — {}", advice(error)));
    }
}
