//! OpenAI Responses API: request bodies, stream assembly, and what the API sends.

pub(crate) mod encode;
pub(crate) mod request;
pub(crate) mod stream;

#[cfg(test)]
mod tests;
