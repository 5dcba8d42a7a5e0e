//! A conversation moves across all five wire formats with every tool call answered: begun on
//! Anthropic, continued on Gemini, Bedrock, the Responses API and Chat Completions, and back
//! on Anthropic, each run the real runner over HTTP against the fake server; then a fallback
//! chain Anthropic → Gemini → Bedrock carries the whole conversation to the target that
//! answers. Each server reads what it received with core's `parse_request`, so "answered"
//! means the request a real API would have checked.

use rebound_cli::scenario_tools::ScenarioTools;
use rebound_core::wire::parse_request;
use rebound_core::{
    ContentBlock, Conversation, MachineConfig, ProviderKind, RetryConfig, TargetSpec,
};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::runner::{RunInput, Runner};
use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome};
use rebound_tests::scenario;
use std::sync::Arc;

const READ_TURN: &str = r#"{"turns": [
    {"answer": {"text": "Reading it.",
                "tool_calls": [{"name": "read", "input": {"path": "PATH"},
                                "outcome": {"type": "ok", "text": "contents of PATH"}}]}},
    {"answer": {"text": "Done reading."}}]}"#;

async fn server(json: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::new(scenario(json), 1))
        .await
        .expect("starts")
}

/// The model each target names: for Gemini a Gemini 3 one, whose server validates the
/// thought signatures of the current turn's calls (the other formats' calls reach it
/// without one of Gemini's).
fn model(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Gemini => "gemini-3-pro-preview",
        _ => "test-model",
    }
}

fn provider(kind: ProviderKind, server: &FakeServer) -> Box<dyn Provider> {
    let mut config = HttpProviderConfig::new(kind, model(kind), ApiKey::new("k"));
    config.base_url = server.base_url_for(kind);
    Box::new(HttpProvider::new(config).expect("valid provider"))
}

fn config(kinds: &[ProviderKind]) -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(5)
                .with_max_attempts(2)
                .with_jitter(false),
        )
        .with_targets(
            kinds
                .iter()
                .map(|k| TargetSpec::new(*k, model(*k)))
                .collect(),
        )
}

/// The calls a conversation made, and how many of them have a result.
fn calls_and_results(conversation: &Conversation) -> (usize, usize) {
    let blocks = conversation
        .messages()
        .iter()
        .flat_map(|m| m.content.iter());
    let calls = blocks
        .clone()
        .filter(|b| matches!(b, ContentBlock::ToolUse { .. }))
        .count();
    let results = blocks
        .filter(|b| matches!(b, ContentBlock::ToolResult(_)))
        .count();
    (calls, results)
}

/// What the server received first, read back: every call answered, in order.
fn received(kind: ProviderKind, server: &FakeServer) -> Conversation {
    let request = &server.requests()[0];
    let body = serde_json::to_vec(request.body.as_ref().expect("a JSON body")).expect("bytes");
    let parsed = parse_request(kind, &body).unwrap_or_else(|e| panic!("{kind}: {e}"));
    parsed
        .conversation
        .check_tool_pairing(false)
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
    parsed.conversation
}

#[tokio::test]
async fn a_conversation_moves_across_all_five_formats_with_every_call_answered() {
    let order = [
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Bedrock,
        ProviderKind::OpenAiResponses,
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
    ];
    let mut conversation: Option<Conversation> = None;
    for (n, kind) in order.into_iter().enumerate() {
        let path = format!("file_{n}.rs");
        let s = server(&READ_TURN.replace("PATH", &path)).await;
        let tools = Arc::new(ScenarioTools::new(Arc::new(s.scenario().clone()), 0.0));
        let mut runner = Runner::new(config(&[kind]), vec![provider(kind, &s)]).tools(tools);
        if let Some(history) = conversation.take() {
            runner = runner.conversation(history);
        }
        let ended = runner
            .run(RunInput::text(format!("Read {path}.")))
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"))
            .conversation;
        // Every earlier call went with its result, and this run's call got one.
        let sent = received(kind, &s);
        assert_eq!(calls_and_results(&sent), (n, n), "{kind} received");
        assert_eq!(calls_and_results(&ended), (n + 1, n + 1), "{kind} ended");
        let body = s.requests()[0].body.clone().expect("body").to_string();
        if kind != ProviderKind::Gemini {
            assert!(
                !body.contains("thoughtSignature"),
                "{kind}: Gemini's signatures stay with Gemini"
            );
        }
        assert!(
            s.requests()
                .iter()
                .all(|r| matches!(r.outcome, Outcome::Answered { .. })),
            "{kind}: {:?}",
            s.requests()
        );
        s.shutdown().await;
        conversation = Some(ended);
    }
}

#[tokio::test]
async fn a_fallback_chain_from_anthropic_through_gemini_to_bedrock_keeps_every_call_answered() {
    // History with a call each from Gemini and Bedrock, then a chain whose first two
    // targets are down: the conversation reaches Bedrock whole.
    let mut history: Option<Conversation> = None;
    for (n, kind) in [ProviderKind::Gemini, ProviderKind::Bedrock]
        .into_iter()
        .enumerate()
    {
        let s = server(&READ_TURN.replace("PATH", &format!("h{n}.rs"))).await;
        let tools = Arc::new(ScenarioTools::new(Arc::new(s.scenario().clone()), 0.0));
        let mut runner = Runner::new(config(&[kind]), vec![provider(kind, &s)]).tools(tools);
        if let Some(h) = history.take() {
            runner = runner.conversation(h);
        }
        history = Some(
            runner
                .run(RunInput::text("Read it."))
                .await
                .unwrap_or_else(|e| panic!("{kind}: {e}"))
                .conversation,
        );
        s.shutdown().await;
    }
    let down = r#"{"random": {"outages": [{"from_ms": 0, "until_ms": 600000,
                                         "fault": {"type": "http", "status": STATUS}}]}}"#;
    let anthropic = server(&down.replace("STATUS", "529")).await;
    let gemini = server(&down.replace("STATUS", "503")).await;
    let bedrock = server(&READ_TURN.replace("PATH", "last.rs")).await;
    let kinds = [
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Bedrock,
    ];
    let providers = vec![
        provider(ProviderKind::Anthropic, &anthropic),
        provider(ProviderKind::Gemini, &gemini),
        provider(ProviderKind::Bedrock, &bedrock),
    ];
    let tools = Arc::new(ScenarioTools::new(
        Arc::new(bedrock.scenario().clone()),
        0.0,
    ));
    let ended = Runner::new(config(&kinds), providers)
        .tools(tools)
        .conversation(history.expect("history"))
        .run(RunInput::text("And the last one."))
        .await
        .expect("Bedrock answers")
        .conversation;
    assert_eq!(
        anthropic.requests().len(),
        2,
        "two attempts, then the fallback"
    );
    assert_eq!(gemini.requests().len(), 2);
    // Gemini got every earlier call answered, and so did Bedrock.
    assert_eq!(
        calls_and_results(&received(ProviderKind::Gemini, &gemini)),
        (2, 2)
    );
    assert_eq!(
        calls_and_results(&received(ProviderKind::Bedrock, &bedrock)),
        (2, 2)
    );
    assert_eq!(calls_and_results(&ended), (3, 3));
    for s in [anthropic, gemini, bedrock] {
        s.shutdown().await;
    }
}
