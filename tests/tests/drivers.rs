//! One scripted world, every driver, one trace: the tokio runner against the fake server on
//! loopback, the simulator on its virtual clock, the durable service on a real
//! restate-server, the Python binding (the example agent's loop over httpx, in CI's
//! Python step) and the JavaScript binding (the TypeScript example agent's loop over fetch,
//! in CI's npm package step) all drive core's `Run`, so for the same scripted faults they must hand the
//! machine the same events, get the same commands back, and count the run the same way. The
//! worlds, the machine's configuration and the seeds are `tests/worlds.json`: 5xx, a
//! `retry-after` window, streams cut mid-answer, tool errors, an overflow that compacts, a
//! fallback to a second target.
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
//! and stream-cuts' tally too), and the Python driver from telling the machine an answer
//! began (stream-cuts' steps and tally differ).

#[path = "../../durable/tests/support/restate.rs"]
mod restate;

use rebound_cli::scenario_tools::ScenarioTools;
use rebound_core::trace::TraceStep;
use rebound_core::{ContentBlock, Event, MachineConfig, ProviderKind, RunTally, TargetSpec};
use rebound_durable::DurableAgent;
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::{simulate, Scenario, SimConfig, Trace};
use rebound_tests::{counts, Play};
use restate::{free_port, run_failure, Client, RestateServer};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;

/// The worlds every driver plays, with the machine's configuration and seeds: one file the
/// Python driver reads as well.
const WORLDS_JSON: &str = include_str!("../worlds.json");

/// One scripted world as `tests/worlds.json` writes it.
struct World {
    name: String,
    scenario: Scenario,
    /// The machine's configuration, its targets filled in.
    config: MachineConfig,
    /// The world's JSON entry, the machine's configuration and the seeds (for the Python
    /// driver).
    json: Value,
    /// Counts the runner's tally must show (`retries=2`), so that the world tests what it
    /// is there for.
    expect: Vec<String>,
}

/// The seeds of `tests/worlds.json`.
fn seeds() -> (u64, u64) {
    let all: Value = serde_json::from_str(WORLDS_JSON).expect("tests/worlds.json is JSON");
    let seed = |k: &str| {
        all[k]
            .as_u64()
            .unwrap_or_else(|| panic!("worlds.json: {k}"))
    };
    (seed("script_seed"), seed("machine_seed"))
}

/// The worlds of `tests/worlds.json`: 5xx with and without `retry-after`, streams cut
/// mid-answer, tool errors, an overflow that compacts, a fallback.
fn worlds() -> Vec<World> {
    let all: Value = serde_json::from_str(WORLDS_JSON).expect("tests/worlds.json is JSON");
    let entries = all["worlds"].as_array().expect("worlds.json: worlds");
    entries
        .iter()
        .map(|entry| {
            let name = entry["name"].as_str().expect("a world's name").to_owned();
            let mut scenario = match &entry["scenario"] {
                Value::String(builtin) => Scenario::builtin(builtin).expect("a built-in scenario"),
                inline => Scenario::from_json(&inline.to_string()).expect("a scenario"),
            };
            scenario.provider = ProviderKind::Anthropic;
            let mut config: MachineConfig =
                serde_json::from_value(all["machine"].clone()).expect("worlds.json: machine");
            let models: Vec<String> = match entry.get("models") {
                Some(models) => serde_json::from_value(models.clone()).expect("models"),
                None => vec!["test-model".to_owned()],
            };
            config.targets = models
                .iter()
                .map(|m| TargetSpec::new(ProviderKind::Anthropic, m).with_context_window(None))
                .collect();
            let json = serde_json::json!({
                "name": name,
                "scenario": entry["scenario"],
                "user_message": scenario.user_message,
                "machine": config,
                "script_seed": all["script_seed"],
                "machine_seed": all["machine_seed"],
            });
            let expect = serde_json::from_value(entry["expect"].clone())
                .unwrap_or_else(|e| panic!("{name}: expect: {e}"));
            World {
                name,
                scenario,
                config,
                json,
                expect,
            }
        })
        .collect()
}

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

