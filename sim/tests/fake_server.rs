//! The fake provider server against raw HTTP clients on loopback: every fault as the bytes a
//! client receives, what `rebound_core` makes of them, validation, auth, and the request log.

use rebound_core::classify::classify_http;
use rebound_core::wire::{self, StreamDecoder};
use rebound_core::{
    tool_error_text, AssistantResponse, ContentBlock, Conversation, FailureKind, Headers, Message,
    ProviderFailure, ProviderKind, ToolResultBlock, ToolResultPart, TransportFault,
};
use rebound_sim::fake::{
    FakeServer, FakeServerConfig, Outcome, ScenarioClock, ScriptScope, CONVERSATION_HEADER,
};
use rebound_sim::scenario::{Answer, Scenario};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const A: ProviderKind = ProviderKind::Anthropic;
const O: ProviderKind = ProviderKind::OpenAi;
const R: ProviderKind = ProviderKind::OpenAiResponses;

/// What a raw HTTP/1.1 client received.
#[derive(Debug)]
struct Raw {
    /// Status, or `None` when the connection closed before a status line.
    status: Option<u16>,
    headers: Headers,
    /// The body, de-chunked.
    body: Vec<u8>,
    /// Whether the body ended properly (terminating chunk, or content-length reached).
    complete: bool,
    /// Every byte received.
    bytes: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }

    fn classify(&self, provider: ProviderKind) -> ProviderFailure {
        classify_http(
            provider,
            self.status.expect("a status"),
            &self.headers,
            &self.body,
            None,
        )
    }

    /// Decodes the body as a stream, as the runner would; a body that did not end cleanly
    /// is finished as it stands (the connection is gone).
    fn decode(&self, provider: ProviderKind) -> Result<AssistantResponse, ProviderFailure> {
        let mut d = StreamDecoder::new(provider);
        // Feed in small pieces, as a network would.
        for piece in self.body.chunks(7) {
            if d.feed(piece).is_err() {
                break;
            }
        }
        d.finish().map(answered)
    }
}

/// What was answered, without who answered: the stream's id and model, checked here once
/// (the fake server names every response) so the comparisons are of the answer.
fn answered(r: AssistantResponse) -> AssistantResponse {
    assert!(
        r.id().is_some_and(|id| !id.is_empty()) && r.model().is_some(),
        "the fake server names its responses: {r:?}"
    );
    let problems = r.input_problems().to_vec();
    AssistantResponse::new(r.message, r.stop_reason)
        .with_usage(r.usage)
        .with_input_problems(problems)
}

fn parse_raw(bytes: Vec<u8>) -> Raw {
    let Some(head_end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Raw {
            status: None,
            headers: Headers::new(),
            body: Vec::new(),
            complete: false,
            bytes,
        };
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok());
    let headers: Headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &bytes[head_end + 4..];
    let (body, complete) = if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        dechunk(rest)
    } else if let Some(n) = headers
        .get("content-length")
        .and_then(|v| v.parse::<usize>().ok())
    {
        (rest[..rest.len().min(n)].to_vec(), rest.len() >= n)
    } else {
        (rest.to_vec(), true)
    };
    Raw {
        status,
        headers,
        body,
        complete,
        bytes,
    }
}

/// De-chunks a chunked body; `complete` only when the terminating zero chunk arrived.
fn dechunk(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let Ok(size) = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16)
        else {
            return (body, false);
        };
        rest = &rest[eol + 2..];
        if size == 0 {
            return (body, rest.starts_with(b"\r\n"));
        }
        if rest.len() < size {
            body.extend_from_slice(rest);
            return (body, false);
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size..];
        if rest.len() < 2 {
            return (body, false);
        }
        rest = &rest[2..];
    }
}

/// Sends one request with `connection: close` and reads until the server closes.
async fn raw(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Raw {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).await.expect("write head");
    // The server may answer (413) and close before reading all of a huge body.
    let _ = s.write_all(body).await;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
    }
    parse_raw(bytes)
}

fn auth(provider: ProviderKind) -> Vec<(&'static str, &'static str)> {
    match provider {
        A => vec![
            ("x-api-key", "sk-ant-test-key"),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
        ],
        O | R => vec![
            ("authorization", "Bearer sk-test-key"),
            ("content-type", "application/json"),
        ],
        other => panic!("no headers written for {other:?} yet"),
    }
}

fn path(provider: ProviderKind) -> &'static str {
    match provider {
        A => "/v1/messages",
        O => "/v1/chat/completions",
        R => "/v1/responses",
        other => panic!("no path written for {other:?} yet"),
    }
}

fn user_body(provider: ProviderKind, stream: bool) -> Vec<u8> {
    let body = match provider {
        A => json!({"model": "claude-test", "max_tokens": 256, "stream": stream,
                    "messages": [{"role": "user", "content": "Fix the failing test."}]}),
        O => json!({"model": "gpt-test", "stream": stream,
                    "messages": [{"role": "user", "content": "Fix the failing test."}]}),
        R => json!({"model": "gpt-test", "stream": stream, "store": false,
                    "input": [{"role": "user", "content": "Fix the failing test."}]}),
        other => panic!("no body written for {other:?} yet"),
    };
    body.to_string().into_bytes()
}

async fn send(server: &FakeServer, provider: ProviderKind, stream: bool) -> Raw {
    raw(
        server.addr(),
        path(provider),
        &auth(provider),
        &user_body(provider, stream),
    )
    .await
}

async fn start(scenario: Value) -> FakeServer {
    let scenario = Scenario::from_json(&scenario.to_string()).expect("a valid scenario");
    FakeServer::start(FakeServerConfig::new(scenario, 1))
        .await
        .expect("the server starts")
}

fn with_faults(faults: Value) -> Value {
    json!({"turns": [{"faults": faults, "answer": {
        "text": "Let me read the parser, it is where the failing test points.",
        "tool_calls": [{"name": "read", "input": {"path": "src/parse.rs"}}]}}]})
}

