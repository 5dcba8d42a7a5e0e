//! Fleets of `rebound run` processes sharing one retry budget in Redis, against the fake
//! provider server (the server behind `rebound serve`) on loopback, counting what the server
//! received: a total outage costs the fleet what one budget funds, not what twenty do; a 429
//! is learned once for everyone; and Redis dying mid-run changes no run's outcome.
//!
//! Each test starts its own `redis-server` (see `redis_support/server.rs`).

#[path = "../../../effects/tests/redis_support/server.rs"]
mod server;
#[path = "../../../effects/tests/redis_support/slow_connects.rs"]
mod slow_connects;
use crate::table;

use rebound_effects::budget::{RedisBudget, RedisOptions};
use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome, ScenarioClock, ScriptScope};
use rebound_sim::Scenario;
use serde_json::Value;
use server::RedisServer;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rebound");
const AGENTS: usize = 20;

/// One fleet at a time: twenty processes are already a lot for a 2-core machine, and the
/// tests measure what a fleet does, not what a starved scheduler does.
static ONE_FLEET_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn fake_server(json: &str) -> FakeServer {
    let scenario = Scenario::from_json(json).unwrap_or_else(|e| panic!("bad scenario: {e}"));
    // One script and one clock from the server's start for the whole fleet: the agents all
    // say the same thing, and meet one provider's outage.
    let config = FakeServerConfig::new(scenario, 1)
        .with_script(ScriptScope::Shared)
        .with_clock(ScenarioClock::ServerStart);
    FakeServer::start(config).await.expect("fake server starts")
}

/// One `rebound run` against `server`, no jitter, JSON events; `extra` appended.
fn agent(server: &FakeServer, extra: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--base-url", &server.base_url()])
        .args(["--model", "test-model", "--no-jitter", "--events", "json"])
        .args(extra)
        .env("ANTHROPIC_API_KEY", "sk-ant-fleet-test")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn spawn(server: &FakeServer, n: usize, extra: &[&str]) -> Vec<Child> {
    (0..n)
        .map(|_| agent(server, extra).spawn().expect("rebound runs"))
        .collect()
}

async fn finish(children: Vec<Child>) -> Vec<Output> {
    tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().expect("rebound exits"))
            .collect()
    })
    .await
    .expect("joins")
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

fn has_event(out: &Output, kind: &str) -> bool {
    events(out).iter().any(|e| e["type"] == kind)
}

fn codes(outputs: &[Output]) -> Vec<Option<i32>> {
    outputs.iter().map(|o| o.status.code()).collect()
}

fn faults(server: &FakeServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fault { .. }))
        .count()
}

