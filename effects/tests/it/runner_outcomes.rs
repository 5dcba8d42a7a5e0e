//! How a run ends, and under which name: the runner against the fake provider on loopback,
//! with a cancel in the middle of a tool batch, a receiver that fails at the very end, a
//! conversation with nothing to send, a compactor that fails, and a provider whose caller
//! stops reading.

use rebound_core::wire::WireError;
use rebound_core::{
    BatchOutcome, CompactionError, ContentBlock, Conversation, FinishReason, GiveUp, HostFailure,
    HostFailureKind, MachineConfig, Message, ProviderKind, RetryConfig, Role, RunError, TargetSpec,
    ToolCall, ToolFailure, ToolSpec,
};
use rebound_effects::provider::{
    ApiKey, BoxFuture, HttpProvider, HttpProviderConfig, Provider, ProviderRequest, SendError,
};
use rebound_effects::receiver::{Receiver, ReceiverError};
use rebound_effects::runner::{
    Compactor, CompactorError, Persist, PersistError, RunInput, Runner, ToolExecutor,
};
use rebound_sim::fake::{FakeServer, FakeServerConfig, ScriptScope};
use rebound_sim::Scenario;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

fn scenario(json: &str) -> Scenario {
    Scenario::from_json(json).unwrap_or_else(|e| panic!("bad test scenario: {e}"))
}

async fn server(json: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::new(scenario(json), 1))
        .await
        .expect("fake server starts")
}

fn http(server: &FakeServer) -> HttpProvider {
    let mut config =
        HttpProviderConfig::new(ProviderKind::Anthropic, "claude-test", ApiKey::new("k"));
    config.base_url = server.base_url();
    HttpProvider::new(config).expect("valid provider")
}

fn config() -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        .with_targets(vec![TargetSpec::new(
            ProviderKind::Anthropic,
            "claude-test",
        )
        .with_context_window(None)])
}

fn runner(server: &FakeServer) -> Runner {
    Runner::new(config(), vec![Box::new(http(server))]).seed(1)
}

/// A `read` tool that waits for the cancel and then reports it, as a well-behaved tool does.
struct WaitsForCancel {
    started: Arc<Notify>,
}

impl ToolExecutor for WaitsForCancel {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "read".into(),
            description: "Reads a file.".into(),
            input_schema: serde_json::json!({"type": "object"}),
        }]
    }

    fn run_batch<'a>(
        &'a self,
        _calls: Vec<ToolCall>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome> {
        Box::pin(async move {
            self.started.notify_one();
            cancel.cancelled().await;
            BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure::new(
                HostFailureKind::Canceled,
                "the batch saw the cancel",
            )))
        })
    }
}

