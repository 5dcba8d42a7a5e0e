//! A hostile provider: real HTTP servers on 127.0.0.1 that send what no API should — bodies
//! of a gigabyte, endless streams, invalid UTF-8, JSON ten thousand levels deep, absurd
//! `retry-after`s, broken framing — and the `ProviderFailure` each one must become.
//!
//! Every request is wrapped in an outer timeout far above the provider's own: a test that
//! hits it has found an unbounded wait.

use crate::server;
use crate::table;

use rebound_core::{
    AssistantResponse, Conversation, FailureKind, MachineConfig, Message, ProviderFailure,
    ProviderKind, RetryConfig, RunError, StreamDeadlines, TransportFault,
};
use rebound_effects::provider::{
    ApiKey, HttpProvider, HttpProviderConfig, Provider, ProviderRequest, SendError,
};
use rebound_effects::runner::{RunInput, Runner};
use server::{flood, serve, write, SSE_HEAD};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

const IDLE: Duration = Duration::from_millis(400);
const PROGRESS: Duration = Duration::from_millis(1_500);
/// Far above IDLE and PROGRESS: reaching it means a wait was not bounded.
const OUTER: Duration = Duration::from_secs(30);
const GIB: u64 = 1 << 30;

fn config(kind: ProviderKind, url: &str) -> HttpProviderConfig {
    let mut c = HttpProviderConfig::new(kind, "test-model", ApiKey::new("sk-test-hostile"));
    c.base_url = match kind {
        ProviderKind::Anthropic => url.to_owned(),
        // OpenAI's APIs; the server below speaks no other.
        _ => format!("{url}/v1"),
    };
    c.connect_timeout = Duration::from_secs(2);
    c
}

async fn send_to(kind: ProviderKind, url: &str) -> Result<AssistantResponse, ProviderFailure> {
    let provider = HttpProvider::new(config(kind, url)).expect("valid config");
    send(&provider).await
}

/// A request with this file's short deadlines.
fn request(conversation: &Conversation) -> ProviderRequest<'_> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).expect("a short duration");
    ProviderRequest::new(conversation, &[])
        .with_deadlines(StreamDeadlines::new(ms(IDLE), ms(PROGRESS)))
}

async fn send(provider: &HttpProvider) -> Result<AssistantResponse, ProviderFailure> {
    let conversation = Conversation::from(vec![Message::user_text("hi")]);
    let mut sink = |_: rebound_core::wire::StreamDelta<&str>| true;
    tokio::time::timeout(OUTER, provider.send(request(&conversation), &mut sink))
        .await
        .expect("the provider's own timeouts bound every wait")
        .map_err(|e| match e {
            SendError::Provider(failure) => failure,
            other => panic!("not a provider failure: {other}"),
        })
}

/// Asserts the failure's kind (and transport fault, when given); counts the case.
#[track_caller]
fn expect_failure(
    cases: &mut usize,
    name: &str,
    result: Result<AssistantResponse, ProviderFailure>,
    kind: FailureKind,
    fault: Option<TransportFault>,
) -> ProviderFailure {
    *cases += 1;
    let failure = match result {
        Ok(r) => panic!("{name}: expected {kind:?}, got a response {r:?}"),
        Err(f) => f,
    };
    assert_eq!(failure.kind, kind, "{name}: {failure:?}");
    if fault.is_some() {
        assert_eq!(failure.transport, fault, "{name}: {failure:?}");
    }
    assert!(!failure.message.contains('\n'), "{name}: {failure:?}");
    assert!(failure.message.len() < 4_000, "{name}: message too long");
    failure
}

fn head(status: &str, extra: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}\r\n").into_bytes()
}

