//! The runner's spans and events, as a `tracing` subscriber sees them: the runner against
//! the fake provider on loopback, with retries (backoff and a server hint), tool calls (one
//! failing), the retry budget, a fallback, and a run that fails; content only when asked.
//! And their times, as an OpenTelemetry exporter gets them through `tracing-opentelemetry`:
//! every span within its parent.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use rebound_core::wire::StreamDelta;
use rebound_core::{
    BudgetConfig, BudgetUse, MachineConfig, ProviderKind, RetryConfig, TargetSpec, ToolOutput,
    ToolSpec,
};
use rebound_effects::budget::SharedBudget;
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::receiver::{Receiver, ReceiverError};
use rebound_effects::runner::{RunInput, Runner};
use rebound_effects::telemetry::{names, Telemetry};
use rebound_effects::tools::{FnTool, ToolError, ToolSet};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::Scenario;
use serde_json::{json, Map, Value};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

const KEY: &str = "sk-ant-telemetry-test-key-0123456789";

/// A span as the layer saw it: its `tracing` name, fields (as recorded), parent, events.
#[derive(Debug, Clone, Default)]
struct SpanRec {
    id: u64,
    name: String,
    parent: Option<u64>,
    fields: Map<String, Value>,
    events: Vec<Map<String, Value>>,
    closed: bool,
}

impl SpanRec {
    fn otel_name(&self) -> String {
        self.fields
            .get("otel.name")
            .and_then(Value::as_str)
            .unwrap_or(&self.name)
            .to_owned()
    }
    fn get(&self, key: &str) -> &Value {
        self.fields.get(key).unwrap_or(&Value::Null)
    }
    fn event(&self, name: &str) -> Vec<&Map<String, Value>> {
        self.events
            .iter()
            .filter(|e| e.get("message").and_then(Value::as_str) == Some(name))
            .collect()
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<SpanRec>>>);

struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().target() != names::TRACING_TARGET {
            return;
        }
        let mut rec = SpanRec {
            id: id.into_u64(),
            name: attrs.metadata().name().into(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.id().into_u64()),
            ..SpanRec::default()
        };
        attrs.record(&mut Fields(&mut rec.fields));
        self.0.lock().unwrap().push(rec);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(rec) = spans
            .iter_mut()
            .find(|s| s.id == id.into_u64() && !s.closed)
        {
            values.record(&mut Fields(&mut rec.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() != names::TRACING_TARGET {
            return;
        }
        let Some(parent) = ctx.event_span(event).map(|s| s.id().into_u64()) else {
            return;
        };
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        let mut spans = self.0.lock().unwrap();
        if let Some(rec) = spans.iter_mut().find(|s| s.id == parent && !s.closed) {
            rec.events.push(fields);
        }
    }

    fn on_close(&self, id: Id, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some(rec) = spans
            .iter_mut()
            .find(|s| s.id == id.into_u64() && !s.closed)
        {
            rec.closed = true;
        }
    }
}

impl Capture {
    fn spans(&self) -> Vec<SpanRec> {
        self.0.lock().unwrap().clone()
    }
}

fn scenario(json: &str) -> Scenario {
    Scenario::from_json(json).unwrap_or_else(|e| panic!("bad test scenario: {e}"))
}

async fn server(json: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::new(scenario(json), 1))
        .await
        .expect("fake server starts")
}

fn http(server: &FakeServer, model: &str) -> Box<dyn Provider> {
    let mut config = HttpProviderConfig::new(ProviderKind::Anthropic, model, ApiKey::new(KEY));
    config.base_url = server.base_url();
    Box::new(HttpProvider::new(config).expect("valid provider"))
}

fn config(models: &[&str]) -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        .with_targets(
            models
                .iter()
                .map(|m| TargetSpec::new(ProviderKind::Anthropic, *m).with_context_window(None))
                .collect(),
        )
}

fn tools() -> Arc<ToolSet> {
    let spec = |name: &str| ToolSpec {
        name: name.into(),
        description: format!("The {name} tool."),
        input_schema: json!({"type": "object"}),
    };
    let read = FnTool::new(spec("read"), |_input, _ctx| async {
        Ok(ToolOutput::text("fn main() {}"))
    });
    let grep = FnTool::new(spec("grep"), |_input, _ctx| async {
        Err(ToolError::model("no match for `fn parse`"))
    });
    Arc::new(
        ToolSet::builder()
            .tool(read)
            .tool(grep)
            .build()
            .expect("tools"),
    )
}