#[tokio::test]
async fn a_cancel_while_tools_run_always_ends_the_run_as_canceled() {
    const RUNS: usize = 40;
    let turn = r#"{"answer": {"tool_calls": [{"name": "read", "input": {"path": "a"}}]}}"#;
    let turns = vec![turn; RUNS].join(",");
    let s = server(&format!(r#"{{"turns": [{turns}]}}"#)).await;
    for run in 0..RUNS {
        let started = Arc::new(Notify::new());
        let tools = Arc::new(WaitsForCancel {
            started: Arc::clone(&started),
        });
        let mut runner = runner(&s).tools(tools);
        let cancel = runner.canceler();
        let (result, ()) = tokio::join!(runner.run(RunInput::text("read a")), async {
            started.notified().await;
            cancel.cancel();
        });
        assert_eq!(
            result.as_ref().err(),
            Some(&RunError::Canceled),
            "run {run}: {result:?}"
        );
    }
    assert_eq!(
        s.requests().len(),
        RUNS,
        "one request per run, none after a cancel"
    );
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_tools_run_keeps_the_results_of_the_calls_that_finished() {
    use rebound_effects::tools::{FnTool, ToolSet};
    let s = server(
        r#"{"turns": [{"answer": {"tool_calls": [
            {"id": "toolu_quick", "name": "quick", "input": {}},
            {"id": "toolu_stuck", "name": "stuck", "input": {}}
        ]}}]}"#,
    )
    .await;
    let spec = |name: &str| ToolSpec {
        name: name.into(),
        description: format!("The {name} tool."),
        input_schema: serde_json::json!({"type": "object"}),
    };
    let started = Arc::new(Notify::new());
    let stuck = {
        let started = Arc::clone(&started);
        FnTool::new(spec("stuck"), move |_, _| {
            let started = Arc::clone(&started);
            async move {
                started.notify_one();
                std::future::pending::<()>().await;
                Ok(rebound_core::ToolOutput::text("never"))
            }
        })
    };
    let quick = FnTool::new(spec("quick"), |_, _| async {
        Ok(rebound_core::ToolOutput::text("quick is done"))
    });
    let tools = ToolSet::builder()
        .tool(quick)
        .tool(stuck)
        .build()
        .expect("the tools");
    let mut runner = runner(&s).tools(Arc::new(tools));
    let cancel = runner.canceler();
    let (result, ()) = tokio::join!(runner.run(RunInput::text("run both")), async {
        started.notified().await;
        // `quick` answers at once: let its task end before the cancel.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        cancel.cancel();
    });
    assert_eq!(result.err(), Some(RunError::Canceled));
    let conversation = runner.current_conversation();
    assert_eq!(conversation.len(), 3, "{conversation:?}");
    let results: Vec<_> = conversation.messages()[2].tool_results().collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(
        (results[0].tool_use_id.as_str(), results[0].is_error),
        ("toolu_quick", false)
    );
    assert_eq!(results[0].text(), "quick is done");
    assert!(results[1].is_error, "{results:?}");
    assert!(results[1].text().contains("interrupted"), "{results:?}");
    assert_eq!(s.requests().len(), 1, "nothing is sent after the cancel");
    s.shutdown().await;
}

/// Fails `finished`; records every `error` call.
struct FailsWhenFinished {
    errors: Arc<Mutex<Vec<RunError>>>,
}

impl Receiver for FailsWhenFinished {
    fn finished(&mut self, _reason: &FinishReason, _turns: u32) -> Result<(), ReceiverError> {
        Err(ReceiverError::other("the terminal went away"))
    }

    fn error(&mut self, error: &RunError) {
        self.errors.lock().expect("lock").push(error.clone());
    }
}

#[tokio::test]
async fn a_receiver_failing_when_the_run_finishes_is_a_receiver_failure_it_is_told_about() {
    let s = server(r#"{"turns": [{"answer": {"text": "Hi."}}]}"#).await;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let mut runner = runner(&s).receiver(FailsWhenFinished {
        errors: Arc::clone(&errors),
    });
    let error = runner.run(RunInput::text("hi")).await.unwrap_err();
    match &error {
        RunError::Host { failure } => {
            assert_eq!(failure.kind, HostFailureKind::Receiver);
            assert!(
                failure.message.contains("the terminal went away"),
                "{failure}"
            );
        }
        other => panic!("not a receiver failure: {other:?}"),
    }
    assert_eq!(*errors.lock().expect("lock"), [error], "told exactly once");
    s.shutdown().await;
}

/// Saves the first message (the user's), fails on the next (the model's last answer).
struct FailsOnTheAnswer;

impl Persist for FailsOnTheAnswer {
    fn append<'a>(&'a self, message: &'a Message) -> BoxFuture<'a, Result<(), PersistError>> {
        let answer = message.role == Role::Assistant;
        Box::pin(async move {
            if answer {
                Err(PersistError::other("disk full"))
            } else {
                Ok(())
            }
        })
    }

    fn replace<'a>(&'a self, _: &'a Conversation) -> BoxFuture<'a, Result<(), PersistError>> {
        Box::pin(async { Ok(()) })
    }
}

