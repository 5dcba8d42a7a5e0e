//! Provider wire formats: Anthropic Messages, OpenAI Chat Completions and the OpenAI
//! Responses API.
//!
//! Everything here is bytes in, values out (or the reverse), with no I/O, so the HTTP
//! providers, the fake provider server, the simulator and fuzzers share one implementation:
//!
//! - requests: [`request_path`], [`request_body`] (refuses unanswered tool calls with a
//!   [`WireError`]) and, for the fake server (feature `server`), `parse_request`;
//! - responses: [`StreamDecoder`] (incremental SSE decoding + assembly into exactly one
//!   outcome) and [`parse_response`] for non-streaming JSON;
//! - failures: an error inside a 200 response (a mid-stream `error` event, a cut or
//!   malformed stream) comes out of the decoder as a classified [`ProviderFailure`]; an
//!   error status goes to [`classify_http`](crate::classify::classify_http), and an exchange
//!   that produced no response to
//!   [`classify_transport_error`](crate::classify::classify_transport_error);
//! - the other direction, what a provider would send, with feature `server` (for simulators,
//!   fake servers and fuzzers; a runner never needs it): `encode_stream`,
//!   `encode_response_json`, `encode_error_body`, `encode_stream_error_event`, and
//!   `parse_request` for the requests a provider receives; and, always,
//!   [`context_overflow_message`].
//!
//! A complete round trip through the Anthropic format (feature `server`):
//!
//! ```
//! # #[cfg(feature = "server")] {
//! use rebound_core::wire::{encode_stream, StreamDecoder};
//! use rebound_core::{AssistantResponse, Message, ProviderKind};
//!
//! let sent = AssistantResponse::end_turn(Message::assistant_text("Hello there!"));
//! let mut decoder = StreamDecoder::new(ProviderKind::Anthropic);
//! for chunk in encode_stream(ProviderKind::Anthropic, &sent, "claude-test", "msg_1") {
//!     decoder.feed(&chunk).unwrap();
//! }
//! assert!(decoder.is_complete());
//! // The message, and who answered: the stream's id and model.
//! assert_eq!(decoder.finish().unwrap(), sent.with_id("msg_1").with_model("claude-test"));
//! # }
//! ```
//!
//! ## Decisions worth knowing
//!
//! - Empty text blocks are dropped when a message is assembled and when a request is built;
//!   for Anthropic, which rejects them, whitespace-only text is left out of requests too
//!   (also inside tool results); thinking blocks without a signature are not sent to
//!   Anthropic. A conversation left with nothing to send is refused, never sent as
//!   `"messages": []`.
//! - Tool-call ids are sent in the form each provider accepts ([`request_body`]); the
//!   conversation keeps the ids the models minted.
//! - OpenAI Chat has no thinking blocks: they are left out of requests and encoded streams.
//!   Its assistant messages are one text part followed by tool calls, so several text blocks
//!   are joined without a separator. Reasoning text that compatible servers stream
//!   (`reasoning_content`, `reasoning`) is assembled into a thinking block without a
//!   signature, shown to the UI as thinking deltas, and never sent back (neither request
//!   builder sends unsigned thinking).
//! - OpenAI requests set `max_completion_tokens` (the current field; `max_tokens` is refused
//!   by reasoning models) and `stream_options.include_usage` when streaming;
//!   `parse_request` accepts either field.
//! - A tool call's arguments that fail to parse are [`InputProblemKind::Truncated`] when the
//!   output stopped at the token limit and the JSON ended early (or the block never closed),
//!   otherwise [`InputProblemKind::InvalidJson`]; valid JSON that is not an object is
//!   [`InputProblemKind::NotAnObject`]. Either way the call's `input` becomes `{}`.
//! - OpenAI Chat has no error flag on tool results: the result's text (for an error, the
//!   model-readable error text) is the `tool` message's content. `parse_request` reads a
//!   result whose text is in core's error words ([`tool_error_text`]) back as an error
//!   (Chat and Responses alike), so a request round-trips whole. Tool messages cannot carry
//!   images either: each image part is dropped and replaced by a one-line note in the text,
//!   so the model knows something was left out.
//! - An OpenAI stream that ends cleanly after its `finish_reason` but before `data: [DONE]`
//!   is accepted (some compatible servers never send `[DONE]`); one that ends earlier is a
//!   cut stream.
//! - Responses requests are stateless (`store: false`, `include:
//!   ["reasoning.encrypted_content"]`, no `previous_response_id`): the whole conversation
//!   is sent each time. Reasoning items arrive as [`ContentBlock::Reasoning`], kept verbatim
//!   and sent back unchanged, in place, to the Responses API; Anthropic and Chat requests
//!   leave them out, and Responses requests leave out thinking blocks (another provider's
//!   signatures mean nothing to OpenAI). An assistant message's text is one `message` item
//!   whose `content` is a string (consecutive text blocks joined, as for Chat): the
//!   `output_text` parts of OpenAI's description need a stored response's ids. Tool calls
//!   are `function_call` items whose
//!   `call_id` is the tool-use id (sent in the same form as for Chat); results are
//!   `function_call_output` items whose `output` is the result's text (an error's
//!   model-readable text, as for Chat), or text and image parts when the result has images.
//!   Function tools are sent with `strict: false` (the API's default is strict, which
//!   refuses ordinary JSON Schemas).
//! - Encrypted reasoning, signed thinking and redacted thinking (Anthropic's
//!   `redacted_thinking`, kept as [`ContentBlock::RedactedThinking`]) go only to the target
//!   that produced them: a block whose [`owner`](crate::ContentBlock::owner) is another
//!   identity than [`RequestParams::identity`] is left out of the request (the conversation
//!   keeps it); blocks of an unknown owner are sent (the machine decides where those go).
//! - With a thinking budget, an Anthropic request that answers tool calls goes without
//!   `thinking` when the assistant turn that made them does not start with its thinking
//!   (left out as another target's, or never there): the API refuses such a request with
//!   thinking on, and says to turn it off ([`RequestOptions`]).
//! - A Responses stream completes with `response.completed` (stop reason: tool use when it
//!   made calls, else end of turn) or `response.incomplete` (`max_output_tokens` → max
//!   tokens, `content_filter` → content filter, exactly as Chat's `length` and
//!   `content_filter`). Whole items (`response.output_item.done`, the terminal event's
//!   `output`) win over the deltas that preceded them. A failure inside the 200 stream —
//!   `response.failed` with its `error.code`, or an `error` event — is classified like the
//!   HTTP error with that code (`rate_limit_exceeded` → rate limited, `server_error` →
//!   server error, `context_length_exceeded` → overflow, `insufficient_quota` → quota, …).
//!   A stream that ends without a terminal event, `data: [DONE]` or not, is a cut stream.
//!
//! [`ContentBlock::Reasoning`]: crate::ContentBlock::Reasoning
//! [`ContentBlock::RedactedThinking`]: crate::ContentBlock::RedactedThinking
//!
//! [`tool_error_text`]: crate::tool_error_text
//! [`InputProblemKind::Truncated`]: crate::InputProblemKind::Truncated
//! [`InputProblemKind::InvalidJson`]: crate::InputProblemKind::InvalidJson
//! [`InputProblemKind::NotAnObject`]: crate::InputProblemKind::NotAnObject

