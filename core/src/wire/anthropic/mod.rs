//! Anthropic Messages: request bodies, stream assembly, and what the API sends.

#[cfg(feature = "server")]
pub(crate) mod encode;
pub(crate) mod request;
pub(crate) mod stream;
pub(crate) mod tool_id;
