//! A fault-injecting fake provider server that speaks the real Anthropic Messages, OpenAI
//! Chat Completions, OpenAI Responses and Gemini wire formats, driven by a [`Scenario`] — the same file, walked by the same
//! [`ScriptCursor`](crate::scenario::ScriptCursor), that the simulator plays.
//!
//! Start it on loopback, point any client at it (the rebound runner, the official SDKs, your
//! own agent), and read back what it received:
//!
//! ```
//! use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome};
//! use rebound_sim::Scenario;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let scenario = Scenario::builtin("blip").expect("a built-in");
//! let server = FakeServer::start(FakeServerConfig::new(scenario, 7)).await?;
//! let url = format!("{}/v1/messages", server.base_url());
//! let body = r#"{"model":"claude-test","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
//! // A raw HTTP/1.1 request; any client works.
//! let mut s = tokio::net::TcpStream::connect(server.addr()).await?;
//! let req = format!(
//!     "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\n\
//!      content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
//!     body.len()
//! );
//! tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes()).await?;
//! let mut answer = String::new();
//! tokio::io::AsyncReadExt::read_to_string(&mut s, &mut answer).await?;
//! assert!(answer.starts_with("HTTP/1.1 529"), "{answer}");
//! let log = server.requests();
//! assert_eq!(log[0].path, "/v1/messages");
//! assert!(matches!(log[0].outcome, Outcome::Fault { .. }));
//! # let _ = url;
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! # Endpoints
//!
//! - `POST /v1/messages` — Anthropic. Needs an API key (`x-api-key`, or `Authorization:
//!   Bearer` as recent SDKs send) and the `anthropic-version` header; without them it
//!   answers the API's real 401 / 400. Base URL for clients: [`FakeServer::base_url`].
//! - `POST /v1/chat/completions` (and `/chat/completions`) — OpenAI. Needs `Authorization:
//!   Bearer`. Base URL for clients: [`FakeServer::openai_base_url`].
//! - `POST /v1/responses` (and `/responses`) — the OpenAI Responses API, same key and base
//!   URL as Chat. Streams are its typed events; an in-stream failure is `response.failed`.
//! - `POST …/models/{model}:streamGenerateContent?alt=sse` and `…:generateContent` —
//!   Google's Gemini API (`/v1beta/models/…`, key in `x-goog-api-key`; base URL
//!   [`FakeServer::gemini_base_url`]) or Vertex AI (`…/publishers/google/models/…`, a bearer
//!   token).
//!
//! On the Responses API the fake model is a reasoning model: each answer starts with a
//! reasoning item (with encrypted content, minted for the server's
//! [`organization`](FakeServerConfig::organization) and the request's key), and a request
//! that passes a reasoning item back changed, or one the server never sent to that key,
//! gets the API's 400 `invalid_encrypted_content`.
//!
//! On the Messages API a request with extended thinking on (`thinking: {type: enabled, …}`)
//! gets a thinking model: each answer starts with a `thinking` block signed for the server's
//! organisation and the request's key, followed by a `redacted_thinking` block when the last
//! user message holds Anthropic's test string ([`REDACTED_THINKING_TRIGGER`]). As the real
//! API, it refuses thinking passed back changed or signed for another key (400 "Invalid
//! `signature` in `thinking` block", "Invalid `data` in `redacted_thinking` block"), and,
//! with thinking on, a request that answers tool calls whose assistant turn does not start
//! with its thinking (400 "… a final `assistant` message must start with a thinking block
//! …").
//!
//! On Gemini the fake model is a thinking model: the first function call of each answer
//! carries a `thoughtSignature` minted for the server's organisation and the request's key
//! (and its text does too when the request asks for thoughts), and a request that passes
//! back a signature changed or minted for another key gets the API's 400 "Corrupted thought
//! signature." (Vertex AI's "… Thought signature is not valid. …" on a Vertex path); the
//! documented `skip_thought_signature_validator` always passes.
//!
//! Streaming requests (`"stream": true`) get server-sent events encoded by
//! [`rebound_core::wire::encode_stream`]; others (and every request, with
//! [`FakeServerConfig::ignore_stream`]) get the JSON body of
//! [`rebound_core::wire::encode_response_json`]. Every response carries a request id
//! (`request-id` for Anthropic, `x-request-id` for OpenAI).
//!
//! # What it validates, like the real APIs
//!
//! A missing or wrong key (when [`FakeServerConfig::api_key`] is set), a missing
//! `anthropic-version`, a body larger than [`FakeServerConfig::max_body_bytes`] (413), a
//! body that is not JSON or not a request of the provider (400), blank text blocks and
//! tool-use ids Anthropic refuses (outside `^[a-zA-Z0-9_-]+$`, or used twice), OpenAI tool
//! call ids longer than 40 characters (400), and a conversation whose
//! tool calls are not answered first, in order, in the very next message, or whose results
//! answer an unknown `tool_use_id` (400, in each provider's own words). Refused requests do
//! not move the script.
//!
//! # The request log
//!
//! [`FakeServer::requests`] returns a [`RequestRecord`] per request received, in arrival
//! order, and [`FakeServerConfig::on_request`] sees each as soon as the server has decided
//! what to do with it (`rebound serve` prints its one-line [`Display`](std::fmt::Display)
//! form on stderr, or its [`dump`](RequestRecord::dump) with `--log-requests`). A record
//! holds the headers with every credential redacted, the body as JSON, the body's size, and,
//! when [`FakeServerConfig::raw_body_bytes`] asks for it, the first bytes of the body as
//! received.
//!
//! # Faults on the wire
//!
//! | scenario fault | what the client receives |
//! |---|---|
//! | `http` | that status, the provider's error body (type and message as given, else its usual ones), the given headers (`retry-after`, `retry-after-ms`, `x-should-retry`, rate-limit resets, …) |
//! | `transport` `reset`, `connect`, `dns`, `tls` | the connection is closed before any byte of a response |
//! | `transport` `timeout`, `idle_timeout` | no byte for the fault's `after_ms` (default: the scenario's `timing.timeout_ms`), then the connection closes |
//! | `transport` `stream_cut`, `malformed_stream`, `empty_message` | as the faults below |
//! | `stream_cut` | a 200 event stream of the next answer, cut after `after_events` events (never after the finish): the connection closes without the terminating chunk |
//! | `stream_cut_bytes` | the same, cut after `after_bytes` bytes of the body |
//! | `stream_error` | the first event of the next answer (with `after_deltas: N`, its events through its N-th text delta — through its last when it has fewer, never its finish), then the provider's error event, then a clean end |
//! | `empty_message` | a complete response with no content |
//! | `context_overflow` | the provider's real "prompt is too long" / `context_length_exceeded` 400; also whenever the conversation is over the scenario's `context_limit_bytes` |
//! | `malformed_stream` | a stream whose second event holds invalid JSON (non-streaming: a truncated JSON body) |
//! | `stall` | no byte for `ms`, then what the script says next, for this same request (after the headers and first event when that is a stream) |
//! | `slow_drip` | what the script says next, one event every `interval_ms` |
//!
//! These bytes come from [`crate::scenario::render`], which the simulator classifies
//! too ([`Rendered::failure`](crate::scenario::Rendered::failure)): both players of a
//! scenario tell the machine the same failure.
//!
//! A request that does not stream gets the nearest JSON equivalent: a cut is a JSON body cut
//! off mid-way, a mid-stream error is an HTTP error with the status of its type (`529` for
//! `overloaded_error`, `429` for `rate_limit_error`, else `500`).
//!
//! The script moves as in the simulator: each request takes the next step of its
//! conversation's [`ScriptCursor`](crate::scenario::ScriptCursor) (below), with the
//! scenario's clock as `now`, in real milliseconds. A stall or drip takes the step after it
//! for the same request, but only once the client has waited it out: a client that gives up
//! during the silence leaves that step to its next request, as in the simulator. The
//! simulator's latencies (`timing`, `after_ms` of most faults) are not played on the wire
//! (unless [`FakeServerConfig::play_latency`]); stalls and drips are. What the scenario says
//! about tools (outcomes, batch errors), `cancel` and `compaction_error` is for the
//! simulator's side of the run: on the wire the client runs its own tools, and the server
//! only answers.
//!
//! # Conversations
//!
//! Each conversation plays the scenario from its start, as the simulator plays one run: its
//! own script position, its own random draws (the *n*-th conversation, counted from 0 in
//! order of first request, with seed `seed + n`, as run *n* of `rebound sim --seed SEED
//! --runs N`) and its own clock. So a test suite can run conversation after conversation
//! against one server, and several agents can share one at once. A request belongs to:
//!
//! 1. the conversation its [`CONVERSATION_HEADER`] (`x-rebound-conversation`) names, when it
//!    sends a non-blank one: the exact way, for a client that runs several conversations at
//!    once with the same first message;
//! 2. else, the conversation whose first message opens with the same text (the first text
//!    block of the request's first message; not the system prompt, which some agents change
//!    from request to request, nor the API key, which a fallback to another provider
//!    changes). A conversation rebound compacts with a summary this server wrote keeps its
//!    script (its new first message is the summary); a client that rewrites its first
//!    message in its own way starts a new conversation unless it sends the header.
//!
//! A request with exactly the messages of its conversation's first request is a retry of
//! it, and takes the script's next step, until the conversation has been answered (a turn or
//! a summary): from then on it starts a new conversation, from the script's start. So running
//! the same prompt twice plays the scenario twice. Runs of the same prompt at the same time
//! cannot be told apart that way (each answer would start the next run's opening over as a
//! new conversation): give each its own header value, or share one script on purpose
//! ([`ScriptScope::Shared`]).
//!
//! [`ScriptScope::Shared`] (`rebound serve --shared-script`) plays one script for every
//! request instead, whoever sends it (seeded with `seed`): the server's only behaviour before
//! conversations were told apart, for a fleet of identical agents that should meet the
//! scenario's faults between them.
//!
//! The scenario's clock — the `now` of its outage windows — starts at the first request of
//! the script that plays it ([`ScenarioClock::FirstRequest`], the default): each
//! conversation's own first request (with a shared script, the server's first; requests
//! refused before the script do not count), so an agent started long after the server meets
//! `rate-limit-window`'s 429s all the same. [`ScenarioClock::ServerStart`] (`--clock
//! server-start`) reads every window on one clock started with the server, for a fleet
//! started with it that should meet one outage together. Each record says its conversation
//! and the scenario's clock ([`RequestRecord::conversation`],
//! [`RequestRecord::scenario_ms`]).

