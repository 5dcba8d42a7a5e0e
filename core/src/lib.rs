#![doc = include_str!("../README.md")]
// The README's code blocks are doc tests (the crate's front page on docs.rs and crates.io
// cannot rot), and no doc test may warn: an example that warns teaches the warning.
#![doc(test(attr(deny(warnings))))]
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
