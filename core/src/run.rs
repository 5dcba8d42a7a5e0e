//! The run: the one driver core every shell uses.
//!
//! [`AgentMachine`] decides; a shell (the tokio runner, the simulator, the durable service,
//! the Python and JavaScript bindings) does what it decides. Between the two sits
//! everything a shell would otherwise keep for itself, and so keep differently: which command
//! the run awaits, the run's tally, the trace, the end of the run (a host failure after the
//! last command included), a stream that began and then failed, and the machine's promise
//! that a run never waits for nothing. [`Run`] holds all of it, with no I/O, the way
//! quinn-proto's `Connection` holds a connection's state for quinn's one driver: the shell
//! hands it events ([`Run::handle`]) and executes what it polls ([`Run::poll`]), and reads
//! the result at the end.
//!
//! ```
//! use rebound_core::run::{Action, Run};
//! use rebound_core::{
//!     AssistantResponse, Command, Event, Handled, MachineConfig, Message, Millis,
//! };
//!
//! let mut run = Run::new(MachineConfig::default(), 7).recording(true);
//! assert_eq!(run.handle(Millis(0), Event::user_text("hi")), Handled::Accepted);
//! let mut now = Millis(0);
//! while let Some(action) = run.poll() {
//!     let Action::Command(command) = action else { continue };
//!     match command {
//!         // The one command the run awaits: answer it (here at once, with a reply).
//!         Command::SendRequest { request, .. } => {
//!             now = now.plus(250);
//!             let response = AssistantResponse::end_turn(Message::assistant_text("hello"));
//!             let handled = run.handle(now, Event::ProviderSucceeded { request, response });
//!             assert_eq!(handled, Handled::Accepted);
//!         }
//!         // What a run without failures, tools, overflow or a budget never asks.
//!         Command::Sleep { .. }
//!         | Command::RunTools { .. }
//!         | Command::Compact { .. }
//!         | Command::AcquirePermit { .. } => unreachable!("no retry, tool, compaction or budget"),
//!         // Shown, stored or noted; nothing answers them.
//!         Command::AppendMessage { .. }
//!         | Command::NotifyRetry { .. }
//!         | Command::NotifyFallback { .. }
//!         | Command::ReplaceConversation { .. }
//!         | Command::NoteBudget { .. }
//!         | Command::Finish { .. }
//!         | Command::Fail { .. } => {}
//!     }
//! }
//! let end = run.end().expect("the run ended").as_ref().expect("it finished");
//! assert_eq!(end.turns, 1);
//! assert_eq!(run.tally().requests, 1);
//! assert_eq!(run.steps().len(), 2); // the user message, the answer: a replayable trace
//! ```

use crate::budget::BudgetNote;
use crate::compaction::{compact, CompactionError, CompactionPolicy};
use crate::conversation::Conversation;
use crate::machine::{
    AgentMachine, BatchId, Command, CompactionId, Event, FinishReason, Handled, IgnoreReason,
    MachineConfig, PermitId, RequestId, RunError, TimerId,
};
use crate::tally::RunTally;
use crate::time::Millis;
use crate::trace::{TraceHeader, TraceStep};
use std::collections::VecDeque;
use std::sync::Arc;

mod issued;
pub use issued::{Issued, Refusal, UnknownAnswer};

/// One run of an [`AgentMachine`], as every shell drives it: the machine, the command it
/// awaits, the tally, the recorded steps and the end. See the [module](self).
#[derive(Debug)]
pub struct Run {
    machine: AgentMachine,
    seed: u64,
    /// The conversation the run started from, for the trace header (shares the messages).
    initial: Option<Conversation>,
    meta: Vec<(String, String)>,
    tally: RunTally,
    record: bool,
    steps: Vec<Step>,
    handled: usize,
    /// Why the last event was refused as not fitting its command.
    refusal: Option<String>,
    /// Told before the step's commands (a stream reset).
    front: Option<Action>,
    /// The step's commands, not polled yet.
    queue: VecDeque<Command>,
    /// Told after them (the run's own `Fail`).
    back: Option<Command>,
    awaited: Option<Awaited>,
    /// The request whose answer began, until it ends.
    responding: Option<RequestId>,
    end: Option<Result<Ended, RunError>>,
}

