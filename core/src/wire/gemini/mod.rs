//! Google's Gemini API (`generateContent` / `streamGenerateContent?alt=sse`, on AI Studio and
//! Vertex AI): request bodies, stream assembly, and what the API sends.
//!
//! Two things have no counterpart in the other formats:
//!
//! - **Function calls carry no ids** (some API versions send an `id`; most do not). A call
//!   without one is given an id minted from the response's `responseId` and the call's
//!   position (`gc_{responseId}_{n}`, or `gc_{n}` without a response id), so decoding the
//!   same bytes gives the same ids. Requests send no ids at all: Gemini pairs a
//!   `functionResponse` with its call by name and position, which the conversation's pairing
//!   rule (each result in the very next message, in the calls' order) guarantees.
//! - **Thought signatures** (`thoughtSignature`) ride on any part. Each becomes a
//!   [`ContentBlock::Reasoning`](crate::ContentBlock::Reasoning) block holding
//!   `{"thoughtSignature": …}`, placed right before the block of the part that carried it
//!   (after the text it ended, for a signature that arrives on a text part already
//!   streaming). Requests put it back on the part that follows it (or on an empty text part
//!   when none does), only to the target that produced it, as the owner rule says for all
//!   reasoning. A model turn whose first function call has no signature of its own (another
//!   provider made the call, or another Gemini key did) gets the documented
//!   `skip_thought_signature_validator`, without which Gemini 3 answers 400.

pub(crate) mod chunk;
#[cfg(feature = "server")]
pub(crate) mod encode;
pub(crate) mod request;
pub(crate) mod schema;
pub(crate) mod stream;

#[cfg(all(test, feature = "server"))]
mod tests;

use serde_json::Value;

/// The key of a thought signature, in a part and in the reasoning item that keeps it.
pub(crate) const SIGNATURE: &str = "thoughtSignature";

/// The signature Google documents for a function call Gemini did not produce ("Thought
/// signatures": history from another model, or built by hand).
pub(crate) const FOREIGN_SIGNATURE: &str = "skip_thought_signature_validator";

/// The thought signature a reasoning item holds, when it is one of Gemini's.
pub(crate) fn signature_of(item: &Value) -> Option<&str> {
    item.get(SIGNATURE)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The path of a request for `model` (after the base URL): `/models/{model}:generateContent`,
/// or `:streamGenerateContent?alt=sse` for a stream. A leading `models/` in the id is
/// dropped (the API's resource name); the id is percent-encoded
/// ([`label`](crate::wire::label)), so it cannot change the path.
pub(crate) fn path(model: &str, stream: bool) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let mut out = String::with_capacity(model.len() + 48);
    out.push_str("/models/");
    crate::wire::label::push_encoded(&mut out, model);
    out.push_str(if stream {
        ":streamGenerateContent?alt=sse"
    } else {
        ":generateContent"
    });
    out
}

/// The model id and whether a stream was asked for, from a request path (`…/models/{model}:
/// streamGenerateContent?alt=sse`): what the fake server reads.
#[cfg(feature = "server")]
pub(crate) fn parse_path(path: &str) -> Option<(String, bool)> {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let at = path.rfind("/models/")? + "/models/".len();
    let (model, method) = path[at..].split_once(':')?;
    let stream = match method {
        "streamGenerateContent" => true,
        "generateContent" => false,
        _ => return None,
    };
    if model.is_empty() {
        return None;
    }
    // Without `alt=sse` the API streams a JSON array; rebound neither sends nor serves it.
    if stream && !query.split('&').any(|kv| kv == "alt=sse") {
        return None;
    }
    Some((crate::wire::label::decode(model)?, stream))
}

/// Google's canonical status name for an HTTP status (`google.rpc.Code`), as its error
/// bodies carry it.
#[cfg(feature = "server")]
pub(crate) fn status_name(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "NOT_IMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    }
}
