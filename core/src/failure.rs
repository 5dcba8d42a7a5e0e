//! Classified provider failures and the decision each one earns.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Which wire format / API family a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProviderKind {
    /// Anthropic Messages API (`POST {base}/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`POST {base}/chat/completions`) and compatible servers.
    #[serde(rename = "openai")]
    OpenAi,
    /// OpenAI Responses API (`POST {base}/responses`), as OpenAI's newer models and Codex use:
    /// typed input and output items, reasoning items passed back between turns.
    #[serde(rename = "openai_responses")]
    OpenAiResponses,
    /// Google's Gemini API (`POST {base}/models/{model}:streamGenerateContent?alt=sse`), on
    /// AI Studio (`generativelanguage.googleapis.com/v1beta`) and Vertex AI
    /// (`{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/publishers/google`):
    /// one wire format, two hosts and two ways to authenticate.
    Gemini,
    /// AWS Bedrock's Converse API (`POST {base}/model/{modelId}/converse-stream`, answered
    /// in AWS's binary event-stream framing), one API for Claude, Llama, Nova, Mistral and
    /// the other models Bedrock hosts.
    Bedrock,
}

impl ProviderKind {
    /// Every kind this version knows, in declaration order: for code that must hold for
    /// each (tests, a UI's list) and stays complete when a kind is added.
    pub const ALL: &'static [ProviderKind] = &[
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
        ProviderKind::Gemini,
        ProviderKind::Bedrock,
    ];
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenAiResponses => "openai-responses",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Bedrock => "bedrock",
        })
    }
}

/// What went wrong with a provider attempt, sorted by what can be done about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// 429 (not a spend or quota limit): wait and retry.
    RateLimited,
    /// The provider is overloaded or temporarily down (529, 503): retry.
    Unavailable,
    /// Other 5xx, and 408/409/425: retry.
    ServerError,
    /// Connect, DNS, TLS, reset or timeout: retry.
    Transport,
    /// The stream was cut, idle too long, or not valid SSE/JSON before the message completed;
    /// or the model's output could not be read as what it meant to be (Gemini's
    /// `MALFORMED_FUNCTION_CALL`): the same request may well succeed.
    StreamMalformed,
    /// The provider answered with no content at all.
    EmptyResponse,
    /// 401 or 403: the key is wrong or lacks permission.
    AuthFailed,
    /// A 400 (or other 4xx) that is not a context overflow: the request itself is wrong.
    BadRequest,
    /// 404 or an unknown model.
    ModelNotFound,
    /// Spend limit or quota exhausted (Anthropic spend-limit 429, OpenAI `insufficient_quota`).
    QuotaExhausted,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// The provider could not verify reasoning passed back to it: OpenAI's 400
    /// `invalid_encrypted_content` (another organisation's or key's `encrypted_content`),
    /// Anthropic's 400 "Invalid `signature` in `thinking` block" (or "Invalid `data` in
    /// `redacted_thinking` block"), or its 400 for a tool loop whose last assistant turn lacks
    /// its thinking ("a final `assistant` message must start with a thinking block").
    /// Retried once without any reasoning (and so, in a tool loop, without thinking).
    ReasoningRejected,
    /// The provider's safety or content filters withheld the whole answer, or refused the
    /// prompt (Gemini's `SAFETY`, `RECITATION`, `PROHIBITED_CONTENT`, `BLOCKLIST`, `SPII`
    /// finish reasons with no content, or a `promptFeedback.blockReason`; an empty answer
    /// stopped by `content_filter` or `refusal`). The same request would be blocked again:
    /// returned to the embedder, who can change the prompt. An answer the filter cut after
    /// some content is not a failure: it is that content, stopped by
    /// [`StopReason::ContentFilter`](crate::StopReason::ContentFilter).
    ContentBlocked,
}

