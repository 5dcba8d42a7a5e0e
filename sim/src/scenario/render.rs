//! What a provider puts on the wire for a fault, and what a client makes of it.
//!
//! One implementation for both players of a scenario: the fake provider server sends a
//! [`Rendered`] fault as it is, and the simulator classifies the same bytes with
//! [`Rendered::failure`], through the decoder and classifiers the real runner uses. So a
//! scenario's fault reaches the machine the same way in both, byte for byte.

use super::{Fault, FaultKind, Timing};
use rebound_core::classify::classify_http;
use rebound_core::wire::{self, StreamDecoder};
use rebound_core::{
    AssistantResponse, Headers, Message, ProviderFailure, ProviderKind, TransportFault,
};
use std::collections::BTreeMap;

/// The request a fault answers: what shapes its bytes.
#[derive(Debug, Clone, Copy)]
pub struct WireRequest<'a> {
    /// The provider's wire format.
    pub provider: ProviderKind,
    /// Whether the request asked for a stream (`stream: true`).
    pub stream: bool,
    /// The model named in the request, echoed in a streamed answer.
    pub model: &'a str,
    /// The id the answer carries (`msg_…`, `chatcmpl-…`, `resp_…`).
    pub message_id: &'a str,
    /// The scenario's latencies (how long a `timeout` holds the connection).
    pub timing: &'a Timing,
}

/// The id of an answer to request `request_id`, as `provider` spells it: `msg_…`,
/// `chatcmpl-…` or `resp_…`.
#[must_use]
pub fn message_id(provider: ProviderKind, request_id: &str) -> String {
    match provider {
        ProviderKind::Anthropic => format!("msg_{request_id}"),
        ProviderKind::OpenAiResponses => format!("resp_{request_id}"),
        // Gemini's `responseId`, which its minted call ids are made of; Bedrock sends none.
        ProviderKind::Gemini | ProviderKind::Bedrock => request_id.to_owned(),
        // OpenAI Chat, and a kind this version does not know: OpenAI-compatible is the
        // common dialect.
        _ => format!("chatcmpl-{request_id}"),
    }
}

/// The body of a 200 response, by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `text/event-stream`: server-sent events.
    EventStream,
    /// `application/json`: one JSON document.
    Json,
}

/// What a fault puts on the wire for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendered {
    /// A whole response: the status, extra headers and the body (with a `content-length`).
    Response {
        /// The HTTP status (an error, or 200 for a complete but faulty answer).
        status: u16,
        /// Headers beyond the provider's usual ones (`retry-after`, …).
        headers: BTreeMap<String, String>,
        /// The JSON body.
        body: Vec<u8>,
    },
    /// A 200 response whose body is sent in `chunks`; `cut`: the connection then closes
    /// before the body's end.
    Chunked {
        /// Server-sent events, or a JSON body.
        kind: BodyKind,
        /// The body's pieces, in order.
        chunks: Vec<Vec<u8>>,
        /// Whether the connection closes without ending the body.
        cut: bool,
    },
    /// No response at all: the connection closes after `after_ms` without a byte.
    Close {
        /// How long the connection is held silent first.
        after_ms: u64,
        /// The fault a client sees (the scenario's meaning: a server can only close, but a
        /// scenario may say it was a DNS failure).
        seen_as: TransportFault,
    },
}

