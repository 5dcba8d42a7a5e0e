//! The Virtual Object that runs agents durably: one object per conversation id, whose
//! `run` handler drives an [`AgentMachine`] through Restate's journal.

use crate::clock::{unix_ms, BudgetOffset, RunClock};
use crate::failure::RunFailure;
use crate::idempotency::with_key;
use crate::journal::{CallStep, CancelStep, Entry, NoteStep, Step};
use crate::live::Live;
use rebound_core::run::{Action, Ended, Run, RunParts};
use rebound_core::{
    BatchOutcome, BudgetNote, CallOutcome, Command, CompactionError, ContentBlock, Conversation,
    Event, FinishReason, HostFailure, HostFailureKind, MachineConfig, Millis, RequestId, Role,
    RunError, RunTally, Secrets, ToolCall, ToolFailure,
};
use rebound_effects::budget::BudgetStore;
use rebound_effects::provider::{Provider, ProviderRequest, SendError};
use rebound_effects::receiver::{NullReceiver, Receiver};
use rebound_effects::runner::{Compactor, NoTools, ToolExecutor};
use rebound_effects::telemetry::Telemetry;
use restate_sdk::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

/// The object state key holding the conversation.
pub const CONVERSATION_KEY: &str = "conversation";

/// Makes the side channel of one run: where its streamed text, messages, retries and
/// totals are shown (a UI, a log). Called with the object's key (the conversation id).
pub type ReceiverFactory = Arc<dyn Fn(&str) -> Box<dyn Receiver> + Send + Sync>;

/// What `run` takes: the user message that starts the turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnInput {
    /// The user's message (not empty).
    pub message: String,
}

/// What `run` answers when the agent finished its turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnReply {
    /// Why the run finished.
    pub reason: FinishReason,
    /// Assistant messages appended by this run.
    pub turns: u32,
    /// The text of the last assistant message.
    pub text: String,
    /// What happened on the way (attempts, retries, tool calls, compactions), the same
    /// after any number of crashes: the journal replays it.
    pub stats: RunTally,
    /// The run's jitter seed: the engine's (the same on every replay of the invocation)
    /// or the agent's ([`DurableAgent::seed`]). With the same seed and the same world, a
    /// run makes the same decisions.
    pub seed: u64,
}

/// Everything the durable agent runs with, shared by all its invocations.
struct Effects {
    config: MachineConfig,
    providers: Vec<Box<dyn Provider>>,
    tools: Arc<dyn ToolExecutor>,
    compactor: Option<Arc<dyn Compactor>>,
    budget: Option<Arc<dyn BudgetStore>>,
    receivers: ReceiverFactory,
    /// A seed for every run instead of the engine's.
    seed: Option<u64>,
    /// Where each run's trace is written.
    traces: Option<std::path::PathBuf>,
    /// What each run's telemetry records.
    telemetry: Telemetry,
    /// The embedder's secrets ([`DurableAgent::secrets`]); the providers' are added to them
    /// for each run.
    secrets: Secrets,
}

impl Effects {
    /// The secrets masked in every failure of a run, before it is journaled: the
    /// embedder's and each provider's ([`Provider::secrets`]).
    fn all_secrets(&self) -> Secrets {
        self.providers
            .iter()
            .fold(self.secrets.clone(), |all, p| all.and(&p.secrets()))
    }
}