impl FailureKind {
    /// The decision this kind earns when no `x-should-retry` header overrides it.
    #[must_use]
    pub fn default_action(self) -> FailureAction {
        match self {
            FailureKind::RateLimited
            | FailureKind::Unavailable
            | FailureKind::ServerError
            | FailureKind::Transport
            | FailureKind::StreamMalformed
            | FailureKind::EmptyResponse => FailureAction::Retry,
            FailureKind::ContextOverflow => FailureAction::Compact,
            FailureKind::ReasoningRejected => FailureAction::RetryWithoutReasoning,
            FailureKind::AuthFailed
            | FailureKind::BadRequest
            | FailureKind::ModelNotFound
            | FailureKind::QuotaExhausted
            | FailureKind::ContentBlocked => FailureAction::Fail,
        }
    }

    /// Its name in traces, sessions and [`RunError::kind`](crate::RunError::kind), e.g.
    /// `rate_limited`: the name it is serialized as.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::RateLimited => "rate_limited",
            FailureKind::Unavailable => "unavailable",
            FailureKind::ServerError => "server_error",
            FailureKind::Transport => "transport",
            FailureKind::StreamMalformed => "stream_malformed",
            FailureKind::EmptyResponse => "empty_response",
            FailureKind::AuthFailed => "auth_failed",
            FailureKind::BadRequest => "bad_request",
            FailureKind::ModelNotFound => "model_not_found",
            FailureKind::QuotaExhausted => "quota_exhausted",
            FailureKind::ContextOverflow => "context_overflow",
            FailureKind::ReasoningRejected => "reasoning_rejected",
            FailureKind::ContentBlocked => "content_blocked",
        }
    }

    /// A short human phrase, e.g. `provider unavailable`, used in one-line status messages.
    #[must_use]
    pub fn phrase(self) -> &'static str {
        match self {
            FailureKind::RateLimited => "rate limited",
            FailureKind::Unavailable => "provider unavailable",
            FailureKind::ServerError => "provider server error",
            FailureKind::Transport => "connection problem",
            FailureKind::StreamMalformed => "response stream broken",
            FailureKind::EmptyResponse => "empty response",
            FailureKind::AuthFailed => "authentication failed",
            FailureKind::BadRequest => "request rejected",
            FailureKind::ModelNotFound => "model not found",
            FailureKind::QuotaExhausted => "quota exhausted",
            FailureKind::ContextOverflow => "context too long",
            FailureKind::ReasoningRejected => "reasoning rejected",
            FailureKind::ContentBlocked => "content blocked",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.phrase())
    }
}

/// What the agent loop does about a provider failure: the decision table of the README
/// ("What happens to each failure"). Retry, compact, or fail; the fourth decision, an error
/// tool result for the model, concerns tool failures, not provider failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureAction {
    /// Retry the same request with backoff.
    Retry,
    /// Compact the conversation once and retry once.
    Compact,
    /// Retry once, at once, without any reasoning items or thinking blocks (the provider
    /// could not verify them); rejected again, fail.
    RetryWithoutReasoning,
    /// Return the failure to the embedder.
    Fail,
}

/// A transport-level fault: the HTTP exchange did not produce a usable response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TransportFault {
    /// TCP connect refused or unreachable.
    Connect,
    /// Name resolution failed.
    Dns,
    /// TLS handshake or certificate failure.
    Tls,
    /// The connection was reset or closed before a response.
    Reset,
    /// The request (or connect) timed out.
    Timeout,
    /// The stream went silent for longer than the idle timeout.
    IdleTimeout,
    /// The stream ended before its terminal event.
    StreamCut,
    /// The stream was not valid SSE or its JSON was invalid.
    MalformedStream,
    /// The response completed but held no content.
    EmptyMessage,
}

