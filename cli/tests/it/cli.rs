//! The `rebound` binary's contract: exit codes, the JSON event stream, signals, demo, replay.
//! Each test runs the built binary against the fake provider server on loopback.

use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::Scenario;
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rebound");

fn scenario(json: &str) -> Scenario {
    Scenario::from_json(json).unwrap_or_else(|e| panic!("bad test scenario: {e}"))
}

async fn server(json: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::new(scenario(json), 1))
        .await
        .expect("fake server starts")
}

/// `rebound run` against `server` with fast retries; extra args appended.
fn run_cmd(server: &FakeServer, extra: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--base-url", &server.base_url()])
        .args(["--model", "test-model", "--no-jitter"]);
    if !extra.contains(&"--initial-delay-ms") {
        cmd.args(["--initial-delay-ms", "10"]);
    }
    cmd.args(extra)
        .env("ANTHROPIC_API_KEY", "sk-ant-cli-test")
        .stdin(Stdio::null());
    cmd
}

async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("the binary runs"))
        .await
        .expect("join")
}

fn json_events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test]
async fn a_finished_run_exits_0_and_a_failed_one_exits_1_with_an_error_event() {
    let ok = server(r#"{"turns": [{"answer": {"text": "Hi there."}}]}"#).await;
    let out = output(run_cmd(&ok, &["--events", "json"])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_events(&out);
    assert_eq!(events.last().unwrap()["type"], "done");
    assert_eq!(events.last().unwrap()["turns"], 1);
    ok.shutdown().await;

    let auth = server(r#"{"turns": [{"faults": [{"type": "http", "status": 401}]}]}"#).await;
    let out = output(run_cmd(&auth, &["--events", "json"])).await;
    assert_eq!(out.status.code(), Some(1));
    let events = json_events(&out);
    let error = events.last().unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["kind"], "auth_failed");
    assert_eq!(error["status"], 401);
    assert_eq!(auth.requests().len(), 1, "401 is not retried");
    auth.shutdown().await;
}

#[tokio::test]
async fn max_turns_is_a_finish_with_exit_0() {
    let s = server(
        r#"{"turns": [{"answer": {"tool_calls": [{"name": "read", "input": {"path": "a"}}]}},
                      {"answer": {"text": "never reached"}}]}"#,
    )
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("a"), "contents").expect("write");
    let root = dir.path().to_string_lossy().to_string();
    let out = output(run_cmd(
        &s,
        &[
            "--events",
            "json",
            "--max-turns",
            "1",
            "--tools-root",
            &root,
        ],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_events(&out);
    let done = events.last().unwrap();
    assert_eq!(done["type"], "done");
    assert_eq!(done["stop_reason"], "max_turns");
    assert_eq!(done["turns"], 1);
    let result = events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool result");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["text"], "contents");
    s.shutdown().await;
}

#[tokio::test]
async fn usage_and_configuration_errors_exit_2_before_any_request() {
    let s = server("{}").await;
    let mut no_key = run_cmd(&s, &[]);
    no_key.env_remove("ANTHROPIC_API_KEY");
    let out = output(no_key).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ANTHROPIC_API_KEY"));

    let mut empty_key = run_cmd(&s, &[]);
    empty_key.env("ANTHROPIC_API_KEY", "");
    assert_eq!(output(empty_key).await.status.code(), Some(2));

    let out = output(run_cmd(&s, &["--base-url", "not a url"])).await;
    assert_eq!(out.status.code(), Some(2));
    let out = output(run_cmd(&s, &["--model", "@nonsense"])).await;
    assert_eq!(out.status.code(), Some(2));
    let mut bad_flag = Command::new(BIN);
    bad_flag.args(["run", "--no-such-flag", "x"]);
    assert_eq!(output(bad_flag).await.status.code(), Some(2));
    assert!(
        s.requests().is_empty(),
        "no request on a configuration error"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn an_empty_or_blank_prompt_is_a_usage_error_and_nothing_is_sent() {
    let s = server(r#"{"turns": [{"answer": {"text": "Hi."}}]}"#).await;
    for (provider, prompt) in [
        ("anthropic", ""),
        ("openai", ""),
        ("anthropic", "  \n\t "),
        ("openai", " "),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", prompt, "--provider", provider])
            .args(["--base-url", &s.base_url_for(provider_kind(provider))])
            .args(["--model", "test-model", "--events", "json"])
            .env("ANTHROPIC_API_KEY", "sk-ant-cli-test")
            .env("OPENAI_API_KEY", "sk-cli-test")
            .stdin(Stdio::null());
        let out = output(cmd).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{provider} {prompt:?}: {stderr}"
        );
        assert!(stderr.contains("prompt"), "{stderr}");
    }
    assert!(s.requests().is_empty(), "{:?}", s.requests());
    s.shutdown().await;
}

fn provider_kind(name: &str) -> rebound_core::ProviderKind {
    match name {
        "openai" => rebound_core::ProviderKind::OpenAi,
        _ => rebound_core::ProviderKind::Anthropic,
    }
}

#[tokio::test]
async fn json_events_of_a_fault_scenario_come_in_order() {
    let s = server(
        r#"{"turns": [
             {"faults": [{"type": "http", "status": 529},
                         {"type": "stream_cut", "after_events": 5}],
              "answer": {"text": "Let me read it, in enough words to stream a while.",
                         "tool_calls": [{"name": "read", "input": {"path": "missing.rs"}}]}},
             {"answer": {"text": "The file is missing."}}]}"#,
    )
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().to_string_lossy().to_string();
    let out = output(run_cmd(&s, &["--events", "json", "--tools-root", &root])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_events(&out);
    let mut kinds = types(&events);
    kinds.dedup_by(|a, b| a == "text_delta" && b == "text_delta");
    assert_eq!(
        kinds,
        [
            "start",          // the jitter seed
            "message",        // the user message
            "provider_retry", // 529
            "text_delta",     // the cut attempt streamed some text
            "stream_reset",
            "provider_retry", // stream cut
            "text_delta",
            "message", // the assistant message with the tool call
            "tool_start",
            "message", // the error tool result
            "tool_result",
            "text_delta",
            "message",
            "done"
        ],
        "{events:#?}"
    );
    let retries: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "provider_retry")
        .collect();
    assert_eq!(retries[0]["attempt"], 2);
    assert_eq!(retries[0]["status"], 529);
    assert_eq!(retries[0]["kind"], "unavailable");
    assert_eq!(retries[1]["kind"], "stream_malformed");
    let result = events.iter().find(|e| e["type"] == "tool_result").unwrap();
    assert_eq!(result["is_error"], true);
    s.shutdown().await;
}

#[tokio::test]
async fn sigint_during_a_long_retry_delay_exits_130_promptly_and_the_session_keeps_complete_messages(
) {
    let s = server(r#"{"turns": [{"faults": [{"type": "http", "status": 529}]}]}"#).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let session = dir.path().join("session.json");
    let session_arg = session.to_string_lossy().to_string();
    let mut cmd = run_cmd(
        &s,
        &[
            "--events",
            "json",
            "--initial-delay-ms",
            "300000",
            "--max-delay-ms",
            "300000",
            "--session",
            &session_arg,
        ],
    );
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn");
    // Wait until the retry was announced (the request failed and the long sleep began).
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.requests().is_empty() {
        if Instant::now() > deadline {
            let out = child.wait_with_output().expect("wait");
            panic!(
                "the request never arrived: {:?} {} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().expect("wait"))
        .await
        .expect("join");
    // The backoff was five minutes; getting here at all shows the sleep was interrupted.
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(s.requests().len(), 1, "no request after cancel");
    let saved = rebound_effects::session::decode_session(&std::fs::read(&session).expect("saved"))
        .expect("the session loads");
    assert_eq!(saved.len(), 1, "only the complete user message");
    let events = json_events(&out);
    assert_eq!(events.last().unwrap()["kind"], "canceled");
    s.shutdown().await;
}

#[tokio::test]
async fn a_long_server_delay_moves_to_the_fallback_at_once_and_above_the_cap_fails() {
    let faulty = r#"{"turns": [{"faults": [{"type": "http", "status": 429,
                                           "headers": {"retry-after-ms": "5000"}}],
                               "answer": {"text": "Hi from the fallback."}}]}"#;
    // With a fallback at hand, 5 s is above --fallback-after-ms: no wait, the next target.
    let s = server(faulty).await;
    let fallback = format!("anthropic:test-model@{}", s.base_url());
    let started = Instant::now();
    let out = output(run_cmd(
        &s,
        &[
            "--events",
            "json",
            "--fallback",
            &fallback,
            "--fallback-after-ms",
            "1000",
        ],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(5), "it waited");
    let kinds = types(&json_events(&out));
    assert!(kinds.contains(&"fallback".to_owned()), "{kinds:?}");
    assert!(!kinds.contains(&"provider_retry".to_owned()), "{kinds:?}");
    s.shutdown().await;

    // Without one, 5 s above --max-retry-after-ms fails at once.
    let s = server(faulty).await;
    let out = output(run_cmd(
        &s,
        &["--events", "json", "--max-retry-after-ms", "1000"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(1));
    let events = json_events(&out);
    let error = events.last().unwrap();
    assert_eq!(error["type"], "error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("more than the 1.0s allowed"),
        "{error}"
    );
    assert_eq!(s.requests().len(), 1);
    s.shutdown().await;
}

#[tokio::test]
async fn demo_completes_offline() {
    let mut cmd = Command::new(BIN);
    cmd.args(["demo", "--events", "json"])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY");
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_events(&out);
    let kinds = types(&events);
    for expected in [
        "provider_retry",
        "stream_reset",
        "compaction",
        "tool_result",
        "done",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "missing {expected}: {kinds:?}"
        );
    }
}

#[tokio::test]
async fn the_demos_summary_counts_one_of_a_thing_in_the_singular() {
    let mut cmd = Command::new(BIN);
    cmd.arg("demo")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY");
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary line: {stderr}"));
    // The demo has one stream reset, one tool error and one compaction.
    for one in ["1 stream reset,", "(1 error)", "1 compaction —"] {
        assert!(summary.contains(one), "{one:?} in {summary}");
    }
}

#[tokio::test]
async fn replay_accepts_a_recorded_trace_and_rejects_an_altered_one() {
    let s = server(
        r#"{"turns": [{"faults": [{"type": "http", "status": 500}], "answer": {"text": "ok"}}]}"#,
    )
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let trace = dir.path().join("run.trace");
    let trace_arg = trace.to_string_lossy().to_string();
    let out = output(run_cmd(&s, &["--trace", &trace_arg])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    s.shutdown().await;

    let replay = |path: &std::path::Path| {
        let mut cmd = Command::new(BIN);
        cmd.arg("replay").arg(path);
        cmd
    };
    let out = output(replay(&trace)).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Alter the chosen retry delay: the replay must diverge at that step.
    let text = std::fs::read_to_string(&trace).expect("trace");
    assert!(text.contains("\"delay_ms\":10"), "{text}");
    let altered = dir.path().join("altered.trace");
    std::fs::write(
        &altered,
        text.replacen("\"delay_ms\":10", "\"delay_ms\":11", 1),
    )
    .expect("write");
    let out = output(replay(&altered)).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("diverged"));

    // Truncated and unknown-version traces are errors, exit 2.
    let truncated = dir.path().join("truncated.trace");
    std::fs::write(&truncated, &text[..text.len() / 2]).expect("write");
    assert_eq!(output(replay(&truncated)).await.status.code(), Some(2));
    let future = dir.path().join("future.trace");
    std::fs::write(&future, text.replacen("\"version\":1", "\"version\":99", 1)).expect("write");
    assert_eq!(output(replay(&future)).await.status.code(), Some(2));
}

#[tokio::test]
async fn a_lua_tool_error_is_shown_to_the_model_which_then_calls_it_correctly() {
    let s = server(
        r#"{"tools": [{"name": "add"}],
            "turns": [
              {"answer": {"tool_calls": [{"name": "add", "input": {"a": -1, "b": 2}}]}},
              {"answer": {"text": "unreachable: the tool must fail first"},
               "when_last_tool_error": {"tool_calls": [{"name": "add", "input": {"a": 1, "b": 2}}]}},
              {"answer": {"text": "1 + 2 = 3"}}]}"#,
    )
    .await;
    let lua = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../effects/tests/fixtures/lua/tools"
    );
    let out = output(run_cmd(&s, &["--events", "json", "--lua-tools", lua])).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_events(&out);
    let results: Vec<(bool, String)> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| {
            (
                e["is_error"] == true,
                e["text"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{events:#?}");
    assert!(results[0].0 && results[0].1.contains("both numbers must be non-negative"));
    assert_eq!(results[1], (false, "3".to_owned()));
    assert_eq!(events.last().unwrap()["type"], "done");
    s.shutdown().await;
}

#[tokio::test]
async fn each_run_without_seed_draws_its_own_and_json_events_start_with_it() {
    let s = server(r#"{"turns": [{"answer": {"text": "Hi there."}}]}"#).await;
    let mut seeds = Vec::new();
    for _ in 0..4 {
        let out = output(run_cmd(&s, &["--events", "json"])).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let events = json_events(&out);
        assert_eq!(events[0]["type"], "start", "{events:#?}");
        seeds.push(events[0]["seed"].as_u64().expect("a numeric seed"));
    }
    let mut distinct = seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "four processes, four seeds: {seeds:?}");
    s.shutdown().await;
}

#[tokio::test]
async fn the_seed_shown_is_the_one_in_the_trace_and_seed_reproduces_it() {
    const ONE_529: &str =
        r#"{"turns": [{"faults": [{"type": "http", "status": 529}], "answer": {"text": "ok"}}]}"#;
    let dir = tempfile::tempdir().expect("temp dir");
    let trace_seed = |path: &std::path::Path| -> u64 {
        let text = std::fs::read_to_string(path).expect("trace");
        let header: Value =
            serde_json::from_str(text.lines().next().expect("a header")).expect("a JSON header");
        header["seed"].as_u64().expect("a numeric seed")
    };
    // A fresh server per run (each plays its script once), jittered retries so the seed
    // decides the delay.
    let jittered_run = |trace: std::path::PathBuf, seed: Option<u64>| async move {
        let s = server(ONE_529).await;
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "hello", "--base-url", &s.base_url()])
            .args(["--model", "test-model", "--initial-delay-ms", "40"])
            .args(["--events", "json", "--trace"])
            .arg(&trace)
            .env("ANTHROPIC_API_KEY", "sk-ant-cli-test")
            .stdin(Stdio::null());
        if let Some(seed) = seed {
            cmd.args(["--seed", &seed.to_string()]);
        }
        let out = output(cmd).await;
        s.shutdown().await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        json_events(&out)
    };
    let retry_delay = |events: &[Value]| {
        events
            .iter()
            .find(|e| e["type"] == "provider_retry")
            .map(|e| e["delay_ms"].as_u64().expect("a delay"))
            .expect("a retry")
    };

    let first = dir.path().join("first.trace");
    let events = jittered_run(first.clone(), None).await;
    assert_eq!(events[0]["type"], "start", "{events:#?}");
    let seed = events[0]["seed"].as_u64().expect("a numeric seed");
    assert_eq!(trace_seed(&first), seed);

    // `--seed` with the shown seed makes the same choices.
    let again = dir.path().join("again.trace");
    let reproduced = jittered_run(again.clone(), Some(seed)).await;
    assert_eq!(reproduced[0]["seed"], seed);
    assert_eq!(trace_seed(&again), seed);
    assert_eq!(retry_delay(&reproduced), retry_delay(&events));

    // And the trace recorded with the drawn seed replays exactly.
    let mut replay = Command::new(BIN);
    replay.arg("replay").arg(&first);
    let out = output(replay).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Quotes `arg` for `sh -c`.
fn sh_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

#[tokio::test]
async fn on_a_terminal_a_long_server_delay_is_counted_down_then_the_answer_streams() {
    let s = server(
        r#"{"turns": [{"faults": [{"type": "http", "status": 429,
                                   "headers": {"retry-after": "4"}}],
                       "answer": {"text": "Counted down."}}]}"#,
    )
    .await;
    let cmd = run_cmd(&s, &["--events", "human"]);
    let line = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| sh_quote(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    // `script` gives the binary a pseudo-terminal for stdout and stderr (util-linux).
    let mut script = Command::new("script");
    script
        .args(["--quiet", "--return", "--command", &line, "/dev/null"])
        .env("ANTHROPIC_API_KEY", "sk-ant-cli-test")
        .stdin(Stdio::null());
    let started = Instant::now();
    let out = output(script).await;
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}: {screen}", out.status);
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "the server's delay was waited out"
    );
    // The retry line is drawn, then redrawn in place with less time left, at least twice.
    let draws: Vec<f64> = screen
        .split("\r\x1b[2K")
        .skip(1)
        .filter_map(|draw| {
            let at = draw.find("retrying in ")? + "retrying in ".len();
            let rest = &draw[at..];
            rest[..rest.find('s')?].parse().ok()
        })
        .collect();
    assert!(draws.len() >= 3, "{draws:?} in {screen:?}");
    assert!(
        (draws[0] - 4.0).abs() < 0.05,
        "starts at the full delay: {draws:?}"
    );
    assert!(
        draws.windows(2).all(|w| w[1] < w[0]),
        "counts down: {draws:?}"
    );
    assert!(screen.contains("Counted down."), "{screen:?}");
    assert_eq!(s.requests().len(), 2);
    s.shutdown().await;
}

