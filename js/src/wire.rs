//! The wire helpers of rebound-core for agents with their own HTTP client (`fetch`): request
//! bodies and paths, the incremental stream decoder (server-sent events, and Bedrock's AWS
//! event-stream frames), whole-response parsing, the classification of HTTP and transport
//! failures, and compaction. `lib/wire.js` converts JavaScript values to what these take
//! (JSON text, bytes) and parses what they return; every rule is core's.

use crate::convert::{from_json, to_json, whole};
use crate::errors::{error, stream_error, Kind, Result};
use crate::machine::Snapshot;
use rebound_core::classify::TransportError;
use rebound_core::classify::{classify_http as core_classify_http, classify_transport_error};
use rebound_core::wire::{
    self, RequestOptions, RequestParams, StreamDecoder as CoreDecoder, StreamDelta, ToolIdForm,
};
use rebound_core::{
    CompactionPolicy, Conversation, Headers, ProviderFailure, ProviderKind, Secrets,
    TargetIdentity, ToolSpec,
};
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use wasm_bindgen::prelude::*;

/// A provider kind from its name: `"anthropic"`, `"openai"`, `"openai_responses"`,
/// `"gemini"` or `"bedrock"`; a ConfigError for another.
fn provider_kind(name: &str) -> Result<ProviderKind> {
    serde_json::from_value(Value::String(name.to_owned())).map_err(|_| {
        error(
            Kind::Config,
            format!(
                "unknown provider {name:?}: expected one of {}",
                provider_names().join(", ")
            ),
        )
    })
}

/// The names of core's wire formats, in core's order.
fn provider_names() -> Vec<String> {
    ProviderKind::ALL
        .iter()
        .map(|k| {
            serde_json::to_value(k)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{k:?}"))
        })
        .collect()
}

/// The names of the wire formats this build speaks (`["anthropic", "openai",
/// "openai_responses", "gemini", "bedrock"]`): every `provider` argument takes one.
#[wasm_bindgen(js_name = providerKinds)]
pub fn provider_kinds() -> Vec<String> {
    provider_names()
}

/// The secrets to mask, each at least 8 bytes; a ConfigError for a shorter one.
fn secrets_of(words: Vec<String>) -> Result<Secrets> {
    Secrets::new(words).map_err(|e| error(Kind::Config, format!("secrets: {e}")))
}

/// The snapshot of a list of messages (JSON text) to build a request from or to compact: a
/// RequestError when it is no conversation (where `Snapshot.of` throws an EventError).
#[wasm_bindgen(js_name = requestConversation)]
pub fn request_conversation(messages_json: &str) -> Result<Snapshot> {
    let conversation: Conversation = from_json(messages_json, "conversation", Kind::Request)?;
    Ok(Snapshot::full(Arc::new(conversation)))
}

/// Request options from their JSON text (core's `RequestOptions` shape: snake_case keys).
fn options_from(text: &str) -> Result<RequestOptions> {
    from_json(text, "request options", Kind::Config)
}

/// The JSON request body (as text, ready to send) for `provider`, built by rebound-core: tool
/// call ids in the form the provider takes (`base_url` picks Mistral's), reasoning another
/// target owns left out (`identity`: the target's), `options_json` (request options' JSON
/// text) checked against the provider's API. A RequestError for a conversation no request
/// can be built from (empty, tool calls not answered in order) or refused options; a
/// ConfigError for options or tools that cannot be read.
#[wasm_bindgen(js_name = requestBody)]
#[allow(clippy::too_many_arguments)]
pub fn request_body(
    provider: &str,
    conversation: &Snapshot,
    model: &str,
    max_tokens: Option<f64>,
    system: Option<String>,
    tools_json: Option<String>,
    stream: bool,
    options_json: Option<String>,
    base_url: Option<String>,
    identity: Option<String>,
) -> Result<String> {
    let kind = provider_kind(provider)?;
    let max_tokens = match max_tokens {
        None => wire::DEFAULT_MAX_TOKENS,
        Some(m) => u32::try_from(whole(m, "maxTokens", Kind::Request)?).map_err(|_| {
            error(
                Kind::Request,
                format!(
                    "maxTokens must be a whole number from 0 to {}, not {m}",
                    u32::MAX
                ),
            )
        })?,
    };
    let conversation = conversation.conversation()?;
    let tools: Vec<ToolSpec> = match tools_json {
        Some(t) => from_json(&t, "tools", Kind::Config)?,
        None => Vec::new(),
    };
    let options = options_json.as_deref().map(options_from).transpose()?;
    let identity = identity.map(TargetIdentity::new);
    let mut params = RequestParams::new(model, max_tokens)
        .with_tools(&tools)
        .with_stream(stream)
        .with_tool_ids(
            base_url
                .as_deref()
                .map_or(ToolIdForm::Standard, ToolIdForm::for_base_url),
        );
    if let Some(system) = system.as_deref() {
        params = params.with_system(system);
    }
    if let Some(o) = &options {
        params = params.with_options(o);
    }
    if let Some(id) = &identity {
        params = params.with_identity(id);
    }
    let body =
        wire::request_body(kind, conversation, &params).map_err(|e| error(Kind::Request, e))?;
    to_json(&body)
}

