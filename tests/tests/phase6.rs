//! The spec's "Phase 6" list, end to end: the real tokio runner, over HTTP, against the fake
//! provider server on loopback, for every wire format (Anthropic, OpenAI Chat Completions,
//! OpenAI Responses). Every test also replays the trace the runner recorded in the
//! simulator, which must not diverge.

use rebound_core::wire::parse_request;
use rebound_core::{
    BatchOutcome, CallOutcome, HostFailureKind, ProviderKind, RunError, ToolCall, ToolFailure,
    ToolOutput, ToolSpec,
};
use rebound_effects::runner::ToolExecutor;
use rebound_effects::tools::{ToolContext, ToolSet, ToolSource};
use rebound_tests::{scenario, Play, Played, PROVIDERS};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The conversation the server received in request `index`.
fn received(played: &Played, provider: ProviderKind, index: usize) -> rebound_core::Conversation {
    let body = played.requests[index]
        .body
        .as_ref()
        .expect("requests carry JSON bodies");
    let bytes = serde_json::to_vec(body).expect("JSON serializes");
    parse_request(provider, &bytes)
        .expect("the runner sends valid requests")
        .conversation
}

const ONE_ANSWER: &str = r#"{"turns": [{"faults": FAULTS, "answer": {"text": "All done."}}]}"#;

fn one_answer(faults: &str) -> rebound_sim::Scenario {
    scenario(&ONE_ANSWER.replace("FAULTS", faults))
}