/// Runs `runner` once with a capturing subscriber as the default, returning the spans.
async fn captured(mut runner: Runner, prompt: &str) -> (Vec<SpanRec>, bool) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let ok = runner.run(RunInput::text(prompt)).await.is_ok();
    (capture.spans(), ok)
}

fn named<'a>(spans: &'a [SpanRec], name: &str) -> Vec<&'a SpanRec> {
    spans.iter().filter(|s| s.name == name).collect()
}

const RETRIES_THEN_TOOLS: &str = r#"{"turns": [
    {"faults": [{"type": "http", "status": 529},
                {"type": "http", "status": 429, "headers": {"retry-after-ms": "30"}}],
     "answer": {"text": "Looking.", "tool_calls": [
        {"id": "toolu_read", "name": "read", "input": {"path": "src/main.rs"}},
        {"id": "toolu_grep", "name": "grep", "input": {"pattern": "fn parse"}}]}},
    {"answer": {"text": "Done."}}
]}"#;

#[tokio::test]
async fn a_run_is_an_invoke_agent_span_with_chat_spans_covering_their_retries_and_tool_spans() {
    let s = server(RETRIES_THEN_TOOLS).await;
    let runner = Runner::new(config(&["claude-test"]), vec![http(&s, "claude-test")])
        .seed(7)
        .tools(tools())
        .telemetry(Telemetry::new().agent_name("coder"));
    let (spans, ok) = captured(runner, "Fix the parser.").await;
    s.shutdown().await;
    assert!(ok);
    assert!(
        spans.iter().all(|s| s.closed),
        "every span ends: {spans:#?}"
    );

    let agents = named(&spans, "invoke_agent");
    assert_eq!(agents.len(), 1);
    let agent = agents[0];
    assert_eq!(agent.otel_name(), "invoke_agent coder");
    assert_eq!(agent.get("otel.kind"), "internal");
    assert_eq!(agent.get(names::GEN_AI_OPERATION_NAME), "invoke_agent");
    assert_eq!(agent.get(names::GEN_AI_PROVIDER_NAME), "anthropic");
    assert_eq!(agent.get(names::GEN_AI_REQUEST_MODEL), "claude-test");
    assert_eq!(agent.get(names::REBOUND_SEED), 7);
    assert_eq!(agent.get(names::REBOUND_FINISH_REASON), "end_turn");
    assert_eq!(agent.get(names::REBOUND_TURNS), 2);
    assert_eq!(agent.get(names::REBOUND_REQUESTS), 4);
    assert_eq!(agent.get(names::REBOUND_RETRIES), 2);
    assert_eq!(agent.get(names::ERROR_TYPE), &Value::Null);

    // Two logical model calls; the first covers three attempts and two retries.
    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.parent, Some(agent.id));
        assert_eq!(chat.otel_name(), "chat claude-test");
        assert_eq!(chat.get("otel.kind"), "client");
        assert_eq!(chat.get(names::GEN_AI_OPERATION_NAME), "chat");
        assert_eq!(chat.get(names::GEN_AI_PROVIDER_NAME), "anthropic");
        assert_eq!(chat.get(names::GEN_AI_RESPONSE_MODEL), "claude-test");
        assert!(
            chat.get(names::GEN_AI_RESPONSE_ID)
                .as_str()
                .is_some_and(|id| id.starts_with("msg_")),
            "{chat:?}"
        );
        assert!(chat.get(names::GEN_AI_USAGE_INPUT_TOKENS).as_u64() > Some(0));
        assert!(chat.get(names::GEN_AI_USAGE_OUTPUT_TOKENS).as_u64() > Some(0));
        assert_eq!(chat.get(names::ERROR_TYPE), &Value::Null);
        // No content without the opt-in.
        assert_eq!(chat.get(names::GEN_AI_INPUT_MESSAGES), &Value::Null);
        assert_eq!(chat.get(names::GEN_AI_OUTPUT_MESSAGES), &Value::Null);
    }
    let (first, second) = (chats[0], chats[1]);
    assert_eq!(first.get(names::GEN_AI_RESPONSE_FINISH_REASONS), "tool_use");
    assert_eq!(
        second.get(names::GEN_AI_RESPONSE_FINISH_REASONS),
        "end_turn"
    );
    assert_eq!(first.get(names::REBOUND_ATTEMPTS), 3);
    assert_eq!(second.get(names::REBOUND_ATTEMPTS), 1);

    let attempts: Vec<&SpanRec> = named(&spans, "attempt")
        .into_iter()
        .filter(|a| a.parent == Some(first.id))
        .collect();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[0].get(names::REBOUND_ATTEMPT), 1);
    assert_eq!(attempts[0].get(names::HTTP_RESPONSE_STATUS_CODE), 529);
    assert_eq!(attempts[0].get(names::ERROR_TYPE), "unavailable");
    assert_eq!(attempts[0].get("otel.status_code"), "error");
    assert_eq!(attempts[1].get(names::HTTP_RESPONSE_STATUS_CODE), 429);
    assert_eq!(attempts[1].get(names::ERROR_TYPE), "rate_limited");
    assert_eq!(attempts[1].get(names::REBOUND_RETRY_AFTER_MS), 30);
    assert_eq!(attempts[2].get(names::REBOUND_ATTEMPT), 3);
    assert_eq!(attempts[2].get(names::ERROR_TYPE), &Value::Null);

    let retries = first.event(names::EVENT_RETRY);
    assert_eq!(retries.len(), 2, "{first:#?}");
    assert_eq!(retries[0]["rebound.retry.reason"], names::RETRY_BACKOFF);
    assert_eq!(retries[0]["rebound.retry.delay_ms"], 10);
    assert_eq!(retries[0][names::ERROR_TYPE], "unavailable");
    assert_eq!(retries[0]["http.response.status_code"], 529);
    assert_eq!(retries[0]["rebound.attempt"], 2);
    assert_eq!(retries[1]["rebound.retry.reason"], names::RETRY_SERVER_HINT);
    assert_eq!(retries[1]["rebound.retry.delay_ms"], 30);

    // One span per tool call, children of the run, the failing one marked.
    let tools = named(&spans, "execute_tool");
    assert_eq!(tools.len(), 2, "{tools:#?}");
    for tool in &tools {
        assert_eq!(tool.parent, Some(agent.id));
        assert_eq!(tool.get(names::GEN_AI_OPERATION_NAME), "execute_tool");
        assert_eq!(tool.get("otel.kind"), "internal");
        assert_eq!(tool.get(names::GEN_AI_TOOL_TYPE), "function");
        assert_eq!(tool.get(names::GEN_AI_TOOL_CALL_ARGUMENTS), &Value::Null);
    }
    let read = tools
        .iter()
        .find(|t| t.otel_name() == "execute_tool read")
        .unwrap();
    let grep = tools
        .iter()
        .find(|t| t.otel_name() == "execute_tool grep")
        .unwrap();
    assert_eq!(read.get(names::GEN_AI_TOOL_CALL_ID), "toolu_read");
    assert_eq!(read.get(names::ERROR_TYPE), &Value::Null);
    assert_eq!(grep.get(names::GEN_AI_TOOL_CALL_ID), "toolu_grep");
    assert_eq!(grep.get(names::ERROR_TYPE), names::ERROR_TOOL);
    assert_eq!(grep.get("otel.status_code"), "error");
    // The model-visible error text is content: not recorded without the opt-in.
    assert_eq!(grep.get("otel.status_description"), &Value::Null);

    let all = format!("{spans:?}");
    assert!(!all.contains(KEY), "the API key reached a span");
    assert!(
        !all.contains("Fix the parser"),
        "content without the opt-in"
    );
}

