//! Providers: where a conversation goes to become the next assistant message.

mod http;
mod key;

pub use http::{HttpProvider, HttpProviderConfig};
pub use key::ApiKey;

use rebound_core::wire::{StreamDelta, WireError};
use rebound_core::{AssistantResponse, Conversation, ProviderFailure, StreamDeadlines, ToolSpec};
use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future, as returned by object-safe async traits here.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Receives streamed pieces of a response as they arrive, lent (their text borrows the
/// provider's buffers: copy what must outlive the call). Returning `false` asks the provider
/// to stop reading (the runner does so when its receiver failed); the send then ends with
/// [`SendError::Stopped`].
pub type DeltaSink<'a> = &'a mut (dyn FnMut(StreamDelta<&str>) -> bool + Send);

/// Why [`Provider::send`] produced no assistant message.
///
/// Only [`SendError::Provider`] says something about the provider; the other two are the
/// caller's side, and must not be retried, compacted or fallen back from as if the provider
/// had failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The provider, or the way to it, failed: a classified failure for the machine to decide
    /// about (`Event::ProviderFailed`: retry, compact, fall back or fail).
    #[error("{0}")]
    Provider(ProviderFailure),
    /// No request could be built from the conversation, so none was sent: it holds nothing
    /// to send, or breaks tool-call pairing. The machine never produces such a conversation
    /// (a corrupt session can hold one); the runner fails the run as an invariant violation.
    #[error(transparent)]
    Request(#[from] WireError),
    /// The delta sink returned `false`: the caller stopped reading the response.
    #[error("the caller stopped reading the response")]
    Stopped,
}

impl From<ProviderFailure> for SendError {
    fn from(failure: ProviderFailure) -> Self {
        SendError::Provider(failure)
    }
}

/// One request for a [`Provider`]: what to send, and how long the answer may take.
///
/// The runner builds it from the machine's
/// [`Command::SendRequest`](rebound_core::Command::SendRequest); a provider past a deadline
/// answers with a [`TransportFault::IdleTimeout`](rebound_core::TransportFault::IdleTimeout)
/// failure.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ProviderRequest<'a> {
    /// The conversation to continue.
    pub conversation: &'a Conversation,
    /// The tools the model may call.
    pub tools: &'a [ToolSpec],
    /// How long the response may stay silent, or go without content.
    pub deadlines: StreamDeadlines,
}

impl<'a> ProviderRequest<'a> {
    /// A request for `conversation` offering `tools`, with the default deadlines.
    #[must_use]
    pub fn new(conversation: &'a Conversation, tools: &'a [ToolSpec]) -> Self {
        ProviderRequest {
            conversation,
            tools,
            deadlines: StreamDeadlines::default(),
        }
    }

    /// The same request with `deadlines`.
    #[must_use]
    pub fn with_deadlines(mut self, deadlines: StreamDeadlines) -> Self {
        self.deadlines = deadlines;
        self
    }
}

/// Something that turns a conversation into the next assistant message, or a classified
/// failure. [`HttpProvider`] speaks the real Anthropic and OpenAI APIs; embedders may bring
/// their own (a local model, a test double, a proxy).
pub trait Provider: Send + Sync {
    /// A printable name, e.g. `anthropic:claude-sonnet-4-5` (never containing a secret).
    fn label(&self) -> String;

    /// Sends one request, streaming pieces to `deltas`, within the request's deadlines.
    ///
    /// Must not mutate anything observable on failure: the machine retries with the same
    /// conversation.
    fn send<'a>(
        &'a self,
        request: ProviderRequest<'a>,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<AssistantResponse, SendError>>;
}