/// The runner against the fake server (`Play` plays `script_seed` 1 and machine seed 3, as
/// `tests/worlds.json` says).
async fn by_runner(world: &World) -> (Vec<String>, String) {
    assert_eq!(seeds(), (1, 3), "Play's seeds are those of worlds.json");
    let mut play = Play::new(world.scenario.clone(), ProviderKind::Anthropic);
    play.config = world.config.clone();
    let played = play.run().await;
    let trace = Trace::parse(&played.trace).expect("the runner's trace parses");
    let tally = match &played.result {
        Ok(summary) => tally_line(&summary.stats),
        // A run that failed reports its tally to the receiver only.
        Err(e) => format!("failed {}", e.kind()),
    };
    (lines(&trace.steps), tally)
}

fn by_simulator(world: &World) -> (Vec<String>, String) {
    let config = SimConfig::default().with_machine(world.config.clone());
    let outcome = simulate(&world.scenario, &config, seeds().0).expect("the simulation runs");
    let trace = outcome.trace();
    let tally = match &outcome.result {
        Ok(_) => tally_line(&outcome.tally()),
        Err(e) => format!("failed {}", e.kind()),
    };
    (lines(&trace.steps), tally)
}

/// One HTTP provider per target of `config`, all on `server`.
fn providers(config: &MachineConfig, server: &FakeServer) -> Vec<Box<dyn Provider>> {
    config
        .targets
        .iter()
        .map(|target| {
            let mut http =
                HttpProviderConfig::new(target.provider, &target.model, ApiKey::new("test-key"));
            http.base_url = server.base_url_for(target.provider);
            Box::new(HttpProvider::new(http).expect("a provider")) as Box<dyn Provider>
        })
        .collect()
}

/// The durable service on `restate`, its endpoint in this process, against a fake server
/// of its own playing the world.
async fn by_durable(
    restate: &RestateServer,
    world: &World,
    traces: &Path,
) -> (Vec<String>, String) {
    let key = &world.name;
    let server = FakeServer::start(FakeServerConfig::new(world.scenario.clone(), seeds().0))
        .await
        .expect("the fake server starts");
    let scenario = Arc::new(world.scenario.clone());
    let agent = DurableAgent::new(world.config.clone(), providers(&world.config, &server))
        .seed(seeds().1)
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

/// The Python interpreter that has `rebound_agent` and httpx installed: `$REBOUND_PYTHON`.
/// Without it the Python driver's test is skipped, unless `REBOUND_REQUIRE_PYTHON=1` (CI's
/// Python step, which builds the package first).
fn python() -> Option<String> {
    match std::env::var("REBOUND_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ => {
            assert!(
                std::env::var("REBOUND_REQUIRE_PYTHON").as_deref() != Ok("1"),
                "REBOUND_REQUIRE_PYTHON=1 but REBOUND_PYTHON names no interpreter"
            );
            eprintln!("skipped: set REBOUND_PYTHON to a Python with rebound_agent and httpx");
            None
        }
    }
}

/// The Python binding: the example agent's loop (python/examples/agent.py) over httpx,
/// driven by `python/tests/world_driver.py`, against a fake server of its own playing the
/// world.
async fn by_python(python: &str, world: &World, dir: &Path) -> (Vec<String>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/tests/world_driver.py");
    by_binding("python", python, &script, world, dir).await
}

/// The JavaScript driver: `js/drivers/world.ts` compiled (`$REBOUND_JS_DRIVER`, which
/// `js/ci.sh` sets after building the package and compiling it). Without it the JavaScript
/// driver's test is skipped, unless `REBOUND_REQUIRE_JS=1` (CI's npm package step).
fn js_driver() -> Option<String> {
    match std::env::var("REBOUND_JS_DRIVER") {
        Ok(driver) if !driver.is_empty() => Some(driver),
        _ => {
            assert!(
                std::env::var("REBOUND_REQUIRE_JS").as_deref() != Ok("1"),
                "REBOUND_REQUIRE_JS=1 but REBOUND_JS_DRIVER names no compiled driver"
            );
            eprintln!(
                "skipped: set REBOUND_JS_DRIVER to js/drivers/world.ts compiled (js/ci.sh does)"
            );
            None
        }
    }
}