/// A rebound agent as a Restate Virtual Object named `Agent`, keyed by conversation id.
///
/// Handlers:
/// - `run` (exclusive): `{"message": "…"}` appends the user message to the object's
///   conversation and runs the agent until it finishes its turn; answers a [`TurnReply`],
///   or fails with a terminal error whose code says why (409 canceled, 502 the provider
///   refused, 503 the provider stayed unavailable, …) and whose message is a
///   [`RunFailure`] in JSON: see [`RunFailure`]. Every provider attempt, tool call,
///   compaction and budget decision is a journaled step, every backoff a durable timer;
///   after a crash Restate replays the journal into a fresh machine, which makes the same
///   decisions, so no request that completed is sent again and no tool whose result is
///   journaled runs again.
///
/// A cancel (`PATCH /invocations/{id}/cancel` on Restate's admin API) takes effect at the
/// end of the step under way: Restate lets a step (a tool call, a streamed answer) run to
/// its end. What finished before the cancel took effect is kept: the answer of a request
/// that completed, the results of the tool calls that finished, in the order they
/// happened; a tool call that never started is answered as interrupted in the saved
/// conversation, and nothing is sent after the cancel. A run whose last answer completed
/// before the cancel took effect has finished: it answers its [`TurnReply`].
/// - `conversation` (shared): the conversation so far.
/// - `reset` (exclusive): forgets the conversation.
///
/// rebound's retry policy decides every retry; Restate's own retries only restart the
/// handler after a crash or a lost connection.
///
/// ```no_run
/// use rebound_core::{MachineConfig, ProviderKind};
/// use rebound_durable::DurableAgent;
/// use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let key = ApiKey::new(std::env::var("ANTHROPIC_API_KEY")?);
/// let provider = HttpProvider::new(HttpProviderConfig::new(
///     ProviderKind::Anthropic, "claude-sonnet-4-6", key))?;
/// let agent = DurableAgent::new(MachineConfig::resilient(), vec![Box::new(provider)]);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9080").await?;
/// rebound_durable::serve(agent, listener).await;
/// # Ok(()) }
/// ```
pub struct DurableAgent {
    effects: Arc<Effects>,
}

impl DurableAgent {
    /// An agent for `config` sending to `providers` (one per target of the fallback chain),
    /// without tools.
    #[must_use]
    pub fn new(config: MachineConfig, providers: Vec<Box<dyn Provider>>) -> Self {
        DurableAgent {
            effects: Arc::new(Effects {
                config,
                providers,
                tools: Arc::new(NoTools),
                compactor: None,
                budget: None,
                receivers: Arc::new(|_: &str| Box::new(NullReceiver) as Box<dyn Receiver>),
                seed: None,
                traces: None,
                telemetry: Telemetry::new(),
                secrets: Secrets::none(),
            }),
        }
    }

    /// Changes the effects while building. Not `Clone`, so nothing else holds them until the
    /// agent is served: `get_mut` always succeeds here.
    fn with(mut self, change: impl FnOnce(&mut Effects)) -> Self {
        if let Some(effects) = Arc::get_mut(&mut self.effects) {
            change(effects);
        }
        self
    }

    /// Sets the tools; their specs become the machine's tool list. Each call is its own
    /// journaled step, with an [`idempotency_key`](crate::idempotency_key).
    #[must_use]
    pub fn tools(self, tools: Arc<dyn ToolExecutor>) -> Self {
        self.with(|e| {
            e.config.tools = tools.specs();
            e.tools = tools;
        })
    }

    /// Replaces the default compactor (core's deterministic one).
    #[must_use]
    pub fn compactor(self, compactor: Arc<dyn Compactor>) -> Self {
        self.with(|e| e.compactor = Some(compactor))
    }

    /// Shares a retry budget with other runs; each decision is journaled.
    #[must_use]
    pub fn budget(self, budget: Arc<dyn BudgetStore>) -> Self {
        self.with(|e| e.budget = Some(budget))
    }

    /// Sets the side channel of each run (default: none). It is told only what happens
    /// live: a step read back from the journal after a crash is not shown again.
    #[must_use]
    pub fn receivers(self, receivers: ReceiverFactory) -> Self {
        self.with(|e| e.receivers = receivers)
    }

    /// Gives every run this jitter seed instead of the engine's (which differs between
    /// invocations and is the same on every replay of one): to reproduce a run. Agents
    /// sharing one seed retry in lockstep; a fleet should not.
    #[must_use]
    pub fn seed(self, seed: u64) -> Self {
        self.with(|e| e.seed = Some(seed))
    }

