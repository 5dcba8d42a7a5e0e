//! Inputs to the machine: everything the world tells it.

use super::ids::{BatchId, CompactionId, PermitId, RequestId, TimerId};
use crate::budget::PermitDecision;
use crate::compaction::CompactionError;
use crate::conversation::{ContentBlock, Conversation};
use crate::failure::ProviderFailure;
use crate::response::AssistantResponse;
use crate::tool::{BatchOutcome, HostFailure};
use serde::{Deserialize, Serialize};

/// Something that happened, handed to [`AgentMachine::handle`](crate::AgentMachine::handle).
///
/// Answers carry the id of the command they answer; an answer whose id the machine is not
/// waiting for is ignored (see [`Handled`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Event {
    /// The person sent a message: starts the run. Only accepted before the run started.
    UserMessage {
        /// The message's blocks (usually one text block).
        content: Vec<ContentBlock>,
    },
    /// Continue a loaded conversation without a new message (e.g. after a crash): answers
    /// open tool calls as interrupted and asks the model for the next message.
    Resume,
    /// A provider request produced a complete assistant message.
    ProviderSucceeded {
        /// The request this answers.
        request: RequestId,
        /// The assembled response.
        response: AssistantResponse,
    },
    /// The provider began answering a request: a success status and the first piece of the
    /// answer arrived. Optional and not an answer (the request still ends with
    /// `ProviderSucceeded` or `ProviderFailed`): it lets a shared budget learn that retries
    /// work again one answer's length sooner than the success would tell it. A driver that
    /// cannot tell when an answer starts never sends it; a second one for the same request is
    /// ignored as stale.
    ProviderResponding {
        /// The request being answered.
        request: RequestId,
    },
    /// A provider request failed.
    ProviderFailed {
        /// The request this answers.
        request: RequestId,
        /// The classified failure.
        failure: ProviderFailure,
    },
    /// A tool batch finished. A batch stopped part way (the run was canceled while some of
    /// its calls ran) answers per call: an outcome for each call that finished, a `Canceled`
    /// host failure for the others (or no outcome at all). The run then fails with the
    /// cancel, and the calls that finished keep their results in the conversation; the
    /// others are answered as interrupted. [`Event::Cancel`] instead forgets the whole batch.
    ///
    /// Per-call outcomes answer exactly the calls of the batch's `RunTools`, each once, in
    /// any order; outcomes that do not (another id, one call twice, a call left out of a
    /// batch no host failure stopped) are refused ([`IgnoreReason::Mismatched`]) and the
    /// machine keeps waiting for the batch.
    ToolsFinished {
        /// The batch this answers.
        batch: BatchId,
        /// What the calls produced.
        outcome: BatchOutcome,
    },
    /// A sleep ended.
    TimerFired {
        /// The timer this answers.
        timer: TimerId,
    },
    /// A compaction finished.
    CompactionFinished {
        /// The compaction this answers.
        compaction: CompactionId,
        /// The compacted conversation, or why the compactor failed. In a trace, an error
        /// is its message (`{"Err": "…"}`).
        result: Result<Conversation, CompactionError>,
    },
    /// The shared retry budget answered a permit request.
    PermitAnswered {
        /// The permit request this answers.
        permit: PermitId,
        /// The budget's decision.
        decision: PermitDecision,
    },
    /// The host failed (receiver, session store, out of memory): the run fails. A failure of
    /// kind `Canceled` is the run's cancel, as [`Event::Cancel`] is.
    HostFailed {
        /// What failed.
        failure: HostFailure,
    },
    /// The person or embedder canceled: the run fails at once.
    Cancel,
}

impl Event {
    /// The person's message as one text block: [`Event::UserMessage`].
    #[must_use]
    pub fn user_text(text: impl Into<String>) -> Self {
        Event::UserMessage {
            content: vec![ContentBlock::text(text)],
        }
    }
}

/// What the machine did with an event.
///
/// What a driver does with it: `Accepted` and `Ignored(Terminal)` or `Ignored(Stale)` are
/// normal (an answer or a timer can race a cancel or the end of the run); nothing needs to
/// be done. `Ignored(Unexpected)` means the driver broke the protocol (it sent an event the
/// machine never asked for, like a second user message during a run): drivers check it with
/// a debug assertion, as [`AgentMachine::step`](crate::AgentMachine::step) does for its
/// callers. `Ignored(Mismatched)` is a driver's bug too: an answer that does not fit its
/// command (tool outcomes that do not answer the batch's calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[must_use = "an ignored event can mean the driver broke the protocol; see `Handled`"]
#[non_exhaustive]
pub enum Handled {
    /// The event changed the machine's state (and may have queued commands).
    Accepted,
    /// The event was ignored; nothing changed.
    Ignored(IgnoreReason),
}

/// Why an event was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum IgnoreReason {
    /// The run already finished or failed.
    Terminal,
    /// An answer to a command the machine is no longer waiting for (stale or duplicate).
    Stale,
    /// An event that makes no sense now (a second user message during a run).
    Unexpected,
    /// An answer to the awaited command that does not fit it: tool outcomes for a call the
    /// batch does not hold, two for one call, or none for a call
    /// ([`AgentMachine::tool_outcome_mismatch`](crate::AgentMachine::tool_outcome_mismatch)
    /// says which). The driver's bug, not the run's: the machine keeps waiting for a
    /// fitting answer.
    Mismatched,
}