/// A binding's driver (Python's `world_driver.py`, JavaScript's `drivers/world.js`) run by
/// `program` against a fake server of its own playing the world: the steps of its trace
/// and its tally line.
async fn by_binding(
    name: &str,
    program: &str,
    script: &Path,
    world: &World,
    dir: &Path,
) -> (Vec<String>, String) {
    let server = FakeServer::start(FakeServerConfig::new(world.scenario.clone(), seeds().0))
        .await
        .expect("the fake server starts");
    let input = dir.join(format!("{}.json", world.name));
    let trace = dir.join(format!("{}-{name}.jsonl", world.name));
    std::fs::write(&input, world.json.to_string()).expect("the world's file");
    let output = tokio::process::Command::new(program)
        .arg(script)
        .arg(&input)
        .arg(server.base_url_for(ProviderKind::Anthropic))
        .arg(&trace)
        .output()
        .await
        .unwrap_or_else(|e| panic!("the {name} driver starts: {e}"));
    server.shutdown().await;
    assert!(
        output.status.success(),
        "{}: the {name} driver failed: {}\n{}",
        world.name,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let ended: Value = serde_json::from_slice(&output.stdout).expect("the driver's JSON line");
    let tally = match ended["failed"].as_str() {
        Some(kind) => format!("failed {kind}"),
        None => {
            tally_line(&serde_json::from_value(ended["tally"].clone()).expect("the driver's tally"))
        }
    };
    let trace = Trace::read(std::io::BufReader::new(
        std::fs::File::open(trace).unwrap_or_else(|e| panic!("the {name} driver's trace: {e}")),
    ))
    .unwrap_or_else(|e| panic!("the {name} driver's trace parses: {e}"));
    (lines(&trace.steps), tally)
}

/// The differences between the runner's run of `world` and each other driver's.
fn compare(
    world: &World,
    runner: &(Vec<String>, String),
    others: &[(&str, &(Vec<String>, String))],
) -> Vec<String> {
    let name = &world.name;
    assert!(
        runner.0.len() > 4,
        "{name}: the runner's trace is too short to compare: {:?}",
        runner.0
    );
    let counts: Vec<&str> = runner.1.split(' ').collect();
    for expected in &world.expect {
        assert!(
            counts.contains(&expected.as_str()),
            "{name}: the runner's tally should show {expected}: {}",
            runner.1
        );
    }
    let mut differences = Vec::new();
    for (driver, (steps, tally)) in others {
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
    differences
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_the_simulator_and_the_durable_service_make_the_same_decisions() {
    let Some(restate) = RestateServer::start("drivers_make_the_same_decisions") else {
        return;
    };
    let traces = tempfile::tempdir().expect("a folder");
    let mut differences = Vec::new();
    for world in worlds() {
        let runner = by_runner(&world).await;
        let simulator = by_simulator(&world);
        let durable = by_durable(&restate, &world, traces.path()).await;
        differences.extend(compare(
            &world,
            &runner,
            &[("simulator", &simulator), ("durable", &durable)],
        ));
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// The same worlds through the Python binding (run in CI's Python step, once the package
/// is built).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_binding_makes_the_runners_decisions() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a folder");
    let mut differences = Vec::new();
    for world in worlds() {
        let runner = by_runner(&world).await;
        let python = by_python(&python, &world, dir.path()).await;
        differences.extend(compare(&world, &runner, &[("Python", &python)]));
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// The same worlds through the JavaScript binding (run in CI's npm package step, once the
/// package is built and the driver compiled), on Node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_javascript_binding_makes_the_runners_decisions() {
    let Some(driver) = js_driver() else {
        return;
    };
    let node = std::env::var("REBOUND_NODE").unwrap_or_else(|_| "node".to_owned());
    let dir = tempfile::tempdir().expect("a folder");
    let mut differences = Vec::new();
    for world in worlds() {
        let runner = by_runner(&world).await;
        let js = by_binding("javascript", &node, Path::new(&driver), &world, dir.path()).await;
        differences.extend(compare(&world, &runner, &[("JavaScript", &js)]));
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
