//! Accepting connections, reading requests, deciding what the script does, and putting it on
//! the wire.

use super::body::{Cut, FakeBody};
use super::conversation::Named;
use super::reasoning;
use super::reject::{self, Rejection};
use super::signature;
use super::thinking;
use super::{Outcome, RequestRecord, Shared};
use crate::scenario::{
    final_answer, message_id, overflow_body_for, render, with_usage, BodyKind, Fault, FaultKind,
    Planned, Rendered, ScriptCursor, WireRequest,
};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::ext::ReasonPhrase;
use hyper::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rebound_core::wire::{self, ParsedRequest};
use rebound_core::{AssistantResponse, Conversation, Millis, ProviderKind};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// The error a service returns to make hyper close the connection without a response.
#[derive(Debug, thiserror::Error)]
#[error("the fake provider closed the connection (scripted fault)")]
pub(crate) struct Abort;

/// How long a cut body waits before the cut, so the bytes before it reach the client.
const FLUSH_BEFORE_CUT: Duration = Duration::from_millis(30);

/// At most this many stalls and drips in a row are taken for one request.
const MAX_SILENCES: usize = 32;

/// Headers whose values never enter the request log.
const SECRET_HEADERS: &[&str] = &[
    "x-api-key",
    "authorization",
    "proxy-authorization",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "set-cookie",
];

/// A header whose name holds one of these may carry a credential: its value is redacted too.
const SECRET_NAME_PARTS: &[&str] = &[
    "key",
    "token",
    "secret",
    "password",
    "auth",
    "cookie",
    "credential",
    "signature",
];