#[tokio::test]
async fn sim_with_charts_writes_the_time_to_completion_and_attempts_charts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let charts = dir.path().join("charts");
    let mut cmd = Command::new(BIN);
    cmd.args(["sim", "--scenario", "brownout", "--runs", "50", "--charts"])
        .arg(&charts);
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut written: Vec<String> = std::fs::read_dir(&charts)
        .expect("the charts directory was created")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        ["brownout-attempts.svg", "brownout-time-to-completion.svg"]
    );
    let ttc = std::fs::read_to_string(charts.join("brownout-time-to-completion.svg")).unwrap();
    assert!(ttc.contains("brownout: time to completion"));
    assert!(ttc.contains("50 runs (seeds 0–49)"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrote 2 charts"));
}

#[tokio::test]
async fn sim_compare_with_charts_writes_two_charts_per_outage_model() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cmd = Command::new(BIN);
    cmd.args(["sim", "--compare", "--seed", "1", "--charts"])
        .arg(dir.path());
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("| model | policy |"));
    let models = rebound_study::compare::OutageModel::standard();
    for model in &models {
        for chart in ["requests-per-second", "success-vs-amplification"] {
            let path = dir.path().join(format!("{}-{chart}.svg", model.name));
            let svg = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                svg.contains(&format!("{}: ", model.name)),
                "{}",
                path.display()
            );
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2 * models.len()
    );
}

