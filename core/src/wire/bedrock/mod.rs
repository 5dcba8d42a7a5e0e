//! AWS Bedrock Converse and ConverseStream: request bodies, event-stream assembly, and what
//! the service sends.
//!
//! What the dispatch calls, as for the other formats:
//!
//! - [`request::path`] (the model id goes in the URL, percent-encoded; the operation says
//!   whether the response streams), [`request::body`], and for the fake server
//!   `request::parse` (which leaves `model` empty and `stream` false: `request::parse_path`
//!   reads both from the URL);
//! - [`stream::Decoder`] for a streamed body (AWS event-stream framing, not SSE:
//!   [`eventstream`](crate::wire::eventstream)), built on [`stream::StreamState`] (one
//!   message at a time), and [`stream::parse_response`] for a Converse body;
//! - with feature `server`, `encode::stream`, `encode::response_json`,
//!   `encode::error_body` with `encode::error_type_header` (the `x-amzn-errortype` header
//!   that carries an HTTP error's type) and `encode::stream_error_event`.
//!
//! The decisions (tool-use ids, merged messages, completion, in-stream exceptions) are
//! written where they are made: [`request`] and [`stream`].

#[cfg(feature = "server")]
pub(crate) mod encode;
pub(crate) mod request;
pub(crate) mod stream;

#[cfg(all(test, feature = "server"))]
mod tests;
