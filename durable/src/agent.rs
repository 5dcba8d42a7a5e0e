//! The Virtual Object that runs agents durably: one object per conversation id, whose
//! `run` handler drives an [`AgentMachine`] through Restate's journal.

use crate::clock::{unix_ms, BudgetOffset, RunClock};
use crate::failure::RunFailure;
use crate::idempotency::with_key;
use crate::journal::{CallStep, CancelStep, Step};
use rebound_core::{
    compact, AgentMachine, BatchOutcome, CallOutcome, Command, CompactionError, ContentBlock,
    Conversation, Event, FinishReason, HostFailure, HostFailureKind, MachineConfig, Millis, Role,
    RunError, RunTally, ToolCall, ToolFailure,
};
use rebound_effects::budget::BudgetStore;
use rebound_effects::provider::{Provider, ProviderRequest, SendError};
use rebound_effects::receiver::{NullReceiver, Receiver};
use rebound_effects::runner::{Compactor, NoTools, ToolExecutor};
use restate_sdk::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
}

/// Everything the durable agent runs with, shared by all its invocations.
struct Effects {
    config: MachineConfig,
    providers: Vec<Box<dyn Provider>>,
    tools: Arc<dyn ToolExecutor>,
    compactor: Option<Arc<dyn Compactor>>,
    budget: Option<Arc<dyn BudgetStore>>,
    receivers: ReceiverFactory,
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
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let key = ApiKey::new(std::env::var("ANTHROPIC_API_KEY")?);
/// let provider = HttpProvider::new(HttpProviderConfig::new(
///     ProviderKind::Anthropic, "claude-sonnet-4-5", key))?;
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

/// Serves `agent` on `listener` until the process ends: the endpoint Restate calls.
pub async fn serve(agent: DurableAgent, listener: tokio::net::TcpListener) {
    HttpServer::new(Endpoint::builder().bind(agent).build())
        .serve(listener)
        .await;
}

fn lock(receiver: &Mutex<Box<dyn Receiver>>) -> MutexGuard<'_, Box<dyn Receiver>> {
    receiver
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether a failed context call is Restate's cancel of the invocation.
fn canceled(error: &TerminalError) -> bool {
    error.code() == 409
}

/// One run of the machine inside the `run` handler.
struct Run<'a, 'ctx> {
    effects: &'a Arc<Effects>,
    ctx: &'a ObjectContext<'ctx>,
    clock: RunClock,
    /// Whether a step has run here rather than been read from the journal: from then on
    /// the run is live, and its side channel is told what happens.
    live: Arc<AtomicBool>,
    receiver: Arc<Mutex<Box<dyn Receiver>>>,
    tally: RunTally,
    /// Whether the invocation's cancel took effect: no work starts after it, and the
    /// machine hears the cancel at the first command that would start some.
    canceled: bool,
    /// When it took effect (Unix ms, journaled).
    canceled_at: Option<u64>,
}

enum Flow {
    Next(Event),
    Done(Result<(FinishReason, u32), RunError>),
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
    let mut run = Run {
        effects,
        ctx,
        clock: RunClock::new(0),
        live: Arc::new(AtomicBool::new(false)),
        receiver: Arc::new(Mutex::new((effects.receivers)(ctx.key()))),
        tally: RunTally::default(),
        canceled: false,
        canceled_at: None,
    };
    let started = match run
        .journaled("start".into(), || async { unix_ms() })
        .await?
    {
        Stepped::Done(at) | Stepped::Canceled(Some(at)) => at,
        // Canceled before the run started: it starts, and ends, then (or, canceled twice
        // so quickly that no time was journaled, at the clock's origin).
        Stepped::Canceled(None) => run.canceled_at.unwrap_or(0),
    };
    run.clock = RunClock::new(started);
    // The engine's deterministic seed: the same on every replay of this invocation, and
    // below 2^53 so that JSON readers keep it exact.
    let seed = ctx.random_seed() >> 11;
    let mut machine = AgentMachine::with_conversation(effects.config.clone(), seed, conversation);
    let mut event = Event::UserMessage {
        content: vec![ContentBlock::text(message)],
    };
    let result = loop {
        if machine.is_terminal() {
            break match machine.outcome() {
                Some(Err(error)) => Err(error.clone()),
                _ => Err(RunError::Invariant {
                    message: format!("the run answered a finished machine with {event:?}"),
                }),
            };
        }
        let now = run.clock.now();
        run.tally.event(now, &event);
        let commands = machine.step(now, event);
        for command in &commands {
            run.tally.command(command);
        }
        match run.execute(commands).await? {
            Flow::Next(next) => event = next,
            Flow::Done(done) => break done,
        }
    };
    let conversation = machine.into_conversation();
    ctx.set(CONVERSATION_KEY, Json(conversation.clone()));
    run.tally.elapsed_ms = run.clock.now().0;
    let live = run.live.load(Ordering::SeqCst);
    let mut receiver = lock(&run.receiver);
    match result {
        Ok((reason, turns)) => {
            if live {
                // The side channel is best effort: the turn is done and saved.
                let _ = receiver.totals(&run.tally);
                let _ = receiver.finished(&reason, turns);
            }
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
                stats: run.tally,
            }))
        }
        Err(error) => {
            if live {
                let _ = receiver.totals(&run.tally);
                receiver.error(&error);
            }
            Err(RunFailure::new(error, run.tally).into_terminal().into())
        }
    }
}