#[tokio::test]
async fn rate_limited_request_is_retried_and_succeeds_without_duplicate_messages() {
    for provider in PROVIDERS {
        let faulty =
            one_answer(r#"[{"type": "http", "status": 429, "headers": {"retry-after-ms": "30"}}]"#);
        let clean = faulty.without_faults();
        let played = Play::new(faulty, provider).run().await;
        let baseline = Play::new(clean, provider).run().await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        assert_eq!(played.requests.len(), 2, "{provider}");
        assert_eq!(
            played.conversation_without_owners(),
            baseline.conversation_without_owners(),
            "{provider}"
        );
        assert_eq!(
            played.conversation.len(),
            2,
            "{provider}: user + one assistant message"
        );
        assert_eq!(
            played.lines("retry"),
            ["retry attempt=2 kind=RateLimited delay=30"]
        );
        played.assert_trace_replays();
    }
}

#[tokio::test]
async fn server_error_notifies_before_the_delay_and_the_next_request() {
    for provider in PROVIDERS {
        let played = Play::new(one_answer(r#"[{"type": "http", "status": 500}]"#), provider)
            .run()
            .await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        let order: Vec<&str> = played
            .log
            .iter()
            .filter(|l| l.starts_with("request") || l.starts_with("retry"))
            .map(String::as_str)
            .collect();
        assert_eq!(
            order,
            [
                "request 0",
                "retry attempt=2 kind=ServerError delay=20",
                "request 1"
            ],
            "{provider}"
        );
        played.assert_trace_replays();
    }
}

#[tokio::test]
async fn auth_failure_is_not_retried() {
    for provider in PROVIDERS {
        let played = Play::new(one_answer(r#"[{"type": "http", "status": 401}]"#), provider)
            .run()
            .await;
        let Err(error) = &played.result else {
            panic!("{provider}: a 401 must fail the run")
        };
        assert_eq!(error.kind(), "auth_failed", "{provider}: {error}");
        assert_eq!(played.requests.len(), 1, "{provider}");
        assert!(played.lines("retry").is_empty());
        assert_eq!(
            played.conversation.len(),
            1,
            "{provider}: only the user message"
        );
        played.assert_trace_replays();
    }
}

#[tokio::test]
async fn context_overflow_compacts_once_and_retries_once() {
    for provider in PROVIDERS {
        let s = scenario(
            r#"{"history": {"turns": 6, "bytes": 4000},
                "turns": [{"faults": [{"type": "context_overflow"}], "answer": {"text": "Short now."}}]}"#,
        );
        let played = Play::new(s, provider).run().await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        assert_eq!(played.requests.len(), 2, "{provider}");
        assert_eq!(played.lines("compaction").len(), 1, "{provider}");
        let before = received(&played, provider, 0).approx_bytes();
        let after = received(&played, provider, 1).approx_bytes();
        assert!(
            after < before,
            "{provider}: the retry must be smaller ({after} vs {before})"
        );
        played.assert_trace_replays();

        let twice = scenario(
            r#"{"history": {"turns": 6, "bytes": 4000},
                "turns": [{"faults": [{"type": "context_overflow"}, {"type": "context_overflow"}],
                           "answer": {"text": "never"}}]}"#,
        );
        let played = Play::new(twice, provider).run().await;
        let Err(error) = &played.result else {
            panic!("{provider}: a second overflow must fail")
        };
        assert_eq!(error.kind(), "context_overflow");
        assert_eq!(
            played.requests.len(),
            2,
            "{provider}: one compaction, one retry"
        );
    }
}

#[tokio::test]
async fn unknown_tool_and_handler_error_become_error_results_and_the_model_continues() {
    for provider in PROVIDERS {
        let s = scenario(
            r#"{"turns": [
                 {"answer": {"tool_calls": [
                    {"name": "delete_all", "input": {}},
                    {"name": "read", "input": {"path": "nope.rs"},
                     "outcome": {"type": "error", "message": "file not found: nope.rs"}}]}},
                 {"answer": {"text": "Sorry, those failed."}}]}"#,
        );
        let played = Play::new(s, provider).run().await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        assert_eq!(played.requests.len(), 2);
        // Only the known tool ran; both got error results.
        assert_eq!(played.lines("tool_start"), ["tool_start read"]);
        assert_eq!(played.lines("tool_result").len(), 2);
        assert!(played
            .lines("tool_result")
            .iter()
            .all(|l| l.ends_with("error=true")));
        let second = received(&played, provider, 1);
        let results = second.messages()[2].tool_results().collect::<Vec<_>>();
        assert_eq!(
            results.len(),
            2,
            "{provider}: both results went to the model"
        );
        assert!(results[0].text().contains("unknown tool `delete_all`"));
        assert!(results[1].text().contains("file not found: nope.rs"));
        if provider == ProviderKind::Anthropic {
            assert!(
                results.iter().all(|r| r.is_error),
                "Anthropic carries is_error"
            );
        }
        played.assert_trace_replays();
    }
}

/// A tool source that fails one call and answers the other, or fails the whole batch.
struct FlakySource {
    whole_batch: bool,
}

#[rebound_effects::tools::async_trait]
impl ToolSource for FlakySource {
    fn name(&self) -> &str {
        "flaky"
    }
    fn specs(&self) -> Vec<ToolSpec> {
        ["remote_a", "remote_b"]
            .into_iter()
            .map(|n| ToolSpec {
                name: n.into(),
                description: format!("{n} on a remote server"),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }
    async fn run_batch(&self, calls: Vec<ToolCall>, _ctx: ToolContext) -> BatchOutcome {
        if self.whole_batch {
            return BatchOutcome::WholeBatch(ToolFailure::model("the tool server exited"));
        }
        BatchOutcome::PerCall(
            calls
                .into_iter()
                .map(|c| CallOutcome {
                    result: if c.name == "remote_a" {
                        Err(ToolFailure::model("remote_a: invalid params"))
                    } else {
                        Ok(ToolOutput::text("remote_b ok"))
                    },
                    tool_use_id: c.id,
                })
                .collect(),
        )
    }
}

#[tokio::test]
async fn tool_source_per_call_and_whole_batch_errors_become_per_call_results() {
    for (whole_batch, expected) in [(false, [true, false]), (true, [true, true])] {
        for provider in PROVIDERS {
            let s = scenario(
                r#"{"tools": [{"name": "remote_a"}, {"name": "remote_b"}],
                    "turns": [{"answer": {"tool_calls": [{"name": "remote_a", "input": {}},
                                                         {"name": "remote_b", "input": {}}]}},
                              {"answer": {"text": "ok"}}]}"#,
            );
            let set = ToolSet::builder()
                .source(FlakySource { whole_batch })
                .build()
                .expect("valid tool set");
            let mut play = Play::new(s, provider);
            play.tools = Some(Arc::new(set) as Arc<dyn ToolExecutor>);
            let played = play.run().await;
            assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
            let flags: Vec<bool> = played.conversation.messages()[2]
                .tool_results()
                .map(|r| r.is_error)
                .collect();
            assert_eq!(flags, expected, "{provider}, whole batch: {whole_batch}");
            played.assert_trace_replays();
        }
    }
}

#[tokio::test]
async fn cancel_during_a_long_backoff_fails_promptly_without_another_request() {
    for provider in PROVIDERS {
        let mut play = Play::new(one_answer(r#"[{"type": "http", "status": 529}]"#), provider);
        play.config.retry.initial_delay_ms = 300_000;
        play.config.retry.max_delay_ms = 300_000;
        play.cancel_after = Some(Duration::from_millis(300));
        let played = play.run().await;
        assert_eq!(
            played.result.as_ref().err(),
            Some(&RunError::Canceled),
            "{provider}"
        );
        assert_eq!(
            played.requests.len(),
            1,
            "{provider}: nothing is sent after cancel"
        );
        assert_eq!(
            played.conversation.len(),
            1,
            "{provider}: no partial message"
        );
        played.assert_trace_replays();
    }
}

#[tokio::test]
async fn out_of_memory_in_a_tool_fails_the_run_without_a_tool_result() {
    for provider in PROVIDERS {
        let s = scenario(
            r#"{"turns": [{"answer": {"tool_calls": [{"name": "read", "input": {},
                 "outcome": {"type": "host", "kind": "out_of_memory", "message": "alloc failed"}}]}}]}"#,
        );
        let played = Play::new(s, provider).run().await;
        match &played.result {
            Err(RunError::Host { failure }) => {
                assert_eq!(failure.kind, HostFailureKind::OutOfMemory);
            }
            other => panic!("{provider}: {other:?}"),
        }
        assert!(played.lines("tool_result").is_empty(), "{provider}");
        assert_eq!(played.requests.len(), 1, "{provider}");
        played.assert_trace_replays();
    }
}

