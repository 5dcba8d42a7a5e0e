//! The tokio runner: executes an [`AgentMachine`](rebound_core::AgentMachine)'s commands
//! for real, through core's [`Run`].

use crate::budget::BudgetStore;
pub use crate::persist::{Persist, PersistError};
use crate::provider::{BoxFuture, Provider, ProviderRequest, SendError};
use crate::receiver::{NullReceiver, Receiver, ReceiverError};
use crate::telemetry::{RunTelemetry, Telemetry};
use rebound_core::run::{Action, Ended, Run, RunParts};
use rebound_core::trace::{TraceHeader, TraceStep, TraceWriter};
use rebound_core::{
    BatchOutcome, Command, CompactionError, ContentBlock, Conversation, Event, FinishReason,
    HostFailure, HostFailureKind, MachineConfig, Message, Millis, RequestId, RunError, RunTally,
    Secrets, StreamDeadlines, ToolCall, ToolFailure, ToolSpec,
};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Runs tool batches for the runner. The tool set of [`crate::tools`] implements it; an
/// embedder may bring its own.
pub trait ToolExecutor: Send + Sync {
    /// The tools offered to the model.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Runs a batch of calls (known tools, object inputs). Must return promptly when
    /// `cancel` fires: with a `Canceled` host failure for the calls it stopped and the
    /// outcomes of those that had finished ([`BatchOutcome::PerCall`]), so that the run keeps
    /// them, or with the failure for the whole batch.
    fn run_batch<'a>(
        &'a self,
        calls: Vec<ToolCall>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome>;

    /// Whether this executor makes the `execute_tool` span of each call itself, timed to the
    /// call ([`tool_span`](crate::telemetry::tool_span),
    /// [`record_tool_result`](crate::telemetry::record_tool_result)), as the
    /// [`ToolSet`](crate::tools::ToolSet) does. When it does not (the default), the runner
    /// makes them, each covering the whole batch.
    fn traces_calls(&self) -> bool {
        false
    }
}

/// No tools at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTools;

impl ToolExecutor for NoTools {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    fn run_batch<'a>(
        &'a self,
        _calls: Vec<ToolCall>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome> {
        Box::pin(async { BatchOutcome::WholeBatch(ToolFailure::model("no tools are available")) })
    }
}

/// A change to the conversation, for [`Persist`].
enum Change<'a> {
    Append(&'a Message),
    Replace(&'a Conversation),
}

/// Shrinks a conversation that overflowed the context window by elision (no provider
/// request): used for [`CompactionMethod::Elide`](rebound_core::CompactionMethod), and when a
/// summary could not be had. Summaries are provider requests the runner sends like any other.
pub trait Compactor: Send + Sync {
    /// Returns the compacted conversation, or why it could not be compacted.
    fn compact<'a>(
        &'a self,
        conversation: &'a Conversation,
    ) -> BoxFuture<'a, Result<Conversation, CompactorError>>;
}

/// Why a [`Compactor`] could not compact. The machine hears it as a
/// [`CompactionError`]: a failed compaction after an overflow fails the run with this
/// error's message (so it must hold no secret), one before it lets the request go as it is.
///
/// ```
/// use rebound_core::{compact, CompactionPolicy, Conversation, MachineConfig};
/// use rebound_effects::provider::BoxFuture;
/// use rebound_effects::runner::{Compactor, CompactorError, Runner};
/// use std::sync::Arc;
///
/// /// Core's compactor, refusing conversations too large to be worth trying.
/// struct Bounded;
///
/// impl Compactor for Bounded {
///     fn compact<'a>(
///         &'a self,
///         conversation: &'a Conversation,
///     ) -> BoxFuture<'a, Result<Conversation, CompactorError>> {
///         Box::pin(async move {
///             if conversation.approx_bytes() > 100_000_000 {
///                 return Err(CompactorError::other("the conversation is over 100 MB"));
///             }
///             Ok(compact(conversation, &CompactionPolicy::default())?)
///         })
///     }
/// }
///
/// let _runner = Runner::new(MachineConfig::default(), vec![]).compactor(Arc::new(Bounded));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactorError {
    /// Core's compactor ([`compact`](rebound_core::compact)) failed.
    #[error(transparent)]
    Compaction(#[from] CompactionError),
    /// Any other compactor failed: its own error, whose message is this error's message.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl CompactorError {
    /// Wraps a compactor's own error, or a message (`&str`, `String`), as
    /// [`CompactorError::Other`].
    #[must_use]
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        CompactorError::Other(error.into())
    }
}

