//! The wire helpers of rebound-core for drivers with their own HTTP client: request bodies,
//! the incremental stream decoder, and the classification of HTTP and transport failures.

use crate::convert::{from_py, int_arg, retyped, secrets_arg, to_py, to_u64};
use crate::errors::{ConfigError, ReboundError, RequestError, StreamError};
use crate::exclusive::Exclusive;
use crate::machine::PySnapshot;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use rebound_core::classify::{
    classify_http as core_classify_http, classify_transport_error, TransportError,
};
use rebound_core::wire::{
    self, RequestOptions, RequestParams, StreamDecoder, StreamDelta, ToolIdForm,
};
use rebound_core::{
    Conversation, Headers, ProviderFailure, ProviderKind, Secrets, TargetIdentity, ToolSpec,
};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;

/// A provider kind from its name: `"anthropic"`, `"openai"`, `"openai_responses"`,
/// `"gemini"` or `"bedrock"`.
pub fn provider_kind(name: &str) -> PyResult<ProviderKind> {
    serde_json::from_value(Value::String(name.to_owned())).map_err(|_| {
        ConfigError::new_err(format!(
            "unknown provider {name:?}: expected \"anthropic\", \"openai\", \
             \"openai_responses\", \"gemini\" or \"bedrock\""
        ))
    })
}

/// A conversation from a [`PySnapshot`] (shared, no copy) or a list of messages.
pub fn conversation(obj: &Bound<'_, PyAny>) -> PyResult<Arc<Conversation>> {
    if let Ok(s) = obj.cast::<PySnapshot>() {
        return Ok(Arc::clone(s.get().conversation()?));
    }
    from_py::<Conversation>(obj, "conversation")
        .map(Arc::new)
        .map_err(|e| retyped(e, RequestError::new_err))
}

/// The bytes of `bytes`, `bytearray`, `memoryview` or `str` (as UTF-8).
fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Cow::Owned(s.to_str()?.as_bytes().to_vec()));
    }
    obj.extract::<Vec<u8>>().map(Cow::Owned).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be bytes, bytearray, memoryview or str"
        ))
    })
}

fn options_from(obj: &Bound<'_, PyAny>) -> PyResult<RequestOptions> {
    // Core reads the options' JSON shape (RequestOptions: Deserialize).
    from_py(obj, "request options").map_err(|e| retyped(e, ConfigError::new_err))
}

/// The JSON request body for `provider` (a dict to send as JSON), built by rebound-core: tool
/// call ids in the form the provider takes, reasoning another target owns left out, options
/// checked against the provider's API. Raises `RequestError` for a conversation no request
/// can be built from (empty, tool calls not answered in order) or refused options.
#[pyfunction]
#[pyo3(signature = (provider, conversation, model, max_tokens=None, *, system=None, tools=None, stream=true, options=None, base_url=None, identity=None))]
#[allow(clippy::too_many_arguments)]
pub fn request_body<'py>(
    py: Python<'py>,
    provider: &str,
    conversation: &Bound<'py, PyAny>,
    model: &str,
    max_tokens: Option<&Bound<'py, PyAny>>,
    system: Option<&str>,
    tools: Option<&Bound<'py, PyAny>>,
    stream: bool,
    options: Option<&Bound<'py, PyAny>>,
    base_url: Option<&str>,
    identity: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    let kind = provider_kind(provider)?;
    let max_tokens: u32 = max_tokens.map_or(Ok(wire::DEFAULT_MAX_TOKENS), |m| {
        int_arg(m, "max_tokens", RequestError::new_err)
    })?;
    let conversation = self::conversation(conversation)?;
    let tools: Vec<ToolSpec> = match tools {
        Some(t) if !t.is_none() => {
            from_py(t, "tools").map_err(|e| retyped(e, ConfigError::new_err))?
        }
        _ => Vec::new(),
    };
    let options = options
        .filter(|o| !o.is_none())
        .map(options_from)
        .transpose()?;
    let identity = identity.map(TargetIdentity::new);
    let mut params = RequestParams::new(model, max_tokens)
        .with_tools(&tools)
        .with_stream(stream)
        .with_tool_ids(base_url.map_or(ToolIdForm::Standard, ToolIdForm::for_base_url));
    params.system = system;
    if let Some(o) = &options {
        params = params.with_options(o);
    }
    if let Some(id) = &identity {
        params = params.with_identity(id);
    }
    let body = wire::request_body(kind, &conversation, &params)
        .map_err(|e| RequestError::new_err(e.to_string()))?;
    to_py(py, &body)
}