/// Serves connections until `stopped` turns true, then closes them all.
pub(super) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // An answer is many small writes (one per event): without this, a
                    // kept-alive connection waits out the client's delayed ACK (40 ms on
                    // Linux) once per answer, which a real provider does not make it do.
                    let _ = stream.set_nodelay(true);
                    let shared = Arc::clone(&shared);
                    connections.spawn(async move {
                        let service = service_fn(move |req| handle(Arc::clone(&shared), req));
                        // Errors here are clients going away or scripted cuts.
                        // The timer lets hyper drop clients that never finish their
                        // request head (its default header read timeout, 30 s).
                        let _ = http1::Builder::new()
                            .timer(TokioTimer::new())
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
                // Out of file descriptors and the like: back off briefly, keep serving.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// What the script decided, owned (no borrow of the scenario).
#[derive(Debug, Clone)]
enum Act {
    Answer {
        turn: usize,
        alternate: bool,
        response: AssistantResponse,
    },
    /// A summary request's answer (it does not move the turns' script).
    Summary {
        response: AssistantResponse,
    },
    Fault(Fault),
    Overflow {
        bytes: usize,
        limit: usize,
    },
}

impl Act {
    fn from_planned(planned: Planned<'_>, conversation: &Conversation) -> Act {
        match planned {
            Planned::Summary(script) => Act::Summary {
                response: script.response(conversation),
            },
            Planned::Fault(f) => Act::Fault(f.clone()),
            Planned::Overflow { bytes, limit } => Act::Overflow { bytes, limit },
            Planned::Answer {
                turn,
                alternate,
                answer,
            } => Act::Answer {
                turn,
                alternate,
                response: with_usage(
                    match answer {
                        Some(a) => a.response(turn, alternate),
                        None => final_answer().response(turn, false),
                    },
                    conversation,
                ),
            },
        }
    }

    /// Whether it answers (a turn or a summary), which makes the conversation answered.
    fn answers(&self) -> bool {
        matches!(self, Act::Answer { .. } | Act::Summary { .. })
    }

    fn silence(&self) -> Option<&Fault> {
        match self {
            Act::Fault(f) if f.silence_ms().is_some() => Some(f),
            _ => None,
        }
    }

    fn outcome(&self) -> Outcome {
        match self {
            Act::Answer {
                turn, alternate, ..
            } => Outcome::Answered {
                turn: *turn,
                alternate: *alternate,
            },
            Act::Summary { .. } => Outcome::Summarized,
            Act::Fault(fault) => Outcome::Fault {
                fault: fault.clone(),
            },
            Act::Overflow { bytes, limit } => Outcome::Overflow {
                bytes: *bytes,
                limit: *limit,
            },
        }
    }
}

/// A script position planned for a conversation, applied once the client has waited the
/// silences before it out.
struct Commit {
    /// The conversation.
    index: usize,
    cursor: ScriptCursor,
    /// The conversation's generation it was planned from.
    generation: u64,
    /// Whether the act after the silences answers.
    answers: bool,
}

/// A decision for one request: silences first, then the act; `commit` is the script
/// position after the act, applied once the client has waited the silences out.
struct Plan {
    /// The conversation and its scenario clock when the request arrived.
    conversation: usize,
    scenario_ms: u64,
    stall_ms: u64,
    drip_ms: u64,
    act: Act,
    commit: Option<Commit>,
    /// The answer a cut or mid-stream error interrupts: the current turn's.
    interrupted: AssistantResponse,
}

impl Plan {
    /// Puts the reasoning `add` mints in front of every answer this plan may send, each
    /// named by the script step it comes from (`t0`, `t0_alt`, `summary`, `interrupted`), so
    /// a retried turn gets the same reasoning.
    fn reason(&mut self, add: impl Fn(AssistantResponse, &str) -> AssistantResponse) {
        match &mut self.act {
            Act::Answer {
                turn,
                alternate,
                response,
            } => {
                let step = format!("t{turn}{}", if *alternate { "_alt" } else { "" });
                *response = add(response.clone(), &step);
            }
            Act::Summary { response } => *response = add(response.clone(), "summary"),
            _ => {}
        }
        self.interrupted = add(self.interrupted.clone(), "interrupted");
    }
}

impl Shared {
    /// Decides what the request `named`, arriving at `at_ms` with `conversation`, gets, from
    /// its conversation's script.
    fn plan(&self, at_ms: u64, named: &Named, conversation: &Conversation) -> Plan {
        let scenario = &self.scenario;
        let mut st = self.lock();
        let index = st.plays.find(named, at_ms);
        let now = st.plays.now(index, at_ms);
        let play = st.plays.get_mut(index);
        let first = Act::from_planned(
            play.cursor.next(scenario, Millis(now), conversation),
            conversation,
        );
        play.generation += 1;
        let turn = play.cursor.turn();
        let interrupted = scenario.turns.get(turn).map_or_else(
            || final_answer().response(turn, false),
            |t| t.answer.response(turn, false),
        );
        let (mut stall_ms, mut drip_ms) = (0u64, 0u64);
        let add = |f: &Fault, stall_ms: &mut u64, drip_ms: &mut u64| match f.kind {
            FaultKind::SlowDrip { interval_ms } => *drip_ms = interval_ms,
            _ => *stall_ms = stall_ms.saturating_add(f.silence_ms().unwrap_or(0)),
        };
        let Some(silence) = first.silence() else {
            play.answered |= first.answers();
            let plan = Plan {
                conversation: index,
                scenario_ms: now,
                stall_ms,
                drip_ms,
                act: first,
                commit: None,
                interrupted,
            };
            if let Act::Summary { response } = &plan.act {
                st.plays
                    .summarized_to(named, index, &response.message.text());
            }
            return plan;
        };
        add(silence, &mut stall_ms, &mut drip_ms);
        let mut look = play.cursor.clone();
        let mut last = first.clone();
        for _ in 0..MAX_SILENCES {
            let at = now.saturating_add(stall_ms).saturating_add(drip_ms);
            let next =
                Act::from_planned(look.next(scenario, Millis(at), conversation), conversation);
            match next.silence() {
                Some(s) => {
                    add(s, &mut stall_ms, &mut drip_ms);
                    last = next.clone();
                }
                None => {
                    let commit = Commit {
                        index,
                        cursor: look,
                        generation: play.generation,
                        answers: next.answers(),
                    };
                    if let Act::Summary { response } = &next {
                        st.plays
                            .summarized_to(named, index, &response.message.text());
                    }
                    return Plan {
                        conversation: index,
                        scenario_ms: now,
                        stall_ms,
                        drip_ms,
                        act: next,
                        commit: Some(commit),
                        interrupted,
                    };
                }
            }
        }
        // Silence after silence: the client gets nothing at all.
        Plan {
            conversation: index,
            scenario_ms: now,
            stall_ms,
            drip_ms,
            act: last,
            commit: Some(Commit {
                index,
                cursor: look,
                generation: play.generation,
                answers: false,
            }),
            interrupted,
        }
    }

    fn commit(&self, commit: Option<Commit>) {
        if let Some(commit) = commit {
            let mut st = self.lock();
            let play = st.plays.get_mut(commit.index);
            if play.generation == commit.generation {
                play.cursor = commit.cursor;
                play.generation += 1;
                play.answered |= commit.answers;
            }
        }
    }

    fn log(&self, mut record: RequestRecord) {
        {
            let mut st = self.lock();
            record.index = st.records.len();
            st.records.push(record.clone());
        }
        // Outside the lock: the hook may be slow, or read the log itself.
        if let Some(hook) = &self.on_request {
            hook(&record);
        }
    }
}

/// Handles one request; `Err(Abort)` closes the connection without a response.
async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<FakeBody>, Abort> {
    let at_ms = shared.elapsed_ms();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    // Gemini names the model and the streaming in the path (`/v1beta/models/{model}:
    // streamGenerateContent?alt=sse`; Vertex AI's is longer, ending the same way).
    let gemini = parts
        .uri
        .path_and_query()
        .and_then(|p| wire::gemini_request_target(p.as_str()));
    // Bedrock's too: `/model/{modelId}/converse-stream` or `…/converse`.
    let bedrock = wire::bedrock_request_target(&path);
    let provider = match path.as_str() {
        "/v1/messages" => Some(ProviderKind::Anthropic),
        "/v1/chat/completions" | "/chat/completions" => Some(ProviderKind::OpenAi),
        "/v1/responses" | "/responses" => Some(ProviderKind::OpenAiResponses),
        _ if gemini.is_some() => Some(ProviderKind::Gemini),
        _ if bedrock.is_some() => Some(ProviderKind::Bedrock),
        _ => None,
    };
    let id = shared.next_request_id.fetch_add(1, Ordering::Relaxed);
    let request_id = format!("req_fake_{id:06}");
    let mut record = RequestRecord {
        index: 0,
        at_ms,
        method: parts.method.to_string(),
        path,
        headers: redacted(&parts.headers),
        provider,
        body: None,
        body_bytes: None,
        raw_body: Vec::new(),
        conversation: None,
        scenario_ms: None,
        request_id: request_id.clone(),
        stalled_ms: 0,
        usage: None,
        outcome: Outcome::Rejected {
            status: 0,
            reason: String::new(),
        },
    };
    let owner = reasoning::owner(
        &shared.organization,
        provider
            .and_then(|p| reject::api_key(p, &parts.headers))
            .as_deref(),
    );
    let mut reply = Reply {
        provider: provider.unwrap_or(ProviderKind::Anthropic),
        request_id,
        owner,
        thinking: None,
        thoughts: None,
    };
    let Some(provider) = provider else {
        let r = Rejection {
            status: 404,
            body: wire::encode_error_body(
                ProviderKind::Anthropic,
                404,
                Some("not_found_error"),
                "Not Found",
            ),
            reason: format!("no endpoint at {}", record.path),
        };
        return Ok(reply.reject(&shared, record, r));
    };
    if parts.method != Method::POST {
        let r = Rejection {
            status: 405,
            body: wire::encode_error_body(
                provider,
                405,
                Some("invalid_request_error"),
                "Method Not Allowed",
            ),
            reason: format!("method {} not allowed", parts.method),
        };
        return Ok(reply.reject(&shared, record, r));
    }
    if let Err(r) = reject::check_headers(provider, &parts.headers, shared.api_key.as_deref()) {
        return Ok(reply.reject(&shared, record, r));
    }
    let limit = shared.max_body_bytes;
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Ok(reply.reject(&shared, record, reject::too_large(provider, limit)));
    }
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return Ok(reply.reject(&shared, record, reject::too_large(provider, limit)))
        }
        // The client went away or sent a broken body: nobody to answer.
        Err(_) => return Err(Abort),
    };
    record.body_bytes = Some(bytes.len());
    record.raw_body = bytes[..bytes.len().min(shared.raw_body_bytes)].to_vec();
    record.body = serde_json::from_slice(&bytes).ok();
    let mut parsed = match wire::parse_request(provider, &bytes) {
        Ok(p) => p,
        Err(e) => return Ok(reply.reject(&shared, record, reject::bad_body(provider, &e))),
    };
    if let Some((model, stream)) = bedrock {
        parsed.model = model;
        parsed.stream = stream;
    }
    if let Some((model, stream)) = gemini {
        parsed.model = model;
        parsed.stream = stream;
        let vertex = signature::is_vertex(&record.path);
        if let Err(r) = signature::check(&parsed.conversation, &reply.owner, vertex) {
            return Ok(reply.reject(&shared, record, r));
        }
        if let Some(raw) = &record.body {
            if let Err(r) = signature::check_calls_signed(raw, &parsed.model) {
                return Ok(reply.reject(&shared, record, r));
            }
        }
        reply.thoughts = Some(
            record
                .body
                .as_ref()
                .is_some_and(signature::asks_for_thoughts),
        );
    }
    if let Some(raw) = &record.body {
        if let Err(r) = reject::content(provider, raw) {
            return Ok(reply.reject(&shared, record, r));
        }
        if provider == ProviderKind::OpenAiResponses {
            if let Err(r) = reasoning::check(raw, &reply.owner) {
                return Ok(reply.reject(&shared, record, r));
            }
        }
        if provider == ProviderKind::Anthropic {
            if let Err(r) = thinking::check(raw, &reply.owner) {
                return Ok(reply.reject(&shared, record, r));
            }
            reply.thinking = thinking::enabled(raw).then(|| thinking::asks_for_redaction(raw));
        }
    }
    if parsed.conversation.is_empty() {
        let e = wire::WireError::EmptyConversation;
        return Ok(reply.reject(&shared, record, reject::bad_body(provider, &e)));
    }
    if let Err(e) = parsed.conversation.check_tool_pairing(false) {
        let r = reject::pairing(provider, &e, &parsed.conversation);
        return Ok(reply.reject(&shared, record, r));
    }

    let named = Named::of(shared.script, &parts.headers, &parsed.conversation);
    let plan = shared.plan(at_ms, &named, &parsed.conversation);
    record.conversation = Some(plan.conversation);
    record.scenario_ms = Some(plan.scenario_ms);
    record.stalled_ms = plan.stall_ms;
    record.outcome = plan.act.outcome();
    record.usage = match &plan.act {
        Act::Answer { response, .. } | Act::Summary { response } => Some(response.usage),
        _ => None,
    };
    shared.log(record);
    if shared.play_latency {
        let timing = &shared.scenario.timing;
        let latency_ms = match &plan.act {
            Act::Answer { .. } | Act::Summary { .. } => timing.answer_ms,
            Act::Fault(fault) if matches!(fault.kind, FaultKind::Http { .. }) => {
                fault.delay_ms(timing, 0)
            }
            Act::Overflow { .. } => timing.error_ms,
            // The other faults play their own silences and pacing.
            Act::Fault(_) => 0,
        };
        tokio::time::sleep(Duration::from_millis(latency_ms)).await;
    }
    reply.play(shared, plan, &parsed).await
}