fn stderr(outputs: &[Output]) -> String {
    outputs
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Options for the test's own look at the budget in Redis: its call timeout bounds a Redis
/// that never answers, not one that a loaded machine serves late (the runs' 50 ms is theirs).
fn reader() -> RedisOptions {
    RedisOptions::default().with_call_timeout(Duration::from_secs(30))
}

const TOTAL_OUTAGE: &str = r#"{"random": {"outages": [
    {"from_ms": 0, "until_ms": 600000, "fault": {"type": "http", "status": 503}}]}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_processes_sharing_a_redis_budget_send_only_what_it_funds_in_a_total_outage() {
    let Some(redis) = RedisServer::start("twenty_processes_sharing_a_redis_budget") else {
        return;
    };
    let _fleet = ONE_FLEET_AT_A_TIME.lock().await;
    let budget = redis.budget_url("outage");
    // 4 attempts each; a budget of 3 tokens refilling 1 a second, deposits of 0.1 per first
    // attempt (the default); a retry waits at most 300 ms for a token.
    let common = [
        "--max-attempts",
        "4",
        "--initial-delay-ms",
        "20",
        "--max-delay-ms",
        "40",
        "--budget-tokens",
        "3",
        "--budget-refill",
        "1",
        "--budget-max-wait-ms",
        "300",
    ];
    let shared = fake_server(TOTAL_OUTAGE).await;
    let mut args = common.to_vec();
    // Generous: this test is about the count, not about a loaded machine's scheduling.
    args.extend(["--budget", &budget, "--budget-timeout-ms", "1000"]);
    let started = Instant::now();
    let outputs = finish(spawn(&shared, AGENTS, &args)).await;
    let wall = started.elapsed().as_secs_f64();
    assert!(
        codes(&outputs).iter().all(|c| *c == Some(1)),
        "every run fails in a total outage: {:?}\n{}",
        codes(&outputs),
        stderr(&outputs)
    );
    assert!(
        outputs.iter().all(|o| !has_event(o, "budget_fallback")),
        "Redis answered throughout:\n{}",
        stderr(&outputs)
    );
    let sent = shared.requests().len();
    // What the budget funds: its initial tokens, a tenth of a token per first attempt, and
    // a token per second of the fleet's wall time.
    let funded = 3.0 + 0.1 * AGENTS as f64 + wall;
    eprintln!("shared budget: {sent} requests in {wall:.2} s (funded: {funded:.1} retries)");
    assert!(sent >= AGENTS, "every first attempt is sent: {sent}");
    assert!(
        (sent - AGENTS) as f64 <= funded.floor(),
        "{sent} requests: more retries than the shared budget funds ({funded:.1})"
    );
    // Read with the fleet's settings (a budget refuses a process with others).
    let stats = RedisBudget::new(
        &budget.parse().expect("a budget url"),
        settings(3.0, 1.0),
        reader(),
    )
    .expect("a client")
    .stats()
    .await
    .expect("redis answers");
    assert_eq!(
        stats.stats.granted as usize,
        sent - AGENTS,
        "every retry the server saw was granted by the budget in Redis"
    );
    shared.shutdown().await;

    let local = fake_server(TOTAL_OUTAGE).await;
    let mut args = common.to_vec();
    args.extend(["--budget", "local"]);
    let outputs = finish(spawn(&local, AGENTS, &args)).await;
    assert!(codes(&outputs).iter().all(|c| *c == Some(1)));
    let sent_local = local.requests().len();
    eprintln!("local budgets: {sent_local} requests");
    assert_eq!(
        sent_local,
        AGENTS * 4,
        "a budget per process funds every process's three retries"
    );
    local.shutdown().await;
}

/// 429 with `retry-after: 3` for every request in the first three seconds.
const RATE_LIMIT_WINDOW: &str = r#"{"random": {"outages": [
    {"from_ms": 0, "until_ms": 3000,
     "fault": {"type": "http", "status": 429, "headers": {"retry-after": "3"}}}]}}"#;