/// The URL path of `provider`'s requests for `model`, to append to its base URL
/// (`/v1/messages`, `/chat/completions`, `/responses`; Gemini's and Bedrock's name the model
/// and whether to stream). A ConfigError without a model for those two.
#[wasm_bindgen(js_name = requestPath)]
pub fn request_path(provider: &str, model: &str, stream: bool) -> Result<String> {
    let kind = provider_kind(provider)?;
    if matches!(kind, ProviderKind::Gemini | ProviderKind::Bedrock) && model.trim().is_empty() {
        return Err(error(
            Kind::Config,
            format!("{kind}'s request path names the model: give `model`"),
        ));
    }
    Ok(wire::request_path(kind, model, stream))
}

/// The StreamError of `failure` (masked), carrying its JSON text as `failure`.
fn failed(failure: &ProviderFailure) -> JsValue {
    match to_json(failure) {
        Ok(text) => stream_error(&failure.message, &text),
        Err(e) => e,
    }
}

/// Parses a whole non-streamed JSON response body (HTTP 200) of `provider` into an
/// AssistantResponse (its JSON text). A StreamError (its `failure` to answer the request
/// with, `secrets` masked) when the body is an error object, not a response, or not JSON.
#[wasm_bindgen(js_name = parseResponse)]
pub fn parse_response(provider: &str, body: &[u8], secrets: Vec<String>) -> Result<String> {
    let kind = provider_kind(provider)?;
    let secrets = secrets_of(secrets)?;
    match wire::parse_response(kind, body) {
        Ok(response) => to_json(&response),
        Err(f) => Err(failed(&secrets.redact_failure(f))),
    }
}

/// A delta in its JSON shape for JavaScript.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta<'a> {
    Text {
        index: u64,
        text: &'a str,
    },
    Thinking {
        index: u64,
        thinking: &'a str,
    },
    ToolCallStart {
        index: u64,
        id: &'a str,
        name: &'a str,
    },
    ToolInputJson {
        index: u64,
        partial_json: &'a str,
    },
    /// A kind of delta added to core later: shown by its debug form, never dropped silently.
    Other {
        debug: String,
    },
}

impl<'a> From<StreamDelta<&'a str>> for Delta<'a> {
    fn from(delta: StreamDelta<&'a str>) -> Self {
        match delta {
            StreamDelta::Text { index, text } => Delta::Text { index, text },
            StreamDelta::Thinking { index, thinking } => Delta::Thinking { index, thinking },
            StreamDelta::ToolCallStart { index, id, name } => {
                Delta::ToolCallStart { index, id, name }
            }
            StreamDelta::ToolInputJson {
                index,
                partial_json,
            } => Delta::ToolInputJson {
                index,
                partial_json,
            },
            #[allow(unreachable_patterns)]
            other => Delta::Other {
                debug: format!("{other:?}"),
            },
        }
    }
}

/// The incremental decoder of one streamed response body of a provider: feed it the body's
/// bytes as they arrive (any split), show the deltas, and `finish()` for the
/// AssistantResponse. Use `StreamDecoder` of `lib/wire.js`, which parses what it returns.
#[wasm_bindgen(js_name = StreamDecoder)]
pub struct Decoder {
    decoder: Option<CoreDecoder>,
    /// Masked in the failures it throws.
    secrets: Secrets,
    /// Whether the last `feed` completed a delta with content.
    progressed: bool,
}

impl Decoder {
    fn live(&mut self) -> Result<&mut CoreDecoder> {
        self.decoder.as_mut().ok_or_else(finished)
    }
}

fn finished() -> JsValue {
    error(
        Kind::Rebound,
        "this decoder has finished: make a new one for the next body",
    )
}

#[wasm_bindgen(js_class = StreamDecoder)]
impl Decoder {
    /// A decoder for one response body of `provider`, masking `secrets` in the failures it
    /// throws.
    #[wasm_bindgen(constructor)]
    pub fn new(provider: &str, secrets: Vec<String>) -> Result<Decoder> {
        Ok(Decoder {
            secrets: secrets_of(secrets)?,
            decoder: Some(CoreDecoder::new(provider_kind(provider)?)),
            progressed: false,
        })
    }