/// Response headers shared by every answer to one request.
struct Reply {
    provider: ProviderKind,
    request_id: String,
    /// Whom the server mints reasoning for on this request (its organisation and the key).
    owner: String,
    /// Anthropic with extended thinking on: whether the answer's thinking is also redacted
    /// (the user asked with Anthropic's test string). `None`: no thinking.
    thinking: Option<bool>,
    /// Gemini: whether the request asks for thoughts, which signs the answer's text besides
    /// its first call. `None`: not Gemini, no thought signatures.
    thoughts: Option<bool>,
}

/// Where a streamed body stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Clean,
    Cut,
}

impl Reply {
    fn base(&self, status: u16) -> hyper::http::response::Builder {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let id_header = match self.provider {
            ProviderKind::Anthropic => "request-id",
            ProviderKind::Bedrock => "x-amzn-requestid",
            _ => "x-request-id",
        };
        let builder = Response::builder()
            .status(status)
            .header(id_header, self.request_id.as_str());
        match status.as_u16() {
            // No standard phrase; without one hyper would write `<none>`.
            529 => builder.extension(ReasonPhrase::from_static(b"Overloaded")),
            _ if status.canonical_reason().is_none() => {
                builder.extension(ReasonPhrase::from_static(b"Error"))
            }
            _ => builder,
        }
    }