async fn respond_once(socket: &mut TcpStream, bytes: &[u8]) {
    write(socket, bytes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_and_endless_bodies_end_in_a_typed_error_with_bounded_reads() {
    let mut cases = 0;

    // A 500 announcing a gigabyte body: only the bounded error-body read happens.
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    let s = serve(move |mut sock, _| {
        let w = w.clone();
        async move {
            let h = head(
                "500 Internal Server Error",
                &format!("content-length: {GIB}\r\n"),
            );
            write(&mut sock, &h).await;
            flood(&mut sock, &[b'x'; 64 * 1024], GIB, &w).await;
        }
    })
    .await;
    let started = Instant::now();
    let f = expect_failure(
        &mut cases,
        "gigabyte error body",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::ServerError,
        None,
    );
    assert_eq!(f.status, Some(500));
    assert!(started.elapsed() < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = written.load(Ordering::Relaxed);
    assert!(sent < 128 << 20, "the server got to write {sent} bytes");

    // The same, chunked and endless, for OpenAI.
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    let s = serve(move |mut sock, _| {
        let w = w.clone();
        async move {
            let h = head("503 Service Unavailable", "transfer-encoding: chunked\r\n");
            write(&mut sock, &h).await;
            let mut chunk = b"4000\r\n".to_vec();
            chunk.extend(std::iter::repeat_n(b'{', 0x4000));
            chunk.extend(b"\r\n");
            flood(&mut sock, &chunk, u64::MAX, &w).await;
        }
    })
    .await;
    let f = expect_failure(
        &mut cases,
        "endless chunked error body",
        send_to(ProviderKind::OpenAi, &s.url()).await,
        FailureKind::Unavailable,
        None,
    );
    assert_eq!(f.status, Some(503));

    // A 200 stream whose one line never ends: the SSE line limit.
    let s = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        write(&mut sock, b"data: ").await;
        flood(&mut sock, &[b'x'; 64 * 1024], GIB, &AtomicU64::new(0)).await;
    })
    .await;
    let f = expect_failure(
        &mut cases,
        "endless SSE line",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::StreamMalformed,
        Some(TransportFault::MalformedStream),
    );
    assert!(f.message.contains("longer than"), "{f:?}");

    // A stream of text deltas that never stops: the message size limit (64 MiB).
    let s = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        let start = server::anthropic_stream("");
        // message_start and content_block_start only.
        let cut = start
            .windows(b"event: content_block_delta".len())
            .position(|w| w == b"event: content_block_delta")
            .expect("delta event");
        write(&mut sock, &start[..cut]).await;
        let text = "y".repeat(512 * 1024);
        let delta = format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
        );
        flood(&mut sock, delta.as_bytes(), GIB, &AtomicU64::new(0)).await;
    })
    .await;
    let f = expect_failure(
        &mut cases,
        "endless text deltas",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::StreamMalformed,
        Some(TransportFault::MalformedStream),
    );
    assert!(f.message.contains("larger than"), "{f:?}");

    // Keep-alives at full speed, forever: no content within the progress timeout.
    let s = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        let ping = b"event: ping\ndata: {\"type\": \"ping\"}\n\n".repeat(256);
        flood(&mut sock, &ping, u64::MAX, &AtomicU64::new(0)).await;
    })
    .await;
    let started = Instant::now();
    expect_failure(
        &mut cases,
        "ping flood",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::StreamMalformed,
        Some(TransportFault::IdleTimeout),
    );
    assert!(started.elapsed() < PROGRESS * 4, "{:?}", started.elapsed());

    // One keep-alive comment just inside the idle timeout, forever (slowloris).
    for kind in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        let s = serve(|mut sock, _| async move {
            write(&mut sock, SSE_HEAD).await;
            while write(&mut sock, b": keep-alive\n\n").await {
                tokio::time::sleep(IDLE / 4).await;
            }
        })
        .await;
        expect_failure(
            &mut cases,
            "keep-alive drip",
            send_to(kind, &s.url()).await,
            FailureKind::StreamMalformed,
            Some(TransportFault::IdleTimeout),
        );
    }

    // An error body dripped one byte at a time, forever.
    let s = serve(|mut sock, _| async move {
        write(
            &mut sock,
            &head("529 Overloaded", "content-length: 1000000\r\n"),
        )
        .await;
        while write(&mut sock, b" ").await {
            tokio::time::sleep(IDLE / 4).await;
        }
    })
    .await;
    let started = Instant::now();
    let f = expect_failure(
        &mut cases,
        "dripped error body",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::Unavailable,
        None,
    );
    assert_eq!(f.status, Some(529));
    assert!(started.elapsed() < PROGRESS * 4, "{:?}", started.elapsed());

    table::check("provider-huge-bodies", cases);
}

