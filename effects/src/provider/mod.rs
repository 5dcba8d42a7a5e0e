//! Providers: where a conversation goes to become the next assistant message.

mod http;
mod key;

pub use http::{HttpProvider, HttpProviderConfig};
pub use key::ApiKey;

use rebound_core::wire::StreamDelta;
use rebound_core::{AssistantResponse, Conversation, ProviderFailure, ToolSpec};
use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future, as returned by object-safe async traits here.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Receives streamed pieces of a response as they arrive. Returning `false` asks the
/// provider to stop reading (the runner does so when its receiver failed).
pub type DeltaSink<'a> = &'a mut (dyn FnMut(StreamDelta) -> bool + Send);

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
    ) -> BoxFuture<'a, Result<AssistantResponse, ProviderFailure>>;
}