impl From<CompactorError> for CompactionError {
    /// Core's own error as it is; another compactor's as its message
    /// ([`CompactionError::Compactor`]), which is what a trace can hold.
    fn from(error: CompactorError) -> Self {
        match error {
            CompactorError::Compaction(e) => e,
            CompactorError::Other(e) => CompactionError::compactor(e.to_string()),
        }
    }
}

/// What the runner takes to start.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunInput {
    /// A new user message.
    User(Vec<ContentBlock>),
    /// Continue the loaded conversation (answer interrupted tool calls, ask for the next
    /// message).
    Resume,
}

impl RunInput {
    /// A user message with one text block.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        RunInput::User(vec![ContentBlock::text(text)])
    }
}

/// How a successful run ended. New fields may come in a minor release (it is
/// `#[non_exhaustive]`): read it, do not build one.
///
/// ```compile_fail
/// use rebound_effects::runner::RunSummary;
/// fn turns(summary: &RunSummary) -> u32 {
///     let RunSummary { turns, reason: _, stats: _, conversation: _ } = summary;
///     *turns
/// }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RunSummary {
    /// Why it finished.
    pub reason: FinishReason,
    /// Assistant messages appended.
    pub turns: u32,
    /// What happened on the way.
    pub stats: RunTally,
    /// The final conversation.
    pub conversation: Conversation,
}

/// Stops a run from another task or a signal handler. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct CancelHandle(CancellationToken);

impl CancelHandle {
    /// A new handle.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels the run: it fails with `RunError::Canceled` within milliseconds, even during
    /// a backoff sleep, a stalled stream or a tool call, and sends no request after this.
    /// What finished before is kept in the conversation: an answer that was complete, the
    /// results of a batch's calls that had finished (the others are answered as
    /// interrupted); a stream or a call still under way is dropped.
    pub fn cancel(&self) {
        self.0.cancel();
    }

    /// Whether cancel was called.
    #[must_use]
    pub fn is_canceled(&self) -> bool {
        self.0.is_cancelled()
    }

    /// The underlying token (for tools that want to stop early).
    #[must_use]
    pub fn token(&self) -> &CancellationToken {
        &self.0
    }
}

/// Writes a trace of one run (JSON Lines, the format of `rebound_core::trace`, replayable
/// with `rebound_sim::replay` and `rebound replay`).
pub struct TraceRecorder {
    state: TraceState,
}

enum TraceState {
    Pending(Box<dyn Write + Send>),
    Writing(TraceWriter<Box<dyn Write + Send>>),
    Closed,
}

impl TraceRecorder {
    /// Records into `out` (a file, a buffer). Only the first run of a runner is recorded.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        TraceRecorder {
            state: TraceState::Pending(Box::new(out)),
        }
    }

    fn start(&mut self, header: &TraceHeader) -> Result<(), String> {
        match std::mem::replace(&mut self.state, TraceState::Closed) {
            TraceState::Pending(out) => {
                self.state =
                    TraceState::Writing(TraceWriter::new(out, header).map_err(|e| e.to_string())?);
                Ok(())
            }
            other => {
                self.state = other;
                Ok(())
            }
        }
    }

    fn step(&mut self, step: &TraceStep) -> Result<(), String> {
        match &mut self.state {
            TraceState::Writing(w) => w.write_step(step).map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }
}