/// One agent first; once the server has sent it a 429, nineteen more. Returns the 429s sent
/// and the runs' exit codes.
async fn rate_limited_fleet(budget: &str) -> (usize, Vec<Option<i32>>, String) {
    let server = fake_server(RATE_LIMIT_WINDOW).await;
    let args = ["--budget", budget, "--budget-timeout-ms", "1000"];
    let mut children = spawn(&server, 1, &args);
    let deadline = Instant::now() + Duration::from_secs(10);
    while faults(&server) == 0 {
        assert!(Instant::now() < deadline, "the first agent got no 429");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for the first agent to tell the budget.
    tokio::time::sleep(Duration::from_millis(150)).await;
    children.extend(spawn(&server, AGENTS - 1, &args));
    let outputs = finish(children).await;
    let sent = faults(&server);
    server.shutdown().await;
    (sent, codes(&outputs), stderr(&outputs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_first_429_the_other_processes_wait_instead_of_each_getting_one() {
    let Some(redis) = RedisServer::start("after_the_first_429_the_other_processes_wait") else {
        return;
    };
    let _fleet = ONE_FLEET_AT_A_TIME.lock().await;
    let (shared, codes_shared, errors) = rate_limited_fleet(&redis.budget_url("window")).await;
    assert!(
        codes_shared.iter().all(|c| *c == Some(0)),
        "{codes_shared:?}\n{errors}"
    );
    let (local, codes_local, errors) = rate_limited_fleet("local").await;
    assert!(
        codes_local.iter().all(|c| *c == Some(0)),
        "{codes_local:?}\n{errors}"
    );
    eprintln!("429s sent: {shared} with a budget in Redis, {local} with local budgets");
    assert_eq!(shared, 1, "the fleet learns the window from one 429");
    assert!(
        local >= AGENTS / 2,
        "with a budget each, each process learns it itself: {local}"
    );
}

/// A run whose JSON events are read as they come, so a test can act on what the fleet has
/// done rather than on how long it usually takes (a loaded machine starts twenty processes
/// late, and restarts Redis slowly).
struct Watched {
    child: Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stdout: std::thread::JoinHandle<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

impl Watched {
    fn spawn(server: &FakeServer, extra: &[&str]) -> Watched {
        use std::io::{BufRead, Read};
        let mut child = agent(server, extra).spawn().expect("rebound runs");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("piped stdout");
        let seen = lines.clone();
        let stdout = std::thread::spawn(move || {
            let mut all = Vec::new();
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                all.extend_from_slice(line.as_bytes());
                all.push(b'\n');
                seen.lock().expect("not poisoned").push(line);
            }
            all
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let stderr = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = err.read_to_end(&mut all);
            all
        });
        Watched {
            child,
            lines,
            stdout,
            stderr,
        }
    }

    /// Whether the run has written an event of this type so far.
    fn told(&self, kind: &str) -> bool {
        let needle = format!("\"type\":\"{kind}\"");
        self.lines
            .lock()
            .expect("not poisoned")
            .iter()
            .any(|l| l.replace(' ', "").contains(&needle))
    }

    /// Whether the run has exited.
    fn exited(&mut self) -> bool {
        self.child.try_wait().expect("rebound runs").is_some()
    }

    fn finish(mut self) -> Output {
        let status = self.child.wait().expect("rebound exits");
        Output {
            status,
            stdout: self.stdout.join().expect("reader joins"),
            stderr: self.stderr.join().expect("reader joins"),
        }
    }
}

/// Waits until every run has told `kind` (a run that ended without it fails the test).
async fn until_all_told(runs: &[Watched], kind: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if runs.iter().all(|r| r.told(kind)) {
            return;
        }
        assert!(Instant::now() < deadline, "not every run told {kind}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends `server`'s outage: a healthy server takes its place on the same address (the runs
/// meet refused connections in between, which they retry).
async fn end_outage(server: FakeServer) -> FakeServer {
    let addr = server.addr();
    server.shutdown().await;
    FakeServer::start(FakeServerConfig::healthy().with_addr(addr))
        .await
        .expect("a healthy server on the same address")
}

async fn finish_watched(runs: Vec<Watched>) -> Vec<Output> {
    tokio::task::spawn_blocking(move || runs.into_iter().map(Watched::finish).collect())
        .await
        .expect("joins")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_run_changes_no_outcome_and_is_used_again_once_restarted() {
    let Some(mut redis) = RedisServer::start("redis_killed_mid_run") else {
        return;
    };
    let _fleet = ONE_FLEET_AT_A_TIME.lock().await;
    let budget = redis.budget_url("killed");
    // A 503 outage that the test ends itself, once the fleet has done what is under test;
    // retries every 150-250 ms until then (up to 1000 attempts: the outage never outlasts
    // them); plenty of tokens, so the budget shapes nothing here and a run's outcome is the
    // policy's.
    let common = [
        "--max-attempts",
        "1000",
        "--initial-delay-ms",
        "150",
        "--max-delay-ms",
        "250",
        "--budget-tokens",
        "1000",
        "--budget-refill",
        "0",
    ];

    let local = fake_server(TOTAL_OUTAGE).await;
    let mut args = common.to_vec();
    args.extend(["--budget", "local"]);
    let runs: Vec<Watched> = (0..AGENTS).map(|_| Watched::spawn(&local, &args)).collect();
    until_all_told(&runs, "provider_retry").await;
    let local = end_outage(local).await;
    let with_local = finish_watched(runs).await;
    local.shutdown().await;

    let shared = fake_server(TOTAL_OUTAGE).await;
    let mut args = common.to_vec();
    args.extend(["--budget", &budget]);
    let runs: Vec<Watched> = (0..AGENTS)
        .map(|_| Watched::spawn(&shared, &args))
        .collect();
    // Every run has asked Redis for its first attempt and is retrying: Redis dies, comes back
    // empty, and the outage ends only once every run is deciding with Redis again.
    until_all_told(&runs, "provider_retry").await;
    redis.kill();
    until_all_told(&runs, "budget_fallback").await;
    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .expect("joins");
    until_all_told(&runs, "budget_restored").await;
    let shared = end_outage(shared).await;
    let with_redis = finish_watched(runs).await;
    shared.shutdown().await;

    assert_eq!(
        codes(&with_redis),
        codes(&with_local),
        "the same outcomes as with local budgets\n{}",
        stderr(&with_redis)
    );
    assert!(codes(&with_local).iter().all(|c| *c == Some(0)));
    for (i, out) in with_redis.iter().enumerate() {
        let seen: Vec<String> = events(out)
            .iter()
            .filter_map(|e| e["type"].as_str())
            .filter(|t| t.starts_with("budget_"))
            .map(str::to_owned)
            .collect();
        // Told once when Redis went and once when it came back. A loaded machine may make a
        // call miss its 50 ms once more, a change of its own, told as one.
        let alternate = seen
            .iter()
            .enumerate()
            .all(|(at, kind)| kind == ["budget_fallback", "budget_restored"][at % 2]);
        assert!(
            seen.len() >= 2 && alternate,
            "agent {i}: {seen:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let errors = String::from_utf8_lossy(&out.stderr);
        assert!(
            errors.contains("using a local budget for this process"),
            "agent {i}: a line for people too: {errors}"
        );
    }
    // The restarted Redis started empty: what it holds now, the fleet put there after it
    // came back.
    let stats = RedisBudget::new(
        &budget.parse().expect("a budget url"),
        settings(1000.0, 0.0),
        reader(),
    )
    .expect("a client")
    .stats()
    .await
    .expect("redis is back");
    assert!(
        stats.stats.granted > 0 && stats.stats.deposited_milli > 0,
        "the budget in Redis is used again: {stats:?}"
    );
    drop(redis);
}

#[tokio::test]
async fn a_redis_password_from_the_environment_authenticates_and_is_never_shown() {
    let Some(redis) = RedisServer::start("a_redis_password_from_the_environment") else {
        return;
    };
    const PASSWORD: &str = "s3cret-budget-pw";
    assert!(redis
        .command(&format!("CONFIG SET requirepass {PASSWORD}"))
        .starts_with("+OK"));
    let provider = fake_server(r#"{"turns": [{"answer": {"text": "ok"}}]}"#).await;
    let budget = redis.budget_url("authed");
    let args = ["--budget", budget.as_str(), "--budget-timeout-ms", "1000"];
    let with_password = {
        let mut cmd = agent(&provider, &args);
        cmd.env("REBOUND_REDIS_PASSWORD", PASSWORD);
        tokio::task::spawn_blocking(move || cmd.output().expect("rebound runs"))
            .await
            .expect("joins")
    };
    let without = {
        let mut cmd = agent(&provider, &args);
        cmd.env_remove("REBOUND_REDIS_PASSWORD");
        tokio::task::spawn_blocking(move || cmd.output().expect("rebound runs"))
            .await
            .expect("joins")
    };
    for out in [&with_password, &without] {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            stderr(std::slice::from_ref(out))
        );
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!all.contains(PASSWORD), "the password was shown: {all}");
    }
    // With it, Redis keeps the budget; without it, Redis refuses and the run goes on with a
    // local budget, saying so.
    assert!(
        !has_event(&with_password, "budget_fallback"),
        "{}",
        stderr(std::slice::from_ref(&with_password))
    );
    assert!(has_event(&without, "budget_fallback"));
    assert!(redis
        .command(&format!("AUTH {PASSWORD}"))
        .starts_with("+OK"));
}

#[tokio::test]
async fn a_malformed_budget_url_is_refused_without_showing_its_password() {
    let provider = fake_server(r#"{"turns": [{"answer": {"text": "ok"}}]}"#).await;
    let mut cases = 0;
    for bad in [
        "redis://bot:hunter2@cache",
        "redis://bot:hunter2@cache:99999/x",
        "redis://:hunter2@cache/{bad}",
        "rediss://bot:hunter2@cache/x",
        "redis+sentinel://:hunter2@s1:26379/mymaster",
        "memcached://bot:hunter2@cache/x",
        "redis://bot:hunter2/x@cache/x",
    ] {
        let mut cmd = agent(&provider, &["--budget", bad]);
        let out = tokio::task::spawn_blocking(move || cmd.output().expect("rebound runs"))
            .await
            .expect("joins");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(2), "{bad}: {all}");
        assert!(
            !all.contains("hunter2"),
            "{bad}: the password was shown: {all}"
        );
        assert!(all.contains("--budget"), "{bad}: {all}");
        cases += 1;
    }
    assert!(provider.requests().is_empty(), "no run started");
    provider.shutdown().await;
    table::check("secrets-budget-url", cases);
}

#[tokio::test]
async fn a_redis_cluster_is_refused_at_start_not_used_as_a_local_budget_all_run() {
    let Some(redis) = RedisServer::start_cluster_node("a_redis_cluster_is_refused_at_start") else {
        return;
    };
    let provider = fake_server(r#"{"turns": [{"answer": {"text": "ok"}}]}"#).await;
    let budget = redis.budget_url("clustered");
    let mut cmd = agent(
        &provider,
        &["--budget", &budget, "--budget-timeout-ms", "1000"],
    );
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("rebound runs"))
        .await
        .expect("joins");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{errors}");
    assert!(errors.contains("Redis Cluster"), "{errors}");
    assert!(provider.requests().is_empty(), "no request sent");
    provider.shutdown().await;
}

/// The budget settings `rebound run --budget-tokens TOKENS --budget-refill REFILL` uses.
fn settings(tokens: f64, refill: f64) -> rebound_core::BudgetConfig {
    rebound_core::BudgetConfig::default()
        .with_capacity(tokens)
        .with_initial(tokens)
        .with_refill_per_sec(refill)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_naming_a_budget_kept_with_other_settings_stops_at_start_naming_both() {
    let Some(redis) = RedisServer::start("a_run_naming_a_budget_kept_with_other_settings") else {
        return;
    };
    let provider = fake_server(r#"{"turns": [{"answer": {"text": "ok"}}]}"#).await;
    let budget = redis.budget_url("team");
    let flags = |tokens: &'static str| {
        let budget = budget.clone();
        let mut cmd = agent(
            &provider,
            &[
                "--budget",
                &budget,
                "--budget-timeout-ms",
                "1000",
                "--budget-tokens",
                tokens,
            ],
        );
        async move {
            tokio::task::spawn_blocking(move || cmd.output().expect("rebound runs"))
                .await
                .expect("joins")
        }
    };
    let first = flags("10").await;
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let other = flags("3").await;
    let errors = String::from_utf8_lossy(&other.stderr);
    assert_eq!(other.status.code(), Some(2), "{errors}");
    assert!(
        errors.contains("capacity 10") && errors.contains("capacity 3"),
        "{errors}"
    );
    assert_eq!(provider.requests().len(), 1, "only the first run's request");
    provider.shutdown().await;
}

/// Twenty tool rounds, then a final answer; every answer takes 300 ms (played on the wire);
/// every request from 3 s to 15 s of the server's life gets 503.
const BUSY_THROUGH_A_TWELVE_SECOND_OUTAGE: &str = r#"{
    "timing": {"answer_ms": 300, "error_ms": 50},
    "turns": [
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "a"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "b"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "c"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "d"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "e"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "f"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "g"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "h"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "i"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "j"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "k"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "l"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "m"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "n"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "o"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "p"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "q"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "r"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "s"}}]}},
        {"answer": {"tool_calls": [{"name": "read", "input": {"path": "t"}}]}},
        {"answer": {"text": "Done."}}
    ],
    "random": {"outages": [
        {"from_ms": 3000, "until_ms": 15000, "fault": {"type": "http", "status": 503}}]}}"#;

/// A fleet busy in its tool loops when an outage longer than the budget's ten seconds of
/// memory hits all of it: at the recovery every process has a retry waiting in Redis with
/// about 3.5 s of its 15 s wait left, and the queue must drain at the rate the provider
/// served before the outage (here about 80 requests a second), not at the bucket's 10 a
/// second, or runs fail with the provider healthy. One long case on purpose: the property
/// depends on the outage outlasting ten seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_stuck_in_a_twelve_second_outage_finishes_every_run_once_the_provider_recovers() {
    const PROCESSES: usize = 30;
    let Some(redis) = RedisServer::start("a_fleet_stuck_in_a_twelve_second_outage") else {
        return;
    };
    let _fleet = ONE_FLEET_AT_A_TIME.lock().await;
    let budget = redis.budget_url("long-outage");
    // A server per process, so that each walks its own script; all started together, so
    // their outage windows agree.
    let scenario = Scenario::from_json(BUSY_THROUGH_A_TWELVE_SECOND_OUTAGE).expect("a scenario");
    let mut servers = Vec::with_capacity(PROCESSES);
    for _ in 0..PROCESSES {
        // The outage is a moment of the servers' life, which they started together.
        let mut config =
            FakeServerConfig::new(scenario.clone(), 1).with_clock(ScenarioClock::ServerStart);
        config.play_latency = true;
        servers.push(FakeServer::start(config).await.expect("fake server starts"));
    }
    // The budget's defaults (10 tokens, 15 s of wait) and `MachineConfig::resilient`'s
    // twelve attempts, so that what ends a run in the outage is the budget, not the attempt
    // cap; calls generous, as above: a fallback to a budget per process would hide what
    // this test is about.
    let args = [
        "--budget",
        &budget,
        "--budget-timeout-ms",
        "1000",
        "--max-attempts",
        "12",
    ];
    let children: Vec<Child> = servers
        .iter()
        .map(|s| agent(s, &args).spawn().expect("rebound runs"))
        .collect();
    let outputs = finish(children).await;
    assert!(
        outputs.iter().all(|o| !has_event(o, "budget_fallback")),
        "Redis answered throughout:\n{}",
        stderr(&outputs)
    );
    let failed: Vec<usize> = outputs
        .iter()
        .enumerate()
        .filter(|(_, o)| o.status.code() != Some(0))
        .map(|(i, _)| i)
        .collect();
    let told: Vec<String> = failed
        .iter()
        .map(|&i| String::from_utf8_lossy(&outputs[i].stdout).into_owned())
        .collect();
    assert!(
        failed.is_empty(),
        "runs {failed:?} of {PROCESSES} failed after the provider recovered: {:?}\n{}\n{}",
        codes(&outputs),
        stderr(&outputs),
        told.join("\n")
    );
    // Each run met the outage: the fleet was busy through it.
    assert!(
        servers.iter().all(|s| faults(s) > 0),
        "every process met the outage"
    );
    for server in servers {
        server.shutdown().await;
    }
}

/// A run with a Redis budget whose connection cannot be used, against a provider that
/// answers 503 for its first 1.5 s: it retries every 400 ms, so it decides four times and
/// tries Redis again (every second) after the check at its start.
async fn refused_run(budget: &str) -> Output {
    let provider = fake_server(
        r#"{"turns": [{"answer": {"text": "ok"}}], "random": {"outages": [
            {"from_ms": 0, "until_ms": 1500, "fault": {"type": "http", "status": 503}}]}}"#,
    )
    .await;
    let mut cmd = agent(
        &provider,
        &[
            "--budget",
            budget,
            "--budget-timeout-ms",
            "1000",
            "--max-attempts",
            "10",
            "--initial-delay-ms",
            "400",
            "--max-delay-ms",
            "400",
        ],
    );
    cmd.env_remove("REBOUND_REDIS_PASSWORD");
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("rebound runs"))
        .await
        .expect("joins");
    assert!(provider.requests().len() >= 4, "the run retried");
    provider.shutdown().await;
    out
}