#[tokio::test]
async fn provider_openai_responses_speaks_v1_responses_and_is_a_fallback_target() {
    // As the primary: `/v1` base URL, key from OPENAI_API_KEY, a retried in-stream failure.
    let s = server(
        r#"{"turns": [{"faults": [{"type": "stream_error", "error_type": "server_error",
                                   "message": "The model failed to generate a response."}],
                       "answer": {"text": "Hi from Responses."}}]}"#,
    )
    .await;
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "openai-responses"])
        .args(["--base-url", &s.openai_base_url()])
        .args(["--model", "gpt-test", "--events", "json", "--no-jitter"])
        .args(["--initial-delay-ms", "10"])
        .env_remove("ANTHROPIC_API_KEY")
        .env("OPENAI_API_KEY", "sk-cli-test")
        .stdin(Stdio::null());
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds = types(&json_events(&out));
    assert!(kinds.contains(&"provider_retry".to_owned()), "{kinds:?}");
    let requests = s.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    assert_eq!(
        requests[0].header("authorization"),
        Some("<redacted>"),
        "the key is sent and never logged"
    );
    s.shutdown().await;

    // As a fallback behind an overloaded Anthropic primary.
    let primary = server(
        r#"{"random": {"outages": [{"from_ms": 0, "until_ms": 600000,
                                     "fault": {"type": "http", "status": 529}}]}}"#,
    )
    .await;
    let fallback_server =
        server(r#"{"turns": [{"answer": {"text": "Hi from the fallback."}}]}"#).await;
    let fallback = format!(
        "openai-responses:gpt-test@{}",
        fallback_server.openai_base_url()
    );
    let mut cmd = run_cmd(
        &primary,
        &[
            "--events",
            "json",
            "--max-attempts",
            "2",
            "--fallback",
            &fallback,
        ],
    );
    cmd.env("OPENAI_API_KEY", "sk-cli-test");
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(types(&json_events(&out)).contains(&"fallback".to_owned()));
    assert_eq!(fallback_server.requests()[0].path, "/v1/responses");
    primary.shutdown().await;
    fallback_server.shutdown().await;
}

