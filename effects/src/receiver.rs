//! Receivers: how a UI (or log, or test) hears what the runner is doing.

use crate::runner::RunStats;
use rebound_core::{wire::StreamDelta, ToolResultBlock};
use rebound_core::{
    CompactionReport, FallbackInfo, FinishReason, Message, ProviderRetryInfo, RunError, ToolCall,
};

/// A receiver refused or failed to take a notification. This is a host failure: the run
/// stops, because a UI that cannot show progress must not be silently skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("receiver failed: {0}")]
pub struct ReceiverError(pub String);

/// Callbacks for everything a UI shows. All have empty defaults; implement what you need.
///
/// The order is the machine's: `provider_retry` arrives *before* the retry delay starts,
/// `stream_reset` right after an attempt that had streamed text failed, `message` once per
/// complete message (assistant or tool results), `totals` then `finished` or `error` last.
pub trait Receiver: Send {
    /// A streamed piece of the response being produced.
    fn delta(&mut self, delta: &StreamDelta) -> Result<(), ReceiverError> {
        let _ = delta;
        Ok(())
    }
    /// Text already shown from failed attempt number `attempt` is void: clear it.
    fn stream_reset(&mut self, attempt: u32) -> Result<(), ReceiverError> {
        let _ = attempt;
        Ok(())
    }
    /// A complete message was appended to the conversation.
    fn message(&mut self, message: &Message) -> Result<(), ReceiverError> {
        let _ = message;
        Ok(())
    }
    /// A retry is scheduled; sent before the delay.
    fn provider_retry(&mut self, info: &ProviderRetryInfo) -> Result<(), ReceiverError> {
        let _ = info;
        Ok(())
    }
    /// Requests move to the next target of the fallback chain.
    fn fallback(&mut self, info: &FallbackInfo) -> Result<(), ReceiverError> {
        let _ = info;
        Ok(())
    }
    /// The conversation was compacted: why, how, and by how much.
    fn compaction(&mut self, report: &CompactionReport) -> Result<(), ReceiverError> {
        let _ = report;
        Ok(())
    }
    /// The run's totals (requests, tokens, retries, wall time), just before `finished` or
    /// `error`.
    fn totals(&mut self, stats: &RunStats) -> Result<(), ReceiverError> {
        let _ = stats;
        Ok(())
    }
    /// A tool call starts running.
    fn tool_start(&mut self, call: &ToolCall) -> Result<(), ReceiverError> {
        let _ = call;
        Ok(())
    }
    /// A tool call's result (success or error) was appended.
    fn tool_result(&mut self, result: &ToolResultBlock) -> Result<(), ReceiverError> {
        let _ = result;
        Ok(())
    }
    /// The run finished.
    fn finished(&mut self, reason: &FinishReason, turns: u32) -> Result<(), ReceiverError> {
        let _ = (reason, turns);
        Ok(())
    }
    /// The run failed (called once, before the runner returns the error).
    fn error(&mut self, error: &RunError) {
        let _ = error;
    }
}

/// A receiver that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullReceiver;

impl Receiver for NullReceiver {}
