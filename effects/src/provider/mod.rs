//! Providers: where a conversation goes to become the next assistant message.

#[cfg(feature = "bedrock")]
pub mod aws;
mod headers;
mod http;
mod key;

pub use crate::config::HeaderError;
pub use headers::ExtraHeaders;
pub use http::{bedrock_base_url, vertex_base_url, Auth, HttpProvider, HttpProviderConfig};
pub use key::ApiKey;
pub use rebound_core::wire::{OptionsError, ReasoningEffort, RequestOptions, ToolChoice};

use rebound_core::wire::{StreamDelta, WireError};
use rebound_core::{
    AssistantResponse, Conversation, ProviderFailure, StreamDeadlines, TargetIdentity, ToolSpec,
};
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
    /// Also the request options refused for this request ([`WireError::Options`]): a tool
    /// choice naming a tool that is not offered (the rest is refused when the provider is
    /// built).
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
/// their own (a local model, a test double, a proxy, their own HTTP client).
///
/// # A provider over your own HTTP client
///
/// Everything that decides lives in `rebound_core` and takes bytes, not a client's types:
/// [`wire::request_body`](rebound_core::wire::request_body) builds the body,
/// [`StreamDecoder`](rebound_core::wire::StreamDecoder) decodes and assembles the stream,
/// [`classify_http`](rebound_core::classify::classify_http) classifies an error response and
/// [`classify_transport_error`](rebound_core::classify::classify_transport_error) a failed
/// exchange. So a provider over your client is the plumbing between them. Here the client is
/// reqwest, but only as "your client": its four calls (send, status and headers, next chunk,
/// what its error says) are all that is asked of it.
///
/// ```no_run
/// use rebound_core::classify::{classify_http, classify_transport_error, TransportError};
/// use rebound_core::wire::{self, RequestParams, StreamDecoder};
/// use rebound_core::{AssistantResponse, Headers, MachineConfig, ProviderFailure, ProviderKind};
/// use rebound_core::TransportFault;
/// use rebound_effects::provider::{BoxFuture, DeltaSink, Provider, ProviderRequest, SendError};
/// use rebound_effects::runner::Runner;
/// use std::time::Duration;
///
/// /// Anthropic's Messages API over your own HTTP client.
/// struct MyProvider {
///     client: reqwest::Client, // your client
///     api_key: String,
///     model: String,
/// }
///
/// /// What your client says about a failed exchange, classified by core.
/// fn transport(error: &reqwest::Error, response_started: bool) -> SendError {
///     let description = error.to_string(); // the error and its causes, as text
///     let error = TransportError::new(&description)
///         .with_timed_out(error.is_timeout())
///         .with_connect_failed(error.is_connect())
///         .with_response_started(response_started);
///     SendError::Provider(classify_transport_error(&error))
/// }
///
/// impl Provider for MyProvider {
///     fn label(&self) -> String {
///         format!("anthropic:{}", self.model) // never a secret
///     }
///
///     fn send<'a>(
///         &'a self,
///         request: ProviderRequest<'a>,
///         deltas: DeltaSink<'a>,
///     ) -> BoxFuture<'a, Result<AssistantResponse, SendError>> {
///         Box::pin(async move {
///             let kind = ProviderKind::Anthropic;
///             let params = RequestParams::new(&self.model, 8_192).with_tools(request.tools);
///             // A conversation no request can be built from: `SendError::Request`.
///             let body = wire::request_body(kind, request.conversation, &params)?;
///             // The machine's deadlines: silence past `idle_ms` is a retryable idle timeout.
///             let idle = Duration::from_millis(request.deadlines.idle_ms);
///             let silent = || {
///                 let failure = ProviderFailure::transport(TransportFault::IdleTimeout, None);
///                 SendError::Provider(failure)
///             };
///             let url = format!("https://api.anthropic.com{}", wire::request_path(kind, "", true));
///             let send = self
///                 .client
///                 .post(url)
///                 .header("x-api-key", &self.api_key)
///                 .header("anthropic-version", "2023-06-01")
///                 .header("content-type", "application/json")
///                 .body(body.to_string())
///                 .send();
///             let mut response = tokio::time::timeout(idle, send)
///                 .await
///                 .map_err(|_| silent())?
///                 .map_err(|e| transport(&e, false))?;
///             let status = response.status().as_u16();
///             if !response.status().is_success() {
///                 let headers: Headers = response
///                     .headers()
///                     .iter()
///                     .filter_map(|(name, value)| {
///                         Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
///                     })
///                     .collect();
///                 let body = response.bytes().await.map_err(|e| transport(&e, true))?;
///                 // Pass your wall clock (ms since the Unix epoch) to read date-valued hints.
///                 let failure = classify_http(kind, status, &headers, &body, None);
///                 return Err(SendError::Provider(failure));
///             }
///             let mut decoder = StreamDecoder::new(kind);
///             loop {
///                 let chunk = tokio::time::timeout(idle, response.chunk()).await;
///                 let Some(chunk) = chunk.map_err(|_| silent())?.map_err(|e| transport(&e, true))?
///                 else {
///                     break;
///                 };
///                 let mut stopped = false;
///                 // A malformed stream or an error event: a classified `ProviderFailure`.
///                 decoder.feed_with(&chunk, |delta| stopped = stopped || !deltas(delta))?;
///                 if stopped {
///                     return Err(SendError::Stopped);
///                 }
///                 if decoder.is_complete() {
///                     break;
///                 }
///             }
///             // A stream cut before its end is a classified failure too.
///             Ok(decoder.finish()?)
///         })
///     }
/// }
///
/// let provider = MyProvider {
///     client: reqwest::Client::new(),
///     api_key: std::env::var("ANTHROPIC_API_KEY")?,
///     model: "claude-sonnet-4-6".into(),
/// };
/// let _runner = Runner::new(MachineConfig::default(), vec![Box::new(provider)]);
/// # Ok::<(), std::env::VarError>(())
/// ```
///
/// A real provider also bounds how long it goes without *content* (the request's
/// `deadlines.progress_ms`: a server sending only keep-alives) and reads at most so much of
/// an error body; [`HttpProvider`] does both.
pub trait Provider: Send + Sync {
    /// A printable name, e.g. `anthropic:claude-sonnet-4-6` (never containing a secret).
    fn label(&self) -> String;