pub mod eventstream;
pub mod sse;

mod anthropic;
mod assemble;
mod bedrock;
mod borrow;
mod gemini;
mod label;
mod openai;
mod options;
mod render;
mod responses;
mod scan;

use crate::conversation::{Conversation, PairingError, TargetIdentity};
use crate::failure::{ProviderFailure, ProviderKind, TransportFault};
use crate::response::AssistantResponse;
use crate::tool::ToolSpec;
use serde_json::Value;
use sse::{SseDecoder, SseError, SseEventRef, SseLimits};

pub use options::{
    OptionsError, ReasoningEffort, RequestOptions, ToolChoice, UnknownEffort, UnknownToolChoice,
};

/// The output token limit a request asks for when its driver names none (the HTTP provider's
/// default and the bindings' `request_body`): room for a long answer or a large tool call,
/// below every current model's output limit.
pub const DEFAULT_MAX_TOKENS: u32 = 8_192;

/// The tool-call ids a target takes, for the OpenAI wire formats (Chat Completions and
/// Responses); Anthropic's own rule applies to Anthropic whatever this says. The
/// conversation keeps the ids the models minted; requests carry ids of this form, the same
/// for the same conversation, never one twice in a request.
///
/// ```
/// use rebound_core::wire::{RequestParams, ToolIdForm};
///
/// let form = ToolIdForm::for_base_url("https://api.mistral.ai/v1");
/// assert_eq!(form, ToolIdForm::NineAlphanumeric);
/// let params = RequestParams::new("mistral-large-latest", 1024).with_tool_ids(form);
/// assert_eq!(params.tool_ids, ToolIdForm::NineAlphanumeric);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum ToolIdForm {
    /// OpenAI's: any characters, at most 40 (a longer or repeated id is sent as `rb_` and
    /// 32 hex digits).
    #[default]
    Standard,
    /// Exactly nine letters and digits, as Mistral's API and chat templates require.
    NineAlphanumeric,
}

impl ToolIdForm {
    /// The form the server at `base_url` is known to require: [`NineAlphanumeric`] for
    /// Mistral's API (`api.mistral.ai` and its subdomains), else [`Standard`].
    ///
    /// [`NineAlphanumeric`]: ToolIdForm::NineAlphanumeric
    /// [`Standard`]: ToolIdForm::Standard
    #[must_use]
    pub fn for_base_url(base_url: &str) -> Self {
        let rest = base_url
            .split_once("://")
            .map_or(base_url, |(_, rest)| rest);
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let host = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host)
            .split(':')
            .next()
            .unwrap_or("")
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if host == "mistral.ai" || host.ends_with(".mistral.ai") {
            ToolIdForm::NineAlphanumeric
        } else {
            ToolIdForm::Standard
        }
    }
}

/// What a request needs besides the conversation.
///
/// More parameters may come in a minor release (it is `#[non_exhaustive]`): build it with
/// [`new`](Self::new) and the `with_*` methods.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestParams<'a> {
    /// The provider's model id, e.g. `claude-sonnet-4-6` or `gpt-4o`.
    pub model: &'a str,
    /// The system prompt, if any.
    pub system: Option<&'a str>,
    /// The tools the model may call.
    pub tools: &'a [ToolSpec],
    /// The output token limit (`max_tokens` / `max_completion_tokens`).
    pub max_tokens: u32,
    /// Whether to ask for a server-sent event stream.
    pub stream: bool,
    /// Sampling, stop sequences, tool choice, reasoning, a user id and extra body keys;
    /// `None` sends none of them ([`RequestOptions`]).
    pub options: Option<&'a RequestOptions>,
    /// The tool-call ids the target takes (OpenAI wire formats).
    pub tool_ids: ToolIdForm,
    /// Who the request goes to ([`TargetSpec::identity`](crate::TargetSpec::identity)):
    /// encrypted reasoning and signed thinking that another target produced are left out
    /// ([`ContentBlock::may_go_to`](crate::ContentBlock::may_go_to)); those of an unknown
    /// owner are sent. `None`: a driver that does not know who it sends to, which sends
    /// no reasoning another target owns.
    pub identity: Option<&'a TargetIdentity>,
}

impl<'a> RequestParams<'a> {
    /// Parameters for `model` with an output limit of `max_tokens`: no system prompt, no
    /// tools, streamed.
    #[must_use]
    pub const fn new(model: &'a str, max_tokens: u32) -> Self {
        RequestParams {
            model,
            system: None,
            tools: &[],
            max_tokens,
            stream: true,
            options: None,
            tool_ids: ToolIdForm::Standard,
            identity: None,
        }
    }

    /// Sets [`system`](Self::system), the system prompt.
    #[must_use]
    pub fn with_system(mut self, system: &'a str) -> Self {
        self.system = Some(system);
        self
    }