    /// Feeds the next bytes of the body; returns the deltas they completed, as the JSON text
    /// of a list (`{"type": "text", "index", "text"}`, `thinking`, `tool_call_start`,
    /// `tool_input_json`). A StreamError (with `failure`) when the bytes are no valid stream
    /// or carry an error event; every later call throws it again.
    pub fn feed(&mut self, data: &[u8]) -> Result<String> {
        let decoder = self.live()?;
        let mut progressed = false;
        // The deltas borrow `data`: they are written straight into the JSON text.
        let mut json: Vec<u8> = vec![b'['];
        // Writing strings and integers cannot fail; were it to, the delta is not dropped
        // silently: the call throws.
        let mut unwritten: Option<serde_json::Error> = None;
        let result = decoder.feed_with(data, |delta| {
            progressed |= delta.is_progress();
            if json.len() > 1 {
                json.push(b',');
            }
            if let Err(e) = serde_json::to_writer(&mut json, &Delta::from(delta)) {
                unwritten.get_or_insert(e);
            }
        });
        self.progressed = progressed;
        if let Err(f) = result {
            return Err(failed(&self.secrets.redact_failure(f)));
        }
        if let Some(e) = unwritten {
            return Err(error(
                Kind::Rebound,
                format!("could not write a delta: {e}"),
            ));
        }
        json.push(b']');
        String::from_utf8(json)
            .map_err(|e| error(Kind::Rebound, format!("a delta is not UTF-8: {e}")))
    }

    /// Whether the bytes of the last `feed` carried content (text, thinking, a tool call or
    /// its input, as rebound-core counts it): what moves a request's progress deadline
    /// (`send_request.deadlines.progress_ms`). Keep-alives and empty deltas do not.
    #[wasm_bindgen(getter)]
    pub fn progressed(&self) -> bool {
        self.progressed
    }

    /// Whether the terminal event arrived (the message is complete).
    #[wasm_bindgen(getter, js_name = isComplete)]
    pub fn is_complete(&self) -> bool {
        self.decoder.as_ref().is_some_and(CoreDecoder::is_complete)
    }

    /// Ends the body: the assembled AssistantResponse's JSON text (for `provider_succeeded`),
    /// or a StreamError whose `failure` is for `provider_failed` (a body that ended before its
    /// terminal event is a cut stream). The decoder cannot be fed afterwards.
    pub fn finish(&mut self) -> Result<String> {
        let decoder = self.decoder.take().ok_or_else(finished)?;
        match decoder.finish() {
            Ok(response) => to_json(&response),
            Err(f) => Err(failed(&self.secrets.redact_failure(f))),
        }
    }
}

/// Classifies an HTTP error response of `provider` (status, headers as the JSON text of
/// `[name, value]` pairs, body bytes) into a ProviderFailure's JSON text: its kind, the
/// server's delay hints (`retry-after`, `retry-after-ms`, rate-limit resets),
/// `x-should-retry`, the request id; `secrets` masked. `now_unix_ms` is the wall time, for
/// date-valued hints (none ignores them). Never throws on what a server sends.
#[wasm_bindgen(js_name = classifyHttp)]
pub fn classify_http(
    provider: &str,
    status: f64,
    headers_json: &str,
    body: &[u8],
    now_unix_ms: Option<f64>,
    secrets: Vec<String>,
) -> Result<String> {
    let kind = provider_kind(provider)?;
    let secrets = secrets_of(secrets)?;
    let status = u16::try_from(whole(status, "status", Kind::Rebound)?).map_err(|_| {
        error(
            Kind::Rebound,
            format!("status must be an HTTP status (0 to 65535), not {status}"),
        )
    })?;
    let pairs: Vec<(String, String)> = from_json(headers_json, "headers", Kind::Rebound)?;
    let mut headers = Headers::new();
    for (name, value) in pairs {
        headers.push(name, value);
    }
    let now = now_unix_ms
        .map(|n| whole(n, "nowUnixMs", Kind::Rebound))
        .transpose()?;
    to_json(&secrets.redact_failure(core_classify_http(kind, status, &headers, body, now)))
}

/// Classifies an exchange that produced no usable response from what the HTTP client said:
/// its error text and whether it timed out, failed to connect, or failed after the response
/// started (then a break is a cut stream). A ProviderFailure's JSON text, `secrets` masked.
#[wasm_bindgen(js_name = classifyTransport)]
pub fn classify_transport(
    description: &str,
    timed_out: bool,
    connect_failed: bool,
    response_started: bool,
    secrets: Vec<String>,
) -> Result<String> {
    let secrets = secrets_of(secrets)?;
    let error = TransportError::new(description)
        .with_timed_out(timed_out)
        .with_connect_failed(connect_failed)
        .with_response_started(response_started);
    to_json(&secrets.redact_failure(classify_transport_error(&error)))
}

/// Compacts `conversation` by deterministic elision with `policy_json` (a CompactionPolicy's
/// JSON text; none: the default policy), for a `compact` command: the JSON text of the
/// `result` of `compaction_finished`, `{"Ok": messages}` or `{"Err": "why"}`.
#[wasm_bindgen]
pub fn compact(conversation: &Snapshot, policy_json: Option<String>) -> Result<String> {
    let conversation = conversation.conversation()?;
    let policy: CompactionPolicy = match policy_json {
        Some(p) => from_json(&p, "compaction policy", Kind::Config)?,
        None => CompactionPolicy::default(),
    };
    match rebound_core::compact(conversation, &policy) {
        Ok(c) => to_json(&serde_json::json!({ "Ok": c })),
        Err(e) => to_json(&serde_json::json!({ "Err": e.to_string() })),
    }
}
