//! The fallback chain end to end: an overloaded Anthropic primary, an OpenAI fallback.

use rebound_cli::scenario_tools::ScenarioTools;
use rebound_core::wire::parse_request;
use rebound_core::{MachineConfig, ProviderKind, RetryConfig, Role, TargetSpec};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::runner::{RunInput, Runner};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_tests::scenario;
use std::sync::Arc;

fn provider(kind: ProviderKind, server: &FakeServer, model: &str) -> Box<dyn Provider> {
    let mut config = HttpProviderConfig::new(kind, model, ApiKey::new("k"));
    config.base_url = server.base_url_for(kind);
    Box::new(HttpProvider::new(config).expect("valid provider"))
}

/// Fast retries over an Anthropic primary and an OpenAI fallback.
fn anthropic_then_openai() -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        .with_targets(vec![
            TargetSpec::new(ProviderKind::Anthropic, "claude-test").with_context_window(None),
            TargetSpec::new(ProviderKind::OpenAi, "gpt-test").with_context_window(None),
        ])
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

/// `first` fails its fourth request (after `turns`, played on it) with four 503s; the run
/// continues on `second`, a fresh healthy server. Returns the summary and what `second` got.
async fn continue_on(
    first: ProviderKind,
    second: ProviderKind,
    turns: &str,
) -> (
    Result<rebound_effects::runner::RunSummary, rebound_core::RunError>,
    Vec<rebound_sim::fake::RequestRecord>,
) {
    let outage = r#"{"faults": [{"type": "http", "status": 503}, {"type": "http", "status": 503},
                                {"type": "http", "status": 503}, {"type": "http", "status": 503}],
                     "answer": {"text": "never sent"}}"#;
    let script = scenario(&format!(r#"{{"turns": [{turns}, {outage}]}}"#));
    let primary = FakeServer::start(FakeServerConfig::new(script.clone(), 1))
        .await
        .expect("primary starts");
    let secondary = FakeServer::start(FakeServerConfig::healthy())
        .await
        .expect("fallback starts");
    let config = MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        .with_targets(vec![
            TargetSpec::new(first, "first").with_context_window(None),
            TargetSpec::new(second, "second").with_context_window(None),
        ]);
    let providers = vec![
        provider(first, &primary, "first"),
        provider(second, &secondary, "second"),
    ];
    let result = Runner::new(config, providers)
        .tools(Arc::new(ScenarioTools::new(Arc::new(script), 0.0)))
        .run(RunInput::text("Read the files."))
        .await;
    let received = secondary.requests();
    primary.shutdown().await;
    secondary.shutdown().await;
    (result, received)
}

/// The `tool_use` ids and `tool_use_id`s of an Anthropic request body, in order.
fn anthropic_ids(body: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let (mut uses, mut results) = (Vec::new(), Vec::new());
    for m in body["messages"].as_array().expect("messages") {
        for b in m["content"].as_array().into_iter().flatten() {
            match b["type"].as_str() {
                Some("tool_use") => uses.push(b["id"].as_str().expect("id").to_owned()),
                Some("tool_result") => {
                    results.push(b["tool_use_id"].as_str().expect("id").to_owned());
                }
                _ => {}
            }
        }
    }
    (uses, results)
}

fn in_anthropic_pattern(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[tokio::test]
async fn tool_ids_minted_by_an_openai_compatible_server_reach_anthropic_in_its_pattern() {
    // Kimi-style ids, as OpenAI-compatible servers mint them.
    let turns = r#"{"answer": {"tool_calls": [
                      {"id": "functions.read:0", "name": "read", "input": {"path": "a"}},
                      {"id": "functions.read:1", "name": "read", "input": {"path": "b"}}]}}"#;
    let (result, received) =
        continue_on(ProviderKind::OpenAi, ProviderKind::Anthropic, turns).await;
    let summary = result.expect("the Anthropic fallback finishes the run");
    assert_eq!(summary.stats.fallbacks, 1);
    let body = received[0].body.clone().expect("JSON body");
    let (uses, results) = anthropic_ids(&body);
    assert_eq!(uses.len(), 2, "{body}");
    assert!(uses.iter().all(|id| in_anthropic_pattern(id)), "{uses:?}");
    assert_ne!(uses[0], uses[1]);
    assert_eq!(
        uses, results,
        "each result answers its call under the same id"
    );
    // The conversation keeps the ids the server minted.
    let kept: Vec<String> = summary.conversation.messages()[1]
        .tool_uses()
        .map(|(id, _, _)| id.to_owned())
        .collect();
    assert_eq!(kept, ["functions.read:0", "functions.read:1"]);
}

#[tokio::test]
async fn a_tool_id_a_server_reuses_in_every_turn_is_unique_in_an_anthropic_request() {
    let call =
        r#"{"answer": {"tool_calls": [{"id": "call_0", "name": "read", "input": {"path": "a"}}]}}"#;
    let (result, received) = continue_on(
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        &[call, call].join(","),
    )
    .await;
    result.expect("the Anthropic fallback finishes the run");
    let (uses, results) = anthropic_ids(&received[0].body.clone().expect("JSON body"));
    assert_eq!(uses.len(), 2);
    assert_ne!(
        uses[0], uses[1],
        "Anthropic refuses a tool_use id used twice"
    );
    assert!(uses.iter().all(|id| in_anthropic_pattern(id)), "{uses:?}");
    assert_eq!(uses, results);
}

#[tokio::test]
async fn whitespace_only_text_from_another_model_is_not_sent_to_anthropic() {
    // Compatible servers often stream "\n\n" before a tool call.
    let turns = r#"{"answer": {"text": "\n\n",
                   "tool_calls": [{"name": "read", "input": {"path": "a"}}]}}"#;
    let (result, received) =
        continue_on(ProviderKind::OpenAi, ProviderKind::Anthropic, turns).await;
    let summary = result.expect("the Anthropic fallback finishes the run");
    // The conversation keeps what the model said; the request leaves the blank text out.
    assert_eq!(summary.conversation.messages()[1].text(), "\n\n");
    let body = received[0].body.clone().expect("JSON body");
    let assistant = &body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert!(
        assistant["content"]
            .as_array()
            .expect("blocks")
            .iter()
            .all(|b| b["type"] != "text"),
        "{assistant}"
    );
}

#[tokio::test]
async fn tool_call_ids_longer_than_openai_accepts_are_shortened_for_openai() {
    // vLLM mints `chatcmpl-tool-` and 32 hex digits: 46 characters; OpenAI takes 40.
    let long = "chatcmpl-tool-8d6f0a3c2b1e4f5a9c7d6e5f4a3b2c1d";
    let turns = format!(
        r#"{{"answer": {{"tool_calls": [{{"id": "{long}", "name": "read", "input": {{"path": "a"}}}}]}}}}"#
    );
    let (result, received) = continue_on(ProviderKind::OpenAi, ProviderKind::OpenAi, &turns).await;
    let summary = result.expect("the second OpenAI target finishes the run");
    let body = received[0].body.clone().expect("JSON body");
    let messages = body["messages"].as_array().expect("messages");
    let call = messages
        .iter()
        .find_map(|m| m["tool_calls"][0]["id"].as_str())
        .expect("a tool call");
    let answer = messages
        .iter()
        .find_map(|m| m["tool_call_id"].as_str())
        .expect("a tool message");
    assert!(call.chars().count() <= 40, "{call}");
    assert_eq!(call, answer);
    let kept: Vec<String> = summary.conversation.messages()[1]
        .tool_uses()
        .map(|(id, _, _)| id.to_owned())
        .collect();
    assert_eq!(kept, [long]);
}