/// The tokio runner: owns a machine's effects — providers, tools, receiver, persistence,
/// trace, shared retry budget — and executes its commands until the run ends.
///
/// It is the only place that reads the clock (a monotonic `Instant`, turned into the
/// machine's `Millis`).
///
/// Each runner draws its jitter seed from the operating system unless one is given with
/// [`Runner::seed`], so a fleet of agents spreads its retries instead of retrying in
/// lockstep; the seed is written in the trace header and [`Runner::jitter_seed`] tells it, so
/// a run can be replayed or reproduced.
///
/// ```no_run
/// use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
/// use rebound_effects::runner::{RunInput, Runner};
/// use rebound_core::{MachineConfig, ProviderKind};
///
/// #[tokio::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let key = ApiKey::new(std::env::var("ANTHROPIC_API_KEY")?);
///     let provider = HttpProvider::new(HttpProviderConfig::new(
///         ProviderKind::Anthropic, "claude-sonnet-4-6", key))?;
///     let mut runner = Runner::new(MachineConfig::default(), vec![Box::new(provider)]);
///     let summary = runner.run(RunInput::text("Say hello.")).await?;
///     println!("{}", summary.conversation.last().map(|m| m.text()).unwrap_or_default());
///     Ok(())
/// }
/// ```
pub struct Runner {
    config: MachineConfig,
    seed: u64,
    providers: Vec<Box<dyn Provider>>,
    tools: Arc<dyn ToolExecutor>,
    receiver: Box<dyn Receiver>,
    persist: Option<Box<dyn Persist>>,
    compactor: Option<Arc<dyn Compactor>>,
    trace: Option<TraceRecorder>,
    budget: Option<Arc<dyn BudgetStore>>,
    conversation: Conversation,
    cancel: CancelHandle,
    trace_meta: Vec<(String, String)>,
    telemetry: Telemetry,
    /// The embedder's secrets, besides those its providers name.
    secrets: Secrets,
    /// When the current run started (for its wall time).
    started: Option<Instant>,
}

/// A fresh jitter seed from the operating system's entropy, below 2^53 so that every JSON
/// reader (JavaScript, jq) reads it back exactly from a trace header or an event.
///
/// Should the OS refuse (no entropy source in a sandbox), std's `RandomState`, whose keys
/// also come from the OS once per thread, still gives each call a different value: jitter
/// needs seeds that differ between agents, not secrets.
fn entropy_seed() -> u64 {
    let random = crate::entropy::os_u64().unwrap_or_else(|| {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    });
    random >> 11
}

impl Runner {
    /// A runner for `config` sending to `providers` (index = target index; one per target of
    /// the fallback chain). The tool specs of `config` are replaced by the executor's when
    /// tools are set with [`Runner::tools`].
    #[must_use]
    pub fn new(config: MachineConfig, providers: Vec<Box<dyn Provider>>) -> Self {
        Runner {
            config,
            seed: entropy_seed(),
            providers,
            tools: Arc::new(NoTools),
            receiver: Box::new(NullReceiver),
            persist: None,
            compactor: None,
            trace: None,
            budget: None,
            conversation: Conversation::new(),
            cancel: CancelHandle::new(),
            trace_meta: Vec::new(),
            telemetry: Telemetry::default(),
            secrets: Secrets::none(),
            started: None,
        }
    }

    /// Sets the jitter seed, to reproduce a run exactly (default: drawn from the operating
    /// system for this runner).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The jitter seed of this runner's runs: the one given to [`Runner::seed`], or the one
    /// drawn for it. Log it to reproduce a run with `Runner::seed` (it is also in the trace
    /// header).
    #[must_use]
    pub fn jitter_seed(&self) -> u64 {
        self.seed
    }

    /// Sets the tools; their specs become the machine's tool list.
    #[must_use]
    pub fn tools(mut self, tools: Arc<dyn ToolExecutor>) -> Self {
        self.config.tools = tools.specs();
        self.tools = tools;
        self
    }

    /// Sets the receiver.
    #[must_use]
    pub fn receiver(mut self, receiver: impl Receiver + 'static) -> Self {
        self.receiver = Box::new(receiver);
        self
    }

