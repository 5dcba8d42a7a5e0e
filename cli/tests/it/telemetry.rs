//! The `rebound` binary exports its telemetry over OTLP when the standard environment asks
//! for it, to a real receiver on loopback that decodes the official OTLP messages
//! (protobuf and JSON), every span within its parent in time, with either provider; and a
//! collector that is down, answers 500 or hangs never fails, slows or hangs a run, and earns
//! one warning line.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::Scenario;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rebound");
const KEY: &str = "sk-ant-otel-export-test-9f8e7d6c5b4a";

/// How the receiver answers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Answer {
    Ok,
    Status500,
    /// Reads the request and never answers.
    Hang,
}

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// An OTLP/HTTP receiver on 127.0.0.1: keeps every request it gets.
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start(answer: Answer) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&got);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let keep = Arc::clone(&keep);
                std::thread::spawn(move || serve(stream, answer, &keep));
            }
        });
        Receiver { port, got }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

/// Serves one connection: HTTP/1.1 requests with a `content-length` body.
fn serve(stream: TcpStream, answer: Answer, keep: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let (mut length, mut content_type) = (0usize, String::new());
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "content-type" => content_type = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        keep.lock().unwrap().push(Received {
            path,
            content_type: content_type.clone(),
            body,
        });
        match answer {
            Answer::Ok => {
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: 0\r\n\r\n"
                );
                if writer.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
            Answer::Status500 => {
                let body = "collector exploded";
                let reply = format!(
                    "HTTP/1.1 500 Internal Server Error\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = writer.write_all(reply.as_bytes());
            }
            Answer::Hang => std::thread::sleep(Duration::from_secs(3600)),
        }
    }
}

fn scenario(json: &str) -> Scenario {
    Scenario::from_json(json).unwrap_or_else(|e| panic!("bad test scenario: {e}"))
}

async fn provider(json: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::new(scenario(json), 1))
        .await
        .expect("fake server starts")
}

/// Two attempts fail (529, then 429 with a server hint), the answer calls two tools (one
/// fails: no such file), then the model finishes.
const RETRIES_AND_TOOLS: &str = r#"{"turns": [
    {"faults": [{"type": "http", "status": 529},
                {"type": "http", "status": 429, "headers": {"retry-after-ms": "40"}}],
     "answer": {"text": "Looking.", "tool_calls": [
        {"id": "toolu_a", "name": "read", "input": {"path": "a.txt"}},
        {"id": "toolu_b", "name": "read", "input": {"path": "missing.txt"}}]}},
    {"answer": {"text": "Done."}}
]}"#;

/// `rebound run` against `server`, exporting to `endpoint` (if any).
fn run_cmd(server: &FakeServer, root: &std::path::Path, endpoint: Option<&str>) -> Command {
    run_cmd_with_delay(server, root, endpoint, 10)
}

/// The same, with the first retry after `delay_ms`.
fn run_cmd_with_delay(
    server: &FakeServer,
    root: &std::path::Path,
    endpoint: Option<&str>,
    delay_ms: u64,
) -> Command {
    run_cmd_as(Api::Anthropic, server, root, endpoint, delay_ms)
}

/// The API `rebound run` speaks to the fake provider.
#[derive(Debug, Clone, Copy)]
enum Api {
    Anthropic,
    OpenAi,
}

/// `rebound run` against `server` in `api`'s wire format, exporting to `endpoint` (if any),
/// the first retry after `delay_ms`.
fn run_cmd_as(
    api: Api,
    server: &FakeServer,
    root: &std::path::Path,
    endpoint: Option<&str>,
    delay_ms: u64,
) -> Command {
    let (provider, base_url, model, key_var) = match api {
        Api::Anthropic => (
            "anthropic",
            server.base_url(),
            "claude-test",
            "ANTHROPIC_API_KEY",
        ),
        Api::OpenAi => (
            "openai",
            server.openai_base_url(),
            "gpt-test",
            "OPENAI_API_KEY",
        ),
    };
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "Fix the parser.", "--provider", provider])
        .args(["--base-url", &base_url])
        .args(["--model", model, "--no-jitter", "--seed", "5"])
        .args([
            "--initial-delay-ms",
            &delay_ms.to_string(),
            "--events",
            "json",
        ])
        .arg("--tools-root")
        .arg(root)
        .env(key_var, KEY)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .stdin(Stdio::null());
    if let Some(endpoint) = endpoint {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
    cmd
}