#[tokio::test]
async fn invalid_utf8_and_deep_json_never_panic() {
    let mut cases = 0;
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));

    // Invalid UTF-8 inside a streamed text delta becomes U+FFFD; the message completes.
    let mut stream = server::anthropic_stream("AB");
    let at = stream
        .windows(4)
        .position(|w| w == b"\"AB\"")
        .expect("text");
    stream.splice(at + 1..at + 3, [0xff, 0xfe, b'!', 0xc3]);
    let s = serve(move |mut sock, _| {
        let stream = stream.clone();
        async move {
            write(&mut sock, SSE_HEAD).await;
            write(&mut sock, &stream).await;
        }
    })
    .await;
    let response = send_to(ProviderKind::Anthropic, &s.url())
        .await
        .expect("invalid UTF-8 is replaced, not fatal");
    cases += 1;
    assert!(response.message.text().contains('\u{fffd}'), "{response:?}");

    // Invalid UTF-8 error bodies and header values.
    for kind in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        let s = serve(|mut sock, _| async move {
            let mut bytes =
                b"HTTP/1.1 401 Unauthorized\r\nrequest-id: \xff\xfe\r\ncontent-length: 8\r\n\r\n"
                    .to_vec();
            bytes.extend(b"\xff\xfe\xfd{\"a\":\x80");
            respond_once(&mut sock, &bytes).await;
        })
        .await;
        let f = expect_failure(
            &mut cases,
            "invalid UTF-8 error body",
            send_to(kind, &s.url()).await,
            FailureKind::AuthFailed,
            None,
        );
        assert_eq!(f.request_id, None, "a non-UTF-8 header value is dropped");
    }

    // JSON nested 10,000 deep: as an error body, as a 200 JSON body, as an SSE event.
    let body = deep.clone();
    let s = serve(move |mut sock, _| {
        let body = body.clone();
        async move {
            let h = head(
                "500 Internal Server Error",
                &format!("content-length: {}\r\n", body.len()),
            );
            write(&mut sock, &h).await;
            write(&mut sock, body.as_bytes()).await;
        }
    })
    .await;
    for kind in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        expect_failure(
            &mut cases,
            "deep JSON error body",
            send_to(kind, &s.url()).await,
            FailureKind::ServerError,
            None,
        );
    }
    let body = format!("{{\"error\":{deep}}}");
    let s = serve(move |mut sock, _| {
        let body = body.clone();
        async move {
            let h = head("200 OK", &format!("content-length: {}\r\n", body.len()));
            write(&mut sock, &h).await;
            write(&mut sock, body.as_bytes()).await;
        }
    })
    .await;
    for kind in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        expect_failure(
            &mut cases,
            "deep JSON 200 body",
            send_to(kind, &s.url()).await,
            FailureKind::StreamMalformed,
            Some(TransportFault::MalformedStream),
        );
    }
    let event = format!("data: {deep}\n\n");
    let s = serve(move |mut sock, _| {
        let event = event.clone();
        async move {
            write(&mut sock, SSE_HEAD).await;
            write(&mut sock, event.as_bytes()).await;
        }
    })
    .await;
    for kind in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        expect_failure(
            &mut cases,
            "deep JSON SSE event",
            send_to(kind, &s.url()).await,
            FailureKind::StreamMalformed,
            None,
        );
    }
    table::check("provider-encoding", cases);
}