/// What the shell does next: a command of the machine, or what the run adds to them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// Execute this command of the machine. Those that await an answer
    /// ([`Command::awaits_answer`]) are answered with [`Run::handle`]; the others are shown,
    /// stored or noted. [`Command::Finish`] and [`Command::Fail`] end the run (also a `Fail`
    /// the run makes itself when the machine broke its promise to always await something).
    Command(Command),
    /// The answer to `request` had begun (its partial text may have been shown) and then
    /// failed: whatever was shown of it is void. Comes before the commands that answer the
    /// failure (the retry's note, say).
    StreamReset {
        /// The request whose answer was cut.
        request: RequestId,
        /// Its attempt number.
        attempt: u32,
    },
}

/// The command the run awaits an answer to: at most one at a time, and exactly one until
/// the run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Awaited {
    /// A provider request ([`Command::SendRequest`]).
    Request {
        /// Its id.
        request: RequestId,
        /// Its attempt number on its target.
        attempt: u32,
    },
    /// A timer ([`Command::Sleep`]).
    Timer(TimerId),
    /// A tool batch ([`Command::RunTools`]).
    Tools(BatchId),
    /// A compaction ([`Command::Compact`]).
    Compaction(CompactionId),
    /// A permit of the retry budget ([`Command::AcquirePermit`]).
    Permit(PermitId),
}

impl Awaited {
    /// The awaited command `command` stands for, if it awaits an answer.
    #[must_use]
    pub fn of(command: &Command) -> Option<Awaited> {
        match command {
            Command::SendRequest {
                request, attempt, ..
            } => Some(Awaited::Request {
                request: *request,
                attempt: *attempt,
            }),
            Command::Sleep { timer, .. } => Some(Awaited::Timer(*timer)),
            Command::RunTools { batch, .. } => Some(Awaited::Tools(*batch)),
            Command::Compact { compaction, .. } => Some(Awaited::Compaction(*compaction)),
            Command::AcquirePermit { permit, .. } => Some(Awaited::Permit(*permit)),
            Command::AppendMessage { .. }
            | Command::ReplaceConversation { .. }
            | Command::NotifyRetry { .. }
            | Command::NotifyFallback { .. }
            | Command::NoteBudget { .. }
            | Command::Finish { .. }
            | Command::Fail { .. } => None,
        }
    }

    /// Whether `event` is the answer to this command.
    #[must_use]
    pub fn answered_by(&self, event: &Event) -> bool {
        match (self, event) {
            (
                Awaited::Request { request, .. },
                Event::ProviderSucceeded { request: r, .. }
                | Event::ProviderFailed { request: r, .. },
            ) => request == r,
            (Awaited::Timer(t), Event::TimerFired { timer }) => t == timer,
            (Awaited::Tools(b), Event::ToolsFinished { batch, .. }) => b == batch,
            (Awaited::Compaction(c), Event::CompactionFinished { compaction, .. }) => {
                c == compaction
            }
            (Awaited::Permit(p), Event::PermitAnswered { permit, .. }) => p == permit,
            _ => false,
        }
    }
}

/// How a run that finished ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Why it finished.
    pub reason: FinishReason,
    /// Assistant messages appended.
    pub turns: u32,
}

/// One event handed to the machine and the commands it emitted: a line of the trace, with
/// the commands as they are (cheap to keep: conversations and messages are shared).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// When the event was handled.
    pub at: Millis,
    /// The event.
    pub event: Event,
    /// The commands it produced, in order.
    pub commands: Vec<Command>,
}

impl Step {
    /// The step as a trace line ([`TraceStep`], commands as JSON values).
    #[must_use]
    pub fn to_trace(&self) -> TraceStep {
        TraceStep::new(self.at, self.event.clone(), &self.commands)
    }
}

/// Core's compaction with a run's policy ([`Run::default_compaction`]): the answer to a
/// [`Command::Compact`] for a shell with no compactor of its own.
#[derive(Debug, Clone)]
pub struct DefaultCompaction(CompactionPolicy);

impl DefaultCompaction {
    /// Compacts `conversation` ([`compact`]).
    ///
    /// # Errors
    ///
    /// When the conversation cannot be compacted.
    pub fn compact(&self, conversation: &Conversation) -> Result<Conversation, CompactionError> {
        compact(conversation, &self.0)
    }
}

