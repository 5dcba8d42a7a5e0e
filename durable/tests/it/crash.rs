//! Durable runs against a real Restate server: the endpoint is killed with SIGKILL at the
//! worst moments (after a tool's side effect, in the middle of an 8 s backoff, mid-stream),
//! then Restate itself is killed mid-run; each time the run completes as if nothing
//! happened: no request that completed is sent again, the tool's side effect happens once,
//! and the backoff ends at the time it was set for.
//!
//! The endpoint is this test binary itself, started again as a child process running only
//! [`endpoint_process`], so that it can be killed like any deployed endpoint.

use crate::restate;

use rebound_core::{
    BatchOutcome, CallOutcome, Conversation, MachineConfig, ProviderKind, RetryConfig, Role,
    ToolCall, ToolOutput, ToolSpec,
};
use rebound_durable::{idempotency_key, register, serve, DurableAgent};
use rebound_effects::provider::{
    ApiKey, BoxFuture, DeltaSink, HttpProvider, HttpProviderConfig, Provider, ProviderRequest,
    SendError,
};
use rebound_effects::runner::ToolExecutor;
use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome, RequestRecord};
use rebound_sim::scenario::Scenario;
use restate::{free_port, Client, RestateServer};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PORT: &str = "REBOUND_DURABLE_CHILD_PORT";
const PROVIDER_URL: &str = "REBOUND_DURABLE_CHILD_PROVIDER";
const RECORD: &str = "REBOUND_DURABLE_CHILD_RECORD";
const CRASH_MARK: &str = "REBOUND_DURABLE_CHILD_CRASH_MARK";
const TRACES: &str = "REBOUND_DURABLE_CHILD_TRACES";
const SPANS: &str = "REBOUND_DURABLE_CHILD_SPANS";

/// An OpenTelemetry exporter that appends each span it is given to a file, one JSON line
/// each (the process, the span's name, ids and the attributes the test reads), as it ends:
/// a process killed later has written what it exported.
#[derive(Debug)]
struct SpanFile(PathBuf);

impl opentelemetry_sdk::trace::SpanExporter for SpanFile {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.0)
            .expect("the span file");
        for span in batch {
            let attribute = |key: &str| {
                span.attributes
                    .iter()
                    .find(|kv| kv.key.as_str() == key)
                    .map(|kv| kv.value.to_string())
            };
            let line = json!({
                "process": std::process::id(),
                "name": span.name,
                "span": span.span_context.span_id().to_string(),
                "parent": span.parent_span_id.to_string(),
                "tool_call": attribute("gen_ai.tool.call.id"),
                "attempt": attribute("rebound.attempt"),
            });
            writeln!(file, "{line}").expect("a span line");
        }
        Ok(())
    }
}

/// Exports this process's rebound spans to `path` (a [`SpanFile`]).
fn export_spans_to(path: PathBuf) {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    let tracer = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(SpanFile(path))
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer.tracer("durable-crash-test"))
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() == rebound_effects::telemetry::names::TRACING_TARGET
        }));
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
        .expect("one subscriber");
}

/// A tool with a side effect: appends one line per call (its id and idempotency key) to a
/// file.
struct Record(PathBuf);

impl ToolExecutor for Record {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "record".into(),
            description: "Records a note.".into(),
            input_schema: json!({"type": "object", "properties": {"note": {"type": "string"}}}),
        }]
    }

    fn run_batch<'a>(
        &'a self,
        calls: Vec<ToolCall>,
        _cancel: &'a tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let key = idempotency_key().unwrap_or_else(|| "none".into());
            calls
                .iter()
                .map(|call| {
                    let mut file = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&self.0)
                        .expect("the record file opens");
                    writeln!(file, "{} {key}", call.id).expect("the record is written");
                    file.sync_all().expect("the record is stored");
                    CallOutcome::ok(&call.id, ToolOutput::text("recorded"))
                })
                .collect()
        })
    }
}

/// The fake provider, killing its own process (SIGKILL) on the first request after a tool
/// result when `mark` does not exist yet: between a tool's journaled side effect and the
/// next request.
struct CrashAfterTool {
    inner: HttpProvider,
    mark: Option<PathBuf>,
}

impl Provider for CrashAfterTool {
    fn label(&self) -> String {
        self.inner.label()
    }