#[tokio::test]
async fn content_is_recorded_only_when_asked_for() {
    let s = server(RETRIES_THEN_TOOLS).await;
    let runner = Runner::new(config(&["claude-test"]), vec![http(&s, "claude-test")])
        .seed(7)
        .tools(tools())
        .telemetry(Telemetry::new().capture_content(true));
    let (spans, ok) = captured(runner, "Fix the parser.").await;
    s.shutdown().await;
    assert!(ok);
    let chats = named(&spans, "chat");
    let input: Value =
        serde_json::from_str(chats[0].get(names::GEN_AI_INPUT_MESSAGES).as_str().unwrap()).unwrap();
    assert_eq!(
        input,
        json!([{"role": "user", "parts": [{"type": "text", "content": "Fix the parser."}]}])
    );
    let output: Value = serde_json::from_str(
        chats[1]
            .get(names::GEN_AI_OUTPUT_MESSAGES)
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(output[0]["parts"][0]["content"], "Done.");
    assert_eq!(output[0]["finish_reason"], "end_turn");
    let tools = named(&spans, "execute_tool");
    let read = tools
        .iter()
        .find(|t| t.otel_name() == "execute_tool read")
        .unwrap();
    assert_eq!(
        read.get(names::GEN_AI_TOOL_CALL_ARGUMENTS),
        r#"{"path":"src/main.rs"}"#
    );
    assert_eq!(read.get(names::GEN_AI_TOOL_CALL_RESULT), "fn main() {}");
    let grep = tools
        .iter()
        .find(|t| t.otel_name() == "execute_tool grep")
        .unwrap();
    assert_eq!(
        grep.get("otel.status_description"),
        "no match for `fn parse`"
    );
    assert!(!format!("{spans:?}").contains(KEY));
}

#[tokio::test]
async fn a_fallback_ends_the_chat_span_as_failed_and_a_failed_run_says_why() {
    // The first target is down for good; the second refuses the key.
    let down = server(
        r#"{"random": {"outages": [{"from_ms": 0, "until_ms": 600000,
        "fault": {"type": "http", "status": 529}}]}}"#,
    )
    .await;
    let refuses = server(r#"{"turns": [{"faults": [{"type": "http", "status": 401}]}]}"#).await;
    let mut machine = config(&["claude-down", "claude-backup"]);
    machine.retry.max_attempts = 2;
    let runner = Runner::new(
        machine,
        vec![http(&down, "claude-down"), http(&refuses, "claude-backup")],
    )
    .seed(3);
    let (spans, ok) = captured(runner, "hi").await;
    down.shutdown().await;
    refuses.shutdown().await;
    assert!(!ok);
    let agent = named(&spans, "invoke_agent")[0];
    assert_eq!(agent.get(names::ERROR_TYPE), "auth_failed");
    assert!(agent.get("otel.status_description").as_str().is_some());
    let fallback = agent.event(names::EVENT_FALLBACK);
    assert_eq!(fallback.len(), 1, "{agent:#?}");
    assert_eq!(fallback[0][names::ERROR_TYPE], "unavailable");
    assert_eq!(
        fallback[0]["rebound.fallback.to"],
        "anthropic:claude-backup"
    );

    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 2);
    assert_eq!(chats[0].otel_name(), "chat claude-down");
    assert_eq!(chats[0].get(names::ERROR_TYPE), "unavailable");
    assert_eq!(chats[0].get("otel.status_code"), "error");
    assert_eq!(chats[0].get(names::REBOUND_ATTEMPTS), 2);
    assert_eq!(chats[1].otel_name(), "chat claude-backup");
    assert_eq!(chats[1].get(names::REBOUND_TARGET), 1);
    assert_eq!(chats[1].get(names::ERROR_TYPE), "auth_failed");
    let all = format!("{spans:?}");
    assert!(!all.contains(KEY), "the API key reached a span");
}

