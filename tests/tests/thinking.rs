//! Anthropic extended thinking end to end: the real runner over HTTP against fake Messages
//! servers on 127.0.0.1 that think as Claude does (each answer starts with a `thinking` block
//! signed for the server's organisation and the request's key, plus a `redacted_thinking`
//! block when asked with Anthropic's test string) and refuse what the API refuses: thinking
//! signed for another key, and — with thinking on — a tool loop whose last assistant turn
//! does not start with its thinking.
//!
//! Signed and redacted thinking go back to the target that produced them, verbatim; a
//! fallback to another key in the middle of a tool loop sends none of them, and that request
//! goes without thinking (as the API's own 400 advises) instead of failing.

use rebound_cli::scenario_tools::ScenarioTools;
use rebound_core::wire::RequestOptions;
use rebound_core::{
    ContentBlock, Conversation, MachineConfig, ProviderKind, RetryConfig, TargetSpec,
};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::runner::{RunInput, Runner};
use rebound_sim::fake::{
    FakeServer, FakeServerConfig, Outcome, RequestRecord, REDACTED_THINKING_TRIGGER,
};
use rebound_tests::scenario;
use serde_json::{json, Value};
use std::sync::Arc;

const A: ProviderKind = ProviderKind::Anthropic;

/// A tool call, then (on the same server) a failure that hands the turn over, then text.
const READ_THEN_OUTAGE: &str = r#"{"turns": [
    {"answer": {"text": "Reading it.",
                "tool_calls": [{"name": "read", "input": {"path": "a.rs"},
                                "outcome": {"type": "ok", "text": "pub fn f() {}"}}]}},
    {"faults": [{"type": "http", "status": 529}], "answer": {"text": "Done reading."}}]}"#;

/// A tool call, then text.
const READ: &str = r#"{"turns": [
    {"answer": {"text": "Reading it.",
                "tool_calls": [{"name": "read", "input": {"path": "a.rs"},
                                "outcome": {"type": "ok", "text": "pub fn f() {}"}}]}},
    {"answer": {"text": "Done reading."}}]}"#;

async fn server(script: &str, organization: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::new(scenario(script), 1).with_organization(organization))
        .await
        .expect("starts")
}

fn thinking_provider(server: &FakeServer, key: &str) -> Box<dyn Provider> {
    let config = HttpProviderConfig::new(A, "claude-test", ApiKey::new(key))
        .with_base_url(server.base_url())
        .with_options(RequestOptions::default().with_thinking_budget(1024));
    Box::new(HttpProvider::new(config).expect("valid provider"))
}

/// One attempt per target, no waiting: a target that fails hands over at once.
fn config(targets: usize) -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_max_attempts(1)
                .with_initial_delay_ms(1)
                .with_jitter(false),
        )
        .with_targets(vec![TargetSpec::new(A, "claude-test"); targets])
}

fn tools(server: &FakeServer) -> Arc<ScenarioTools> {
    Arc::new(ScenarioTools::new(Arc::new(server.scenario().clone()), 0.0))
}

fn body(record: &RequestRecord) -> &Value {
    record.body.as_ref().expect("a JSON body")
}