    /// Sets [`tools`](Self::tools), the tools the model may call.
    #[must_use]
    pub fn with_tools(mut self, tools: &'a [ToolSpec]) -> Self {
        self.tools = tools;
        self
    }

    /// Sets [`stream`](Self::stream): whether to ask for a server-sent event stream.
    #[must_use]
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Sets [`options`](Self::options), the request options.
    #[must_use]
    pub fn with_options(mut self, options: &'a RequestOptions) -> Self {
        self.options = Some(options);
        self
    }

    /// Sets [`tool_ids`](Self::tool_ids), the tool-call ids the target takes.
    #[must_use]
    pub fn with_tool_ids(mut self, tool_ids: ToolIdForm) -> Self {
        self.tool_ids = tool_ids;
        self
    }

    /// Sets [`identity`](Self::identity), who the request goes to: reasoning another target
    /// owns is left out.
    ///
    /// ```
    /// use rebound_core::wire::{request_body, RequestParams};
    /// use rebound_core::{ContentBlock, Conversation, Message, ProviderKind, TargetIdentity};
    /// use serde_json::json;
    ///
    /// let first = TargetIdentity::new("openai_responses:first");
    /// let second = TargetIdentity::new("openai_responses:second");
    /// let conversation = Conversation::from(vec![
    ///     Message::user_text("hi"),
    ///     Message::assistant(vec![
    ///         ContentBlock::Reasoning {
    ///             item: json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA"}),
    ///             owner: Some(first.clone()),
    ///         },
    ///         ContentBlock::text("hello"),
    ///     ]),
    ///     Message::user_text("and?"),
    /// ]);
    /// let to = |id| RequestParams::new("gpt-5", 1024).with_identity(id);
    /// let body = request_body(ProviderKind::OpenAiResponses, &conversation, &to(&first)).unwrap();
    /// assert_eq!(body["input"][1]["type"], "reasoning");
    /// let body = request_body(ProviderKind::OpenAiResponses, &conversation, &to(&second)).unwrap();
    /// assert_eq!(body["input"][1]["type"], "message"); // the first one's reasoning stays home
    /// ```
    #[must_use]
    pub fn with_identity(mut self, identity: &'a TargetIdentity) -> Self {
        self.identity = Some(identity);
        self
    }
}

/// A request body decoded back into rebound's terms (what the fake provider server received).
#[cfg(feature = "server")]
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    /// The requested model id.
    pub model: String,
    /// The system prompt, if any (several system parts are joined with newlines).
    pub system: Option<String>,
    /// The tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// The output token limit, when the request set one.
    pub max_tokens: Option<u32>,
    /// Whether a stream was requested.
    pub stream: bool,
    /// The messages, in rebound's conversation model.
    pub conversation: Conversation,
}

/// A request body that could not be read, with what was wrong.
#[cfg(feature = "server")]
pub(crate) fn invalid_request(detail: &str) -> WireError {
    WireError::InvalidRequest {
        detail: detail.to_owned(),
    }
}

/// One tool declaration of a request body, in the shape every wire format shares: `name`
/// (required; without it the error says `missing_name`), `description`, and the input schema
/// under `schema_key` (`input_schema` for Anthropic, `parameters` for OpenAI's).
#[cfg(feature = "server")]
pub(crate) fn parse_tool_spec(
    tool: &Value,
    schema_key: &str,
    missing_name: &str,
) -> Result<ToolSpec, WireError> {
    Ok(ToolSpec {
        name: tool
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_request(missing_name))?
            .to_owned(),
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        input_schema: tool.get(schema_key).cloned().unwrap_or(Value::Null),
    })
}

/// Why a request body could not be built or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The conversation breaks tool-call pairing; the provider would answer 400.
    #[error("conversation cannot be sent: {0}")]
    Pairing(#[from] PairingError),
    /// There is nothing to send: no messages, or none with content the provider accepts.
    #[error("conversation cannot be sent: it has no message with content")]
    EmptyConversation,
    /// A received body is not valid JSON.
    #[error("request body is not valid JSON: {detail}")]
    InvalidJson {
        /// The parser's message.
        detail: String,
    },
    /// A received body is JSON but not a valid request of this provider.
    #[error("invalid request body: {detail}")]
    InvalidRequest {
        /// What is wrong, e.g. `missing "model"`.
        detail: String,
    },
    /// The request options are refused for this provider, or name a tool not offered.
    #[error("request cannot be sent: {0}")]
    Options(#[from] OptionsError),
}

/// An incremental piece of a streamed response, for a UI to show as it arrives.
///
/// `index` identifies the content block the piece belongs to: Anthropic's block index; for
/// OpenAI, 0 is reasoning text (from compatible servers), 1 the answer text and tool call `i`
/// is `i + 2`; for Responses, content part `c` of output item `o` is `o * 64 + c` (a tool
/// call or reasoning item is its item's part 0).
///
/// `S` is the type of its text: `String` for an owned delta, as [`StreamDecoder::feed`]
/// returns them, and `&str` for one lent by [`StreamDecoder::feed_with`], which borrows the
/// decoder's input and costs no allocation.
///
/// ```
/// use rebound_core::wire::StreamDelta;
///
/// let lent = StreamDelta::Text { index: 1, text: "Hi" };
/// let owned: StreamDelta = lent.into_owned();
/// assert_eq!(owned.as_lent(), lent);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamDelta<S = String> {
    /// More answer text.
    Text {
        /// The block.
        index: u64,
        /// The new text.
        text: S,
    },
    /// More extended-thinking text.
    Thinking {
        /// The block.
        index: u64,
        /// The new thinking text.
        thinking: S,
    },
    /// The model started a tool call.
    ToolCallStart {
        /// The block.
        index: u64,
        /// The call id.
        id: S,
        /// The tool's name.
        name: S,
    },
    /// A fragment of a tool call's JSON arguments (not valid JSON on its own).
    ToolInputJson {
        /// The block.
        index: u64,
        /// The fragment.
        partial_json: S,
    },
}