#[tokio::test]
async fn a_retry_waiting_for_the_shared_budget_is_an_event_with_its_wait() {
    let s = server(
        r#"{"turns": [{"faults": [{"type": "http", "status": 529}],
        "answer": {"text": "ok"}}]}"#,
    )
    .await;
    let budget = SharedBudget::new(BudgetConfig::default());
    let runner = Runner::new(
        config(&["claude-test"]).with_retry_budget(BudgetUse::new(1_000)),
        vec![http(&s, "claude-test")],
    )
    .seed(1)
    .budget(budget);
    let (spans, ok) = captured(runner, "hi").await;
    s.shutdown().await;
    assert!(ok);
    let chat = named(&spans, "chat")[0];
    let permits = chat.event(names::EVENT_BUDGET_PERMIT);
    assert_eq!(permits.len(), 1, "the charged retry's permit: {chat:#?}");
    assert_eq!(permits[0]["rebound.budget.permit"], "charged");
    assert_eq!(permits[0]["rebound.budget.decision"], "granted");
    assert!(permits[0]["rebound.budget.wait_ms"].is_u64());
}

#[tokio::test]
async fn without_a_subscriber_a_run_records_nothing_and_still_works() {
    let s = server(RETRIES_THEN_TOOLS).await;
    let mut runner = Runner::new(config(&["claude-test"]), vec![http(&s, "claude-test")])
        .seed(7)
        .tools(tools());
    assert!(runner.run(RunInput::text("Fix the parser.")).await.is_ok());
    s.shutdown().await;
}