    fn send<'a>(
        &'a self,
        request: ProviderRequest<'a>,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<rebound_core::AssistantResponse, SendError>> {
        if let Some(mark) = &self.mark {
            let after_tool = request
                .conversation
                .last()
                .is_some_and(|m| m.role == Role::User && m.tool_results().next().is_some());
            if after_tool && !mark.exists() {
                std::fs::write(mark, "crashed").expect("the mark is written");
                // SAFETY: kill(2) on our own pid; nothing to uphold.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
            }
        }
        self.inner.send(request, deltas)
    }
}

/// Not a test of its own: the endpoint process the tests below start and kill. Does
/// nothing unless started by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_process() {
    let Ok(port) = std::env::var(PORT) else {
        return;
    };
    let base_url = std::env::var(PROVIDER_URL).expect("the provider's URL");
    let record = PathBuf::from(std::env::var(RECORD).expect("the record file"));
    let config = HttpProviderConfig::new(
        ProviderKind::Anthropic,
        "claude-sonnet-4-5",
        ApiKey::new("sk-ant-test"),
    )
    .with_base_url(base_url);
    let provider = CrashAfterTool {
        inner: HttpProvider::new(config).expect("a provider"),
        mark: std::env::var_os(CRASH_MARK).map(PathBuf::from),
    };
    let machine = MachineConfig::default().with_retry(
        RetryConfig::default()
            .with_jitter(false)
            .with_max_attempts(4),
    );
    let mut agent =
        DurableAgent::new(machine, vec![Box::new(provider)]).tools(Arc::new(Record(record)));
    if let Some(dir) = std::env::var_os(TRACES) {
        agent = agent.traces(PathBuf::from(dir));
    }
    if let Some(path) = std::env::var_os(SPANS) {
        export_spans_to(PathBuf::from(path));
    }
    let listener =
        tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>().expect("a port")))
            .await
            .expect("the endpoint's port");
    serve(agent, listener).await;
}

/// [`endpoint_process`]'s name in this test binary: its module's path without the crate's
/// name, then its own.
fn endpoint_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, path)| path);
    format!("{module}::endpoint_process")
}