/// Everything a run leaves behind, from [`Run::into_parts`].
#[derive(Debug)]
#[non_exhaustive]
pub struct RunParts {
    /// The conversation as the machine left it.
    pub conversation: Conversation,
    /// The tally.
    pub tally: RunTally,
    /// The recorded steps not taken yet ([`Run::recording`]).
    pub steps: Vec<Step>,
    /// How the run ended, if it did.
    pub end: Option<Result<Ended, RunError>>,
}

/// The error of a run whose machine emitted nothing to wait on without ending.
const WAITS_FOR_NOTHING: &str = "the machine emitted no command to wait on and did not stop";

impl Run {
    /// A run of a new machine with `config` and jitter `seed`.
    #[must_use]
    pub fn new(config: impl Into<Arc<MachineConfig>>, seed: u64) -> Self {
        Self::from_machine(AgentMachine::new(config, seed), seed, None)
    }

    /// A run continuing `conversation` (a loaded session).
    #[must_use]
    pub fn with_conversation(
        config: impl Into<Arc<MachineConfig>>,
        seed: u64,
        conversation: Conversation,
    ) -> Self {
        let initial = (!conversation.is_empty()).then(|| conversation.clone());
        let machine = AgentMachine::with_conversation(config, seed, conversation);
        Self::from_machine(machine, seed, initial)
    }

    fn from_machine(machine: AgentMachine, seed: u64, initial: Option<Conversation>) -> Self {
        Run {
            machine,
            seed,
            initial,
            meta: Vec::new(),
            tally: RunTally::default(),
            record: false,
            steps: Vec::new(),
            handled: 0,
            refusal: None,
            front: None,
            queue: VecDeque::new(),
            back: None,
            awaited: None,
            responding: None,
            end: None,
        }
    }

    /// Keeps every step ([`Run::steps`], [`Run::take_steps`]): on for a trace, off (the
    /// default) where only the tally and the end are read. Off, the trace header
    /// ([`Run::header`]) leaves out the conversation the run started from.
    #[must_use]
    pub fn recording(mut self, on: bool) -> Self {
        self.record = on;
        if !on {
            self.initial = None;
        }
        self
    }

    /// The embedder's secrets: masked in every failure the run is told of, before the
    /// machine takes it in, the tally counts it or the trace records it (see
    /// [`AgentMachine::with_secrets`]).
    #[must_use]
    pub fn with_secrets(mut self, secrets: crate::Secrets) -> Self {
        self.machine.set_secrets(secrets);
        self
    }

    /// Adds a `key: value` fact to the trace header (the driver, a scenario's name, a
    /// target's label; never a secret).
    #[must_use]
    pub fn meta(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.meta.push((key.into(), value.into()));
        self
    }

    /// The trace header of this run: seed, configuration, the conversation it started from
    /// and the facts given to [`Run::meta`].
    #[must_use]
    pub fn header(&self) -> TraceHeader {
        let mut header = TraceHeader::new(self.seed, self.machine.config().clone());
        header.initial_conversation.clone_from(&self.initial);
        for (key, value) in &self.meta {
            header.meta.insert(key.clone(), value.clone());
        }
        header
    }

