//! Outputs of the machine: what the driver must do.

use super::config::StreamDeadlines;
use super::error::RunError;
use super::ids::{BatchId, CompactionId, PermitId, RequestId, TimerId};
use crate::budget::{BudgetNote, PermitAsk};
use crate::compaction::CompactionReport;
use crate::conversation::{Conversation, Message};
use crate::failure::FailureKind;
use crate::response::StopReason;
use crate::tool::ToolCall;
use serde::{Serialize, Serializer};
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A cheap, shared, read-only view of the conversation at the moment a command was made.
///
/// Retries of one request share one snapshot: no retry copies the conversation. In a trace it
/// is written as `{"messages": N, "digest": "…"}`, enough to detect a divergence without
/// storing the conversation at every step.
#[derive(Debug, Clone)]
pub struct Snapshot(pub Arc<Conversation>);

impl Snapshot {
    /// The shared conversation.
    #[must_use]
    pub fn arc(&self) -> &Arc<Conversation> {
        &self.0
    }

    /// A 64-bit FNV-1a digest of the conversation's JSON, as written into traces.
    #[must_use]
    pub fn digest(&self) -> u64 {
        let bytes = serde_json::to_vec(&*self.0).unwrap_or_default();
        bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
    }
}

impl Deref for Snapshot {
    type Target = Conversation;
    fn deref(&self) -> &Conversation {
        &self.0
    }
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Serialize for Snapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Snapshot", 2)?;
        st.serialize_field("messages", &self.0.len())?;
        st.serialize_field("digest", &format!("{:016x}", self.digest()))?;
        st.end()
    }
}

/// Told to the UI before a delayed retry, a compaction retry or the retry without reasoning
/// (never for tool errors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ProviderRetryInfo {
    /// The 1-based number of the attempt about to be made (the first retry is attempt 2).
    /// For a compaction retry, the attempt number is unchanged: compaction costs no attempt.
    pub attempt: u32,
    /// Attempts allowed per request on this target.
    pub max_attempts: u32,
    /// How long the driver will wait before the attempt, in ms.
    pub delay_ms: u64,
    /// What failed.
    pub kind: FailureKind,
    /// The HTTP status, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The server's `retry-after` hint, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The provider's message or fault description (shared with the failure).
    pub message: Arc<str>,
    /// Index of the target being retried.
    pub target: usize,
}

impl ProviderRetryInfo {
    /// Whether this announces the retry after a compaction (a context overflow), which
    /// waits for nothing and costs no attempt, rather than a retry after a failure.
    #[must_use]
    pub fn is_compaction(&self) -> bool {
        self.kind == FailureKind::ContextOverflow
    }

    /// Whether this announces the one retry without reasoning items or thinking blocks
    /// after the provider could not verify them, which waits for nothing and costs no
    /// attempt.
    #[must_use]
    pub fn is_without_reasoning(&self) -> bool {
        self.kind == FailureKind::ReasoningRejected
    }
}

impl fmt::Display for ProviderRetryInfo {
    /// The CLI's status line, e.g. `provider unavailable: retrying in 2.4s (attempt 2/4)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_compaction() {
            return write!(f, "{}: compacting the conversation and retrying", self.kind);
        }
        if self.is_without_reasoning() {
            return write!(f, "{}: retrying once without reasoning items", self.kind);
        }
        write!(
            f,
            "{}: retrying in {:.1}s (attempt {}/{})",
            self.kind,
            self.delay_ms as f64 / 1000.0,
            self.attempt,
            self.max_attempts
        )
    }
}

/// Told to the UI before the first request to a fallback target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct FallbackInfo {
    /// Index of the abandoned target.
    pub from: usize,
    /// Index of the target taking over.
    pub to: usize,
    /// Printable name of `from`.
    pub from_label: String,
    /// Printable name of `to`.
    pub to_label: String,
    /// What made `from` give up.
    pub kind: FailureKind,
    /// The last failure's message (shared with the failure).
    pub message: Arc<str>,
}

impl fmt::Display for FallbackInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): falling back from {} to {}",
            self.kind, self.message, self.from_label, self.to_label
        )
    }
}