#[tokio::test]
async fn a_session_store_failing_on_the_final_answer_is_a_session_store_failure() {
    let s = server(r#"{"turns": [{"answer": {"text": "Hi."}}]}"#).await;
    let errors = Arc::new(Mutex::new(Vec::new()));
    let error = runner(&s)
        .persist(FailsOnTheAnswer)
        .receiver(RecordsErrors {
            errors: Arc::clone(&errors),
        })
        .run(RunInput::text("hi"))
        .await
        .unwrap_err();
    match &error {
        RunError::Host { failure } => {
            assert_eq!(failure.kind, HostFailureKind::SessionStore);
            assert!(failure.message.contains("disk full"), "{failure}");
        }
        other => panic!("not a session store failure: {other:?}"),
    }
    assert_eq!(*errors.lock().expect("lock"), [error], "told exactly once");
    s.shutdown().await;
}

/// Records every `error` call.
struct RecordsErrors {
    errors: Arc<Mutex<Vec<RunError>>>,
}

impl Receiver for RecordsErrors {
    fn error(&mut self, error: &RunError) {
        self.errors.lock().expect("lock").push(error.clone());
    }
}

#[tokio::test]
async fn a_user_message_without_content_is_refused_and_nothing_is_sent() {
    let s = server(r#"{"turns": [{"answer": {"text": "Hi."}}]}"#).await;
    for content in [
        vec![],
        vec![ContentBlock::text("")],
        vec![ContentBlock::text(" \n\t")],
    ] {
        let error = runner(&s)
            .run(RunInput::User(content.clone()))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), "empty_user_message", "{content:?}: {error}");
    }
    assert!(s.requests().is_empty());
    s.shutdown().await;
}

#[tokio::test]
async fn a_loaded_conversation_with_nothing_to_send_fails_as_corrupt_without_a_request() {
    let s = server(r#"{"turns": [{"answer": {"text": "Hi."}}]}"#).await;
    // What `rebound run ""` used to save: a user message with an empty text.
    let session = Conversation::from(vec![Message {
        role: Role::User,
        content: vec![ContentBlock::text("")],
    }]);
    let error = runner(&s)
        .conversation(session)
        .run(RunInput::Resume)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), "invariant", "{error}");
    assert!(error.to_string().contains("cannot be sent"), "{error}");
    assert!(s.requests().is_empty(), "{:?}", s.requests());
    s.shutdown().await;
}

#[tokio::test]
async fn a_successful_json_body_larger_than_the_error_body_limit_is_read_whole() {
    // 1.5 MiB of text, more than the 1 MiB read of an error body.
    let text = "All work and no play makes Jack a dull boy. ".repeat(36_000);
    assert!(text.len() > 3 << 19);
    let answer = serde_json::json!({"turns": [{"answer": {"text": text}}]});
    let mut config = FakeServerConfig::new(scenario(&answer.to_string()), 1);
    config.ignore_stream = true;
    let s = FakeServer::start(config).await.expect("fake server starts");
    let conversation = Conversation::from(vec![Message::user_text("Write it out.")]);
    let mut sink = |_: rebound_core::wire::StreamDelta<&str>| true;
    let response = http(&s)
        .send(ProviderRequest::new(&conversation, &[]), &mut sink)
        .await
        .expect("a complete answer");
    assert_eq!(response.message.text(), text);
    assert_eq!(s.requests().len(), 1);
    s.shutdown().await;
}

#[tokio::test]
async fn a_conversation_that_breaks_tool_pairing_is_refused_before_sending_not_blamed_on_the_provider(
) {
    let s = server("{}").await;
    // A tool call nothing answers, then a user message: no request can carry it.
    let conversation = Conversation::from(vec![
        Message::user_text("read a"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_use(
                "toolu_1",
                "read",
                serde_json::json!({}),
            )],
        },
        Message::user_text("go on"),
    ]);
    let mut sink = |_: rebound_core::wire::StreamDelta<&str>| true;
    let error = http(&s)
        .send(ProviderRequest::new(&conversation, &[]), &mut sink)
        .await
        .unwrap_err();
    assert!(
        matches!(error, SendError::Request(WireError::Pairing(_))),
        "{error:?}"
    );
    assert!(s.requests().is_empty());
    s.shutdown().await;
}

