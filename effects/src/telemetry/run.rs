//! One run's spans, events and metrics, built from what a shell already sees: the events it
//! hands the run and the commands the run emits (as [`RunTally`] is), plus the few things
//! only the shell knows (an attempt's stream was reset, a store's tokens).

use super::content;
use super::metrics::Metrics;
use super::names::{self as n, TRACING_TARGET as TARGET};
use super::Telemetry;
use rebound_core::{
    BatchOutcome, Command, Event, FinishReason, HostFailureKind, MachineConfig, PermitDecision,
    PermitKind, ProviderFailure, ProviderKind, RequestPurpose, RunError, RunTally, ToolCall,
    ToolFailure, ToolOutput, TransportFault,
};
use std::sync::Arc;
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::Span;

/// What the spans say about one target of the fallback chain.
#[derive(Debug, Clone)]
struct Target {
    /// `gen_ai.provider.name`.
    provider: &'static str,
    /// The wire format, which says how its usage counts cached tokens.
    kind: ProviderKind,
    model: String,
}

/// The open `chat` span: one logical model call, its attempts and retries.
#[derive(Debug)]
struct Chat {
    span: Span,
    target: usize,
    purpose: RequestPurpose,
    started: Instant,
    attempts: u32,
    /// The `error.type` of the last failed attempt, for the span's end if no attempt succeeds.
    failure: Option<&'static str>,
}

/// One run's telemetry: the spans, span events and metrics of
/// [`telemetry`](crate::telemetry), made from what a shell of core's
/// [`Run`](rebound_core::run::Run) already sees. The tokio runner makes one per run; a shell
/// that drives a `Run` itself (the durable service, an embedder's own loop) makes the same
/// spans and metrics with it:
///
/// - [`start`](RunTelemetry::start) when the run starts (the `invoke_agent` span opens);
/// - [`event`](RunTelemetry::event) with each event, just before the run is handed it;
/// - [`command`](RunTelemetry::command) with each command the run emits, before executing
///   it, with the run's tally as it stands then; [`stream_reset`](RunTelemetry::stream_reset)
///   when the run says a stream was reset;
/// - [`attempt_span`](RunTelemetry::attempt_span) around a request being sent, and
///   [`in_tool_batch`](RunTelemetry::in_tool_batch) around a tool batch (the spans a provider
///   or a tool set makes nest there);
/// - [`finish`](RunTelemetry::finish) when the run ended, then drop it: the run's span ends
///   when it is dropped, after every span in it.
///
/// Every method is cheap when no `tracing` subscriber listens and no meter is set: spans are
/// then disabled, and nothing is formatted or serialized.
///
/// ```
/// use rebound_core::run::{Action, Run};
/// use rebound_core::{ContentBlock, Event, MachineConfig};
/// use rebound_effects::telemetry::{RunTelemetry, Telemetry};
///
/// let config = MachineConfig::default();
/// let mut telemetry = RunTelemetry::start(&Telemetry::new(), &config, std::iter::empty(), 7, false);
/// let mut run = Run::new(config, 7);
/// let first = Event::UserMessage { content: vec![ContentBlock::text("Hi.")] };
/// telemetry.event(&first);
/// let _ = run.handle(rebound_core::Millis(0), first);
/// while let Some(action) = run.poll() {
///     if let Action::Command(command) = &action {
///         telemetry.command(command, run.tally());
///     }
///     # break;
///     // ... execute it, hand the run (and the telemetry) the event it brought
/// }
/// # let _ = telemetry;
/// ```
#[derive(Debug)]
pub struct RunTelemetry {
    agent: Span,
    capture: bool,
    targets: Vec<Target>,
    chat: Option<Chat>,
    attempt: Option<Span>,
    /// The running batch's calls (id, tool), with the span the runner made for each when
    /// the executor makes none itself.
    tools: Vec<(String, String, Option<Span>)>,
    executor_traces: bool,
    /// When the pending budget permit was asked for, and its kind.
    permit: Option<(Instant, PermitKind)>,
    started: Instant,
    /// Prompt tokens (cache included) and completion tokens, summed over the run.
    tokens: (u64, u64),
    metrics: Option<Arc<Metrics>>,
    /// The retries of the runner's tally already counted in the metric: a retry is counted
    /// when the tally counts it (when its request is sent), so the metric, the span
    /// attribute and the CLI's `retries` agree.
    retries: u32,
    /// The last retry announced (target, error type, reason), until its request is sent.
    announced: Option<(usize, &'static str, &'static str)>,
}