mod body;
mod conversation;
mod handler;
mod reasoning;
mod reject;
mod signature;
mod thinking;

pub use thinking::REDACTED_THINKING_TRIGGER;

use crate::scenario::Fault;
use crate::Scenario;
use conversation::Plays;
use rebound_core::ProviderKind;
use serde::Serialize;
use serde_json::Value;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The largest request body accepted by default (32 MiB, Anthropic's limit for Messages).
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 << 20;

/// The header that names the conversation a request belongs to (any non-blank value), for
/// a client that runs several conversations at once with the same first message; see
/// [Conversations](self#conversations).
pub const CONVERSATION_HEADER: &str = "x-rebound-conversation";

/// Which requests share a play of the scenario: a script position, the random fault model's
/// draws and the scenario's clock. See [Conversations](self#conversations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ScriptScope {
    /// Each conversation plays the scenario from its start, as the simulator plays a run:
    /// the *n*-th conversation (from 0, in order of first request) with seed `seed + n`, as
    /// run *n* of `rebound sim --seed SEED --runs N`.
    #[default]
    PerConversation,
    /// Every request, whoever sends it, takes the next step of one script (seeded with
    /// `seed`): the server's only behaviour before conversations were told apart, kept for a
    /// fleet of identical agents meeting one provider's faults between them.
    Shared,
}

