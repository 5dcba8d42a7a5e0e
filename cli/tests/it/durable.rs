//! `rebound durable serve` as docs/durable.md shows it: registered with a real Restate server,
//! runs started through Restate's ingress, continued, followed and canceled; and a clear
//! exit 2 when there is no Restate to register with.

use crate::restate::{free_port, run_failure, Client, RestateServer};
use rebound_core::Conversation;
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::scenario::Scenario;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rebound");

async fn fake_server(json: &str) -> FakeServer {
    let scenario = Scenario::from_json(json).unwrap_or_else(|e| panic!("bad scenario: {e}"));
    FakeServer::start(FakeServerConfig::new(scenario, 1))
        .await
        .expect("fake server starts")
}

/// `rebound durable serve` against `server`, registering with `admin`.
fn durable_serve(server: &FakeServer, port: u16, admin: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["durable", "serve", "--port", &port.to_string()])
        .args(["--register", admin])
        .args(["--base-url", &server.base_url()])
        .args(["--model", "test-model", "--no-jitter", "--events", "json"])
        .env("ANTHROPIC_API_KEY", "sk-ant-durable-test")
        .stdin(Stdio::null());
    cmd
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn without_restate_serve_exits_2_naming_the_address() {
    let server = fake_server(r#"{"turns": []}"#).await;
    // A port nobody listens on.
    let admin = format!("http://127.0.0.1:{}", free_port());
    let mut cmd = durable_serve(&server, 0, &admin);
    let out = tokio::task::spawn_blocking(move || {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("rebound runs")
    })
    .await
    .expect("joins");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&admin), "{stderr}");
    assert!(stderr.contains("no Restate admin API answered"), "{stderr}");
    assert!(!stderr.contains("sk-ant-durable-test"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_runs_continues_and_cancels_through_restate() {
    let Some(restate) = RestateServer::start("a_conversation_runs_through_restate") else {
        return;
    };
    let server = fake_server(
        r#"{"turns": [
            {"answer": {"text": "Hello from the first turn."}},
            {"answer": {"text": "And from the second."}},
            {"faults": [{"type": "http", "status": 529, "headers": {"retry-after": "60"}}],
             "answer": {"text": "Never heard: canceled first."}}
        ]}"#,
    )
    .await;
    let port = free_port();
    let traces = tempfile::tempdir().expect("temp dir");
    let mut child = durable_serve(&server, port, &restate.admin_url())
        .args(["--seed", "7", "--trace-dir"])
        .arg(traces.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("rebound durable serve starts");
    // The side channel's JSON events, line by line, as they come.
    let events = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
    let stdout = child.stdout.take().expect("stdout");
    let reader = {
        let events = Arc::clone(&events);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(event) = serde_json::from_str(&line) {
                    events.lock().expect("lock").push(event);
                }
            }
        })
    };
    let serve = Killed(child);
    let client = Client::new(&restate);
    // The registration is done once the service is known to Restate.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) = client.call("Agent/readme/conversation", None).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the endpoint never registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A run, and a second one continuing the same conversation.
    let (status, body) = client
        .call("Agent/readme/run", Some(r#"{"message": "Hi."}"#))
        .await;
    assert_eq!(status, 200, "{body}");
    let reply: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(reply["text"], "Hello from the first turn.");
    assert_eq!(reply["reason"]["model"], "end_turn", "{reply}");
    // A durable run is an ordinary run: it names its seed, its side channel starts with the
    // `start` event, and its trace replays as `rebound run`'s do.
    assert_eq!(reply["seed"], 7, "{reply}");
    let start = wait_for_event(&events, "start");
    assert_eq!(start["seed"], 7, "{start}");
    assert_eq!(events.lock().expect("lock")[0]["type"], "start");
    let written: Vec<_> = std::fs::read_dir(traces.path())
        .expect("the trace directory")
        .map(|e| e.expect("an entry").path())
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let name = written[0]
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    assert!(
        name.starts_with("readme-") && name.ends_with(".jsonl"),
        "{name}"
    );
    let header: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&written[0])
            .expect("the trace")
            .lines()
            .next()
            .expect("a header"),
    )
    .expect("JSON");
    assert_eq!(header["seed"], 7, "{header}");
    assert_eq!(header["meta"]["driver"], "rebound-durable", "{header}");
    let replayed = Command::new(BIN)
        .arg("replay")
        .arg(&written[0])
        .output()
        .expect("rebound replay runs");
    assert!(
        replayed.status.success(),
        "{}{}",
        String::from_utf8_lossy(&replayed.stdout),
        String::from_utf8_lossy(&replayed.stderr)
    );
    let (status, body) = client
        .call("Agent/readme/run", Some(r#"{"message": "Again."}"#))
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = client.call("Agent/readme/conversation", None).await;
    let conversation: Conversation = serde_json::from_str(&body).expect("a conversation");
    assert_eq!(conversation.len(), 4, "{conversation:?}");

    // A run waiting out a 60 s server delay is canceled a second into it: it ends at once
    // with 409, and the conversation keeps what it had (the user message, no answer).
    let invocation = client.send_run("readme", "Once more.").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.requests().len() < 3 {
        assert!(Instant::now() < deadline, "the third request never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let canceled_at = Instant::now();
    client.cancel(&invocation).await;
    let (status, body) = client.attach(&invocation, Duration::from_secs(30)).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        canceled_at.elapsed() < Duration::from_secs(20),
        "the cancel waited for the backoff"
    );
    // The caller and the `error` event both count the one request sent, no retry (it was
    // announced, never sent), and the second the run lasted, to the cancel.
    let error = wait_for_event(&events, "error");
    assert_eq!(error["kind"], "canceled", "{error}");
    assert_eq!(error["requests"], 1, "{error}");
    assert_eq!(error["retries"], 0, "{error}");
    let elapsed = error["duration_ms"].as_u64().unwrap_or_default();
    assert!((1_000..20_000).contains(&elapsed), "{error}");
    let failure = run_failure(&body).unwrap_or_else(|| panic!("not a run's failure: {body}"));
    assert_eq!(failure["kind"], "canceled", "{failure}");
    assert_eq!(failure["stats"]["requests"], 1, "{failure}");
    assert_eq!(failure["stats"]["retries"], 0, "{failure}");
    assert_eq!(failure["stats"]["elapsed_ms"], elapsed, "{failure}");
    assert_eq!(
        server.requests().len(),
        3,
        "nothing was sent after the cancel"
    );
    let (_, body) = client.call("Agent/readme/conversation", None).await;
    let conversation: Conversation = serde_json::from_str(&body).expect("a conversation");
    assert_eq!(conversation.len(), 5, "{conversation:?}");

    // An empty message is refused before anything runs.
    let (status, body) = client
        .call("Agent/readme/run", Some(r#"{"message": " "}"#))
        .await;
    assert_eq!(status, 400, "{body}");
    drop(serve);
    reader.join().expect("the reader ends with the endpoint");
}

/// The first side-channel event of type `kind`, waiting for it a few seconds.
fn wait_for_event(events: &Mutex<Vec<serde_json::Value>>, kind: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(event) = events
            .lock()
            .expect("lock")
            .iter()
            .find(|e| e["type"] == kind)
        {
            return event.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {kind} event: {:?}",
            events.lock().expect("lock")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