/// The provider's name as the conventions spell it.
pub(crate) fn provider_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => "anthropic",
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "openai",
        // The conventions' name for the Gemini API (`gcp.vertex_ai` is Vertex's, which a
        // Gemini provider does not tell apart).
        ProviderKind::Gemini => "gcp.gemini",
        ProviderKind::Bedrock => "aws.bedrock",
        _ => n::ERROR_OTHER,
    }
}

fn transport_name(fault: TransportFault) -> &'static str {
    match fault {
        TransportFault::Connect => "connect",
        TransportFault::Dns => "dns",
        TransportFault::Tls => "tls",
        TransportFault::Reset => "reset",
        TransportFault::Timeout => "timeout",
        TransportFault::IdleTimeout => "idle_timeout",
        TransportFault::StreamCut => "stream_cut",
        TransportFault::MalformedStream => "malformed_stream",
        TransportFault::EmptyMessage => "empty_message",
        _ => n::ERROR_OTHER,
    }
}

pub(crate) fn host_kind_name(kind: HostFailureKind) -> &'static str {
    match kind {
        HostFailureKind::Canceled => n::ERROR_CANCELED,
        HostFailureKind::OutOfMemory => "out_of_memory",
        HostFailureKind::Receiver => "receiver",
        HostFailureKind::SessionStore => "session_store",
        HostFailureKind::Internal => "internal",
        _ => n::ERROR_OTHER,
    }
}

fn permit_name(kind: PermitKind) -> &'static str {
    match kind {
        PermitKind::FirstAttempt => "first_attempt",
        PermitKind::Hinted => "hinted",
        PermitKind::Charged => "charged",
    }
}

fn decision_name(decision: PermitDecision) -> &'static str {
    match decision {
        PermitDecision::Granted => "granted",
        PermitDecision::WaitUntil(_) => "wait_until",
        PermitDecision::Denied => "denied",
        _ => n::ERROR_OTHER,
    }
}