/// When a scenario's clock — the `now` its outage windows are read on — starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ScenarioClock {
    /// At the first request of the script that plays it (requests refused before the
    /// script do not count): each conversation's own first request, or with
    /// [`ScriptScope::Shared`] the server's first. An agent started long after the server
    /// still meets the scenario's first window.
    #[default]
    FirstRequest,
    /// When the server started listening, one clock for every conversation: windows are
    /// moments of the server's life, which a fleet started with the server meets together.
    ServerStart,
}

/// A callback that sees each request as soon as the server has decided what to do with it.
pub type RequestHook = Arc<dyn Fn(&RequestRecord) + Send + Sync>;

/// How to start a [`FakeServer`].
#[derive(Clone)]
#[non_exhaustive]
pub struct FakeServerConfig {
    /// What the fake model answers and which faults come first. [`FakeServerConfig::healthy`]
    /// uses `Scenario::default()`: no faults, every request answered `"Done."`.
    pub scenario: Scenario,
    /// Seed of the scenario's random fault model.
    pub seed: u64,
    /// Where to listen; `127.0.0.1:0` (any free port) by default.
    pub addr: SocketAddr,
    /// When set, only this API key is accepted (others get the provider's 401); when `None`,
    /// any non-empty key is.
    pub api_key: Option<String>,
    /// Request bodies larger than this get the provider's 413.
    pub max_body_bytes: usize,
    /// Overrides the scenario's `context_limit_bytes`: a conversation larger than this (by
    /// `Conversation::approx_bytes`) gets the provider's context-overflow 400.
    pub context_limit_bytes: Option<usize>,
    /// Called with each request record as it is logged (e.g. to print it).
    pub on_request: Option<RequestHook>,
    /// Plays the scenario's latencies on the wire, as the simulator charges them: an answer
    /// comes after `timing.answer_ms`, an HTTP error after its `after_ms` or
    /// `timing.error_ms`. Off by default (answers come at once), so tests stay fast; on, a
    /// fleet of real clients meets the same timing as the simulator predicts for it.
    pub play_latency: bool,
    /// Answer with a JSON body even when the request asks for a stream, as some
    /// OpenAI-compatible servers do (faults take their non-streaming form too).
    pub ignore_stream: bool,
    /// The organisation the server's encrypted reasoning belongs to (`org-fake` by
    /// default). Reasoning is minted for the organisation and the API key of the request
    /// that gets it, and any other (another server's organisation, another key) is refused
    /// with the API's 400 `invalid_encrypted_content`, as OpenAI refuses another
    /// organisation's `encrypted_content`.
    pub organization: String,
    /// Which requests share a play of the scenario (a script position, random draws and a
    /// clock): each conversation its own (the default), or one for every request.
    pub script: ScriptScope,
    /// When a scenario's clock (the `now` of its outage windows) starts: at the first
    /// request of the script that plays it (the default), or when the server started.
    pub clock: ScenarioClock,
    /// How many bytes of each request body, as received, its record keeps in
    /// [`RequestRecord::raw_body`] (to show what a client sent byte for byte, as
    /// `rebound serve --log-requests` does); 0 (the default) keeps none.
    pub raw_body_bytes: usize,
}

