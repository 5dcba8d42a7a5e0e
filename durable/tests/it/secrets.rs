//! A secret a failing tool quotes, named to the durable agent: the model is sent the tool's
//! error with it masked, and neither the conversation nor Restate's journal holds it.

use crate::restate;

use rebound_core::{
    BatchOutcome, CallOutcome, Conversation, MachineConfig, ProviderKind, Secrets, ToolCall,
    ToolSpec,
};
use rebound_durable::DurableAgent;
use rebound_effects::provider::{ApiKey, BoxFuture, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::ToolExecutor;
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::scenario::Scenario;
use restate::{Client, RestateServer};
use serde_json::json;
use std::sync::Arc;

const TOKEN: &str = "deploy-token-5e6f7a8b";

/// A `deploy` tool whose every call fails quoting `TOKEN`.
struct LeakyDeploy;

impl ToolExecutor for LeakyDeploy {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "deploy".into(),
            description: "Deploys.".into(),
            input_schema: json!({"type": "object"}),
        }]
    }

    fn run_batch<'a>(
        &'a self,
        calls: Vec<ToolCall>,
        _cancel: &'a tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome> {
        Box::pin(async move {
            calls
                .iter()
                .map(|c| CallOutcome::model_error(&c.id, format!("token {TOKEN} expired")))
                .collect()
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_named_to_the_agent_reaches_neither_the_model_nor_the_journal() {
    let Some(restate) = RestateServer::start("a_secret_named_to_the_agent") else {
        return;
    };
    let scenario = Scenario::from_json(
        &json!({
            "provider": "anthropic",
            "tools": [{"name": "deploy", "description": "Deploys."}],
            "turns": [
                {"answer": {"tool_calls": [{"id": "toolu_1", "name": "deploy", "input": {}}]}},
                {"answer": {"text": "The token expired."}}
            ]
        })
        .to_string(),
    )
    .expect("a scenario");
    let fake = FakeServer::start(FakeServerConfig::new(scenario, 7))
        .await
        .expect("the fake provider starts");
    let config = HttpProviderConfig::new(ProviderKind::Anthropic, "claude-test", ApiKey::new("k"))
        .with_base_url(fake.base_url());
    let provider = HttpProvider::new(config).expect("a provider");
    let agent = DurableAgent::new(MachineConfig::default(), vec![Box::new(provider)])
        .tools(Arc::new(LeakyDeploy))
        .secrets(Secrets::new([TOKEN]).expect("long enough"));
    let server = crate::serve_registered(&restate, agent).await;
    let client = Client::new(&restate);

    let (status, reply) = client
        .call("Agent/leaky/run", Some(r#"{"message": "Deploy."}"#))
        .await;
    assert_eq!(status, 200, "{reply}");
    let (status, body) = client.call("Agent/leaky/conversation", None).await;
    assert_eq!(status, 200, "{body}");
    let conversation: Conversation = serde_json::from_str(&body).expect("a conversation");
    let result = conversation.messages()[2]
        .tool_results()
        .next()
        .expect("the tool's result")
        .text();
    assert!(result.contains("token *** expired"), "{result}");
    let sent: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r.body.as_ref().map(ToString::to_string).unwrap_or_default())
        .collect();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].contains("token *** expired"), "{}", sent[1]);
    for text in [&reply, &body, &sent[0], &sent[1]] {
        assert!(!text.contains(TOKEN), "{text}");
    }
    // Every journal entry's bytes (hex in the introspection table): the tool step's outcome
    // is among them, masked.
    let rows = client.query("SELECT raw FROM sys_journal").await;
    let journal: Vec<u8> = rows
        .iter()
        .filter_map(|r| r["raw"].as_str())
        .flat_map(|hex| {
            (0..hex.len() / 2)
                .filter_map(move |i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        })
        .collect();
    let journal = String::from_utf8_lossy(&journal);
    assert!(journal.contains("token *** expired"), "{journal}");
    assert!(!journal.contains(TOKEN), "{journal}");
    server.abort();
}