impl TransportFault {
    /// The failure kind this fault is classified as.
    #[must_use]
    pub fn kind(self) -> FailureKind {
        match self {
            TransportFault::Connect
            | TransportFault::Dns
            | TransportFault::Tls
            | TransportFault::Reset
            | TransportFault::Timeout => FailureKind::Transport,
            TransportFault::IdleTimeout
            | TransportFault::StreamCut
            | TransportFault::MalformedStream => FailureKind::StreamMalformed,
            TransportFault::EmptyMessage => FailureKind::EmptyResponse,
        }
    }

    /// A short description, e.g. `connection reset`.
    #[must_use]
    pub fn phrase(self) -> &'static str {
        match self {
            TransportFault::Connect => "could not connect",
            TransportFault::Dns => "DNS lookup failed",
            TransportFault::Tls => "TLS handshake failed",
            TransportFault::Reset => "connection reset",
            TransportFault::Timeout => "request timed out",
            TransportFault::IdleTimeout => "stream went idle",
            TransportFault::StreamCut => "stream ended before the message completed",
            TransportFault::MalformedStream => "stream was malformed",
            TransportFault::EmptyMessage => "the model returned an empty message",
        }
    }
}

/// Everything known about one failed provider attempt.
///
/// Built by the classifiers in [`crate::classify`] from an HTTP status, headers and body, or
/// from a transport fault. It never holds a secret: only the provider's own error text, the
/// request id it assigned and delay hints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProviderFailure {
    /// What kind of failure this is.
    pub kind: FailureKind,
    /// The HTTP status, when the server answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The provider's error type, e.g. `overloaded_error` or `insufficient_quota`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// The provider's message, or a description of the transport fault. Shared: the retry
    /// notice, the fallback notice and the final error all show it without copying it.
    pub message: Arc<str>,
    /// The provider's request id (`request-id` / `x-request-id`), for support tickets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The server's explicit delay hint (`retry-after-ms` / `retry-after`), in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Time until the provider's rate-limit window resets, from its reset headers, in ms.
    /// Recorded for every failure that carried the headers; the retry policy uses it for a
    /// rate limit only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit_reset_ms: Option<u64>,
    /// The server's `x-should-retry` verdict, when it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_retry: Option<bool>,
    /// The transport fault, when there was no usable HTTP response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportFault>,
}

impl ProviderFailure {
    /// A failure of `kind` with a message and nothing else.
    #[must_use]
    pub fn new(kind: FailureKind, message: impl Into<Arc<str>>) -> Self {
        ProviderFailure {
            kind,
            status: None,
            error_type: None,
            message: message.into(),
            request_id: None,
            retry_after_ms: None,
            rate_limit_reset_ms: None,
            should_retry: None,
            transport: None,
        }
    }

    /// A failure for a transport fault, with an optional detail appended to its phrase.
    #[must_use]
    pub fn transport(fault: TransportFault, detail: Option<&str>) -> Self {
        let message = match detail {
            Some(d) if !d.is_empty() => format!("{}: {d}", fault.phrase()).into(),
            _ => Arc::from(fault.phrase()),
        };
        ProviderFailure {
            transport: Some(fault),
            ..ProviderFailure::new(fault.kind(), message)
        }
    }

    /// Builder: sets the HTTP status.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Builder: sets the provider's error type, e.g. `overloaded_error`.
    #[must_use]
    pub fn with_error_type(mut self, error_type: impl Into<String>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }

    /// Builder: sets the provider's request id.
    #[must_use]
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }

    /// Builder: sets the server's explicit delay hint, in ms.
    #[must_use]
    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    /// Builder: sets the time until the rate-limit window resets, in ms.
    #[must_use]
    pub fn with_rate_limit_reset_ms(mut self, ms: u64) -> Self {
        self.rate_limit_reset_ms = Some(ms);
        self
    }

    /// Builder: sets the server's `x-should-retry` verdict.
    #[must_use]
    pub fn with_should_retry(mut self, should_retry: bool) -> Self {
        self.should_retry = Some(should_retry);
        self
    }

    /// What to do about this failure.
    ///
    /// The kind decides, except that a server's `x-should-retry` header overrides it (as the
    /// official SDKs do) for every kind but context overflow (compaction, not a retry, is the
    /// cure), rejected reasoning (leaving it out, not a retry, is) and quota exhaustion (no
    /// retry can refill a spent quota).
    #[must_use]
    pub fn action(&self) -> FailureAction {
        match (self.kind, self.should_retry) {
            (
                FailureKind::ContextOverflow
                | FailureKind::ReasoningRejected
                | FailureKind::QuotaExhausted,
                _,
            )
            | (_, None) => self.kind.default_action(),
            (_, Some(true)) => FailureAction::Retry,
            (_, Some(false)) => FailureAction::Fail,
        }
    }
}