    /// Who this provider is for the encrypted reasoning and signed thinking it produces
    /// ([`TargetIdentity`]): the same for the same endpoint and credentials, different for
    /// another base URL, key or organisation, and never containing a secret. The runner
    /// records it on the target ([`TargetSpec::identity`](rebound_core::TargetSpec)), so
    /// the machine stamps this provider's reasoning with it; a provider that returns one
    /// builds its request bodies with the same identity
    /// ([`RequestParams::with_identity`](rebound_core::wire::RequestParams::with_identity)),
    /// so reasoning another target produced is left out.
    ///
    /// `None` (the default): its reasoning has an unknown owner, sent only to the primary
    /// target.
    fn identity(&self) -> Option<TargetIdentity> {
        None
    }

    /// The credentials this provider sends (its API key, a gateway's token), for the runner
    /// to name to the machine ([`AgentMachine::with_secrets`](rebound_core::AgentMachine::with_secrets)):
    /// a server that echoes one in an error, a request id or a tool's failure never gets it
    /// into a notice, the run's error, telemetry or a trace. [`HttpProvider`] names its key
    /// and its extra headers' values.
    ///
    /// [`Secrets::none`](rebound_core::Secrets::none) (the default): the runner masks only
    /// the secrets given to [`Runner::secrets`](crate::runner::Runner::secrets).
    fn secrets(&self) -> rebound_core::Secrets {
        rebound_core::Secrets::none()
    }

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

/// A shared provider is a provider: runners (or a runner and the embedder's own code) can
/// share one `Arc<HttpProvider>`, its connection pool included, or an `Arc<dyn Provider>`
/// chosen at run time.
impl<P: Provider + ?Sized> Provider for std::sync::Arc<P> {
    fn label(&self) -> String {
        (**self).label()
    }

    fn identity(&self) -> Option<TargetIdentity> {
        (**self).identity()
    }

    fn secrets(&self) -> rebound_core::Secrets {
        (**self).secrets()
    }

    fn send<'a>(
        &'a self,
        request: ProviderRequest<'a>,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<AssistantResponse, SendError>> {
        (**self).send(request, deltas)
    }
}

/// A boxed provider is a provider: a `Box<dyn Provider>` can be handed where a provider is
/// taken by value and wrapped again.
impl<P: Provider + ?Sized> Provider for Box<P> {
    fn label(&self) -> String {
        (**self).label()
    }

    fn identity(&self) -> Option<TargetIdentity> {
        (**self).identity()
    }

    fn secrets(&self) -> rebound_core::Secrets {
        (**self).secrets()
    }

    fn send<'a>(
        &'a self,
        request: ProviderRequest<'a>,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<AssistantResponse, SendError>> {
        (**self).send(request, deltas)
    }
}