#[tokio::test]
async fn absurd_retry_after_values_never_stall_a_run() {
    let mut cases = 0;
    let values = [
        ("retry-after", "99999999999999"),
        ("retry-after", "1e308"),
        ("retry-after", "-1"),
        ("retry-after", "NaN"),
        ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
        ("retry-after-ms", "18446744073709551616"),
        ("retry-after-ms", "99999999999999.5"),
        ("anthropic-ratelimit-requests-reset", "9999-12-31T23:59:59Z"),
        ("x-ratelimit-reset-requests", "99999999h"),
    ];
    for (name, value) in values {
        let extra = format!("{name}: {value}\r\ncontent-length: 2\r\n");
        let s = serve(move |mut sock, _| {
            let mut bytes = head("429 Too Many Requests", &extra);
            bytes.extend(b"{}");
            async move { respond_once(&mut sock, &bytes).await }
        })
        .await;
        for kind in [
            ProviderKind::Anthropic,
            ProviderKind::OpenAi,
            ProviderKind::OpenAiResponses,
        ] {
            let f = expect_failure(
                &mut cases,
                value,
                send_to(kind, &s.url()).await,
                FailureKind::RateLimited,
                None,
            );
            // Garbage is no hint; a well-formed huge value is kept (saturated), so it is
            // above any cap and ends retries on the target instead of becoming "no hint".
            for hint in [f.retry_after_ms, f.rate_limit_reset_ms]
                .into_iter()
                .flatten()
            {
                assert!(hint > 86_400_000, "{name}: {value} gave {hint} ms");
            }
        }
        // A whole run against it ends promptly: the hint never becomes a sleep of years.
        let provider = HttpProvider::new(config(ProviderKind::Anthropic, &s.url())).expect("ok");
        let machine = MachineConfig::default().with_retry(
            RetryConfig::default()
                .with_max_attempts(3)
                .with_initial_delay_ms(10)
                .with_max_delay_ms(20),
        );
        let mut runner = Runner::new(machine, vec![Box::new(provider)]);
        let started = Instant::now();
        let result = tokio::time::timeout(OUTER, runner.run(RunInput::text("hi")))
            .await
            .expect("the run ends");
        assert!(
            matches!(result, Err(RunError::Provider { .. })),
            "{result:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name}: {value}"
        );
    }
    table::check("provider-retry-after", cases);
}

