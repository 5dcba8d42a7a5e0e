//! The OpenAI Responses API end to end: the real runner over HTTP against the fake server
//! on loopback, for what only this format has — failures inside a 200 stream
//! (`response.failed`), reasoning items passed back, tool results as
//! `function_call_output` items — and a conversation that moves between Anthropic and
//! Responses with its tools intact. (The failures every format shares are in `phase6.rs`.)

use rebound_cli::scenario_tools::ScenarioTools;
use rebound_core::{
    ContentBlock, Conversation, MachineConfig, Message, ProviderKind, RetryConfig, Role, TargetSpec,
};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig, Provider};
use rebound_effects::runner::{RunInput, Runner};
use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome};
use rebound_tests::{scenario, Play};
use serde_json::{json, Value};
use std::sync::Arc;

const R: ProviderKind = ProviderKind::OpenAiResponses;

/// A tool call whose tool fails, then a text answer.
const TOOL_THEN_TEXT: &str = r#"{"turns": [
    {"faults": FAULTS,
     "answer": {"text": "Reading it.",
                "tool_calls": [{"name": "read", "input": {"path": "src/lib.rs"},
                                "outcome": {"type": "error", "message": "file not found: src/lib.rs"}}]}},
    {"answer": {"text": "The file is missing."}}]}"#;

fn tool_then_text(faults: &str) -> rebound_sim::Scenario {
    scenario(&TOOL_THEN_TEXT.replace("FAULTS", faults))
}

fn input(body: &Option<Value>) -> Vec<Value> {
    body.as_ref().expect("a JSON body")["input"]
        .as_array()
        .expect("an input array")
        .clone()
}

#[tokio::test]
async fn in_stream_response_failed_is_retried_like_its_http_twin() {
    for (code, kind) in [
        ("rate_limit_exceeded", "RateLimited"),
        ("server_error", "ServerError"),
    ] {
        let faults = format!(
            r#"[{{"type": "stream_error", "error_type": "{code}", "message": "failed mid-stream"}}]"#
        );
        let played = Play::new(tool_then_text(&faults), R).run().await;
        assert!(played.result.is_ok(), "{code}: {:?}", played.result);
        // The failed attempt, its retry, and the second turn.
        assert_eq!(played.requests.len(), 3, "{code}");
        assert_eq!(
            played.lines("retry"),
            [format!("retry attempt=2 kind={kind} delay=20")],
            "{code}"
        );
        // Nothing of the failed attempt reached the conversation.
        assert_eq!(played.conversation.len(), 4, "{code}");
        played.assert_trace_replays();
    }
}

#[tokio::test]
async fn in_stream_context_length_exceeded_compacts_once_like_the_http_400() {
    let s = scenario(
        r#"{"history": {"turns": 6, "bytes": 4000},
            "turns": [{"faults": [{"type": "stream_error", "error_type": "context_length_exceeded",
                                   "message": "Your input exceeds the context window of this model."}],
                       "answer": {"text": "Short now."}}]}"#,
    );
    let played = Play::new(s, R).run().await;
    assert!(played.result.is_ok(), "{:?}", played.result);
    assert_eq!(played.requests.len(), 2);
    assert_eq!(played.lines("compaction").len(), 1, "{:?}", played.log);
    let size = |i: usize| {
        let body = serde_json::to_vec(played.requests[i].body.as_ref().expect("body"))
            .expect("serializes");
        rebound_core::wire::parse_request(R, &body)
            .expect("valid")
            .conversation
            .approx_bytes()
    };
    assert!(size(1) < size(0), "the retry is smaller");
    played.assert_trace_replays();
}

