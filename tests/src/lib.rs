//! A harness for cross-crate tests: plays a scenario through the real runner against the fake
//! provider server on loopback, recording everything a test may want to check.

#![warn(missing_docs)]
#![doc(test(attr(deny(warnings))))]

use rebound_cli::scenario_tools::ScenarioTools;
use rebound_core::{
    Conversation, MachineConfig, ProviderKind, RetryConfig, RunError, StreamDeadlines, TargetSpec,
};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::receiver::{Receiver, ReceiverError};
use rebound_effects::runner::{
    CancelHandle, RunInput, RunSummary, Runner, ToolExecutor, TraceRecorder,
};
use rebound_sim::fake::{FakeServer, FakeServerConfig, RequestRecord};
use rebound_sim::{replay, Scenario, Trace};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The counts of a run tally every driver must agree on (not times, usage or stream resets,
/// which only a real transport has), as one `counts …` line.
#[must_use]
pub fn counts(tally: &rebound_core::RunTally) -> String {
    format!(
        "counts requests={} retries={} retry_wait_ms={} compactions={} fallbacks={} \
         tool_calls={} tool_errors={}",
        tally.requests,
        tally.retries,
        tally.retry_wait_ms,
        tally.compactions,
        tally.fallbacks,
        tally.tool_calls,
        tally.tool_errors
    )
}

impl Played {
    /// The conversation with the owners of its reasoning left out: two plays talk to two
    /// servers (two base URLs), so the same answers are owned by two identities.
    #[must_use]
    pub fn conversation_without_owners(&self) -> Conversation {
        self.conversation
            .messages()
            .iter()
            .map(|m| {
                let mut m = (**m).clone();
                for block in &mut m.content {
                    if let rebound_core::ContentBlock::Thinking { owner, .. }
                    | rebound_core::ContentBlock::Reasoning { owner, .. } = block
                    {
                        *owner = None;
                    }
                }
                m
            })
            .collect()
    }
}

/// Everything observed in one played run.
#[derive(Debug)]
pub struct Played {
    /// How the run ended.
    pub result: Result<RunSummary, RunError>,
    /// The runner's conversation afterwards.
    pub conversation: Conversation,
    /// One line per receiver callback and per request the server saw, in order.
    pub log: Vec<String>,
    /// The server's request log.
    pub requests: Vec<RequestRecord>,
    /// The trace the runner recorded (JSON Lines).
    pub trace: String,
}

impl Played {
    /// Asserts that the recorded trace replays in the simulator without divergence.
    pub fn assert_trace_replays(&self) {
        let trace = Trace::parse(&self.trace).expect("the runner's trace parses");
        if let Err(e) = replay(&trace) {
            panic!("the runner's trace diverged in replay: {e}");
        }
    }

    /// The log lines starting with `prefix`.
    #[must_use]
    pub fn lines(&self, prefix: &str) -> Vec<&str> {
        self.log
            .iter()
            .filter(|l| l.starts_with(prefix))
            .map(String::as_str)
            .collect()
    }
}

/// A `Write` into a shared buffer, for traces.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Records receiver callbacks as log lines.
struct LogReceiver(Arc<Mutex<Vec<String>>>);

impl LogReceiver {
    fn push(&self, line: String) {
        if let Ok(mut log) = self.0.lock() {
            log.push(line);
        }
    }
}

impl Receiver for LogReceiver {
    fn stream_reset(&mut self, attempt: u32) -> Result<(), ReceiverError> {
        self.push(format!("reset {attempt}"));
        Ok(())
    }
    fn message(&mut self, message: &rebound_core::Message) -> Result<(), ReceiverError> {
        self.push(format!("message {}", message.role));
        Ok(())
    }
    fn provider_retry(
        &mut self,
        info: &rebound_core::ProviderRetryInfo,
    ) -> Result<(), ReceiverError> {
        self.push(format!(
            "retry attempt={} kind={:?} delay={}",
            info.attempt, info.kind, info.delay_ms
        ));
        Ok(())
    }
    fn fallback(&mut self, info: &rebound_core::FallbackInfo) -> Result<(), ReceiverError> {
        self.push(format!("fallback {} -> {}", info.from_label, info.to_label));
        Ok(())
    }
    fn compaction(&mut self, report: &rebound_core::CompactionReport) -> Result<(), ReceiverError> {
        self.push(format!(
            "compaction {} {} messages {} -> {} bytes {} -> {}{}",
            report.reason,
            report.method,
            report.before_messages,
            report.after_messages,
            report.before_bytes,
            report.after_bytes,
            report
                .summary_error
                .as_ref()
                .map(|e| format!(" summary_error={e}"))
                .unwrap_or_default()
        ));
        Ok(())
    }
    fn totals(&mut self, stats: &rebound_core::RunTally) -> Result<(), ReceiverError> {
        self.push(format!(
            "totals requests={} input={} output={}",
            stats.requests, stats.input_tokens, stats.output_tokens
        ));
        self.push(counts(stats));
        Ok(())
    }
    fn tool_start(&mut self, call: &rebound_core::ToolCall) -> Result<(), ReceiverError> {
        self.push(format!("tool_start {}", call.name));
        Ok(())
    }
    fn tool_result(&mut self, r: &rebound_core::ToolResultBlock) -> Result<(), ReceiverError> {
        self.push(format!(
            "tool_result {} error={}",
            r.tool_use_id, r.is_error
        ));
        Ok(())
    }
    fn finished(
        &mut self,
        reason: &rebound_core::FinishReason,
        turns: u32,
    ) -> Result<(), ReceiverError> {
        self.push(format!("finished {reason} turns={turns}"));
        Ok(())
    }
    fn error(&mut self, error: &RunError) {
        self.push(format!("error {}", error.kind()));
    }
}

/// How to play a scenario.
pub struct Play {
    /// The scenario the server (and the scripted tools) follow.
    pub scenario: Scenario,
    /// The wire format.
    pub provider: ProviderKind,
    /// The machine configuration. With no targets, one is filled in (`test-model` in
    /// [`provider`](Self::provider)'s wire format); each target is played by the same fake
    /// server in its own wire format. The tools are filled in.
    pub config: MachineConfig,
    /// The tools; `None` plays the scenario's scripted tools.
    pub tools: Option<Arc<dyn ToolExecutor>>,
    /// Called with a cancel handle once the run started.
    pub cancel_after: Option<Duration>,
    /// The target's context window in tokens, if it is to be known.
    pub context_window: Option<u64>,
}

impl Play {
    /// Plays `scenario` over `provider` with fast retries (20 ms doubling, no jitter).
    #[must_use]
    pub fn new(scenario: Scenario, provider: ProviderKind) -> Self {
        Play {
            scenario,
            provider,
            config: MachineConfig::default()
                .with_retry(
                    RetryConfig::default()
                        .with_initial_delay_ms(20)
                        .with_max_delay_ms(200)
                        .with_jitter(false),
                )
                // A stall longer than 5 s fails the attempt, in the runner and the simulator.
                .with_stream(StreamDeadlines::new(5_000, 600_000)),
            tools: None,
            cancel_after: None,
            context_window: None,
        }
    }

    /// Runs it: starts a fake server, points an `HttpProvider` at it, runs the real runner.
    pub async fn run(self) -> Played {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut server_config = FakeServerConfig::new(self.scenario.clone(), 1);
        let hook_log = Arc::clone(&log);
        server_config.on_request = Some(Arc::new(move |r: &RequestRecord| {
            if let Ok(mut l) = hook_log.lock() {
                l.push(format!("request {}", r.index));
            }
        }));
        let server = FakeServer::start(server_config)
            .await
            .expect("the fake server starts on loopback");
        let mut config = self.config;
        if config.targets.is_empty() {
            config.targets = vec![TargetSpec::new(self.provider, "test-model")
                .with_context_window(self.context_window)];
        }
        // One provider per target, each on the same server in its target's wire format.
        let providers: Vec<Box<dyn Provider>> = config
            .targets
            .iter()
            .map(|target| {
                let mut http = HttpProviderConfig::new(
                    target.provider,
                    target.model.clone(),
                    ApiKey::new("test-key"),
                );
                http.base_url = server.base_url_for(target.provider);
                Box::new(HttpProvider::new(http).expect("a valid provider config"))
                    as Box<dyn Provider>
            })
            .collect();
        let scenario = Arc::new(self.scenario);
        let tools = self
            .tools
            .unwrap_or_else(|| Arc::new(ScenarioTools::new(Arc::clone(&scenario), 0.0)));
        let trace = SharedBuf::default();
        let mut runner = Runner::new(config, providers)
            .seed(3)
            .tools(tools)
            .receiver(LogReceiver(Arc::clone(&log)))
            .trace(TraceRecorder::new(trace.clone()));
        if let Some(history) = scenario.initial_conversation() {
            runner = runner.conversation(history);
        }
        let cancel: CancelHandle = runner.canceler();
        if let Some(after) = self.cancel_after {
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                cancel.cancel();
            });
        }
        let input = RunInput::text(scenario.user_message.clone());
        let result = tokio::time::timeout(Duration::from_secs(60), runner.run(input))
            .await
            .expect("the run ends (no hang)");
        let requests = server.requests();
        server.shutdown().await;
        let log = log.lock().map(|l| l.clone()).unwrap_or_default();
        let trace = String::from_utf8(trace.0.lock().map(|b| b.clone()).unwrap_or_default())
            .expect("traces are UTF-8");
        Played {
            result,
            conversation: runner.current_conversation().clone(),
            log,
            requests,
            trace,
        }
    }
}