impl fmt::Display for ProviderFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.phrase())?;
        if let Some(status) = self.status {
            write!(f, " (HTTP {status}")?;
            // A type that only repeats the status (a gateway's `code`) is not shown twice.
            if let Some(t) = self
                .error_type
                .as_ref()
                .filter(|t| **t != status.to_string())
            {
                write!(f, " {t}")?;
            }
            f.write_str(")")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " [request {id}]")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_kind_all_lists_every_kind_in_order() {
        // Adding a kind breaks this match: give it the next position and add it to `ALL`.
        let position = |kind: ProviderKind| match kind {
            ProviderKind::Anthropic => 0,
            ProviderKind::OpenAi => 1,
            ProviderKind::OpenAiResponses => 2,
            ProviderKind::Gemini => 3,
            ProviderKind::Bedrock => 4,
        };
        let positions: Vec<usize> = ProviderKind::ALL.iter().map(|k| position(*k)).collect();
        assert_eq!(positions, (0..5).collect::<Vec<_>>());
    }

    #[test]
    fn decision_table_defaults() {
        use FailureAction::*;
        use FailureKind::*;
        for (kind, action) in [
            (RateLimited, Retry),
            (Unavailable, Retry),
            (ServerError, Retry),
            (Transport, Retry),
            (StreamMalformed, Retry),
            (EmptyResponse, Retry),
            (ContextOverflow, Compact),
            (ReasoningRejected, RetryWithoutReasoning),
            (AuthFailed, Fail),
            (BadRequest, Fail),
            (ModelNotFound, Fail),
            (QuotaExhausted, Fail),
            (ContentBlocked, Fail),
        ] {
            assert_eq!(ProviderFailure::new(kind, "").action(), action, "{kind:?}");
        }
    }

    #[test]
    fn should_retry_header_overrides_except_for_overflow_and_quota() {
        let mut f = ProviderFailure::new(FailureKind::BadRequest, "x");
        f.should_retry = Some(true);
        assert_eq!(f.action(), FailureAction::Retry);
        f.kind = FailureKind::Unavailable;
        f.should_retry = Some(false);
        assert_eq!(f.action(), FailureAction::Fail);
        f.kind = FailureKind::ContextOverflow;
        f.should_retry = Some(true);
        assert_eq!(f.action(), FailureAction::Compact);
        f.kind = FailureKind::QuotaExhausted;
        assert_eq!(f.action(), FailureAction::Fail);
        f.kind = FailureKind::ReasoningRejected;
        f.should_retry = Some(false);
        assert_eq!(f.action(), FailureAction::RetryWithoutReasoning);
    }

    #[test]
    fn display_is_one_line_with_status_type_and_request_id() {
        let mut f = ProviderFailure::new(FailureKind::Unavailable, "Overloaded").with_status(529);
        f.error_type = Some("overloaded_error".into());
        f.request_id = Some("req_1".into());
        assert_eq!(
            f.to_string(),
            "provider unavailable (HTTP 529 overloaded_error): Overloaded [request req_1]"
        );
        let t = ProviderFailure::transport(TransportFault::Reset, Some("peer closed"));
        assert_eq!(t.kind, FailureKind::Transport);
        assert_eq!(
            t.to_string(),
            "connection problem: connection reset: peer closed"
        );
    }
}