/// Why a run finished successfully.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// The model stopped without asking for tools.
    Model(StopReason),
    /// `max_turns` assistant messages were appended.
    MaxTurns,
    /// `Resume` found nothing to do: the last message was a complete assistant message.
    NothingToDo,
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FinishReason::Model(r) => f.write_str(r.as_str()),
            FinishReason::MaxTurns => f.write_str("max_turns"),
            FinishReason::NothingToDo => f.write_str("nothing_to_do"),
        }
    }
}

/// What a provider request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestPurpose {
    /// The next assistant message of the conversation.
    #[default]
    Turn,
    /// A summary of older turns, for compaction: the conversation sent ends with
    /// [`SUMMARY_PROMPT`](crate::compaction::SUMMARY_PROMPT), and its answer is not appended
    /// to the conversation. Send it like any other request (same target, same tools).
    Summary,
}

impl RequestPurpose {
    /// Whether this is [`RequestPurpose::Turn`].
    #[must_use]
    pub fn is_turn(&self) -> bool {
        *self == RequestPurpose::Turn
    }
}

/// Something the driver must do, taken from [`AgentMachine::poll`](crate::AgentMachine::poll).
///
/// **Exhaustive on purpose.** Unlike the other enums of this crate, `Command` is not
/// `#[non_exhaustive]`: a driver must answer every command (a `SendRequest` left unanswered
/// stalls the run), so a new command is a breaking change, released as one, and a driver's
/// `match` should list every variant with no catch-all arm — then it stops compiling when a
/// command is added instead of silently dropping it. [`AgentMachine`](crate::AgentMachine)'s
/// example is such a driver.
///
/// **One answer awaited at a time.** Five commands want an answer (`SendRequest`, `Sleep`,
/// `RunTools`, `Compact`, `AcquirePermit`); the machine never emits one while another is
/// unanswered. The rest (`AppendMessage`, `ReplaceConversation`, `NotifyRetry`,
/// `NotifyFallback`, `NoteBudget`) are done in order and answered by nothing.
///
/// **Time.** A [`Sleep`](Command::Sleep) is relative (`delay_ms`): it concerns this machine
/// alone, and the driver's one job is to wait that long on its own timer, whatever its clock
/// reads. The times in an [`AcquirePermit`](Command::AcquirePermit)'s ask (deadline, request
/// start) and in a budget's answers and notes (`WaitUntil`, `RateLimited { until }`) are
/// absolute [`Millis`](crate::Millis) on the driver's clock, the `now` it passes to
/// [`handle`](crate::AgentMachine::handle). That may be any monotonic millisecond clock, but
/// with a shared budget it must be the budget's clock (its origin): these times are compared
/// with other machines' times in one queue and may be read long after they were written (a
/// queued ask, a rate limit learned by another agent), when a relative time would no longer
/// mean anything.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    /// Persist and show a complete message (the machine has already appended it).
    AppendMessage {
        /// The message, shared with the machine's conversation (no copy is made).
        message: Arc<Message>,
    },
    /// Send a provider request for `conversation` to target `target`; answer with
    /// `ProviderSucceeded` or `ProviderFailed` carrying `request`.
    SendRequest {
        /// The id to answer with.
        request: RequestId,
        /// Index into the fallback chain.
        target: usize,
        /// 1-based attempt number on this target for this request.
        attempt: u32,
        /// What to send.
        conversation: Snapshot,
        /// What the request is for: the next message, or a summary for compaction.
        #[serde(default, skip_serializing_if = "RequestPurpose::is_turn")]
        purpose: RequestPurpose,
        /// How long the response may take: past either deadline, answer with a
        /// [`TransportFault::IdleTimeout`](crate::TransportFault::IdleTimeout) failure.
        /// From [`MachineConfig::stream`](crate::MachineConfig::stream).
        #[serde(default, skip_serializing_if = "StreamDeadlines::is_default")]
        deadlines: StreamDeadlines,
    },
    /// Wait `delay_ms`, then answer with `TimerFired { timer }`.
    Sleep {
        /// The id to answer with.
        timer: TimerId,
        /// The chosen delay (already jittered), in ms.
        delay_ms: u64,
    },
    /// Tell the UI a retry is coming (before the `Sleep`).
    NotifyRetry {
        /// The details.
        info: ProviderRetryInfo,
    },
    /// Tell the UI the next request goes to a fallback target.
    NotifyFallback {
        /// The details.
        info: FallbackInfo,
    },
    /// Compact `conversation`; answer with `CompactionFinished`.
    Compact {
        /// The id to answer with.
        compaction: CompactionId,
        /// What to compact.
        conversation: Snapshot,
    },
    /// The conversation was replaced by its compacted form: persist it and tell the UI.
    ReplaceConversation {
        /// The new conversation.
        conversation: Snapshot,
        /// What the compaction did (written flat into traces: `before_messages`, …).
        #[serde(flatten)]
        report: CompactionReport,
    },
    /// Run these tool calls (independent; concurrently if possible); answer with
    /// `ToolsFinished`.
    RunTools {
        /// The id to answer with.
        batch: BatchId,
        /// The calls, in the order the model made them.
        calls: Vec<ToolCall>,
    },
    /// Ask the shared retry budget for a permit ([`RetryBudget::request`]); answer with
    /// `PermitAnswered`, now or whenever the budget decides. Only emitted when
    /// [`MachineConfig::retry_budget`](crate::MachineConfig::retry_budget) is set: then every
    /// request asks first.
    ///
    /// [`RetryBudget::request`]: crate::RetryBudget::request
    AcquirePermit {
        /// The id to answer with.
        permit: PermitId,
        /// What to ask the budget, as [`RetryBudget::request`](crate::RetryBudget::request) takes it: the kind of
        /// permit, the target, the deadline, and when the request started.
        ask: PermitAsk,
    },
    /// Tell the shared retry budget what happened ([`RetryBudget::record`]); no answer.
    /// Only emitted when [`MachineConfig::retry_budget`](crate::MachineConfig::retry_budget)
    /// is set.
    ///
    /// [`RetryBudget::record`]: crate::RetryBudget::record
    NoteBudget {
        /// A success, or a rate limit every agent of the budget should wait out.
        note: BudgetNote,
    },
    /// The run finished. Terminal.
    Finish {
        /// Why.
        reason: FinishReason,
        /// Assistant messages appended in this run.
        turns: u32,
    },
    /// The run failed. Terminal.
    Fail {
        /// Why, with everything the embedder needs to report it. Boxed: a run fails once,
        /// and an unboxed error would make every command as large as the largest error.
        error: Box<RunError>,
    },
}