impl fmt::Debug for FakeServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeServerConfig")
            .field("scenario", &self.scenario.name)
            .field("seed", &self.seed)
            .field("addr", &self.addr)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("max_body_bytes", &self.max_body_bytes)
            .field("context_limit_bytes", &self.context_limit_bytes)
            .field("on_request", &self.on_request.as_ref().map(|_| "<fn>"))
            .field("play_latency", &self.play_latency)
            .field("ignore_stream", &self.ignore_stream)
            .field("organization", &self.organization)
            .field("script", &self.script)
            .field("clock", &self.clock)
            .field("raw_body_bytes", &self.raw_body_bytes)
            .finish()
    }
}

impl FakeServerConfig {
    /// A server playing `scenario` with random faults drawn from `seed`, on `127.0.0.1:0`.
    #[must_use]
    pub fn new(scenario: Scenario, seed: u64) -> Self {
        FakeServerConfig {
            scenario,
            seed,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            api_key: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            context_limit_bytes: None,
            on_request: None,
            play_latency: false,
            ignore_stream: false,
            organization: "org-fake".to_owned(),
            script: ScriptScope::PerConversation,
            clock: ScenarioClock::FirstRequest,
            raw_body_bytes: 0,
        }
    }

    /// A healthy model with no faults that answers every request with a short text.
    #[must_use]
    pub fn healthy() -> Self {
        let scenario = Scenario {
            name: "healthy".into(),
            description: "No faults; every request is answered with a short text.".into(),
            ..Scenario::default()
        };
        Self::new(scenario, 0)
    }
}