#[tokio::test]
async fn broken_framing_and_injection_attempts_get_the_right_failure() {
    let mut cases = 0;
    let ok = server::anthropic_stream("hello");

    // HTTP/1.0, body delimited by closing the connection: a complete stream is a success…
    let body = ok.clone();
    let s = serve(move |mut sock, _| {
        let body = body.clone();
        async move {
            write(
                &mut sock,
                b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
            )
            .await;
            write(&mut sock, &body).await;
        }
    })
    .await;
    let r = send_to(ProviderKind::Anthropic, &s.url()).await;
    cases += 1;
    assert_eq!(
        r.expect("HTTP/1.0 close-delimited body").message.text(),
        "hello"
    );

    // …and one closed before message_stop is a cut stream.
    let body = ok[..ok.len() / 2].to_vec();
    let s = serve(move |mut sock, _| {
        let body = body.clone();
        async move {
            write(
                &mut sock,
                b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n",
            )
            .await;
            write(&mut sock, &body).await;
        }
    })
    .await;
    expect_failure(
        &mut cases,
        "HTTP/1.0 cut",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::StreamMalformed,
        Some(TransportFault::StreamCut),
    );

    // Chunked encoding cut in the middle of a chunk.
    let body = ok.clone();
    let s = serve(move |mut sock, _| {
        let body = body.clone();
        async move {
            let mut bytes = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            bytes.extend(format!("{:x}\r\n", body.len()).as_bytes());
            bytes.extend(&body[..body.len() - 40]);
            write(&mut sock, &bytes).await;
        }
    })
    .await;
    expect_failure(
        &mut cases,
        "chunked cut mid-chunk",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::StreamMalformed,
        Some(TransportFault::StreamCut),
    );

    // A content-length longer than what arrives.
    let s = serve(|mut sock, _| async move {
        let mut bytes = head("200 OK", "content-length: 5000\r\n");
        bytes.extend(b"{\"id\":\"x\",\"type\":\"message\"");
        write(&mut sock, &bytes).await;
    })
    .await;
    expect_failure(
        &mut cases,
        "short content-length body",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::StreamMalformed,
        None,
    );

    // 200 with an error body, JSON and SSE, both providers.
    let bodies: [(ProviderKind, &str, &[u8], FailureKind); 4] = [
        (
            ProviderKind::Anthropic,
            "application/json",
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            FailureKind::Unavailable,
        ),
        (
            ProviderKind::OpenAi,
            "application/json",
            br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
            FailureKind::RateLimited,
        ),
        (
            ProviderKind::Anthropic,
            "text/event-stream",
            b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            FailureKind::Unavailable,
        ),
        (
            ProviderKind::OpenAi,
            "text/event-stream",
            b"data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}\n\n",
            FailureKind::ServerError,
        ),
    ];
    for (kind, content_type, body, expected) in bodies {
        let s = serve(move |mut sock, _| async move {
            let mut bytes = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .into_bytes();
            bytes.extend(body);
            write(&mut sock, &bytes).await;
        })
        .await;
        expect_failure(
            &mut cases,
            "200 with an error body",
            send_to(kind, &s.url()).await,
            expected,
            None,
        );
    }

    // Response-header tricks: obs-fold, a bare CR, ten thousand headers, an ANSI escape.
    let heads: [&[u8]; 4] = [
        b"HTTP/1.1 500 Oops\r\nrequest-id: a\r\n injected: yes\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 500 Oops\r\nrequest-id: a\rx-evil: 1\r\ncontent-length: 0\r\n\r\n",
        b"",
        b"HTTP/1.1 500 Oops\r\nrequest-id: \x1b[31mred\x1b[0m\r\ncontent-length: 0\r\n\r\n",
    ];
    for (i, bytes) in heads.into_iter().enumerate() {
        let bytes = if i == 2 {
            let mut b = b"HTTP/1.1 500 Oops\r\n".to_vec();
            for n in 0..10_000 {
                b.extend(format!("x-h{n}: v\r\n").as_bytes());
            }
            b.extend(b"content-length: 0\r\n\r\n");
            b
        } else {
            bytes.to_vec()
        };
        let s = serve(move |mut sock, _| {
            let bytes = bytes.clone();
            async move {
                write(&mut sock, &bytes).await;
            }
        })
        .await;
        cases += 1;
        let f = send_to(ProviderKind::Anthropic, &s.url())
            .await
            .expect_err("a 500 or an unparsable response");
        assert!(
            matches!(f.kind, FailureKind::ServerError | FailureKind::Transport),
            "head {i}: {f:?}"
        );
        assert!(f.kind.default_action() == rebound_core::FailureAction::Retry);
        if let Some(id) = &f.request_id {
            assert!(!id.contains(['\r', '\n', '\x1b']), "head {i}: {id:?}");
        }
    }

    // Stalls: before the headers (timeout) and after them (idle timeout).
    let s = serve(|sock, _| async move {
        tokio::time::sleep(OUTER).await;
        drop(sock);
    })
    .await;
    expect_failure(
        &mut cases,
        "stall before headers",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::Transport,
        Some(TransportFault::Timeout),
    );
    let s = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        tokio::time::sleep(OUTER).await;
    })
    .await;
    expect_failure(
        &mut cases,
        "stall after headers",
        send_to(ProviderKind::OpenAi, &s.url()).await,
        FailureKind::StreamMalformed,
        Some(TransportFault::IdleTimeout),
    );

    // Garbage instead of HTTP, and a connection refused.
    let s = serve(|mut sock, _| async move {
        write(&mut sock, b"SSH-2.0-OpenSSH_9.6\r\n\xff\xff\xff\r\n\r\n").await;
    })
    .await;
    expect_failure(
        &mut cases,
        "not HTTP",
        send_to(ProviderKind::Anthropic, &s.url()).await,
        FailureKind::Transport,
        None,
    );
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    expect_failure(
        &mut cases,
        "connection refused",
        send_to(ProviderKind::Anthropic, &format!("http://{closed}")).await,
        FailureKind::Transport,
        Some(TransportFault::Connect),
    );

    table::check("provider-framing", cases);
}