async fn output(mut cmd: Command) -> (Output, Duration) {
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let out = cmd.output().expect("the binary runs");
        (out, started.elapsed())
    })
    .await
    .expect("join")
}

fn tools_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("a.txt"), "fn parse() {}\n").expect("write");
    dir
}

fn decode_traces(received: &[Received]) -> Vec<ExportTraceServiceRequest> {
    received
        .iter()
        .filter(|r| r.path == "/v1/traces")
        .map(|r| {
            if r.content_type.contains("json") {
                serde_json::from_slice(&r.body).expect("OTLP/JSON traces")
            } else {
                ExportTraceServiceRequest::decode(r.body.as_slice()).expect("OTLP protobuf traces")
            }
        })
        .collect()
}

fn decode_metrics(received: &[Received]) -> Vec<ExportMetricsServiceRequest> {
    received
        .iter()
        .filter(|r| r.path == "/v1/metrics")
        .map(|r| {
            if r.content_type.contains("json") {
                serde_json::from_slice(&r.body).expect("OTLP/JSON metrics")
            } else {
                ExportMetricsServiceRequest::decode(r.body.as_slice())
                    .expect("OTLP protobuf metrics")
            }
        })
        .collect()
}

fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Any> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn string(span: &Span, key: &str) -> Option<String> {
    match attr(&span.attributes, key)? {
        Any::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(span: &Span, key: &str) -> Option<i64> {
    match attr(&span.attributes, key)? {
        Any::IntValue(i) => Some(*i),
        _ => None,
    }
}

/// Every span but the root has its parent among `spans` and lies within it in time, as the
/// conventions' `invoke_agent` covers the whole invocation.
fn assert_each_span_within_its_parent(spans: &[Span]) {
    let t0 = spans
        .iter()
        .map(|s| s.start_time_unix_nano)
        .min()
        .unwrap_or(0);
    let ms = |t: u64| t.saturating_sub(t0) as f64 / 1e6;
    for span in spans.iter().filter(|s| !s.parent_span_id.is_empty()) {
        let parent = spans
            .iter()
            .find(|p| p.span_id == span.parent_span_id)
            .unwrap_or_else(|| panic!("`{}` has no exported parent", span.name));
        assert!(
            span.start_time_unix_nano >= parent.start_time_unix_nano
                && span.end_time_unix_nano <= parent.end_time_unix_nano,
            "`{}` ({:.2} -> {:.2} ms) is not within its parent `{}` ({:.2} -> {:.2} ms)",
            span.name,
            ms(span.start_time_unix_nano),
            ms(span.end_time_unix_nano),
            parent.name,
            ms(parent.start_time_unix_nano),
            ms(parent.end_time_unix_nano),
        );
    }
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    let mut kids: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == parent.span_id)
        .collect();
    kids.sort_by_key(|s| s.start_time_unix_nano);
    kids
}

async fn exported_run_is_a_span_tree_with_its_retries_tools_and_metrics(protocol: &str) {
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(RETRIES_AND_TOOLS).await;
    let root = tools_root();
    let mut cmd = run_cmd(&server, root.path(), Some(&receiver.endpoint()));
    cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
        .env("OTEL_SERVICE_NAME", "otel-test-agent")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci");
    let (out, _) = output(cmd).await;
    server.shutdown().await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");

    let received = receiver.received();
    let expected_type = if protocol == "http/json" {
        "application/json"
    } else {
        "application/x-protobuf"
    };
    assert!(
        received.iter().all(|r| r.content_type == expected_type),
        "{:?}",
        received.iter().map(|r| &r.content_type).collect::<Vec<_>>()
    );
    for r in &received {
        let text = String::from_utf8_lossy(&r.body);
        assert!(!text.contains(KEY), "the API key was exported");
        assert!(
            !text.contains("Fix the parser"),
            "content without the opt-in"
        );
    }

    let traces = decode_traces(&received);
    assert!(!traces.is_empty(), "no traces exported: {received:?}");
    let resource = traces[0].resource_spans[0]
        .resource
        .as_ref()
        .expect("resource");
    assert!(matches!(
        attr(&resource.attributes, "service.name"),
        Some(Any::StringValue(s)) if s == "otel-test-agent"
    ));
    assert!(matches!(
        attr(&resource.attributes, "deployment.environment"),
        Some(Any::StringValue(s)) if s == "ci"
    ));
    let spans: Vec<Span> = traces
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.clone())
        .collect();
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "{spans:#?}");
    let agent = roots[0];
    assert_eq!(agent.name, "invoke_agent rebound");
    assert_eq!(agent.kind, SpanKind::Internal as i32);
    assert_eq!(
        string(agent, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        string(agent, "gen_ai.provider.name").as_deref(),
        Some("anthropic")
    );
    assert_eq!(int(agent, "rebound.seed"), Some(5));
    assert!(spans.iter().all(|s| s.trace_id == agent.trace_id));

    let top = children(&spans, agent);
    let names: Vec<&str> = top.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chat claude-test",
            "execute_tool read",
            "execute_tool read",
            "chat claude-test"
        ],
        "{top:#?}"
    );
    // The run's span covers its retries, its tool calls and the turn after them.
    assert_each_span_within_its_parent(&spans);
    let chat = top[0];
    assert_eq!(chat.kind, SpanKind::Client as i32);
    assert_eq!(
        string(chat, "gen_ai.request.model").as_deref(),
        Some("claude-test")
    );
    assert_eq!(
        string(chat, "gen_ai.response.model").as_deref(),
        Some("claude-test")
    );
    assert!(string(chat, "gen_ai.response.id").is_some_and(|id| id.starts_with("msg_")));
    assert!(int(chat, "gen_ai.usage.input_tokens").is_some_and(|n| n > 0));
    assert!(int(chat, "gen_ai.usage.output_tokens").is_some_and(|n| n > 0));
    // The conventions' string array, though `tracing` recorded a string.
    match attr(&chat.attributes, "gen_ai.response.finish_reasons") {
        Some(Any::ArrayValue(array)) => {
            let values: Vec<_> = array
                .values
                .iter()
                .filter_map(|v| v.value.clone())
                .collect();
            assert_eq!(values, [Any::StringValue("tool_use".into())]);
        }
        other => panic!("finish reasons: {other:?}"),
    }
    assert_eq!(int(chat, "rebound.attempts"), Some(3));

    let attempts = children(&spans, chat);
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    assert!(attempts.iter().all(|a| a.name == "attempt"));
    assert_eq!(int(attempts[0], "http.response.status_code"), Some(529));
    assert_eq!(
        string(attempts[0], "error.type").as_deref(),
        Some("unavailable")
    );
    let status = attempts[0].status.as_ref().expect("status");
    assert_eq!(status.code, StatusCode::Error as i32);
    assert_eq!(int(attempts[1], "http.response.status_code"), Some(429));
    assert_eq!(int(attempts[1], "rebound.retry.server_hint_ms"), Some(40));
    assert_eq!(int(attempts[2], "http.response.status_code"), None);
    // The waits between attempts are the retries' delays.
    assert!(attempts[1].start_time_unix_nano >= attempts[0].end_time_unix_nano + 10_000_000);
    assert!(attempts[2].start_time_unix_nano >= attempts[1].end_time_unix_nano + 40_000_000);

    let retries: Vec<_> = chat.events.iter().filter(|e| e.name == "retry").collect();
    assert_eq!(retries.len(), 2);
    let delay = |e: &opentelemetry_proto::tonic::trace::v1::span::Event| match attr(
        &e.attributes,
        "rebound.retry.delay_ms",
    ) {
        Some(Any::IntValue(ms)) => *ms,
        other => panic!("delay: {other:?}"),
    };
    let reason = |e: &opentelemetry_proto::tonic::trace::v1::span::Event| match attr(
        &e.attributes,
        "rebound.retry.reason",
    ) {
        Some(Any::StringValue(r)) => r.clone(),
        other => panic!("reason: {other:?}"),
    };
    assert_eq!(
        (delay(retries[0]), reason(retries[0]).as_str()),
        (10, "backoff")
    );
    assert_eq!(
        (delay(retries[1]), reason(retries[1]).as_str()),
        (40, "server_hint")
    );
    assert!(matches!(
        attr(&retries[0].attributes, "http.response.status_code"),
        Some(Any::IntValue(529))
    ));

    let read_ok = top[1..3]
        .iter()
        .find(|s| string(s, "gen_ai.tool.call.id").as_deref() == Some("toolu_a"))
        .expect("the read of a.txt");
    let read_failed = top[1..3]
        .iter()
        .find(|s| string(s, "gen_ai.tool.call.id").as_deref() == Some("toolu_b"))
        .expect("the read of missing.txt");
    assert_eq!(read_ok.kind, SpanKind::Internal as i32);
    assert_ne!(
        read_ok.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    assert_eq!(
        string(read_failed, "error.type").as_deref(),
        Some("tool_error")
    );
    assert_eq!(
        read_failed.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );

    // Metrics: the conventions' two and rebound's own, with the retries by kind.
    let metrics = decode_metrics(&received);
    let all: Vec<_> = metrics
        .iter()
        .flat_map(|m| &m.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| s.metrics.clone())
        .collect();
    let names: Vec<&str> = all.iter().map(|m| m.name.as_str()).collect();
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "rebound.retries",
        "rebound.tool.calls",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let duration = all
        .iter()
        .find(|m| m.name == "gen_ai.client.operation.duration")
        .unwrap();
    assert_eq!(duration.unit, "s");
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    match &duration.data {
        Some(Data::Histogram(h)) => {
            let chat = h
                .data_points
                .iter()
                .find(|p| {
                    matches!(attr(&p.attributes, "gen_ai.operation.name"),
                        Some(Any::StringValue(s)) if s == "chat")
                })
                .expect("a chat duration");
            assert_eq!(chat.count, 2);
            assert_eq!(chat.explicit_bounds[0], 0.01);
            assert_eq!(chat.explicit_bounds.len(), 14);
        }
        other => panic!("duration is a histogram: {other:?}"),
    }
    let retries = all.iter().find(|m| m.name == "rebound.retries").unwrap();
    match &retries.data {
        Some(Data::Sum(sum)) => {
            let by_kind: Vec<(String, i64)> = sum
                .data_points
                .iter()
                .map(|p| {
                    let kind = match attr(&p.attributes, "error.type") {
                        Some(Any::StringValue(s)) => s.clone(),
                        _ => String::new(),
                    };
                    let n = match p.value {
                        Some(
                            opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(
                                n,
                            ),
                        ) => n,
                        _ => -1,
                    };
                    (kind, n)
                })
                .collect();
            assert!(by_kind.contains(&("unavailable".into(), 1)), "{by_kind:?}");
            assert!(by_kind.contains(&("rate_limited".into(), 1)), "{by_kind:?}");
        }
        other => panic!("retries is a sum: {other:?}"),
    }
}