/// The endpoint as a child process on `port`.
struct Endpoint {
    port: u16,
    env: Vec<(&'static str, String)>,
    child: Option<Child>,
}

impl Endpoint {
    fn start(port: u16, env: Vec<(&'static str, String)>) -> Endpoint {
        let mut endpoint = Endpoint {
            port,
            env,
            child: None,
        };
        endpoint.restart();
        endpoint
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn restart(&mut self) {
        self.kill();
        let exe = std::env::current_exe().expect("the test binary");
        let mut command = Command::new(exe);
        command
            .args([
                endpoint_test_name().as_str(),
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(PORT, self.port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (k, v) in &self.env {
            command.env(k, v);
        }
        self.child = Some(command.spawn().expect("the endpoint starts"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "the endpoint never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process has ended (it killed itself).
    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// SIGKILL, and wait.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn fake_provider(scenario: serde_json::Value) -> FakeServer {
    let scenario = Scenario::from_json(&scenario.to_string()).expect("a valid scenario");
    FakeServer::start(FakeServerConfig::new(scenario, 7))
        .await
        .expect("the fake provider starts")
}

/// Waits until the fake provider's log has a record matching `what`; returns it.
async fn wait_for(
    server: &FakeServer,
    within: Duration,
    what: impl Fn(&RequestRecord) -> bool,
) -> RequestRecord {
    let deadline = Instant::now() + within;
    loop {
        if let Some(r) = server.requests().into_iter().find(|r| what(r)) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "never came: {:#?}",
            server
                .requests()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn answered(r: &RequestRecord, turn: usize) -> bool {
    matches!(r.outcome, Outcome::Answered { turn: t, .. } if t == turn)
}

fn faulted(r: &RequestRecord) -> bool {
    matches!(r.outcome, Outcome::Fault { .. })
}

/// The record file's lines: `call_id key`.
fn records(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

/// No request the provider answered to completion was sent again: the bodies of the
/// completed answers all differ. A record in `interrupted` (in flight when a process was
/// killed) did not complete: the same request must come again, and does.
fn assert_no_completed_request_twice(server: &FakeServer, interrupted: &[usize]) {
    let log = server.requests();
    let lines = || log.iter().map(ToString::to_string).collect::<Vec<_>>();
    let completed: Vec<&RequestRecord> = log
        .iter()
        .filter(|r| {
            matches!(r.outcome, Outcome::Answered { .. }) && !interrupted.contains(&r.index)
        })
        .collect();
    for (i, a) in completed.iter().enumerate() {
        for b in &completed[i + 1..] {
            assert_ne!(
                a.body,
                b.body,
                "#{} was sent again as #{}: {:#?}",
                a.index,
                b.index,
                lines()
            );
        }
    }
    for &cut in interrupted {
        let again = log
            .iter()
            .find(|r| r.index > cut && r.body == log[cut].body);
        assert!(
            again.is_some(),
            "#{cut} was never sent again: {:#?}",
            lines()
        );
    }
}

fn reply_text(body: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    value["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_endpoint_loses_nothing_and_repeats_nothing() {
    let Some(restate) = RestateServer::start("a_killed_endpoint_loses_nothing") else {
        return;
    };
    let long_answer = "All three notes are recorded, and here is a long summary of them, \
                       streamed slowly so that the endpoint can be killed in the middle of it.";
    let fake = fake_provider(json!({
        "provider": "anthropic",
        "tools": [{"name": "record", "description": "Records a note."}],
        "turns": [
            {"answer": {"tool_calls": [{"id": "toolu_1", "name": "record", "input": {"note": "one"}}]}},
            {"faults": [{"type": "http", "status": 429, "headers": {"retry-after": "8"}}],
             "answer": {"tool_calls": [{"id": "toolu_2", "name": "record", "input": {"note": "two"}}]}},
            {"faults": [{"type": "slow_drip", "interval_ms": 400}],
             "answer": {"text": long_answer}},
            // The script moves on with every answer it starts: the request sent again
            // after the kill mid-stream gets this one.
            {"answer": {"text": long_answer}}
        ]
    }))
    .await;
    let dir = tempfile::tempdir().expect("a folder");
    let record = dir.path().join("record.txt");
    let mut endpoint = Endpoint::start(
        free_port(),
        vec![
            (PROVIDER_URL, fake.base_url()),
            (RECORD, record.display().to_string()),
            (CRASH_MARK, dir.path().join("crashed").display().to_string()),
            (TRACES, dir.path().display().to_string()),
            (SPANS, dir.path().join("spans.txt").display().to_string()),
        ],
    );
    register(&restate.admin_url(), &endpoint.url())
        .await
        .expect("the endpoint registers");
    let client = Client::new(&restate);
    let invocation = client.send_run("conv-1", "Record two notes.").await;

    // (a) The endpoint kills itself after the first tool call, before the next request.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !endpoint.exited() {
        assert!(
            Instant::now() < deadline,
            "the endpoint never crashed after the tool"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(records(&record).len(), 1, "the tool ran before the crash");
    endpoint.restart();

    // (b) The second request gets a 429 asking for 8 s; 3 s into the backoff, kill -9. The
    // length does not matter, only that a backoff started over after the restart (3 s + 1 s
    // down + 8 s) is told from one kept (8 s); the other test keeps a longer one.
    let limited = wait_for(&fake, Duration::from_secs(30), faulted).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    endpoint.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    endpoint.restart();
    let retried = wait_for(&fake, Duration::from_secs(60), |r| answered(r, 1)).await;
    let waited = retried.at_ms - limited.at_ms;
    assert!(
        (8_000..11_000).contains(&waited),
        "the retry came {waited} ms after the 429 (asked: 8,000; a backoff started over \
         after the restart would be 12,000 or more)"
    );

    // (c) The third answer streams slowly; kill -9 in the middle of it.
    let streaming = wait_for(&fake, Duration::from_secs(30), |r| answered(r, 2)).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    endpoint.kill();
    endpoint.restart();

    let (status, body) = client.attach(&invocation, Duration::from_secs(60)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(reply_text(&body), long_answer);
    // The side effect happened once per call, each with its own key, stable across crashes.
    let lines = records(&record);
    let ids: Vec<&str> = lines.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["toolu_1", "toolu_2"], "{lines:?}");
    assert_ne!(lines[0].1, lines[1].1);
    assert!(
        lines.iter().all(|(id, key)| key.ends_with(id.as_str())),
        "{lines:?}"
    );
    assert_no_completed_request_twice(&fake, &[streaming.index]);

    // The run that crashed three times and resumed has one whole trace, which replays: the
    // journal gave every execution the same events.
    let traces: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("the folder")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let trace = rebound_sim::Trace::read(std::io::BufReader::new(
        std::fs::File::open(&traces[0]).expect("the trace"),
    ))
    .expect("a readable trace");
    let report = rebound_sim::replay(&trace).unwrap_or_else(|e| panic!("{e}"));
    assert!(report.steps >= 8, "{report:?}");
    let sent = |kind: &str| {
        trace
            .steps
            .iter()
            .flat_map(|s| &s.commands)
            .filter(|c| c["type"] == kind)
            .count()
    };
    // The machine's four requests (the one cut by the kill was sent again by the journal's
    // replay, not by the machine) and its one retry, the 429's.
    assert_eq!((sent("send_request"), sent("notify_retry")), (4, 1));

    // The conversation is the object's state: a second call continues it.
    let (status, body) = client.call("Agent/conv-1/conversation", None).await;
    assert_eq!(status, 200, "{body}");
    let conversation: Conversation = serde_json::from_str(&body).expect("a conversation");
    assert_eq!(conversation.len(), 6, "{conversation:?}");
    drop(endpoint);

    // Telemetry: each of the four processes exported the spans of what it did live, and a
    // step the journal replayed was not exported again: one span per tool call and per
    // attempt that ended (the attempt cut mid-stream never ended), a `chat` per request
    // whose answer came, and one run span, the last process's, holding only the request
    // it sent.
    let spans: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("spans.txt"))
        .expect("the exported spans")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a span line"))
        .collect();
    let named = |name: &str| -> Vec<&serde_json::Value> {
        spans.iter().filter(|s| s["name"] == name).collect()
    };
    let tools: Vec<&str> = named("execute_tool record")
        .iter()
        .filter_map(|s| s["tool_call"].as_str())
        .collect();
    assert_eq!(tools, ["toolu_1", "toolu_2"], "{spans:#?}");
    let attempts: Vec<&str> = named("attempt")
        .iter()
        .filter_map(|s| s["attempt"].as_str())
        .collect();
    // The first request; the second's 429 and its retry; the third, sent again.
    assert_eq!(attempts, ["1", "1", "2", "1"], "{spans:#?}");
    assert_eq!(named("chat claude-sonnet-4-5").len(), 3, "{spans:#?}");
    let runs = named("invoke_agent");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    let last = runs[0];
    let children: Vec<&str> = spans
        .iter()
        .filter(|s| s["parent"] == last["span"])
        .map(|s| s["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(children, ["chat claude-sonnet-4-5"], "{spans:#?}");
    let processes: std::collections::BTreeSet<u64> =
        spans.iter().filter_map(|s| s["process"].as_u64()).collect();
    assert_eq!(processes.len(), 4, "{spans:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_restate_server_loses_nothing_and_repeats_nothing() {
    let Some(mut restate) = RestateServer::start("a_killed_restate_server") else {
        return;
    };
    let fake = fake_provider(json!({
        "provider": "anthropic",
        "tools": [{"name": "record", "description": "Records a note."}],
        "turns": [
            {"answer": {"tool_calls": [{"id": "toolu_1", "name": "record", "input": {"note": "one"}}]}},
            {"faults": [{"type": "http", "status": 529, "headers": {"retry-after": "10"}}],
             "answer": {"text": "Recorded."}}
        ]
    }))
    .await;
    let dir = tempfile::tempdir().expect("a folder");
    let record = dir.path().join("record.txt");
    // An endpoint Restate cannot reach is refused, with the address and Restate's reason.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    match register(&restate.admin_url(), &nowhere).await {
        Err(e @ rebound_durable::RegisterError::Refused { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&restate.admin_url()), "{message}");
            assert!(message.contains(&nowhere), "{message}");
        }
        other => panic!("registered an endpoint nobody serves: {other:?}"),
    }
    let endpoint = Endpoint::start(
        free_port(),
        vec![
            (PROVIDER_URL, fake.base_url()),
            (RECORD, record.display().to_string()),
        ],
    );
    register(&restate.admin_url(), &endpoint.url())
        .await
        .expect("the endpoint registers");
    let client = Client::new(&restate);
    let invocation = client.send_run("conv-2", "Record a note.").await;

    // In the middle of the 10 s backoff, Restate itself dies, and comes back 2 s later.
    let overloaded = wait_for(&fake, Duration::from_secs(30), faulted).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    restate.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    restate.restart();

    let (status, body) = client.attach(&invocation, Duration::from_secs(90)).await;
    assert_eq!(status, 200, "{body}\n{}", restate.log_tail());
    assert_eq!(reply_text(&body), "Recorded.");
    let retried = wait_for(&fake, Duration::from_secs(1), |r| answered(r, 1)).await;
    let waited = retried.at_ms - overloaded.at_ms;
    assert!(
        (10_000..14_000).contains(&waited),
        "the retry came {waited} ms after the 529 (asked: 10,000)"
    );
    assert_eq!(records(&record).len(), 1, "the tool ran once");
    assert_no_completed_request_twice(&fake, &[]);
}