/// At most `max` bytes of `s`, cut at a character boundary: a status message, not a
/// payload.
pub(crate) fn bounded(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A count as a signed integer: OpenTelemetry's attributes have no unsigned type, and
/// `tracing-opentelemetry` records a `u64` as text.
fn int<T: TryInto<i64>>(n: T) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Ends `span` now: enters and leaves it once, then lets it go (it closes once no child
/// holds it). The runner enters its spans for part of their work only (the run's around a
/// tool batch or a compactor, an attempt's until its first streamed piece), and an exporter
/// may date a span's end by its last exit rather than by its close (`tracing-opentelemetry`
/// does, so that a span held past its work ends with it): without this last entry the run's
/// span would end with its last tool batch, before the turns after it, and an attempt with
/// its first streamed piece. Every span the runner makes is ended here, children before
/// their parent, so each lies within its parent whether a subscriber dates a span's end by
/// its close or by its last exit.
fn end_span(span: Span) {
    if !span.is_disabled() {
        span.in_scope(|| {});
    }
}

/// Records `value` into `field` of `span` when there is one.
fn record_some<V: tracing::Value>(span: &Span, field: &str, value: Option<V>) {
    if let Some(value) = value {
        span.record(field, value);
    }
}

impl RunTelemetry {
    /// Opens the run's `invoke_agent` span (a child of the caller's current span).
    /// `labels` are the providers' labels (`Provider::label`), one per target, for targets
    /// the config does not name. `executor_traces`: the tool executor makes each call's
    /// `execute_tool` span itself
    /// ([`traces_calls`](crate::runner::ToolExecutor::traces_calls)), or the shell does; the
    /// tool calls are counted in the metrics either way.
    #[must_use]
    pub fn start(
        options: &Telemetry,
        config: &MachineConfig,
        labels: impl Iterator<Item = String>,
        seed: u64,
        executor_traces: bool,
    ) -> Self {
        let targets: Vec<Target> = labels
            .enumerate()
            .map(|(i, label)| match config.targets.get(i) {
                Some(t) => Target {
                    provider: provider_name(t.provider),
                    kind: t.provider,
                    model: t.model.clone(),
                },
                // A runner whose config names no targets: the provider's label
                // (`anthropic:claude-sonnet-4-6`) says what it can.
                None => {
                    let (provider, model) = label.split_once(':').unwrap_or(("", &label));
                    let (provider, kind) = match provider {
                        "anthropic" => ("anthropic", ProviderKind::Anthropic),
                        "openai" | "openai-responses" => ("openai", ProviderKind::OpenAi),
                        "gemini" => ("gcp.gemini", ProviderKind::Gemini),
                        "bedrock" => ("aws.bedrock", ProviderKind::Bedrock),
                        _ => (n::ERROR_OTHER, ProviderKind::OpenAi),
                    };
                    Target {
                        provider,
                        kind,
                        model: model.to_owned(),
                    }
                }
            })
            .collect();
        let agent = tracing::info_span!(
            target: TARGET,
            "invoke_agent",
            otel.name = Empty,
            otel.kind = "internal",
            otel.status_code = Empty,
            otel.status_description = Empty,
            gen_ai.operation.name = n::INVOKE_AGENT,
            gen_ai.provider.name = Empty,
            gen_ai.request.model = Empty,
            gen_ai.agent.name = Empty,
            gen_ai.conversation.id = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            error.type = Empty,
            rebound.seed = int(seed),
            rebound.finish_reason = Empty,
            rebound.turns = Empty,
            rebound.requests = Empty,
            rebound.retries = Empty,
        );
        if !agent.is_disabled() {
            if let Some(first) = targets.first() {
                agent.record(n::GEN_AI_PROVIDER_NAME, first.provider);
                agent.record(n::GEN_AI_REQUEST_MODEL, first.model.as_str());
            }
            match &options.agent_name {
                Some(name) => {
                    agent.record(n::GEN_AI_AGENT_NAME, name.as_str());
                    agent.record("otel.name", format!("{} {name}", n::INVOKE_AGENT));
                }
                None => {
                    agent.record("otel.name", n::INVOKE_AGENT);
                }
            }
            record_some(
                &agent,
                n::GEN_AI_CONVERSATION_ID,
                options.conversation_id.as_deref(),
            );
        }
        RunTelemetry {
            agent,
            capture: options.capture_content,
            targets,
            chat: None,
            attempt: None,
            tools: Vec::new(),
            executor_traces,
            permit: None,
            started: Instant::now(),
            tokens: (0, 0),
            metrics: options.metrics(),
            retries: 0,
            announced: None,
        }
    }

    /// The run's span: the parent of everything the run does.
    #[must_use]
    pub fn agent_span(&self) -> &Span {
        &self.agent
    }

    /// The span of the attempt being sent (disabled when there is none): send the request
    /// inside it, so that the spans the provider makes nest there.
    #[must_use]
    pub fn attempt_span(&self) -> Span {
        self.attempt.clone().unwrap_or_else(Span::none)
    }

    /// Whether message content is recorded.
    #[must_use]
    pub fn captures_content(&self) -> bool {
        self.capture
    }

    /// `batch` (a tool executor's work) inside the run's span, with the run's content
    /// capture: the `execute_tool` spans it makes ([`tool_span`](super::tool_span)) are the
    /// run's children.
    pub fn in_tool_batch<F: std::future::Future>(
        &self,
        batch: F,
    ) -> impl std::future::Future<Output = F::Output> {
        tracing::Instrument::instrument(
            super::with_capture(self.capture, batch),
            self.agent.clone(),
        )
    }

    fn target(&self, index: usize) -> (&'static str, &str) {
        self.targets
            .get(index)
            .map_or((n::ERROR_OTHER, ""), |t| (t.provider, t.model.as_str()))
    }

    /// The span events of the run go to: the open `chat` span, else the run's.
    fn current(&self) -> &Span {
        self.chat.as_ref().map_or(&self.agent, |c| &c.span)
    }

    /// Ends the attempt being sent, if any.
    fn end_attempt(&mut self) {
        if let Some(attempt) = self.attempt.take() {
            end_span(attempt);
        }
    }

    /// Takes an event the shell is about to hand the run.
    pub fn event(&mut self, event: &Event) {
        match event {
            Event::ProviderSucceeded { response, .. } => {
                self.end_attempt();
                let Some(chat) = self.chat.take() else {
                    return;
                };
                let kind = self
                    .targets
                    .get(chat.target)
                    .map_or(ProviderKind::OpenAi, |t| t.kind);
                // The conventions count cached prompt tokens in the input; Anthropic does not.
                let input = response.usage.context_tokens(kind);
                let output = response.usage.output_tokens;
                self.tokens.0 = self.tokens.0.saturating_add(input);
                self.tokens.1 = self.tokens.1.saturating_add(output);
                let (provider, request_model) = self.target(chat.target);
                let span = &chat.span;
                if !span.is_disabled() {
                    record_some(span, n::GEN_AI_RESPONSE_MODEL, response.model());
                    record_some(span, n::GEN_AI_RESPONSE_ID, response.id());
                    span.record(n::GEN_AI_USAGE_INPUT_TOKENS, int(input));
                    span.record(n::GEN_AI_USAGE_OUTPUT_TOKENS, int(output));
                    record_some(
                        span,
                        n::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                        response.usage.cache_read_input_tokens.map(int),
                    );
                    record_some(
                        span,
                        n::GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
                        response.usage.cache_creation_input_tokens.map(int),
                    );
                    span.record(
                        n::GEN_AI_RESPONSE_FINISH_REASONS,
                        response.stop_reason.as_str(),
                    );
                    span.record(n::REBOUND_ATTEMPTS, int(chat.attempts));
                    if self.capture {
                        span.record(
                            n::GEN_AI_OUTPUT_MESSAGES,
                            content::output_messages(&response.message, &response.stop_reason),
                        );
                    }
                }
                if let Some(m) = &self.metrics {
                    let response_model = response.model();
                    m.chat_finished(
                        provider,
                        request_model,
                        response_model,
                        None,
                        chat.started.elapsed(),
                    );
                    m.tokens(provider, request_model, response_model, input, output);
                }
                end_span(chat.span);
            }
            Event::ProviderFailed { failure, .. } => {
                if let Some(attempt) = self.attempt.take() {
                    record_failure(&attempt, failure);
                    end_span(attempt);
                }
                if let Some(chat) = &mut self.chat {
                    chat.failure = Some(failure.kind.name());
                }
            }
            Event::ToolsFinished { outcome, .. } => {
                for (id, tool, span) in std::mem::take(&mut self.tools) {
                    let failure = match outcome {
                        BatchOutcome::PerCall(calls) => calls
                            .iter()
                            .find(|c| c.tool_use_id == id)
                            .and_then(|c| c.result.as_ref().err()),
                        BatchOutcome::WholeBatch(failure) => Some(failure),
                    };
                    if let (Some(span), Some(failure)) = (&span, failure) {
                        record_tool_failure(span, failure, self.capture);
                    }
                    if let Some(m) = &self.metrics {
                        m.tool_call(&tool, failure.map(tool_error_type));
                    }
                    if let Some(span) = span {
                        end_span(span);
                    }
                }
            }
            Event::PermitAnswered { decision, .. } => {
                let Some((asked, kind)) = self.permit.take() else {
                    return;
                };
                let waited = asked.elapsed();
                if let Some(m) = &self.metrics {
                    m.budget_waiters(-1);
                    m.budget_answered(decision_name(*decision), waited);
                }
                // First attempts granted at once are every request's routine: no event.
                let routine =
                    kind == PermitKind::FirstAttempt && *decision == PermitDecision::Granted;
                if routine && waited.as_millis() == 0 {
                    return;
                }
                tracing::event!(
                    target: TARGET,
                    parent: self.current(),
                    tracing::Level::INFO,
                    rebound.budget.permit = permit_name(kind),
                    rebound.budget.decision = decision_name(*decision),
                    rebound.budget.wait_ms = int(millis(waited)),
                    "budget.permit"
                );
            }
            _ => {}
        }
    }

    /// Takes a command the run emitted, before the shell executes it, once the run's
    /// `tally` has counted its step (a step sends at most one request, so at a request the
    /// tally's retries are those sent up to it).
    pub fn command(&mut self, command: &Command, tally: &RunTally) {
        match command {
            Command::SendRequest {
                target,
                attempt,
                purpose,
                conversation,
                ..
            } => {
                if tally.retries > self.retries {
                    self.retries = tally.retries;
                    if let (Some(m), Some((target, error, reason))) =
                        (&self.metrics, self.announced.take())
                    {
                        let (provider, model) = self.target(target);
                        m.retry(provider, model, error, reason);
                    }
                }
                if self
                    .chat
                    .as_ref()
                    .is_some_and(|c| c.target != *target || c.purpose != *purpose)
                {
                    self.end_chat(None);
                }
                if self.chat.is_none() {
                    let (provider, model) = self.target(*target);
                    let span = tracing::info_span!(
                        target: TARGET,
                        parent: &self.agent,
                        "chat",
                        otel.name = Empty,
                        otel.kind = "client",
                        otel.status_code = Empty,
                        otel.status_description = Empty,
                        gen_ai.operation.name = n::CHAT,
                        gen_ai.provider.name = provider,
                        gen_ai.request.model = model,
                        gen_ai.response.model = Empty,
                        gen_ai.response.id = Empty,
                        gen_ai.response.finish_reasons = Empty,
                        gen_ai.usage.input_tokens = Empty,
                        gen_ai.usage.output_tokens = Empty,
                        gen_ai.usage.cache_read.input_tokens = Empty,
                        gen_ai.usage.cache_creation.input_tokens = Empty,
                        gen_ai.input.messages = Empty,
                        gen_ai.output.messages = Empty,
                        error.type = Empty,
                        rebound.target = int(*target),
                        rebound.attempts = Empty,
                        rebound.request.purpose = match purpose {
                            RequestPurpose::Summary => "summary",
                            _ => "turn",
                        },
                    );
                    if !span.is_disabled() {
                        span.record("otel.name", format!("{} {model}", n::CHAT));
                        if self.capture {
                            span.record(
                                n::GEN_AI_INPUT_MESSAGES,
                                content::input_messages(
                                    conversation.messages().iter().map(|m| &**m),
                                ),
                            );
                        }
                    }
                    self.chat = Some(Chat {
                        span,
                        target: *target,
                        purpose: *purpose,
                        started: Instant::now(),
                        attempts: 0,
                        failure: None,
                    });
                }
                if let Some(chat) = &mut self.chat {
                    chat.attempts += 1;
                    self.attempt = Some(tracing::info_span!(
                        target: TARGET,
                        parent: &chat.span,
                        "attempt",
                        otel.kind = "internal",
                        otel.status_code = Empty,
                        otel.status_description = Empty,
                        rebound.attempt = int(*attempt),
                        rebound.target = int(*target),
                        error.type = Empty,
                        http.response.status_code = Empty,
                        rebound.provider.error_type = Empty,
                        rebound.provider.request_id = Empty,
                        rebound.transport.fault = Empty,
                        rebound.retry.server_hint_ms = Empty,
                    ));
                }
            }
            Command::NotifyRetry { info } => {
                if info.is_compaction() {
                    self.end_chat(None);
                    return;
                }
                let reason = if info.retry_after_ms.is_some() {
                    n::RETRY_SERVER_HINT
                } else {
                    n::RETRY_BACKOFF
                };
                self.announced = Some((info.target, info.kind.name(), reason));
                tracing::event!(
                    target: TARGET,
                    parent: self.current(),
                    tracing::Level::INFO,
                    rebound.attempt = int(info.attempt),
                    rebound.max_attempts = int(info.max_attempts),
                    rebound.retry.delay_ms = int(info.delay_ms),
                    rebound.retry.reason = reason,
                    rebound.retry.server_hint_ms = info.retry_after_ms.map(int),
                    error.type = info.kind.name(),
                    http.response.status_code = info.status.map(int),
                    "retry"
                );
            }
            Command::NotifyFallback { info } => {
                self.end_chat(None);
                if let Some(m) = &self.metrics {
                    let (provider, model) = self.target(info.from);
                    m.fallback(provider, model, info.kind.name());
                }
                tracing::event!(
                    target: TARGET,
                    parent: &self.agent,
                    tracing::Level::INFO,
                    rebound.fallback.from = info.from_label.as_str(),
                    rebound.fallback.to = info.to_label.as_str(),
                    error.type = info.kind.name(),
                    "fallback"
                );
            }
            Command::Compact { .. } => self.end_chat(None),
            Command::ReplaceConversation { report, .. } => {
                let reason = report.reason.to_string();
                let method = report.method.to_string();
                if let Some(m) = &self.metrics {
                    m.compaction(&reason, &method);
                }
                tracing::event!(
                    target: TARGET,
                    parent: &self.agent,
                    tracing::Level::INFO,
                    rebound.compaction.reason = reason.as_str(),
                    rebound.compaction.method = method.as_str(),
                    rebound.compaction.before_messages = int(report.before_messages),
                    rebound.compaction.after_messages = int(report.after_messages),
                    rebound.compaction.before_bytes = int(report.before_bytes),
                    rebound.compaction.after_bytes = int(report.after_bytes),
                    rebound.compaction.before_tokens = int(report.before_tokens),
                    rebound.compaction.after_tokens = int(report.after_tokens),
                    "compaction"
                );
            }
            Command::RunTools { calls, .. } => {
                if self.executor_traces && self.metrics.is_none() {
                    return;
                }
                self.tools = calls
                    .iter()
                    .map(|call| {
                        let span = (!self.executor_traces)
                            .then(|| tool_span_in(&self.agent, call, self.capture));
                        (call.id.clone(), call.name.clone(), span)
                    })
                    .collect();
            }
            Command::AcquirePermit { ask, .. } => {
                self.permit = Some((Instant::now(), ask.kind));
                if let Some(m) = &self.metrics {
                    m.budget_waiters(1);
                }
            }
            Command::NoteBudget {
                note: rebound_core::BudgetNote::RateLimited { target, until },
            } => {
                tracing::event!(
                    target: TARGET,
                    parent: self.current(),
                    tracing::Level::INFO,
                    rebound.target = int(*target),
                    rebound.budget.until_ms = int(until.0),
                    "budget.rate_limited"
                );
            }
            _ => {}
        }
    }

    /// The pending permit left the queue unanswered (a cancel, a dropped run).
    fn permit_left(&self) {
        if let Some(m) = &self.metrics {
            m.budget_waiters(-1);
        }
    }

    /// The tokens a budget store holds now, when it can tell (`BudgetStore::tokens`).
    pub fn budget_tokens(&self, tokens: Option<f64>) {
        if let (Some(m), Some(tokens)) = (&self.metrics, tokens) {
            m.budget_tokens(tokens);
        }
    }

    /// The attempt being sent had shown streamed text, now discarded (the run's
    /// `Action::StreamReset`).
    pub fn stream_reset(&self) {
        if let Some(attempt) = &self.attempt {
            tracing::info!(target: TARGET, parent: attempt, "stream.reset");
        }
    }

    /// Ends the open `chat` span, as failed if its last attempt failed (or with `error`).
    fn end_chat(&mut self, error: Option<&'static str>) {
        self.end_attempt();
        let Some(chat) = self.chat.take() else {
            return;
        };
        let error = error.or(chat.failure);
        if !chat.span.is_disabled() {
            chat.span.record(n::REBOUND_ATTEMPTS, int(chat.attempts));
            if let Some(error) = error {
                chat.span.record(n::ERROR_TYPE, error);
                chat.span.record("otel.status_code", "error");
            }
        }
        if let Some(m) = &self.metrics {
            let (provider, model) = self.target(chat.target);
            m.chat_finished(provider, model, None, error, chat.started.elapsed());
        }
        end_span(chat.span);
    }

    /// Ends the run's spans but its own, which ends when this is dropped: `result` is how
    /// the run ended (its finish reason and turns, or its error), `stats` its tally.
    pub fn finish(&mut self, result: &Result<(FinishReason, u32), RunError>, stats: &RunTally) {
        let error = result.as_ref().err().map(RunError::kind);
        if self.permit.take().is_some() {
            self.permit_left();
        }
        if let Some(attempt) = self.attempt.take() {
            if let Some(error) = error {
                attempt.record(n::ERROR_TYPE, error);
                attempt.record("otel.status_code", "error");
            }
            end_span(attempt);
        }
        for (_, _, span) in std::mem::take(&mut self.tools) {
            let Some(span) = span else { continue };
            if let Some(error) = error {
                span.record(n::ERROR_TYPE, error);
                span.record("otel.status_code", "error");
            }
            end_span(span);
        }
        self.end_chat(error);
        let agent = &self.agent;
        if !agent.is_disabled() {
            agent.record(n::GEN_AI_USAGE_INPUT_TOKENS, int(self.tokens.0));
            agent.record(n::GEN_AI_USAGE_OUTPUT_TOKENS, int(self.tokens.1));
            agent.record(n::REBOUND_REQUESTS, int(stats.requests));
            agent.record(n::REBOUND_RETRIES, int(stats.retries));
            match result {
                Ok((reason, turns)) => {
                    agent.record(n::REBOUND_FINISH_REASON, reason.to_string().as_str());
                    agent.record(n::REBOUND_TURNS, int(*turns));
                }
                Err(e) => {
                    agent.record(n::ERROR_TYPE, e.kind());
                    // A run error's message names no secret (core's rule for errors).
                    agent.record("otel.status_description", bounded(&e.to_string(), 512));
                }
            }
        }
        if let Some(m) = &self.metrics {
            let (provider, model) = self.target(0);
            m.run_finished(provider, model, error, self.started.elapsed());
        }
    }
}

impl Drop for RunTelemetry {
    fn drop(&mut self) {
        // A run whose future was dropped mid-wait leaves the queue with it.
        if self.permit.take().is_some() {
            self.permit_left();
        }
        // The run ends here, as `Runner::run` returns or its future is dropped: its open
        // spans end first (none is left after `finish`), then the run's, so that the run's
        // span covers everything it did.
        self.end_attempt();
        if let Some(chat) = self.chat.take() {
            end_span(chat.span);
        }
        for (_, _, span) in std::mem::take(&mut self.tools) {
            if let Some(span) = span {
                end_span(span);
            }
        }
        end_span(std::mem::replace(&mut self.agent, Span::none()));
    }
}

fn record_failure(span: &Span, failure: &ProviderFailure) {
    if span.is_disabled() {
        return;
    }
    span.record(n::ERROR_TYPE, failure.kind.name());
    span.record("otel.status_code", "error");
    // Classified messages never hold a secret (core's sanitizing); bounded all the same.
    span.record("otel.status_description", bounded(&failure.message, 512));
    record_some(span, n::HTTP_RESPONSE_STATUS_CODE, failure.status.map(int));
    record_some(
        span,
        n::REBOUND_PROVIDER_ERROR_TYPE,
        failure.error_type.as_deref(),
    );
    record_some(
        span,
        n::REBOUND_PROVIDER_REQUEST_ID,
        failure.request_id.as_deref(),
    );
    record_some(
        span,
        n::REBOUND_TRANSPORT_FAULT,
        failure.transport.map(transport_name),
    );
    record_some(
        span,
        n::REBOUND_RETRY_AFTER_MS,
        failure.retry_after_ms.map(int),
    );
}

/// An `execute_tool {name}` span for `call`, a child of `parent`.
pub(crate) fn tool_span_in(parent: &Span, call: &ToolCall, capture: bool) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        parent: parent,
        "execute_tool",
        otel.name = Empty,
        otel.kind = "internal",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = n::EXECUTE_TOOL,
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_str(),
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("{} {}", n::EXECUTE_TOOL, call.name));
        if capture {
            span.record(n::GEN_AI_TOOL_CALL_ARGUMENTS, call.input.to_string());
        }
    }
    span
}

/// Records how a tool call ended on its span: its result text (with content capture), or
/// its failure as `error.type` and an error status.
pub(crate) fn record_tool_result(
    span: &Span,
    result: &Result<ToolOutput, ToolFailure>,
    capture: bool,
) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(output) => {
            if capture {
                let text: Vec<&str> = output
                    .parts
                    .iter()
                    .filter_map(rebound_core::ToolResultPart::as_text)
                    .collect();
                span.record(n::GEN_AI_TOOL_CALL_RESULT, text.join("\n").as_str());
            }
        }
        Err(failure) => record_tool_failure(span, failure, capture),
    }
}

/// The `error.type` of a failed tool call.
fn tool_error_type(failure: &ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Model { .. } => n::ERROR_TOOL,
        ToolFailure::Host(host) => host_kind_name(host.kind),
    }
}

fn record_tool_failure(span: &Span, failure: &ToolFailure, capture: bool) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "error");
    span.record(n::ERROR_TYPE, tool_error_type(failure));
    // The text the model reads may quote the conversation: content.
    if let (ToolFailure::Model { message }, true) = (failure, capture) {
        span.record("otel.status_description", bounded(message, 512));
    }
}