    /// Sets an already boxed receiver.
    #[must_use]
    pub fn receiver_boxed(mut self, receiver: Box<dyn Receiver>) -> Self {
        self.receiver = receiver;
        self
    }

    /// Persists the conversation after every appended message and compaction.
    #[must_use]
    pub fn persist(mut self, persist: impl Persist + 'static) -> Self {
        self.persist = Some(Box::new(persist));
        self
    }

    /// Replaces the default compactor (core's deterministic one).
    #[must_use]
    pub fn compactor(mut self, compactor: Arc<dyn Compactor>) -> Self {
        self.compactor = Some(compactor);
        self
    }

    /// Records a trace of the run.
    #[must_use]
    pub fn trace(mut self, trace: TraceRecorder) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Adds a `key: value` fact to the trace header (never a secret).
    #[must_use]
    pub fn trace_meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.trace_meta.push((key.into(), value.into()));
        self
    }

    /// Shares a retry budget with other runners: of this process
    /// ([`SharedBudget`](crate::budget::SharedBudget)), or of every process naming the same
    /// budget in Redis ([`RedisBudget`](crate::budget::RedisBudget)). The machine then runs
    /// on the budget's clock, so every runner sharing it agrees on time.
    #[must_use]
    pub fn budget(mut self, budget: impl BudgetStore + 'static) -> Self {
        self.budget = Some(Arc::new(budget));
        self
    }

    /// Sets what the run's telemetry records beyond its spans' standard attributes (an agent
    /// name, a conversation id, message content) and, with the `otel` feature, the meter of
    /// its metrics. The spans themselves are always emitted, to whatever `tracing`
    /// subscriber is installed: see [`telemetry`](crate::telemetry).
    #[must_use]
    pub fn telemetry(mut self, telemetry: Telemetry) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Names the embedder's `secrets` (keys, tokens, passwords its tools or gateways use) to
    /// the machine, besides the credentials each provider names
    /// ([`Provider::secrets`]): every failure the run is
    /// told of has them masked (`***`) before anything shows, counts or records it — retry
    /// and fallback notices, the run's error, tool error results sent to the model, telemetry
    /// and the trace. See [`Secrets`].
    #[must_use]
    pub fn secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// Continues `conversation` (a loaded session).
    #[must_use]
    pub fn conversation(mut self, conversation: Conversation) -> Self {
        self.conversation = conversation;
        self
    }

    /// Uses `cancel` to stop the run (see [`canceler`](Self::canceler) for how long a cancel
    /// lasts).
    #[must_use]
    pub fn cancel_handle(mut self, cancel: CancelHandle) -> Self {
        self.cancel = cancel;
        self
    }

    /// A handle that cancels this runner's runs.
    ///
    /// A cancel lasts: once the handle is canceled, the run under way fails with
    /// `RunError::Canceled`, and so does every later run of this runner, at once and without
    /// a request, until [`cancel_handle`](Self::cancel_handle) gives it a fresh handle
    /// (`CancelHandle::new()`). So a cancel meant for one run cannot be lost by arriving
    /// just after it ended; to go on with the conversation, hand the runner a new handle.
    #[must_use]
    pub fn canceler(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// The conversation as of the end of the last run (or as loaded).
    #[must_use]
    pub fn current_conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// Runs until the machine finishes or fails. The conversation is kept for the next run.
    ///
    /// The run is an `invoke_agent` span, a child of the caller's current span, holding
    /// the spans of its model calls and tool calls ([`telemetry`](crate::telemetry)).
    pub async fn run(&mut self, input: RunInput) -> Result<RunSummary, RunError> {
        let mut telemetry = RunTelemetry::start(
            &self.telemetry,
            &self.config,
            self.providers.iter().map(|p| p.label()),
            self.seed,
            self.tools.traces_calls(),
        );
        // Not `.instrument(span)`: the run's future is polled for every streamed chunk, and
        // entering a span costs on each poll; the runner's spans name their parents, and the
        // futures that may make spans of their own (tools, compactors, a provider while it
        // connects) run inside the right one.
        self.run_traced(input, &mut telemetry).await
    }

    async fn run_traced(
        &mut self,
        input: RunInput,
        telemetry: &mut RunTelemetry,
    ) -> Result<RunSummary, RunError> {
        // With a shared budget, time is the budget's: every runner sharing it agrees.
        let start = self
            .budget
            .as_ref()
            .map_or_else(Instant::now, |budget| budget.origin());
        self.started = Some(Instant::now());
        // Each target's reasoning is recorded with its provider's identity (a target that
        // names one keeps it), so it goes back only there.
        for (target, provider) in self.config.targets.iter_mut().zip(&self.providers) {
            if target.identity.is_none() {
                target.identity = provider.identity();
            }
        }
        // A copy of the conversation, not the runner's own: a run whose future is dropped
        // leaves the runner with the conversation it had. Cheap: the copy shares the messages.
        let secrets = self
            .providers
            .iter()
            .fold(self.secrets.clone(), |all, p| all.and(&p.secrets()));
        let mut run =
            Run::with_conversation(self.config.clone(), self.seed, self.conversation.clone())
                .recording(self.trace.is_some())
                .with_secrets(secrets)
                .meta("driver", "rebound-effects runner");
        for (i, p) in self.providers.iter().enumerate() {
            run = run.meta(format!("target.{i}"), p.label());
        }
        for (k, v) in &self.trace_meta {
            run = run.meta(k.clone(), v.clone());
        }
        if let Some(trace) = self.trace.as_mut() {
            if let Err(e) = trace.start(&run.header()) {
                let error = self.host_error(HostFailureKind::Internal, format!("trace: {e}"));
                telemetry.finish(&Err(error.clone()), &RunTally::default());
                return Err(error);
            }
        }
        if let Err(e) = self.receiver.started(self.seed) {
            let error = self.host_error(HostFailureKind::Receiver, e.to_string());
            telemetry.finish(&Err(error.clone()), &RunTally::default());
            return Err(error);
        }
        let first = match input {
            RunInput::User(content) => Event::UserMessage { content },
            RunInput::Resume => Event::Resume,
        };
        let mut driving = Driving { run, start };
        self.handle(&mut driving, first, telemetry);
        while let Some(action) = driving.run.poll() {
            if let Some(event) = self.execute(action, &mut driving, telemetry).await {
                self.handle(&mut driving, event, telemetry);
            }
        }
        let RunParts {
            conversation,
            tally: mut stats,
            end,
            ..
        } = driving.run.into_parts();
        self.conversation = conversation;
        let result = match end {
            Some(Ok(Ended { reason, turns })) => Ok((reason, turns)),
            Some(Err(error)) => Err(error),
            None => Err(RunError::Invariant {
                message: "the run ended without a terminal command".into(),
            }),
        };
        stats.elapsed_ms = self.elapsed_ms();
        telemetry.finish(&result, &stats);
        if let Err(error) = &result {
            // Best effort: the run is failing already.
            let _ = self.receiver.totals(&stats);
            self.receiver.error(error);
        }
        match result {
            Ok((reason, turns)) => Ok(RunSummary {
                reason,
                turns,
                stats,
                conversation: self.conversation.clone(),
            }),
            Err(error) => Err(error),
        }
    }

    /// Hands the run `event` now, and writes what it recorded. A trace that cannot be
    /// written fails the run (the host failure is handed on; the trace is closed).
    fn handle(&mut self, driving: &mut Driving, event: Event, telemetry: &mut RunTelemetry) {
        // The secrets masked as the run will take it, for telemetry too.
        let event = driving.run.machine().secrets().redact_event(event);
        telemetry.event(&event);
        let _ = driving.run.report(driving.now(), event);
        self.write_steps(driving, telemetry);
    }

    fn write_steps(&mut self, driving: &mut Driving, telemetry: &mut RunTelemetry) {
        let Some(trace) = self.trace.as_mut() else {
            return;
        };
        for step in driving.run.take_steps() {
            if let Err(e) = trace.step(&step.to_trace()) {
                self.trace = None;
                let failure = host_event(HostFailureKind::Internal, format!("trace: {e}"));
                self.handle(driving, failure, telemetry);
                return;
            }
        }
    }

    fn host_error(&mut self, kind: HostFailureKind, message: String) -> RunError {
        let error = RunError::Host {
            failure: HostFailure::new(kind, message),
        };
        self.receiver.error(&error);
        error
    }

    /// Executes one action. Returns the event it brought (the answer to the command the
    /// run awaits, or a host failure), if any.
    async fn execute(
        &mut self,
        action: Action,
        driving: &mut Driving,
        telemetry: &mut RunTelemetry,
    ) -> Option<Event> {
        let command = match action {
            Action::StreamReset { attempt, .. } => {
                telemetry.stream_reset();
                return self
                    .receiver
                    .stream_reset(attempt)
                    .err()
                    .map(|e| host_event(HostFailureKind::Receiver, e.to_string()));
            }
            Action::Command(command) => command,
            _ => return None,
        };
        telemetry.command(&command, driving.run.tally());
        let result = match command {
            Command::AppendMessage { message } => {
                match save(self.persist.as_deref(), Change::Append(&message)).await {
                    Err(e) => Err(e),
                    Ok(()) => receiver_result(self.receiver.message(&message))
                        .and_then(|()| {
                            message
                                .tool_results()
                                .try_for_each(|r| receiver_result(self.receiver.tool_result(r)))
                        })
                        .map(|()| None),
                }
            }
            Command::ReplaceConversation {
                conversation,
                report,
            } => match save(self.persist.as_deref(), Change::Replace(&conversation)).await {
                Err(e) => Err(e),
                Ok(()) => receiver_result(self.receiver.compaction(&report)).map(|()| None),
            },
            Command::NotifyRetry { info } => {
                receiver_result(self.receiver.provider_retry(&info)).map(|()| None)
            }
            Command::NotifyFallback { info } => {
                receiver_result(self.receiver.fallback(&info)).map(|()| None)
            }
            Command::SendRequest {
                request,
                target,
                conversation,
                deadlines,
                ..
            } => {
                let sent = Sent {
                    request,
                    target,
                    deadlines,
                };
                return self.send(sent, &conversation, telemetry, driving).await;
            }
            // Every wait below polls the cancel first (`biased`): when the cancel and the
            // awaited answer are both ready, the run is canceled, never a coin toss.
            Command::Sleep { timer, delay_ms } => {
                let sleep = tokio::time::sleep(std::time::Duration::from_millis(delay_ms));
                Ok(Some(tokio::select! {
                    biased;
                    () = self.cancel.0.cancelled() => Event::Cancel,
                    () = sleep => Event::TimerFired { timer },
                }))
            }
            Command::RunTools { batch, calls } => {
                match calls
                    .iter()
                    .try_for_each(|c| receiver_result(self.receiver.tool_start(c)))
                {
                    Err(e) => Err(e),
                    Ok(()) => {
                        let tools = Arc::clone(&self.tools);
                        let cancel = self.cancel.0.clone();
                        // A batch that saw the cancel answers at once with a `Canceled`
                        // host failure for the calls it stopped (the machine takes it as
                        // the cancel) and the outcomes of those that finished (the
                        // machine keeps them): it is asked once more when the cancel
                        // comes, and one that does not answer then is dropped.
                        let batch_run = telemetry.in_tool_batch(tools.run_batch(calls, &cancel));
                        tokio::pin!(batch_run);
                        let outcome = tokio::select! {
                            biased;
                            () = self.cancel.0.cancelled() => {
                                match futures_util::FutureExt::now_or_never(batch_run.as_mut()) {
                                    Some(outcome) => Event::ToolsFinished { batch, outcome },
                                    None => Event::Cancel,
                                }
                            }
                            outcome = &mut batch_run => Event::ToolsFinished { batch, outcome },
                        };
                        Ok(Some(outcome))
                    }
                }
            }
            Command::Compact {
                compaction,
                conversation,
            } => {
                let result = match &self.compactor {
                    Some(c) => {
                        let c = Arc::clone(c);
                        tokio::select! {
                            biased;
                            () = self.cancel.0.cancelled() => return Some(Event::Cancel),
                            r = c.compact(&conversation).instrument(telemetry.agent_span().clone()) => r.map_err(CompactionError::from),
                        }
                    }
                    None => driving.run.compact_default(&conversation),
                };
                Ok(Some(Event::CompactionFinished { compaction, result }))
            }
            Command::AcquirePermit { permit, ask } => {
                let decision = match &self.budget {
                    Some(budget) => {
                        let decision = tokio::select! {
                            biased;
                            () = self.cancel.0.cancelled() => return Some(Event::Cancel),
                            decision = budget.acquire(ask) => decision,
                        };
                        telemetry.budget_tokens(budget.tokens());
                        decision
                    }
                    None => rebound_core::PermitDecision::Granted,
                };
                Ok(Some(Event::PermitAnswered { permit, decision }))
            }
            Command::NoteBudget { note } => {
                if let Some(budget) = &self.budget {
                    // Bounded by the store (a Redis call times out and falls back).
                    budget.record(note).await;
                    telemetry.budget_tokens(budget.tokens());
                }
                Ok(None)
            }
            Command::Finish { reason, turns } => {
                // The machine has finished; a receiver that cannot show it still fails
                // the run, as a receiver failure anywhere else does.
                let mut stats = driving.run.tally().clone();
                stats.elapsed_ms = self.elapsed_ms();
                receiver_result(
                    self.receiver
                        .totals(&stats)
                        .and_then(|()| self.receiver.finished(&reason, turns)),
                )
                .map(|()| None)
            }
            // Shown when the run returns.
            Command::Fail { .. } => Ok(None),
        };
        match result {
            Ok(event) => event,
            Err(failure) => Some(Event::HostFailed { failure }),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.map_or(0, |s| {
            u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX)
        })
    }

    /// Sends one request and turns its outcome into the run's next event (none when the
    /// run ended while the answer streamed).
    async fn send(
        &mut self,
        sent: Sent,
        conversation: &Conversation,
        telemetry: &mut RunTelemetry,
        driving: &mut Driving,
    ) -> Option<Event> {
        let Sent {
            request,
            target,
            deadlines,
        } = sent;
        if self.cancel.is_canceled() {
            return Some(Event::Cancel);
        }
        let Some(provider) = self.providers.get(target) else {
            return Some(host_event(
                HostFailureKind::Internal,
                format!("no provider is configured for target {target}"),
            ));
        };
        // Borrowed, not cloned: the tool specs (JSON schemas) are the same for every request.
        let tools = &self.config.tools;
        let receiver = &mut self.receiver;
        let streamed = AtomicBool::new(false);
        let first_piece = tokio::sync::Notify::new();
        let mut receiver_failed: Option<ReceiverError> = None;
        let mut sink = |delta: rebound_core::wire::StreamDelta<&str>| {
            if !streamed.swap(true, Ordering::Relaxed) {
                first_piece.notify_one();
            }
            match receiver.delta(&delta) {
                Ok(()) => true,
                Err(e) => {
                    receiver_failed = Some(e);
                    false
                }
            }
        };
        let mut responding = false;
        let mut began = AnswerBegan {
            request,
            trace: &mut self.trace,
            budget: self.budget.as_ref(),
        };
        // The answer's future borrows the sink: it ends with this block.
        let outcome = {
            let answer = crate::telemetry::in_span_until(
                provider.send(
                    ProviderRequest::new(conversation, tools).with_deadlines(deadlines),
                    &mut sink,
                ),
                telemetry.attempt_span(),
                &streamed,
            );
            tokio::pin!(answer);
            loop {
                tokio::select! {
                    biased;
                    // An answer that is complete when the cancel comes is kept (the machine
                    // appends it before it hears the cancel); one still streaming is dropped.
                    () = self.cancel.0.cancelled() => {
                        break futures_util::FutureExt::now_or_never(answer.as_mut());
                    }
                    // The answer began: the run hears it while the stream goes on (a retry
                    // being answered tells the shared budget that retries work again).
                    () = first_piece.notified(), if !responding => {
                        responding = true;
                        if !began.tell(driving).await {
                            return None;
                        }
                    }
                    r = &mut answer => break Some(r),
                }
            }
        };
        if streamed.load(Ordering::Relaxed) && !responding && outcome.is_some() {
            // The answer began and ended within one read: it began all the same.
            if !began.tell(driving).await {
                return None;
            }
        }
        if let Some(e) = receiver_failed {
            return Some(host_event(HostFailureKind::Receiver, e.to_string()));
        }
        match outcome {
            None => Some(Event::Cancel),
            Some(Ok(response)) => Some(Event::ProviderSucceeded { request, response }),
            Some(Err(SendError::Provider(failure))) => {
                Some(Event::ProviderFailed { request, failure })
            }
            // The provider found the conversation unsendable (nothing to send, broken tool
            // pairing) and sent nothing: the conversation is corrupt, which no retry, other
            // target or 400 from a provider describes.
            Some(Err(SendError::Request(e))) => {
                driving.run.broken(e.to_string());
                None
            }
            // The sink stops only for a failed receiver, handled above.
            Some(Err(SendError::Stopped)) => {
                driving.run.broken(format!(
                    "provider {} stopped reading though the runner did not ask it to",
                    provider.label()
                ));
                None
            }
        }
    }
}

