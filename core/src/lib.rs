//! # rebound-core
//!
//! The pure heart of rebound: an agent-loop state machine that makes an explicit decision for
//! every failure while producing the next conversation message, plus everything it decides
//! with — the conversation model, provider failure classification, retry policy, compaction,
//! wire formats and trace types.
//!
//! Nothing here performs I/O, reads a clock or an environment variable, or spawns a thread:
//! time comes in as [`Millis`], randomness from a seed, and bytes from the caller.
//!
//! Feature `server` (off by default) adds the other side of the wire, for simulators, fake
//! servers and fuzzers: the encoders of what the APIs send (`wire::encode_*`) and the parser
//! of the requests they receive (`wire::parse_request`).

#![forbid(unsafe_code)]
// On docs.rs (`--cfg docsrs`, Cargo.toml): each item behind a feature names the feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod object_form;

pub mod budget;
pub mod classify;
pub mod compaction;
pub mod context_window;
pub mod conversation;
pub mod deadline;
pub mod failure;
pub mod headers;
pub mod machine;
pub mod response;
pub mod retry;
pub mod run;
pub mod secrets;
pub mod shared_budget;
pub mod tally;
pub mod time;
pub mod tool;
pub mod trace;
pub mod wire;

pub use budget::{
    BudgetConfig, BudgetNote, BudgetStats, PermitAsk, PermitDecision, PermitKind, RetryBudget,
    Ticket,
};
pub use compaction::{
    compact, CompactionError, CompactionMethod, CompactionPolicy, CompactionReason,
    CompactionReport,
};
pub use context_window::context_window;
pub use conversation::{
    ContentBlock, Conversation, MediaSource, Message, PairingError, Role, TargetIdentity,
    ToolResultBlock, ToolResultPart,
};
pub use failure::{FailureAction, FailureKind, ProviderFailure, ProviderKind, TransportFault};
pub use headers::Headers;
pub use machine::{
    AgentMachine, BatchId, BudgetUse, Command, CompactionId, Event, FallbackInfo, FinishReason,
    GiveUp, Handled, IgnoreReason, MachineConfig, PermitId, ProviderRetryInfo, RequestId,
    RequestPurpose, RunError, Snapshot, StreamDeadlines, TargetFailure, TargetSpec, TimerId,
};
pub use response::{AssistantResponse, InputProblemKind, StopReason, ToolInputProblem, Usage};
pub use retry::{RetryConfig, RetryDelay};
pub use secrets::{SecretError, Secrets};
pub use tally::{RequestUsage, RunTally};
pub use time::Millis;
pub use tool::{
    tool_error_text, BatchOutcome, CallOutcome, HostFailure, HostFailureKind, ToolCall,
    ToolFailure, ToolOutput, ToolSpec,
};
