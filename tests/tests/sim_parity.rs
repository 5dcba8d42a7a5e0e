//! Every built-in scenario tells the machine the same things in the simulator and over HTTP:
//! the real runner against the fake provider server on loopback, and the simulator on its
//! virtual clock, walk one script and render its faults with one implementation
//! (`rebound_sim::scenario::render`), so the machine must see the same events in the same
//! order — the same failures (kind, status, error type, delay hints, transport fault), the
//! same answers, the same tool outcomes — and end the run the same way.
//!
//! Both count the run with core's `RunTally`, so the totals (requests, retries and their
//! waits, compactions, fallbacks, tool calls and errors) must agree too.
//!
//! What may differ is what a real transport adds: times, usage counts, a failure's free-text
//! message, and the reasoning items the fake Responses server attaches to its answers.

use rebound_core::{ContentBlock, Event, ProviderKind};
use rebound_sim::{simulate, Scenario, SimConfig};
use rebound_tests::{counts, Play, PROVIDERS};
use serde_json::Value;

/// The seed of the fake server's script cursor in [`Play`]; the simulator's cursor (and its
/// random faults) must draw from the same one.
const SCRIPT_SEED: u64 = 1;

/// What the machine was told by one event, without what a transport adds.
fn told(event: &Event) -> String {
    match event {
        Event::UserMessage { .. } => "user message".to_owned(),
        Event::Resume => "resume".to_owned(),
        Event::ProviderSucceeded { response, .. } => {
            let blocks: Vec<String> = response
                .message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(format!("text {text:?}")),
                    ContentBlock::ToolUse { id, name, input } => {
                        Some(format!("call {id} {name} {input}"))
                    }
                    // The fake Responses server adds reasoning items the simulator has no
                    // use for.
                    ContentBlock::Reasoning { .. } => None,
                    other => Some(format!("{other:?}")),
                })
                .collect();
            format!(
                "answer {:?} [{}] problems {:?}",
                response.stop_reason,
                blocks.join(", "),
                response.input_problems()
            )
        }
        Event::ProviderFailed { failure, .. } => format!(
            "failed {:?} status {:?} type {:?} retry-after {:?} should-retry {:?} transport {:?}",
            failure.kind,
            failure.status,
            failure.error_type,
            failure.retry_after_ms,
            failure.should_retry,
            failure.transport
        ),
        Event::ToolsFinished { outcome, .. } => {
            format!(
                "tools {}",
                serde_json::to_value(outcome).unwrap_or(Value::Null)
            )
        }
        Event::TimerFired { .. } => "timer".to_owned(),
        Event::CompactionFinished { result, .. } => match result {
            Ok(c) => format!("compacted to {} messages", c.len()),
            Err(e) => format!("compaction failed: {e}"),
        },
        Event::PermitAnswered { decision, .. } => format!("permit {decision:?}"),
        Event::HostFailed { failure } => format!("host failed {:?}", failure.kind),
        Event::Cancel => "cancel".to_owned(),
        other => format!("{other:?}"),
    }
}

/// What the machine is told when `scenario` is played over HTTP, and how the run ends.
async fn over_http(scenario: Scenario, provider: ProviderKind) -> (Vec<String>, String) {
    let played = Play::new(scenario, provider).run().await;
    let trace = rebound_sim::Trace::parse(&played.trace).expect("the runner's trace parses");
    let mut events: Vec<String> = trace.steps.iter().map(|s| told(&s.event)).collect();
    // The runner's totals, as its receiver was told them.
    events.extend(played.lines("counts").into_iter().map(str::to_owned));
    let end = match &played.result {
        Ok(summary) => format!("finished {:?}", summary.reason),
        Err(e) => format!("failed {}", e.kind()),
    };
    (events, end)
}

/// The same, in the simulator, with the machine configured as [`Play`] configures it.
fn simulated(scenario: &Scenario, provider: ProviderKind) -> (Vec<String>, String) {
    let play = Play::new(scenario.clone(), provider);
    let mut config = SimConfig::default().with_machine(play.config);
    config.machine.targets = vec![rebound_core::TargetSpec::new(provider, "test-model")
        .with_context_window(play.context_window)];
    let outcome = simulate(scenario, &config, SCRIPT_SEED).expect("the simulation runs");
    let mut events: Vec<String> = outcome.steps.iter().map(|s| told(&s.event)).collect();
    events.push(counts(&outcome.tally()));
    let end = match &outcome.result {
        Ok(reason) => format!("finished {reason:?}"),
        Err(e) => format!("failed {}", e.kind()),
    };
    (events, end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_scenario_tells_the_machine_the_same_over_http_as_in_the_simulator() {
    let mut runs = tokio::task::JoinSet::new();
    for name in Scenario::builtin_names() {
        for provider in PROVIDERS {
            let mut scenario = Scenario::builtin(name).expect("a built-in");
            scenario.provider = provider;
            runs.spawn(async move {
                let wire = over_http(scenario.clone(), provider).await;
                let sim = simulated(&scenario, provider);
                (name, provider, wire, sim)
            });
        }
    }
    let mut differences = Vec::new();
    while let Some(run) = runs.join_next().await {
        let (name, provider, wire, sim) = run.expect("the run does not panic");
        if wire != sim {
            let (we, wend) = &wire;
            let (se, send) = &sim;
            let at = we.iter().zip(se).position(|(w, s)| w != s);
            differences.push(format!(
                "{name} over {provider}: first difference at event {at:?} of {} (http) / {} (sim)\n  \
                 http: {:?}\n  sim:  {:?}\n  http ends {wend}, sim ends {send}",
                we.len(),
                se.len(),
                at.and_then(|i| we.get(i)),
                at.and_then(|i| se.get(i)),
            ));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
