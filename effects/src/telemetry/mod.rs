//! Telemetry: what a run did, as `tracing` spans and events named by the OpenTelemetry
//! GenAI semantic conventions, and (feature `otel`) as OpenTelemetry metrics.
//!
//! The [`Runner`](crate::runner::Runner) emits, whatever subscriber the embedder installed
//! (none: nothing is recorded and next to nothing is spent):
//!
//! ```text
//! invoke_agent                       one run (INTERNAL)
//! ├── chat claude-sonnet-4-6         one logical model call, all its retries (CLIENT)
//! │   ├── attempt                    one attempt: http.response.status_code, error.type
//! │   ├── event retry                delay_ms, reason (server_hint | backoff), error.type
//! │   ├── event budget.permit        a retry's wait for the shared retry budget
//! │   └── attempt                    the retry
//! ├── execute_tool read              one tool call (INTERNAL), error status when it failed
//! ├── event fallback / compaction    the next target, a compaction's before/after sizes
//! └── chat claude-sonnet-4-6         the next turn
//! ```
//!
//! The runner's spans name their parents rather than being entered around its whole run
//! (entering a span on every streamed chunk is what an exporter would pay for): a tool
//! batch and a compactor run inside the run's span, a provider's request inside its attempt's
//! span until the first streamed piece, so the spans they make themselves nest there.
//!
//! Every span lies within its parent in time: `invoke_agent` covers the whole run (every
//! model call, attempt and tool call, and the run's own end, when
//! [`Runner::run`](crate::runner::Runner::run) returns or its future is dropped), `chat`
//! its attempts and the waits between them, an `attempt` its whole answer, streamed to the
//! end. The runner ends each of its spans by entering it once more, children before their
//! parent: an exporter that dates a span's end by its last exit rather than its close
//! (`tracing-opentelemetry` does) would otherwise end the run's span with its last tool
//! batch, and an attempt with its first streamed piece.
//!
//! Every span's OpenTelemetry name, kind and status are set through the fields
//! `tracing-opentelemetry` reads (`otel.name`, `otel.kind`, `otel.status_code`,
//! `otel.status_description`); [`names`] lists every span, attribute, event and metric name.
//! Prompts, answers and tool inputs and outputs are recorded only with
//! [`Telemetry::capture_content`]; an API key never reaches the runner, so never a span.
//!
//! Another shell of core's `Run` (the durable service, an embedder's own loop) makes the same
//! spans and metrics with [`RunTelemetry`], which the runner uses too.
//!
//! The library installs no subscriber and no exporter. To export, install a
//! `tracing-opentelemetry` layer (and an OpenTelemetry meter provider, with the `otel`
//! feature) as for any other `tracing` instrumentation; the `rebound` binary does it when
//! the standard `OTEL_EXPORTER_OTLP_*` environment asks for it.
//!
//! ```
//! use rebound_core::MachineConfig;
//! use rebound_effects::runner::Runner;
//! use rebound_effects::telemetry::Telemetry;
//!
//! let runner = Runner::new(MachineConfig::default(), vec![])
//!     .telemetry(Telemetry::new().agent_name("triage").conversation_id("session-42"));
//! # let _ = runner;
//! ```

mod content;
#[cfg(feature = "otel")]
mod metrics;
#[cfg(not(feature = "otel"))]
#[path = "metrics_off.rs"]
mod metrics;
pub mod names;
mod run;

pub use run::RunTelemetry;

use rebound_core::{ToolCall, ToolFailure, ToolOutput};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tracing::Span;

/// What the runner's telemetry records beyond its spans' standard attributes: an agent
/// name, a conversation id, whether message content is recorded, and (feature `otel`) the
/// meter its metrics go to. Set with [`Runner::telemetry`](crate::runner::Runner::telemetry),
/// or given to [`RunTelemetry::start`].
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    capture_content: bool,
    agent_name: Option<String>,
    conversation_id: Option<String>,
    #[cfg(feature = "otel")]
    meter: Option<opentelemetry::metrics::Meter>,
    /// The instruments, made at the first run and shared by clones.
    #[cfg(feature = "otel")]
    instruments: Arc<std::sync::OnceLock<Arc<metrics::Metrics>>>,
}

