//! The sans-IO agent machine: events in, commands out, time passed in.

mod command;
mod config;
mod error;
mod event;
mod ids;
mod redact;

pub use command::{
    Command, FallbackInfo, FinishReason, ProviderRetryInfo, RequestPurpose, Snapshot,
};
pub use config::{BudgetUse, MachineConfig, StreamDeadlines, TargetSpec};
pub use error::{GiveUp, RunError, TargetFailure};
pub use event::{Event, Handled, IgnoreReason};
pub use ids::{BatchId, CompactionId, PermitId, RequestId, TimerId};

use crate::budget::{BudgetNote, PermitAsk, PermitDecision, PermitKind};
use crate::compaction::{
    summarized, summary_request, CompactionError, CompactionMethod, CompactionReason,
    CompactionReport, SummaryRequest,
};
use crate::conversation::{ContentBlock, Conversation, Message, Role, ToolResultPart};
use crate::failure::{FailureAction, FailureKind, ProviderFailure, TransportFault};
use crate::response::{AssistantResponse, InputProblemKind, StopReason, ToolInputProblem};
use crate::retry::RetryDelay;
use crate::secrets::Secrets;
use crate::time::Millis;
use crate::tool::{
    nests_deeper_than, tool_error_text, BatchOutcome, HostFailure, ToolCall, ToolFailure,
    MAX_TOOL_INPUT_DEPTH,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// An agent loop as a pure state machine: it decides, the driver acts.
///
/// The machine owns the conversation and every decision about it — when to call the
/// provider, whether a failure is retried (and after how long), compacted, turned into a tool
/// error result, or returned to the embedder. It performs no I/O and never reads a clock: the
/// driver feeds it [`Event`]s with the current time and executes the [`Command`]s it emits.
/// The same machine runs under the tokio runner, the virtual-clock simulator, and replay.
///
/// # Methods, by kind
///
/// - **Getters** (`&self`): [`conversation`](Self::conversation), [`turns`](Self::turns),
///   [`target`](Self::target), [`is_terminal`](Self::is_terminal),
///   [`outcome`](Self::outcome), [`config`](Self::config).
/// - **Inputs**: [`handle`](Self::handle)`(now, event)` — the user's message, provider
///   answers, tool outcomes, timers, compaction results, budget permits, host failures,
///   cancel. Every answer carries the id of the command it answers; stale or duplicate
///   answers are ignored and reported as [`Handled::Ignored`].
/// - **Outputs**: [`poll`](Self::poll) — the next [`Command`] to execute, in order.
///   [`step`](Self::step) is `handle` followed by draining `poll`, for tests and traces.
///
/// # How to drive it
///
/// 1. Create it with [`new`](Self::new) (or [`with_conversation`](Self::with_conversation)
///    to continue a saved session), then `handle` an [`Event::UserMessage`] (or
///    [`Event::Resume`]).
/// 2. After **every** `handle`, drain `poll` until it returns `None`, executing commands in
///    the order given: `AppendMessage` / `ReplaceConversation` persist, `Notify*` inform the
///    UI (before the `Sleep` that follows them), `NoteBudget` goes to the shared budget, and
///    `SendRequest`, `Sleep`, `RunTools`, `Compact` and `AcquirePermit` start work whose
///    answer you `handle` later.
/// 3. `Finish` and `Fail` are terminal: after them the machine ignores every input.
///
/// A driver that streams answers may also `handle` [`Event::ProviderResponding`] when the
/// answer to a `SendRequest` begins, before its `ProviderSucceeded`/`ProviderFailed`. It is
/// optional and answers nothing: with a shared budget, a retry being answered is noted to it
/// then (`NoteBudget`), a whole answer sooner than its success would tell it.
///
/// **At most one command awaits an answer at a time.** Of the five commands that want one
/// (`SendRequest`, `Sleep`, `RunTools`, `Compact`, `AcquirePermit`), the machine never emits
/// a second while the first is unanswered, and until the run ends exactly one is always
/// awaited (the machine never stalls waiting for nothing). A driver may therefore keep a
/// single "pending" slot, and a cancel needs to stop only that one piece of work. The test
/// `core/tests/it/one_awaited_command.rs` drives random event sequences, stale and duplicate
/// answers included, and checks both.
///
/// A `SendRequest` whose `purpose` is [`RequestPurpose::Summary`] asks the current target
/// for a summary of older turns during a compaction (see [`crate::compaction`]): send it
/// like any other request and answer with `ProviderSucceeded`/`ProviderFailed`; its answer
/// is never appended. Compaction runs on a context overflow, or before a request when the
/// previous one's reported input tokens reached
/// [`MachineConfig::compact_threshold_percent`] of the target's context window — at most once
/// per request.
///
/// # Reasoning goes back only to its owner
///
/// Encrypted reasoning (Responses `encrypted_content`) and signed thinking can be read back
/// only by the target that produced them. The machine records the current target's
/// [`TargetSpec::identity`] on each such block of an assistant message it appends (sessions
/// keep it); the request builders leave out blocks another identity owns; and reasoning of an
/// unknown owner (old sessions, targets without an identity) is sent to the primary target
/// only, and only while the conversation holds no reasoning of a known owner. A provider that refuses reasoning anyway ([`FailureKind::ReasoningRejected`]: 400
/// `invalid_encrypted_content`, or an invalid thinking signature) gets the request once more,
/// at once and at no attempt's cost, without any reasoning — announced by a
/// [`Command::NotifyRetry`] whose [`ProviderRetryInfo::is_without_reasoning`] is true. Refused
/// again, the run fails with [`GiveUp::ReasoningRejectedAgain`]; and reasoning of an unknown
/// owner is not sent again in the run.
///
/// # Time
///
/// `now` is [`Millis`] on any monotonic millisecond clock the driver chooses (since the run
/// started, since the process started, a virtual clock), and it must never go backwards (a
/// smaller value counts as the latest one seen). The machine only compares and subtracts
/// times, so the origin does not matter — with one exception: with a shared retry budget
/// ([`MachineConfig::retry_budget`]) it must be **the budget's clock** (its origin), because
/// the absolute times in permit asks, budget answers and notes are compared with other
/// machines' times (see [`Command`]). The only randomness is retry jitter, drawn from an RNG
/// seeded by `seed`, and the chosen delay is written into the `Sleep` command — so commands
/// are a pure function of (config, seed, events), and a trace of them replays exactly.
///
/// # From bytes to events
///
/// The machine takes a complete [`AssistantResponse`] or a classified [`ProviderFailure`];
/// turning HTTP into those is pure too and lives in this crate, for drivers with their own
/// HTTP client: [`crate::wire`] builds each provider's request body
/// ([`wire::request_body`](crate::wire::request_body)), decodes its SSE stream incrementally
/// and assembles the response ([`wire::StreamDecoder`](crate::wire::StreamDecoder)), or
/// parses a non-streamed one ([`wire::parse_response`](crate::wire::parse_response));
/// [`crate::classify`] turns an error status, headers and body into a `ProviderFailure`
/// ([`classify_http`](crate::classify::classify_http)), and so does a failed exchange
/// without a usable response
/// ([`classify_transport_error`](crate::classify::classify_transport_error)).
///
/// # Example: a blocking driver that answers every command
///
/// The `match` has no catch-all arm on purpose: [`Command`] is exhaustive, so when a release
/// adds a command this driver stops compiling instead of silently ignoring it.
///
/// ```
/// use rebound_core::*;
/// use serde_json::json;
///
/// let read = ToolSpec {
///     name: "read".into(),
///     description: "Reads a file.".into(),
///     input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
/// };
/// let config = MachineConfig::default().with_tools(vec![read]);
/// let mut machine = AgentMachine::new(config, /* jitter seed */ 42);
/// let mut now = Millis(0); // any monotonic millisecond clock of yours
/// let mut inbox = vec![Event::user_text("What does README.md say?")];
/// let mut requests = 0;
/// let outcome = 'run: loop {
///     let event = inbox.pop().expect("every command that needs an answer got one");
///     let handled = machine.handle(now, event);
///     debug_assert_ne!(handled, Handled::Ignored(IgnoreReason::Unexpected)); // a driver bug
///     while let Some(command) = machine.poll() {
///         match command {
///             Command::SendRequest { request, conversation, .. } => {
///                 // Send `conversation` to your provider (see "From bytes to events").
///                 // This one is overloaded once, then calls a tool, then answers.
///                 requests += 1;
///                 let _ = conversation;
///                 inbox.push(match requests {
///                     1 => Event::ProviderFailed {
///                         request,
///                         failure: ProviderFailure::new(FailureKind::Unavailable, "Overloaded")
///                             .with_status(529),
///                     },
///                     2 => Event::ProviderSucceeded {
///                         request,
///                         response: AssistantResponse::tool_use(Message::assistant(vec![
///                             ContentBlock::tool_use("call_1", "read", json!({"path": "README.md"})),
///                         ])),
///                     },
///                     _ => Event::ProviderSucceeded {
///                         request,
///                         response: AssistantResponse::end_turn(Message::assistant_text(
///                             "It says hello.",
///                         )),
///                     },
///                 });
///             }
///             Command::NotifyRetry { info } => println!("{info}"), // before its Sleep
///             Command::NotifyFallback { info } => println!("{info}"),
///             Command::Sleep { timer, delay_ms } => {
///                 now = now.plus(delay_ms); // a real driver sleeps here
///                 inbox.push(Event::TimerFired { timer });
///             }
///             Command::RunTools { batch, calls } => {
///                 // Run the calls (concurrently if you can); one outcome per call.
///                 let outcome = calls
///                     .iter()
///                     .map(|call| CallOutcome::ok(&call.id, ToolOutput::text("hello")))
///                     .collect();
///                 inbox.push(Event::ToolsFinished { batch, outcome });
///             }
///             Command::Compact { compaction, conversation } => {
///                 let result = compact(&conversation, &machine.config().compaction);
///                 inbox.push(Event::CompactionFinished { compaction, result });
///             }
///             Command::AcquirePermit { permit, ask } => {
///                 // Only with `MachineConfig::retry_budget`: ask your `RetryBudget`.
///                 let _ = ask;
///                 let decision = PermitDecision::Granted;
///                 inbox.push(Event::PermitAnswered { permit, decision });
///             }
///             Command::NoteBudget { note } => {
///                 let _ = note; // only with a shared budget: `RetryBudget::record`
///             }
///             Command::AppendMessage { message } => {
///                 println!("{}: {}", message.role, message.text()); // persist, show
///             }
///             Command::ReplaceConversation { conversation, report } => {
///                 let _ = (conversation, report); // persist the compacted conversation
///             }
///             Command::Finish { reason, .. } => break 'run Ok(reason),
///             Command::Fail { error } => break 'run Err(*error),
///         }
///     }
/// };
/// assert_eq!(outcome, Ok(FinishReason::Model(StopReason::EndTurn)));
/// // The user's message, the tool call, its result and the answer; nothing from the failure.
/// assert_eq!(machine.conversation().len(), 4);
/// ```
#[derive(Debug)]
pub struct AgentMachine {
    config: Arc<MachineConfig>,
    rng: fastrand::Rng,
    conversation: Arc<Conversation>,
    phase: Phase,
    queue: VecDeque<Command>,
    next_id: u64,
    now: Millis,
    turns: u32,
    request: RequestState,
    target: usize,
    target_failures: Vec<TargetFailure>,
    outcome: Option<Result<FinishReason, RunError>>,
    /// Input tokens of the last answered request, as the context window counts them.
    last_context_tokens: Option<u64>,
    /// The compaction under way, if any.
    compacting: Option<Compacting>,
    /// A provider refused the reasoning passed back to it in this run: reasoning of an
    /// unknown owner is no longer sent anywhere.
    reasoning_refused: bool,
    /// The embedder's secrets, masked in every failure the machine is told of.
    secrets: Secrets,
}

/// A compaction under way: by a summary request, then (or else) by the driver's elision.
#[derive(Debug)]
struct Compacting {
    reason: CompactionReason,
    /// The overflow retry costs no attempt: the attempt number is handed back.
    refund_attempt: bool,
    /// How the request goes on once the conversation is compacted.
    then: PermitKind,
    /// While the summary request is under way: what it sends and the paused request.
    summary: Option<Summarizing>,
    /// Why the summary failed, once it has (elision runs instead).
    summary_error: Option<String>,
}

#[derive(Debug)]
struct Summarizing {
    request: SummaryRequest,
    /// The request that is waiting for the compaction.
    paused: RequestState,
}

/// Per-request bookkeeping: reset whenever the conversation gains a message.
#[derive(Debug, Clone, Default)]
struct RequestState {
    attempt: u32,
    /// When the request first asked to be sent (its place in the budget's queue).
    since: Millis,
    compacted: bool,
    empty_responses: u32,
    last_failure: Option<ProviderFailure>,
    /// The provider began answering the attempt under way (`ProviderResponding`, or its
    /// success when no such event came first).
    answered: bool,
    /// One of this request's retries was answered and the budget was told (once a request).
    retry_answered: bool,
    /// The provider could not verify the reasoning of this request: it is sent without any
    /// (once; refused again, the run fails).
    without_reasoning: bool,
}

#[derive(Debug)]
enum Phase {
    Idle,
    Requesting {
        request: RequestId,
    },
    /// Waiting out a retry delay; then the attempt asks for a permit of `kind` (or is sent,
    /// without a budget).
    BackingOff {
        timer: TimerId,
        kind: PermitKind,
    },
    AwaitingPermit {
        permit: PermitId,
        kind: PermitKind,
    },
    /// Waiting out a rate limit the budget shared; then asks again.
    WaitingForProvider {
        timer: TimerId,
        kind: PermitKind,
    },
    /// Waiting for the driver's elision ([`Command::Compact`]).
    Compacting {
        compaction: CompactionId,
    },
    RunningTools {
        batch: BatchId,
        /// The assistant message whose tool uses are being answered.
        message: Arc<Message>,
        /// One per tool use, in order: refused or pending.
        answers: Vec<Answer>,
    },
    Done,
}

impl AgentMachine {
    /// A machine with an empty conversation. `seed` drives retry jitter, nothing else.
    ///
    /// `config` is a [`MachineConfig`] or an `Arc` of one: many machines (a fleet, a
    /// simulator's runs) can share one config without copying it.
    #[must_use]
    pub fn new(config: impl Into<Arc<MachineConfig>>, seed: u64) -> Self {
        Self::with_conversation(config, seed, Conversation::new())
    }

    /// A machine that continues `conversation` (a loaded session).
    #[must_use]
    pub fn with_conversation(
        config: impl Into<Arc<MachineConfig>>,
        seed: u64,
        conversation: Conversation,
    ) -> Self {
        AgentMachine {
            config: config.into(),
            rng: fastrand::Rng::with_seed(seed),
            conversation: Arc::new(conversation),
            phase: Phase::Idle,
            queue: VecDeque::new(),
            next_id: 1,
            now: Millis::ZERO,
            turns: 0,
            request: RequestState::default(),
            target: 0,
            target_failures: Vec::new(),
            outcome: None,
            last_context_tokens: None,
            compacting: None,
            reasoning_refused: false,
            secrets: Secrets::none(),
        }
    }

    /// This machine, told the embedder's `secrets` (API keys, tokens): every text of a
    /// failure it is handed (a provider's message, error type and request id, a host or tool
    /// failure's message, a compactor's error) has them replaced by `***` before the machine
    /// takes it in, so no notice, tool error result, run error or trace holds one. See
    /// [`Secrets`].
    #[must_use]
    pub fn with_secrets(mut self, secrets: Secrets) -> Self {
        self.set_secrets(secrets);
        self
    }

    /// [`with_secrets`](Self::with_secrets) in place, for [`Run`](crate::run::Run).
    pub(crate) fn set_secrets(&mut self, secrets: Secrets) {
        self.secrets = secrets;
    }

    /// The secrets this machine masks ([`with_secrets`](Self::with_secrets)).
    #[must_use]
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    /// The conversation as it stands (only complete messages).
    #[must_use]
    pub fn conversation(&self) -> &Conversation {
        &self.conversation
    }

    /// The conversation, taking the machine apart: without a copy when no snapshot of it
    /// is still alive (a driver that dropped its commands), else a copy.
    #[must_use]
    pub fn into_conversation(self) -> Conversation {
        Arc::try_unwrap(self.conversation).unwrap_or_else(|shared| (*shared).clone())
    }

    /// A shared handle to the conversation, without copying it.
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot(Arc::clone(&self.conversation))
    }

    /// Assistant messages appended in this run.
    #[must_use]
    pub fn turns(&self) -> u32 {
        self.turns
    }

    /// Index of the target requests currently go to.
    #[must_use]
    pub fn target(&self) -> usize {
        self.target
    }

    /// Whether the run finished or failed.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        self.outcome.is_some()
    }

    /// How the run ended, once it has.
    #[must_use]
    pub fn outcome(&self) -> Option<&Result<FinishReason, RunError>> {
        self.outcome.as_ref()
    }

    /// The next command to execute, if any. Drain after every [`handle`](Self::handle).
    pub fn poll(&mut self) -> Option<Command> {
        self.queue.pop_front()
    }

    /// Swaps the queued commands with `other` (empty, keeping its capacity): how
    /// [`Run`](crate::run::Run) takes a step's commands without moving them one by one.
    pub(crate) fn swap_queue(&mut self, other: &mut VecDeque<Command>) {
        std::mem::swap(&mut self.queue, other);
    }

    /// The time an event handed at `now` is taken at: `now`, or the latest time seen if
    /// `now` is earlier (the clock never goes backwards; what a driver records of the
    /// event, its trace and tally, records this time too).
    pub(crate) fn clock(&self, now: Millis) -> Millis {
        self.now.max(now)
    }

    /// [`handle`](Self::handle) followed by draining [`poll`](Self::poll), for drivers that
    /// never send an event the machine did not ask for: in debug builds it panics on
    /// [`Handled::Ignored`]`(`[`IgnoreReason::Unexpected`]`)` or
    /// `Ignored(`[`Mismatched`](IgnoreReason::Mismatched)`)`, a driver bug (see
    /// [`Handled`]).
    pub fn step(&mut self, now: Millis, event: Event) -> Vec<Command> {
        let handled = self.handle(now, event);
        debug_assert!(
            !matches!(
                handled,
                Handled::Ignored(IgnoreReason::Unexpected | IgnoreReason::Mismatched)
            ),
            "the driver sent an event the machine did not ask for, or an answer that does not \
             fit its command"
        );
        self.queue.drain(..).collect()
    }

    /// Feeds one event at time `now` (on the driver's monotonic clock; see
    /// [Time](Self#time)). See the type's documentation for the protocol.
    pub fn handle(&mut self, now: Millis, event: Event) -> Handled {
        self.now = self.clock(now);
        let event = self.secrets.redact_event(event);
        if self.is_terminal() {
            return Handled::Ignored(IgnoreReason::Terminal);
        }
        match event {
            Event::Cancel => self.fail(RunError::Canceled),
            Event::HostFailed { failure } => self.fail(RunError::from(failure)),
            Event::UserMessage { content } => return self.on_user_message(content),
            Event::Resume => return self.on_resume(),
            Event::ProviderSucceeded { request, response } => {
                if !self.is_waiting_for_request(request) {
                    return Handled::Ignored(IgnoreReason::Stale);
                }
                self.on_response(response);
            }
            Event::ProviderFailed { request, failure } => {
                if !self.is_waiting_for_request(request) {
                    return Handled::Ignored(IgnoreReason::Stale);
                }
                self.on_failure(failure);
            }
            Event::ProviderResponding { request } => {
                if !self.is_waiting_for_request(request) || self.request.answered {
                    return Handled::Ignored(IgnoreReason::Stale);
                }
                self.on_answered();
            }
            Event::TimerFired { timer } => return self.on_timer(timer),
            Event::PermitAnswered { permit, decision } => match self.phase {
                Phase::AwaitingPermit { permit: p, kind } if p == permit => {
                    self.on_permit(decision, kind);
                }
                _ => return Handled::Ignored(IgnoreReason::Stale),
            },
            Event::CompactionFinished { compaction, result } => match self.phase {
                Phase::Compacting { compaction: c } if c == compaction => {
                    self.on_compacted(result);
                }
                _ => return Handled::Ignored(IgnoreReason::Stale),
            },
            Event::ToolsFinished { batch, outcome } => match &self.phase {
                Phase::RunningTools { batch: b, .. } if *b == batch => {
                    if self.tool_outcome_mismatch(batch, &outcome).is_some() {
                        return Handled::Ignored(IgnoreReason::Mismatched);
                    }
                    let Phase::RunningTools {
                        message, answers, ..
                    } = std::mem::replace(&mut self.phase, Phase::Idle)
                    else {
                        unreachable!("matched RunningTools just above");
                    };
                    self.on_tools_finished(&message, answers, outcome);
                }
                _ => return Handled::Ignored(IgnoreReason::Stale),
            },
        }
        Handled::Accepted
    }

    fn is_waiting_for_request(&self, request: RequestId) -> bool {
        matches!(self.phase, Phase::Requesting { request: r } if r == request)
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn emit(&mut self, command: Command) {
        self.queue.push_back(command);
    }

    /// Appends `message` to the conversation and tells the driver; returns it, shared. An
    /// assistant message's reasoning of unknown owner is recorded as the current target's.
    fn append(&mut self, mut message: Message) -> Arc<Message> {
        if message.role == Role::Assistant {
            if let Some(identity) = self.config.target_identity(self.target) {
                for block in &mut message.content {
                    if let ContentBlock::Thinking { owner, .. }
                    | ContentBlock::RedactedThinking { owner, .. }
                    | ContentBlock::Reasoning { owner, .. } = block
                    {
                        owner.get_or_insert_with(|| identity.clone());
                    }
                }
            }
        }
        let message = Arc::new(message);
        Arc::make_mut(&mut self.conversation).push(Arc::clone(&message));
        self.emit(Command::AppendMessage {
            message: Arc::clone(&message),
        });
        message
    }

    fn fail(&mut self, error: RunError) {
        self.phase = Phase::Done;
        self.outcome = Some(Err(error.clone()));
        self.emit(Command::Fail {
            error: Box::new(error),
        });
    }

    fn finish(&mut self, reason: FinishReason) {
        self.phase = Phase::Done;
        self.outcome = Some(Ok(reason.clone()));
        self.emit(Command::Finish {
            reason,
            turns: self.turns,
        });
    }

    // ----- starting ---------------------------------------------------------------------

    fn on_user_message(&mut self, content: Vec<ContentBlock>) -> Handled {
        if !matches!(self.phase, Phase::Idle) {
            return Handled::Ignored(IgnoreReason::Unexpected);
        }
        let message = Message {
            role: Role::User,
            content,
        };
        if message.is_empty() {
            self.fail(RunError::EmptyUserMessage);
            return Handled::Accepted;
        }
        if let Err(e) = self.conversation.check_tool_pairing(true) {
            self.fail(RunError::Invariant {
                message: format!("the conversation is corrupt: {e}"),
            });
            return Handled::Accepted;
        }
        let content = message.content;
        let mut blocks = self.interrupted_results();
        blocks.extend(content);
        self.append(Message {
            role: Role::User,
            content: blocks,
        });
        self.start_request();
        Handled::Accepted
    }

    fn on_resume(&mut self) -> Handled {
        if !matches!(self.phase, Phase::Idle) {
            return Handled::Ignored(IgnoreReason::Unexpected);
        }
        if let Err(e) = self.conversation.check_tool_pairing(true) {
            self.fail(RunError::Invariant {
                message: format!("the conversation is corrupt: {e}"),
            });
            return Handled::Accepted;
        }
        let results = self.interrupted_results();
        if !results.is_empty() {
            self.append(Message {
                role: Role::User,
                content: results,
            });
        }
        match self.conversation.last() {
            Some(m) if m.role == Role::User => self.start_request(),
            _ => self.finish(FinishReason::NothingToDo),
        }
        Handled::Accepted
    }

    /// Error results for the tool calls of a trailing assistant message left unanswered by an
    /// interrupted run.
    fn interrupted_results(&self) -> Vec<ContentBlock> {
        match self.conversation.last() {
            Some(m) if m.role == Role::Assistant => m
                .tool_uses()
                .map(|(id, name, _)| error_result(id, name, INTERRUPTED))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Starts a request for the conversation as it now stands.
    fn start_request(&mut self) {
        self.request = RequestState {
            since: self.now,
            ..RequestState::default()
        };
        if self.past_threshold() {
            // One compaction per request: an overflow after this one fails.
            self.request.compacted = true;
            return self.begin_compaction(CompactionReason::Threshold, PermitKind::FirstAttempt);
        }
        self.attempt_next(PermitKind::FirstAttempt);
    }

    /// Whether the last request's input filled the current target's context window past the
    /// threshold.
    fn past_threshold(&self) -> bool {
        let percent = u64::from(self.config.compact_threshold_percent);
        let window = self
            .config
            .targets
            .get(self.target)
            .and_then(|t| t.context_window);
        match (self.config.auto_compact, window, self.last_context_tokens) {
            (true, Some(window), Some(tokens)) if percent > 0 && window > 0 => {
                u128::from(tokens) * 100 >= u128::from(window) * u128::from(percent)
            }
            _ => false,
        }
    }

    /// Whether the requests under way are summary requests.
    fn summarizing(&self) -> bool {
        self.compacting
            .as_ref()
            .is_some_and(|c| c.summary.is_some())
    }

    /// Makes the next attempt: with a shared budget, after asking it for a permit of `kind`;
    /// without one, at once.
    fn attempt_next(&mut self, kind: PermitKind) {
        match self.config.retry_budget {
            Some(budget) => {
                let deadline = match kind {
                    PermitKind::Charged => self.now.plus(budget.max_wait_ms),
                    PermitKind::FirstAttempt | PermitKind::Hinted => self.now,
                };
                let permit = PermitId(self.next_id());
                self.phase = Phase::AwaitingPermit { permit, kind };
                let ask = PermitAsk {
                    kind,
                    target: self.target,
                    deadline,
                    since: self.request.since,
                };
                self.emit(Command::AcquirePermit { permit, ask });
            }
            None => self.send(),
        }
    }

    fn send(&mut self) {
        self.request.attempt += 1;
        self.request.answered = false;
        let request = RequestId(self.next_id());
        self.phase = Phase::Requesting { request };
        let (conversation, purpose) =
            match self.compacting.as_ref().and_then(|c| c.summary.as_ref()) {
                Some(s) => (
                    self.outgoing(Arc::new(s.request.conversation.clone())),
                    RequestPurpose::Summary,
                ),
                None => (
                    self.outgoing(Arc::clone(&self.conversation)),
                    RequestPurpose::Turn,
                ),
            };
        self.emit(Command::SendRequest {
            request,
            target: self.target,
            attempt: self.request.attempt,
            conversation,
            purpose,
            deadlines: self.config.stream,
        });
    }

    /// What a request to the current target carries of `conversation`: all of it (shared,
    /// not copied), except reasoning this target may not be sent. Reasoning another target
    /// owns is left out by the request builders
    /// ([`RequestParams::identity`](crate::wire::RequestParams)); here go all reasoning on
    /// the retry after a refusal, and reasoning of an unknown owner except on the primary
    /// target of a conversation that holds no reasoning of its kind (thinking, or reasoning
    /// items) of a known owner (a session written before owners were recorded, continued for
    /// the first time) before any refusal in this run. Once the conversation holds reasoning
    /// of a known owner, the unknown is older than it, and not worth a refused request in
    /// every later run.
    fn outgoing(&self, conversation: Arc<Conversation>) -> Snapshot {
        let all = self.request.without_reasoning;
        let primary = self.target == 0 && !self.reasoning_refused;
        // Whether the conversation holds thinking, and reasoning items, of a known owner:
        // each kind on its own (Anthropic's and OpenAI's are unrelated).
        let (mut known_thinking, mut known_items) = (false, false);
        for block in self
            .conversation
            .messages()
            .iter()
            .flat_map(|m| m.content.iter())
        {
            if block.is_owned_reasoning() && block.owner().is_some() {
                match block {
                    ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {
                        known_thinking = true;
                    }
                    _ => known_items = true,
                }
            }
        }
        let unknown_ok = |b: &ContentBlock| {
            primary
                && match b {
                    ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {
                        !known_thinking
                    }
                    _ => !known_items,
                }
        };
        match conversation.without_reasoning(|b| all || (b.owner().is_none() && !unknown_ok(b))) {
            Some(stripped) => Snapshot(Arc::new(stripped)),
            None => Snapshot(conversation),
        }
    }

    // ----- provider answers -------------------------------------------------------------

    fn on_failure(&mut self, failure: ProviderFailure) {
        if self.summarizing() && failure.action() == FailureAction::Compact {
            return self.shrink_summary_request(failure);
        }
        match failure.action() {
            FailureAction::Compact => self.on_overflow(failure),
            FailureAction::RetryWithoutReasoning => self.on_reasoning_rejected(failure),
            FailureAction::Fail => {
                let immediate_fallback = matches!(
                    failure.kind,
                    FailureKind::QuotaExhausted | FailureKind::ModelNotFound
                );
                self.give_up(failure, GiveUp::NotRetryable, immediate_fallback);
            }
            FailureAction::Retry => self.retry(failure),
        }
    }

    fn retry(&mut self, failure: ProviderFailure) {
        let retry = &self.config.retry;
        if failure.kind == FailureKind::EmptyResponse {
            self.request.empty_responses += 1;
            if self.request.empty_responses >= retry.max_empty_responses.max(1) {
                let count = self.request.empty_responses;
                return self.give_up(failure, GiveUp::EmptyResponses { count }, false);
            }
        }
        let attempt = self.request.attempt;
        let max_attempts = retry.attempts();
        if attempt >= max_attempts {
            return self.give_up(
                failure,
                GiveUp::AttemptsExhausted { attempts: attempt },
                true,
            );
        }
        let delay = retry.delay_for(attempt, &failure, &mut self.rng);
        if let RetryDelay::ServerHint(ms) | RetryDelay::HintTooLong(ms) = delay {
            if failure.kind == FailureKind::RateLimited && self.config.retry_budget.is_some() {
                // The fleet learns the provider's delay instead of each agent spending a
                // request to hear it, whether this agent waits, moves on or gives up.
                let note = BudgetNote::RateLimited {
                    target: self.target,
                    until: self.now.plus(ms),
                };
                self.emit(Command::NoteBudget { note });
            }
        }
        let (delay_ms, kind) = match delay {
            RetryDelay::Backoff(ms) => (ms, PermitKind::Charged),
            RetryDelay::ServerHint(hint_ms) if self.moves_on(hint_ms) => {
                let fallback_after_ms = self.config.retry.fallback_after_ms;
                let reason = GiveUp::RetryAfterLong {
                    hint_ms,
                    fallback_after_ms,
                };
                return self.give_up(failure, reason, true);
            }
            RetryDelay::ServerHint(ms) => (ms, PermitKind::Hinted),
            RetryDelay::HintTooLong(hint_ms) => {
                let cap_ms = self.config.retry.max_retry_after_ms;
                return self.give_up(failure, GiveUp::RetryAfterTooLong { hint_ms, cap_ms }, true);
            }
        };
        self.notify_retry(failure, attempt + 1, delay_ms);
        let timer = TimerId(self.next_id());
        self.phase = Phase::BackingOff { timer, kind };
        self.emit(Command::Sleep { timer, delay_ms });
    }

    /// Whether a server delay of `delay_ms` moves the run to the next target at once: there
    /// is one (a summary request never moves), and the policy says the delay is too long to
    /// wait with somewhere else to go.
    fn moves_on(&self, delay_ms: u64) -> bool {
        !self.summarizing()
            && self.target + 1 < self.config.target_count()
            && self.config.retry.moves_on(delay_ms)
    }

    /// Keeps `failure` as the request's last one and tells the UI that attempt `attempt`
    /// follows in `delay_ms`.
    fn notify_retry(&mut self, failure: ProviderFailure, attempt: u32, delay_ms: u64) {
        let info = ProviderRetryInfo {
            attempt,
            max_attempts: self.config.retry.attempts(),
            delay_ms,
            kind: failure.kind,
            status: failure.status,
            retry_after_ms: failure.retry_after_ms,
            message: failure.message.clone(),
            target: self.target,
        };
        self.request.last_failure = Some(failure);
        self.emit(Command::NotifyRetry { info });
    }

    fn on_overflow(&mut self, failure: ProviderFailure) {
        if !self.config.auto_compact {
            return self.give_up(failure, GiveUp::CompactionDisabled, false);
        }
        if self.request.compacted {
            return self.give_up(failure, GiveUp::OverflowAfterCompaction, false);
        }
        self.request.compacted = true;
        // The compaction retry reuses the attempt number: it costs no attempt.
        self.notify_retry(failure, self.request.attempt, 0);
        self.begin_compaction(CompactionReason::Overflow, PermitKind::Hinted);
    }

    /// The provider could not verify reasoning passed back to it (another organisation's or
    /// key's, or of an unknown owner): the request is sent again at once without any, at no
    /// attempt's cost, announced like a compaction retry; refused again, the run fails.
    /// Never a loop: one such retry per request, and reasoning of an unknown owner is not
    /// sent again in this run.
    fn on_reasoning_rejected(&mut self, failure: ProviderFailure) {
        if self.request.without_reasoning {
            return self.give_up(failure, GiveUp::ReasoningRejectedAgain, false);
        }
        self.request.without_reasoning = true;
        self.reasoning_refused = true;
        self.notify_retry(failure, self.request.attempt, 0);
        self.request.attempt -= 1;
        self.attempt_next(PermitKind::Hinted);
    }

    /// Starts compacting the conversation: with a summary request when configured and there
    /// are older turns to summarise, else with the driver's elision.
    fn begin_compaction(&mut self, reason: CompactionReason, then: PermitKind) {
        self.compacting = Some(Compacting {
            reason,
            refund_attempt: reason == CompactionReason::Overflow,
            then,
            summary: None,
            summary_error: None,
        });
        if self.config.compact_with != CompactionMethod::Summary {
            return self.elide();
        }
        let fit = self.summary_fit_bytes(reason);
        match summary_request(&self.conversation, &self.config.compaction, fit) {
            Some(request) => {
                let paused = std::mem::replace(
                    &mut self.request,
                    RequestState {
                        since: self.now,
                        ..RequestState::default()
                    },
                );
                if let Some(c) = self.compacting.as_mut() {
                    c.summary = Some(Summarizing { request, paused });
                }
                self.attempt_next(PermitKind::FirstAttempt);
            }
            None => self.summary_failed("there are no older turns to summarise".to_owned()),
        }
    }

    /// How large the first summary request may be: seven tenths of the target's context
    /// window (at 4 bytes a token) when it is known, leaving room for the answer; after an
    /// overflow without a known window, half the conversation that overflowed.
    fn summary_fit_bytes(&self, reason: CompactionReason) -> Option<usize> {
        let window = self
            .config
            .targets
            .get(self.target)
            .and_then(|t| t.context_window);
        let from_window =
            window.map(|w| usize::try_from(w.saturating_mul(4) / 10 * 7).unwrap_or(usize::MAX));
        let from_overflow =
            (reason == CompactionReason::Overflow).then(|| self.conversation.approx_bytes() / 2);
        match (from_window, from_overflow) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The summary request itself overflowed: drop more of its oldest turns (to half its
    /// size) and send it again, at no attempt's cost; when nothing is left to drop, the
    /// summary failed.
    fn shrink_summary_request(&mut self, failure: ProviderFailure) {
        let Some(summary) = self.compacting.as_ref().and_then(|c| c.summary.as_ref()) else {
            unreachable!("shrink_summary_request runs only while summarizing");
        };
        let sent = summary.request.conversation.approx_bytes();
        let smaller = summary_request(&self.conversation, &self.config.compaction, Some(sent / 2))
            .filter(|r| r.conversation.approx_bytes() < sent);
        match smaller {
            Some(request) => {
                if let Some(s) = self.compacting.as_mut().and_then(|c| c.summary.as_mut()) {
                    s.request = request;
                }
                self.notify_retry(failure, self.request.attempt, 0);
                self.request.attempt -= 1;
                self.attempt_next(PermitKind::Hinted);
            }
            None => self.summary_failed(format!(
                "the summary request does not fit the context window ({})",
                failure.message
            )),
        }
    }

    /// The summary request gave up: the paused request resumes waiting, and elision runs.
    fn summary_failed(&mut self, message: String) {
        let Some(compacting) = self.compacting.as_mut() else {
            unreachable!("summary_failed runs only while compacting");
        };
        if let Some(summary) = compacting.summary.take() {
            self.request = summary.paused;
        }
        compacting.summary_error = Some(message);
        self.elide();
    }

    /// Asks the driver to elide.
    fn elide(&mut self) {
        let compaction = CompactionId(self.next_id());
        self.phase = Phase::Compacting { compaction };
        let conversation = self.snapshot();
        self.emit(Command::Compact {
            compaction,
            conversation,
        });
    }

    /// The summary request was answered with `message`.
    fn on_summary(&mut self, message: &Message) {
        let Some(summary) = self.compacting.as_mut().and_then(|c| c.summary.take()) else {
            unreachable!("on_summary runs only while summarizing");
        };
        self.request = summary.paused;
        let text = message.text();
        if text.trim().is_empty() {
            return self
                .summary_failed("the model answered the summary request without text".to_owned());
        }
        let compacted = summarized(&self.conversation, summary.request.keep_from, &text);
        if let Err(message) = self.accept(compacted, CompactionMethod::Summary) {
            self.summary_failed(message);
        }
    }

    fn on_compacted(&mut self, result: Result<Conversation, CompactionError>) {
        let accepted = result
            .map_err(|e| e.to_string())
            .and_then(|c| self.accept(c, CompactionMethod::Elide));
        if let Err(message) = accepted {
            let Some(compacting) = self.compacting.take() else {
                unreachable!("a compaction finished without one under way");
            };
            match compacting.reason {
                CompactionReason::Overflow => {
                    let failure = self.last_failure("context overflow");
                    self.give_up(failure, GiveUp::CompactionFailed { message }, false);
                }
                // Nothing refused the request yet: send it as it is.
                CompactionReason::Threshold => self.attempt_next(compacting.then),
            }
        }
    }

    /// Checks `compacted` and, if it will do, makes it the conversation and resumes the
    /// request; else says why it will not do (and changes nothing).
    fn accept(&mut self, compacted: Conversation, method: CompactionMethod) -> Result<(), String> {
        let before_bytes = self.conversation.approx_bytes();
        let after = compacted.approx_bytes();
        if after >= before_bytes {
            return Err(format!(
                "the compacted conversation is not smaller ({after} bytes, was {before_bytes})"
            ));
        }
        if compacted.last().map(|m| m.role) != self.conversation.last().map(|m| m.role) {
            return Err("the compactor dropped the latest message".to_owned());
        }
        compacted
            .check_tool_pairing(false)
            .map_err(|e| format!("the compacted conversation is inconsistent: {e}"))?;
        let Some(compacting) = self.compacting.take() else {
            unreachable!("accept runs only while compacting");
        };
        let mut report =
            CompactionReport::new(&self.conversation, &compacted, compacting.reason, method);
        report.summary_error = compacting.summary_error;
        self.conversation = Arc::new(compacted);
        // The count was of the conversation before: the next answer tells the new one.
        self.last_context_tokens = None;
        let conversation = self.snapshot();
        self.emit(Command::ReplaceConversation {
            conversation,
            report,
        });
        if compacting.refund_attempt {
            self.request.attempt -= 1;
        }
        self.attempt_next(compacting.then);
        Ok(())
    }

    fn last_failure(&self, fallback: &str) -> ProviderFailure {
        self.request
            .last_failure
            .clone()
            .unwrap_or_else(|| ProviderFailure::new(FailureKind::ServerError, fallback))
    }

    /// Stops retrying the current target: falls back to the next one when allowed and
    /// available, else fails the run.
    fn give_up(&mut self, failure: ProviderFailure, reason: GiveUp, may_fall_back: bool) {
        if self.summarizing() {
            // A summary never moves the run to another target: elision needs no provider.
            return self.summary_failed(format!("{reason}: {}", failure.message));
        }
        let label = self.config.target_label(self.target);
        if may_fall_back && self.target + 1 < self.config.target_count() {
            let from = self.target;
            self.target += 1;
            let info = FallbackInfo {
                from,
                to: self.target,
                from_label: label.clone(),
                to_label: self.config.target_label(self.target),
                kind: failure.kind,
                message: failure.message.clone(),
            };
            self.target_failures.push(TargetFailure {
                target: from,
                label,
                failure,
                reason,
            });
            self.emit(Command::NotifyFallback { info });
            // One compaction and one retry without reasoning per request, whatever the target.
            self.request = RequestState {
                compacted: self.request.compacted,
                without_reasoning: self.request.without_reasoning,
                since: self.request.since,
                ..RequestState::default()
            };
            self.attempt_next(PermitKind::FirstAttempt);
        } else {
            self.fail(RunError::Provider {
                failure,
                reason,
                target: self.target,
                label,
                earlier: self.target_failures.clone(),
            });
        }
    }

    fn on_timer(&mut self, timer: TimerId) -> Handled {
        match self.phase {
            Phase::BackingOff { timer: t, kind } | Phase::WaitingForProvider { timer: t, kind }
                if t == timer =>
            {
                self.attempt_next(kind);
            }
            _ => return Handled::Ignored(IgnoreReason::Stale),
        }
        Handled::Accepted
    }

    fn on_permit(&mut self, decision: PermitDecision, kind: PermitKind) {
        match decision {
            PermitDecision::Granted => self.send(),
            PermitDecision::WaitUntil(until) => self.wait_for_provider(until, kind),
            PermitDecision::Denied => {
                let failure = self.last_failure("retry budget exhausted");
                self.give_up(failure, GiveUp::BudgetExhausted, false);
            }
        }
    }

    /// Another agent of the budget was told to wait until `until`: wait too (visibly, with a
    /// little jitter so the fleet does not return in one burst), then ask again.
    fn wait_for_provider(&mut self, until: Millis, kind: PermitKind) {
        let hint_ms = until.since(self.now);
        let cap_ms = self.config.retry.max_retry_after_ms;
        let mut failure = ProviderFailure::new(
            FailureKind::RateLimited,
            "the provider asked an agent sharing this retry budget to wait",
        )
        .with_status(429);
        failure.retry_after_ms = Some(hint_ms);
        if hint_ms > cap_ms {
            return self.give_up(failure, GiveUp::RetryAfterTooLong { hint_ms, cap_ms }, true);
        }
        if self.moves_on(hint_ms) {
            let fallback_after_ms = self.config.retry.fallback_after_ms;
            let reason = GiveUp::RetryAfterLong {
                hint_ms,
                fallback_after_ms,
            };
            return self.give_up(failure, reason, true);
        }
        // Spread the fleet's return over a quarter of the wait, and over at least four
        // initial backoffs (2 s by default) however little of the wait is left for this
        // agent, at most the backoff cap: the first to return learns whether the limit was
        // extended, and the budget holds the rest back, before most of them have sent.
        let retry = &self.config.retry;
        let spread = (hint_ms / 4)
            .max(retry.initial_delay_ms.saturating_mul(4))
            .min(retry.max_delay_ms);
        let delay_ms = hint_ms + self.rng.u64(0..=spread);
        let attempt = self.request.attempt + 1;
        self.notify_retry(failure, attempt, delay_ms);
        let timer = TimerId(self.next_id());
        self.phase = Phase::WaitingForProvider { timer, kind };
        self.emit(Command::Sleep { timer, delay_ms });
    }

    /// The provider began answering the attempt under way. A retry being answered is
    /// evidence that retries work right now: the shared budget hears it at once, once a
    /// request.
    fn on_answered(&mut self) {
        self.request.answered = true;
        let retry = self.request.attempt > 1;
        if retry && !self.request.retry_answered && self.config.retry_budget.is_some() {
            self.request.retry_answered = true;
            let note = BudgetNote::RetryAnswered {
                target: self.target,
            };
            self.emit(Command::NoteBudget { note });
        }
    }

    fn on_response(&mut self, mut response: AssistantResponse) {
        let input_problems = response.take_input_problems();
        // The response's id and model are telemetry's: the machine decides nothing on them.
        let AssistantResponse {
            mut message,
            stop_reason,
            usage,
            ..
        } = response;
        message.role = Role::Assistant;
        if message.is_empty() {
            return self.on_failure(ProviderFailure::transport(
                TransportFault::EmptyMessage,
                None,
            ));
        }
        if self.config.retry_budget.is_some() {
            if !self.request.answered {
                self.on_answered();
            }
            let note = BudgetNote::Succeeded {
                target: self.target,
            };
            self.emit(Command::NoteBudget { note });
        }
        if self.summarizing() {
            return self.on_summary(&message);
        }
        if let Some(provider) = self.config.targets.get(self.target).map(|t| t.provider) {
            // A response without usage says 0: never past a threshold (see `past_threshold`).
            self.last_context_tokens = Some(usage.context_tokens(provider));
        }
        let input_problems = refuse_deep_inputs(&mut message, input_problems.into());
        let problems = unique_tool_ids(&mut message, input_problems, self.next_id);
        self.turns += 1;
        let answers: Vec<Answer> = message
            .tool_uses()
            .map(|(id, name, input)| {
                let refusal = self.refusal(name, input, problems.get(id));
                refusal.map_or(Answer::Pending, Answer::Refused)
            })
            .collect();
        let calls: Vec<ToolCall> = message
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::ToolUse { id, name, input } => Some((id, name, input)),
                _ => None,
            })
            .zip(&answers)
            .filter(|(_, answer)| matches!(answer, Answer::Pending))
            .map(|((id, name, input), _)| ToolCall {
                id: id.clone(),
                name: name.clone(),
                input: Arc::clone(input),
            })
            .collect();
        let message = self.append(message);
        if answers.is_empty() {
            return match stop_reason {
                StopReason::PauseTurn => self.continue_or_stop(),
                reason => self.finish(FinishReason::Model(reason)),
            };
        }
        if calls.is_empty() {
            return self.answer_tools(&message, answers);
        }
        let batch = BatchId(self.next_id());
        self.phase = Phase::RunningTools {
            batch,
            message,
            answers,
        };
        self.emit(Command::RunTools { batch, calls });
    }

    /// Why a call is answered with an error without running, if it is.
    fn refusal(
        &self,
        name: &str,
        input: &serde_json::Value,
        problem: Option<&ToolInputProblem>,
    ) -> Option<String> {
        if let Some(p) = problem {
            return Some(match p.kind {
                InputProblemKind::Truncated => format!(
                    "the input was cut off because the response reached the output token limit \
                     (received {} bytes: {}); send a smaller input or split the work into \
                     several calls",
                    p.raw.len(),
                    excerpt(&p.raw)
                ),
                InputProblemKind::InvalidJson => format!(
                    "the input is not valid JSON ({}): {}",
                    p.detail,
                    excerpt(&p.raw)
                ),
                InputProblemKind::NotAnObject => {
                    format!("the input must be a JSON object, got: {}", excerpt(&p.raw))
                }
                InputProblemKind::TooDeep => format!(
                    "the input nests deeper than {MAX_TOOL_INPUT_DEPTH} levels of objects and \
                     arrays; send a flatter input (e.g. a nested structure as a string)"
                ),
            });
        }
        if !self.config.tools.iter().any(|t| t.name == name) {
            let known: Vec<&str> = self.config.tools.iter().map(|t| t.name.as_str()).collect();
            return Some(crate::tool::unknown_tool_message(name, &known));
        }
        if !input.is_object() {
            return Some(format!(
                "the input must be a JSON object, got: {}",
                excerpt(&input.to_string())
            ));
        }
        None
    }

    fn on_tools_finished(
        &mut self,
        message: &Message,
        mut answers: Vec<Answer>,
        outcome: BatchOutcome,
    ) {
        match outcome {
            BatchOutcome::WholeBatch(ToolFailure::Host(failure)) => {
                return self.fail(RunError::from(failure));
            }
            BatchOutcome::WholeBatch(ToolFailure::Model { message: reason }) => {
                for answer in answers.iter_mut().filter(|a| a.is_open()) {
                    *answer = Answer::Failed(reason.clone());
                }
            }
            BatchOutcome::PerCall(outcomes) => {
                let calls = CallIndex::new(message);
                // The first host failure (a cancel, most often) ends the run once every
                // outcome of the batch is read: the calls that finished keep theirs.
                let mut stopped: Option<HostFailure> = None;
                for outcome in outcomes {
                    let answer = match outcome.result {
                        Err(ToolFailure::Host(failure)) => {
                            stopped.get_or_insert(failure);
                            continue;
                        }
                        Err(ToolFailure::Model { message }) => Answer::Failed(message),
                        Ok(output) => Answer::Ran(output.parts),
                    };
                    // Each outcome answers one open call of the batch, once:
                    // `tool_outcome_mismatch` refused the event else.
                    if let Some(slot) = calls
                        .position(&outcome.tool_use_id)
                        .and_then(|i| answers.get_mut(i))
                        .filter(|a| a.is_open())
                    {
                        *slot = answer;
                    }
                }
                if let Some(failure) = stopped {
                    return self.stop_tools(message, answers, failure);
                }
            }
        }
        // Every open call has its outcome: `tool_outcome_mismatch` refused the event else.
        self.answer_tools(message, answers)
    }

    /// Why `outcome` does not answer tool batch `batch`, the batch this machine waits for,
    /// or `None` when it does (or the machine waits for no such batch). Per-call outcomes
    /// must answer exactly the calls of the batch's [`Command::RunTools`], each once: an
    /// outcome for another id, two for one call, or none for a call (unless a host failure
    /// among them stopped the batch, when the calls without one count as interrupted) do
    /// not, and the machine refuses such an event ([`IgnoreReason::Mismatched`]) and keeps
    /// waiting. A whole-batch outcome always answers.
    #[must_use]
    pub fn tool_outcome_mismatch(&self, batch: BatchId, outcome: &BatchOutcome) -> Option<String> {
        let Phase::RunningTools {
            batch: b,
            message,
            answers,
        } = &self.phase
        else {
            return None;
        };
        let BatchOutcome::PerCall(outcomes) = outcome else {
            return None;
        };
        if *b != batch {
            return None;
        }
        let calls = CallIndex::new(message);
        let mut answered = vec![false; answers.len()];
        let mut stopped = false;
        for outcome in outcomes {
            let id = &outcome.tool_use_id;
            let slot = calls
                .position(id)
                .filter(|&i| answers.get(i).is_some_and(Answer::is_open));
            let Some(i) = slot else {
                return Some(format!(
                    "an outcome for `{}`, which is not a call of tool batch {batch}",
                    crate::tool::bounded(id, 80)
                ));
            };
            if std::mem::replace(&mut answered[i], true) {
                return Some(format!(
                    "two outcomes for call `{}` of tool batch {batch}",
                    crate::tool::bounded(id, 80)
                ));
            }
            stopped |= matches!(outcome.result, Err(ToolFailure::Host(_)));
        }
        if stopped {
            return None;
        }
        message
            .tool_uses()
            .zip(answers.iter().zip(&answered))
            .find(|(_, (answer, done))| answer.is_open() && !**done)
            .map(|((id, name, _), _)| {
                format!("no outcome for call `{id}` ({name}) of tool batch {batch}")
            })
    }

    /// Appends one result per tool use of `message`, in order, from its answer (none is
    /// pending by then), then continues the loop.
    fn answer_tools(&mut self, message: &Message, answers: Vec<Answer>) {
        self.append_results(message, answers);
        self.continue_or_stop();
    }

    /// A batch stopped by a host failure (the run's cancel, most often) ends the run with
    /// it, keeping what finished: when any call has its answer (it ran, failed for the
    /// model, or was refused), the results are appended in the calls' order, each call that
    /// never finished answered as interrupted, so that no later run tells the model that a
    /// call which finished, and had its effect, did not. When none has, nothing is appended
    /// (the next run answers them all as interrupted, as after a crash).
    fn stop_tools(&mut self, message: &Message, answers: Vec<Answer>, failure: HostFailure) {
        if answers.iter().any(|a| !matches!(a, Answer::Pending)) {
            let answers = answers
                .into_iter()
                .map(|a| match a {
                    Answer::Pending => Answer::Failed(INTERRUPTED.to_owned()),
                    answered => answered,
                })
                .collect();
            self.append_results(message, answers);
        }
        self.fail(RunError::from(failure));
    }

    /// Appends one result per tool use of `message`, in order, from its answer (none is
    /// pending by then).
    fn append_results(&mut self, message: &Message, answers: Vec<Answer>) {
        let content = message
            .tool_uses()
            .zip(answers)
            .map(|((id, name, _), answer)| match answer {
                Answer::Ran(parts) => ContentBlock::tool_result(id, parts, false),
                Answer::Refused(reason) | Answer::Failed(reason) => error_result(id, name, &reason),
                Answer::Pending => unreachable!("missing outcomes are rejected before answering"),
            })
            .collect();
        self.append(Message {
            role: Role::User,
            content,
        });
    }

    fn continue_or_stop(&mut self) {
        match self.config.max_turns {
            Some(max) if self.turns >= max => self.finish(FinishReason::MaxTurns),
            _ => self.start_request(),
        }
    }
}

/// The model's answer for a tool call that never finished: its run ended first (a cancel,
/// a host failure, a crash).
const INTERRUPTED: &str = "the run was interrupted before this call finished";

fn error_result(id: &str, name: &str, reason: &str) -> ContentBlock {
    ContentBlock::tool_result(
        id,
        vec![ToolResultPart::text(tool_error_text(name, reason))],
        true,
    )
}

/// How one tool use of a batch is answered.
#[derive(Debug)]
enum Answer {
    /// Answered with this error without running.
    Refused(String),
    /// Running; no outcome yet.
    Pending,
    /// Ran and produced these parts.
    Ran(Vec<ToolResultPart>),
    /// Ran and failed; the model is shown this.
    Failed(String),
}

impl Answer {
    /// Whether an outcome from the driver may still set it: the call was not refused.
    fn is_open(&self) -> bool {
        !matches!(self, Answer::Refused(_))
    }
}

/// Finds a tool use's position in its message by id: a scan for the few calls a message
/// usually holds, a sorted index for the many a hostile or broken server can send.
enum CallIndex<'m> {
    Few(&'m Message),
    Many(Vec<(&'m str, usize)>),
}

impl<'m> CallIndex<'m> {
    /// Above this many calls, lookups go through the sorted index.
    const SCAN_LIMIT: usize = 16;

    fn new(message: &'m Message) -> Self {
        if message.tool_uses().nth(Self::SCAN_LIMIT).is_none() {
            return CallIndex::Few(message);
        }
        let mut sorted: Vec<(&str, usize)> =
            message.tool_uses().map(|(id, _, _)| id).zip(0..).collect();
        sorted.sort_unstable();
        CallIndex::Many(sorted)
    }

    /// The position of the first tool use with this id (ids are unique by then).
    fn position(&self, id: &str) -> Option<usize> {
        match self {
            CallIndex::Few(message) => message.tool_uses().position(|(i, _, _)| i == id),
            CallIndex::Many(sorted) => {
                let at = sorted.partition_point(|(i, _)| *i < id);
                sorted.get(at).filter(|(i, _)| *i == id).map(|(_, n)| *n)
            }
        }
    }
}

/// The first 200 characters of `raw`, with an ellipsis when cut.
fn excerpt(raw: &str) -> String {
    const MAX: usize = 200;
    match raw.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &raw[..cut]),
        None => raw.to_owned(),
    }
}

impl AgentMachine {
    /// `event` as the machine takes it in, which is what a trace records of it: the
    /// machine's secrets masked ([`Secrets::redact_event`]), and an answer's tool inputs
    /// nesting deeper than [`MAX_TOOL_INPUT_DEPTH`] are `{}` with a
    /// [`InputProblemKind::TooDeep`] problem, as the machine answers them (see
    /// `refuse_deep_inputs`). Recorded whole, such an input would make the trace unreadable
    /// (`serde_json` reads 128 levels); recorded so, it replays to the same commands.
    pub(crate) fn at_the_door(&self, event: Event) -> Event {
        refuse_deep_inputs_at_the_door(self.secrets.redact_event(event))
    }
}

fn refuse_deep_inputs_at_the_door(event: Event) -> Event {
    match event {
        Event::ProviderSucceeded {
            request,
            mut response,
        } if response
            .message
            .tool_uses()
            .any(|(_, _, input)| nests_deeper_than(input, MAX_TOOL_INPUT_DEPTH)) =>
        {
            let problems = response.take_input_problems().into_boxed_slice();
            let problems = refuse_deep_inputs(&mut response.message, problems);
            Event::ProviderSucceeded {
                request,
                response: response.with_input_problems(problems.into_vec()),
            }
        }
        other => other,
    }
}

/// Gives every tool use a non-empty id unique within the message (a broken
/// OpenAI-compatible server may send none or repeat one), re-keying input problems to match.
/// Replaces every tool input nesting deeper than [`MAX_TOOL_INPUT_DEPTH`] by `{}` and adds a
/// [`InputProblemKind::TooDeep`] problem for it (unless the decoder reported one already):
/// such an input could be neither stored nor sent again. The wire decoders catch it first;
/// this holds for responses from any provider.
fn refuse_deep_inputs(
    message: &mut Message,
    problems: Box<[ToolInputProblem]>,
) -> Box<[ToolInputProblem]> {
    let mut added = Vec::new();
    for block in &mut message.content {
        if let ContentBlock::ToolUse { id, input, .. } = block {
            if nests_deeper_than(input, MAX_TOOL_INPUT_DEPTH) {
                *input = Arc::new(serde_json::Value::Object(serde_json::Map::new()));
                if !problems.iter().any(|p| p.tool_use_id == *id) {
                    added.push(ToolInputProblem {
                        tool_use_id: id.clone(),
                        kind: InputProblemKind::TooDeep,
                        raw: String::new(),
                        detail: format!("nests deeper than {MAX_TOOL_INPUT_DEPTH} levels"),
                    });
                }
            }
        }
    }
    if added.is_empty() {
        return problems;
    }
    let mut all = problems.into_vec();
    all.extend(added);
    all.into_boxed_slice()
}

fn unique_tool_ids(
    message: &mut Message,
    problems: Box<[ToolInputProblem]>,
    salt: u64,
) -> BTreeMap<String, ToolInputProblem> {
    let unique = tool_ids_are_unique(message);
    if unique && problems.is_empty() {
        return BTreeMap::new();
    }
    let mut problems: BTreeMap<String, ToolInputProblem> = problems
        .into_vec()
        .into_iter()
        .map(|p| (p.tool_use_id.clone(), p))
        .collect();
    if unique {
        return problems;
    }
    let mut seen = BTreeSet::new();
    let mut renamed = 0;
    for block in &mut message.content {
        if let ContentBlock::ToolUse { id, .. } = block {
            if id.is_empty() || seen.contains(id.as_str()) {
                // A repeated id's input problem, if any, belongs to its first occurrence.
                let problem = if id.is_empty() {
                    problems.remove("")
                } else {
                    None
                };
                loop {
                    renamed += 1;
                    let candidate = format!("call_rebound_{salt}_{renamed}");
                    if !seen.contains(&candidate) {
                        *id = candidate;
                        break;
                    }
                }
                if let Some(mut p) = problem {
                    p.tool_use_id = id.clone();
                    problems.insert(id.clone(), p);
                }
            }
            seen.insert(id.clone());
        }
    }
    problems
}

/// Whether every tool use of `message` has a non-empty id no other one repeats (the usual
/// case, checked without allocating when the calls are few).
fn tool_ids_are_unique(message: &Message) -> bool {
    let ids = || message.tool_uses().map(|(id, _, _)| id);
    if ids().any(str::is_empty) {
        return false;
    }
    if ids().nth(CallIndex::SCAN_LIMIT).is_none() {
        return ids()
            .enumerate()
            .all(|(i, id)| ids().take(i).all(|earlier| earlier != id));
    }
    let mut sorted: Vec<&str> = ids().collect();
    sorted.sort_unstable();
    sorted.windows(2).all(|pair| pair[0] != pair[1])
}

#[cfg(test)]
mod tests;