/// What `fault` puts on the wire for `request`. `interrupted` is the answer a cut, a
/// mid-stream error or a malformed event interrupts (the one the request would have got).
///
/// On a stream: a cut keeps at most the events before the one that finishes the message
/// (so it is always visible as a cut); a malformed event follows the stream's first event
/// (in Chat Completions the role-only chunk, before any output), and so does a mid-stream
/// error, unless its `after_deltas` places it after that many text deltas of the answer
/// (after its last when it has fewer, never after the event that finishes it), as the
/// simulator's [`Fault::delay_ms`] times them. A request that does not stream gets the
/// nearest JSON equivalent: a cut is a JSON body cut off mid-way, a mid-stream error is an
/// HTTP error with the status of its type (`529` for `overloaded_error`, `429` for
/// `rate_limit_error`/`rate_limit_exceeded`, else `500`), a malformed stream a truncated
/// JSON body.
#[must_use]
pub fn render(
    fault: &Fault,
    request: &WireRequest<'_>,
    interrupted: &AssistantResponse,
) -> Rendered {
    let provider = request.provider;
    let events =
        |r: &AssistantResponse| wire::encode_stream(provider, r, request.model, request.message_id);
    let json = |r: &AssistantResponse| {
        wire::encode_response_json(provider, r, request.model, request.message_id)
            .to_string()
            .into_bytes()
    };
    let stream = |chunks: Vec<Vec<u8>>, cut: bool| Rendered::Chunked {
        kind: BodyKind::EventStream,
        chunks,
        cut,
    };
    let whole = |status: u16, body: Vec<u8>| Rendered::Response {
        status,
        headers: BTreeMap::new(),
        body,
    };
    let cut_json = |body: Vec<u8>, at: usize| Rendered::Chunked {
        kind: BodyKind::Json,
        chunks: cut_bytes(vec![body], at),
        cut: true,
    };
    let kind = match &fault.kind {
        FaultKind::Transport {
            fault: TransportFault::StreamCut,
        } => FaultKind::StreamCut { after_events: 1 },
        FaultKind::Transport {
            fault: TransportFault::MalformedStream,
        } => FaultKind::MalformedStream,
        FaultKind::Transport {
            fault: TransportFault::EmptyMessage,
        } => FaultKind::EmptyMessage,
        k => k.clone(),
    };
    match kind {
        FaultKind::Http {
            status,
            headers,
            error_type,
            message,
        } => {
            let mut headers = headers;
            for (name, value) in wire::encode_error_headers(provider, status, error_type.as_deref())
            {
                headers.entry(name.to_owned()).or_insert(value);
            }
            Rendered::Response {
                status,
                headers,
                body: error_body(provider, status, error_type.as_deref(), message.as_deref())
                    .into_bytes(),
            }
        }
        FaultKind::ContextOverflow => Rendered::Response {
            status: 400,
            headers: wire::encode_error_headers(provider, 400, Some("ValidationException"))
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v))
                .collect(),
            body: overflow_body(provider).into_bytes(),
        },
        FaultKind::Transport { fault: seen_as } => Rendered::Close {
            after_ms: match seen_as {
                TransportFault::Timeout | TransportFault::IdleTimeout => {
                    fault.after_ms.unwrap_or(request.timing.timeout_ms)
                }
                _ => 0,
            },
            seen_as,
        },
        FaultKind::Stall { ms }
        | FaultKind::SlowDrip {
            interval_ms: ms, ..
        } => Rendered::Close {
            after_ms: ms,
            seen_as: TransportFault::IdleTimeout,
        },
        FaultKind::StreamCut { after_events } => {
            if request.stream {
                let mut chunks = events(interrupted);
                let keep = before_finish(provider, &chunks);
                chunks.truncate(
                    usize::try_from(after_events)
                        .unwrap_or(usize::MAX)
                        .min(keep),
                );
                return stream(chunks, true);
            }
            let body = json(interrupted);
            let half = body.len() / 2;
            cut_json(body, half)
        }
        FaultKind::StreamCutBytes { after_bytes } => {
            let at = usize::try_from(after_bytes).unwrap_or(usize::MAX);
            if request.stream {
                let chunks = events(interrupted);
                let keep = before_finish(provider, &chunks);
                let max: usize = chunks[..keep].iter().map(Vec::len).sum();
                return stream(cut_bytes(chunks, at.min(max)), true);
            }
            let body = json(interrupted);
            let at = at.min(body.len().saturating_sub(1));
            cut_json(body, at)
        }
        FaultKind::StreamError {
            error_type,
            message,
            after_deltas,
        } => {
            if request.stream {
                let mut chunks = events(interrupted);
                let keep = through_text_delta(provider, &chunks, after_deltas);
                chunks.truncate(keep);
                chunks.push(wire::encode_stream_error_event(
                    provider,
                    &error_type,
                    &message,
                ));
                return stream(chunks, false);
            }
            let status = match error_type.as_str() {
                "overloaded_error" => 529,
                "rate_limit_error"
                | "rate_limit_exceeded"
                | "RESOURCE_EXHAUSTED"
                | "ThrottlingException"
                | "throttlingException" => 429,
                "UNAVAILABLE" | "ServiceUnavailableException" | "serviceUnavailableException" => {
                    503
                }
                _ => 500,
            };
            Rendered::Response {
                status,
                headers: wire::encode_error_headers(provider, status, Some(&error_type))
                    .into_iter()
                    .map(|(n, v)| (n.to_owned(), v))
                    .collect(),
                body: wire::encode_error_body(provider, status, Some(&error_type), &message),
            }
        }
        FaultKind::EmptyMessage => {
            let empty = AssistantResponse::end_turn(Message::assistant(Vec::new()));
            if request.stream {
                return stream(events(&empty), false);
            }
            whole(200, json(&empty))
        }
        FaultKind::MalformedStream => {
            if request.stream {
                let mut chunks = events(interrupted);
                chunks.truncate(1);
                chunks.push(malformed_event(provider));
                return stream(chunks, false);
            }
            let mut body = json(interrupted);
            body.truncate(body.len() / 2);
            whole(200, body)
        }
    }
}