impl FakeServerConfig {
    /// Sets [`addr`](Self::addr), where to listen.
    #[must_use]
    pub fn with_addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Sets [`api_key`](Self::api_key): only this API key is accepted.
    #[must_use]
    pub fn with_api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(api_key.into());
        self
    }

    /// Sets [`max_body_bytes`](Self::max_body_bytes), the largest request body accepted.
    #[must_use]
    pub fn with_max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.max_body_bytes = max_body_bytes;
        self
    }

    /// Sets [`context_limit_bytes`](Self::context_limit_bytes), overriding the scenario's.
    #[must_use]
    pub fn with_context_limit_bytes(mut self, context_limit_bytes: usize) -> Self {
        self.context_limit_bytes = Some(context_limit_bytes);
        self
    }

    /// Sets [`on_request`](Self::on_request), called with each request record.
    #[must_use]
    pub fn with_on_request(mut self, on_request: RequestHook) -> Self {
        self.on_request = Some(on_request);
        self
    }

    /// Sets [`play_latency`](Self::play_latency): whether the scenario's latencies are played on
    /// the wire.
    #[must_use]
    pub fn with_play_latency(mut self, play_latency: bool) -> Self {
        self.play_latency = play_latency;
        self
    }

    /// Sets [`organization`](Self::organization), whom the server's encrypted reasoning
    /// belongs to.
    #[must_use]
    pub fn with_organization(mut self, organization: impl Into<String>) -> Self {
        self.organization = organization.into();
        self
    }

    /// Sets [`ignore_stream`](Self::ignore_stream): whether to answer with JSON even when asked for
    /// a stream.
    #[must_use]
    pub fn with_ignore_stream(mut self, ignore_stream: bool) -> Self {
        self.ignore_stream = ignore_stream;
        self
    }

    /// Sets [`script`](Self::script): whether each conversation plays the scenario from its
    /// start, or every request walks one script.
    #[must_use]
    pub fn with_script(mut self, script: ScriptScope) -> Self {
        self.script = script;
        self
    }

    /// Sets [`clock`](Self::clock): when the scenario's clock starts.
    #[must_use]
    pub fn with_clock(mut self, clock: ScenarioClock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets [`raw_body_bytes`](Self::raw_body_bytes): how much of each raw request body its
    /// record keeps.
    #[must_use]
    pub fn with_raw_body_bytes(mut self, raw_body_bytes: usize) -> Self {
        self.raw_body_bytes = raw_body_bytes;
        self
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FakeServerError {
    /// The address could not be bound (in use, no permission, …).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The system's error.
        source: std::io::Error,
    },
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] crate::ScenarioError),
}