impl Run<'_, '_> {
    fn is_live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }

    /// Tells the side channel, when live; a failing side channel does not stop a durable
    /// run (its output is not part of the journal).
    fn show(&self, tell: impl FnOnce(&mut dyn Receiver)) {
        if self.is_live() {
            tell(lock(&self.receiver).as_mut());
        }
    }

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
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send,
    {
        let live = Arc::clone(&self.live);
        let finished: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let kept = Arc::clone(&finished);
        let step = self
            .ctx
            .run(move || async move {
                live.store(true, Ordering::SeqCst);
                let outcome = work().await;
                *kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(outcome.clone());
                Ok(Json(outcome))
            })
            .name(name)
            .await;
        match step {
            Ok(outcome) => Ok(Stepped::Done(outcome.into_inner())),
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

    /// Journals the cancel ([`CancelStep`]) with `finished`, the outcome of the step it
    /// interrupted when that step had finished; returns that outcome as the journal holds
    /// it. From now on no work starts.
    async fn cancel_took_effect<T>(
        &mut self,
        finished: Option<T>,
    ) -> Result<Option<T>, HandlerError>
    where
        T: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        let live = Arc::clone(&self.live);
        let step = self
            .ctx
            .run(move || async move {
                live.store(true, Ordering::SeqCst);
                Ok(Json(CancelStep {
                    at_ms: unix_ms(),
                    finished,
                }))
            })
            .name("cancel")
            .await;
        self.canceled = true;
        match step {
            Ok(step) => {
                let step = step.into_inner();
                self.canceled_at = Some(step.at_ms);
                Ok(step.finished)
            }
            // Canceled again while journaling the first: the run stops here, as it was.
            Err(e) if canceled(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The machine hears the cancel, at the time it took effect.
    fn cancel(&mut self) -> Flow {
        if let Some(at_ms) = self.canceled_at {
            self.clock.finished_at(at_ms);
        }
        Flow::Next(Event::Cancel)
    }

    /// Reads a journaled step's outcome into the clock; a cancel becomes the machine's,
    /// after the outcome of the step when it had finished.
    fn stepped(&mut self, step: Stepped<Step>) -> Flow {
        let step = match step {
            Stepped::Done(step) | Stepped::Canceled(Some(step)) => step,
            Stepped::Canceled(None) => return self.cancel(),
        };
        self.clock.finished_at(step.at_ms);
        if step.streamed && matches!(step.event, Ok(Event::ProviderFailed { .. })) {
            self.tally.stream_reset();
        }
        match step.event {
            Ok(event) => Flow::Next(event),
            Err(message) => Flow::Done(Err(RunError::Invariant { message })),
        }
    }

    async fn execute(&mut self, commands: Vec<Command>) -> Result<Flow, HandlerError> {
        for command in commands {
            if self.canceled && command.awaits_answer() {
                return Ok(self.cancel());
            }
            match command {
                Command::AppendMessage { message } => self.show(|r| {
                    let _ = r.message(&message);
                    for result in message.tool_results() {
                        let _ = r.tool_result(result);
                    }
                }),
                Command::ReplaceConversation { report, .. } => self.show(|r| {
                    let _ = r.compaction(&report);
                }),
                Command::NotifyRetry { info } => self.show(|r| {
                    let _ = r.provider_retry(&info);
                }),
                Command::NotifyFallback { info } => self.show(|r| {
                    let _ = r.fallback(&info);
                }),
                Command::SendRequest {
                    request,
                    target,
                    attempt,
                    conversation,
                    deadlines,
                    ..
                } => {
                    let effects = Arc::clone(self.effects);
                    let receiver = Arc::clone(&self.receiver);
                    let name = format!("{request} attempt {attempt}");
                    let step = self
                        .journaled(name, move || async move {
                            let streamed = AtomicBool::new(false);
                            let event = send(
                                &effects,
                                target,
                                &conversation.0,
                                deadlines,
                                &receiver,
                                &streamed,
                            )
                            .await
                            .map(|outcome| match outcome {
                                Ok(response) => Event::ProviderSucceeded { request, response },
                                Err(failure) => Event::ProviderFailed { request, failure },
                            });
                            let streamed = streamed.into_inner();
                            if streamed && matches!(event, Ok(Event::ProviderFailed { .. })) {
                                let _ = lock(&receiver).stream_reset(attempt);
                            }
                            Step {
                                at_ms: unix_ms(),
                                streamed,
                                event,
                            }
                        })
                        .await?;
                    return Ok(self.stepped(step));
                }
                Command::Sleep { timer, delay_ms } => {
                    // A durable timer: after a crash it still ends at the time it was set
                    // for, not `delay_ms` after the restart.
                    return match self.ctx.sleep(Duration::from_millis(delay_ms)).await {
                        Ok(()) => {
                            self.clock.slept(delay_ms);
                            Ok(Flow::Next(Event::TimerFired { timer }))
                        }
                        Err(e) if canceled(&e) => {
                            self.cancel_took_effect(None::<()>).await?;
                            Ok(self.cancel())
                        }
                        Err(e) => Err(e.into()),
                    };
                }
                Command::RunTools { batch, calls } => {
                    self.show(|r| {
                        for call in &calls {
                            let _ = r.tool_start(call);
                        }
                    });
                    return self.run_tools(batch, calls).await;
                }
                Command::Compact {
                    compaction,
                    conversation,
                } => {
                    let effects = Arc::clone(self.effects);
                    let step = self
                        .journaled(compaction.to_string(), move || async move {
                            let result = match &effects.compactor {
                                Some(c) => c
                                    .compact(&conversation)
                                    .await
                                    .map_err(CompactionError::from),
                                None => compact(&conversation, &effects.config.compaction),
                            };
                            Step::event(Event::CompactionFinished { compaction, result })
                        })
                        .await?;
                    return Ok(self.stepped(step));
                }
                Command::AcquirePermit { permit, ask } => {
                    let Some(budget) = self.effects.budget.clone() else {
                        return Ok(Flow::Next(Event::PermitAnswered {
                            permit,
                            decision: rebound_core::PermitDecision::Granted,
                        }));
                    };
                    let clock = self.clock;
                    let step = self
                        .journaled(permit.to_string(), move || async move {
                            let offset = budget_offset(&clock, budget.as_ref());
                            let decision = offset.decision(budget.acquire(offset.ask(ask)).await);
                            Step::event(Event::PermitAnswered { permit, decision })
                        })
                        .await?;
                    return Ok(self.stepped(step));
                }
                Command::NoteBudget { note } => {
                    if let Some(budget) = self.effects.budget.clone() {
                        let clock = self.clock;
                        // Journaled, so that a replay does not tell the budget twice.
                        let noted = self
                            .journaled("budget note".into(), move || async move {
                                let offset = budget_offset(&clock, budget.as_ref());
                                budget.record(offset.note(note)).await;
                                unix_ms()
                            })
                            .await?;
                        match noted {
                            Stepped::Done(at_ms) => self.clock.finished_at(at_ms),
                            // The note was made (or not); the machine hears the cancel at
                            // the next command that awaits an answer.
                            Stepped::Canceled(_) => {}
                        }
                    }
                }
                Command::Finish { reason, turns } => return Ok(Flow::Done(Ok((reason, turns)))),
                Command::Fail { error } => return Ok(Flow::Done(Err(*error))),
            }
        }
        Ok(Flow::Done(Err(RunError::Invariant {
            message: "the machine emitted no command to wait on and did not stop".into(),
        })))
    }

    /// Runs a batch one call at a time, each call its own journaled step: after a crash,
    /// the calls whose results are journaled are not run again.
    async fn run_tools(
        &mut self,
        batch: rebound_core::BatchId,
        calls: Vec<ToolCall>,
    ) -> Result<Flow, HandlerError> {
        let mut outcomes = Vec::with_capacity(calls.len());
        let invocation = self.ctx.invocation_id().to_owned();
        let ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
        for call in calls {
            let effects = Arc::clone(self.effects);
            let key = format!("{invocation}/{batch}/{}", call.id);
            let name = format!("tool {} {}", call.name, call.id);
            let step = self
                .journaled(name, move || async move {
                    let id = call.id.clone();
                    let cancel = tokio_util::sync::CancellationToken::new();
                    let outcome = with_key(key, effects.tools.run_batch(vec![call], &cancel)).await;
                    let outcome = match outcome {
                        BatchOutcome::PerCall(mut each) if each.len() == 1 => Ok(each.remove(0)),
                        BatchOutcome::PerCall(each) => Ok(CallOutcome::model_error(
                            &id,
                            format!("the tool answered {} outcomes for one call", each.len()),
                        )),
                        BatchOutcome::WholeBatch(ToolFailure::Model { message }) => {
                            Ok(CallOutcome::model_error(&id, message))
                        }
                        BatchOutcome::WholeBatch(failure) => Err(failure),
                    };
                    CallStep {
                        at_ms: unix_ms(),
                        outcome,
                    }
                })
                .await?;
            let id = &ids[outcomes.len()];
            let finished = match step {
                Stepped::Done(step) | Stepped::Canceled(Some(step)) => Some(step),
                Stepped::Canceled(None) => None,
            };
            if let Some(step) = finished {
                self.clock.finished_at(step.at_ms);
                match step.outcome {
                    Ok(outcome) => outcomes.push(outcome),
                    // The host failed (out of memory, canceled): the batch stops here and
                    // the machine fails the run, keeping the results of the calls before.
                    Err(failure) => {
                        outcomes.push(CallOutcome::new(id.clone(), Err(failure)));
                        break;
                    }
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
                for id in &ids[outcomes.len()..] {
                    outcomes.push(CallOutcome::new(id.clone(), Err(stopped.clone())));
                }
                break;
            }
        }
        if let (true, Some(at_ms)) = (self.canceled, self.canceled_at) {
            self.clock.finished_at(at_ms);
        }
        Ok(Flow::Next(Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::PerCall(outcomes),
        }))
    }
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
    receiver: &Mutex<Box<dyn Receiver>>,
    streamed: &AtomicBool,
) -> Result<Result<rebound_core::AssistantResponse, rebound_core::ProviderFailure>, String> {
    let Some(provider) = effects.providers.get(target) else {
        return Err(format!("no provider is configured for target {target}"));
    };
    let mut sink = |delta: rebound_core::wire::StreamDelta<&str>| {
        streamed.store(true, Ordering::Relaxed);
        // The side channel is best effort: a UI that went away does not stop the run.
        let _ = lock(receiver).delta(&delta);
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
