//! What a failed durable run answers: an HTTP status that says which kind of failure it was,
//! and the run's typed failure as the error's message, in JSON.

use rebound_core::{FailureAction, RunError, RunTally};
use restate_sdk::prelude::TerminalError;
use serde::{Deserialize, Serialize};

/// Why a durable run failed, as its caller gets it.
///
/// The `run` handler fails with a Restate terminal error whose code is [`code`](Self::code)
/// and whose message is this, in JSON. Restate's ingress answers a call (or an `attach`)
/// with that code as the HTTP status and `{"code": …, "message": "…"}` as the body, so a
/// caller reads it back with `serde_json::from_str::<RunFailure>(&body["message"])` (or
/// `jq '.message | fromjson'`):
///
/// ```json
/// {"code": 503, "message": "{\"kind\":\"unavailable\",\"status\":529,\"attempts\":4,
///   \"message\":\"…\",\"error\":{…},\"stats\":{…}}"}
/// ```
///
/// | code | when | `kind` |
/// |---|---|---|
/// | 400 | the user message is empty | `empty_user_message` |
/// | 409 | the run was canceled | `canceled` |
/// | 502 | the provider refused the request, and retrying the run as it is will not help: its API key or permissions (401, 403), the request (400), the model (404), the account's quota, a conversation too long even after compaction | `auth_failed`, `bad_request`, `model_not_found`, `quota_exhausted`, `context_overflow`, `reasoning_rejected` |
/// | 503 | the provider stayed unavailable past what the retry policy waits: every attempt spent, a server delay above the cap, the shared retry budget empty | `rate_limited`, `unavailable`, `server_error`, `transport`, `stream_malformed`, `empty_response` |
/// | 500 | rebound or its host failed (a tool's host failure, a receiver, a broken invariant) | `host`, `invariant` |
///
/// `status` is the provider's own HTTP status (401 for a refused key, 529 for an overloaded
/// provider), never the run's code. No API key is ever part of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunFailure {
    /// The HTTP status the run fails with (see the table).
    pub code: u16,
    /// [`RunError::kind`]: `canceled`, `host`, `invariant`, `empty_user_message`, or the
    /// provider failure's kind (`auth_failed`, `rate_limited`, `unavailable`, …).
    pub kind: String,
    /// The provider's HTTP status, when a provider answered with an error.
    pub status: Option<u16>,
    /// The attempts made at the request that failed, on its last target (a fallback to
    /// another target counts again from 1; the earlier targets are in `error`); 0 when no
    /// request was waiting for its answer (a run canceled during a tool call).
    pub attempts: u32,
    /// What happened, for people: the error's message.
    pub message: String,
    /// The run's error, typed: every target's last failure, why each was given up.
    pub error: RunError,
    /// What happened on the way: requests, retries sent, tool calls, tokens, and
    /// `elapsed_ms`, the run's time from its start to its end (to the moment a cancel
    /// took effect).
    pub stats: RunTally,
    /// The run's jitter seed (see `TurnReply::seed`); 0 when not given.
    #[serde(default)]
    pub seed: u64,
}

impl RunFailure {
    /// The failure of a run that ended with `error`, after `stats`.
    #[must_use]
    pub fn new(error: RunError, stats: RunTally) -> Self {
        RunFailure {
            code: code(&error),
            kind: error.kind().to_owned(),
            status: error.provider_failure().and_then(|f| f.status),
            attempts: stats.unanswered_attempts().unwrap_or(0),
            message: error.to_string(),
            error,
            stats,
            seed: 0,
        }
    }

    /// The same failure, naming the run's jitter `seed`.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The terminal error the `run` handler fails with.
    pub(crate) fn into_terminal(self) -> TerminalError {
        // Serializing plain data cannot fail; should it, the message still says what
        // happened.
        let message = serde_json::to_string(&self).unwrap_or_else(|_| self.message.clone());
        TerminalError::new_with_code(self.code, message)
    }
}

/// The HTTP status of a run that failed with `error` (the table of [`RunFailure`]).
fn code(error: &RunError) -> u16 {
    match error {
        RunError::Canceled => 409,
        RunError::EmptyUserMessage => 400,
        // A failure the policy retries stayed past what it waits; any other is a refusal
        // (after a compaction or a retry without reasoning, for the kinds that get one).
        RunError::Provider { failure, .. } => match failure.action() {
            FailureAction::Retry => 503,
            _ => 502,
        },
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::{FailureKind, GiveUp, HostFailure, HostFailureKind, ProviderFailure};

    fn provider(kind: FailureKind, status: u16) -> RunError {
        RunError::Provider {
            failure: ProviderFailure::new(kind, "refused").with_status(status),
            reason: GiveUp::NotRetryable,
            target: 0,
            label: "anthropic/claude".into(),
            earlier: Vec::new(),
        }
    }

    #[test]
    fn each_failure_has_the_code_its_caller_can_act_on() {
        let cases = [
            (RunError::Canceled, 409),
            (RunError::EmptyUserMessage, 400),
            (provider(FailureKind::AuthFailed, 401), 502),
            (provider(FailureKind::AuthFailed, 403), 502),
            (provider(FailureKind::BadRequest, 400), 502),
            (provider(FailureKind::ModelNotFound, 404), 502),
            (provider(FailureKind::QuotaExhausted, 429), 502),
            (provider(FailureKind::ContextOverflow, 400), 502),
            (provider(FailureKind::ReasoningRejected, 400), 502),
            (provider(FailureKind::RateLimited, 429), 503),
            (provider(FailureKind::Unavailable, 529), 503),
            (provider(FailureKind::ServerError, 500), 503),
            (provider(FailureKind::Transport, 0), 503),
            (provider(FailureKind::EmptyResponse, 200), 503),
            (
                RunError::Host {
                    failure: HostFailure::new(HostFailureKind::OutOfMemory, "8 GiB"),
                },
                500,
            ),
            (
                RunError::Invariant {
                    message: "broken".into(),
                },
                500,
            ),
        ];
        for (error, expected) in cases {
            let failure = RunFailure::new(error.clone(), RunTally::default());
            assert_eq!(failure.code, expected, "{error:?}");
            assert_eq!(failure.kind, error.kind());
            let terminal = failure.clone().into_terminal();
            assert_eq!(terminal.code(), expected);
            let read: RunFailure = serde_json::from_str(terminal.message()).expect("JSON");
            assert_eq!(read, failure);
        }
    }

    #[test]
    fn a_provider_failure_keeps_its_status_and_a_should_retry_false_is_a_refusal() {
        let failure = RunFailure::new(provider(FailureKind::AuthFailed, 401), RunTally::default());
        assert_eq!((failure.status, failure.attempts), (Some(401), 0));
        assert!(failure.message.contains("refused"), "{}", failure.message);
        // A 529 the server says not to retry is not retried: a refusal.
        let overloaded = ProviderFailure::new(FailureKind::Unavailable, "no")
            .with_status(529)
            .with_should_retry(false);
        let error = RunError::Provider {
            failure: overloaded,
            reason: GiveUp::NotRetryable,
            target: 0,
            label: "a".into(),
            earlier: Vec::new(),
        };
        assert_eq!(code(&error), 502);
    }
}