/// The answer to a request began: what the run hears of it, told while the stream goes on.
struct AnswerBegan<'r> {
    request: RequestId,
    trace: &'r mut Option<TraceRecorder>,
    budget: Option<&'r Arc<dyn BudgetStore>>,
}

impl AnswerBegan<'_> {
    /// Tells the run (recorded in the trace) and does what it says: notes to the shared
    /// budget. Whether the stream may go on: not when the run ended (a trace that could not
    /// be written, a machine that broke its promise).
    async fn tell(&mut self, driving: &mut Driving) -> bool {
        let notes = driving.run.responding(driving.now(), self.request);
        if let Some(writer) = self.trace.as_mut() {
            for step in driving.run.take_steps() {
                if let Err(e) = writer.step(&step.to_trace()) {
                    // As in the run's other steps: a trace that cannot be written fails the
                    // run.
                    *self.trace = None;
                    let failure =
                        HostFailure::new(HostFailureKind::Internal, format!("trace: {e}"));
                    let _ = driving
                        .run
                        .handle(driving.now(), Event::HostFailed { failure });
                    return false;
                }
            }
        }
        if let Some(budget) = self.budget {
            for note in notes {
                budget.record(note).await;
            }
        }
        !driving.run.is_ended()
    }
}

/// The run being driven and its clock.
struct Driving {
    run: Run,
    start: Instant,
}

impl Driving {
    /// Now on the run's clock.
    fn now(&self) -> Millis {
        Millis(u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}

/// The request a [`Command::SendRequest`] asked for, as the runner sends it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    request: RequestId,
    target: usize,
    deadlines: StreamDeadlines,
}

/// Stores `change` with `persist`, if there is one. A free function, not a method: a
/// `&Runner` held across the await would make `Runner::run`'s future need `Runner: Sync`,
/// which its receiver and trace writer are not, and so not `Send`.
async fn save(persist: Option<&dyn Persist>, change: Change<'_>) -> Result<(), HostFailure> {
    let Some(p) = persist else {
        return Ok(());
    };
    match change {
        Change::Append(message) => p.append(message).await,
        Change::Replace(conversation) => p.replace(conversation).await,
    }
    .map_err(|e| HostFailure::new(HostFailureKind::SessionStore, e.to_string()))
}

fn host_event(kind: HostFailureKind, message: String) -> Event {
    Event::HostFailed {
        failure: HostFailure::new(kind, message),
    }
}

fn receiver_result(r: Result<(), ReceiverError>) -> Result<(), HostFailure> {
    r.map_err(|e| HostFailure::new(HostFailureKind::Receiver, e.to_string()))
}