    /// Sets what each run's telemetry records beyond its spans' standard attributes (an
    /// agent name, message content) and, with the `otel` feature of `rebound-effects`, the
    /// meter of its metrics. A run makes the spans and metrics of
    /// [`Runner::run`](rebound_effects::runner::Runner::run)
    /// ([`telemetry`](rebound_effects::telemetry)) whatever is set here, when a `tracing`
    /// subscriber listens; its `gen_ai.conversation.id` is the object's key. Only what
    /// happens live is exported: after a crash, the steps read back from the journal are
    /// not exported again, and the resumed run's `invoke_agent` span begins at its
    /// resumption.
    #[must_use]
    pub fn telemetry(self, telemetry: Telemetry) -> Self {
        self.with(|e| e.telemetry = telemetry)
    }

    /// Names the embedder's `secrets` (keys, tokens its tools or gateways use), besides the
    /// credentials each provider names ([`Provider::secrets`]): every failure of a run has
    /// them masked (`***`) before it is journaled, shown, exported or traced, as
    /// [`Runner::secrets`](rebound_effects::runner::Runner::secrets) does.
    #[must_use]
    pub fn secrets(self, secrets: Secrets) -> Self {
        self.with(|e| e.secrets = secrets)
    }

    /// Writes each run's trace into `dir` (created if missing), as
    /// `<object key>-<invocation id>.jsonl`: the format of `rebound_core::trace`, which
    /// `rebound replay` replays. Written when the run ends, by the execution that ends it
    /// (after a crash, the journal's replay rebuilds the same steps), so a run that crashed
    /// and resumed has one whole trace.
    #[must_use]
    pub fn traces(self, dir: impl Into<std::path::PathBuf>) -> Self {
        let dir = dir.into();
        self.with(|e| e.traces = Some(dir))
    }
}

#[restate_sdk::object(name = "Agent")]
impl DurableAgent {
    /// Runs one turn of the conversation: see [`DurableAgent`].
    #[handler]
    async fn run(
        &self,
        ctx: ObjectContext<'_>,
        input: Json<TurnInput>,
    ) -> Result<Json<TurnReply>, HandlerError> {
        let TurnInput { message } = input.into_inner();
        if message.trim().is_empty() {
            return Err(TerminalError::new_with_code(
                400,
                "the message is empty: give the user message that starts the turn",
            )
            .into());
        }
        let conversation = ctx
            .get::<Json<Conversation>>(CONVERSATION_KEY)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        drive(&self.effects, &ctx, conversation, message).await
    }

    /// The conversation so far (empty for a new id).
    #[handler]
    async fn conversation(
        &self,
        ctx: SharedObjectContext<'_>,
    ) -> Result<Json<Conversation>, HandlerError> {
        Ok(ctx
            .get::<Json<Conversation>>(CONVERSATION_KEY)
            .await?
            .unwrap_or_default())
    }

    /// Forgets the conversation.
    #[handler]
    async fn reset(&self, ctx: ObjectContext<'_>) -> Result<(), HandlerError> {
        ctx.clear(CONVERSATION_KEY);
        Ok(())
    }
}

/// Serves `agent` on `listener` until the process ends: the endpoint Restate calls, over
/// HTTP/2.
///
/// Each connection is accepted with `TCP_NODELAY`: a journaled step is two messages to
/// Restate, the step's start and, when its work (a request, a tool call) ends, its outcome;
/// with Nagle's algorithm on, the outcome waited for Restate to acknowledge the start, which
/// Linux delays by up to 40 ms, on every step whose work was not done at once.
pub async fn serve(agent: DurableAgent, listener: tokio::net::TcpListener) {
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(Endpoint::builder().bind(agent).build());
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors and the like: back off briefly, keep serving.
            Err(e) => {
                tracing::warn!(target: "rebound::durable", "cannot accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(target: "rebound::durable", "cannot set TCP_NODELAY: {e}");
        }
        let connection =
            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint.clone());
        tokio::spawn(async move {
            // A connection Restate closed, or lost: Restate calls again.
            let _ = connection.await;
        });
    }
}

/// Whether a failed context call is Restate's cancel of the invocation.
fn canceled(error: &TerminalError) -> bool {
    error.code() == 409
}