impl<S: AsRef<str>> StreamDelta<S> {
    /// Whether this piece is progress on the stream: content, as opposed to an empty
    /// delta. A kind of piece this version does not know still counts (it shows the model
    /// is producing). See [`StreamWatch`](crate::run::StreamWatch).
    #[must_use]
    pub fn is_progress(&self) -> bool {
        match self {
            StreamDelta::Text { text, .. } => !text.as_ref().is_empty(),
            StreamDelta::Thinking { thinking, .. } => !thinking.as_ref().is_empty(),
            StreamDelta::ToolCallStart { .. } => true,
            StreamDelta::ToolInputJson { partial_json, .. } => !partial_json.as_ref().is_empty(),
        }
    }
}

impl StreamDelta<&str> {
    /// The delta with its text copied into `String`s.
    #[must_use]
    pub fn into_owned(self) -> StreamDelta {
        match self {
            StreamDelta::Text { index, text } => StreamDelta::Text {
                index,
                text: text.to_owned(),
            },
            StreamDelta::Thinking { index, thinking } => StreamDelta::Thinking {
                index,
                thinking: thinking.to_owned(),
            },
            StreamDelta::ToolCallStart { index, id, name } => StreamDelta::ToolCallStart {
                index,
                id: id.to_owned(),
                name: name.to_owned(),
            },
            StreamDelta::ToolInputJson {
                index,
                partial_json,
            } => StreamDelta::ToolInputJson {
                index,
                partial_json: partial_json.to_owned(),
            },
        }
    }
}

impl StreamDelta {
    /// The delta lent, its text borrowed.
    #[must_use]
    pub fn as_lent(&self) -> StreamDelta<&str> {
        match self {
            StreamDelta::Text { index, text } => StreamDelta::Text {
                index: *index,
                text,
            },
            StreamDelta::Thinking { index, thinking } => StreamDelta::Thinking {
                index: *index,
                thinking,
            },
            StreamDelta::ToolCallStart { index, id, name } => StreamDelta::ToolCallStart {
                index: *index,
                id,
                name,
            },
            StreamDelta::ToolInputJson {
                index,
                partial_json,
            } => StreamDelta::ToolInputJson {
                index: *index,
                partial_json,
            },
        }
    }
}

/// Where the decoders put the deltas they lend.
pub(crate) type Deltas<'d> = dyn FnMut(StreamDelta<&str>) + 'd;

/// Memory bounds for decoding one streamed response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamLimits {
    /// SSE line and event limits.
    pub sse: SseLimits,
    /// The largest assembled message accepted, in bytes: text, thinking, tool ids, names and
    /// arguments, plus 64 bytes per content block.
    pub max_message_bytes: usize,
}

impl Default for StreamLimits {
    /// SSE defaults and 64 MiB per message.
    fn default() -> Self {
        StreamLimits {
            sse: SseLimits::default(),
            max_message_bytes: 64 << 20,
        }
    }
}

impl StreamLimits {
    /// Sets [`sse`](Self::sse), the SSE line and event limits.
    #[must_use]
    pub fn with_sse(mut self, sse: SseLimits) -> Self {
        self.sse = sse;
        self
    }

    /// Sets [`max_message_bytes`](Self::max_message_bytes), the largest assembled message.
    #[must_use]
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }
}

impl StreamLimits {
    /// The defaults for `provider`: [`StreamLimits::default`], except that a Responses
    /// stream's line and event limits are its message limit, because its last event
    /// (`response.completed`, one `data:` line) repeats the whole message, which may be
    /// longer than the 1 MiB line limit that is ample for the other formats' deltas; and so
    /// are a Gemini stream's, whose events carry each function call whole.
    ///
    /// ```
    /// use rebound_core::{wire::StreamLimits, ProviderKind};
    /// let limits = StreamLimits::for_provider(ProviderKind::OpenAiResponses);
    /// assert_eq!(limits.sse.max_line_bytes, limits.max_message_bytes);
    /// assert_eq!(StreamLimits::for_provider(ProviderKind::OpenAi), StreamLimits::default());
    /// ```
    #[must_use]
    pub fn for_provider(provider: ProviderKind) -> Self {
        let limits = StreamLimits::default();
        match provider {
            ProviderKind::Anthropic | ProviderKind::OpenAi => limits,
            // Gemini sends each function call whole, arguments and all, in one event; Bedrock's
            // event-stream framing has its own limits (16 MiB a message), the SSE ones unused.
            ProviderKind::OpenAiResponses | ProviderKind::Gemini | ProviderKind::Bedrock => {
                StreamLimits {
                    sse: SseLimits {
                        max_line_bytes: limits.max_message_bytes,
                        max_event_bytes: limits.max_message_bytes,
                    },
                    ..limits
                }
            }
        }
    }
}

/// The URL path (and query) of a request for `model`, streamed or not, to append to the
/// provider's base URL.
///
/// OpenAI base URLs include `/v1` (as in the official SDKs); Anthropic's do not; Gemini's
/// include the API version (`https://generativelanguage.googleapis.com/v1beta`) and, on
/// Vertex AI, the project, location and publisher (`…/v1/projects/P/locations/L/publishers/google`).
/// Only Gemini names the model and the streaming in the path; the others ignore both here
/// (they are in the body).
///
/// ```
/// use rebound_core::{wire::request_path, ProviderKind};
/// assert_eq!(request_path(ProviderKind::Anthropic, "claude-sonnet-4-6", true), "/v1/messages");
/// assert_eq!(request_path(ProviderKind::OpenAi, "gpt-4o", true), "/chat/completions");
/// assert_eq!(request_path(ProviderKind::OpenAiResponses, "gpt-5", true), "/responses");
/// assert_eq!(
///     request_path(ProviderKind::Gemini, "gemini-2.5-flash", true),
///     "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
/// );
/// assert_eq!(
///     request_path(ProviderKind::Gemini, "gemini-2.5-flash", false),
///     "/models/gemini-2.5-flash:generateContent"
/// );
/// ```
#[must_use]
pub fn request_path(provider: ProviderKind, model: &str, stream: bool) -> String {
    match provider {
        ProviderKind::Anthropic => "/v1/messages".to_owned(),
        ProviderKind::OpenAi => "/chat/completions".to_owned(),
        ProviderKind::OpenAiResponses => "/responses".to_owned(),
        ProviderKind::Gemini => gemini::path(model, stream),
        ProviderKind::Bedrock => bedrock::request::path(model, stream),
    }
}