/// `response` without the reasoning item the fake model adds on the Responses API.
fn without_reasoning(mut response: AssistantResponse) -> AssistantResponse {
    response
        .message
        .content
        .retain(|b| !matches!(b, rebound_core::ContentBlock::Reasoning { .. }));
    response
}

/// The scripted answer to `user_body`, with the usage the server reports for it.
fn expected_answer() -> AssistantResponse {
    let s = Scenario::from_json(&with_faults(json!([])).to_string()).expect("scenario");
    let request = rebound_core::Conversation::from(vec![rebound_core::Message::user_text(
        "Fix the failing test.",
    )]);
    rebound_sim::scenario::with_usage(s.turns[0].answer.response(0, false), &request)
}

#[tokio::test]
async fn healthy_streams_decode_into_the_scripted_answer_for_every_provider() {
    for provider in [A, O, R] {
        // One script for every request: the same request again takes its next step.
        let scenario = Scenario::from_json(&with_faults(json!([])).to_string()).expect("valid");
        let config = FakeServerConfig::new(scenario, 1).with_script(ScriptScope::Shared);
        let server = FakeServer::start(config).await.expect("the server starts");
        let r = send(&server, provider, true).await;
        assert_eq!(r.status, Some(200));
        assert!(r.complete, "a clean end: terminating chunk sent");
        assert!(r
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")));
        let id_header = if provider == A {
            "request-id"
        } else {
            "x-request-id"
        };
        assert!(r.header(id_header).is_some_and(|v| v.starts_with("req_")));
        let answer = r.decode(provider).expect("a complete answer");
        assert_eq!(
            answer.message.content.len() - expected_answer().message.content.len(),
            usize::from(provider == R),
            "on the Responses API a reasoning item comes first"
        );
        assert_eq!(without_reasoning(answer), expected_answer());
        // After the script: the final "Done.".
        let r = send(&server, provider, true).await;
        let done = without_reasoning(r.decode(provider).expect("done"));
        assert_eq!(
            done.message,
            Answer::text("Done.").response(1, false).message
        );
        server.shutdown().await;
    }
}

#[tokio::test]
async fn non_streaming_requests_get_json_answers() {
    for provider in [A, O, R] {
        let server = start(with_faults(json!([]))).await;
        let r = send(&server, provider, false).await;
        assert_eq!(r.status, Some(200));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let got = wire::parse_response(provider, &r.body).expect("a response");
        assert_eq!(without_reasoning(got).message, expected_answer().message);
        server.shutdown().await;
    }
}

#[tokio::test]
async fn http_faults_carry_status_provider_body_and_headers() {
    let server = start(with_faults(json!([
        {"type": "http", "status": 429, "headers": {
            "retry-after": "3", "retry-after-ms": "2500", "x-should-retry": "true",
            "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:00Z",
            "request-id": "req_scripted"}},
        {"type": "http", "status": 529},
        {"type": "http", "status": 500, "headers": {"x-should-retry": "false"}},
        {"type": "http", "status": 401}
    ])))
    .await;
    let r = send(&server, A, true).await;
    assert_eq!(r.status, Some(429));
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.header("retry-after-ms"), Some("2500"));
    assert_eq!(
        r.header("anthropic-ratelimit-requests-reset"),
        Some("2030-01-01T00:00:00Z")
    );
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    let f = r.classify(A);
    assert_eq!(f.kind, FailureKind::RateLimited);
    assert_eq!(f.retry_after_ms, Some(2_500));
    assert_eq!(f.should_retry, Some(true));
    assert_eq!(f.request_id.as_deref(), Some("req_scripted"));

    let r = send(&server, A, true).await;
    assert_eq!(r.status, Some(529));
    assert_eq!(
        r.body,
        br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
    );
    assert_eq!(r.classify(A).kind, FailureKind::Unavailable);
    assert!(r.bytes.starts_with(b"HTTP/1.1 529 Overloaded\r\n"));

    let r = send(&server, A, true).await;
    assert_eq!(r.classify(A).should_retry, Some(false));
    let r = send(&server, A, true).await;
    assert_eq!(r.classify(A).kind, FailureKind::AuthFailed);
    server.shutdown().await;

    let server = start(with_faults(json!([{"type": "http", "status": 429}]))).await;
    let r = send(&server, O, true).await;
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(r.classify(O).kind, FailureKind::RateLimited);
    server.shutdown().await;
}

#[tokio::test]
async fn a_reset_closes_the_connection_before_any_header_then_the_answer_follows() {
    let server = start(with_faults(
        json!([{"type": "transport", "fault": "reset"}]),
    ))
    .await;
    let r = send(&server, A, true).await;
    assert_eq!(r.status, None);
    assert!(r.bytes.is_empty(), "not one byte: {:?}", r.bytes);
    let r = send(&server, A, true).await;
    assert_eq!(r.decode(A).expect("answer"), expected_answer());
    server.shutdown().await;
}

