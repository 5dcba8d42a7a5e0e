//! A durable run's spans, as an OpenTelemetry exporter gets them through
//! `tracing-opentelemetry` (docs/telemetry.md's installation), against a real Restate server:
//! the same spans as `Runner::run` makes for the same world (names, parents, the run's
//! totals), and every span within its parent in time.
//!
//! The endpoint runs in this test's process, on this test's one thread, where the exporting
//! subscriber is the default.

use crate::restate;

use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use rebound_core::{MachineConfig, ProviderKind, RetryConfig, TargetSpec, ToolOutput, ToolSpec};
use rebound_durable::DurableAgent;
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::runner::{RunInput, Runner};
use rebound_effects::telemetry::names;
use rebound_effects::tools::{FnTool, ToolError, ToolSet};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::scenario::Scenario;
use restate::{Client, RestateServer};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// A 529, then an answer calling two tools (one fails), then the final answer, streamed.
const RETRY_TOOLS_THEN_AN_ANSWER: &str = r#"{"turns": [
    {"faults": [{"type": "http", "status": 529}],
     "answer": {"text": "Looking.", "tool_calls": [
        {"id": "toolu_read", "name": "read", "input": {"path": "src/main.rs"}},
        {"id": "toolu_grep", "name": "grep", "input": {"pattern": "fn parse"}}]}},
    {"faults": [{"type": "slow_drip", "interval_ms": 5}],
     "answer": {"text": "Done: the parser reads every input now."}}
]}"#;

/// An OpenTelemetry exporter that keeps what it is given.
#[derive(Debug, Clone, Default)]
struct Exported(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Exported {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().expect("lock").extend(batch);
        Ok(())
    }
}

async fn fake_provider() -> FakeServer {
    let scenario = Scenario::from_json(RETRY_TOOLS_THEN_AN_ANSWER).expect("a valid scenario");
    FakeServer::start(FakeServerConfig::new(scenario, 1))
        .await
        .expect("the fake provider starts")
}

fn provider(fake: &FakeServer) -> Box<dyn Provider> {
    let config = HttpProviderConfig::new(
        ProviderKind::Anthropic,
        "claude-test",
        ApiKey::new("sk-ant-t"),
    )
    .with_base_url(fake.base_url());
    Box::new(HttpProvider::new(config).expect("a provider"))
}

fn config() -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        .with_targets(vec![TargetSpec::new(
            ProviderKind::Anthropic,
            "claude-test",
        )
        .with_context_window(None)])
}

/// The tools: `read` answers, `grep` fails (a tool set: it makes its calls' spans).
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

/// The spans of the run whose root is `root`: (name, parent's name), sorted.
fn shape(spans: &[SpanData], root: &SpanData) -> Vec<(String, String)> {
    let trace = root.span_context.trace_id();
    let mut shape: Vec<(String, String)> = spans
        .iter()
        .filter(|s| s.span_context.trace_id() == trace)
        .map(|s| {
            let parent = spans
                .iter()
                .find(|p| p.span_context.span_id() == s.parent_span_id)
                .map_or_else(String::new, |p| p.name.to_string());
            (s.name.to_string(), parent)
        })
        .collect();
    shape.sort();
    shape
}

/// Every exported span of `root`'s run but the root has its parent among `spans` and lies
/// within it in time.
fn assert_each_span_within_its_parent(spans: &[SpanData], root: &SpanData) {
    let ms = |t: SystemTime| {
        t.duration_since(root.start_time)
            .unwrap_or_default()
            .as_secs_f64()
            * 1e3
    };
    for span in spans
        .iter()
        .filter(|s| s.span_context.trace_id() == root.span_context.trace_id())
    {
        if span.parent_span_id == SpanId::INVALID {
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

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

#[tokio::test]
async fn a_durable_run_exports_the_spans_of_the_runner_each_within_its_parent() {
    let Some(restate) = RestateServer::start("a_durable_run_exports_the_spans") else {
        return;
    };
    let exported = Exported::default();
    let tracer = SdkTracerProvider::builder()
        .with_simple_exporter(exported.clone())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer.tracer("durable-telemetry-test"))
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() == names::TRACING_TARGET
        }));
    // This test's runtime has one thread: the endpoint's tasks run here, under this default.
    let _default = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    // The runner, then the durable run, each on its own fake provider.
    let plain = fake_provider().await;
    let mut runner = Runner::new(config(), vec![provider(&plain)])
        .seed(7)
        .tools(tools());
    runner
        .run(RunInput::text("Fix the parser."))
        .await
        .expect("the runner's run finishes");

    let durable = fake_provider().await;
    let agent = DurableAgent::new(config(), vec![provider(&durable)])
        .seed(7)
        .tools(tools());
    let server = crate::serve_registered(&restate, agent).await;
    let (status, body) = Client::new(&restate)
        .call(
            "Agent/parser/run",
            Some(r#"{"message": "Fix the parser."}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    server.abort();
    tracer.force_flush().expect("flushed");
    let spans = exported.0.lock().expect("lock").clone();

    let roots: Vec<&SpanData> = spans.iter().filter(|s| s.name == "invoke_agent").collect();
    assert_eq!(roots.len(), 2, "one run each: {spans:#?}");
    let (by_runner, by_durable) = (roots[0], roots[1]);
    let expected = [
        ("attempt", "chat claude-test"),
        ("attempt", "chat claude-test"),
        ("attempt", "chat claude-test"),
        ("chat claude-test", "invoke_agent"),
        ("chat claude-test", "invoke_agent"),
        ("execute_tool grep", "invoke_agent"),
        ("execute_tool read", "invoke_agent"),
        ("invoke_agent", ""),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(shape(&spans, by_runner), expected);
    assert_eq!(
        shape(&spans, by_durable),
        expected,
        "the durable run's spans are the runner's"
    );
    assert_each_span_within_its_parent(&spans, by_durable);

    // The same totals and failures, and the conversation is the object.
    for root in [by_runner, by_durable] {
        assert_eq!(
            attribute(root, names::REBOUND_RETRIES),
            Some(&Value::I64(1))
        );
        assert_eq!(
            attribute(root, names::REBOUND_REQUESTS),
            Some(&Value::I64(3))
        );
        assert_eq!(attribute(root, names::REBOUND_SEED), Some(&Value::I64(7)));
    }
    assert_eq!(
        attribute(by_durable, names::GEN_AI_CONVERSATION_ID),
        Some(&Value::from("parser"))
    );
    let grep = spans
        .iter()
        .filter(|s| s.name == "execute_tool grep")
        .find(|s| s.span_context.trace_id() == by_durable.span_context.trace_id())
        .expect("the durable run's grep");
    assert_eq!(
        attribute(grep, names::ERROR_TYPE),
        Some(&Value::from(names::ERROR_TOOL))
    );
}
