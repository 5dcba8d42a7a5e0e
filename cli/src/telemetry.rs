//! OTLP export of the runner's spans and metrics, when the standard OpenTelemetry
//! environment asks for it.
//!
//! - Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (traces and metrics) or a per-signal
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set,
//!   and `OTEL_SDK_DISABLED` is not `true`; `OTEL_TRACES_EXPORTER=none` or
//!   `OTEL_METRICS_EXPORTER=none` turns one signal off. Unset, nothing is installed: no
//!   subscriber, no meter provider, no thread.
//! - The exporter reads the rest of the standard variables itself:
//!   `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `http/json`; `grpc` is
//!   not offered), `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT` and their
//!   per-signal forms; the resource reads `OTEL_SERVICE_NAME` (default `rebound`) and
//!   `OTEL_RESOURCE_ATTRIBUTES`.
//! - A collector that is down, slow or answering errors never fails, slows or hangs a run:
//!   spans and metrics are sent from the SDK's own threads, each export is one attempt
//!   (no retries) bounded by the timeout (default 3 s here rather than 10), and the flush
//!   at exit waits at most [`FLUSH_LIMIT`]. The first failure prints one warning line;
//!   later ones are silent.

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use rebound_effects::telemetry::names;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// The longest the flush at exit waits for the collector.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// One export attempt's limit when `OTEL_EXPORTER_OTLP_TIMEOUT` does not say.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// The installed export: flush it with [`Export::shutdown`] before the process exits.
pub struct Export {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    warning: Arc<Warning>,
}

/// The one warning a failing collector earns.
#[derive(Debug)]
struct Warning {
    shown: AtomicBool,
}

