//! Why a run failed: what the embedder gets back.

use crate::failure::ProviderFailure;
use crate::tool::{HostFailure, HostFailureKind};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why the machine stopped trying a provider failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GiveUp {
    /// The failure is not retryable (auth, bad request, not found, quota).
    NotRetryable,
    /// Every attempt on the target failed.
    AttemptsExhausted {
        /// Attempts made.
        attempts: u32,
    },
    /// The model kept answering with nothing.
    EmptyResponses {
        /// Empty answers received.
        count: u32,
    },
    /// The shared retry budget had no token in time.
    BudgetExhausted,
    /// The server asked to wait longer than the policy allows.
    RetryAfterTooLong {
        /// The server's hint, in ms.
        hint_ms: u64,
        /// The policy's cap, in ms.
        cap_ms: u64,
    },
    /// The server asked to wait longer than is worth waiting with a next target at hand.
    RetryAfterLong {
        /// The server's hint, in ms.
        hint_ms: u64,
        /// The policy's `fallback_after_ms`.
        fallback_after_ms: u64,
    },
    /// The context overflowed and automatic compaction is off.
    CompactionDisabled,
    /// The context overflowed again after compaction.
    OverflowAfterCompaction,
    /// The compactor failed.
    CompactionFailed {
        /// The compactor's message.
        message: String,
    },
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUp::NotRetryable => f.write_str("not retryable"),
            GiveUp::AttemptsExhausted { attempts } => {
                write!(f, "gave up after {attempts} attempts")
            }
            GiveUp::EmptyResponses { count } => {
                write!(f, "the model returned {count} empty responses")
            }
            GiveUp::BudgetExhausted => {
                f.write_str("retry budget exhausted: too many retries in this process right now")
            }
            GiveUp::RetryAfterTooLong { hint_ms, cap_ms } => write!(
                f,
                "the server asked to wait {:.1}s, more than the {:.1}s allowed",
                *hint_ms as f64 / 1000.0,
                *cap_ms as f64 / 1000.0
            ),
            GiveUp::RetryAfterLong {
                hint_ms,
                fallback_after_ms,
            } => write!(
                f,
                "the server asked to wait {:.1}s, more than the {:.1}s worth waiting with a fallback at hand",
                *hint_ms as f64 / 1000.0,
                *fallback_after_ms as f64 / 1000.0
            ),
            GiveUp::CompactionDisabled => f.write_str("automatic compaction is off"),
            GiveUp::OverflowAfterCompaction => {
                f.write_str("still too long after compacting the conversation")
            }
            GiveUp::CompactionFailed { message } => write!(f, "compaction failed: {message}"),
        }
    }
}

/// One target's last failure, kept when the run fell back to the next target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetFailure {
    /// Index of the target.
    pub target: usize,
    /// Printable name of the target.
    pub label: String,
    /// Its last failure.
    pub failure: ProviderFailure,
    /// Why it was abandoned.
    pub reason: GiveUp,
}

/// Why a run failed. Never shown to the model; returned to the embedder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunError {
    /// The run was canceled.
    #[error("canceled")]
    Canceled,
    /// The host failed (receiver, session store, out of memory, a tool's host failure).
    #[error("host failure: {failure}")]
    Host {
        /// What failed.
        failure: HostFailure,
    },
    /// The provider failed and the machine gave up.
    #[error("{}", provider_message(failure, reason, label, earlier))]
    Provider {
        /// The last failure.
        failure: ProviderFailure,
        /// Why the machine stopped.
        reason: GiveUp,
        /// Index of the last target tried.
        target: usize,
        /// Printable name of the last target tried.
        label: String,
        /// Earlier targets of the fallback chain and their last failures.
        earlier: Vec<TargetFailure>,
    },
    /// The user message had no content (no blocks, or only empty or whitespace text): there
    /// was nothing to send, so nothing was. The providers refuse such a message.
    #[error(
        "the user message is empty: give it some text (not only whitespace), an image or a \
         tool result"
    )]
    EmptyUserMessage,
    /// The driver broke the machine's contract, or the conversation is corrupt.
    #[error("invariant violated: {message}")]
    Invariant {
        /// What was wrong.
        message: String,
    },
}

impl From<HostFailure> for RunError {
    /// A host failure ends the run as [`RunError::Host`], except that a cancel the host
    /// reports (a tool batch that saw the cancel, a driver passing it on) is the run's cancel,
    /// [`RunError::Canceled`], however it arrived.
    fn from(failure: HostFailure) -> Self {
        match failure.kind {
            HostFailureKind::Canceled => RunError::Canceled,
            _ => RunError::Host { failure },
        }
    }
}

fn provider_message(
    failure: &ProviderFailure,
    reason: &GiveUp,
    label: &str,
    earlier: &[TargetFailure],
) -> String {
    let mut s = format!("{failure} ({reason})");
    if !earlier.is_empty() {
        s.push_str(&format!(" on {label}"));
        for e in earlier {
            s.push_str(&format!(
                "; before that {}: {} ({})",
                e.label, e.failure, e.reason
            ));
        }
    }
    s
}

impl RunError {
    /// A short machine-readable kind: `canceled`, `host`, `empty_user_message`, `invariant`,
    /// or the provider failure's kind (e.g. `auth_failed`).
    #[must_use]
    pub fn kind(&self) -> String {
        match self {
            RunError::Canceled => "canceled".into(),
            RunError::Host { .. } => "host".into(),
            RunError::EmptyUserMessage => "empty_user_message".into(),
            RunError::Invariant { .. } => "invariant".into(),
            RunError::Provider { failure, .. } => serde_json::to_value(failure.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "provider".into()),
        }
    }

    /// The provider failure, when the provider caused this.
    #[must_use]
    pub fn provider_failure(&self) -> Option<&ProviderFailure> {
        match self {
            RunError::Provider { failure, .. } => Some(failure),
            _ => None,
        }
    }
}