#[tokio::test]
async fn reasoning_items_are_passed_back_unchanged_on_the_next_request() {
    let played = Play::new(tool_then_text("[]"), R).run().await;
    assert!(played.result.is_ok(), "{:?}", played.result);
    // The first answer's reasoning item, as the conversation keeps it…
    let kept: Vec<&Value> = played.conversation.messages()[1]
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Reasoning { item, .. } => Some(item),
            _ => None,
        })
        .collect();
    assert_eq!(kept.len(), 1, "the fake model reasons before answering");
    assert!(kept[0]["encrypted_content"].is_string());
    // …is in the next request, byte for byte, right before the call it preceded…
    let second = input(&played.requests[1].body);
    let at = second
        .iter()
        .position(|i| i["type"] == "reasoning")
        .expect("the reasoning item is passed back");
    assert_eq!(&second[at], kept[0]);
    assert_eq!(second[at + 1]["type"], "message");
    assert_eq!(second[at + 2]["type"], "function_call");
    // …and the server, which refuses changed reasoning items, answered it.
    assert!(matches!(
        played.requests[1].outcome,
        Outcome::Answered { .. }
    ));
    let body = played.requests[1].body.as_ref().expect("body");
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
}

#[tokio::test]
async fn a_changed_reasoning_item_is_refused_once_and_the_request_sent_again_without_it() {
    // What the server does to a client that rewrote reasoning: the API's 400
    // `invalid_encrypted_content`; the machine sends the request once more without any.
    let server = FakeServer::start(FakeServerConfig::healthy())
        .await
        .expect("starts");
    let tampered = Conversation::from(vec![
        Message::user_text("hi"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Reasoning {
                    item: json!({"id": "rs_fake_t0", "type": "reasoning", "summary": [],
                                 "encrypted_content": "gAAAAAB-forged"}),
                    owner: None,
                },
                ContentBlock::text("Hello."),
            ],
        },
    ]);
    let mut config = HttpProviderConfig::new(R, "gpt-test", ApiKey::new("k"));
    config.base_url = server.base_url_for(R);
    let provider: Box<dyn Provider> = Box::new(HttpProvider::new(config).expect("valid"));
    let machine = MachineConfig::default().with_targets(vec![TargetSpec::new(R, "gpt-test")]);
    let summary = Runner::new(machine, vec![provider])
        .conversation(tampered)
        .run(RunInput::text("again"))
        .await
        .expect("answered after one retry without reasoning");
    assert_eq!(summary.stats.retries, 1);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "one retry, no more");
    assert!(
        matches!(requests[0].outcome, Outcome::Rejected { status: 400, ref reason } if reason.contains("could not be verified")),
        "{:?}",
        requests[0].outcome
    );
    let resent = input(&requests[1].body);
    assert!(
        resent.iter().all(|i| i["type"] != "reasoning"),
        "{resent:?}"
    );
    assert!(matches!(requests[1].outcome, Outcome::Answered { .. }));
    server.shutdown().await;
}

#[tokio::test]
async fn tool_errors_go_back_as_function_call_output_with_the_call_id() {
    let played = Play::new(tool_then_text("[]"), R).run().await;
    assert!(played.result.is_ok(), "{:?}", played.result);
    let second = input(&played.requests[1].body);
    let call = second
        .iter()
        .find(|i| i["type"] == "function_call")
        .expect("the call");
    let output = second
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .expect("its output");
    assert_eq!(call["name"], "read");
    assert_eq!(call["arguments"], "{\"path\":\"src/lib.rs\"}");
    assert_eq!(output["call_id"], call["call_id"]);
    let text = output["output"].as_str().expect("text output");
    assert!(
        text.starts_with("Tool execution failed for `read`: file not found: src/lib.rs"),
        "{text}"
    );
}

fn provider(kind: ProviderKind, server: &FakeServer) -> Box<dyn Provider> {
    let mut config = HttpProviderConfig::new(kind, "test-model", ApiKey::new("k"));
    config.base_url = server.base_url_for(kind);
    Box::new(HttpProvider::new(config).expect("valid provider"))
}

fn config(kind: ProviderKind) -> MachineConfig {
    MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(10)
                .with_jitter(false),
        )
        .with_targets(vec![TargetSpec::new(kind, "test-model")])
}