#[tokio::test]
async fn an_overflow_ends_its_chat_span_and_the_compaction_is_an_event_with_its_sizes() {
    let s = server(
        r#"{"turns": [{"faults": [{"type": "context_overflow"}], "answer": {"text": "Fixed."}}]}"#,
    )
    .await;
    let runner = Runner::new(
        config(&["claude-test"]).with_compact_with(rebound_core::CompactionMethod::Summary),
        vec![http(&s, "claude-test")],
    )
    .seed(1)
    .conversation(
        (0..6)
            .flat_map(|i| {
                [
                    rebound_core::Message::user_text(format!("question {i} {}", "x".repeat(2_000))),
                    rebound_core::Message::assistant_text(format!("answer {i}")),
                ]
            })
            .collect(),
    );
    let (spans, ok) = captured(runner, "and now?").await;
    s.shutdown().await;
    assert!(ok);
    let agent = named(&spans, "invoke_agent")[0];
    let compactions = agent.event(names::EVENT_COMPACTION);
    assert_eq!(compactions.len(), 1, "{agent:#?}");
    let c = compactions[0];
    assert_eq!(c["rebound.compaction.reason"], "overflow");
    assert!(
        c["rebound.compaction.after_bytes"].as_i64()
            < c["rebound.compaction.before_bytes"].as_i64()
    );
    let chats = named(&spans, "chat");
    let purposes: Vec<&str> = chats
        .iter()
        .map(|c| {
            c.get(names::REBOUND_REQUEST_PURPOSE)
                .as_str()
                .unwrap_or("?")
        })
        .collect();
    let errors: Vec<&Value> = chats.iter().map(|c| c.get(names::ERROR_TYPE)).collect();
    // The refused turn, the summary that compacts it, the turn again.
    assert_eq!(purposes, ["turn", "summary", "turn"], "{chats:#?}");
    assert_eq!(errors[0], "context_overflow");
    assert_eq!(errors[1], &Value::Null);
    assert_eq!(errors[2], &Value::Null);
}

/// An OpenTelemetry exporter that keeps what it is given.
#[derive(Debug, Clone, Default)]
struct Exported(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Exported {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// When each streamed piece reached the receiver (wall time, as OpenTelemetry dates spans).
#[derive(Clone, Default)]
struct PieceTimes(Arc<Mutex<Vec<SystemTime>>>);

impl Receiver for PieceTimes {
    fn delta(&mut self, _: &StreamDelta<&str>) -> Result<(), ReceiverError> {
        self.0.lock().unwrap().push(SystemTime::now());
        Ok(())
    }
}

/// Every exported span but the run's has its parent among `spans` and lies within it in
/// time.
fn assert_each_span_within_its_parent(spans: &[SpanData]) {
    // Times from the first start, as a tracing UI shows them.
    let t0 = spans.iter().map(|s| s.start_time).min();
    let ms = |t: SystemTime| {
        t.duration_since(t0.unwrap_or(t))
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    };
    for span in spans {
        if span.parent_span_id == opentelemetry::trace::SpanId::INVALID {
            continue;
        }
        let parent = spans
            .iter()
            .find(|p| p.span_context.span_id() == span.parent_span_id)
            .unwrap_or_else(|| panic!("`{}` has no exported parent", span.name));
        assert!(
            span.start_time >= parent.start_time && span.end_time <= parent.end_time,
            "`{}` ({:.2} -> {:.2} ms) is not within its parent `{}` ({:.2} -> {:.2} ms)",
            span.name,
            ms(span.start_time),
            ms(span.end_time),
            parent.name,
            ms(parent.start_time),
            ms(parent.end_time),
        );
    }
}

/// A retried attempt, a tool call, then an answer streamed one event every 10 ms.
const RETRY_TOOL_THEN_A_PACED_ANSWER: &str = r#"{"turns": [
    {"faults": [{"type": "http", "status": 529}],
     "answer": {"text": "Looking.", "tool_calls": [
        {"id": "toolu_read", "name": "read", "input": {"path": "src/main.rs"}}]}},
    {"faults": [{"type": "slow_drip", "interval_ms": 10}],
     "answer": {"text": "Done: the parser reads every input now, and its tests pass."}}
]}"#;

