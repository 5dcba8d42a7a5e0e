//! What a durable run writes to the journal: the outcome of each step, as the event it
//! gives the machine, and the wall-clock time it finished at; the run's first step also
//! the time the run's clock starts from.
//!
//! Only what the machine cannot derive is journaled: the outside world's answers (a provider
//! attempt's outcome, a tool call's, a compaction's, a budget's) and their times. Everything
//! the machine decides from them (retries, backoffs, tool results, messages) is decided again
//! on replay, from the same seed.

use crate::clock::unix_ms;
use rebound_core::{CallOutcome, Event};
use serde::{Deserialize, Serialize};

/// What every journaled step writes: its outcome, and, for the run's first step, the
/// origin of the run's clock (no step of its own is spent on it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry<T> {
    /// Unix milliseconds when the run's first step began: the run's clock counts from it.
    /// Only on that step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) origin_ms: Option<u64>,
    /// The step's outcome.
    pub(crate) step: T,
}

/// One journaled step that answers the machine: a provider attempt, a compaction, a
/// budget decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Step {
    /// Unix milliseconds when the step finished (the run's clock moves to it).
    pub(crate) at_ms: u64,
    /// Unix milliseconds when a provider attempt's answer began (its first streamed
    /// piece): the run hears then that it is being answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) began_at_ms: Option<u64>,
    /// Read from journals of earlier versions, which said only that the answer had begun:
    /// it is then taken to have begun when the step finished.
    #[serde(default, skip_serializing)]
    pub(crate) streamed: bool,
    /// The event for the machine, or why the run cannot go on (a conversation no provider
    /// can be sent, a missing target): the run fails with it.
    pub(crate) event: Result<Event, String>,
}

impl Step {
    /// A step that finished now with `event`.
    pub(crate) fn event(event: Event) -> Self {
        Step {
            at_ms: unix_ms(),
            began_at_ms: None,
            streamed: false,
            event: Ok(event),
        }
    }

    /// When the answer began, if it did.
    pub(crate) fn began_at(&self) -> Option<u64> {
        self.began_at_ms.or(self.streamed.then_some(self.at_ms))
    }
}

/// A step that told the shared budget a note of the run, or the notes an answer's start
/// made (one step for them all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct NoteStep {
    /// Unix milliseconds when the notes were told.
    pub(crate) at_ms: u64,
}

/// One tool call of a batch, journaled on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallStep {
    /// Unix milliseconds when the call finished.
    pub(crate) at_ms: u64,
    /// The outcomes the tool gave for the call, as it gave them (a failure of the whole
    /// one-call batch is the call's): core's rule makes them one per call.
    pub(crate) outcomes: Vec<CallOutcome>,
}

/// The step that records a cancel once it took effect: when, and the outcome of the step it
/// interrupted when that step had finished. Restate runs a step to its end and then answers
/// its await with the cancel instead of its outcome, although the outcome is journaled: the
/// endpoint keeps the outcome the step gave it and journals it again here, so that a replay
/// reads the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CancelStep<T> {
    /// Unix milliseconds when the cancel took effect (the run's clock moves to it).
    pub(crate) at_ms: u64,
    /// The interrupted step's outcome, when it finished; `None` when it did not, or when the
    /// process that ran it is gone (a crash between the cancel and this step).
    pub(crate) finished: Option<T>,
}