impl Rendered {
    /// What a client of `provider` makes of these bytes: the failure the runner's HTTP
    /// provider reports to the machine. Error responses go through
    /// [`classify_http`](rebound_core::classify::classify_http), streams through
    /// [`StreamDecoder`], JSON bodies through [`wire::parse_response`], as in the runner. A
    /// body that is cut is a [`TransportFault::StreamCut`] unless the decoder failed first;
    /// a closed connection is the fault it stands for. Rendered bytes that decode to a
    /// complete answer (no fault renders so) are reported as a malformed stream.
    #[must_use]
    pub fn failure(&self, provider: ProviderKind) -> ProviderFailure {
        match self {
            Rendered::Response {
                status,
                headers,
                body,
            } => {
                if (200..300).contains(status) {
                    return match wire::parse_response(provider, body) {
                        Err(f) => f,
                        Ok(_) => not_a_fault(),
                    };
                }
                let headers: Headers = headers.iter().collect();
                classify_http(provider, *status, &headers, body, None)
            }
            Rendered::Chunked {
                kind: BodyKind::Json,
                chunks,
                cut,
            } => {
                if *cut {
                    return cut_failure(chunks);
                }
                match wire::parse_response(provider, &chunks.concat()) {
                    Err(f) => f,
                    Ok(_) => not_a_fault(),
                }
            }
            Rendered::Chunked {
                kind: BodyKind::EventStream,
                chunks,
                cut,
            } => {
                let mut decoder = StreamDecoder::new(provider);
                let mut deltas = Vec::new();
                for chunk in chunks {
                    if let Err(f) = decoder.feed_into(chunk, &mut deltas) {
                        return f;
                    }
                    deltas.clear();
                    if decoder.is_complete() {
                        break;
                    }
                }
                if *cut && !decoder.is_complete() {
                    return cut_failure(chunks);
                }
                match decoder.finish() {
                    Err(f) => f,
                    Ok(_) => not_a_fault(),
                }
            }
            Rendered::Close { after_ms, seen_as } => match seen_as {
                TransportFault::IdleTimeout => ProviderFailure::transport(
                    TransportFault::IdleTimeout,
                    Some(&format!("no bytes for {after_ms} ms")),
                ),
                fault => ProviderFailure::transport(*fault, None),
            },
        }
    }
}

impl Rendered {
    /// Whether a client reading these bytes as the runner does gets a piece of the answer
    /// before the failure: the answer began (the runner then tells the machine
    /// [`ProviderResponding`](rebound_core::Event::ProviderResponding)). Only an event stream
    /// delivers pieces as they come.
    #[must_use]
    pub fn answer_begins(&self, provider: ProviderKind) -> bool {
        let Rendered::Chunked {
            kind: BodyKind::EventStream,
            chunks,
            ..
        } = self
        else {
            return false;
        };
        let mut decoder = StreamDecoder::new(provider);
        let mut pieces = 0usize;
        for chunk in chunks {
            let fed = decoder.feed_with(chunk, |_| pieces += 1);
            if pieces > 0 {
                return true;
            }
            if fed.is_err() || decoder.is_complete() {
                return false;
            }
        }
        false
    }
}

/// A connection closed in the middle of a body, as the runner reports it.
fn cut_failure(chunks: &[Vec<u8>]) -> ProviderFailure {
    let bytes: usize = chunks.iter().map(Vec::len).sum();
    ProviderFailure::transport(
        TransportFault::StreamCut,
        Some(&format!(
            "the connection closed after {bytes} bytes of the body"
        )),
    )
}