impl Telemetry {
    /// The defaults: no content recorded, no agent name or conversation id, metrics (feature
    /// `otel`) on the global meter provider. As with OpenTelemetry's global meters in
    /// general, install that provider before the first run of the process: the runner makes
    /// its instruments on it once, at the first run.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records message content: the conversation sent and the answer of every `chat` span
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`), and each tool call's input and
    /// output (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`). Off by default:
    /// prompts and tool output often hold what should not leave the machine. The conventions'
    /// switch for it is the environment variable
    /// [`names::CAPTURE_CONTENT_ENV`]; the library reads no environment, the `rebound`
    /// binary does.
    #[must_use]
    pub fn capture_content(mut self, capture: bool) -> Self {
        self.capture_content = capture;
        self
    }

    /// Names the agent (`gen_ai.agent.name`; the run's span becomes `invoke_agent {name}`).
    #[must_use]
    pub fn agent_name(mut self, name: impl Into<String>) -> Self {
        self.agent_name = Some(name.into());
        self
    }

    /// Names the conversation (`gen_ai.conversation.id`), e.g. a session's id.
    #[must_use]
    pub fn conversation_id(mut self, id: impl Into<String>) -> Self {
        self.conversation_id = Some(id.into());
        self
    }

    /// Sends the metrics to `meter` instead of the global meter provider's `rebound` meter.
    #[cfg(feature = "otel")]
    #[must_use]
    pub fn meter(mut self, meter: opentelemetry::metrics::Meter) -> Self {
        self.meter = Some(meter);
        self.instruments = Arc::default();
        self
    }

    /// Whether message content is recorded.
    #[must_use]
    pub fn captures_content(&self) -> bool {
        self.capture_content
    }

    #[cfg(feature = "otel")]
    fn metrics(&self) -> Option<Arc<metrics::Metrics>> {
        /// The instruments on the global meter provider, made once per process: making them
        /// costs about as much as a run's spans, and an agent makes a runner per task.
        static GLOBAL: std::sync::OnceLock<Arc<metrics::Metrics>> = std::sync::OnceLock::new();
        let made = match &self.meter {
            Some(meter) => self
                .instruments
                .get_or_init(|| Arc::new(metrics::Metrics::new(meter))),
            None => GLOBAL.get_or_init(|| {
                let meter = opentelemetry::global::meter_with_scope(
                    opentelemetry::InstrumentationScope::builder("rebound")
                        .with_version(env!("CARGO_PKG_VERSION"))
                        .build(),
                );
                Arc::new(metrics::Metrics::new(&meter))
            }),
        };
        Some(Arc::clone(made))
    }

    #[cfg(not(feature = "otel"))]
    #[allow(clippy::unused_self)]
    fn metrics(&self) -> Option<Arc<metrics::Metrics>> {
        None
    }
}

tokio::task_local! {
    /// Whether the run polling this task records content: set by the runner around a tool
    /// batch, read by the tool set as it makes its calls' spans.
    static CAPTURE_CONTENT: bool;
}

/// Runs `future` with content capture `on` for the tool spans made inside it.
pub(crate) async fn with_capture<F: std::future::Future>(on: bool, future: F) -> F::Output {
    CAPTURE_CONTENT.scope(on, future).await
}

/// Polls `future` inside `span` until `done` is set (the first streamed piece of an answer):
/// spans a provider makes while it connects are children of the attempt, and the stream's
/// many polls after it do not pay for entering a span (with an exporter, entering the span on
/// every chunk cost about a tenth of the runner's CPU per streamed MB).
pub(crate) fn in_span_until<F: Future + Unpin>(
    future: F,
    span: Span,
    done: &AtomicBool,
) -> InSpanUntil<'_, F> {
    InSpanUntil { future, span, done }
}

/// The future of [`in_span_until`].
pub(crate) struct InSpanUntil<'a, F> {
    future: F,
    span: Span,
    done: &'a AtomicBool,
}

impl<F: Future + Unpin> Future for InSpanUntil<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        if this.span.is_disabled() || this.done.load(Ordering::Relaxed) {
            return Pin::new(&mut this.future).poll(cx);
        }
        let _inside = this.span.enter();
        Pin::new(&mut this.future).poll(cx)
    }
}

/// Whether the run this task works for records content (false outside a run).
fn capturing() -> bool {
    CAPTURE_CONTENT.try_with(|on| *on).unwrap_or(false)
}

/// An `execute_tool {name}` span for `call`, a child of the current span: for a
/// [`ToolExecutor`](crate::runner::ToolExecutor) that times its calls itself (and says so
/// with [`traces_calls`](crate::runner::ToolExecutor::traces_calls)). Run the call inside it
/// (`tracing::Instrument`), then end it with [`record_tool_result`]. The runner's content
/// capture applies.
#[must_use]
pub fn tool_span(call: &ToolCall) -> Span {
    run::tool_span_in(&Span::current(), call, capturing())
}

/// Records how the call of `span` (from [`tool_span`]) ended: its output (with content
/// capture), or its failure as `error.type` (`tool_error`, or the host failure's kind, e.g.
/// `canceled`) and an error status.
pub fn record_tool_result(span: &Span, result: &Result<ToolOutput, ToolFailure>) {
    run::record_tool_result(span, result, capturing());
}

/// A tool call refused before it ran, as the tool set refuses it: a zero-length
/// `execute_tool` span with `error.type` `unknown_tool` or `invalid_arguments`.
pub(crate) fn refused_tool_call(call: &ToolCall, error: &'static str) {
    let span = tool_span(call);
    if !span.is_disabled() {
        span.record(names::ERROR_TYPE, error);
        span.record("otel.status_code", "error");
    }
}