#[tokio::test]
async fn a_run_exports_its_spans_and_metrics_over_otlp_protobuf() {
    exported_run_is_a_span_tree_with_its_retries_tools_and_metrics("http/protobuf").await;
}

#[tokio::test]
async fn a_run_exports_its_spans_and_metrics_over_otlp_json() {
    exported_run_is_a_span_tree_with_its_retries_tools_and_metrics("http/json").await;
}

/// Over OpenAI's wire format the run's span covers everything too: the 529, the 429 and
/// their retries, both tool calls and the final turn.
#[tokio::test]
async fn an_openai_runs_exported_spans_each_lie_within_their_parent() {
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(RETRIES_AND_TOOLS).await;
    let root = tools_root();
    let cmd = run_cmd_as(
        Api::OpenAi,
        &server,
        root.path(),
        Some(&receiver.endpoint()),
        10,
    );
    let (out, _) = output(cmd).await;
    server.shutdown().await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let spans = exported_spans(&receiver);
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "{spans:#?}");
    assert_eq!(
        string(roots[0], "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    let top = children(&spans, roots[0]);
    let names: Vec<&str> = top.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chat gpt-test",
            "execute_tool read",
            "execute_tool read",
            "chat gpt-test"
        ],
        "{top:#?}"
    );
    assert_eq!(children(&spans, top[0]).len(), 3, "three attempts");
    assert_each_span_within_its_parent(&spans);
}