/// A subscriber that exports the runner's spans as docs/telemetry.md installs the export, to
/// `exported`; flush `provider` before reading them.
fn otel_subscriber(exported: &Exported) -> (impl Subscriber + Send + Sync, SdkTracerProvider) {
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exported.clone())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("telemetry-test"))
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() == names::TRACING_TARGET
        }));
    (tracing_subscriber::registry().with(layer), provider)
}

fn sorted_names(spans: &[SpanData]) -> Vec<&str> {
    let mut names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn exported_spans_each_lie_within_their_parent_and_the_run_covers_every_turn() {
    let s = server(RETRY_TOOL_THEN_A_PACED_ANSWER).await;
    let exported = Exported::default();
    let (subscriber, provider) = otel_subscriber(&exported);
    let pieces = PieceTimes::default();
    let mut runner = Runner::new(config(&["claude-test"]), vec![http(&s, "claude-test")])
        .seed(7)
        .tools(tools())
        .receiver(pieces.clone());
    let result = {
        let _default = tracing::subscriber::set_default(subscriber);
        runner.run(RunInput::text("Fix the parser.")).await
    };
    s.shutdown().await;
    assert!(result.is_ok(), "{result:?}");
    provider.force_flush().expect("flushed");
    let spans = exported.0.lock().unwrap().clone();

    assert_eq!(
        sorted_names(&spans),
        [
            "attempt",
            "attempt",
            "attempt",
            "chat claude-test",
            "chat claude-test",
            "execute_tool read",
            "invoke_agent",
        ]
    );
    assert_each_span_within_its_parent(&spans);
    let agent = spans.iter().find(|s| s.name == "invoke_agent").unwrap();
    let last_chat = spans
        .iter()
        .filter(|s| s.name == "chat claude-test")
        .max_by_key(|s| s.start_time)
        .unwrap();
    assert_eq!(last_chat.parent_span_id, agent.span_context.span_id());
    // The answer's attempt lasts as long as its stream: past its last piece, not only its
    // first.
    let answer = spans
        .iter()
        .find(|s| s.name == "attempt" && s.parent_span_id == last_chat.span_context.span_id())
        .unwrap();
    let last_piece = *pieces.0.lock().unwrap().last().expect("streamed pieces");
    assert!(
        answer.end_time >= last_piece,
        "the attempt ended {:?} before its last streamed piece",
        last_piece
            .duration_since(answer.end_time)
            .unwrap_or_default()
    );
}

#[tokio::test]
async fn a_run_whose_future_is_dropped_mid_turn_still_covers_what_it_did() {
    // A tool call, then a 529 whose server hint (a minute) the run is waiting out when its
    // future is dropped.
    let s = server(
        r#"{"turns": [
        {"answer": {"text": "Looking.", "tool_calls": [
            {"id": "toolu_read", "name": "read", "input": {"path": "src/main.rs"}}]}},
        {"faults": [{"type": "http", "status": 529, "headers": {"retry-after-ms": "60000"}}],
         "answer": {"text": "Done."}}
    ]}"#,
    )
    .await;
    let exported = Exported::default();
    let (subscriber, provider) = otel_subscriber(&exported);
    let mut runner = Runner::new(config(&["claude-test"]), vec![http(&s, "claude-test")])
        .seed(7)
        .tools(tools());
    {
        let _default = tracing::subscriber::set_default(subscriber);
        let run = runner.run(RunInput::text("Fix the parser."));
        let waiting = async {
            while s.requests().len() < 2 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            // The 529 is read and the retry's wait begun.
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        };
        tokio::select! {
            result = run => panic!("the run waits a minute, yet ended: {result:?}"),
            () = waiting => {}
        }
    }
    s.shutdown().await;
    provider.force_flush().expect("flushed");
    let spans = exported.0.lock().unwrap().clone();
    assert_eq!(
        sorted_names(&spans),
        [
            "attempt",
            "attempt",
            "chat claude-test",
            "chat claude-test",
            "execute_tool read",
            "invoke_agent",
        ]
    );
    assert_each_span_within_its_parent(&spans);
}
