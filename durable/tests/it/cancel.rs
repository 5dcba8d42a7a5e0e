//! What a durable run keeps when it is canceled, and what a caller gets when a run fails,
//! against a real Restate server: a cancel during a tool call that takes its time after its
//! side effect, a cancel in the middle of a streamed answer, and runs failing on a refused
//! API key and on spent retries.
//!
//! The endpoint runs in this test's process (nothing here kills it); the provider is the
//! fake provider of `rebound-sim` on loopback.

use crate::restate;

use rebound_core::{
    BatchOutcome, CallOutcome, Conversation, MachineConfig, ProviderKind, RetryConfig, Role,
    ToolCall, ToolOutput, ToolSpec,
};
use rebound_durable::{DurableAgent, RunFailure};
use rebound_effects::provider::{ApiKey, BoxFuture, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::ToolExecutor;
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::scenario::Scenario;
use restate::{run_failure, Client, RestateServer};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const KEY: &str = "sk-ant-durable-cancel-test-secret";

/// How long the `record` tool takes after its side effect.
const AFTER_EFFECT: Duration = Duration::from_millis(1_500);

/// A tool with a side effect that then takes its time: records the call's id at once, then
/// answers `AFTER_EFFECT` later.
struct SlowRecord(Arc<Mutex<Vec<String>>>);

impl ToolExecutor for SlowRecord {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "record".into(),
            description: "Records a note.".into(),
            input_schema: json!({"type": "object", "properties": {"note": {"type": "string"}}}),
        }]
    }

    fn run_batch<'a>(
        &'a self,
        calls: Vec<ToolCall>,
        _cancel: &'a tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let mut outcomes = Vec::new();
            for call in calls {
                self.0.lock().expect("lock").push(call.id.clone());
                tokio::time::sleep(AFTER_EFFECT).await;
                outcomes.push(CallOutcome::ok(&call.id, ToolOutput::text("recorded")));
            }
            BatchOutcome::PerCall(outcomes)
        })
    }
}

async fn fake_provider(scenario: serde_json::Value) -> FakeServer {
    let scenario = Scenario::from_json(&scenario.to_string()).expect("a valid scenario");
    FakeServer::start(FakeServerConfig::new(scenario, 7))
        .await
        .expect("the fake provider starts")
}

/// Serves an agent on the fake provider with `tools`, registered with `restate`.
async fn endpoint(
    restate: &RestateServer,
    fake: &FakeServer,
    tools: Option<Arc<dyn ToolExecutor>>,
) -> tokio::task::JoinHandle<()> {
    let config = HttpProviderConfig::new(
        ProviderKind::Anthropic,
        "claude-sonnet-4-5",
        ApiKey::new(KEY),
    )
    .with_base_url(fake.base_url());
    let provider = HttpProvider::new(config).expect("a provider");
    let machine = MachineConfig::default().with_retry(
        RetryConfig::default()
            .with_jitter(false)
            .with_max_attempts(2)
            .with_initial_delay_ms(50),
    );
    let mut agent = DurableAgent::new(machine, vec![Box::new(provider)]);
    if let Some(tools) = tools {
        agent = agent.tools(tools);
    }
    crate::serve_registered(restate, agent).await
}