    /// Hands the machine `event` at `now` and queues what it asks for ([`Run::poll`]).
    ///
    /// What was still queued of the previous step is dropped: an event the shell reports
    /// before it executed them (a host failure showing a message, say) supersedes them.
    /// After the run ended, events are ignored, except a host failure after a finish (the
    /// step that ended the run could not be stored or shown), which fails the run. An event
    /// the machine did not ask for ([`IgnoreReason::Unexpected`]) changes nothing: it is
    /// neither recorded nor counted, and what was queued stays. A `now` earlier than one
    /// handed before is taken as that one (the clock never goes backwards), by the machine
    /// and in what is recorded and counted.
    pub fn handle(&mut self, now: Millis, event: Event) -> Handled {
        // An earlier time than one already handed counts as that one, for the machine and
        // for what is recorded.
        let now = self.machine.clock(now);
        let event = self.machine.at_the_door(event);
        if let Some(end) = &self.end {
            if let (Ok(_), Event::HostFailed { failure }) = (end, &event) {
                self.end = Some(Err(RunError::from(failure.clone())));
                self.clear();
            }
            return Handled::Ignored(IgnoreReason::Terminal);
        }
        let answers = self.awaited.filter(|a| a.answered_by(&event));
        let began = match &event {
            Event::ProviderResponding { request } => Some(*request),
            _ => None,
        };
        let cut = match (&event, self.responding, self.awaited) {
            (
                Event::ProviderFailed { request, .. },
                Some(responding),
                Some(Awaited::Request { attempt, .. }),
            ) if *request == responding => Some((*request, attempt)),
            _ => None,
        };
        // The tally reads the event before the machine takes it. It counts only answers to
        // the request awaited, which the machine never refuses as unexpected; of an event it
        // does refuse, the tally would keep only the time: put back.
        self.refusal = match &event {
            Event::ToolsFinished { batch, outcome } => {
                self.machine.tool_outcome_mismatch(*batch, outcome)
            }
            _ => None,
        };
        let elapsed_ms = self.tally.elapsed_ms;
        self.tally.event(now, &event);
        let recorded = self.record.then(|| event.clone());
        let handled = self.machine.handle(now, event);
        if let Handled::Ignored(IgnoreReason::Unexpected | IgnoreReason::Mismatched) = handled {
            self.tally.elapsed_ms = elapsed_ms;
            return handled;
        }
        self.clear();
        self.handled += 1;
        if handled == Handled::Accepted {
            if answers.is_some() {
                self.awaited = None;
                self.responding = None;
            }
            if let Some(request) = began {
                self.responding = Some(request);
            }
            if let Some((request, attempt)) = cut {
                self.front = Some(Action::StreamReset { request, attempt });
            }
        }
        // The step's commands, taken from the machine whole (its queue and this one swap
        // buffers: nothing is moved or allocated per command).
        let mut queue = std::mem::take(&mut self.queue);
        self.machine.swap_queue(&mut queue);
        for command in &queue {
            self.command(command, began.is_some());
        }
        let commands = if self.record {
            queue.iter().cloned().collect()
        } else {
            Vec::new()
        };
        self.queue = queue;
        if let Some(event) = recorded {
            self.steps.push(Step {
                at: now,
                event,
                commands,
            });
        }
        if self.end.is_none() && self.awaited.is_none() {
            self.fail(WAITS_FOR_NOTHING.to_owned());
        }
        handled
    }

    /// Takes note of one command the machine emitted.
    fn command(&mut self, command: &Command, answering_a_start: bool) {
        self.tally.command(command);
        if let Some(awaited) = Awaited::of(command) {
            self.awaited = Some(awaited);
        }
        match command {
            Command::Finish { reason, turns } => {
                self.end = Some(Ok(Ended {
                    reason: reason.clone(),
                    turns: *turns,
                }));
            }
            Command::Fail { error } => self.end = Some(Err(RunError::clone(error))),
            Command::NoteBudget { .. } => {}
            other if answering_a_start && self.end.is_none() => {
                // An answer's start goes on while the stream does: it may note the budget,
                // nothing else.
                self.fail(format!(
                    "the machine answered a response's start with {other:?}"
                ));
            }
            _ => {}
        }
    }

    /// Ends the run with an invariant failure of the machine, told to the shell as a `Fail`.
    fn fail(&mut self, message: String) {
        let error = RunError::Invariant { message };
        self.end = Some(Err(error.clone()));
        self.awaited = None;
        self.back = Some(Command::Fail {
            error: Box::new(error),
        });
    }

    /// Drops what was not polled of the step.
    fn clear(&mut self) {
        self.front = None;
        self.queue.clear();
        self.back = None;
    }

    /// [`Run::handle`] for a shell reporting what happened when it executed a command: an
    /// answer that does not fit its command ([`IgnoreReason::Mismatched`]: tool outcomes
    /// that do not answer the batch's calls, from a tool executor of the embedder's, say)
    /// is the shell's bug, not something to wait out, and ends the run with an invariant
    /// failure saying why. A driver whose caller may correct the answer (Python's machine)
    /// uses `handle` and reads [`Run::refusal`].
    pub fn report(&mut self, now: Millis, event: Event) -> Handled {
        let handled = self.handle(now, event);
        if handled == Handled::Ignored(IgnoreReason::Mismatched) {
            let why = self.refusal.take().unwrap_or_default();
            self.broken(format!("the answer does not fit its command: {why}"));
        }
        handled
    }

