//! One scripted world, several drivers, one trace: the tokio runner against the fake server
//! on loopback, the simulator on its virtual clock, and the durable service on a real
//! restate-server all drive core's `Run`, so for the same scripted faults they must hand the
//! machine the same events, get the same commands back, and count the run the same way.
//!
//! Compared, step by step: what each event told the machine and what each command asked
//! for (kinds, ids, attempts, delays, targets, the size of each conversation sent, tool
//! calls, retry notes, the end), and the tallies (stream resets included). Not compared:
//! times, usage, a failure's free-text message, conversation digests (a real transport's
//! answers carry ids the simulator's do not).
//!
//! If any driver decided one thing differently (a retry more, a delay, a compaction, a
//! different tool outcome, a stream reset not counted), a line differs: checked by keeping
//! the durable driver from telling the run an answer had begun (every world then differs,
//! and stream-cuts' tally too). The Python binding joins when it drives `Run` as well.

#[path = "../../durable/tests/support/restate.rs"]
mod restate;

use rebound_cli::scenario_tools::ScenarioTools;
use rebound_core::trace::TraceStep;
use rebound_core::{ContentBlock, Event, ProviderKind, RunTally, TargetSpec};
use rebound_durable::DurableAgent;
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::{simulate, Scenario, SimConfig, Trace};
use rebound_tests::{counts, Play};
use restate::{free_port, run_failure, Client, RestateServer};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// The script cursor's seed, the same in the fake server and the simulator.
const SCRIPT_SEED: u64 = 1;

/// The worlds: 5xx with and without `retry-after`, streams cut mid-answer, tool errors, and
/// (see [`world`]) an overflow that compacts. The built-in `overflow` starts from a long
/// history, which a durable object cannot be given but by running it; this one grows its own.
const WORLDS: [&str; 5] = [
    "blip",
    "rate-limit-window",
    "stream-cuts",
    "tool-errors",
    "compaction",
];

/// What one step told the machine and what it asked for, as comparable lines.
fn lines(steps: &[TraceStep]) -> Vec<String> {
    let mut out = Vec::new();
    for step in steps {
        out.push(told(&step.event));
        out.extend(step.commands.iter().map(|c| format!("  {}", asked(c))));
    }
    out
}

fn told(event: &Event) -> String {
    match event {
        Event::ProviderSucceeded { request, response } => {
            let blocks: Vec<String> = response
                .message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(format!("text {text:?}")),
                    ContentBlock::ToolUse { id, name, input } => {
                        Some(format!("call {id} {name} {input}"))
                    }
                    ContentBlock::Reasoning { .. } => None,
                    other => Some(format!("{other:?}")),
                })
                .collect();
            format!(
                "answer {request} {:?} [{}]",
                response.stop_reason,
                blocks.join(", ")
            )
        }
        Event::ProviderFailed { request, failure } => format!(
            "failed {request} {:?} status {:?} retry-after {:?} transport {:?}",
            failure.kind, failure.status, failure.retry_after_ms, failure.transport
        ),
        Event::ProviderResponding { request } => format!("responding {request}"),
        Event::ToolsFinished { batch, outcome } => format!(
            "tools {batch} {}",
            serde_json::to_value(outcome).unwrap_or(Value::Null)
        ),
        Event::CompactionFinished { compaction, result } => match result {
            Ok(c) => format!("compacted {compaction} to {} messages", c.len()),
            Err(e) => format!("compaction {compaction} failed: {e}"),
        },
        Event::UserMessage { .. } => "user message".to_owned(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A command's JSON form without what a transport adds.
fn asked(command: &Value) -> String {
    let kind = command["type"].as_str().unwrap_or("?");
    let field = |k: &str| command[k].to_string();
    match kind {
        "send_request" => format!(
            "send {} target {} attempt {} purpose {} messages {}",
            field("request"),
            field("target"),
            field("attempt"),
            field("purpose"),
            command["conversation"]["messages"]
        ),
        "notify_retry" => {
            let info = &command["info"];
            format!(
                "retry attempt {} of {} in {} ms: {} status {} retry-after {}",
                info["attempt"],
                info["max_attempts"],
                info["delay_ms"],
                info["kind"],
                info["status"],
                info["retry_after_ms"]
            )
        }
        "append_message" => {
            let message = &command["message"];
            let blocks: Vec<String> = message["content"]
                .as_array()
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter(|b| b["type"] != "reasoning")
                        .map(|b| format!("{}{}", b["type"], b["is_error"]))
                        .collect()
                })
                .unwrap_or_default();
            format!("append {} [{}]", message["role"], blocks.join(", "))
        }
        "compact" => format!(
            "compact {} messages {}",
            field("compaction"),
            command["conversation"]["messages"]
        ),
        "replace_conversation" => format!(
            "replace with {} messages ({})",
            command["conversation"]["messages"], command["reason"]
        ),
        "fail" => format!("fail {}", command["error"]["kind"]),
        _ => {
            let mut rest = command.clone();
            if let Some(map) = rest.as_object_mut() {
                map.remove("conversation");
            }
            rest.to_string()
        }
    }
}

/// The tally line every driver must agree on, stream resets included.
fn tally_line(tally: &RunTally) -> String {
    format!("{} stream_resets={}", counts(tally), tally.stream_resets)
}

/// The scenario as the runner plays it (Anthropic, Play's machine config).
fn world(name: &str) -> Scenario {
    let mut scenario = match name {
        // Eight tool rounds, then the provider says the context is full: compacted by
        // elision, retried once, answered.
        "compaction" => {
            let mut turns: Vec<Value> = (0..8)
                .map(|i| {
                    serde_json::json!({"answer": {"tool_calls": [
                        {"name": "read", "input": {"path": format!("f{i}.rs")}}]}})
                })
                .collect();
            turns.push(serde_json::json!({
                "faults": [{"type": "context_overflow"}],
                "answer": {"text": "All files read."}
            }));
            let json = serde_json::json!({"name": "compaction", "turns": turns}).to_string();
            Scenario::from_json(&json).expect("a scenario")
        }
        _ => Scenario::builtin(name).expect("a built-in scenario"),
    };
    scenario.provider = ProviderKind::Anthropic;
    scenario
}

