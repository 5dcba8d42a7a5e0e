//! The CLI's two views of a run: a human one and a JSON event stream.

use anstyle::{AnsiColor, Style};
use rebound_core::wire::StreamDelta;
use rebound_core::{
    CompactionReport, FallbackInfo, FinishReason, Message, ProviderRetryInfo, Role, RunError,
    RunTally, ToolCall, ToolResultBlock,
};
use rebound_effects::budget::BudgetEvent;
use rebound_effects::receiver::{Receiver, ReceiverError};
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn io_error(source: std::io::Error) -> ReceiverError {
    ReceiverError::Write {
        what: "to the terminal",
        source,
    }
}

/// Writes one JSON object per line to stdout (`--events json`). The schema is in docs/cli.md.
#[derive(Debug, Default)]
pub struct JsonEvents {
    totals: Option<Value>,
}

/// The run's totals as the `done` and `error` events carry them, in the shape of the JSON
/// result of `claude -p --output-format json` (`duration_ms`, `num_turns`-like counts,
/// `usage` with Anthropic's token names).
#[must_use]
pub fn totals_json(stats: &RunTally) -> Value {
    json!({
        "requests": stats.requests,
        "retries": stats.retries,
        "compactions": stats.compactions,
        "duration_ms": stats.elapsed_ms,
        "usage": {
            "input_tokens": stats.input_tokens,
            "output_tokens": stats.output_tokens,
            "cache_read_input_tokens": stats.cache_read_tokens,
            "cache_creation_input_tokens": stats.cache_creation_tokens,
        },
    })
}

/// `n` and the noun for that many: `1 retry`, `2 retries`, `0 errors`.
pub(crate) fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// One line of totals for people, e.g. `3 requests (1 retry), 12,345 input + 678 output
/// tokens (cache: 0 read, 0 written), 1 compaction, 4.2s`.
#[must_use]
pub fn totals_line(stats: &RunTally) -> String {
    let plural = counted;
    format!(
        "{} ({}), {} input + {} output tokens (cache: {} read, {} written), {}, {:.1}s",
        plural(stats.requests, "request", "requests"),
        plural(stats.retries, "retry", "retries"),
        stats.input_tokens,
        stats.output_tokens,
        stats.cache_read_tokens,
        stats.cache_creation_tokens,
        plural(stats.compactions, "compaction", "compactions"),
        stats.elapsed_ms as f64 / 1000.0
    )
}

fn with_totals(mut event: Value, totals: Option<&Value>) -> Value {
    if let (Some(Value::Object(fields)), Some(map)) = (totals, event.as_object_mut()) {
        for (k, v) in fields {
            map.insert(k.clone(), v.clone());
        }
    }
    event
}

impl JsonEvents {
    fn emit(&mut self, value: Value) -> Result<(), ReceiverError> {
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, &value)
            // Writing a `Value` fails only in writing; as an I/O error it reads the same.
            .map_err(|e| ReceiverError::Write {
                what: "an event",
                source: e.into(),
            })?;
        out.write_all(b"\n").map_err(io_error)?;
        out.flush().map_err(io_error)
    }
}

impl JsonEvents {
    /// Writes a change of a shared budget's health: `{"type": "budget_fallback", "budget",
    /// "error", "error_kind"}` when Redis failed and this process decides locally, `{"type":
    /// "budget_restored", "budget"}` when Redis answers again.
    pub fn budget(&mut self, event: &BudgetEvent) -> Result<(), ReceiverError> {
        self.emit(budget_event_json(event))
    }
}