#[tokio::test]
async fn a_refused_password_or_a_read_only_replica_is_told_once_as_such_and_shows_no_credential() {
    const PASSWORD: &str = "s3cret-budget-pw";
    let Some(locked) = RedisServer::start("a_refused_password_or_a_read_only_replica") else {
        return;
    };
    assert!(locked
        .command(&format!("CONFIG SET requirepass {PASSWORD}"))
        .starts_with("+OK"));
    let Some(replica) = RedisServer::start("a_refused_password_or_a_read_only_replica") else {
        return;
    };
    let replicating = replica.command(&format!("REPLICAOF 127.0.0.1 {}", server::free_port()));
    assert!(replicating.starts_with("+OK"), "{replicating}");
    let mut cases = 0;
    for (budget, says, kind) in [
        // The password written without its colon: a user name, and no password.
        (
            format!("redis://{PASSWORD}@127.0.0.1:{}/authed", locked.port()),
            "authentication failed",
            "authentication",
        ),
        (
            format!("redis://:not-it@127.0.0.1:{}/authed", locked.port()),
            "authentication failed",
            "authentication",
        ),
        (
            replica.budget_url("replica"),
            "read-only replica",
            "read_only",
        ),
    ] {
        let out = refused_run(&budget).await;
        let errors = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{budget}: {errors}");
        let all = format!("{}{errors}", String::from_utf8_lossy(&out.stdout));
        assert!(
            !all.contains(PASSWORD),
            "{budget}: a credential was shown: {all}"
        );
        assert!(
            !all.contains("not-it"),
            "{budget}: a credential was shown: {all}"
        );
        let told: Vec<Value> = events(&out)
            .into_iter()
            .filter(|e| e["type"] == "budget_fallback")
            .collect();
        assert_eq!(told.len(), 1, "{budget}: told once: {told:?}");
        let error = told[0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{budget}: {error}");
        assert!(!error.contains("cannot reach"), "{budget}: {error}");
        assert_eq!(told[0]["error_kind"], kind, "{budget}");
        let lines: Vec<&str> = errors
            .lines()
            .filter(|l| l.starts_with("rebound: retry budget"))
            .collect();
        assert_eq!(lines.len(), 1, "{budget}: one line for people: {errors}");
        assert!(lines[0].contains(says), "{budget}: {}", lines[0]);
        cases += 1;
    }
    table::check("redis-refused-runs", cases);
}

#[tokio::test]
async fn a_retry_refused_by_a_redis_budget_does_not_blame_this_process() {
    let Some(redis) = RedisServer::start("a_retry_refused_by_a_redis_budget") else {
        return;
    };
    let provider = fake_server(TOTAL_OUTAGE).await;
    // A budget that can never pay a retry: the first is refused at once.
    let budget = redis.budget_url("empty");
    let mut cmd = agent(
        &provider,
        &[
            "--budget",
            &budget,
            "--budget-timeout-ms",
            "1000",
            "--budget-tokens",
            "0",
        ],
    );
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("rebound runs"))
        .await
        .expect("joins");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{errors}");
    assert!(!has_event(&out, "budget_fallback"), "{errors}");
    // The run's error event, for programs and people.
    let failed = events(&out)
        .into_iter()
        .find(|e| e["type"] == "error")
        .unwrap_or_else(|| panic!("no error event: {errors}"));
    let told = failed.to_string();
    assert!(told.contains("retry budget exhausted"), "{told}");
    assert!(!told.contains("this process"), "the fleet's budget: {told}");
    assert_eq!(provider.requests().len(), 1, "the retry was refused");
    provider.shutdown().await;
}