#[tokio::test]
async fn provider_gemini_and_vertex_speak_generate_content_with_their_credentials() {
    let scenario = r#"{"turns": [{"faults": [{"type": "stream_error", "error_type": "UNAVAILABLE",
                                   "message": "The model is overloaded. Please try again later."}],
                       "answer": {"text": "Hi from Gemini."}}]}"#;
    // AI Studio: the key from GOOGLE_API_KEY when GEMINI_API_KEY is unset, in
    // `x-goog-api-key`; an in-stream UNAVAILABLE retried.
    let s = server(scenario).await;
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "gemini"])
        .args(["--base-url", &s.gemini_base_url()])
        .args([
            "--model",
            "@gemini-flash",
            "--events",
            "json",
            "--no-jitter",
        ])
        .args(["--initial-delay-ms", "10"])
        .env_remove("GEMINI_API_KEY")
        .env("GOOGLE_API_KEY", "gm-cli-test-key")
        .stdin(Stdio::null());
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(types(&json_events(&out)).contains(&"provider_retry".to_owned()));
    let requests = s.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| r.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"));
    assert_eq!(requests[0].header("x-goog-api-key"), Some("<redacted>"));
    assert!(!stderr.contains("gm-cli-test-key"));
    s.shutdown().await;

    // Vertex AI: a bearer token printed by a command, the project's URL.
    let s = server(r#"{"turns": [{"answer": {"text": "Hi from Vertex."}}]}"#).await;
    let base = format!(
        "{}/v1/projects/p1/locations/global/publishers/google",
        s.base_url()
    );
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "vertex", "--base-url", &base])
        .args(["--model", "gemini-2.5-pro", "--events", "json"])
        .args(["--api-key-command", "echo ya29.vertex-test-token"])
        .stdin(Stdio::null());
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let request = &s.requests()[0];
    assert_eq!(
        request.path,
        "/v1/projects/p1/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent"
    );
    assert_eq!(request.header("authorization"), Some("<redacted>"));
    assert_eq!(request.header("x-goog-api-key"), None);
    s.shutdown().await;

    // Without a project, Vertex says what it needs before any request.
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "vertex"])
        .env_remove("GOOGLE_CLOUD_PROJECT")
        .env("VERTEX_ACCESS_TOKEN", "ya29.unused")
        .stdin(Stdio::null());
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("GOOGLE_CLOUD_PROJECT"));
}