/// The JSON form of a [`BudgetEvent`] (see [`JsonEvents::budget`]).
#[must_use]
pub fn budget_event_json(event: &BudgetEvent) -> Value {
    match event {
        BudgetEvent::FellBack { budget, error } => json!({
            "type": "budget_fallback",
            "budget": budget,
            "error": error.to_string(),
            "error_kind": error.kind(),
            "message": event.to_string(),
        }),
        BudgetEvent::Restored { budget } => json!({
            "type": "budget_restored",
            "budget": budget,
            "message": event.to_string(),
        }),
        // A kind of change this build does not know yet: its message says what happened.
        _ => json!({ "type": "budget", "message": event.to_string() }),
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
    /// The first event of a run: `{"type": "start", "seed": …}`, the jitter seed, so the run
    /// can be reproduced with `--seed` (it is also in the trace header).
    fn started(&mut self, seed: u64) -> Result<(), ReceiverError> {
        self.emit(json!({"type": "start", "seed": seed}))
    }

    fn delta(&mut self, delta: &StreamDelta<&str>) -> Result<(), ReceiverError> {
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

    fn compaction(&mut self, report: &CompactionReport) -> Result<(), ReceiverError> {
        self.emit(json!({
            "type": "compaction",
            "reason": report.reason,
            "method": report.method,
            "before_messages": report.before_messages,
            "after_messages": report.after_messages,
            "before_bytes": report.before_bytes,
            "after_bytes": report.after_bytes,
            "before_tokens": report.before_tokens,
            "after_tokens": report.after_tokens,
            "summary_error": report.summary_error,
        }))
    }

    fn totals(&mut self, stats: &RunTally) -> Result<(), ReceiverError> {
        self.totals = Some(totals_json(stats));
        Ok(())
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
        let done = json!({"type": "done", "stop_reason": reason.to_string(), "turns": turns});
        self.emit(with_totals(done, self.totals.as_ref()))
    }

    fn error(&mut self, error: &RunError) {
        // Best effort: the run is failing already.
        let event = with_totals(error_event(error), self.totals.as_ref());
        let _ = self.emit(event);
    }
}

/// Streams text to stdout and status lines (dim) to stderr, for people (`--events human`).
/// A retry wait of a few seconds or more is counted down on stderr when it is a terminal.
#[derive(Debug, Default)]
pub struct HumanView {
    /// Whether the cursor is mid-line on stdout (streamed text without a newline yet).
    mid_line: bool,
    /// The run's totals, once told.
    totals: Option<String>,
    /// The retry wait being counted down on a terminal, if any.
    countdown: Option<Countdown>,
}

/// A retry line redrawn once a second with the time left, on a terminal's stderr, until the
/// next thing the view prints (the retry itself, a cancel, anything) stops it.
#[derive(Debug)]
struct Countdown {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Countdown {
    /// Prints `info`'s line without ending it and starts redrawing it.
    fn start(info: &ProviderRetryInfo) -> Countdown {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let total = Duration::from_millis(info.delay_ms);
        let info = info.clone();
        let draw = move |left_ms: u64| {
            let mut line = info.clone();
            line.delay_ms = left_ms;
            let mut err = anstream::stderr();
            let _ = write!(err, "\r\x1b[2K{DIM}{line}{DIM:#}");
            let _ = err.flush();
        };
        draw(u64::try_from(total.as_millis()).unwrap_or(u64::MAX));
        let started = Instant::now();
        let thread = std::thread::spawn(move || {
            let mut shown = started;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                let now = Instant::now();
                if now.duration_since(shown) >= Duration::from_secs(1) {
                    shown = now;
                    let left = total.saturating_sub(now.duration_since(started));
                    draw(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
                    // At zero the line says all there is until the retry starts (a busy
                    // machine may start it late): no redraw of the same "0.0s".
                    if left.is_zero() {
                        break;
                    }
                }
            }
        });
        Countdown { stop, thread }
    }

    /// Stops redrawing and ends the line.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let mut err = anstream::stderr();
        let _ = err.write_all(b"\n");
        let _ = err.flush();
    }
}

/// Waits shorter than this are printed once, not counted down.
const COUNTDOWN_FROM_MS: u64 = 3_000;

const DIM: Style = Style::new().dimmed();
const TOOL: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Cyan)));
const BAD: Style = Style::new()
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Red)))
    .bold();

impl Drop for HumanView {
    fn drop(&mut self) {
        self.stop_countdown();
    }
}

impl HumanView {
    fn stop_countdown(&mut self) {
        if let Some(countdown) = self.countdown.take() {
            countdown.stop();
        }
    }

    fn end_line(&mut self) -> Result<(), ReceiverError> {
        self.stop_countdown();
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
            K::ReasoningRejected => "the provider refused the conversation's reasoning even without it; start a new session",
            _ => "the provider kept failing; try again later, raise --max-attempts, or add --fallback",
        },
        _ => "the run failed; see the message above",
    }
}

impl Receiver for HumanView {
    fn delta(&mut self, delta: &StreamDelta<&str>) -> Result<(), ReceiverError> {
        self.stop_countdown();
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
        if info.delay_ms >= COUNTDOWN_FROM_MS && std::io::stderr().is_terminal() {
            self.end_line()?;
            self.countdown = Some(Countdown::start(info));
            return Ok(());
        }
        self.status(DIM, &info.to_string())
    }

    fn fallback(&mut self, info: &FallbackInfo) -> Result<(), ReceiverError> {
        self.status(DIM, &info.to_string())
    }

    fn compaction(&mut self, report: &CompactionReport) -> Result<(), ReceiverError> {
        self.status(DIM, &report.to_string())
    }

    fn totals(&mut self, stats: &RunTally) -> Result<(), ReceiverError> {
        self.totals = Some(totals_line(stats));
        Ok(())
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
        if let Some(line) = self.totals.take() {
            self.status(DIM, &line)?;
        }
        Ok(())
    }

    fn error(&mut self, error: &RunError) {
        let _ = self.status(BAD, &format!("error: {error} — {}", advice(error)));
        if let Some(line) = self.totals.take() {
            let _ = self.status(DIM, &line);
        }
    }
}
