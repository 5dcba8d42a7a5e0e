//! The fallback chain end to end: an overloaded Anthropic primary, an OpenAI fallback.

use rebound_core::wire::parse_request;
use rebound_core::{MachineConfig, ProviderKind, RetryConfig, Role, TargetSpec};
use rebound_effects::fake::{FakeServer, FakeServerConfig};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::runner::{RunInput, Runner};
use rebound_effects::tools::scripted::ScenarioTools;
use rebound_tests::scenario;
use std::sync::Arc;

fn provider(kind: ProviderKind, server: &FakeServer, model: &str) -> Box<dyn Provider> {
    let mut config = HttpProviderConfig::new(kind, model, ApiKey::new("k"));
    config.base_url = server.base_url_for(kind);
    Box::new(HttpProvider::new(config).expect("valid provider"))
}

/// Fast retries over an Anthropic primary and an OpenAI fallback.
fn anthropic_then_openai() -> MachineConfig {
    MachineConfig {
        retry: RetryConfig {
            initial_delay_ms: 10,
            jitter: false,
            ..RetryConfig::default()
        },
        targets: vec![
            TargetSpec {
                provider: ProviderKind::Anthropic,
                model: "claude-test".into(),
                context_window: None,
            },
            TargetSpec {
                provider: ProviderKind::OpenAi,
                model: "gpt-test".into(),
                context_window: None,
            },
        ],
        ..MachineConfig::default()
    }
}

#[tokio::test]
async fn an_overloaded_primary_falls_back_to_openai_with_tool_results_in_openai_shape() {
    let overloaded = scenario(
        r#"{"random": {"outages": [{"from_ms": 0, "until_ms": 600000,
                                     "fault": {"type": "http", "status": 529}}]}}"#,
    );
    let fallback = scenario(
        r#"{"turns": [
             {"answer": {"text": "Reading it.",
                         "tool_calls": [{"name": "read", "input": {"path": "src/lib.rs"},
                                         "outcome": {"type": "ok", "text": "pub fn f() {}"}}]}},
             {"answer": {"text": "It defines f."}}]}"#,
    );
    let primary = FakeServer::start(FakeServerConfig::new(overloaded, 1))
        .await
        .expect("primary starts");
    let secondary = FakeServer::start(FakeServerConfig::new(fallback.clone(), 1))
        .await
        .expect("fallback starts");
    let config = anthropic_then_openai();
    let providers = vec![
        provider(ProviderKind::Anthropic, &primary, "claude-test"),
        provider(ProviderKind::OpenAi, &secondary, "gpt-test"),
    ];
    let mut runner =
        Runner::new(config, providers).tools(Arc::new(ScenarioTools::new(Arc::new(fallback), 0.0)));
    let summary = runner
        .run(RunInput::text("What does src/lib.rs define?"))
        .await
        .expect("the fallback finishes the run");
    assert_eq!(summary.stats.fallbacks, 1);
    // The primary got exactly its attempt budget, and (sticky policy) nothing after the
    // fallback, not even for the second turn.
    assert_eq!(primary.requests().len(), 4);
    let second = secondary.requests();
    assert_eq!(second.len(), 2);
    // One assistant message per turn in the conversation: no trace of the failed attempts.
    let roles: Vec<Role> = summary
        .conversation
        .messages()
        .iter()
        .map(|m| m.role)
        .collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
    // The second request on the fallback carries the tool result as an OpenAI `tool` message.
    let body = second[1].body.clone().expect("JSON body");
    let messages = body["messages"].as_array().expect("messages");
    let tool = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool message");
    assert_eq!(tool["content"], "pub fn f() {}");
    assert!(tool["tool_call_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
    let assistant = messages
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the assistant message");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read");
    let parsed = parse_request(
        ProviderKind::OpenAi,
        &serde_json::to_vec(&body).expect("serializes"),
    )
    .expect("a valid OpenAI request");
    assert_eq!(parsed.conversation.len(), 3);
    primary.shutdown().await;
    secondary.shutdown().await;
}

#[tokio::test]
async fn a_short_blip_does_not_burn_the_fallback() {
    let blip = scenario(
        r#"{"turns": [{"faults": [{"type": "http", "status": 529}, {"type": "http", "status": 529}],
                       "answer": {"text": "Fine."}}]}"#,
    );
    let primary = FakeServer::start(FakeServerConfig::new(blip, 1))
        .await
        .expect("primary starts");
    let secondary = FakeServer::start(FakeServerConfig::healthy())
        .await
        .expect("fallback starts");
    let config = anthropic_then_openai();
    let providers = vec![
        provider(ProviderKind::Anthropic, &primary, "claude-test"),
        provider(ProviderKind::OpenAi, &secondary, "gpt-test"),
    ];
    let summary = Runner::new(config, providers)
        .run(RunInput::text("hi"))
        .await
        .expect("the primary recovers");
    assert_eq!(summary.stats.fallbacks, 0);
    assert!(secondary.requests().is_empty());
    assert_eq!(primary.requests().len(), 3);
    primary.shutdown().await;
    secondary.shutdown().await;
}