    /// Why the last event handed was refused as not fitting its command
    /// ([`IgnoreReason::Mismatched`]); `None` after any other event.
    #[must_use]
    pub fn refusal(&self) -> Option<&str> {
        self.refusal.as_deref()
    }

    /// Ends the run with an invariant failure the shell found: a command it cannot execute
    /// because the machine's state is broken (a conversation no request can be built from,
    /// a provider that stopped reading unasked). Nothing queued is done any more; the shell
    /// polls the `Fail` and shows it. Ignored after the end.
    pub fn broken(&mut self, message: impl Into<String>) {
        if self.end.is_none() {
            self.clear();
            self.fail(message.into());
        }
    }

    /// The next thing to do, in order; `None` when the run waits for an answer or has ended.
    pub fn poll(&mut self) -> Option<Action> {
        if let Some(action) = self.front.take() {
            return Some(action);
        }
        self.queue
            .pop_front()
            .or_else(|| self.back.take())
            .map(Action::Command)
    }

    /// Hands the machine the start of `request`'s answer ([`Event::ProviderResponding`]) at
    /// `now`, while the stream goes on, and returns what the shell tells the retry budget.
    /// Anything else the machine asked for would be a broken promise: the run then ends
    /// with an invariant failure ([`Run::end`]), and the shell stops the stream.
    pub fn responding(&mut self, now: Millis, request: RequestId) -> Vec<BudgetNote> {
        let _ = self.handle(now, Event::ProviderResponding { request });
        let mut notes = Vec::new();
        while let Some(action) = self.poll() {
            if let Action::Command(Command::NoteBudget { note }) = action {
                notes.push(note);
            }
        }
        notes
    }

    /// Core's compaction of `conversation` with this run's policy: the answer to a
    /// [`Command::Compact`] for a shell with no compactor of its own.
    ///
    /// # Errors
    ///
    /// When the conversation cannot be compacted ([`compact`]).
    pub fn compact_default(
        &self,
        conversation: &Conversation,
    ) -> Result<Conversation, CompactionError> {
        compact(conversation, &self.machine.config().compaction)
    }

    /// Core's compaction with this run's policy, owned: for a shell that compacts on
    /// another task (see [`Run::compact_default`]).
    #[must_use]
    pub fn default_compaction(&self) -> DefaultCompaction {
        DefaultCompaction(self.machine.config().compaction.clone())
    }

    /// The command the run awaits an answer to (`None` before the first event and after
    /// the end).
    #[must_use]
    pub fn awaited(&self) -> Option<Awaited> {
        self.awaited
    }

    /// How the run ended: `None` while it runs.
    #[must_use]
    pub fn end(&self) -> Option<&Result<Ended, RunError>> {
        self.end.as_ref()
    }

    /// Whether the run ended.
    #[must_use]
    pub fn is_ended(&self) -> bool {
        self.end.is_some()
    }

    /// What happened so far, counted from the events and commands.
    #[must_use]
    pub fn tally(&self) -> &RunTally {
        &self.tally
    }

    /// The steps recorded and not taken yet ([`Run::recording`]).
    #[must_use]
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Takes the steps recorded so far: a shell that writes its trace as it goes takes them
    /// after every [`Run::handle`].
    pub fn take_steps(&mut self) -> Vec<Step> {
        std::mem::take(&mut self.steps)
    }

    /// Events handed to the machine so far.
    #[must_use]
    pub fn handled(&self) -> usize {
        self.handled
    }

    /// The machine (its configuration, its conversation).
    #[must_use]
    pub fn machine(&self) -> &AgentMachine {
        &self.machine
    }

    /// The jitter seed.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The conversation, the tally, the steps not taken and the end.
    #[must_use]
    pub fn into_parts(self) -> RunParts {
        RunParts {
            conversation: self.machine.into_conversation(),
            tally: self.tally,
            steps: self.steps,
            end: self.end,
        }
    }
}

#[cfg(test)]
mod tests;

pub use crate::deadline::{Stall, StreamWatch};