/// Every wire format, for tests that must hold for each.
pub const PROVIDERS: [ProviderKind; 3] = [
    ProviderKind::Anthropic,
    ProviderKind::OpenAi,
    ProviderKind::OpenAiResponses,
];

/// Parses a scenario written inline in a test.
#[must_use]
pub fn scenario(json: &str) -> Scenario {
    Scenario::from_json(json).unwrap_or_else(|e| panic!("bad test scenario: {e}"))
}

/// The README's code blocks, compiled (and run where they can) as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

/// Fleets played faster: every duration of a machine's configuration, a budget's refill and a
/// scenario scaled by one factor, so a real fleet (tests/tests/fleet.rs, the fleet example)
/// plays a simulated outage in seconds.
pub mod scaled {
    use rebound_core::{BudgetConfig, MachineConfig};
    use rebound_sim::scenario::{Fault, FaultKind};
    use rebound_sim::Scenario;

    /// `v` ms scaled by `scale`, rounded.
    #[must_use]
    pub fn ms(v: u64, scale: f64) -> u64 {
        ((v as f64) * scale).round() as u64
    }

    /// The machine and budget of `resilient()`, with every duration scaled by `scale`.
    pub fn config(scale: f64) -> (MachineConfig, BudgetConfig) {
        let ms = |v: u64| ms(v, scale);
        let mut machine = MachineConfig::resilient();
        machine.retry.initial_delay_ms = ms(machine.retry.initial_delay_ms);
        machine.retry.max_delay_ms = ms(machine.retry.max_delay_ms);
        machine.retry.max_retry_after_ms = ms(machine.retry.max_retry_after_ms);
        machine.retry.fallback_after_ms = ms(machine.retry.fallback_after_ms);
        if let Some(b) = machine.retry_budget.as_mut() {
            b.max_wait_ms = ms(b.max_wait_ms);
        }
        let mut budget = BudgetConfig::default();
        budget.refill_per_sec /= scale;
        (machine, budget)
    }