#[tokio::test]
async fn a_failed_run_exports_its_error_and_no_key() {
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(r#"{"turns": [{"faults": [{"type": "http", "status": 401}]}]}"#).await;
    let root = tools_root();
    let (out, _) = output(run_cmd(&server, root.path(), Some(&receiver.endpoint()))).await;
    server.shutdown().await;
    assert_eq!(out.status.code(), Some(1));
    let received = receiver.received();
    for r in &received {
        assert!(!String::from_utf8_lossy(&r.body).contains(KEY));
    }
    let spans: Vec<Span> = decode_traces(&received)
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.clone())
        .collect();
    let agent = spans.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
    assert_eq!(string(agent, "error.type").as_deref(), Some("auth_failed"));
    assert_each_span_within_its_parent(&spans);
    let status = agent.status.as_ref().expect("status");
    assert_eq!(status.code, StatusCode::Error as i32);
    assert!(!status.message.is_empty());
    let chat = children(&spans, agent)[0];
    assert_eq!(string(chat, "error.type").as_deref(), Some("auth_failed"));
}

#[tokio::test]
async fn without_the_environment_nothing_is_exported() {
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(RETRIES_AND_TOOLS).await;
    let root = tools_root();
    // The receiver listens where a default endpoint would send; nothing asks for export.
    let mut cmd = run_cmd(&server, root.path(), None);
    cmd.env("OTEL_SERVICE_NAME", "nobody-asked");
    let (out, _) = output(cmd).await;
    server.shutdown().await;
    assert_eq!(out.status.code(), Some(0));
    assert!(receiver.received().is_empty());
}