#[tokio::test]
async fn header_injection_through_the_key_or_model_never_reaches_the_wire() {
    let mut cases = 0;
    let s = serve(|mut sock, _| async move {
        write(
            &mut sock,
            b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n",
        )
        .await;
    })
    .await;
    for key in [
        "sk-test\r\nx-injected: 1",
        "sk-test\nx-injected: 1",
        "sk-\u{0}test",
    ] {
        for kind in [
            ProviderKind::Anthropic,
            ProviderKind::OpenAi,
            ProviderKind::OpenAiResponses,
        ] {
            cases += 1;
            let mut c = config(kind, &s.url());
            c.api_key = ApiKey::new(key);
            match HttpProvider::new(c) {
                Err(e) => {
                    let text = format!("{e} {e:?}");
                    assert!(!text.contains("sk-test"), "the key leaked: {text}");
                }
                Ok(provider) => {
                    let f = send(&provider).await.expect_err("refused");
                    assert_eq!(f.kind.default_action(), rebound_core::FailureAction::Fail);
                }
            }
        }
    }
    for model in ["m\r\nx-injected: 1", "m\"}],\"x\":{\""] {
        cases += 1;
        let mut c = config(ProviderKind::Anthropic, &s.url());
        c.model = model.to_owned();
        if let Ok(provider) = HttpProvider::new(c) {
            let _ = send(&provider).await;
        }
    }
    for request in s.requests.lock().expect("requests").iter() {
        let head_end = request
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(request.len());
        let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
        assert!(!head.contains("x-injected"), "{head}");
        let body: serde_json::Value =
            serde_json::from_slice(&request[head_end + 4..]).expect("the body stays JSON");
        assert!(body.get("x").is_none(), "{body}");
    }
    table::check("provider-injection", cases);
}

/// A sink that holds the reader longer than the idle timeout (a slow UI, a loaded machine)
/// while the server goes on sending is not a silent server. On this one-thread runtime the
/// connection cannot read while the sink runs, so the bytes sent meanwhile reach the reader
/// only after it waits again: the idle window counts the time the reader waits, not the time
/// since the last chunk came (which failed this file's flood cases now and then under load).
#[tokio::test]
async fn a_sink_slower_than_the_idle_timeout_is_not_a_silent_server() {
    let s = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        let stream = String::from_utf8(server::anthropic_stream("all of it")).expect("utf-8");
        for event in stream.split_inclusive("\n\n") {
            if !write(&mut sock, event.as_bytes()).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let provider =
        HttpProvider::new(config(ProviderKind::Anthropic, &s.url())).expect("valid config");
    let conversation = Conversation::from(vec![Message::user_text("hi")]);
    let mut calls = 0;
    let mut sink = |_: rebound_core::wire::StreamDelta<&str>| {
        calls += 1;
        if calls == 1 {
            std::thread::sleep(IDLE + Duration::from_millis(300));
        }
        true
    };
    let response = tokio::time::timeout(OUTER, provider.send(request(&conversation), &mut sink))
        .await
        .expect("bounded")
        .unwrap_or_else(|e| panic!("the stream completes: {e}"));
    assert_eq!(response.message.text(), "all of it");
    assert!(calls >= 1);
}
