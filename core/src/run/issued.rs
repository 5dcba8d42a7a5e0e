//! The ids of the commands a run emitted that want an answer, for a driver whose events come
//! from an embedder's own code (the Python and JavaScript bindings): an answer carrying an id
//! the run never handed out is a bug in that code, and the embedder is told which ids it did
//! hand out. The runner, the simulator and the durable service answer only what they polled,
//! so they need no such check.

use super::Run;
use crate::machine::{Command, Event, Handled, IgnoreReason};
use crate::time::Millis;
use std::collections::BTreeSet;
use std::fmt;

/// The answerable commands a run emitted, per kind. [`Issued::note`] every command polled;
/// [`Issued::check`] every event before it is handled.
#[derive(Debug, Default, Clone)]
pub struct Issued {
    requests: BTreeSet<u64>,
    timers: BTreeSet<u64>,
    batches: BTreeSet<u64>,
    compactions: BTreeSet<u64>,
    permits: BTreeSet<u64>,
}

/// An event answering a command the run never emitted: which event, which id, and the latest
/// ids of that kind the run did emit (its `Display` says all of it to the embedder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAnswer {
    /// The event's name (`ProviderSucceeded`).
    pub event: &'static str,
    /// What its id names (`request`).
    pub what: &'static str,
    /// The command that would carry the id (`SendRequest`).
    pub command: &'static str,
    /// The id the event carried.
    pub id: u64,
    /// Up to three ids of that kind the run emitted, newest first.
    pub recent: Vec<u64>,
}

impl fmt::Display for UnknownAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let UnknownAnswer {
            event,
            what,
            command,
            id,
            recent,
        } = self;
        write!(
            f,
            "{event} answers {what} {id}, but this machine never emitted a {command} with that \
             id ("
        )?;
        if recent.is_empty() {
            write!(f, "it has emitted no {command} yet")?;
        } else {
            let ids: Vec<String> = recent.iter().map(u64::to_string).collect();
            write!(f, "the latest {what} ids it emitted: {}", ids.join(", "))?;
        }
        write!(f, "); answer with the id of the command you executed")
    }
}

impl std::error::Error for UnknownAnswer {}

/// An embedder's event the run refused, the run unchanged: the bindings' typed errors, worded
/// once here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// An answer to an id no command of the run carried.
    #[error("{0}")]
    UnknownAnswer(UnknownAnswer),
    /// An event the machine did not ask for now ([`IgnoreReason::Unexpected`]).
    #[error(
        "the machine did not ask for this event now (e.g. a second user message during a run, \
         or Resume after it started); it was ignored"
    )]
    Unexpected,
    /// Tool outcomes that do not answer the batch's calls ([`IgnoreReason::Mismatched`]):
    /// why, as [`Run::refusal`] says it.
    #[error(
        "the tool outcomes do not answer the batch's calls: {0}; the event was refused and \
         the machine still waits for the batch"
    )]
    Mismatched(String),
}

impl Issued {
    /// Remembers `command`'s id when it is one an event answers.
    pub fn note(&mut self, command: &Command) {
        match command {
            Command::SendRequest { request, .. } => self.requests.insert(request.0),
            Command::Sleep { timer, .. } => self.timers.insert(timer.0),
            Command::RunTools { batch, .. } => self.batches.insert(batch.0),
            Command::Compact { compaction, .. } => self.compactions.insert(compaction.0),
            Command::AcquirePermit { permit, .. } => self.permits.insert(permit.0),
            Command::AppendMessage { .. }
            | Command::NotifyRetry { .. }
            | Command::NotifyFallback { .. }
            | Command::ReplaceConversation { .. }
            | Command::NoteBudget { .. }
            | Command::Finish { .. }
            | Command::Fail { .. } => false,
        };
    }

    /// Hands `event` to `run` at `now` when it answers only what was emitted: how the run
    /// took it (accepted, stale or after the end), or why it was refused, the run unchanged.
    ///
    /// # Errors
    ///
    /// A [`Refusal`]: an answer to an id never emitted (not handed to the run), an event
    /// the machine did not ask for, or tool outcomes that do not fit the batch.
    pub fn handle(&self, run: &mut Run, now: Millis, event: Event) -> Result<Handled, Refusal> {
        self.check(&event).map_err(Refusal::UnknownAnswer)?;
        match run.handle(now, event) {
            Handled::Ignored(IgnoreReason::Unexpected) => Err(Refusal::Unexpected),
            Handled::Ignored(IgnoreReason::Mismatched) => Err(Refusal::Mismatched(
                run.refusal().unwrap_or("they do not fit").to_owned(),
            )),
            handled => Ok(handled),
        }
    }

    /// Whether `event` answers only what was emitted (an event that answers nothing, a user
    /// message say, always does).
    ///
    /// # Errors
    ///
    /// [`UnknownAnswer`] for an answer to an id no noted command carried.
    pub fn check(&self, event: &Event) -> Result<(), UnknownAnswer> {
        let (set, id, what, command, name) = match event {
            Event::ProviderSucceeded { request, .. } => (
                &self.requests,
                request.0,
                "request",
                "SendRequest",
                "ProviderSucceeded",
            ),
            Event::ProviderFailed { request, .. } => (
                &self.requests,
                request.0,
                "request",
                "SendRequest",
                "ProviderFailed",
            ),
            Event::ProviderResponding { request } => (
                &self.requests,
                request.0,
                "request",
                "SendRequest",
                "ProviderResponding",
            ),
            Event::TimerFired { timer } => (&self.timers, timer.0, "timer", "Sleep", "TimerFired"),
            Event::ToolsFinished { batch, .. } => {
                (&self.batches, batch.0, "batch", "RunTools", "ToolsFinished")
            }
            Event::CompactionFinished { compaction, .. } => (
                &self.compactions,
                compaction.0,
                "compaction",
                "Compact",
                "CompactionFinished",
            ),
            Event::PermitAnswered { permit, .. } => (
                &self.permits,
                permit.0,
                "permit",
                "AcquirePermit",
                "PermitAnswered",
            ),
            _ => return Ok(()),
        };
        if set.contains(&id) {
            return Ok(());
        }
        Err(UnknownAnswer {
            event: name,
            what,
            command,
            id,
            recent: set.iter().rev().take(3).copied().collect(),
        })
    }
}