#[tokio::test]
async fn a_timeout_holds_the_connection_silent_then_closes_it() {
    let server = start(with_faults(json!([
        {"type": "transport", "fault": "timeout", "after_ms": 300}
    ])))
    .await;
    let t = Instant::now();
    let r = send(&server, O, true).await;
    assert!(t.elapsed() >= Duration::from_millis(300));
    assert!(r.bytes.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn a_stream_cut_after_events_ends_without_the_terminating_chunk() {
    for provider in [A, O, R] {
        let server = start(with_faults(
            json!([{"type": "stream_cut", "after_events": 3}]),
        ))
        .await;
        let r = send(&server, provider, true).await;
        assert_eq!(r.status, Some(200));
        assert!(!r.complete, "the client must see an incomplete body");
        let events = r.body.windows(2).filter(|w| w == b"\n\n").count();
        assert_eq!(events, 3, "{}", String::from_utf8_lossy(&r.body));
        let f = r.decode(provider).expect_err("a cut stream");
        assert_eq!(f.kind, FailureKind::StreamMalformed);
        assert_eq!(f.transport, Some(TransportFault::StreamCut));
        // The next request gets the whole answer.
        let r = send(&server, provider, true).await;
        assert_eq!(
            without_reasoning(r.decode(provider).expect("answer")),
            expected_answer()
        );
        server.shutdown().await;
    }
}

#[tokio::test]
async fn a_stream_cut_never_lets_the_message_complete() {
    for provider in [A, O, R] {
        let server = start(with_faults(
            json!([{"type": "stream_cut", "after_events": 1000}]),
        ))
        .await;
        let r = send(&server, provider, true).await;
        assert!(!r.complete);
        let f = r.decode(provider).expect_err("cut");
        assert_eq!(f.transport, Some(TransportFault::StreamCut));
        server.shutdown().await;
    }
}

#[tokio::test]
async fn a_stream_cut_after_bytes_can_end_inside_an_event() {
    for provider in [A, O, R] {
        let server = start(with_faults(
            json!([{"type": "stream_cut_bytes", "after_bytes": 250}]),
        ))
        .await;
        let r = send(&server, provider, true).await;
        assert!(!r.complete);
        assert_eq!(r.body.len(), 250);
        let f = r.decode(provider).expect_err("cut");
        assert_eq!(f.kind, FailureKind::StreamMalformed);
        server.shutdown().await;
    }
}

#[tokio::test]
async fn a_non_streaming_cut_is_an_incomplete_json_body() {
    let server = start(with_faults(
        json!([{"type": "stream_cut", "after_events": 2}]),
    ))
    .await;
    let r = send(&server, A, false).await;
    assert_eq!(r.status, Some(200));
    assert!(!r.complete);
    assert!(wire::parse_response(A, &r.body).is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn a_mid_stream_error_event_is_classified_by_its_type() {
    for provider in [A, O, R] {
        let server = start(with_faults(json!([
            {"type": "stream_error", "error_type": "overloaded_error", "message": "Overloaded"}
        ])))
        .await;
        let r = send(&server, provider, true).await;
        assert_eq!(r.status, Some(200));
        assert!(
            r.complete,
            "the provider ends the stream after its error event"
        );
        let f = r.decode(provider).expect_err("an error event");
        assert_eq!(f.kind, FailureKind::Unavailable, "{f}");
        server.shutdown().await;
    }
    // Without a stream: the HTTP error of that type.
    let server = start(with_faults(json!([{"type": "stream_error"}]))).await;
    let r = send(&server, A, false).await;
    assert_eq!(r.status, Some(529));
    server.shutdown().await;
}

/// The text a client decodes from a stream body before it fails, and the failure.
fn text_before_failure(provider: ProviderKind, body: &[u8]) -> (String, Option<ProviderFailure>) {
    let mut d = StreamDecoder::new(provider);
    let mut deltas = Vec::new();
    let fed = d.feed_into(body, &mut deltas);
    let text = deltas
        .into_iter()
        .filter_map(|delta| match delta {
            wire::StreamDelta::Text { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    (text, fed.err().or_else(|| d.finish().err()))
}

#[tokio::test]
async fn a_stream_error_after_n_text_deltas_comes_mid_answer_on_every_provider() {
    let answer = "Let me read the parser, it is where the failing test points.";
    for provider in [A, O, R] {
        let server = start(with_faults(json!([
            {"type": "stream_error", "after_deltas": 2},
            {"type": "stream_error", "after_deltas": 9},
            {"type": "stream_error"}
        ])))
        .await;
        // The encoders send text 24 bytes a delta: two deltas are the first 48 bytes.
        let r = send(&server, provider, true).await;
        assert!(
            r.complete,
            "{provider}: the stream ends after its error event"
        );
        let (text, failure) = text_before_failure(provider, &r.body);
        assert_eq!(text, answer[..48], "{provider}");
        let failure = failure.unwrap_or_else(|| panic!("{provider}: no failure"));
        assert_eq!(
            failure.kind,
            FailureKind::Unavailable,
            "{provider}: {failure}"
        );
        // More deltas than the answer has: the error follows its last, before the tool call.
        let r = send(&server, provider, true).await;
        let (text, failure) = text_before_failure(provider, &r.body);
        assert_eq!(text, answer, "{provider}");
        assert!(failure.is_some(), "{provider}: the answer never completes");
        // By default, before any text, as before `after_deltas` existed.
        let r = send(&server, provider, true).await;
        let (text, failure) = text_before_failure(provider, &r.body);
        assert_eq!(text, "", "{provider}");
        assert!(failure.is_some(), "{provider}");
        // Then the answer, whole.
        let r = send(&server, provider, true).await;
        let answered = without_reasoning(r.decode(provider).expect("the answer"));
        assert_eq!(answered, expected_answer(), "{provider}");
        server.shutdown().await;
    }
}

#[tokio::test]
async fn malformed_streams_and_bodies_fail_as_malformed() {
    for provider in [A, O, R] {
        let server = start(with_faults(json!([
            {"type": "malformed_stream"}, {"type": "malformed_stream"}
        ])))
        .await;
        let r = send(&server, provider, true).await;
        let f = r.decode(provider).expect_err("malformed");
        assert_eq!(f.transport, Some(TransportFault::MalformedStream), "{f}");
        let r = send(&server, provider, false).await;
        assert_eq!(r.status, Some(200));
        let f = wire::parse_response(provider, &r.body).expect_err("not JSON");
        assert_eq!(f.transport, Some(TransportFault::MalformedStream));
        server.shutdown().await;
    }
}

#[tokio::test]
async fn an_empty_message_is_an_empty_response() {
    for provider in [A, O, R] {
        let server = start(with_faults(json!([{"type": "empty_message"}]))).await;
        let r = send(&server, provider, true).await;
        assert!(r.complete);
        let f = r.decode(provider).expect_err("empty");
        assert_eq!(f.kind, FailureKind::EmptyResponse, "{f}");
        server.shutdown().await;
    }
}

#[tokio::test]
async fn scripted_context_overflow_uses_each_providers_real_text() {
    let server = start(with_faults(json!([{"type": "context_overflow"}]))).await;
    let r = send(&server, A, true).await;
    assert_eq!(r.status, Some(400));
    assert_eq!(
        r.json()["error"]["message"],
        "prompt is too long: 208310 tokens > 200000 maximum"
    );
    assert_eq!(r.classify(A).kind, FailureKind::ContextOverflow);
    server.shutdown().await;

    let server = start(with_faults(json!([{"type": "context_overflow"}]))).await;
    let r = send(&server, O, true).await;
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
    assert!(r.json()["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("This model's maximum context length is 128000 tokens")));
    assert_eq!(r.classify(O).kind, FailureKind::ContextOverflow);
    server.shutdown().await;
}

#[tokio::test]
async fn a_request_over_the_size_limit_overflows_without_moving_the_script() {
    let mut config = FakeServerConfig::new(
        Scenario::from_json(&with_faults(json!([])).to_string()).expect("scenario"),
        1,
    );
    config.context_limit_bytes = Some(1_000);
    let server = FakeServer::start(config).await.expect("start");
    let big = "x".repeat(5_000);
    let body = json!({"model": "m", "max_tokens": 10, "stream": true,
                      "messages": [{"role": "user", "content": big}]});
    let r = raw(
        server.addr(),
        path(A),
        &auth(A),
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, Some(400));
    assert_eq!(r.classify(A).kind, FailureKind::ContextOverflow);
    assert_eq!(
        server.requests()[0].outcome,
        Outcome::Overflow {
            bytes: 5_000,
            limit: 1_000
        }
    );
    let r = send(&server, A, true).await;
    assert_eq!(r.decode(A).expect("answer"), expected_answer());
    server.shutdown().await;
}

#[tokio::test]
async fn a_stall_delays_the_stream_after_its_first_event() {
    let server = start(with_faults(json!([{"type": "stall", "ms": 1000}]))).await;
    let t = Instant::now();
    let mut s = TcpStream::connect(server.addr()).await.expect("connect");
    let body = user_body(A, true);
    let mut req = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in auth(A) {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    s.write_all(&body).await.expect("write");
    let mut buf = vec![0u8; 65536];
    let n = s.read(&mut buf).await.expect("headers and first event");
    assert!(n > 0);
    let first_at = t.elapsed();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.expect("rest");
    let mut all = buf[..n].to_vec();
    all.extend_from_slice(&rest);
    let r = parse_raw(all);
    assert!(first_at < Duration::from_millis(800), "{first_at:?}");
    assert!(t.elapsed() >= Duration::from_millis(1000));
    assert_eq!(
        r.decode(A).expect("the answer after the stall"),
        expected_answer()
    );
    assert_eq!(server.requests()[0].stalled_ms, 1000);
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_gives_up_during_a_stall_leaves_the_next_step_to_its_retry() {
    let server = start(with_faults(json!([
        {"type": "stall", "ms": 600}, {"type": "http", "status": 529}
    ])))
    .await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(150))
        .build()
        .expect("client");
    let url = format!("{}/v1/messages", server.base_url());
    let mut request = client.post(&url).body(user_body(A, true));
    for (n, v) in auth(A) {
        request = request.header(n, v);
    }
    let sent = request.send().await;
    assert!(sent.is_err(), "the client times out before any header");
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The stall was used up; the 529 after it was not.
    let r = send(&server, A, true).await;
    assert_eq!(r.status, Some(529));
    let r = send(&server, A, true).await;
    assert_eq!(r.decode(A).expect("answer"), expected_answer());
    server.shutdown().await;
}

#[tokio::test]
async fn a_slow_drip_spaces_the_events_out() {
    let server = start(with_faults(
        json!([{"type": "slow_drip", "interval_ms": 20}]),
    ))
    .await;
    let t = Instant::now();
    let r = send(&server, O, true).await;
    let events = wire::encode_stream(O, &expected_answer(), "m", "i").len() as u32;
    assert!(t.elapsed() >= Duration::from_millis(20) * (events - 1));
    assert_eq!(r.decode(O).expect("answer"), expected_answer());
    server.shutdown().await;
}

#[tokio::test]
async fn conditional_answers_follow_the_conversation_received() {
    let scenario = json!({"turns": [
        {"answer": {"tool_calls": [{"id": "toolu_1", "name": "read", "input": {"path": "a"}}]}},
        {"answer": {"text": "It worked."},
         "when_last_tool_error": {"text": "The read failed; trying another path."}}
    ]});
    let server = start(scenario.clone()).await;
    let r = send(&server, A, true).await;
    assert!(r.decode(A).is_ok());
    let body = json!({"model": "m", "max_tokens": 10, "stream": true, "messages": [
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "no such file", "is_error": true}]}
    ]});
    let r = raw(
        server.addr(),
        path(A),
        &auth(A),
        body.to_string().as_bytes(),
    )
    .await;
    let got = r.decode(A).expect("answer");
    assert_eq!(
        got.message,
        Answer::text("The read failed; trying another path.")
            .response(1, true)
            .message
    );
    assert_eq!(
        server.requests()[1].outcome,
        Outcome::Answered {
            turn: 1,
            alternate: true
        }
    );
    server.shutdown().await;

    // OpenAI's formats carry no error flag: a result in core's error words is an error.
    for provider in [O, R] {
        let server = start(scenario.clone()).await;
        let call = send(&server, provider, true)
            .await
            .decode(provider)
            .expect("the tool call");
        let failed = ContentBlock::ToolResult(ToolResultBlock {
            tool_use_id: "toolu_1".into(),
            parts: vec![ToolResultPart::text(tool_error_text(
                "read",
                "no such file",
            ))],
            is_error: true,
        });
        let conversation = Conversation::from(vec![
            Message::user_text("Fix the failing test."),
            call.message,
            Message::user(vec![failed]),
        ]);
        let body = wire::request_body(
            provider,
            &conversation,
            &wire::RequestParams::new("gpt-test", 64),
        )
        .expect("a request");
        let r = raw(
            server.addr(),
            path(provider),
            &auth(provider),
            body.to_string().as_bytes(),
        )
        .await;
        assert!(r.decode(provider).is_ok(), "{provider}");
        assert_eq!(
            server.requests()[1].outcome,
            Outcome::Answered {
                turn: 1,
                alternate: true
            },
            "{provider}"
        );
        server.shutdown().await;
    }
}

#[tokio::test]
async fn broken_tool_pairing_gets_the_providers_real_400() {
    let server = start(json!({})).await;
    let missing = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]},
        {"role": "user", "content": "what happened?"}
    ]});
    let r = raw(
        server.addr(),
        path(A),
        &auth(A),
        missing.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, Some(400));
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert_eq!(
        r.json()["error"]["message"],
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: \
         toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the \
         next message."
    );
    assert_eq!(r.classify(A).kind, FailureKind::BadRequest);

    let unknown = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "ok"}]}
    ]});
    let r = raw(
        server.addr(),
        path(A),
        &auth(A),
        unknown.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, Some(400));
    let m = r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        m.starts_with(
            "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9"
        ),
        "{m}"
    );

    let out_of_order = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "read", "input": {}},
            {"type": "tool_use", "id": "b", "name": "read", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "b", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "a", "content": "ok"}]}
    ]});
    let r = raw(
        server.addr(),
        path(A),
        &auth(A),
        out_of_order.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, Some(400));

    let openai_missing = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "user", "content": "well?"}
    ]});
    let r = raw(
        server.addr(),
        path(O),
        &auth(O),
        openai_missing.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, Some(400));
    assert!(r.json()["error"]["message"].as_str().is_some_and(|m| m
        .starts_with("An assistant message with 'tool_calls' must be followed by tool messages")));
    assert_eq!(r.json()["error"]["param"], "messages.[1].role");
    // None of these moved the script.
    assert!(server
        .requests()
        .iter()
        .all(|r| matches!(r.outcome, Outcome::Rejected { status: 400, .. })));
    let r = send(&server, A, true).await;
    assert_eq!(
        r.decode(A).expect("answer").message,
        Answer::text("Done.").response(0, false).message
    );
    server.shutdown().await;
}