fn not_a_fault() -> ProviderFailure {
    ProviderFailure::transport(
        TransportFault::MalformedStream,
        Some("a scripted fault rendered as a complete answer"),
    )
}

/// How many events come before the one that finishes the message (Anthropic's
/// `message_delta`; OpenAI's chunk with the `finish_reason`; Responses' terminal
/// `response.completed`): a cut at or before it is always visible as a cut.
fn before_finish(provider: ProviderKind, chunks: &[Vec<u8>]) -> usize {
    let tail = match provider {
        ProviderKind::Anthropic => 2,
        // Gemini: the last chunk names the finish reason.
        ProviderKind::OpenAiResponses | ProviderKind::Gemini => 1,
        // Bedrock: `contentBlockStop`, `messageStop` and `metadata` finish it.
        ProviderKind::Bedrock => 3,
        // OpenAI Chat, and a kind this version does not know: OpenAI-compatible is the
        // common dialect.
        _ => 3,
    };
    chunks.len().saturating_sub(tail)
}

/// How many of a stream's events (`chunks`, one event each) to send before a mid-stream
/// error that comes after `deltas` text deltas: through the event holding the `deltas`-th
/// non-empty text delta as a client decodes them (through the last one when there are fewer),
/// and never the event that finishes the message; just the first event when `deltas` is 0 or
/// the answer has no text. Thinking and reasoning deltas are not text: the error falls at the
/// same place in the answer's text on every wire format.
fn through_text_delta(provider: ProviderKind, chunks: &[Vec<u8>], deltas: u32) -> usize {
    let first = 1.min(chunks.len());
    if deltas == 0 {
        return first;
    }
    let mut decoder = StreamDecoder::new(provider);
    let (mut seen, mut keep) = (0u32, first);
    for (i, chunk) in chunks[..before_finish(provider, chunks)].iter().enumerate() {
        let mut texts = 0u32;
        let fed = decoder.feed_with(chunk, |delta| {
            if matches!(delta, wire::StreamDelta::Text { text, .. } if !text.is_empty()) {
                texts += 1;
            }
        });
        if texts > 0 {
            seen = seen.saturating_add(texts);
            keep = (i + 1).max(first);
            if seen >= deltas {
                break;
            }
        }
        if fed.is_err() {
            break;
        }
    }
    keep
}

/// The first `at` bytes of the concatenated chunks, keeping chunk boundaries.
fn cut_bytes(chunks: Vec<Vec<u8>>, at: usize) -> Vec<Vec<u8>> {
    let mut left = at;
    let mut out = Vec::new();
    for mut chunk in chunks {
        if left == 0 {
            break;
        }
        if chunk.len() > left {
            chunk.truncate(left);
        }
        left -= chunk.len();
        out.push(chunk);
    }
    out
}

/// An event whose JSON is broken off mid-object.
fn malformed_event(provider: ProviderKind) -> Vec<u8> {
    match provider {
        ProviderKind::Anthropic => b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\n\n".to_vec(),
        ProviderKind::OpenAiResponses => b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_broken\",\"output_index\":0,\"content_index\":0,\"delta\":\n\n".to_vec(),
        ProviderKind::Gemini => b"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\r\n\r\n".to_vec(),
        // A frame whose checksums hold but whose JSON is broken off.
        ProviderKind::Bedrock => wire::eventstream::encode_frame(
            &[
                (":event-type", wire::eventstream::HeaderValue::String("contentBlockDelta")),
                (":content-type", wire::eventstream::HeaderValue::String("application/json")),
                (":message-type", wire::eventstream::HeaderValue::String("event")),
            ],
            b"{\"contentBlockIndex\":0,\"delta\":{\"text\":",
        ),
        // OpenAI Chat, and a kind this version does not know: OpenAI-compatible is the
        // common dialect.
        _ => b"data: {\"id\":\"chatcmpl-broken\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\n\n".to_vec(),
    }
}

/// The error body `provider` sends with `status`, with its usual error type and message
/// unless given: [`rebound_core::wire::encode_error_body`] with [`default_error_message`].
#[must_use]
pub fn error_body(
    provider: ProviderKind,
    status: u16,
    error_type: Option<&str>,
    message: Option<&str>,
) -> String {
    let message = message.unwrap_or_else(|| default_error_message(provider, status));
    let body = wire::encode_error_body(provider, status, error_type, message);
    String::from_utf8_lossy(&body).into_owned()
}