/// The URL path of `provider`'s requests for `model`, to append to its base URL
/// (`/v1/messages`, `/chat/completions`, `/responses`; Gemini's names the model and whether
/// to stream: `/models/{model}:streamGenerateContent?alt=sse`).
#[pyfunction]
#[pyo3(signature = (provider, model = "", stream = true))]
pub fn request_path(provider: &str, model: &str, stream: bool) -> PyResult<String> {
    let kind = provider_kind(provider)?;
    if matches!(kind, ProviderKind::Gemini | ProviderKind::Bedrock) && model.trim().is_empty() {
        return Err(ConfigError::new_err(format!(
            "{kind}'s request path names the model: give `model`"
        )));
    }
    Ok(wire::request_path(kind, model, stream))
}

fn stream_error(py: Python<'_>, failure: &ProviderFailure) -> PyErr {
    let err = StreamError::new_err(failure.message.to_string());
    match to_py(py, failure) {
        Ok(f) => match err.value(py).setattr("failure", f) {
            Ok(()) => err,
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// Parses a whole non-streamed JSON response body (HTTP 200) into an AssistantResponse.
/// Raises `StreamError` (its `failure` to answer with) when it is an error object, not a
/// response, or not JSON.
#[pyfunction]
#[pyo3(signature = (provider, body, *, secrets=None))]
pub fn parse_response<'py>(
    py: Python<'py>,
    provider: &str,
    body: &Bound<'py, PyAny>,
    secrets: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let kind = provider_kind(provider)?;
    let secrets = secrets_arg(secrets)?;
    let body = bytes_of(body, "body")?;
    match wire::parse_response(kind, &body) {
        Ok(response) => to_py(py, &response),
        Err(f) => Err(stream_error(py, &secrets.redact_failure(f))),
    }
}

/// Decodes a provider's server-sent event stream incrementally: feed it the body's bytes as
/// they arrive (any split), show the deltas, and `finish()` for the AssistantResponse.
/// Calls from several threads take turns (see [`Exclusive`]).
#[pyclass(frozen, module = "rebound_agent._native", name = "StreamDecoder")]
pub struct PyStreamDecoder {
    state: Exclusive<DecoderState>,
}

/// What a decoder's calls change.
struct DecoderState {
    decoder: Option<StreamDecoder>,
    /// Masked in the failures it raises.
    secrets: Secrets,
    /// Whether the last `feed` completed a delta with content.
    progressed: bool,
}

impl DecoderState {
    fn live(&mut self) -> PyResult<&mut StreamDecoder> {
        self.decoder.as_mut().ok_or_else(|| {
            ReboundError::new_err("this decoder has finished: make a new one for the next body")
        })
    }
}

fn delta_dict<'py>(py: Python<'py>, delta: StreamDelta<&str>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    match delta {
        StreamDelta::Text { index, text } => {
            d.set_item(intern!(py, "type"), intern!(py, "text"))?;
            d.set_item(intern!(py, "index"), index)?;
            d.set_item(intern!(py, "text"), text)?;
        }
        StreamDelta::Thinking { index, thinking } => {
            d.set_item(intern!(py, "type"), intern!(py, "thinking"))?;
            d.set_item(intern!(py, "index"), index)?;
            d.set_item(intern!(py, "thinking"), thinking)?;
        }
        StreamDelta::ToolCallStart { index, id, name } => {
            d.set_item(intern!(py, "type"), intern!(py, "tool_call_start"))?;
            d.set_item(intern!(py, "index"), index)?;
            d.set_item(intern!(py, "id"), id)?;
            d.set_item(intern!(py, "name"), name)?;
        }
        StreamDelta::ToolInputJson {
            index,
            partial_json,
        } => {
            d.set_item(intern!(py, "type"), intern!(py, "tool_input_json"))?;
            d.set_item(intern!(py, "index"), index)?;
            d.set_item(intern!(py, "partial_json"), partial_json)?;
        }
        // A kind of delta added to core later: shown by its debug form, never dropped
        // silently.
        #[allow(unreachable_patterns)]
        other => {
            d.set_item(intern!(py, "type"), intern!(py, "other"))?;
            d.set_item(intern!(py, "debug"), format!("{other:?}"))?;
        }
    }
    Ok(d)
}

#[pymethods]
impl PyStreamDecoder {
    /// A decoder for one response body of `provider`.
    #[new]
    #[pyo3(signature = (provider, *, secrets=None))]
    fn new(provider: &str, secrets: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let state = DecoderState {
            secrets: secrets_arg(secrets)?,
            decoder: Some(StreamDecoder::new(provider_kind(provider)?)),
            progressed: false,
        };
        Ok(PyStreamDecoder {
            state: Exclusive::new(state, "this stream decoder"),
        })
    }

    /// Feeds the next bytes of the body; returns the deltas they completed, as dicts
    /// (`{"type": "text", "index", "text"}`, `thinking`, `tool_call_start`,
    /// `tool_input_json`). Raises `StreamError` (with `failure`) when the bytes are no valid
    /// stream or carry an error event; every later call raises it again.
    fn feed<'py>(&self, py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let data = bytes_of(data, "data")?;
        let out = PyList::empty(py);
        let result = self.state.with(py, |state| {
            let decoder = state.live()?;
            let mut error: Option<PyErr> = None;
            let mut progressed = false;
            let result = decoder.feed_with(&data, |delta| {
                progressed |= delta.is_progress();
                if error.is_none() {
                    if let Err(e) = delta_dict(py, delta).and_then(|d| out.append(d)) {
                        error = Some(e);
                    }
                }
            });
            state.progressed = progressed;
            match error {
                Some(e) => Err(e),
                None => Ok(result.map_err(|f| state.secrets.redact_failure(f))),
            }
        })?;
        match result {
            Ok(()) => Ok(out),
            Err(f) => Err(stream_error(py, &f)),
        }
    }

    /// Whether the bytes of the last `feed` carried content (text, thinking, a tool call or
    /// its input, as rebound-core counts it): what moves a request's progress deadline
    /// (`SendRequest.deadlines.progress_ms`). Keep-alives and empty deltas do not.
    #[getter]
    fn progressed(&self, py: Python<'_>) -> PyResult<bool> {
        self.state.with(py, |state| Ok(state.progressed))
    }

    /// Whether the terminal event arrived (the message is complete).
    #[getter]
    fn is_complete(&self, py: Python<'_>) -> PyResult<bool> {
        self.state.with(py, |state| {
            Ok(state
                .decoder
                .as_ref()
                .is_some_and(StreamDecoder::is_complete))
        })
    }

    /// Ends the body: the assembled AssistantResponse (for ProviderSucceeded), or
    /// `StreamError` whose `failure` is for ProviderFailed (a body that ended before its
    /// terminal event is a cut stream). The decoder cannot be fed afterwards.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let (decoder, secrets) = self.state.with(py, |state| {
            let decoder = state.decoder.take().ok_or_else(|| {
                ReboundError::new_err("this decoder has finished: make a new one for the next body")
            })?;
            Ok((decoder, state.secrets.clone()))
        })?;
        match decoder.finish() {
            Ok(response) => to_py(py, &response),
            Err(f) => Err(stream_error(py, &secrets.redact_failure(f))),
        }
    }
}