#[tokio::test]
async fn missing_keys_and_headers_get_the_real_401_and_400() {
    let mut config = FakeServerConfig::healthy();
    config.api_key = Some("sk-the-right-key-123456".into());
    let server = FakeServer::start(config).await.expect("start");
    let addr = server.addr();
    let body = user_body(A, false);
    let r = raw(addr, path(A), &[("anthropic-version", "2023-06-01")], &body).await;
    assert_eq!(r.status, Some(401));
    assert_eq!(
        r.body,
        br#"{"type":"error","error":{"type":"authentication_error","message":"x-api-key header is required"}}"#
    );
    let r = raw(
        addr,
        path(A),
        &[("x-api-key", "sk-the-right-key-123456")],
        &body,
    )
    .await;
    assert_eq!(r.status, Some(400));
    assert_eq!(
        r.json()["error"]["message"],
        "anthropic-version: header is required"
    );
    let wrong = [("x-api-key", "wrong"), ("anthropic-version", "2023-06-01")];
    let r = raw(addr, path(A), &wrong, &body).await;
    assert_eq!(r.status, Some(401));
    // Recent SDKs send the key as a bearer token.
    let bearer = [
        ("authorization", "Bearer sk-the-right-key-123456"),
        ("anthropic-version", "2023-06-01"),
    ];
    let r = raw(addr, path(A), &bearer, &body).await;
    assert_eq!(r.status, Some(200));

    let body = user_body(O, false);
    let r = raw(addr, path(O), &[], &body).await;
    assert_eq!(r.status, Some(401));
    assert!(r.json()["error"]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("You didn't provide an API key.")));
    let wrong = [("authorization", "Bearer sk-wrong-key-abcdefghijkl")];
    let r = raw(addr, path(O), &wrong, &body).await;
    assert_eq!(r.status, Some(401));
    assert_eq!(r.json()["error"]["code"], "invalid_api_key");
    assert!(
        !String::from_utf8_lossy(&r.body).contains("abcdefgh"),
        "the key is masked"
    );
    assert_eq!(r.classify(O).kind, FailureKind::AuthFailed);
    let right = [("authorization", "Bearer sk-the-right-key-123456")];
    let r = raw(addr, path(O), &right, &body).await;
    assert_eq!(r.status, Some(200));
    server.shutdown().await;
}