/// The model and whether a stream was asked for, read from a Bedrock request's path
/// (`/model/{modelId}/converse-stream` or `…/converse`, the id percent-decoded): what a
/// server needs that the body does not say.
///
/// ```
/// use rebound_core::wire::bedrock_request_target;
/// assert_eq!(
///     bedrock_request_target("/model/anthropic.claude-sonnet-4-6-v1%3A0/converse-stream"),
///     Some(("anthropic.claude-sonnet-4-6-v1:0".to_owned(), true))
/// );
/// assert_eq!(bedrock_request_target("/v1/messages"), None);
/// ```
#[cfg(feature = "server")]
#[must_use]
pub fn bedrock_request_target(path: &str) -> Option<(String, bool)> {
    bedrock::request::parse_path(path)
}

/// The model and whether a stream was asked for, read from a Gemini request's path
/// (`…/models/{model}:streamGenerateContent?alt=sse` or `…:generateContent`): what a server
/// needs that the body does not say. `None` for another path (or a stream without
/// `alt=sse`, which asks for a JSON array rebound does not serve).
///
/// ```
/// use rebound_core::wire::gemini_request_target;
/// assert_eq!(
///     gemini_request_target("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"),
///     Some(("gemini-2.5-flash".to_owned(), true))
/// );
/// assert_eq!(gemini_request_target("/v1/messages"), None);
/// ```
#[cfg(feature = "server")]
#[must_use]
pub fn gemini_request_target(path: &str) -> Option<(String, bool)> {
    gemini::parse_path(path)
}

/// Builds the JSON request body for `provider`.
///
/// Refuses a conversation that is empty (or holds nothing the provider accepts, e.g. only
/// blank text for Anthropic) or whose tool calls are not each answered, first and in order,
/// by a result in the very next message (including open calls at the end); and request
/// options the provider's API would refuse ([`RequestOptions::check`], and a tool choice
/// naming a tool that is not offered), as [`WireError::Options`].
///
/// Tool-call ids are sent in the form each provider accepts (Anthropic: `^[a-zA-Z0-9_-]+$`,
/// unique in the request; OpenAI: at most 40 characters), the same for a call and its
/// result; ids already in that form are sent unchanged, and the conversation always keeps
/// the original ids:
///
/// ```
/// use rebound_core::wire::{request_body, RequestParams};
/// use rebound_core::{ContentBlock, Conversation, Message, ProviderKind, Role, ToolResultPart};
///
/// // A call minted by a Kimi-style OpenAI-compatible server, and its result.
/// let conversation = Conversation::from(vec![
///     Message::user_text("read a"),
///     Message { role: Role::Assistant, content: vec![
///         ContentBlock::tool_use("functions.read:0", "read", serde_json::json!({"path": "a"})),
///     ] },
///     Message { role: Role::User, content: vec![
///         ContentBlock::tool_result("functions.read:0", vec![ToolResultPart::text("ok")], false),
///     ] },
/// ]);
/// let params = RequestParams::new("claude-sonnet-4-6", 1024);
/// let body = request_body(ProviderKind::Anthropic, &conversation, &params).unwrap();
/// assert_eq!(body["messages"][1]["content"][0]["id"], "rb_functions_2eread_3a0");
/// assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "rb_functions_2eread_3a0");
/// let body = request_body(ProviderKind::OpenAi, &conversation, &params).unwrap();
/// assert_eq!(body["messages"][1]["tool_calls"][0]["id"], "functions.read:0");
/// ```
pub fn request_body(
    provider: ProviderKind,
    conversation: &Conversation,
    params: &RequestParams<'_>,
) -> Result<Value, WireError> {
    if conversation.is_empty() {
        return Err(WireError::EmptyConversation);
    }
    conversation.check_tool_pairing(false)?;
    let mut body = match provider {
        ProviderKind::Anthropic => anthropic::request::body(conversation, params),
        ProviderKind::OpenAi => openai::request::body(conversation, params),
        ProviderKind::OpenAiResponses => responses::request::body(conversation, params),
        ProviderKind::Gemini => gemini::request::body(conversation, params),
        ProviderKind::Bedrock => bedrock::request::body(conversation, params),
    }?;
    if let (Some(options), Value::Object(map)) = (params.options, &mut body) {
        options::apply(provider, options, params.tools, params.max_tokens, map)?;
        if provider == ProviderKind::Anthropic {
            anthropic::request::fit_thinking(map);
        }
    }
    Ok(body)
}

/// Whether `provider`'s requests carry a tool result's error flag (`is_error`): Anthropic's
/// do, and Gemini's (a failed call's `functionResponse` is `{"error": …}`, a good one's
/// `{"result": …}`); OpenAI Chat's `tool` messages and Responses' `function_call_output`
/// items carry only the text, so a model behind them cannot tell an error result from
/// another.
#[must_use]
pub fn carries_tool_error_flag(provider: ProviderKind) -> bool {
    match provider {
        ProviderKind::Anthropic | ProviderKind::Gemini | ProviderKind::Bedrock => true,
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => false,
    }
}

/// Decodes a request body of `provider` back into a [`ParsedRequest`].
#[cfg(feature = "server")]
pub fn parse_request(provider: ProviderKind, body: &[u8]) -> Result<ParsedRequest, WireError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| WireError::InvalidJson {
        detail: e.to_string(),
    })?;
    match provider {
        ProviderKind::Anthropic => anthropic::request::parse(&value),
        ProviderKind::OpenAi => openai::request::parse(&value),
        ProviderKind::OpenAiResponses => responses::request::parse(&value),
        ProviderKind::Gemini => gemini::request::parse(&value),
        ProviderKind::Bedrock => bedrock::request::parse(&value),
    }
}