/// One turn inside the `run` handler: the effects, the engine's context, the run's clock,
/// its side channel and telemetry. The run itself (machine, tally, trace, end) is core's
/// [`Run`].
struct Turn<'a, 'ctx> {
    effects: &'a Arc<Effects>,
    ctx: &'a ObjectContext<'ctx>,
    clock: RunClock,
    /// The side channel and the telemetry, told what happens once a step has run here
    /// rather than been read from the journal.
    live: Live,
    /// Whether the invocation's cancel took effect: no work starts after it, and the
    /// machine hears the cancel at the first command that would start some.
    canceled: bool,
    /// When it took effect (Unix ms, journaled).
    canceled_at: Option<u64>,
    /// Masked in every failure before it is journaled or told.
    secrets: Secrets,
}

/// What a journaled step gave.
enum Stepped<T> {
    /// Its outcome (run now, or read from the journal).
    Done(T),
    /// The invocation was canceled while it ran: its outcome when it had finished.
    Canceled(Option<T>),
}

async fn drive(
    effects: &Arc<Effects>,
    ctx: &ObjectContext<'_>,
    conversation: Conversation,
    message: String,
) -> Result<Json<TurnReply>, HandlerError> {
    // The engine's deterministic seed (the same on every replay of this invocation, and
    // below 2^53 so that JSON readers keep it exact), unless the agent was given one.
    let seed = effects.seed.unwrap_or_else(|| ctx.random_seed() >> 11);
    let live = Live::new(
        (effects.receivers)(ctx.key()),
        effects.telemetry.clone().conversation_id(ctx.key()),
        effects.config.clone(),
        effects.providers.iter().map(|p| p.label()).collect(),
        seed,
        // Each call's span is the executor's when it makes them, else this shell's.
        true,
    );
    let mut turn = Turn {
        effects,
        ctx,
        // No step of its own for the run's start: its first step journals the origin.
        clock: RunClock::unstarted(),
        live,
        canceled: false,
        canceled_at: None,
        secrets: effects.all_secrets(),
    };
    let mut run = Run::with_conversation(effects.config.clone(), seed, conversation)
        .recording(effects.traces.is_some())
        .with_secrets(turn.secrets.clone())
        .meta("driver", "rebound-durable")
        .meta("object", ctx.key());
    for (i, p) in effects.providers.iter().enumerate() {
        run = run.meta(format!("target.{i}"), p.label());
    }
    let first = Event::UserMessage {
        content: vec![ContentBlock::text(message)],
    };
    turn.live.event(&first);
    let _ = run.handle(turn.clock.now(), first);
    while let Some(action) = run.poll() {
        if let Some(event) = turn.execute(action, &mut run).await? {
            let event = turn.secrets.redact_event(event);
            turn.live.event(&event);
            let _ = run.report(turn.clock.now(), event);
        }
    }
    if turn.clock.is_unstarted() {
        // No step journaled, here or before: the run is new (or ended with no step before,
        // and is told again), and is told from its start.
        turn.live.go_live(true);
    }
    let header = run.header();
    let RunParts {
        conversation,
        tally: mut stats,
        steps,
        end,
        ..
    } = run.into_parts();
    ctx.set(CONVERSATION_KEY, Json(conversation.clone()));
    stats.elapsed_ms = turn.clock.now().0;
    if let Some(dir) = &effects.traces {
        // Written by the execution that ends the run (a replay after a crash rebuilds the
        // same steps from the journal); best effort: the run's outcome does not hang on it.
        let name = format!(
            "{}-{}.jsonl",
            file_safe(ctx.key()),
            file_safe(ctx.invocation_id())
        );
        if let Err(e) = write_trace(&dir.join(name), &header, &steps) {
            tracing::warn!(target: "rebound::durable", "cannot write the run's trace: {e}");
        }
    }
    let result = match end {
        Some(Ok(Ended { reason, turns })) => Ok((reason, turns)),
        Some(Err(error)) => Err(error),
        None => Err(RunError::Invariant {
            message: "the run ended without a terminal command".into(),
        }),
    };
    turn.live.finish(&result, &stats);
    // The run's span ends here, after every span in it.
    drop(turn);
    match result {
        Ok((reason, turns)) => {
            let text = conversation
                .messages()
                .iter()
                .rev()
                .find(|m| m.role == Role::Assistant)
                .map(|m| m.text())
                .unwrap_or_default();
            Ok(Json(TurnReply {
                reason,
                turns,
                text,
                seed,
                stats,
            }))
        }
        Err(error) => Err(RunFailure::new(error, stats)
            .with_seed(seed)
            .into_terminal()
            .into()),
    }
}