#[tokio::test]
async fn bad_input_gets_provider_errors_never_a_panic() {
    let mut config = FakeServerConfig::healthy();
    config.max_body_bytes = 10_000;
    let server = FakeServer::start(config).await.expect("start");
    let addr = server.addr();
    for provider in [A, O, R] {
        let r = raw(addr, path(provider), &auth(provider), b"{not json").await;
        assert_eq!(r.status, Some(400));
        assert_eq!(r.classify(provider).kind, FailureKind::BadRequest);
        let r = raw(addr, path(provider), &auth(provider), br#"{"messages": 3}"#).await;
        assert_eq!(r.status, Some(400));
        let empty = br#"{"model": "m", "messages": []}"#;
        let r = raw(addr, path(provider), &auth(provider), empty).await;
        assert_eq!(r.status, Some(400));
        let huge = vec![b'x'; 20_000];
        let r = raw(addr, path(provider), &auth(provider), &huge).await;
        assert_eq!(r.status, Some(413));
        assert_eq!(r.classify(provider).kind, FailureKind::ContextOverflow);
    }
    let r = raw(addr, "/v2/nothing", &[], b"").await;
    assert_eq!(r.status, Some(404));
    // Not HTTP at all.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"\x00\x01garbage\r\n\r\n")
        .await
        .expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    // The server is still serving.
    let r = send(&server, A, true).await;
    assert_eq!(r.status, Some(200));
    server.shutdown().await;
}

#[tokio::test]
async fn the_request_log_has_method_path_redacted_headers_body_and_outcome() {
    let server = start(with_faults(json!([{"type": "http", "status": 529}]))).await;
    send(&server, A, true).await;
    send(&server, O, false).await;
    let log = server.requests();
    assert_eq!(log.len(), 2);
    assert_eq!(log[0].method, "POST");
    assert_eq!(log[0].path, "/v1/messages");
    assert_eq!(log[0].provider, Some(A));
    assert_eq!(log[0].header("x-api-key"), Some("<redacted>"));
    assert_eq!(log[1].header("authorization"), Some("<redacted>"));
    assert_eq!(log[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        log[0].body.as_ref().map(|b| b["model"].clone()),
        Some(json!("claude-test"))
    );
    assert!(
        matches!(&log[0].outcome, Outcome::Fault { fault } if fault.failure(A).status == Some(529))
    );
    assert_eq!(
        log[1].outcome,
        Outcome::Answered {
            turn: 0,
            alternate: false
        }
    );
    assert!(log[1].at_ms >= log[0].at_ms);
    // The same first message: one conversation, across wire formats.
    assert_eq!(
        (log[0].conversation, log[1].conversation),
        (Some(0), Some(0))
    );
    assert_eq!(log[0].request_id, "req_fake_000001", "ids count per server");
    let line = log[0].to_string();
    assert!(
        line.starts_with("#0 +")
            && line.contains("POST /v1/messages [anthropic] conversation 0 at 0ms -> fault: ")
            && line.contains("529"),
        "{line}"
    );
    let text = serde_json::to_string(&log).expect("serializable");
    assert!(!text.contains("sk-ant-test-key") && !text.contains("sk-test-key"));
    server.shutdown().await;
}

#[tokio::test]
async fn reqwest_sees_the_same_faults_as_a_raw_client() {
    let server = start(with_faults(json!([
        {"type": "transport", "fault": "reset"},
        {"type": "stream_cut", "after_events": 4}
    ])))
    .await;
    let client = reqwest::Client::new();
    let url = format!("{}/chat/completions", server.openai_base_url());
    let post = || {
        let mut r = client.post(&url).body(user_body(O, true));
        for (n, v) in auth(O) {
            r = r.header(n, v);
        }
        r
    };
    assert!(post().send().await.is_err(), "closed before headers");
    let response = post().send().await.expect("headers arrive");
    assert_eq!(response.status(), 200);
    let body = response.bytes().await;
    assert!(body.is_err(), "the body ends in an error, not a clean end");
    let response = post().send().await.expect("headers");
    let body = response.bytes().await.expect("a whole body");
    let mut d = StreamDecoder::new(O);
    d.feed(&body).expect("decodes");
    assert_eq!(answered(d.finish().expect("complete")), expected_answer());
    server.shutdown().await;
}

#[tokio::test]
async fn a_random_outage_fails_requests_inside_its_window_only() {
    let server = start(json!({"random": {"outages": [
        {"from_ms": 0, "until_ms": 1000, "fault": {"type": "http", "status": 503}}]}}))
    .await;
    let r = send(&server, O, true).await;
    assert_eq!(r.status, Some(503));
    assert_eq!(r.classify(O).kind, FailureKind::Unavailable);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let r = send(&server, O, true).await;
    assert_eq!(r.status, Some(200));
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_closes_the_port_and_open_connections() {
    let server = start(with_faults(json!([{"type": "stall", "ms": 60000}]))).await;
    let addr = server.addr();
    let pending =
        tokio::spawn(async move { raw(addr, path(A), &auth(A), &user_body(A, false)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    server.shutdown().await;
    let r = tokio::time::timeout(Duration::from_secs(2), pending)
        .await
        .expect("the stalled request ends with the server")
        .expect("join");
    assert_eq!(r.status, None);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn a_client_that_gives_up_during_a_mid_stream_stall_gets_the_answer_on_its_retry() {
    let server = start(with_faults(json!([{"type": "stall", "ms": 600}]))).await;
    let mut s = TcpStream::connect(server.addr()).await.expect("connect");
    let body = user_body(A, true);
    let mut req = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in auth(A) {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    s.write_all(&body).await.expect("write");
    let mut buf = vec![0u8; 65536];
    let n = s.read(&mut buf).await.expect("headers and the first event");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("message_start"));
    // The client's idle timeout fires: it hangs up mid-stream.
    drop(s);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let r = send(&server, A, true).await;
    assert_eq!(r.decode(A).expect("the answer"), expected_answer());
    server.shutdown().await;
}

/// An Anthropic request whose messages are `(role, text)` pairs, streamed.
fn anthropic_body(messages: &[(&str, &str)]) -> Vec<u8> {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, text)| json!({"role": role, "content": text}))
        .collect();
    json!({"model": "claude-test", "max_tokens": 64, "stream": true, "messages": messages})
        .to_string()
        .into_bytes()
}

/// Sends an Anthropic request with `messages` and the extra `headers`; returns what the
/// server logged for it.
async fn converse(
    server: &FakeServer,
    headers: &[(&str, &str)],
    messages: &[(&str, &str)],
) -> rebound_sim::fake::RequestRecord {
    let mut all = auth(A);
    all.extend_from_slice(headers);
    raw(server.addr(), path(A), &all, &anthropic_body(messages)).await;
    server.requests().pop().expect("logged")
}

/// One 529, then an answer, then a second answer.
fn one_fault_then_two_answers() -> Value {
    json!({"turns": [
        {"faults": [{"type": "http", "status": 529}], "answer": {"text": "First."}},
        {"answer": {"text": "Second."}}
    ]})
}

fn outcome(record: &rebound_sim::fake::RequestRecord) -> String {
    match &record.outcome {
        Outcome::Fault { .. } => "fault".to_owned(),
        Outcome::Answered { turn, .. } => format!("turn {turn}"),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn each_conversation_plays_the_scenario_from_its_start() {
    let server = start(one_fault_then_two_answers()).await;
    let a = [("user", "Fix the parser.")];
    let b = [("user", "Write the docs.")];
    let mut seen = Vec::new();
    for messages in [&a[..], &b[..], &a[..], &b[..]] {
        let r = converse(&server, &[], messages).await;
        seen.push((r.conversation, outcome(&r)));
    }
    let a_next = [
        ("user", "Fix the parser."),
        ("assistant", "First."),
        ("user", "Go on."),
    ];
    let r = converse(&server, &[], &a_next).await;
    seen.push((r.conversation, outcome(&r)));
    assert_eq!(
        seen,
        [
            (Some(0), "fault".to_owned()),
            (Some(1), "fault".to_owned()),
            (Some(0), "turn 0".to_owned()),
            (Some(1), "turn 0".to_owned()),
            (Some(0), "turn 1".to_owned()),
        ],
        "each conversation its own 529 first, then its own answers"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_conversation_header_tells_apart_conversations_with_the_same_first_message() {
    let server = start(one_fault_then_two_answers()).await;
    let same = [("user", "Fix the parser.")];
    let mut seen = Vec::new();
    for id in ["agent-1", "agent-2", "agent-1", "agent-2"] {
        let r = converse(&server, &[(CONVERSATION_HEADER, id)], &same).await;
        seen.push((r.conversation, outcome(&r)));
    }
    assert_eq!(
        seen,
        [
            (Some(0), "fault".to_owned()),
            (Some(1), "fault".to_owned()),
            (Some(0), "turn 0".to_owned()),
            (Some(1), "turn 0".to_owned()),
        ]
    );
    // The header names the conversation, whatever its messages become.
    let other = [("user", "Something else entirely.")];
    let r = converse(&server, &[(CONVERSATION_HEADER, "agent-1")], &other).await;
    assert_eq!(
        (r.conversation, outcome(&r)),
        (Some(0), "turn 1".to_owned())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_first_request_again_is_a_retry_until_answered_then_a_new_conversation() {
    let server = start(one_fault_then_two_answers()).await;
    let opening = [("user", "Fix the parser.")];
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = converse(&server, &[], &opening).await;
        seen.push((r.conversation, outcome(&r)));
    }
    assert_eq!(
        seen,
        [
            (Some(0), "fault".to_owned()),
            (Some(0), "turn 0".to_owned()),
            (Some(1), "fault".to_owned()),
        ],
        "the retry after the 529 continues; the same opening after the answer starts over"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_shared_script_plays_once_for_every_request() {
    let scenario = Scenario::from_json(&one_fault_then_two_answers().to_string()).expect("valid");
    let config = FakeServerConfig::new(scenario, 1).with_script(ScriptScope::Shared);
    let server = FakeServer::start(config).await.expect("starts");
    let mut seen = Vec::new();
    for messages in ["Fix the parser.", "Write the docs.", "Fix the parser."] {
        let r = converse(&server, &[], &[("user", messages)]).await;
        seen.push((r.conversation, outcome(&r)));
    }
    assert_eq!(
        seen,
        [
            (Some(0), "fault".to_owned()),
            (Some(0), "turn 0".to_owned()),
            (Some(0), "turn 1".to_owned()),
        ]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_conversation_compacted_with_the_servers_summary_is_the_same_conversation() {
    use rebound_core::compaction::{summarized, SUMMARY_PROMPT};
    use rebound_core::{Conversation, Message};
    let server = start(json!({"turns": [
        {"answer": {"text": "First."}},
        {"answer": {"text": "Second."}}
    ]}))
    .await;
    let task = ("user", "Fix the parser.");
    let r = converse(&server, &[], &[task]).await;
    assert_eq!(outcome(&r), "turn 0");
    // The summary request, as rebound's runner sends it.
    let summary_request = [task, ("assistant", "First."), ("user", SUMMARY_PROMPT)];
    let answer = raw(
        server.addr(),
        path(A),
        &auth(A),
        &anthropic_body(&summary_request),
    )
    .await;
    let summary = answer.decode(A).expect("a summary").message.text();
    assert_eq!(server.requests()[1].outcome, Outcome::Summarized);
    // The conversation as rebound compacts it: the summary, then the kept tail.
    let mut before = Conversation::new();
    before.push(Message::user_text(task.1));
    before.push(Message::assistant_text("First."));
    let after = summarized(&before, 1, &summary);
    let opening = after.messages()[0].text();
    let r = converse(
        &server,
        &[],
        &[
            ("user", &opening),
            ("assistant", "First."),
            ("user", "Go on."),
        ],
    )
    .await;
    assert_eq!(
        (r.conversation, outcome(&r)),
        (Some(0), "turn 1".to_owned())
    );
    server.shutdown().await;
}

/// Every request in the first 300 ms of the scenario's clock gets a 503.
fn outage_for_300_ms() -> Value {
    json!({"random": {"outages": [
        {"from_ms": 0, "until_ms": 300, "fault": {"type": "http", "status": 503}}]}})
}

#[tokio::test]
async fn the_scenarios_clock_starts_at_each_conversations_first_request() {
    let server = start(outage_for_300_ms()).await;
    // Long after the server started: the window is still ahead of the first conversation.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = converse(&server, &[], &[("user", "Fix the parser.")]).await;
    assert_eq!(outcome(&r), "fault");
    assert_eq!(r.scenario_ms, Some(0));
    assert!(r.at_ms >= 400, "{}", r.at_ms);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Its window is over; a conversation that starts now has its own.
    let r = converse(
        &server,
        &[],
        &[
            ("user", "Fix the parser."),
            ("assistant", "x"),
            ("user", "y"),
        ],
    )
    .await;
    assert_eq!(
        (r.conversation, outcome(&r)),
        (Some(0), "turn 0".to_owned())
    );
    let r = converse(&server, &[], &[("user", "Write the docs.")]).await;
    assert_eq!((r.conversation, outcome(&r)), (Some(1), "fault".to_owned()));
    server.shutdown().await;
}

#[tokio::test]
async fn on_the_servers_clock_a_window_is_a_moment_of_the_servers_life() {
    let scenario = Scenario::from_json(&outage_for_300_ms().to_string()).expect("valid");
    let config = FakeServerConfig::new(scenario, 1).with_clock(ScenarioClock::ServerStart);
    let server = FakeServer::start(config).await.expect("starts");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = converse(&server, &[], &[("user", "Fix the parser.")]).await;
    assert_eq!(
        outcome(&r),
        "turn 0",
        "the window was over before the request"
    );
    assert!(r.scenario_ms >= Some(400), "{:?}", r.scenario_ms);
    server.shutdown().await;
}

/// One streamed Gemini request for `conversation`, its body encoded by rebound for the
/// target `identity` (which decides whose reasoning goes), sent with `key`.
async fn gemini_turn(
    server: &FakeServer,
    conversation: &Conversation,
    identity: &rebound_core::TargetIdentity,
    key: &str,
) -> Raw {
    let g = ProviderKind::Gemini;
    let mut params = wire::RequestParams::new("gemini-test", 256);
    params.identity = Some(identity);
    let body = wire::request_body(g, conversation, &params).expect("a body");
    let path = format!("/v1beta{}", wire::request_path(g, "gemini-test", true));
    let headers = [
        ("x-goog-api-key", key),
        ("content-type", "application/json"),
    ];
    raw(server.addr(), &path, &headers, body.to_string().as_bytes()).await
}

#[tokio::test]
async fn a_thought_signature_goes_back_to_its_key_only_and_another_keys_is_refused() {
    let g = ProviderKind::Gemini;
    let server = start(json!({"turns": [
        {"answer": {"text": "Reading it.",
                    "tool_calls": [{"name": "read", "input": {"path": "src/parse.rs"}}]}},
        {"answer": {"text": "Done reading."}},
        {"answer": {"text": "Done again."}}]}))
    .await;
    // What the runner records for each key: the target that produced the reasoning.
    let (key_a, key_b) = ("gm-key-a", "gm-key-b");
    let (target_a, target_b) = (
        rebound_core::TargetIdentity::new("gemini:key-a"),
        rebound_core::TargetIdentity::new("gemini:key-b"),
    );
    let mut conversation = Conversation::from(vec![Message::user_text("Fix the failing test.")]);

    // The first call carries a signature, which rebound keeps before the call it signs.
    let first = gemini_turn(&server, &conversation, &target_a, key_a).await;
    assert_eq!(first.status, Some(200));
    let mut answer = first.decode(g).expect("an answer").message;
    let call_at = answer
        .content
        .iter()
        .position(|b| matches!(b, ContentBlock::ToolUse { .. }))
        .expect("a call");
    let ContentBlock::Reasoning { item, .. } = &answer.content[call_at - 1] else {
        panic!("a signature before the call: {:?}", answer.content);
    };
    let signature = item["thoughtSignature"]
        .as_str()
        .expect("a signature")
        .to_owned();
    let call_id = match &answer.content[call_at] {
        ContentBlock::ToolUse { id, .. } => id.clone(),
        _ => unreachable!(),
    };
    for block in &mut answer.content {
        if let ContentBlock::Reasoning { owner, .. } = block {
            *owner = Some(target_a.clone());
        }
    }
    conversation.push(answer);
    conversation.push(Message {
        role: rebound_core::Role::User,
        content: vec![ContentBlock::tool_result(
            call_id,
            vec![ToolResultPart::text("fn parse() {}")],
            false,
        )],
    });

    // Back to the key that got it: the signature goes back on the call, and passes.
    let same = gemini_turn(&server, &conversation, &target_a, key_a).await;
    assert_eq!(
        same.status,
        Some(200),
        "{}",
        String::from_utf8_lossy(&same.body)
    );
    assert_eq!(
        same.decode(g).expect("an answer").message.text(),
        "Done reading."
    );
    let sent = server.requests()[1].body.clone().expect("a JSON body");
    let call_part = sent["contents"][1]["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .find(|p| p.get("functionCall").is_some())
        .expect("the call")
        .clone();
    assert_eq!(call_part["thoughtSignature"], json!(signature));

    // The same body with another key: Gemini's 400, and the script does not move.
    let other = gemini_turn(&server, &conversation, &target_a, key_b).await;
    assert_eq!(other.status, Some(400));
    assert_eq!(
        other.json(),
        json!({"error": {"code": 400, "message": "Corrupted thought signature.",
                         "status": "INVALID_ARGUMENT"}})
    );
    assert!(matches!(
        &server.requests()[2].outcome,
        Outcome::Rejected { status: 400, reason } if reason == "Corrupted thought signature."
    ));
    let failure = other.classify(g);
    assert_eq!(failure.status, Some(400));
    // Reasoning the provider could not verify: retried once without it.
    assert_eq!(failure.kind, FailureKind::ReasoningRejected, "{failure:?}");

    // What rebound sends to the other key: no signature of key A's, the documented stand-in
    // on the call instead, which passes.
    let to_b = gemini_turn(&server, &conversation, &target_b, key_b).await;
    assert_eq!(
        to_b.status,
        Some(200),
        "{}",
        String::from_utf8_lossy(&to_b.body)
    );
    let sent = server.requests()[3].body.clone().expect("a JSON body");
    assert!(!sent.to_string().contains(&signature));
    assert!(sent
        .to_string()
        .contains("skip_thought_signature_validator"));
    server.shutdown().await;
}