/// One request the server received, and what it did with it.
///
/// Secrets never enter the log: the value of every header that may hold a credential
/// (`x-api-key`, `authorization`, `proxy-authorization`, `api-key`, `x-goog-api-key`,
/// `cookie`, and any other whose name contains `key`, `token`, `secret`, `password`, `auth`,
/// `cookie`, `credential` or `signature`) is recorded as `<redacted>`. The path is recorded
/// without its query, where some APIs take a key (`?key=`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// 0-based position in the log.
    pub index: usize,
    /// Milliseconds since the server started, when the request head arrived.
    pub at_ms: u64,
    /// The HTTP method.
    pub method: String,
    /// The path (without query).
    pub path: String,
    /// The request headers in arrival order, secrets redacted, names lower-case.
    pub headers: Vec<(String, String)>,
    /// Which API the path belongs to, if any.
    pub provider: Option<ProviderKind>,
    /// The body as JSON, when it was JSON.
    pub body: Option<Value>,
    /// The size of the body received, in bytes; `None` when it was not read (a request
    /// refused on its head: route, method, headers, a declared size over the limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_bytes: Option<usize>,
    /// The first [`FakeServerConfig::raw_body_bytes`] bytes of the body as received (empty
    /// when none were kept); not serialized.
    #[serde(skip)]
    pub raw_body: Vec<u8>,
    /// The conversation the request belongs to (from 0, in order of first request; always 0
    /// with [`ScriptScope::Shared`]); `None` for a request refused before the script.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<usize>,
    /// The scenario's clock for the request, in ms (see [`ScenarioClock`]); `None` for a
    /// request refused before the script.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario_ms: Option<u64>,
    /// The request id the response carries.
    pub request_id: String,
    /// Silence injected before the outcome (stalls and drips), in ms.
    #[serde(skip_serializing_if = "is_zero")]
    pub stalled_ms: u64,
    /// What the server did.
    pub outcome: Outcome,
    /// The token usage the answer reported (for answers only; a cut stream may not have
    /// delivered it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<rebound_core::Usage>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RequestRecord {
    /// The first value of header `name` (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The record as `rebound serve --log-requests` prints it: the one-line summary
    /// ([`Display`](fmt::Display)), then one indented line per header in arrival order
    /// (secrets redacted), then the body's size and its kept bytes ([`raw_body`](Self::raw_body),
    /// as UTF-8, invalid sequences replaced), indented. Control characters other than
    /// newlines and tabs are escaped (`\u{1b}`), so a body cannot drive the terminal.
    ///
    /// ```text
    /// #0 +4ms POST /v1/messages [anthropic] conversation 0 at 0ms -> answered turn 0 (req_fake_000001)
    ///     content-type: application/json
    ///     x-api-key: <redacted>
    ///     body: 88 bytes
    ///     {"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}
    /// ```
    #[must_use]
    pub fn dump(&self) -> String {
        use fmt::Write as _;
        let mut out = self.to_string();
        for (name, value) in &self.headers {
            let _ = write!(out, "\n    {name}: {}", printable(value));
        }
        let kept = self.raw_body.len();
        match self.body_bytes {
            None => out.push_str("\n    body: not read"),
            Some(0) => out.push_str("\n    body: empty"),
            Some(n) if kept == 0 => {
                let _ = write!(out, "\n    body: {n} bytes (not kept)");
            }
            Some(n) => {
                if kept < n {
                    let _ = write!(out, "\n    body: {n} bytes, the first {kept} shown");
                } else {
                    let _ = write!(out, "\n    body: {n} bytes");
                }
                let text = String::from_utf8_lossy(&self.raw_body);
                for line in printable(&text).split('\n') {
                    let _ = write!(out, "\n    {line}");
                }
            }
        }
        out
    }
}

/// `text` with control characters other than newlines and tabs escaped (`\u{1b}`).
fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for RequestRecord {
    /// One line for a server log, e.g.
    /// `#3 +1520ms POST /v1/messages [anthropic] conversation 1 at 20ms -> fault:
    /// {"status":529,"type":"http"} (req_fake_000004)`: the index, when the head arrived (ms
    /// since the server started), the method, the path, the API, the conversation and its
    /// scenario clock (for a request the script played), the [`Outcome`] (a fault as its
    /// scenario JSON) and the request id.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} +{}ms {} {}",
            self.index, self.at_ms, self.method, self.path
        )?;
        if let Some(p) = self.provider {
            write!(f, " [{p}]")?;
        }
        if let (Some(c), Some(ms)) = (self.conversation, self.scenario_ms) {
            write!(f, " conversation {c} at {ms}ms")?;
        }
        f.write_str(" -> ")?;
        if self.stalled_ms > 0 {
            write!(f, "stalled {}ms, then ", self.stalled_ms)?;
        }
        match &self.outcome {
            Outcome::Answered { turn, alternate } => {
                write!(f, "answered turn {turn}")?;
                if *alternate {
                    f.write_str(" (after a tool error)")?;
                }
            }
            Outcome::Summarized => f.write_str("answered a summary request")?,
            Outcome::Fault { fault } => {
                let kind = serde_json::to_value(fault).unwrap_or(Value::Null);
                write!(f, "fault: {kind}")?;
            }
            Outcome::Overflow { bytes, limit } => {
                write!(f, "context overflow ({bytes} bytes > {limit})")?;
            }
            Outcome::Rejected { status, reason } => write!(f, "rejected {status}: {reason}")?,
        }
        write!(f, " ({})", self.request_id)
    }
}

