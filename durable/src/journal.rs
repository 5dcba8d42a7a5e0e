//! What a durable run writes to the journal: the outcome of each step, as the event it
//! gives the machine, and the wall-clock time it finished at.

use crate::clock::unix_ms;
use rebound_core::{CallOutcome, Event};
use serde::{Deserialize, Serialize};

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