impl Warning {
    fn show(&self, what: &str) {
        if !self.shown.swap(true, Ordering::Relaxed) {
            eprintln!(
                "rebound: warning: telemetry export failed ({what}); the run goes on, and further \
                 export errors are not shown"
            );
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn off(name: &str) -> bool {
    env(name).is_some_and(|v| v.trim().eq_ignore_ascii_case("none"))
}

/// Whether the environment asks to record message content
/// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
pub fn capture_content_from_env() -> bool {
    env(names::CAPTURE_CONTENT_ENV).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Installs the OTLP export the environment asks for, or nothing. Call it outside any async
/// runtime (the exporter's blocking HTTP client must not be made or dropped inside one).
pub fn install_from_env() -> Option<Export> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    let any = env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    let traces = (any || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some())
        && !off("OTEL_TRACES_EXPORTER");
    let metrics = (any || env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some())
        && !off("OTEL_METRICS_EXPORTER");
    if !traces && !metrics {
        return None;
    }
    let (Some(traces_protocol), Some(metrics_protocol)) = (protocol("TRACES"), protocol("METRICS"))
    else {
        return None;
    };
    let warning = Arc::new(Warning {
        shown: AtomicBool::new(false),
    });
    let resource = resource();
    let mut export = Export {
        tracer: None,
        meter: None,
        warning: Arc::clone(&warning),
    };
    if traces {
        let timeout = timeout("TRACES");
        match HttpClient::new(timeout)
            .map_err(|e| e.to_string())
            .and_then(|client| {
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(traces_protocol)
                    .with_timeout(timeout)
                    .with_http_client(client)
                    .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                    .build()
                    .map_err(|e| e.to_string())
            }) {
            Ok(exporter) => {
                let exporter = Spans {
                    inner: exporter,
                    warning: Arc::clone(&warning),
                };
                let provider = SdkTracerProvider::builder()
                    .with_resource(resource.clone())
                    .with_span_processor(BatchSpanProcessor::builder(exporter).build())
                    .build();
                let layer = tracing_opentelemetry::layer()
                    .with_tracer(provider.tracer("rebound"))
                    // Busy/idle times and thread names on every span cost a clock read per
                    // poll and say nothing the waterfall does not.
                    .with_tracked_inactivity(false)
                    .with_threads(false)
                    .with_location(false)
                    .with_target(false)
                    .with_level(false)
                    .with_filter(
                        Targets::new().with_target(names::TRACING_TARGET, tracing::Level::INFO),
                    );
                let subscriber = tracing_subscriber::registry().with(layer);
                if tracing::subscriber::set_global_default(subscriber).is_ok() {
                    export.tracer = Some(provider);
                }
            }
            Err(e) => warning.show(&format!("traces: {e}")),
        }
    }
    if metrics {
        let timeout = timeout("METRICS");
        match HttpClient::new(timeout)
            .map_err(|e| e.to_string())
            .and_then(|client| {
                opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_protocol(metrics_protocol)
                    .with_timeout(timeout)
                    .with_http_client(client)
                    .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                    .build()
                    .map_err(|e| e.to_string())
            }) {
            Ok(exporter) => {
                let exporter = Metrics {
                    inner: exporter,
                    warning: Arc::clone(&warning),
                };
                let provider = SdkMeterProvider::builder()
                    .with_resource(resource)
                    .with_reader(PeriodicReader::builder(exporter).build())
                    .build();
                opentelemetry::global::set_meter_provider(provider.clone());
                export.meter = Some(provider);
            }
            Err(e) => warning.show(&format!("metrics: {e}")),
        }
    }
    Some(export)
}

/// A signal's protocol: `OTEL_EXPORTER_OTLP_{signal}_PROTOCOL`, else
/// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`; `None` (with a warning) for one
/// rebound does not speak. (An explicit protocol overrides the exporter's own reading of the
/// variables, so both are read here.)
fn protocol(signal: &str) -> Option<Protocol> {
    let var = format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL");
    let (name, value) = match env(&var) {
        Some(value) => (var, Some(value)),
        None => (
            "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(),
            env("OTEL_EXPORTER_OTLP_PROTOCOL"),
        ),
    };
    match value.map(|p| p.trim().to_ascii_lowercase()).as_deref() {
        None | Some("http/protobuf") => Some(Protocol::HttpBinary),
        Some("http/json") => Some(Protocol::HttpJson),
        Some(other) => {
            eprintln!(
                "rebound: warning: {name}={other} is not supported (http/protobuf or \
                 http/json): telemetry is not exported"
            );
            None
        }
    }
}

/// A signal's export timeout: `OTEL_EXPORTER_OTLP_{signal}_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT` (ms), else [`DEFAULT_TIMEOUT`].
fn timeout(signal: &str) -> Duration {
    env(&format!("OTEL_EXPORTER_OTLP_{signal}_TIMEOUT"))
        .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
}

/// The standard resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`), named `rebound`
/// when they name no service.
fn resource() -> Resource {
    let resource = Resource::builder().build();
    let named = resource
        .get(&opentelemetry::Key::from_static_str("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        return resource;
    }
    Resource::builder()
        .with_service_name("rebound")
        .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
        .build()
}

impl Export {
    /// Flushes what is left and stops the export threads, waiting at most [`FLUSH_LIMIT`]:
    /// past it, what was not sent is dropped (with the one warning).
    pub fn shutdown(self) {
        let Export {
            tracer,
            meter,
            warning,
        } = self;
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let mut waiting = 0;
        if let Some(tracer) = tracer {
            let done = done.clone();
            waiting += 1;
            std::thread::spawn(move || {
                let _ = tracer.shutdown_with_timeout(FLUSH_LIMIT);
                let _ = done.send(());
            });
        }
        if let Some(meter) = meter {
            let done = done.clone();
            waiting += 1;
            std::thread::spawn(move || {
                let _ = meter.shutdown_with_timeout(FLUSH_LIMIT);
                let _ = done.send(());
            });
        }
        let deadline = std::time::Instant::now() + FLUSH_LIMIT;
        for _ in 0..waiting {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if finished.recv_timeout(left).is_err() {
                warning.show(&format!(
                    "the collector did not take the last telemetry within {}s",
                    FLUSH_LIMIT.as_secs()
                ));
                return;
            }
        }
    }
}

/// The OTLP span exporter, with the one warning, and the finish reasons as the string
/// array the conventions ask for (`tracing` records them as a string).
#[derive(Debug)]
struct Spans {
    inner: opentelemetry_otlp::SpanExporter,
    warning: Arc<Warning>,
}

impl SpanExporter for Spans {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &mut batch {
            for kv in &mut span.attributes {
                if kv.key.as_str() == names::GEN_AI_RESPONSE_FINISH_REASONS {
                    if let Value::String(reason) = &kv.value {
                        kv.value = Value::Array(Array::String(vec![reason.clone()]));
                    }
                }
            }
        }
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.warning.show(&format!("traces: {e}"));
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP metric exporter, with the one warning.
struct Metrics {
    inner: opentelemetry_otlp::MetricExporter,
    warning: Arc<Warning>,
}

impl PushMetricExporter for Metrics {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if let Err(e) = &result {
            self.warning.show(&format!("metrics: {e}"));
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// The exporter's HTTP client: reqwest's blocking client (the SDK exports from its own
/// threads), so the binary keeps one HTTP stack.
#[derive(Debug)]
struct HttpClient(reqwest::blocking::Client);

impl HttpClient {
    fn new(timeout: Duration) -> Result<Self, reqwest::Error> {
        reqwest::blocking::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map(HttpClient)
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HttpClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let mut sent = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let mut response = http::Response::builder().status(sent.status().as_u16());
        if let Some(headers) = response.headers_mut() {
            *headers = std::mem::take(sent.headers_mut());
        }
        // A collector's answer is small; more than 4 MiB is not one.
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(sent, 4 << 20), &mut bytes)?;
        Ok(response.body(Bytes::from(bytes))?)
    }
}