/// One run on `kind` continuing `history` (if any) with `prompt`.
async fn run_on(
    kind: ProviderKind,
    server: &FakeServer,
    history: Option<Conversation>,
    prompt: &str,
) -> Conversation {
    let tools = Arc::new(ScenarioTools::new(Arc::new(server.scenario().clone()), 0.0));
    let mut runner = Runner::new(config(kind), vec![provider(kind, server)]).tools(tools);
    if let Some(h) = history {
        runner = runner.conversation(h);
    }
    runner
        .run(RunInput::text(prompt))
        .await
        .unwrap_or_else(|e| panic!("{kind}: {e}"))
        .conversation
}

const READ_TURN: &str = r#"{"turns": [
    {"answer": {"text": "Reading it.",
                "tool_calls": [{"name": "read", "input": {"path": "PATH"},
                                "outcome": {"type": "ok", "text": "pub fn f() {}"}}]}},
    {"answer": {"text": "Done reading."}}]}"#;

async fn server_reading(path: &str) -> FakeServer {
    FakeServer::start(FakeServerConfig::new(
        scenario(&READ_TURN.replace("PATH", path)),
        1,
    ))
    .await
    .expect("starts")
}

#[tokio::test]
async fn a_conversation_begun_on_anthropic_continues_on_responses_and_back_with_tools_intact() {
    let anthropic = server_reading("a.rs").await;
    let mut begun = run_on(ProviderKind::Anthropic, &anthropic, None, "Read a.rs.")
        .await
        .into_messages();
    // Extended thinking, as Claude returns it: signed, meaningless to OpenAI.
    begun[1].content.insert(
        0,
        ContentBlock::Thinking {
            thinking: "I should read the file.".into(),
            signature: "EqQBCkYIBhgCIkD-claude-signature".into(),
            owner: None,
        },
    );
    let anthropic_call = begun[1]
        .tool_uses()
        .next()
        .map(|(id, _, _)| id.to_owned())
        .expect("a call");

    let responses = server_reading("b.rs").await;
    let continued = run_on(R, &responses, Some(Conversation::from(begun)), "Now b.rs.").await;
    let first = input(&responses.requests()[0].body);
    let calls: Vec<&Value> = first
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    assert_eq!(calls[0]["call_id"], anthropic_call.as_str());
    assert_eq!(calls[0]["name"], "read");
    let outputs: Vec<&Value> = first
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(outputs[0]["call_id"], anthropic_call.as_str());
    assert_eq!(outputs[0]["output"], "pub fn f() {}");
    let sent = serde_json::to_string(&first).expect("serializes");
    assert!(!sent.contains("claude-signature"), "thinking is not sent");
    assert!(responses
        .requests()
        .iter()
        .all(|r| matches!(r.outcome, Outcome::Answered { .. })));
    assert_eq!(continued.len(), 8);

    // And back: Anthropic gets the Responses turns' calls and results, no reasoning items.
    let back = server_reading("c.rs").await;
    let ended = run_on(ProviderKind::Anthropic, &back, Some(continued), "And c.rs.").await;
    assert_eq!(ended.len(), 12);
    let body = back.requests()[0].body.clone().expect("body");
    let sent = body.to_string();
    assert!(!sent.contains("encrypted_content"), "reasoning is not sent");
    assert!(
        sent.contains("claude-signature"),
        "Anthropic's own thinking is"
    );
    let messages = body["messages"].as_array().expect("messages");
    let results = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .count();
    assert_eq!(results, 2, "both earlier calls keep their results");
    // That thinking has no recorded owner (as in an old session), so it went to Anthropic,
    // whose servers never signed it: refused as the API refuses it, then sent once more
    // without reasoning, and answered.
    let requests = back.requests();
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
    assert!(!requests[1]
        .body
        .as_ref()
        .expect("body")
        .to_string()
        .contains("claude-signature"));
    assert!(requests[1..]
        .iter()
        .all(|r| matches!(r.outcome, Outcome::Answered { .. })));
    for s in [anthropic, responses, back] {
        s.shutdown().await;
    }
}