#[tokio::test]
async fn a_stream_cut_mid_message_is_retried_and_the_conversation_equals_the_fault_free_one() {
    for provider in PROVIDERS {
        let faulty = scenario(
            r#"{"turns": [
                 {"faults": [{"type": "stream_cut", "after_events": 4}],
                  "answer": {"text": "Reading the file now, bit by bit, so the stream has many events.",
                             "tool_calls": [{"name": "read", "input": {"path": "src/lib.rs"}}]}},
                 {"faults": [{"type": "stream_cut_bytes", "after_bytes": 300}],
                  "answer": {"text": "Everything is fine."}}]}"#,
        );
        let clean = faulty.without_faults();
        let played = Play::new(faulty, provider).run().await;
        let baseline = Play::new(clean, provider).run().await;
        assert!(played.result.is_ok(), "{provider}: {:?}", played.result);
        assert_eq!(played.requests.len(), 4, "{provider}");
        assert_eq!(
            played.conversation_without_owners(),
            baseline.conversation_without_owners(),
            "{provider}"
        );
        assert_eq!(
            played
                .lines("retry")
                .iter()
                .filter(|l| l.contains("StreamMalformed"))
                .count(),
            2,
            "{provider}: {:?}",
            played.log
        );
        played.assert_trace_replays();
    }
}