#[tokio::test]
async fn a_caller_that_stops_reading_the_stream_is_not_a_provider_failure() {
    let s =
        server(r#"{"turns": [{"answer": {"text": "A long answer, streamed in pieces."}}]}"#).await;
    let conversation = Conversation::from(vec![Message::user_text("hi")]);
    let mut sink = |_: rebound_core::wire::StreamDelta<&str>| false;
    let error = http(&s)
        .send(ProviderRequest::new(&conversation, &[]), &mut sink)
        .await
        .unwrap_err();
    assert_eq!(error, SendError::Stopped);
    s.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_spawned_on_a_multi_threaded_runtime_each_finish_with_its_answer() {
    // `tokio::spawn` needs `Runner::run`'s future to be `Send`: this does not compile if it is
    // not. Several runs at once, with a retry each, so they cross await points on any worker.
    // One script for all eight: their conversations are the same ("hello") and run at once,
    // which the server cannot tell apart.
    let config = FakeServerConfig::new(
        scenario(
            r#"{"turns": [{"faults": [{"type": "http", "status": 529}],
                           "answer": {"text": "spawned"}}]}"#,
        ),
        1,
    )
    .with_script(ScriptScope::Shared);
    let s = FakeServer::start(config).await.expect("fake server starts");
    let runs: Vec<_> = (0..8)
        .map(|_| {
            let mut runner = runner(&s);
            tokio::spawn(async move { runner.run(RunInput::text("hello")).await })
        })
        .collect();
    for run in runs {
        let summary = run.await.expect("the task ends").expect("the run finishes");
        assert_eq!(
            summary.reason,
            FinishReason::Model(rebound_core::StopReason::EndTurn)
        );
        let last = summary.conversation.messages().last().expect("an answer");
        assert_eq!(last.role, Role::Assistant);
    }
    // The server's script is one for all: one 529, then answers.
    assert_eq!(s.requests().len(), 9);
    s.shutdown().await;
}

/// Makes the error a [`FailingCompactor`] fails with.
type MakeError = fn() -> CompactorError;

/// A compactor that always fails with the error it is given.
struct FailingCompactor(MakeError);

impl Compactor for FailingCompactor {
    fn compact<'a>(
        &'a self,
        _: &'a Conversation,
    ) -> BoxFuture<'a, Result<Conversation, CompactorError>> {
        let error = (self.0)();
        Box::pin(async move { Err(error) })
    }
}

#[tokio::test]
async fn a_compactor_failing_after_an_overflow_fails_the_run_with_its_message() {
    let cases: [(MakeError, &str); 2] = [
        (
            || CompactorError::other("the summarizer is down"),
            "the summarizer is down",
        ),
        (
            || {
                CompactorError::from(CompactionError::CannotShrink {
                    bytes: 10,
                    messages: 1,
                })
            },
            "compaction could not shrink the conversation (10 bytes in 1 messages)",
        ),
    ];
    for (error, message) in cases {
        let s = server(
            r#"{"turns": [{"faults": [{"type": "context_overflow"}], "answer": {"text": "never"}}]}"#,
        )
        .await;
        let error = runner(&s)
            .compactor(Arc::new(FailingCompactor(error)))
            .run(RunInput::text("hi"))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), "context_overflow", "{error}");
        match &error {
            RunError::Provider {
                reason: GiveUp::CompactionFailed { message: given },
                ..
            } => assert_eq!(given, message),
            other => panic!("not a failed compaction: {other:?}"),
        }
        assert_eq!(s.requests().len(), 1, "no retry without a compaction");
        s.shutdown().await;
    }
}

/// A cancel lasts, as `Runner::canceler` says: the run after it fails at once without a
/// request, until the runner gets a fresh handle; then the conversation goes on.
#[tokio::test]
async fn a_cancel_lasts_until_the_runner_gets_a_fresh_handle() {
    let s =
        server(r#"{"turns": [{"answer": {"text": "one"}}, {"answer": {"text": "two"}}]}"#).await;
    let mut r = runner(&s);
    assert!(r.run(RunInput::text("first")).await.is_ok());
    r.canceler().cancel();
    let late = r.run(RunInput::text("second")).await;
    assert!(matches!(late, Err(RunError::Canceled)), "{late:?}");
    assert_eq!(s.requests().len(), 1, "a canceled runner sends nothing");
    let mut r = r.cancel_handle(rebound_effects::runner::CancelHandle::new());
    let resumed = r.run(RunInput::text("second")).await;
    assert!(resumed.is_ok(), "{resumed:?}");
    assert_eq!(s.requests().len(), 2);
    s.shutdown().await;
}