/// A collector that is down, answers 500, or hangs: the run succeeds, its exit is bounded,
/// and stderr has exactly one warning line.
#[tokio::test]
async fn a_broken_collector_never_fails_or_hangs_a_run_and_earns_one_warning() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        format!("http://127.0.0.1:{port}")
    };
    let failing = Receiver::start(Answer::Status500);
    let hanging = Receiver::start(Answer::Hang);
    // The same run with no export, for the time it takes.
    let server = provider(RETRIES_AND_TOOLS).await;
    let root = tools_root();
    let (out, baseline) = output(run_cmd(&server, root.path(), None)).await;
    server.shutdown().await;
    assert_eq!(out.status.code(), Some(0));
    for (what, endpoint) in [
        ("down", closed),
        ("500", failing.endpoint()),
        ("hanging", hanging.endpoint()),
    ] {
        let server = provider(RETRIES_AND_TOOLS).await;
        let (out, took) = output(run_cmd(&server, root.path(), Some(&endpoint))).await;
        server.shutdown().await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
        assert_eq!(warnings.len(), 1, "{what}: {stderr}");
        assert!(warnings[0].contains("telemetry export"), "{what}: {stderr}");
        assert!(!stderr.contains(KEY));
        // The flush at exit waits 2 s at most; the run itself is not slowed.
        assert!(
            took < baseline + Duration::from_millis(2_800),
            "{what}: took {took:?} (baseline {baseline:?})"
        );
    }
    assert!(
        !failing.received().is_empty(),
        "the 500 collector was asked"
    );
    assert!(
        !hanging.received().is_empty(),
        "the hanging collector was asked"
    );
}