#[tokio::test]
async fn provider_bedrock_speaks_converse_stream_with_its_api_key() {
    let s = server(
        r#"{"turns": [{"faults": [{"type": "stream_error", "error_type": "ThrottlingException",
                                   "message": "Too many requests, please wait before trying again."}],
                       "answer": {"text": "Hi from Bedrock."}}]}"#,
    )
    .await;
    let model = "anthropic.claude-sonnet-4-5-20250929-v1:0";
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "bedrock"])
        .args(["--base-url", &s.base_url()])
        .args(["--model", model, "--events", "json", "--no-jitter"])
        .args(["--initial-delay-ms", "10"])
        .env("AWS_BEARER_TOKEN_BEDROCK", "bedrock-cli-test-key")
        .stdin(Stdio::null());
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let events = json_events(&out);
    assert!(
        types(&events).contains(&"provider_retry".to_owned()),
        "{events:?}"
    );
    let requests = s.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests
        .iter()
        .all(|r| r.path == "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"));
    assert_eq!(requests[0].header("authorization"), Some("<redacted>"));
    assert!(!stderr.contains("bedrock-cli-test-key"));
    s.shutdown().await;

    // AWS credentials instead of an API key: every request signed (SigV4).
    let s = server(r#"{"turns": [{"answer": {"text": "Signed."}}]}"#).await;
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "bedrock"])
        .args([
            "--base-url",
            &s.base_url(),
            "--model",
            model,
            "--events",
            "json",
        ])
        .env_remove("AWS_BEARER_TOKEN_BEDROCK")
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        )
        .env("AWS_SESSION_TOKEN", "session-token-example-0123456789")
        .env("AWS_REGION", "us-east-1")
        .stdin(Stdio::null());
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let request = &s.requests()[0];
    assert!(request
        .header("x-amz-date")
        .is_some_and(|d| d.ends_with('Z')));
    assert_eq!(request.header("authorization"), Some("<redacted>"));
    assert_eq!(request.header("x-amz-security-token"), Some("<redacted>"));
    for secret in ["wJalrXUtnFEMI", "session-token-example"] {
        assert!(!stderr.contains(secret));
        assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
    }
    s.shutdown().await;

    // Without a region, Bedrock says what it needs before any request.
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "bedrock", "--model", model])
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env("AWS_BEARER_TOKEN_BEDROCK", "unused")
        .stdin(Stdio::null());
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AWS_REGION"));
}

