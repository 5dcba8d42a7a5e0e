//! OpenAI Responses API: request bodies, stream assembly, and what the API sends.

#[cfg(feature = "server")]
pub(crate) mod encode;
pub(crate) mod request;
pub(crate) mod stream;

#[cfg(all(test, feature = "server"))]
mod tests;