    /// `scenario` with its windows, latencies and server delays scaled by `scale`.
    pub fn scenario(scenario: &Scenario, scale: f64) -> Scenario {
        let ms = |v: u64| ms(v, scale);
        let mut s = scenario.clone();
        let t = &mut s.timing;
        for v in [
            &mut t.answer_ms,
            &mut t.error_ms,
            &mut t.connect_ms,
            &mut t.timeout_ms,
            &mut t.first_event_ms,
            &mut t.event_ms,
            &mut t.tool_ms,
            &mut t.compaction_ms,
        ] {
            *v = ms(*v);
        }
        let scale_fault = |fault: &mut Fault| {
            fault.after_ms = fault.after_ms.map(ms);
            if let FaultKind::Http { headers, .. } = &mut fault.kind {
                let seconds = headers.remove("retry-after");
                let millis = headers.remove("retry-after-ms");
                let delay_ms = millis
                    .and_then(|v| v.parse::<f64>().ok())
                    .or_else(|| seconds.and_then(|v| v.parse::<f64>().ok()).map(|s| s * 1e3));
                if let Some(d) = delay_ms {
                    headers.insert("retry-after-ms".into(), ms(d as u64).to_string());
                }
            }
        };
        if let Some(random) = s.random.as_mut() {
            for outage in &mut random.outages {
                outage.from_ms = ms(outage.from_ms);
                outage.until_ms = ms(outage.until_ms);
                scale_fault(&mut outage.fault);
            }
            for weighted in &mut random.mix {
                scale_fault(&mut weighted.fault);
            }
        }
        for turn in &mut s.turns {
            for fault in &mut turn.faults {
                scale_fault(fault);
            }
        }
        s
    }
}

/// The code blocks of the reference pages in docs/, compiled (and run where they can) as doc
/// tests as the README's are: each page's blocks under a name of its own.
#[cfg(doctest)]
pub mod docs_pages {
    /// docs/embedding.md.
    #[doc = include_str!("../../docs/embedding.md")]
    pub struct Embedding;
    /// docs/telemetry.md.
    #[doc = include_str!("../../docs/telemetry.md")]
    pub struct Telemetry;
    /// docs/budget.md.
    #[doc = include_str!("../../docs/budget.md")]
    pub struct Budget;
    /// docs/cli.md.
    #[doc = include_str!("../../docs/cli.md")]
    pub struct Cli;
    /// docs/durable.md.
    #[doc = include_str!("../../docs/durable.md")]
    pub struct Durable;
    /// docs/failures.md.
    #[doc = include_str!("../../docs/failures.md")]
    pub struct Failures;
    /// docs/traces.md.
    #[doc = include_str!("../../docs/traces.md")]
    pub struct Traces;
}
