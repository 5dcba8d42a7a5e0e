//! Receivers: how a UI (or log, or test) hears what the runner is doing.

use rebound_core::RunTally;
use rebound_core::{wire::StreamDelta, ToolResultBlock};
use rebound_core::{
    CompactionReport, FallbackInfo, FinishReason, Message, ProviderRetryInfo, RunError, ToolCall,
};

/// A receiver refused or failed to take a notification. This is a host failure: the run
/// stops, because a UI that cannot show progress must not be silently skipped. The run's
/// error ([`HostFailure`](rebound_core::HostFailure) of kind `Receiver`) carries this error's
/// message, so it must hold no secret.
///
/// ```
/// use rebound_effects::receiver::{Receiver, ReceiverError};
/// use rebound_core::Message;
/// use std::sync::mpsc;
///
/// /// Forwards messages to a UI thread.
/// struct ToUi(mpsc::Sender<Message>);
///
/// impl Receiver for ToUi {
///     fn message(&mut self, message: &Message) -> Result<(), ReceiverError> {
///         self.0.send(message.clone()).map_err(ReceiverError::other)
///     }
/// }
///
/// let (tx, rx) = mpsc::channel();
/// drop(rx); // the UI went away
/// let error = ToUi(tx).message(&Message::user_text("hi")).unwrap_err();
/// assert_eq!(error.to_string(), "sending on a closed channel");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReceiverError {
    /// Writing what the receiver shows failed: the terminal or pipe closed, the disk is full.
    #[error("could not write {what}: {source}")]
    Write {
        /// What could not be written, as the message reads: e.g. `to the terminal`,
        /// `an event`.
        what: &'static str,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Any other failure of the receiver (a closed channel, a UI that went away). Its message
    /// is this error's message.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl ReceiverError {
    /// Wraps a receiver's own error, or a message (`&str`, `String`), as
    /// [`ReceiverError::Other`].
    #[must_use]
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        ReceiverError::Other(error.into())
    }
}

/// Callbacks for everything a UI shows. All have empty defaults; implement what you need.
///
/// `started` comes first. Then the order is the machine's: `provider_retry` arrives *before* the retry delay starts,
/// `stream_reset` right after an attempt that had streamed text failed, `message` once per
/// complete message (assistant or tool results), `totals` then `finished` or `error` last.
pub trait Receiver: Send {
    /// A run starts, with jitter `seed` (to reproduce it: the same seed, the same inputs).
    fn started(&mut self, seed: u64) -> Result<(), ReceiverError> {
        let _ = seed;
        Ok(())
    }
    /// A streamed piece of the response being produced.
    fn delta(&mut self, delta: &StreamDelta<&str>) -> Result<(), ReceiverError> {
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
    fn totals(&mut self, stats: &RunTally) -> Result<(), ReceiverError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_write_failure_reads_as_before_and_keeps_its_io_error() {
        let error = ReceiverError::Write {
            what: "to the terminal",
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe"),
        };
        assert_eq!(
            error.to_string(),
            "could not write to the terminal: broken pipe"
        );
        let source = error
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(std::io::ErrorKind::BrokenPipe)
        );
    }

    #[test]
    fn another_failure_reads_as_its_own_message() {
        assert_eq!(
            ReceiverError::other("the UI went away").to_string(),
            "the UI went away"
        );
    }
}