/// The types of the blocks of every assistant message a request carried.
fn assistant_blocks(record: &RequestRecord) -> Vec<Vec<String>> {
    body(record)["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            m["content"]
                .as_array()
                .expect("blocks")
                .iter()
                .map(|b| b["type"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .collect()
}

fn thinking_blocks(conversation: &Conversation) -> Vec<&ContentBlock> {
    conversation
        .messages()
        .iter()
        .flat_map(|m| m.content.iter())
        .filter(|b| b.is_owned_reasoning())
        .collect()
}

#[tokio::test]
async fn a_tool_loop_passes_signed_and_redacted_thinking_back_verbatim_to_its_producer() {
    let fake = server(READ, "org-one").await;
    let mut runner =
        Runner::new(config(1), vec![thinking_provider(&fake, "sk-one")]).tools(tools(&fake));
    let prompt = format!("Read a.rs. {REDACTED_THINKING_TRIGGER}");
    let summary = runner.run(RunInput::text(prompt)).await.expect("answered");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(requests
        .iter()
        .all(|r| matches!(r.outcome, Outcome::Answered { .. })));
    assert_eq!(
        body(&requests[0])["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    // The tool loop's request carries the turn's thinking first, both blocks, as received.
    assert_eq!(body(&requests[1])["thinking"]["type"], "enabled");
    assert_eq!(
        assistant_blocks(&requests[1]),
        vec![vec!["thinking", "redacted_thinking", "text", "tool_use"]]
    );
    let kept = thinking_blocks(&summary.conversation);
    // The first answer's two blocks, then the second's thinking (the test string is no
    // longer the last user message: nothing redacted).
    assert_eq!(kept.len(), 3, "{kept:#?}");
    assert!(matches!(kept[1], ContentBlock::RedactedThinking { .. }));
    let sent = &body(&requests[1])["messages"][1]["content"];
    match (kept[0], kept[1]) {
        (ContentBlock::Thinking { signature, .. }, ContentBlock::RedactedThinking { data, .. }) => {
            assert_eq!(sent[0]["signature"], signature.as_str());
            assert_eq!(sent[1]["data"], data.as_str());
        }
        other => panic!("{other:?}"),
    }
    assert!(kept.iter().all(|b| b.owner().is_some()));
    fake.shutdown().await;
}

#[tokio::test]
async fn a_fallback_to_another_key_mid_tool_loop_goes_without_the_first_keys_thinking() {
    let first = server(READ_THEN_OUTAGE, "org-first").await;
    // The fallback's script starts where the turn is: the answer after the tool result.
    let second = server(
        r#"{"turns": [{"answer": {"text": "Done reading."}}]}"#,
        "org-second",
    )
    .await;
    let mut runner = Runner::new(
        config(2),
        vec![
            thinking_provider(&first, "sk-first"),
            thinking_provider(&second, "sk-second"),
        ],
    )
    .tools(tools(&first));
    let summary = runner
        .run(RunInput::text("Read a.rs."))
        .await
        .expect("the fallback answers");
    assert_eq!(summary.stats.fallbacks, 1);
    assert_eq!(summary.stats.retries, 0, "nothing refused, nothing retried");
    let requests = second.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert!(
        matches!(requests[0].outcome, Outcome::Answered { .. }),
        "{:?}",
        requests[0].outcome
    );
    // None of the first key's thinking, and so no thinking for this request: the API
    // requires the turn to start with thinking that cannot go to this key.
    assert_eq!(
        assistant_blocks(&requests[0]),
        vec![vec!["text", "tool_use"]]
    );
    assert_eq!(body(&requests[0]).get("thinking"), None);
    // The conversation keeps the first key's thinking; the second answered without any.
    let kept = thinking_blocks(&summary.conversation);
    assert_eq!(kept.len(), 1, "{kept:#?}");
    assert!(kept[0].owner().is_some());
    first.shutdown().await;
    second.shutdown().await;
}

#[tokio::test]
async fn thinking_of_unknown_owner_refused_mid_tool_loop_costs_one_announced_retry() {
    let first = server(READ, "org-one").await;
    let mut runner =
        Runner::new(config(1), vec![thinking_provider(&first, "sk-old")]).tools(tools(&first));
    // Stop after the tool call: the next request would answer it.
    let conversation = {
        runner
            .run(RunInput::text("Read a.rs."))
            .await
            .expect("answered");
        let mut messages = runner.current_conversation().messages().to_vec();
        messages.truncate(3);
        // As a session written before owners were recorded reads.
        let messages: Vec<_> = messages
            .into_iter()
            .map(|m| {
                let mut m = (*m).clone();
                for b in &mut m.content {
                    if let ContentBlock::Thinking { owner, .. } = b {
                        *owner = None;
                    }
                }
                m
            })
            .collect();
        Conversation::from(messages)
    };
    assert!(conversation.messages()[2]
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolResult(_))));
    // The same server under another key: the unknown thinking goes (it may be ours), the
    // API refuses it, and the one retry without reasoning also goes without thinking.
    let second = server(
        r#"{"turns": [{"answer": {"text": "Done reading."}}]}"#,
        "org-one",
    )
    .await;
    let mut runner = Runner::new(config(1), vec![thinking_provider(&second, "sk-new")])
        .conversation(conversation);
    let summary = runner
        .run(RunInput::Resume)
        .await
        .expect("answered after one retry");
    assert_eq!(summary.stats.retries, 1);
    let requests = second.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    match &requests[0].outcome {
        Outcome::Rejected {
            status: 400,
            reason,
        } => {
            assert!(
                reason.contains("Invalid `signature` in `thinking` block"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        assistant_blocks(&requests[1]),
        vec![vec!["text", "tool_use"]]
    );
    assert_eq!(body(&requests[1]).get("thinking"), None);
    assert!(matches!(requests[1].outcome, Outcome::Answered { .. }));
    first.shutdown().await;
    second.shutdown().await;
}