    fn json(
        &self,
        status: u16,
        body: Vec<u8>,
        extra: &BTreeMap<String, String>,
    ) -> Response<FakeBody> {
        let mut response = self
            .base(status)
            .header(CONTENT_TYPE, "application/json")
            .body(FakeBody::full(body))
            .unwrap_or_else(|_| Response::new(FakeBody::full(Bytes::new())));
        let headers = response.headers_mut();
        // Bedrock names every error's type in a header; a refusal gets its status's.
        if status >= 400 {
            for (name, value) in wire::encode_error_headers(self.provider, status, None) {
                if let Ok(v) = HeaderValue::from_str(&value) {
                    headers.insert(name, v);
                }
            }
        }
        for (name, value) in extra {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.insert(n, v);
            }
        }
        response
    }

    fn reject(
        &self,
        shared: &Shared,
        mut record: RequestRecord,
        r: Rejection,
    ) -> Response<FakeBody> {
        record.outcome = Outcome::Rejected {
            status: r.status,
            reason: r.reason,
        };
        shared.log(record);
        self.json(r.status, r.body, &BTreeMap::new())
    }

    /// A chunked body fed by a task: `chunks` (the first at once, then the stall, then one
    /// per `drip_ms`), then `end`. The script commit happens once the silence is over and
    /// the client is still there.
    fn chunked(
        &self,
        content_type: &str,
        chunks: Vec<Vec<u8>>,
        end: End,
        plan: Plan,
        shared: Arc<Shared>,
    ) -> Response<FakeBody> {
        let (tx, rx) = mpsc::channel::<Result<Bytes, Cut>>(4);
        let Plan {
            stall_ms,
            drip_ms,
            commit,
            ..
        } = plan;
        tokio::spawn(async move {
            let mut commit = commit;
            let mut chunks = chunks.into_iter();
            if let Some(first) = chunks.next() {
                if tx.send(Ok(Bytes::from(first))).await.is_err() {
                    return;
                }
            }
            if stall_ms > 0 {
                tokio::time::sleep(Duration::from_millis(stall_ms)).await;
                if tx.is_closed() {
                    return;
                }
            }
            for chunk in chunks {
                if drip_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(drip_ms)).await;
                }
                if tx.is_closed() {
                    return;
                }
                shared.commit(commit.take());
                if tx.send(Ok(Bytes::from(chunk))).await.is_err() {
                    return;
                }
            }
            shared.commit(commit.take());
            if end == End::Cut {
                tokio::time::sleep(FLUSH_BEFORE_CUT).await;
                let _ = tx.send(Err(Cut)).await;
            }
        });
        self.base(200)
            .header(CONTENT_TYPE, content_type)
            .header("cache-control", "no-cache")
            .body(FakeBody::Stream(rx))
            .unwrap_or_else(|_| Response::new(FakeBody::full(Bytes::new())))
    }

    fn sse(
        &self,
        chunks: Vec<Vec<u8>>,
        end: End,
        plan: Plan,
        shared: Arc<Shared>,
    ) -> Response<FakeBody> {
        let content_type = match self.provider {
            ProviderKind::Bedrock => wire::stream_content_type(self.provider),
            _ => "text/event-stream; charset=utf-8",
        };
        self.chunked(content_type, chunks, end, plan, shared)
    }

    /// Waits out the silences before the headers, then moves the script on.
    async fn silence_first(&self, shared: &Shared, plan: &mut Plan) {
        let ms = plan.stall_ms.saturating_add(plan.drip_ms);
        if ms > 0 {
            // When the client leaves, hyper drops this future here: no commit.
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        shared.commit(plan.commit.take());
    }

    async fn play(
        self,
        shared: Arc<Shared>,
        mut plan: Plan,
        request: &ParsedRequest,
    ) -> Result<Response<FakeBody>, Abort> {
        let provider = self.provider;
        let model = request.model.as_str();
        let message_id = message_id(provider, &self.request_id);
        if provider == ProviderKind::OpenAiResponses {
            plan.reason(|r, step| reasoning::with_reasoning(r, step, &self.owner));
        }
        if let Some(redact) = self.thinking {
            plan.reason(|r, step| thinking::with_thinking(r, step, &self.owner, redact));
        }
        if let Some(thoughts) = self.thoughts {
            plan.reason(|r, step| signature::with_signatures(r, step, &self.owner, thoughts));
        }
        let stream = request.stream && !shared.ignore_stream;
        let events = |r: &AssistantResponse| wire::encode_stream(provider, r, model, &message_id);
        let json = |r: &AssistantResponse| {
            wire::encode_response_json(provider, r, model, &message_id)
                .to_string()
                .into_bytes()
        };
        let none = BTreeMap::new();
        let fault = match &plan.act {
            Act::Answer { response, .. } | Act::Summary { response } => {
                if stream {
                    let chunks = events(response);
                    return Ok(self.sse(chunks, End::Clean, plan, shared));
                }
                let body = json(response);
                self.silence_first(&shared, &mut plan).await;
                return Ok(self.json(200, body, &none));
            }
            Act::Overflow { bytes, limit } => {
                // About four bytes a token; the count always exceeds the limit.
                let limit_tokens = (*limit as u64 / 4).max(1);
                let tokens = (*bytes as u64).div_ceil(4).max(limit_tokens + 1);
                let body = overflow_body_for(provider, tokens, limit_tokens).into_bytes();
                self.silence_first(&shared, &mut plan).await;
                return Ok(self.json(400, body, &none));
            }
            Act::Fault(f) => f.clone(),
        };
        let request = WireRequest {
            provider,
            stream,
            model,
            message_id: &message_id,
            timing: &shared.scenario.timing,
        };
        match render(&fault, &request, &plan.interrupted) {
            Rendered::Response {
                status,
                headers,
                body,
            } => {
                self.silence_first(&shared, &mut plan).await;
                Ok(self.json(status, body, &headers))
            }
            Rendered::Chunked { kind, chunks, cut } => {
                let end = if cut { End::Cut } else { End::Clean };
                let content_type = match kind {
                    BodyKind::EventStream if provider == ProviderKind::Bedrock => {
                        wire::stream_content_type(provider)
                    }
                    BodyKind::EventStream => "text/event-stream; charset=utf-8",
                    BodyKind::Json => "application/json",
                };
                Ok(self.chunked(content_type, chunks, end, plan, shared))
            }
            Rendered::Close { after_ms, .. } => {
                self.silence_first(&shared, &mut plan).await;
                // A stall's or drip's silence was just played (`silence_first`).
                if fault.silence_ms().is_none() {
                    tokio::time::sleep(Duration::from_millis(after_ms)).await;
                }
                Err(Abort)
            }
        }
    }
}

/// The headers for the log, secrets replaced by `<redacted>`.
fn redacted(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = name.as_str().to_owned();
            let value = if is_secret(&name) {
                "<redacted>".to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name, value)
        })
        .collect()
}

/// Whether a header (its name lower-case, as hyper gives it) may carry a credential.
fn is_secret(name: &str) -> bool {
    SECRET_HEADERS.contains(&name) || SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
}