/// What the server did with a request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Answered from the script.
    Answered {
        /// The scenario turn (its `turns.len()` for the final `"Done."`).
        turn: usize,
        /// Whether it was the turn's `when_last_tool_error` answer.
        alternate: bool,
    },
    /// A summary request (one ending with `rebound_core::compaction::SUMMARY_PROMPT`) was
    /// answered with the scenario's summary; the turns' script did not move.
    Summarized,
    /// A scripted or random fault was injected.
    Fault {
        /// The fault.
        fault: Fault,
    },
    /// The conversation was over the context limit: the provider's overflow 400.
    Overflow {
        /// The conversation's size (`approx_bytes`).
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Refused before the script was consulted (auth, size, JSON, tool pairing, route).
    Rejected {
        /// The status sent.
        status: u16,
        /// Why, in one line.
        reason: String,
    },
}

/// The mutable state shared by all connections.
struct State {
    plays: Plays,
    records: Vec<RequestRecord>,
}

/// Everything a connection needs.
struct Shared {
    scenario: Scenario,
    api_key: Option<String>,
    organization: String,
    max_body_bytes: usize,
    raw_body_bytes: usize,
    script: ScriptScope,
    ignore_stream: bool,
    started: Instant,
    on_request: Option<RequestHook>,
    play_latency: bool,
    /// Request ids count from 1 per server, so a run's ids are reproducible.
    next_request_id: AtomicU64,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock is a bug in this module; the state stays usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// A running fake provider server. Dropping it stops it too (without waiting).
pub struct FakeServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeServer")
            .field("addr", &self.addr)
            .field("scenario", &self.shared.scenario.name)
            .finish_non_exhaustive()
    }
}

impl FakeServer {
    /// Validates the scenario, binds `config.addr` and starts serving on the current tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// [`FakeServerError::Scenario`] for an invalid scenario, [`FakeServerError::Bind`] when
    /// the address cannot be bound.
    pub async fn start(config: FakeServerConfig) -> Result<FakeServer, FakeServerError> {
        let mut scenario = config.scenario;
        if config.context_limit_bytes.is_some() {
            scenario.context_limit_bytes = config.context_limit_bytes;
        }
        scenario.validate()?;
        let listener =
            TcpListener::bind(config.addr)
                .await
                .map_err(|source| FakeServerError::Bind {
                    addr: config.addr,
                    source,
                })?;
        let addr = listener
            .local_addr()
            .map_err(|source| FakeServerError::Bind {
                addr: config.addr,
                source,
            })?;
        let shared = Arc::new(Shared {
            scenario,
            api_key: config.api_key,
            organization: config.organization,
            max_body_bytes: config.max_body_bytes,
            raw_body_bytes: config.raw_body_bytes,
            script: config.script,
            ignore_stream: config.ignore_stream,
            started: Instant::now(),
            on_request: config.on_request,
            play_latency: config.play_latency,
            next_request_id: AtomicU64::new(1),
            state: Mutex::new(State {
                plays: Plays::new(config.seed, config.clock),
                records: Vec::new(),
            }),
        });
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(handler::accept_loop(listener, Arc::clone(&shared), stopped));
        Ok(FakeServer {
            addr,
            shared,
            stop,
            task: Some(task),
        })
    }

    /// The bound address (`127.0.0.1:PORT`).
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the base URL for Anthropic clients (which append
    /// `/v1/messages`).
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: the base URL for OpenAI clients (which append
    /// `/chat/completions`).
    #[must_use]
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1beta`: the base URL for Gemini clients (which append
    /// `/models/{model}:streamGenerateContent?alt=sse`), as AI Studio's is.
    #[must_use]
    pub fn gemini_base_url(&self) -> String {
        format!("http://{}/v1beta", self.addr)
    }

    /// The base URL a client of `provider` takes.
    #[must_use]
    pub fn base_url_for(&self, provider: ProviderKind) -> String {
        match provider {
            ProviderKind::Anthropic => self.base_url(),
            ProviderKind::Gemini => self.gemini_base_url(),
            // Bedrock's endpoint has no path: requests go to `/model/{id}/converse-stream`.
            ProviderKind::Bedrock => self.base_url(),
            // OpenAI's APIs, and any other (the same `/v1` prefix).
            _ => self.openai_base_url(),
        }
    }

    /// The scenario being played (with the configured context limit applied).
    #[must_use]
    pub fn scenario(&self) -> &Scenario {
        &self.shared.scenario
    }

    /// The requests received so far, in arrival order.
    #[must_use]
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().records.clone()
    }

    /// Stops accepting, closes every open connection (a stalled response is cut) and waits
    /// for the server task to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}