/// `s` with every character but ASCII letters, digits, `-` and `_` replaced, for a file name.
fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes a run's trace: the header, then its steps.
fn write_trace(
    path: &std::path::Path,
    header: &rebound_core::trace::TraceHeader,
    steps: &[rebound_core::run::Step],
) -> std::io::Result<()> {
    let file = rebound_effects::private_file::create(path)?;
    let mut writer = rebound_core::trace::TraceWriter::new(std::io::BufWriter::new(file), header)?;
    for step in steps {
        writer.write_step(&step.to_trace())?;
    }
    std::io::Write::flush(&mut writer.into_inner())
}

impl Turn<'_, '_> {
    /// Runs `work` as the journaled step `name` (or reads its outcome from the journal).
    ///
    /// A cancel that arrives while it runs takes effect when it ends: Restate runs a step to
    /// its end, journals its outcome, and answers the await with the cancel instead. The
    /// outcome `work` gave is kept here for that case and journaled again with the moment
    /// the cancel took effect ([`CancelStep`]), so that the machine hears what finished
    /// before the cancel, on every replay alike.
    async fn journaled<T, F, Fut>(
        &mut self,
        name: String,
        work: F,
    ) -> Result<Stepped<T>, HandlerError>
    where
        T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        F: FnOnce(RunClock) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send,
    {
        let live = self.live.clone();
        let clock = self.clock;
        let finished: Arc<Mutex<Option<Entry<T>>>> = Arc::new(Mutex::new(None));
        let kept = Arc::clone(&finished);
        let step = self
            .ctx
            .run(move || async move {
                let (clock, origin_ms) = clock.in_step(unix_ms());
                live.go_live(origin_ms.is_some());
                let entry = Entry {
                    origin_ms,
                    step: work(clock).await,
                };
                *kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(entry.clone());
                Ok(Json(entry))
            })
            .name(name)
            .await;
        match step {
            Ok(entry) => Ok(Stepped::Done(self.started(entry.into_inner()))),
            Err(e) if canceled(&e) => {
                let finished = finished
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                self.cancel_took_effect(finished)
                    .await
                    .map(Stepped::Canceled)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Reads a journaled entry's origin into the clock (the run's first step has one).
    fn started<T>(&mut self, entry: Entry<T>) -> T {
        if let Some(origin) = entry.origin_ms {
            self.clock.start_at(origin);
        }
        entry.step
    }

    /// Journals the cancel ([`CancelStep`]) with `finished`, the outcome of the step it
    /// interrupted when that step had finished; returns that outcome as the journal holds
    /// it. From now on no work starts.
    async fn cancel_took_effect<T>(
        &mut self,
        finished: Option<Entry<T>>,
    ) -> Result<Option<T>, HandlerError>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let live = self.live.clone();
        let clock = self.clock;
        let step = self
            .ctx
            .run(move || async move {
                let now = unix_ms();
                // Canceled before any step finished: the cancel starts the run's clock.
                let origin_ms = match &finished {
                    Some(Entry {
                        origin_ms: Some(_), ..
                    }) => None,
                    _ => clock.in_step(now).1,
                };
                live.go_live(origin_ms.is_some());
                Ok(Json(Entry {
                    origin_ms,
                    step: CancelStep {
                        at_ms: now,
                        finished,
                    },
                }))
            })
            .name("cancel")
            .await;
        self.canceled = true;
        match step {
            Ok(entry) => {
                let CancelStep { at_ms, finished } = self.started(entry.into_inner());
                let finished = finished.map(|entry| self.started(entry));
                self.canceled_at = Some(at_ms);
                Ok(finished)
            }
            // Canceled again while journaling the first: the run stops here, as it was.
            Err(e) if canceled(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The machine hears the cancel, at the time it took effect.
    fn cancel(&mut self) -> Event {
        if let Some(at_ms) = self.canceled_at {
            self.clock.finished_at(at_ms);
        }
        Event::Cancel
    }

    /// Executes one action of the run. Returns the event it brought (the answer to the
    /// command the run awaits), if any.
    async fn execute(
        &mut self,
        action: Action,
        run: &mut Run,
    ) -> Result<Option<Event>, HandlerError> {
        let command = match action {
            Action::StreamReset { attempt, .. } => {
                self.live.stream_reset(attempt);
                return Ok(None);
            }
            Action::Command(command) => command,
            _ => return Ok(None),
        };
        if self.canceled && command.awaits_answer() {
            return Ok(Some(self.cancel()));
        }
        // Shown and traced when live; the effect below.
        self.live.command(&command, run.tally());
        match command {
            Command::AppendMessage { .. }
            | Command::ReplaceConversation { .. }
            | Command::NotifyRetry { .. }
            | Command::NotifyFallback { .. } => {}
            Command::SendRequest {
                request,
                target,
                attempt,
                conversation,
                deadlines,
                ..
            } => {
                let effects = Arc::clone(self.effects);
                let live = self.live.clone();
                let secrets = self.secrets.clone();
                let name = format!("{request} attempt {attempt}");
                let step = self
                    .journaled(name, move |_| async move {
                        let began = Mutex::new(None);
                        let attempt = live.attempt_span();
                        let event =
                            send(&effects, target, &conversation.0, deadlines, &live, &began)
                                .instrument(attempt)
                                .await
                                .map(|outcome| match outcome {
                                    Ok(response) => Event::ProviderSucceeded { request, response },
                                    Err(failure) => Event::ProviderFailed {
                                        request,
                                        failure: secrets.redact_failure(failure),
                                    },
                                });
                        let began_at_ms = began
                            .into_inner()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        Step {
                            at_ms: unix_ms(),
                            began_at_ms,
                            streamed: false,
                            event,
                        }
                    })
                    .await?;
                return self.answered(step, request, run).await;
            }
            Command::Sleep { timer, delay_ms } => {
                // A durable timer: after a crash it still ends at the time it was set
                // for, not `delay_ms` after the restart.
                return match self.ctx.sleep(Duration::from_millis(delay_ms)).await {
                    Ok(()) => {
                        self.clock.slept(delay_ms);
                        Ok(Some(Event::TimerFired { timer }))
                    }
                    Err(e) if canceled(&e) => {
                        self.cancel_took_effect(None::<Entry<()>>).await?;
                        Ok(Some(self.cancel()))
                    }
                    Err(e) => Err(e.into()),
                };
            }
            Command::RunTools { batch, calls } => {
                return self.run_tools(batch, calls).await.map(Some);
            }
            Command::Compact {
                compaction,
                conversation,
            } => {
                let effects = Arc::clone(self.effects);
                let default = run.default_compaction();
                let secrets = self.secrets.clone();
                let step = self
                    .journaled(compaction.to_string(), move |_| async move {
                        let result = match &effects.compactor {
                            Some(c) => c
                                .compact(&conversation)
                                .await
                                .map_err(CompactionError::from),
                            None => default.compact(&conversation),
                        };
                        Step::event(
                            secrets.redact_event(Event::CompactionFinished { compaction, result }),
                        )
                    })
                    .await?;
                return Ok(self.stepped(step, run));
            }
            Command::AcquirePermit { permit, ask } => {
                let Some(budget) = self.effects.budget.clone() else {
                    return Ok(Some(Event::PermitAnswered {
                        permit,
                        decision: rebound_core::PermitDecision::Granted,
                    }));
                };
                let live = self.live.clone();
                let step = self
                    .journaled(permit.to_string(), move |clock| async move {
                        let offset = budget_offset(&clock, budget.as_ref());
                        let decision = offset.decision(budget.acquire(offset.ask(ask)).await);
                        live.budget_tokens(budget.tokens());
                        Step::event(Event::PermitAnswered { permit, decision })
                    })
                    .await?;
                return Ok(self.stepped(step, run));
            }
            Command::NoteBudget { note } => self.note(vec![note]).await?,
            // The run's end is core's; the reply says it.
            Command::Finish { .. } | Command::Fail { .. } => {}
        }
        Ok(None)
    }

    /// Tells the shared budget `notes`, as one journaled step (a replay does not tell them
    /// twice).
    async fn note(&mut self, notes: Vec<BudgetNote>) -> Result<(), HandlerError> {
        let Some(budget) = self.effects.budget.clone() else {
            return Ok(());
        };
        if notes.is_empty() {
            return Ok(());
        }
        let live = self.live.clone();
        let noted = self
            .journaled("budget note".into(), move |clock| async move {
                let offset = budget_offset(&clock, budget.as_ref());
                for note in notes {
                    budget.record(offset.note(note)).await;
                }
                live.budget_tokens(budget.tokens());
                NoteStep { at_ms: unix_ms() }
            })
            .await?;
        match noted {
            Stepped::Done(step) => self.clock.finished_at(step.at_ms),
            // The notes were told (or not); the machine hears the cancel at the next command
            // that awaits an answer.
            Stepped::Canceled(_) => {}
        }
        Ok(())
    }

    /// A request's journaled step: when its answer began, the run hears it (at the time
    /// the first piece came) and its budget notes are made; then the answer.
    ///
    /// The engine journals a step when it ends, so the start of an answer is told when the
    /// stream ended rather than while it went on (a stream cut after it began is still a
    /// retry being answered, as under the runner).
    async fn answered(
        &mut self,
        step: Stepped<Step>,
        request: RequestId,
        run: &mut Run,
    ) -> Result<Option<Event>, HandlerError> {
        let began = match &step {
            Stepped::Done(step) | Stepped::Canceled(Some(step)) => step.began_at(),
            Stepped::Canceled(None) => None,
        };
        if let Some(at_ms) = began {
            self.clock.finished_at(at_ms);
            let notes = run.responding(self.clock.now(), request);
            self.note(notes).await?;
            if run.is_ended() {
                return Ok(None);
            }
        }
        Ok(self.stepped(step, run))
    }

    /// Reads a journaled step's outcome into the clock; a cancel becomes the machine's,
    /// after the outcome of the step when it had finished.
    fn stepped(&mut self, step: Stepped<Step>, run: &mut Run) -> Option<Event> {
        let step = match step {
            Stepped::Done(step) | Stepped::Canceled(Some(step)) => step,
            Stepped::Canceled(None) => return Some(self.cancel()),
        };
        self.clock.finished_at(step.at_ms);
        match step.event {
            Ok(event) => Some(event),
            Err(message) => {
                run.broken(message);
                None
            }
        }
    }

    /// Runs a batch one call at a time, each call its own journaled step: after a crash,
    /// the calls whose results are journaled are not run again. The outcomes are handed to
    /// the machine as the tools gave them: core's rule makes them one per call.
    async fn run_tools(
        &mut self,
        batch: rebound_core::BatchId,
        calls: Vec<ToolCall>,
    ) -> Result<Event, HandlerError> {
        let mut outcomes = Vec::with_capacity(calls.len());
        let invocation = self.ctx.invocation_id().to_owned();
        let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
        for (index, call) in calls.into_iter().enumerate() {
            let effects = Arc::clone(self.effects);
            let key = format!("{invocation}/{batch}/{}", call.id);
            let name = format!("tool {} {}", call.name, call.id);
            let live = self.live.clone();
            let secrets = self.secrets.clone();
            let step = self
                .journaled(name, move |_| async move {
                    let id = call.id.clone();
                    let outcomes =
                        match with_key(key, live.in_tool_batch(one_call(&effects, call))).await {
                            BatchOutcome::PerCall(each) => each,
                            BatchOutcome::WholeBatch(failure) => {
                                vec![CallOutcome::new(id, Err(failure))]
                            }
                        };
                    CallStep {
                        at_ms: unix_ms(),
                        outcomes: outcomes
                            .into_iter()
                            .map(|o| secrets.redact_outcome(o))
                            .collect(),
                    }
                })
                .await?;
            let finished = match step {
                Stepped::Done(step) | Stepped::Canceled(Some(step)) => Some(step),
                Stepped::Canceled(None) => None,
            };
            let mut next = index;
            if let Some(step) = finished {
                self.clock.finished_at(step.at_ms);
                next = index + 1;
                // The host failed (out of memory, canceled): the batch stops here and the
                // machine fails the run, keeping the results of the calls before.
                let host_failed = step
                    .outcomes
                    .iter()
                    .any(|o| matches!(o.result, Err(ToolFailure::Host(_))));
                outcomes.extend(step.outcomes);
                if host_failed {
                    break;
                }
            }
            if self.canceled {
                // The calls after the one the cancel interrupted never start; that one
                // keeps its outcome when it finished. The machine keeps the results of
                // the calls that finished and fails the run with the cancel.
                let stopped = ToolFailure::Host(HostFailure::new(
                    HostFailureKind::Canceled,
                    "the run was canceled before this call finished",
                ));
                for id in &ids[next..] {
                    outcomes.push(CallOutcome::new(id.clone(), Err(stopped.clone())));
                }
                break;
            }
        }
        if let (true, Some(at_ms)) = (self.canceled, self.canceled_at) {
            self.clock.finished_at(at_ms);
        }
        Ok(Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::PerCall(outcomes),
        })
    }
}

/// Runs one tool call inside an `execute_tool` span: the executor's, when it makes them,
/// else one made here (the current span is the run's, with its content capture).
async fn one_call(effects: &Effects, call: ToolCall) -> BatchOutcome {
    let cancel = tokio_util::sync::CancellationToken::new();
    if effects.tools.traces_calls() {
        return effects.tools.run_batch(vec![call], &cancel).await;
    }
    let span = rebound_effects::telemetry::tool_span(&call);
    let id = call.id.clone();
    let outcome = effects
        .tools
        .run_batch(vec![call], &cancel)
        .instrument(span.clone())
        .await;
    match &outcome {
        BatchOutcome::PerCall(each) => {
            if let Some(call) = each.iter().find(|c| c.tool_use_id == id) {
                rebound_effects::telemetry::record_tool_result(&span, &call.result);
            }
        }
        BatchOutcome::WholeBatch(failure) => {
            rebound_effects::telemetry::record_tool_result(&span, &Err(failure.clone()));
        }
    }
    outcome
}

/// The offset between the run's clock and `budget`'s, read now (inside a step).
fn budget_offset(clock: &RunClock, budget: &dyn BudgetStore) -> BudgetOffset {
    let machine = clock.machine_time_of(unix_ms());
    let budget_now =
        Millis(u64::try_from(budget.origin().elapsed().as_millis()).unwrap_or(u64::MAX));
    BudgetOffset::between(machine, budget_now)
}

/// Sends one request, streaming its text to the side channel. `Err`: the conversation could
/// not be sent at all (the run fails with this message, as the runner's does).
async fn send(
    effects: &Effects,
    target: usize,
    conversation: &Conversation,
    deadlines: rebound_core::StreamDeadlines,
    live: &Live,
    began: &Mutex<Option<u64>>,
) -> Result<Result<rebound_core::AssistantResponse, rebound_core::ProviderFailure>, String> {
    let Some(provider) = effects.providers.get(target) else {
        return Err(format!("no provider is configured for target {target}"));
    };
    let mut sink = |delta: rebound_core::wire::StreamDelta<&str>| {
        let mut began = began
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if began.is_none() {
            *began = Some(unix_ms());
        }
        drop(began);
        // The side channel is best effort: a UI that went away does not stop the run.
        live.delta(&delta);
        true
    };
    let request =
        ProviderRequest::new(conversation, &effects.config.tools).with_deadlines(deadlines);
    match provider.send(request, &mut sink).await {
        Ok(response) => Ok(Ok(response)),
        Err(SendError::Provider(failure)) => Ok(Err(failure)),
        Err(SendError::Request(e)) => Err(e.to_string()),
        Err(SendError::Stopped) => Err(format!(
            "provider {} stopped reading though nothing asked it to",
            provider.label()
        )),
        Err(other) => Err(other.to_string()),
    }
}