fn headers_from(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Headers> {
    let mut headers = Headers::new();
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(headers);
    };
    // httpx.Headers keeps repeated headers in multi_items(); a Mapping has items(); else pairs.
    let items = if let Ok(m) = obj.getattr("multi_items") {
        m.call0()?
    } else if let Ok(m) = obj.getattr("items") {
        m.call0()?
    } else {
        obj.clone()
    };
    let bad = || {
        pyo3::exceptions::PyTypeError::new_err(
            "headers must be a mapping of str to str, or (name, value) pairs",
        )
    };
    for item in items.try_iter().map_err(|_| bad())? {
        let (name, value): (String, String) = item?.extract().map_err(|_| bad())?;
        headers.push(name, value);
    }
    Ok(headers)
}

/// Classifies an HTTP error response of `provider` (status, headers, body) into a
/// ProviderFailure for ProviderFailed: its kind, the server's delay hints (`retry-after`,
/// `retry-after-ms`, rate-limit resets), `x-should-retry`, the request id. `now_unix_ms` is
/// the wall time, for date-valued hints (None ignores them). Never raises on what a server
/// sends.
#[pyfunction]
#[pyo3(signature = (provider, status, headers=None, body=None, now_unix_ms=None, *, secrets=None))]
pub fn classify_http<'py>(
    py: Python<'py>,
    provider: &str,
    status: &Bound<'py, PyAny>,
    headers: Option<&Bound<'py, PyAny>>,
    body: Option<&Bound<'py, PyAny>>,
    now_unix_ms: Option<&Bound<'py, PyAny>>,
    secrets: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let kind = provider_kind(provider)?;
    let secrets = secrets_arg(secrets)?;
    let status = u16::try_from(to_u64(status, "status")?)
        .map_err(|_| ReboundError::new_err("status must be an HTTP status (0 to 65535)"))?;
    let headers = headers_from(headers)?;
    let body = match body.filter(|b| !b.is_none()) {
        Some(b) => bytes_of(b, "body")?,
        None => Cow::Borrowed(&[][..]),
    };
    let now = now_unix_ms
        .filter(|n| !n.is_none())
        .map(|n| to_u64(n, "now_unix_ms"))
        .transpose()?;
    to_py(
        py,
        &secrets.redact_failure(core_classify_http(kind, status, &headers, &body, now)),
    )
}

