//! Why a run failed: what the embedder gets back.

use crate::failure::ProviderFailure;
use crate::tool::{HostFailure, HostFailureKind};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why the machine stopped trying a provider failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
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
    /// The provider could not verify the reasoning passed back to it, and refused the
    /// request again once it was sent without any.
    ReasoningRejectedAgain,
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
            // Whatever keeps the budget (this process, or Redis for a fleet): core only
            // knows that its budget said no.
            GiveUp::BudgetExhausted => f.write_str(
                "retry budget exhausted: the shared retry budget had no token for this retry \
                 within its wait",
            ),
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
            GiveUp::ReasoningRejectedAgain => {
                f.write_str("refused again after retrying without reasoning items")
            }
        }
    }
}

/// One target's last failure, kept when the run fell back to the next target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
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
#[non_exhaustive]
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
    /// A short machine-readable kind: `canceled`, `host`, `empty_user_message`, `invariant`
    /// (the variant's serialized `type`), or the provider failure's
    /// [`name`](crate::FailureKind::name) (e.g. `auth_failed`).
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            RunError::Canceled => "canceled",
            RunError::Host { .. } => "host",
            RunError::EmptyUserMessage => "empty_user_message",
            RunError::Invariant { .. } => "invariant",
            RunError::Provider { failure, .. } => failure.kind.name(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;

    /// Every failure kind; the match fails to compile when a kind is added and not listed.
    fn every_failure_kind() -> Vec<FailureKind> {
        let all = vec![
            FailureKind::RateLimited,
            FailureKind::Unavailable,
            FailureKind::ServerError,
            FailureKind::Transport,
            FailureKind::StreamMalformed,
            FailureKind::EmptyResponse,
            FailureKind::AuthFailed,
            FailureKind::BadRequest,
            FailureKind::ModelNotFound,
            FailureKind::QuotaExhausted,
            FailureKind::ContextOverflow,
            FailureKind::ReasoningRejected,
            FailureKind::ContentBlocked,
        ];
        for kind in &all {
            match kind {
                FailureKind::RateLimited
                | FailureKind::Unavailable
                | FailureKind::ServerError
                | FailureKind::Transport
                | FailureKind::StreamMalformed
                | FailureKind::EmptyResponse
                | FailureKind::AuthFailed
                | FailureKind::BadRequest
                | FailureKind::ModelNotFound
                | FailureKind::QuotaExhausted
                | FailureKind::ContextOverflow
                | FailureKind::ReasoningRejected
                | FailureKind::ContentBlocked => {}
            }
        }
        all
    }

    /// Every run error, one per variant and one per provider failure kind; the match fails to
    /// compile when a variant is added and not listed.
    fn every_run_error() -> Vec<RunError> {
        let mut all = vec![
            RunError::Canceled,
            RunError::Host {
                failure: HostFailure::new(HostFailureKind::Receiver, "gone"),
            },
            RunError::EmptyUserMessage,
            RunError::Invariant {
                message: "broken".into(),
            },
        ];
        all.extend(
            every_failure_kind()
                .into_iter()
                .map(|kind| RunError::Provider {
                    failure: ProviderFailure::new(kind, "failed"),
                    reason: GiveUp::NotRetryable,
                    target: 0,
                    label: "a".into(),
                    earlier: Vec::new(),
                }),
        );
        for error in &all {
            match error {
                RunError::Canceled
                | RunError::Host { .. }
                | RunError::Provider { .. }
                | RunError::EmptyUserMessage
                | RunError::Invariant { .. } => {}
            }
        }
        all
    }

    /// What `kind` was before it came from the type: the serialized failure kind of a
    /// provider error, else the serialized `type` of the variant.
    fn serialized_kind(error: &RunError) -> String {
        let value = match error {
            RunError::Provider { failure, .. } => serde_json::to_value(failure.kind).unwrap(),
            other => serde_json::to_value(other).unwrap()["type"].clone(),
        };
        value.as_str().unwrap().to_owned()
    }

    #[test]
    fn every_run_error_kind_is_the_name_it_is_serialized_with() {
        for error in every_run_error() {
            assert_eq!(error.kind(), serialized_kind(&error), "{error:?}");
        }
    }

    #[test]
    fn every_failure_kind_name_is_the_name_it_is_serialized_with() {
        for kind in every_failure_kind() {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::Value::String(kind.name().to_owned())
            );
        }
    }
}