async fn conversation(client: &Client, key: &str) -> Conversation {
    let (status, body) = client
        .call(&format!("Agent/{key}/conversation"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("a conversation")
}

/// The `RunFailure` of a failed run's answer.
fn failure(body: &str) -> RunFailure {
    let value = run_failure(body).unwrap_or_else(|| panic!("not a run's failure: {body}"));
    serde_json::from_value(value).expect("a RunFailure")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_tool_call_keeps_its_result_and_runs_nothing_after_it() {
    let Some(restate) = RestateServer::start("a_cancel_during_a_tool_call") else {
        return;
    };
    let fake = fake_provider(json!({
        "provider": "anthropic",
        "tools": [{"name": "record", "description": "Records a note."}],
        "turns": [
            {"answer": {"tool_calls": [
                {"id": "toolu_1", "name": "record", "input": {"note": "one"}},
                {"id": "toolu_2", "name": "record", "input": {"note": "two"}}
            ]}},
            {"answer": {"text": "Both recorded."}}
        ]
    }))
    .await;
    let records = Arc::new(Mutex::new(Vec::new()));
    let server = endpoint(&restate, &fake, Some(Arc::new(SlowRecord(records.clone())))).await;
    let client = Client::new(&restate);
    let invocation = client.send_run("tools", "Record two notes.").await;

    // The first call had its effect and takes its time: cancel now.
    let deadline = Instant::now() + Duration::from_secs(30);
    while records.lock().expect("lock").is_empty() {
        assert!(Instant::now() < deadline, "the tool never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client.cancel(&invocation).await;
    let (status, body) = client.attach(&invocation, Duration::from_secs(30)).await;
    assert_eq!(status, 409, "{body}");
    // The call that finished keeps its result; the one after it never ran, and says so.
    assert_eq!(*records.lock().expect("lock"), ["toolu_1"]);
    assert_eq!(
        fake.requests().len(),
        1,
        "nothing was sent after the cancel"
    );
    let saved = conversation(&client, "tools").await;
    assert_eq!(saved.len(), 3, "{saved:?}");
    let results: Vec<_> = saved.messages()[2].tool_results().collect();
    assert_eq!(results.len(), 2, "{saved:?}");
    assert_eq!(results[0].tool_use_id, "toolu_1");
    assert!(!results[0].is_error, "{saved:?}");
    assert_eq!(results[0].text(), "recorded");
    assert_eq!(results[1].tool_use_id, "toolu_2");
    assert!(results[1].is_error, "{saved:?}");
    assert!(results[1].text().contains("interrupted"), "{saved:?}");

    // The caller hears why, and how long the run lasted (to the moment the cancel took
    // effect, after the call).
    let failed = failure(&body);
    assert_eq!((failed.code, failed.kind.as_str()), (409, "canceled"));
    assert_eq!(failed.stats.retries, 0);
    assert_eq!(failed.stats.tool_calls, 2);
    assert!(
        failed.stats.elapsed_ms >= AFTER_EFFECT.as_millis() as u64,
        "the run lasted {} ms, its tool call alone {AFTER_EFFECT:?}",
        failed.stats.elapsed_ms
    );
    assert!(!body.contains(KEY), "{body}");

    // The next run goes on from there: the model hears the call finished.
    let (status, body) = client
        .call("Agent/tools/run", Some(r#"{"message": "Go on."}"#))
        .await;
    assert_eq!(status, 200, "{body}");
    let sent = fake.requests()[1].body.clone().expect("a JSON request");
    let answered = &sent["messages"][2]["content"][0];
    assert_eq!(answered["tool_use_id"], "toolu_1", "{sent}");
    assert_ne!(answered["is_error"], true, "{sent}");
    assert_eq!(
        *records.lock().expect("lock"),
        ["toolu_1"],
        "no call ran again"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_an_answer_streams_keeps_the_answer_once_complete() {
    let Some(restate) = RestateServer::start("a_cancel_while_an_answer_streams") else {
        return;
    };
    let answer = "This answer streams slowly, one event at a time, and is complete.";
    let fake = fake_provider(json!({
        "provider": "anthropic",
        "turns": [
            {"faults": [{"type": "slow_drip", "interval_ms": 150}], "answer": {"text": answer}}
        ]
    }))
    .await;
    let server = endpoint(&restate, &fake, None).await;
    let client = Client::new(&restate);
    let invocation = client.send_run("stream", "Answer slowly.").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.requests().is_empty() {
        assert!(Instant::now() < deadline, "the request never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Mid-stream: Restate lets the step end, and the answer is complete by then.
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.cancel(&invocation).await;
    let (status, body) = client.attach(&invocation, Duration::from_secs(30)).await;
    // The run's last answer completed before the cancel took effect: it finished.
    assert_eq!(status, 200, "{body}");
    let reply: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(reply["text"], answer, "{reply}");
    let saved = conversation(&client, "stream").await;
    assert_eq!(saved.len(), 2, "{saved:?}");
    assert_eq!(saved.messages()[1].role, Role::Assistant);
    assert_eq!(saved.messages()[1].text(), answer);
    assert_eq!(fake.requests().len(), 1);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_answers_its_typed_failure_with_a_status_that_says_which() {
    let Some(restate) = RestateServer::start("a_failed_run_answers_its_typed_failure") else {
        return;
    };
    // The first run's request is refused (401); the second run's two attempts find the
    // provider overloaded.
    let fake = fake_provider(json!({
        "provider": "anthropic",
        "turns": [
            {"faults": [
                {"type": "http", "status": 401},
                {"type": "http", "status": 529},
                {"type": "http", "status": 529}
            ], "answer": {"text": "Never heard."}}
        ]
    }))
    .await;
    let server = endpoint(&restate, &fake, None).await;
    let client = Client::new(&restate);

    let (status, body) = client
        .call("Agent/refused/run", Some(r#"{"message": "Hi."}"#))
        .await;
    assert_eq!(status, 502, "{body}");
    let refused = failure(&body);
    assert_eq!(refused.kind, "auth_failed", "{body}");
    assert_eq!((refused.status, refused.attempts), (Some(401), 1), "{body}");
    assert_eq!(refused.code, 502);
    assert!(!body.contains(KEY), "{body}");

    let (status, body) = client
        .call("Agent/overloaded/run", Some(r#"{"message": "Hi."}"#))
        .await;
    assert_eq!(status, 503, "{body}");
    let spent = failure(&body);
    assert_eq!(spent.kind, "unavailable", "{body}");
    assert_eq!((spent.status, spent.attempts), (Some(529), 2), "{body}");
    assert_eq!(
        (spent.stats.requests, spent.stats.retries),
        (2, 1),
        "{body}"
    );
    assert!(spent.message.contains("gave up after 2 attempts"), "{body}");
    assert!(!body.contains(KEY), "{body}");
    server.abort();
}