/// Parses a non-streaming JSON response body (HTTP 200) into a response or a failure.
///
/// An error object in the body is classified like a mid-stream error; a body that is not
/// JSON, or not a response, is [`TransportFault::MalformedStream`]; a response with no
/// content is [`TransportFault::EmptyMessage`].
pub fn parse_response(
    provider: ProviderKind,
    body: &[u8],
) -> Result<AssistantResponse, ProviderFailure> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| malformed(&format!("response body is not JSON: {e}")))?;
    match provider {
        ProviderKind::Anthropic => anthropic::stream::parse_response(&value, body),
        ProviderKind::OpenAi => openai::stream::parse_response(&value, body),
        ProviderKind::OpenAiResponses => responses::stream::parse_response(&value, body),
        ProviderKind::Gemini => gemini::stream::parse_response(&value, body),
        ProviderKind::Bedrock => bedrock::stream::parse_response(&value, body),
    }
}

/// Renders `response` as the server-sent event stream `provider` would send, one byte chunk
/// per event, so a fault injector can cut after N events or bytes.
///
/// Text and tool arguments are split into several deltas, as real streams do. A tool call
/// listed in `response.input_problems` is sent with the problem's raw text as its arguments,
/// so decoding reproduces the problem. OpenAI streams leave thinking blocks out; only
/// Responses streams carry reasoning items.
#[cfg(feature = "server")]
#[must_use]
pub fn encode_stream(
    provider: ProviderKind,
    response: &AssistantResponse,
    model: &str,
    message_id: &str,
) -> Vec<Vec<u8>> {
    match provider {
        ProviderKind::Anthropic => anthropic::encode::stream(response, model, message_id),
        ProviderKind::OpenAi => openai::encode::stream(response, model, message_id),
        ProviderKind::OpenAiResponses => responses::encode::stream(response, model, message_id),
        ProviderKind::Gemini => gemini::encode::stream(response, model, message_id),
        ProviderKind::Bedrock => bedrock::encode::stream(response, model, message_id),
    }
}

/// Renders `response` as the non-streaming JSON body `provider` would send.
#[cfg(feature = "server")]
#[must_use]
pub fn encode_response_json(
    provider: ProviderKind,
    response: &AssistantResponse,
    model: &str,
    message_id: &str,
) -> Value {
    match provider {
        ProviderKind::Anthropic => anthropic::encode::response_json(response, model, message_id),
        ProviderKind::OpenAi => openai::encode::response_json(response, model, message_id),
        ProviderKind::OpenAiResponses => {
            responses::encode::response_json(response, model, message_id)
        }
        ProviderKind::Gemini => gemini::encode::response_json(response, model, message_id),
        ProviderKind::Bedrock => bedrock::encode::response_json(response, model, message_id),
    }
}

/// A provider-correct error body for an HTTP `status`.
///
/// `error_type` is the provider's error type (Anthropic `overloaded_error`, OpenAI
/// `insufficient_quota`, …; for OpenAI a known error *code* such as
/// `context_length_exceeded` also works and fills `code`; Gemini's status name such as
/// `RESOURCE_EXHAUSTED`); `None` picks the type the provider uses for that status. The
/// Responses API sends Chat's error bodies.
///
/// ```
/// use rebound_core::{wire::encode_error_body, ProviderKind};
/// let body = encode_error_body(ProviderKind::Anthropic, 529, None, "Overloaded");
/// assert_eq!(
///     String::from_utf8(body).unwrap(),
///     r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
/// );
/// ```
#[cfg(feature = "server")]
#[must_use]
pub fn encode_error_body(
    provider: ProviderKind,
    status: u16,
    error_type: Option<&str>,
    message: &str,
) -> Vec<u8> {
    match provider {
        ProviderKind::Anthropic => anthropic::encode::error_body(status, error_type, message),
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => {
            openai::encode::error_body(status, error_type, message)
        }
        ProviderKind::Gemini => gemini::encode::error_body(status, error_type, message),
        ProviderKind::Bedrock => bedrock::encode::error_body(status, error_type, message),
    }
}

/// The headers an error response of `provider` carries besides its body
/// ([`encode_error_body`]): Bedrock names the error's type in `x-amzn-errortype`
/// (`ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/`), not in its
/// body; the other providers need none.
#[cfg(feature = "server")]
#[must_use]
pub fn encode_error_headers(
    provider: ProviderKind,
    status: u16,
    error_type: Option<&str>,
) -> Vec<(&'static str, String)> {
    match provider {
        ProviderKind::Bedrock => vec![(
            "x-amzn-errortype",
            bedrock::encode::error_type_header(status, error_type),
        )],
        _ => Vec::new(),
    }
}

/// The content type of `provider`'s streamed responses: `text/event-stream`, or for
/// Bedrock AWS's `application/vnd.amazon.eventstream`.
#[must_use]
pub fn stream_content_type(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Bedrock => "application/vnd.amazon.eventstream",
        _ => "text/event-stream",
    }
}

/// The server-sent event a provider sends when a stream fails after it started (Anthropic
/// `event: error`, OpenAI a `data:` line holding an `error` object, Responses a
/// `response.failed` event whose response's `error.code` is `error_type`, Gemini a chunk
/// holding an `error` object whose `status` is `error_type`).
#[cfg(feature = "server")]
#[must_use]
pub fn encode_stream_error_event(
    provider: ProviderKind,
    error_type: &str,
    message: &str,
) -> Vec<u8> {
    match provider {
        ProviderKind::Anthropic => anthropic::encode::stream_error_event(error_type, message),
        ProviderKind::OpenAi => openai::encode::stream_error_event(error_type, message),
        ProviderKind::OpenAiResponses => responses::encode::stream_error_event(error_type, message),
        ProviderKind::Gemini => gemini::encode::stream_error_event(error_type, message),
        ProviderKind::Bedrock => bedrock::encode::stream_error_event(error_type, message),
    }
}