/// Classifies an exchange that produced no usable response from what the HTTP client said:
/// its error text and whether it timed out, failed to connect, or failed after the response
/// started (then a break is a cut stream). Every such failure is retried.
#[pyfunction]
#[pyo3(signature = (description, *, timed_out=false, connect_failed=false, response_started=false, secrets=None))]
pub fn classify_transport<'py>(
    py: Python<'py>,
    description: &str,
    timed_out: bool,
    connect_failed: bool,
    response_started: bool,
    secrets: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let secrets = secrets_arg(secrets)?;
    let error = TransportError::new(description)
        .with_timed_out(timed_out)
        .with_connect_failed(connect_failed)
        .with_response_started(response_started);
    to_py(
        py,
        &secrets.redact_failure(classify_transport_error(&error)),
    )
}

/// Compacts a conversation (a Command's Snapshot, or a list of messages) by deterministic
/// elision with `policy` (None: the default policy), for a `Compact` command: returns the
/// `result` of CompactionFinished, `{"Ok": messages}` or `{"Err": "why"}`.
#[pyfunction]
#[pyo3(signature = (conversation, policy=None))]
pub fn compact<'py>(
    py: Python<'py>,
    conversation: &Bound<'py, PyAny>,
    policy: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let conversation = self::conversation(conversation)?;
    let policy: rebound_core::CompactionPolicy = match policy.filter(|p| !p.is_none()) {
        Some(p) => from_py(p, "compaction policy").map_err(|e| retyped(e, ConfigError::new_err))?,
        None => rebound_core::CompactionPolicy::default(),
    };
    let result = rebound_core::compact(&conversation, &policy);
    let d = PyDict::new(py);
    match result {
        Ok(c) => d.set_item("Ok", to_py(py, &c)?)?,
        Err(e) => d.set_item("Err", e.to_string())?,
    }
    Ok(d.into_any())
}
