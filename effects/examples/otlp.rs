//! A run's spans and metrics exported over OTLP/HTTP, as an agent embedding rebound-effects
//! sets it up: a `tracing-opentelemetry` layer for the runner's spans, a meter provider for
//! its metrics (feature `otel`), both sent by the OpenTelemetry SDK's OTLP/HTTP exporter
//! (protobuf) to `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://127.0.0.1:4318`), and both
//! flushed before the process exits.
//!
//! ```sh
//! # A local collector (Jaeger's all-in-one takes OTLP/HTTP on 4318):
//! docker run --rm -p 16686:16686 -p 4318:4318 jaegertracing/all-in-one
//! cargo run -p rebound-effects --features otel --example otlp
//! # A real provider (Anthropic's Messages API, or ANTHROPIC_BASE_URL for another endpoint):
//! ANTHROPIC_API_KEY=… cargo run -p rebound-effects --features otel --example otlp
//! ```
//!
//! Without `ANTHROPIC_API_KEY` the agent talks to rebound-sim's fake provider server on
//! loopback, which overloads the first attempt (529) and then has the model call the
//! example's `clock` tool, so the trace holds an `invoke_agent` span, a `chat` span with two
//! attempts and a `retry` event, an `execute_tool` span and the next `chat`.
//!
//! The crates, as effects' README lists them: rebound-effects with `otel`, opentelemetry,
//! opentelemetry_sdk, opentelemetry-otlp (`http-proto`, no default features),
//! opentelemetry-http, tracing, tracing-opentelemetry, tracing-subscriber, and reqwest 0.12
//! (`blocking`), bytes, http and async-trait for the exporter's HTTP client.
//! `effects/tests/it/otlp_example.rs` runs this file against an OTLP receiver.

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use rebound_core::{MachineConfig, ProviderKind, TargetSpec, ToolOutput, ToolSpec};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::{RunInput, RunSummary, Runner};
use rebound_effects::telemetry::{names, Telemetry};
use rebound_effects::tools::{FnTool, ToolSet};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::Scenario;
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

const MODEL: &str = "claude-sonnet-4-6";

/// What the fake provider plays: an overloaded first attempt, a tool call, the answer.
const SCENARIO: &str = r#"{"turns": [
    {"faults": [{"type": "http", "status": 529}],
     "answer": {"text": "Let me look at the clock.", "tool_calls": [
        {"id": "toolu_clock", "name": "clock", "input": {}}]}},
    {"answer": {"text": "It is teatime."}}
]}"#;

// `pub` only so that effects' tests can run this very file (tests/it/otlp_example.rs).
pub fn main() -> Result<(), Box<dyn Error>> {
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4318".to_owned());
    // Outside the async runtime: the exporter's blocking HTTP client must be neither made nor
    // dropped inside one.
    let export = Export::install(endpoint.trim_end_matches('/'))?;
    let runtime = tokio::runtime::Runtime::new()?;
    let run = runtime.block_on(run_agent());
    drop(runtime);
    // Flush what the batch processor and the periodic reader still hold, then stop them.
    export.shutdown();
    let summary = run?;
    println!(
        "{:?} after {} turns; spans and metrics sent to {endpoint}",
        summary.reason, summary.turns
    );
    Ok(())
}

/// One run: against the fake provider server, or Anthropic when `ANTHROPIC_API_KEY` is set.
async fn run_agent() -> Result<RunSummary, Box<dyn Error>> {
    let (key, base_url, fake) = match std::env::var("ANTHROPIC_API_KEY") {
        Ok(key) => (key, std::env::var("ANTHROPIC_BASE_URL").ok(), None),
        Err(_) => {
            let scenario = Scenario::from_json(SCENARIO)?;
            let server = FakeServer::start(FakeServerConfig::new(scenario, 1)).await?;
            ("fake-key".to_owned(), Some(server.base_url()), Some(server))
        }
    };
    let mut config = HttpProviderConfig::new(ProviderKind::Anthropic, MODEL, ApiKey::new(key));
    if let Some(base_url) = base_url {
        config.base_url = base_url;
    }
    let clock = FnTool::new(
        ToolSpec {
            name: "clock".into(),
            description: "Tells the time.".into(),
            input_schema: serde_json::json!({"type": "object"}),
        },
        |_input, _ctx| async { Ok(ToolOutput::text("16:00")) },
    );
    let machine = MachineConfig::default()
        .with_targets(vec![TargetSpec::new(ProviderKind::Anthropic, MODEL)]);
    let mut runner = Runner::new(machine, vec![Box::new(HttpProvider::new(config)?)])
        .tools(Arc::new(ToolSet::builder().tool(clock).build()?))
        .telemetry(Telemetry::new().agent_name("otlp-example"));
    let summary = runner.run(RunInput::text("What time is it?")).await;
    if let Some(server) = fake {
        server.shutdown().await;
    }
    Ok(summary?)
}

/// The installed export: the tracer provider behind the `tracing` layer and the meter
/// provider behind the runner's metrics.
struct Export {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl Export {
    /// Spans: the runner's `tracing` spans (target [`names::TRACING_TARGET`]) through a
    /// `tracing-opentelemetry` layer into the SDK's batch processor. Metrics: the global meter
    /// provider (`Telemetry::meter` takes a meter instead), read when it shuts down.
    fn install(endpoint: &str) -> Result<Export, Box<dyn Error>> {
        let client: Arc<dyn opentelemetry_http::HttpClient> = Arc::new(HttpClient(
            reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(3))
                .build()?,
        ));
        let resource = Resource::builder()
            .with_service_name("otlp-example")
            .build();
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .with_shared_http_client(Arc::clone(&client))
            .build()?;
        let tracer = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_span_processor(BatchSpanProcessor::builder(spans).build())
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer.tracer("otlp-example"))
            // No busy/idle times: a clock read per poll of every span, for nothing the
            // waterfall shows.
            .with_tracked_inactivity(false)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(names::TRACING_TARGET, tracing::Level::INFO),
            );
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(format!("{endpoint}/v1/metrics"))
            .with_shared_http_client(client)
            .build()?;
        let meter = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(PeriodicReader::builder(metrics).build())
            .build();
        opentelemetry::global::set_meter_provider(meter.clone());
        Ok(Export { tracer, meter })
    }

    /// Exports what is left and stops the SDK's threads; a collector that is down costs at
    /// most the client's timeout per signal.
    fn shutdown(self) {
        if let Err(e) = self.tracer.shutdown() {
            eprintln!("otlp example: spans not flushed: {e}");
        }
        if let Err(e) = self.meter.shutdown() {
            eprintln!("otlp example: metrics not flushed: {e}");
        }
    }
}

/// The exporter's HTTP client: reqwest 0.12's blocking client, the reqwest rebound-effects
/// is built on. (opentelemetry-otlp's own, its default `reqwest-blocking-client` feature,
/// is reqwest 0.13: a second HTTP stack in the build.)
#[derive(Debug)]
struct HttpClient(reqwest::blocking::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HttpClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let sent = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let status = sent.status().as_u16();
        Ok(http::Response::builder()
            .status(status)
            .body(sent.bytes()?)?)
    }
}