/// How a client reads a tool call's streamed arguments `raw`: `None` when they are a JSON
/// object (or empty), else the problem and the parser's detail, as every decoder reports
/// it in [`AssistantResponse::input_problems`]: [`InputProblemKind::Truncated`] when the
/// output stopped at the token limit (`output_stopped`) and the JSON ended early or its block
/// never closed (`closed` false), [`InputProblemKind::InvalidJson`] for other parse errors,
/// [`InputProblemKind::NotAnObject`] for valid JSON of another type.
///
/// [`InputProblemKind::Truncated`]: crate::InputProblemKind::Truncated
/// [`InputProblemKind::InvalidJson`]: crate::InputProblemKind::InvalidJson
/// [`InputProblemKind::NotAnObject`]: crate::InputProblemKind::NotAnObject
#[must_use]
pub fn tool_input_problem(
    raw: &str,
    output_stopped: bool,
    closed: bool,
) -> Option<(crate::InputProblemKind, String)> {
    assemble::tool_input(raw, None, output_stopped, closed).err()
}

/// The provider's own wording for a prompt that does not fit the context window.
///
/// ```
/// use rebound_core::{wire::context_overflow_message, ProviderKind};
/// assert_eq!(
///     context_overflow_message(ProviderKind::Anthropic, 205_351, 200_000),
///     "prompt is too long: 205351 tokens > 200000 maximum"
/// );
/// ```
#[must_use]
pub fn context_overflow_message(provider: ProviderKind, tokens: u64, limit: u64) -> String {
    match provider {
        ProviderKind::Anthropic => format!("prompt is too long: {tokens} tokens > {limit} maximum"),
        ProviderKind::OpenAi => format!(
            "This model's maximum context length is {limit} tokens. However, your messages \
             resulted in {tokens} tokens. Please reduce the length of the messages."
        ),
        // The Responses API does not count: its code `context_length_exceeded` carries this.
        ProviderKind::OpenAiResponses => "Your input exceeds the context window of this model. \
                                          Please adjust your input and try again."
            .to_owned(),
        ProviderKind::Gemini => format!(
            "The input token count ({tokens}) exceeds the maximum number of tokens allowed \
             ({limit})."
        ),
        // Bedrock's ValidationException does not count either.
        ProviderKind::Bedrock => "Input is too long for requested model.".to_owned(),
    }
}

/// Decodes one provider's streamed response: SSE bytes (for Bedrock, AWS event-stream
/// frames) in, UI deltas out as they arrive, and exactly one outcome at the end.
///
/// Feed it the response body in whatever chunks the network delivers; then call
/// [`finish`](StreamDecoder::finish) when the body ends (or as soon as
/// [`is_complete`](StreamDecoder::is_complete) says the terminal event arrived). A failure —
/// an error event, invalid JSON, a limit — is returned by the `feed` that found it and again
/// by every later call, and `finish` returns it as the outcome.
///
/// ```
/// use rebound_core::wire::{StreamDecoder, StreamDelta};
/// use rebound_core::{FailureKind, ProviderKind};
///
/// let mut d = StreamDecoder::new(ProviderKind::OpenAi);
/// let deltas = d
///     .feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n")
///     .unwrap();
/// assert_eq!(deltas, [StreamDelta::Text { index: 1, text: "Hi".into() }]);
/// // The connection drops here: no finish_reason, no [DONE].
/// let failure = d.finish().unwrap_err();
/// assert_eq!(failure.kind, FailureKind::StreamMalformed);
/// ```
#[derive(Debug)]
pub struct StreamDecoder {
    sse: SseDecoder,
    state: ProviderState,
    failure: Option<ProviderFailure>,
    complete: bool,
}

#[derive(Debug)]
enum ProviderState {
    Anthropic(anthropic::stream::StreamState),
    OpenAi(openai::stream::StreamState),
    Responses(responses::stream::StreamState),
    Gemini(gemini::stream::StreamState),
    /// Not SSE: AWS event-stream framing and assembly together.
    Bedrock(Box<bedrock::stream::Decoder>),
}

impl ProviderState {
    fn on_event(
        &mut self,
        event: &SseEventRef<'_>,
        deltas: &mut Deltas<'_>,
    ) -> Result<bool, ProviderFailure> {
        match self {
            ProviderState::Anthropic(s) => s.on_event(event, deltas),
            ProviderState::OpenAi(s) => s.on_event(event, deltas),
            ProviderState::Responses(s) => s.on_event(event, deltas),
            ProviderState::Gemini(s) => s.on_event(event, deltas),
            // Fed its bytes directly (`StreamDecoder::feed_with`), never SSE events.
            ProviderState::Bedrock(_) => Err(malformed("an SSE event in an event stream")),
        }
    }
}

impl StreamDecoder {
    /// A decoder for `provider` with [`StreamLimits::for_provider`].
    #[must_use]
    pub fn new(provider: ProviderKind) -> Self {
        Self::with_limits(provider, StreamLimits::for_provider(provider))
    }

    /// A decoder for `provider` with the given limits.
    #[must_use]
    pub fn with_limits(provider: ProviderKind, limits: StreamLimits) -> Self {
        let state = match provider {
            ProviderKind::Anthropic => ProviderState::Anthropic(
                anthropic::stream::StreamState::new(limits.max_message_bytes),
            ),
            ProviderKind::OpenAi => {
                ProviderState::OpenAi(openai::stream::StreamState::new(limits.max_message_bytes))
            }
            ProviderKind::OpenAiResponses => ProviderState::Responses(
                responses::stream::StreamState::new(limits.max_message_bytes),
            ),
            ProviderKind::Gemini => {
                ProviderState::Gemini(gemini::stream::StreamState::new(limits.max_message_bytes))
            }
            ProviderKind::Bedrock => ProviderState::Bedrock(Box::new(
                bedrock::stream::Decoder::new(limits.max_message_bytes),
            )),
        };
        StreamDecoder {
            sse: SseDecoder::with_limits(limits.sse),
            state,
            failure: None,
            complete: false,
        }
    }