/// The message `provider` usually sends with an error `status`.
#[must_use]
pub fn default_error_message(provider: ProviderKind, status: u16) -> &'static str {
    match provider {
        ProviderKind::Anthropic => match status {
            400 => "Invalid request",
            401 => "invalid x-api-key",
            403 => "Your API key does not have permission",
            404 => "model: not found",
            413 => "Request exceeds the maximum allowed size",
            429 => "Number of request tokens has exceeded your per-minute rate limit",
            529 => "Overloaded",
            _ => "Internal server error",
        },
        // Google's own words for each status (its `google.rpc` defaults and Gemini's).
        ProviderKind::Gemini => match status {
            400 => "Request contains an invalid argument.",
            401 => "Request had invalid authentication credentials.",
            403 => "The caller does not have permission",
            404 => {
                "models/gemini-unknown is not found for API version v1beta, or is not \
                    supported for generateContent."
            }
            429 => "Resource has been exhausted (e.g. check quota).",
            503 => "The model is overloaded. Please try again later.",
            504 => "Deadline expired before operation could complete.",
            _ => {
                "An internal error has occurred. Please retry or report in \
                  https://developers.generativeai.google/guide/troubleshooting"
            }
        },
        // Bedrock's own words for each status.
        ProviderKind::Bedrock => match status {
            400 => "Malformed input request, please reformat your input and try again.",
            401 | 403 => "The security token included in the request is invalid.",
            404 => "The provided model identifier is invalid.",
            408 => "Model has timed out in processing the request. Try your request again.",
            424 => "Model is not ready to serve inference requests.",
            429 => "Too many requests, please wait before trying again.",
            503 | 529 => "Bedrock is unable to process your request.",
            _ => "The server encountered an internal error while processing the request.",
        },
        // OpenAI's APIs, and a kind this version does not know.
        _ => match status {
            400 => "Invalid request",
            401 => "Incorrect API key provided",
            403 => "Country, region, or territory not supported",
            404 => "The model does not exist or you do not have access to it.",
            429 => "Rate limit reached for requests",
            503 => "The server is overloaded or not ready yet.",
            _ => "The server had an error while processing your request.",
        },
    }
}

/// The body (the JSON of the `data:` line) of a mid-stream error event:
/// [`rebound_core::wire::encode_stream_error_event`] without its SSE framing.
#[must_use]
pub fn stream_error_body(provider: ProviderKind, error_type: &str, message: &str) -> String {
    let event = wire::encode_stream_error_event(provider, error_type, message);
    let event = String::from_utf8_lossy(&event);
    event
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .unwrap_or_default()
        .to_owned()
}

/// Token counts in the scripted context overflow: (tokens sent, the model's limit).
#[must_use]
pub fn overflow_tokens(provider: ProviderKind) -> (u64, u64) {
    match provider {
        ProviderKind::Anthropic => (208_310, 200_000),
        ProviderKind::OpenAiResponses => (272_913, 272_000),
        ProviderKind::Gemini => (1_049_211, 1_048_576),
        ProviderKind::Bedrock => (200_931, 200_000),
        // OpenAI Chat, and a kind this version does not know: OpenAI-compatible is the
        // common dialect.
        _ => (130_412, 128_000),
    }
}

/// The provider's real context-overflow 400 body, for `tokens` over `limit`.
#[must_use]
pub fn overflow_body_for(provider: ProviderKind, tokens: u64, limit: u64) -> String {
    let message = wire::context_overflow_message(provider, tokens, limit);
    let error_type = match provider {
        ProviderKind::Anthropic => "invalid_request_error",
        ProviderKind::Gemini => "INVALID_ARGUMENT",
        ProviderKind::Bedrock => "ValidationException",
        // OpenAI's APIs, and a kind this version does not know.
        _ => "context_length_exceeded",
    };
    let body = wire::encode_error_body(provider, 400, Some(error_type), &message);
    String::from_utf8_lossy(&body).into_owned()
}

/// The provider's real context-overflow 400 body (the scripted `context_overflow` fault).
#[must_use]
pub fn overflow_body(provider: ProviderKind) -> String {
    let (tokens, limit) = overflow_tokens(provider);
    overflow_body_for(provider, tokens, limit)
}