/// The budget's clock as the script sees it is Redis's `TIME` plus the offset kept with the
/// budget: raising the offset is what a step of `TIME` looks like to it.
fn step_budget_clock(redis: &RedisServer, name: &str, ms: u64) {
    let stepped = redis.command(&format!(
        "HINCRBY rebound:budget:{{{name}}}:state offset {ms}"
    ));
    assert!(stepped.starts_with(':'), "{stepped}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_waiting_for_tokens_keeps_waiting_when_redis_time_steps_forward() {
    const PROCESSES: usize = 6;
    let Some(redis) = RedisServer::start("a_fleet_waiting_for_tokens_keeps_waiting") else {
        return;
    };
    let _fleet = ONE_FLEET_AT_A_TIME.lock().await;
    let budget = redis.budget_url("stepped");
    let server = fake_server(TOTAL_OUTAGE).await;
    // A total outage and a budget of one token that nothing refills: every run soon has a
    // retry waiting in Redis, allowed to wait 5 s, that no token will pay.
    let args = [
        "--budget",
        &budget,
        "--budget-timeout-ms",
        "1000",
        "--max-attempts",
        "10",
        "--initial-delay-ms",
        "20",
        "--max-delay-ms",
        "40",
        "--budget-tokens",
        "1",
        "--budget-refill",
        "0",
        "--budget-max-wait-ms",
        "5000",
    ];
    let mut runs: Vec<Watched> = (0..PROCESSES)
        .map(|_| Watched::spawn(&server, &args))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = redis.command("ZCARD rebound:budget:{stepped}:queue");
        if waiting.trim() == format!(":{PROCESSES}") {
            break;
        }
        assert!(Instant::now() < deadline, "never all waiting: {waiting}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Redis's clock steps 300 s forward while they wait.
    step_budget_clock(&redis, "stepped", 300_000);
    let stepped = Instant::now();
    let mut ended = vec![None; PROCESSES];
    while ended.iter().any(Option::is_none) {
        for (run, end) in runs.iter_mut().zip(ended.iter_mut()) {
            if end.is_none() && run.exited() {
                *end = Some(stepped.elapsed());
            }
        }
        assert!(
            stepped.elapsed() < Duration::from_secs(30),
            "runs never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let outputs = finish_watched(runs).await;
    // Each wait ends at its own end, 5 s after it began, not at the next call after the
    // step (within a second).
    eprintln!("runs ended {ended:?} after the step");
    let earliest = ended.iter().flatten().min().copied().unwrap_or_default();
    assert!(
        earliest >= Duration::from_millis(2_500),
        "a run ended {earliest:?} after the step: {ended:?}\n{}",
        stderr(&outputs)
    );
    assert!(
        codes(&outputs).iter().all(|c| *c == Some(1)),
        "refused when their waits ended: {:?}",
        codes(&outputs)
    );
    assert!(
        outputs.iter().all(|o| !has_event(o, "budget_fallback")),
        "Redis answered throughout:\n{}",
        stderr(&outputs)
    );
    for out in &outputs {
        let failed = events(out)
            .into_iter()
            .find(|e| e["type"] == "error")
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(failed.contains("retry budget exhausted"), "{failed}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_started_at_once_whose_connections_open_slowly_shares_one_budget() {
    const PROCESSES: usize = 16;
    let Some(redis) = RedisServer::start("a_fleet_started_at_once") else {
        return;
    };
    let _fleet = ONE_FLEET_AT_A_TIME.lock().await;
    // Every connection to Redis opens 400 ms late, as on a busy machine that starts a fleet
    // at once; a call on an open connection may take 300 ms; opening one has the default
    // bound.
    let proxy = slow_connects::SlowConnects::start(redis.port(), Duration::from_millis(400)).await;
    let budget = proxy.budget_url("slow-start");
    let args = [
        "--budget",
        &budget,
        "--budget-timeout-ms",
        "300",
        "--max-attempts",
        "4",
        "--initial-delay-ms",
        "20",
        "--max-delay-ms",
        "40",
        "--budget-tokens",
        "3",
        "--budget-refill",
        "1",
        "--budget-max-wait-ms",
        "300",
    ];
    let server = fake_server(TOTAL_OUTAGE).await;
    let outputs = finish(spawn(&server, PROCESSES, &args)).await;
    assert!(
        outputs.iter().all(|o| !has_event(o, "budget_fallback")),
        "a process fell back:\n{}",
        stderr(&outputs)
    );
    assert!(
        codes(&outputs).iter().all(|c| *c == Some(1)),
        "every run fails in a total outage: {:?}",
        codes(&outputs)
    );
    // Every retry the server saw was granted by the one budget in Redis.
    let sent = server.requests().len();
    let stats = RedisBudget::new(
        &redis
            .budget_url("slow-start")
            .parse()
            .expect("a budget url"),
        settings(3.0, 1.0),
        reader(),
    )
    .expect("a client")
    .stats()
    .await
    .expect("redis answers");
    assert_eq!(stats.stats.granted as usize, sent - PROCESSES, "{stats:?}");
    server.shutdown().await;
}