    /// Feeds the next bytes of the body; returns the deltas they completed.
    ///
    /// Bytes after the terminal event are ignored.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<StreamDelta>, ProviderFailure> {
        let mut deltas = Vec::new();
        self.feed_into(bytes, &mut deltas)?;
        Ok(deltas)
    }

    /// Like [`feed`](StreamDecoder::feed), appending the deltas to `deltas` (no allocation
    /// per call).
    pub fn feed_into(
        &mut self,
        bytes: &[u8],
        deltas: &mut Vec<StreamDelta>,
    ) -> Result<(), ProviderFailure> {
        self.feed_with(bytes, |delta| deltas.push(delta.into_owned()))
    }

    /// Like [`feed`](StreamDecoder::feed), lending each delta to `on_delta` as it is decoded:
    /// its text borrows the decoder's input or buffers, so a delta costs no allocation.
    ///
    /// A chunk that fails after some of its deltas has lent them already; the failure is
    /// returned after them.
    ///
    /// ```
    /// use rebound_core::wire::{StreamDecoder, StreamDelta};
    /// use rebound_core::ProviderKind;
    ///
    /// let mut d = StreamDecoder::new(ProviderKind::OpenAi);
    /// let mut shown = String::new();
    /// let chunk = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    /// d.feed_with(chunk, |delta| {
    ///     if let StreamDelta::Text { text, .. } = delta {
    ///         shown.push_str(text);
    ///     }
    /// })
    /// .unwrap();
    /// assert_eq!(shown, "Hi");
    /// ```
    pub fn feed_with(
        &mut self,
        bytes: &[u8],
        mut on_delta: impl FnMut(StreamDelta<&str>),
    ) -> Result<(), ProviderFailure> {
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        if self.complete {
            return Ok(());
        }
        if let ProviderState::Bedrock(decoder) = &mut self.state {
            let fed = decoder.feed_with(bytes, on_delta);
            self.complete = decoder.is_complete();
            if let Err(f) = &fed {
                self.failure = Some(f.clone());
            }
            return fed;
        }
        let state = &mut self.state;
        let complete = &mut self.complete;
        let result = self.sse.feed_with(bytes, |event| {
            if state.on_event(event, &mut on_delta).map_err(Halt::Failed)? {
                *complete = true;
                // Stop decoding here: what follows the terminal event in the same chunk is
                // ignored, exactly as it is when it arrives in a later chunk (a limit broken
                // by trailing bytes must not fail a complete message).
                return Err(Halt::Complete);
            }
            Ok(())
        });
        match result {
            Ok(()) | Err(Halt::Complete) => Ok(()),
            Err(Halt::Failed(f)) => {
                self.failure = Some(f.clone());
                Err(f)
            }
        }
    }

    /// Whether the terminal event (`message_stop`, `data: [DONE]`, `response.completed` or
    /// `response.incomplete`, a Gemini chunk naming a finish reason, Bedrock's `metadata`
    /// after `messageStop`) has arrived.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.complete && self.failure.is_none()
    }

    /// The failure found so far, if any.
    #[must_use]
    pub fn failure(&self) -> Option<&ProviderFailure> {
        self.failure.as_ref()
    }

    /// Ends the body and returns the one outcome: the assembled response, or the failure.
    ///
    /// A body that ended before its terminal event is [`TransportFault::StreamCut`].
    pub fn finish(mut self) -> Result<AssistantResponse, ProviderFailure> {
        if let Some(f) = self.failure {
            return Err(f);
        }
        if let ProviderState::Bedrock(decoder) = self.state {
            return decoder.finish();
        }
        if !self.complete {
            // The deltas of an event completed by the end of the body are not shown: the body
            // has ended.
            let mut unshown = |_: StreamDelta<&str>| {};
            match self.sse.finish() {
                Err(e) => return Err(e.into()),
                Ok(Some(last)) => match self.state.on_event(&last.as_event_ref(), &mut unshown) {
                    Ok(terminal) => self.complete = terminal,
                    // An event cut mid-line fails to parse: that is a cut, not garbage.
                    Err(f) if f.transport == Some(TransportFault::MalformedStream) => {
                        return Err(ProviderFailure::transport(
                            TransportFault::StreamCut,
                            Some("the body ended inside an event"),
                        ))
                    }
                    Err(f) => return Err(f),
                },
                Ok(None) => {}
            }
        }
        match self.state {
            ProviderState::Anthropic(s) => s.finish(self.complete),
            ProviderState::OpenAi(s) => s.finish(self.complete),
            ProviderState::Responses(s) => s.finish(self.complete),
            ProviderState::Gemini(s) => s.finish(self.complete),
            ProviderState::Bedrock(decoder) => decoder.finish(),
        }
    }
}

/// Why [`StreamDecoder::feed_into`] stopped decoding a chunk early.
enum Halt {
    /// The terminal event arrived; the rest of the chunk is ignored.
    Complete,
    /// The stream failed.
    Failed(ProviderFailure),
}

impl From<SseError> for Halt {
    fn from(e: SseError) -> Self {
        Halt::Failed(e.into())
    }
}

/// A stream that broke an SSE limit is a malformed stream (retryable).
impl From<SseError> for ProviderFailure {
    fn from(e: SseError) -> Self {
        ProviderFailure::transport(TransportFault::MalformedStream, Some(&e.to_string()))
    }
}

pub(crate) fn malformed(detail: &str) -> ProviderFailure {
    ProviderFailure::transport(TransportFault::MalformedStream, Some(detail))
}

pub(crate) fn stream_cut(detail: &str) -> ProviderFailure {
    ProviderFailure::transport(TransportFault::StreamCut, Some(detail))
}

// Most of these round-trip through the encoders (feature `server`, which the workspace's
// `cargo test` turns on through rebound-sim).
#[cfg(all(test, feature = "server"))]
mod tests;