/// Escapes text for SVG.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The spans of one trace as a waterfall, as a tracing UI draws it: one row per span in
/// tree order, its bar where it ran on the run's time line, retries as ticks on their chat.
fn waterfall_svg(spans: &[Span]) -> String {
    const LABEL: f64 = 330.0;
    const BAR: f64 = 600.0;
    const ROW: f64 = 24.0;
    const TOP: f64 = 46.0;
    let Some(root) = spans.iter().find(|s| s.parent_span_id.is_empty()) else {
        return String::new();
    };
    let t0 = root.start_time_unix_nano;
    let total = (root.end_time_unix_nano - t0).max(1) as f64;
    let x = |t: u64| LABEL + (t.saturating_sub(t0) as f64 / total) * BAR;
    let mut rows: Vec<(usize, &Span)> = Vec::new();
    fn walk<'a>(
        spans: &'a [Span],
        span: &'a Span,
        depth: usize,
        rows: &mut Vec<(usize, &'a Span)>,
    ) {
        rows.push((depth, span));
        for child in children(spans, span) {
            walk(spans, child, depth + 1, rows);
        }
    }
    walk(spans, root, 0, &mut rows);
    let height = TOP + ROW * rows.len() as f64 + 40.0;
    let width = LABEL + BAR + 70.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n\
         <text x=\"12\" y=\"22\" font-size=\"14\" font-weight=\"bold\">One `rebound run`, as a tracing UI shows its OTLP export</text>\n\
         <text x=\"12\" y=\"38\" fill=\"#555\">two failed attempts and their retries inside one chat span, a tool batch with one failing call, the next turn</text>\n"
    );
    // Time grid.
    let ms = total / 1e6;
    let step = [10.0, 20.0, 50.0, 100.0, 200.0, 250.0, 500.0, 1000.0, 2000.0]
        .into_iter()
        .find(|s| ms / s <= 8.0)
        .unwrap_or(5000.0);
    let mut t = 0.0;
    while t <= ms {
        let gx = LABEL + t / ms * BAR;
        svg += &format!(
            "<line x1=\"{gx:.1}\" y1=\"{TOP}\" x2=\"{gx:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>\
             <text x=\"{gx:.1}\" y=\"{:.1}\" fill=\"#777\" text-anchor=\"middle\">{t:.0} ms</text>\n",
            height - 30.0,
            height - 16.0
        );
        t += step;
    }
    for (row, (depth, span)) in rows.iter().enumerate() {
        let y = TOP + ROW * row as f64;
        let failed = span
            .status
            .as_ref()
            .is_some_and(|s| s.code == StatusCode::Error as i32);
        let fill = match span.name.split(' ').next().unwrap_or_default() {
            _ if failed => "#e45756",
            "invoke_agent" => "#7f7f7f",
            "chat" => "#4c78a8",
            "attempt" => "#72b7b2",
            "execute_tool" => "#b279a2",
            _ => "#bab0ac",
        };
        let mut label = span.name.clone();
        if let Some(code) = int(span, "http.response.status_code") {
            label += &format!(" · {code}");
        }
        if let Some(error) = string(span, "error.type") {
            label += &format!(" · {error}");
        }
        let took = (span.end_time_unix_nano - span.start_time_unix_nano) as f64 / 1e6;
        svg += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            12.0 + 14.0 * *depth as f64,
            y + 16.0,
            xml(&label)
        );
        let (bx, ex) = (x(span.start_time_unix_nano), x(span.end_time_unix_nano));
        svg += &format!(
            "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"16\" rx=\"2\" fill=\"{fill}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#333\" font-size=\"11\">{took:.0} ms</text>\n",
            y + 4.0,
            (ex - bx).max(1.5),
            ex + 4.0,
            y + 16.0
        );
        for event in &span.events {
            let ex = x(event.time_unix_nano);
            let what = match attr(&event.attributes, "rebound.retry.delay_ms") {
                Some(Any::IntValue(ms)) => {
                    let reason = match attr(&event.attributes, "rebound.retry.reason") {
                        Some(Any::StringValue(r)) => r.clone(),
                        _ => String::new(),
                    };
                    format!("{} {ms} ms {reason}", event.name)
                }
                _ => event.name.clone(),
            };
            svg += &format!(
                "<path d=\"M{ex:.1} {:.1} l5 6 l-5 6 l-5 -6 z\" fill=\"#f58518\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#fff\" font-size=\"11\">{}</text>\n",
                y + 6.0,
                ex + 7.0,
                y + 16.0,
                xml(&what)
            );
        }
    }
    svg += "</svg>\n";
    svg
}

/// The picture in docs/telemetry.md: one real run's exported spans, from the receiver, drawn as a
/// waterfall. Writes `docs/telemetry-waterfall.svg` when `REBOUND_WRITE_WATERFALL` is set
/// (to the folder to write it in), and checks the drawing either way.
#[tokio::test]
async fn a_real_runs_exported_spans_draw_as_a_waterfall() {
    const PICTURE: &str = r#"{"turns": [
        {"faults": [{"type": "http", "status": 529},
                    {"type": "http", "status": 429, "headers": {"retry-after-ms": "400"}}],
         "answer": {"text": "Looking.", "latency_ms": 300, "tool_calls": [
            {"id": "toolu_a", "name": "read", "input": {"path": "a.txt"}},
            {"id": "toolu_b", "name": "read", "input": {"path": "missing.txt"}}]}},
        {"answer": {"text": "Done.", "latency_ms": 250}}
    ]}"#;
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(PICTURE).await;
    let root = tools_root();
    let cmd = run_cmd_with_delay(&server, root.path(), Some(&receiver.endpoint()), 200);
    let (out, _) = output(cmd).await;
    server.shutdown().await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans: Vec<Span> = decode_traces(&receiver.received())
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.clone())
        .collect();
    assert_each_span_within_its_parent(&spans);
    let svg = waterfall_svg(&spans);
    assert_eq!(svg.matches("<rect x=").count(), spans.len());
    assert!(svg.contains("chat claude-test"));
    assert!(svg.contains("attempt · 529 · unavailable"));
    assert!(svg.contains("retry 400 ms server_hint"));
    if let Some(dir) = std::env::var_os("REBOUND_WRITE_WATERFALL") {
        let path = std::path::Path::new(&dir).join("telemetry-waterfall.svg");
        std::fs::write(&path, svg).expect("write the picture");
    }
}