#[tokio::test]
async fn request_options_headers_and_extra_body_reach_the_provider() {
    let s = server(r#"{"turns": [{"answer": {"text": "Hi there."}}]}"#).await;
    let out = output(run_cmd(
        &s,
        &[
            "--max-tokens",
            "2000",
            "--temperature",
            "0.3",
            "--stop",
            "END",
            "--stop",
            "STOP",
            "--tool-choice",
            "none",
            "--no-parallel-tool-calls",
            "--user-id",
            "user-hash",
            "--header",
            "anthropic-beta: beta-1",
            "--header",
            "X-Gateway-Token: gw-cli-secret",
            "--extra-body",
            r#"{"top_k": 5}"#,
        ],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = s.requests();
    let request = requests.first().expect("a request");
    assert_eq!(request.header("anthropic-beta"), Some("beta-1"));
    // It arrived; the server's log masks a header named like a credential.
    assert_eq!(request.header("x-gateway-token"), Some("<redacted>"));
    let body = request.body.as_ref().expect("a JSON body");
    assert_eq!(body["max_tokens"], 2000);
    assert_eq!(body["temperature"], 0.3);
    assert_eq!(body["stop_sequences"], serde_json::json!(["END", "STOP"]));
    assert_eq!(body["metadata"]["user_id"], "user-hash");
    assert_eq!(body["top_k"], 5);
    // No tools offered: a tool choice means nothing and is left out.
    assert!(body.get("tool_choice").is_none(), "{body}");
    s.shutdown().await;
}

#[tokio::test]
async fn invalid_request_options_exit_2_before_any_request_without_echoing_a_header() {
    let s = server(r#"{"turns": [{"answer": {"text": "never"}}]}"#).await;
    let cases: [(&[&str], &str); 7] = [
        (&["--temperature", "1.5"], "out of range"),
        (
            &["--tool-choice", "sometimes"],
            "expected auto, any, none or tool:NAME",
        ),
        (&["--reasoning-effort", "high"], "thinking budget"),
        (&["--thinking-budget", "100"], "at least 1024"),
        (&["--header", "gw-cli-secret-token"], "Name: value"),
        (&["--header", "x-api-key: gw-cli-secret"], "cannot be set"),
        (&["--extra-body", "[1, 2]"], "expected a JSON object"),
    ];
    for (args, says) in cases {
        let out = output(run_cmd(&s, args)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("gw-cli-secret"), "{args:?}: {stderr}");
    }
    // A fallback whose API lacks an option is named.
    let fallback = format!("openai:gpt-4o@{}", s.openai_base_url());
    let mut cmd = run_cmd(&s, &["--thinking-budget", "2048", "--fallback", &fallback]);
    cmd.env("OPENAI_API_KEY", "sk-cli-test");
    let out = output(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--fallback openai:gpt-4o@"), "{stderr}");
    assert!(stderr.contains("thinking budget"), "{stderr}");
    assert!(s.requests().is_empty(), "nothing is sent");
    s.shutdown().await;
}

#[tokio::test]
async fn tool_ids_nine_sends_nine_letter_ids_and_the_session_keeps_the_originals() {
    let s = server(
        r#"{"provider": "openai", "turns": [
            {"answer": {"tool_calls": [{"id": "call_0", "name": "list", "input": {"path": "."}}]}},
            {"answer": {"text": "Listed."}}
        ]}"#,
    )
    .await;
    let dir = tempfile::tempdir().expect("a folder");
    let root = dir.path().display().to_string();
    let session = dir.path().join("session.jsonl");
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "hello", "--provider", "openai"])
        .args(["--base-url", &s.openai_base_url(), "--model", "test-model"])
        .args(["--tool-ids", "nine", "--tools-root", &root])
        .arg("--session")
        .arg(&session)
        .env("OPENAI_API_KEY", "sk-cli-test")
        .stdin(Stdio::null());
    let out = output(cmd).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = s.requests();
    let body = requests[1].body.as_ref().expect("a JSON body");
    let messages = body["messages"].as_array().expect("messages");
    let call_id = messages
        .iter()
        .find_map(|m| m["tool_calls"][0]["id"].as_str())
        .expect("the assistant's tool call");
    let result_id = messages
        .iter()
        .find_map(|m| {
            (m["role"] == "tool")
                .then(|| m["tool_call_id"].as_str())
                .flatten()
        })
        .expect("the tool result");
    assert_eq!(call_id, result_id);
    assert!(
        call_id.len() == 9 && call_id.chars().all(|c| c.is_ascii_alphanumeric()),
        "{call_id}"
    );
    let saved = std::fs::read_to_string(&session).expect("the session");
    assert!(saved.contains("\"call_0\""), "{saved}");
    s.shutdown().await;
}

#[tokio::test]
async fn serve_help_lists_every_builtin_scenario_and_the_tools_its_model_calls() {
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--help"]);
    let out = output(cmd).await;
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for name in rebound_sim::Scenario::builtin_names() {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} is not listed:\n{help}"));
        assert!(line.contains("its model calls"), "{line}");
    }
    assert!(help.contains("tool-errors") && help.contains("bash, edit, grep, read"));
}
