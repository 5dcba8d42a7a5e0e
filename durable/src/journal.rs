//! What a durable run writes to the journal: the outcome of each step, as the event it
//! gives the machine, and the wall-clock time it finished at.

use rebound_core::{CallOutcome, Event, ToolFailure};
use serde::{Deserialize, Serialize};

/// One journaled step that answers the machine: a provider attempt, a compaction, a
/// budget decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Step {
    /// Unix milliseconds when the step finished (the run's clock moves to it).
    pub(crate) at_ms: u64,
    /// Whether a provider attempt had streamed text before it failed (a stream reset).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) streamed: bool,
    /// The event for the machine, or why the run cannot go on (a conversation no provider
    /// can be sent, a missing target): the run fails with it.
    pub(crate) event: Result<Event, String>,
}

impl Step {
    /// A step that finished now with `event`.
    pub(crate) fn event(event: Event) -> Self {
        Step {
            at_ms: super::agent::unix_ms(),
            streamed: false,
            event: Ok(event),
        }
    }
}

/// One tool call of a batch, journaled on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CallStep {
    /// Unix milliseconds when the call finished.
    pub(crate) at_ms: u64,
    /// The call's outcome, or the host failure that stops the whole batch.
    pub(crate) outcome: Result<CallOutcome, ToolFailure>,
}