async fn by_runner(scenario: &Scenario) -> (Vec<String>, String) {
    let played = Play::new(scenario.clone(), ProviderKind::Anthropic)
        .run()
        .await;
    let trace = Trace::parse(&played.trace).expect("the runner's trace parses");
    let tally = match &played.result {
        Ok(summary) => tally_line(&summary.stats),
        // A run that failed reports its tally to the receiver only.
        Err(e) => format!("failed {}", e.kind()),
    };
    (lines(&trace.steps), tally)
}

fn by_simulator(scenario: &Scenario) -> (Vec<String>, String) {
    let play = Play::new(scenario.clone(), ProviderKind::Anthropic);
    let mut config = SimConfig::default().with_machine(play.config);
    config.machine.targets = vec![TargetSpec::new(ProviderKind::Anthropic, "test-model")
        .with_context_window(play.context_window)];
    let outcome = simulate(scenario, &config, SCRIPT_SEED).expect("the simulation runs");
    let trace = outcome.trace();
    let tally = match &outcome.result {
        Ok(_) => tally_line(&outcome.tally()),
        Err(e) => format!("failed {}", e.kind()),
    };
    (lines(&trace.steps), tally)
}

/// The durable service on `restate`, its endpoint in this process, against a fake server
/// of its own playing `scenario`.
async fn by_durable(
    restate: &RestateServer,
    scenario: &Scenario,
    key: &str,
    traces: &Path,
) -> (Vec<String>, String) {
    let server = FakeServer::start(FakeServerConfig::new(scenario.clone(), SCRIPT_SEED))
        .await
        .expect("the fake server starts");
    let mut http = HttpProviderConfig::new(
        ProviderKind::Anthropic,
        "test-model",
        ApiKey::new("test-key"),
    );
    http.base_url = server.base_url_for(ProviderKind::Anthropic);
    let provider = HttpProvider::new(http).expect("a provider");
    let play = Play::new(scenario.clone(), ProviderKind::Anthropic);
    let mut config = play.config;
    config.targets = vec![TargetSpec::new(ProviderKind::Anthropic, "test-model")
        .with_context_window(play.context_window)];
    let scenario = Arc::new(scenario.clone());
    let agent = DurableAgent::new(config, vec![Box::new(provider)])
        .tools(Arc::new(ScenarioTools::new(Arc::clone(&scenario), 0.0)))
        .traces(traces);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", free_port()))
        .await
        .expect("the endpoint's port");
    let endpoint = format!("http://{}", listener.local_addr().expect("an address"));
    let serving = tokio::spawn(rebound_durable::serve(agent, listener));
    rebound_durable::register(&restate.admin_url(), &endpoint)
        .await
        .expect("the endpoint registers");
    let client = Client::new(restate);
    let body = serde_json::json!({ "message": scenario.user_message }).to_string();
    let (status, reply) = client.call(&format!("Agent/{key}/run"), Some(&body)).await;
    serving.abort();
    server.shutdown().await;
    let tally = if status == 200 {
        let reply: Value = serde_json::from_str(&reply).expect("a JSON reply");
        let stats: RunTally = serde_json::from_value(reply["stats"].clone()).expect("stats");
        tally_line(&stats)
    } else {
        let failure = run_failure(&reply).unwrap_or_else(|| panic!("{status}: {reply}"));
        format!("failed {}", failure["kind"].as_str().unwrap_or("?"))
    };
    let path = std::fs::read_dir(traces)
        .expect("the trace folder")
        .map(|e| e.expect("an entry").path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{key}-")))
        })
        .unwrap_or_else(|| panic!("no trace for {key}"));
    let trace = Trace::read(std::io::BufReader::new(
        std::fs::File::open(path).expect("the trace"),
    ))
    .expect("the durable trace parses");
    (lines(&trace.steps), tally)
}

/// The first line where `a` and `b` differ, shown with its neighbours.
fn difference(what: &str, a: &[String], b: &[String]) -> Option<String> {
    if a == b {
        return None;
    }
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show = |l: &[String]| {
        l.get(at.saturating_sub(2)..(at + 2).min(l.len()))
            .map(|lines| lines.join("\n    "))
            .unwrap_or_default()
    };
    Some(format!(
        "{what}: first difference at line {at}\n    {}\n  ---\n    {}",
        show(a),
        show(b)
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_the_simulator_and_the_durable_service_make_the_same_decisions() {
    let Some(restate) = RestateServer::start("drivers_make_the_same_decisions") else {
        return;
    };
    let traces = tempfile::tempdir().expect("a folder");
    let mut differences = Vec::new();
    for name in WORLDS {
        let scenario = world(name);
        let runner = by_runner(&scenario).await;
        let simulator = by_simulator(&scenario);
        let durable = by_durable(&restate, &scenario, name, traces.path()).await;
        assert!(
            runner.0.len() > 4,
            "{name}: the runner's trace is too short to compare: {:?}",
            runner.0
        );
        for (driver, (steps, tally)) in [("simulator", &simulator), ("durable", &durable)] {
            differences.extend(difference(
                &format!("{name}: runner vs {driver}, steps"),
                &runner.0,
                steps,
            ));
            if runner.1 != *tally {
                differences.push(format!(
                    "{name}: runner vs {driver}, tally\n  {}\n  {tally}",
                    runner.1
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