impl Command {
    /// Whether this command ends the run.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        matches!(self, Command::Finish { .. } | Command::Fail { .. })
    }

    /// Whether the machine awaits an answer to this command: `SendRequest`, `Sleep`,
    /// `RunTools`, `Compact` and `AcquirePermit`, the work a driver starts and a cancel
    /// stops. At most one is awaited at a time (see [`AgentMachine`](crate::AgentMachine)).
    ///
    /// ```
    /// use rebound_core::{AgentMachine, Event, MachineConfig, Millis};
    ///
    /// let mut machine = AgentMachine::new(MachineConfig::default(), 1);
    /// let commands = machine.step(Millis(0), Event::user_text("hi"));
    /// // The request awaits its answer; appending the user message does not.
    /// assert_eq!(commands.iter().filter(|c| c.awaits_answer()).count(), 1);
    /// assert!(commands.iter().any(|c| !c.awaits_answer()));
    /// ```
    #[must_use]
    pub fn awaits_answer(&self) -> bool {
        match self {
            Command::SendRequest { .. }
            | Command::Sleep { .. }
            | Command::RunTools { .. }
            | Command::Compact { .. }
            | Command::AcquirePermit { .. } => true,
            Command::AppendMessage { .. }
            | Command::NotifyRetry { .. }
            | Command::NotifyFallback { .. }
            | Command::ReplaceConversation { .. }
            | Command::NoteBudget { .. }
            | Command::Finish { .. }
            | Command::Fail { .. } => false,
        }
    }
}
