//! Providers: where a conversation goes to become the next assistant message.

mod http;
mod key;

pub use http::{HttpProvider, HttpProviderConfig};
pub use key::ApiKey;

use rebound_core::wire::{StreamDelta, WireError};
use rebound_core::{AssistantResponse, Conversation, ProviderFailure, ToolSpec};
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
#[non_exhaustive]
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

/// Something that turns a conversation into the next assistant message, or a classified
/// failure. [`HttpProvider`] speaks the real Anthropic and OpenAI APIs; embedders may bring
/// their own (a local model, a test double, a proxy).
pub trait Provider: Send + Sync {
    /// A printable name, e.g. `anthropic:claude-sonnet-4-5` (never containing a secret).
    fn label(&self) -> String;

    /// Sends one request for `conversation` offering `tools`, streaming pieces to `deltas`.
    ///
    /// Must not mutate anything observable on failure: the machine retries with the same
    /// conversation.
    fn send<'a>(
        &'a self,
        conversation: &'a Conversation,
        tools: &'a [ToolSpec],
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<AssistantResponse, SendError>>;
}