fn exported_spans(receiver: &Receiver) -> Vec<Span> {
    decode_traces(&receiver.received())
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.clone())
        .collect()
}

/// Ctrl-C cancels the run, and what it did is still flushed before the exit.
#[tokio::test]
async fn a_run_canceled_by_ctrl_c_still_exports_its_spans() {
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(r#"{"turns": [{"faults": [{"type": "http", "status": 529}]}]}"#).await;
    let root = tools_root();
    let mut cmd = run_cmd_with_delay(&server, root.path(), Some(&receiver.endpoint()), 300_000);
    cmd.args(["--max-delay-ms", "300000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.requests().is_empty() {
        assert!(Instant::now() < deadline, "the request never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join");
    server.shutdown().await;
    assert_eq!(out.status.code(), Some(130));
    let spans = exported_spans(&receiver);
    let agent = spans
        .iter()
        .find(|s| s.parent_span_id.is_empty())
        .expect("the run's span was flushed at the cancel");
    assert_eq!(string(agent, "error.type").as_deref(), Some("canceled"));
    assert_each_span_within_its_parent(&spans);
    let chat = children(&spans, agent)[0];
    assert_eq!(string(chat, "error.type").as_deref(), Some("canceled"));
    assert_eq!(chat.events.iter().filter(|e| e.name == "retry").count(), 1);
    // The retry was announced (the event above) but never sent: the counter of retries,
    // like the run's `retries`, counts none.
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let sent: i64 = decode_metrics(&receiver.received())
        .iter()
        .flat_map(|m| &m.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == "rebound.retries")
        .filter_map(|m| match &m.data {
            Some(Data::Sum(sum)) => Some(sum.data_points.clone()),
            _ => None,
        })
        .flatten()
        .map(|p| match p.value {
            Some(Value::AsInt(n)) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(
        sent, 0,
        "a retry canceled in its backoff was counted as sent"
    );
}

/// Content goes out only when asked for, by the conventions' variable or the flag.
#[tokio::test]
async fn content_is_exported_only_when_asked_for() {
    for ask in ["env", "flag"] {
        let receiver = Receiver::start(Answer::Ok);
        let server = provider(RETRIES_AND_TOOLS).await;
        let root = tools_root();
        let mut cmd = run_cmd(&server, root.path(), Some(&receiver.endpoint()));
        match ask {
            "env" => {
                cmd.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
            }
            _ => {
                cmd.arg("--otel-capture-content");
            }
        }
        let (out, _) = output(cmd).await;
        server.shutdown().await;
        assert_eq!(out.status.code(), Some(0));
        let spans = exported_spans(&receiver);
        let chat = spans.iter().find(|s| s.name == "chat claude-test").unwrap();
        let input = string(chat, "gen_ai.input.messages").expect("input messages");
        assert!(input.contains("Fix the parser."), "{ask}: {input}");
        let read = spans
            .iter()
            .find(|s| string(s, "gen_ai.tool.call.id").as_deref() == Some("toolu_a"))
            .unwrap();
        assert_eq!(
            string(read, "gen_ai.tool.call.result").as_deref(),
            Some("fn parse() {}\n")
        );
        let all: Vec<u8> = receiver
            .received()
            .into_iter()
            .flat_map(|r| r.body)
            .collect();
        assert!(!String::from_utf8_lossy(&all).contains(KEY), "{ask}");
    }
}

/// The per-signal variables win over the general ones, as the specification has it.
#[tokio::test]
async fn per_signal_variables_choose_each_signals_protocol_and_endpoint() {
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(RETRIES_AND_TOOLS).await;
    let root = tools_root();
    let mut cmd = run_cmd(&server, root.path(), Some(&receiver.endpoint()));
    cmd.env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json");
    let (out, _) = output(cmd).await;
    server.shutdown().await;
    assert_eq!(out.status.code(), Some(0));
    let received = receiver.received();
    let kinds: Vec<(&str, &str)> = received
        .iter()
        .map(|r| (r.path.as_str(), r.content_type.as_str()))
        .collect();
    assert!(
        kinds.contains(&("/v1/traces", "application/json")),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&("/v1/metrics", "application/x-protobuf")),
        "{kinds:?}"
    );

    // Only a traces endpoint: traces go there, to the path given as is; no metrics.
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(RETRIES_AND_TOOLS).await;
    let mut cmd = run_cmd(&server, root.path(), None);
    cmd.env(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        format!("{}/custom/traces", receiver.endpoint()),
    );
    let (out, _) = output(cmd).await;
    server.shutdown().await;
    assert_eq!(out.status.code(), Some(0));
    let paths: Vec<String> = receiver.received().into_iter().map(|r| r.path).collect();
    assert!(!paths.is_empty());
    assert!(paths.iter().all(|p| p == "/custom/traces"), "{paths:?}");
}

use crate::restate;

/// `rebound durable serve` exports as `rebound run` does: a turn through Restate (two
/// retries, two tool calls, the answer after them) is the same span tree, every span within
/// its parent, with the same metrics, flushed when the endpoint stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_serve_exports_the_spans_and_metrics_of_rebound_run() {
    let Some(restate) = restate::RestateServer::start("durable_serve_exports") else {
        return;
    };
    let receiver = Receiver::start(Answer::Ok);
    let server = provider(RETRIES_AND_TOOLS).await;
    let root = tools_root();
    let port = restate::free_port();
    let mut cmd = Command::new(BIN);
    cmd.args(["durable", "serve", "--port", &port.to_string()])
        .args(["--register", &restate.admin_url()])
        .args(["--base-url", &server.base_url()])
        .args(["--model", "claude-test", "--no-jitter", "--seed", "5"])
        .args(["--initial-delay-ms", "10", "--events", "json"])
        .arg("--tools-root")
        .arg(root.path())
        .env("ANTHROPIC_API_KEY", KEY)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut endpoint = cmd.spawn().expect("rebound runs");
    let client = restate::Client::new(&restate);
    // Registered once the ingress knows the service.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (status, body) = loop {
        let (status, body) = client
            .call("Agent/otel/run", Some(r#"{"message": "Fix the parser."}"#))
            .await;
        if status != 404 || Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(status, 200, "{body}");
    // SIGTERM: the endpoint stops, and flushes its telemetry on the way out.
    let stopped = Command::new("kill")
        .args(["-TERM", &endpoint.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(stopped.success());
    let out = tokio::task::spawn_blocking(move || {
        let status = endpoint.wait().expect("the endpoint exits");
        let mut stderr = String::new();
        if let Some(mut pipe) = endpoint.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        (status, stderr)
    })
    .await
    .expect("join");
    server.shutdown().await;
    assert_eq!(out.0.code(), Some(0), "{}", out.1);

    let received = receiver.received();
    for r in &received {
        assert!(
            !String::from_utf8_lossy(&r.body).contains(KEY),
            "the API key was exported"
        );
    }
    let spans: Vec<Span> = decode_traces(&received)
        .iter()
        .flat_map(|t| &t.resource_spans)
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| s.spans.clone())
        .collect();
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "{spans:#?}");
    let agent = roots[0];
    assert_eq!(agent.name, "invoke_agent rebound");
    assert_eq!(int(agent, "rebound.seed"), Some(5));
    assert_eq!(int(agent, "rebound.retries"), Some(2));
    assert_eq!(
        string(agent, "gen_ai.conversation.id").as_deref(),
        Some("otel")
    );
    let top = children(&spans, agent);
    let names: Vec<&str> = top.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "chat claude-test",
            "execute_tool read",
            "execute_tool read",
            "chat claude-test"
        ],
        "{top:#?}"
    );
    assert_each_span_within_its_parent(&spans);
    let attempts = children(&spans, top[0]);
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    assert_eq!(int(attempts[0], "http.response.status_code"), Some(529));
    assert_eq!(int(attempts[1], "http.response.status_code"), Some(429));
    assert_eq!(
        top[0].events.iter().filter(|e| e.name == "retry").count(),
        2
    );

    let metrics: Vec<String> = decode_metrics(&received)
        .iter()
        .flat_map(|m| &m.resource_metrics)
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| s.metrics.iter().map(|m| m.name.clone()))
        .collect();
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "rebound.retries",
        "rebound.tool.calls",
    ] {
        assert!(
            metrics.iter().any(|m| m == name),
            "{name} missing from {metrics:?}"
        );
    }
}
