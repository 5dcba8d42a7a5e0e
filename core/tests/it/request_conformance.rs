//! Requests the real APIs accept: no blank text for Anthropic, nothing sent when there is
//! nothing to send, and tool-call ids in each provider's form (Anthropic's pattern
//! `^[a-zA-Z0-9_-]+$`, unique in a request; OpenAI's 40 characters), the same for a call and
//! its result, while the conversation keeps the ids the models minted.

use rebound_core::wire::{request_body, RequestParams, WireError};
use rebound_core::{
    AgentMachine, Command, ContentBlock, Conversation, Event, MachineConfig, Message, Millis,
    ProviderKind, Role, RunError,
};
use serde_json::{json, Value};

const PARAMS: RequestParams<'static> = RequestParams::new("m", 64);

fn user(blocks: Vec<ContentBlock>) -> Message {
    Message {
        role: Role::User,
        content: blocks,
    }
}

fn assistant(blocks: Vec<ContentBlock>) -> Message {
    Message {
        role: Role::Assistant,
        content: blocks,
    }
}

/// One exchange per id: a call of `read`, answered by a result.
fn calls(ids: &[&str]) -> Conversation {
    let mut messages = vec![Message::user_text("go")];
    for id in ids {
        messages.push(assistant(vec![ContentBlock::tool_use(
            *id,
            "read",
            json!({"path": "a"}),
        )]));
        messages.push(user(vec![ContentBlock::tool_result(
            *id,
            vec![rebound_core::ToolResultPart::text("ok")],
            false,
        )]));
    }
    messages.push(Message::assistant_text("done"));
    messages.push(Message::user_text("more"));
    Conversation::from(messages)
}

/// (`tool_use` ids, `tool_result` ids) of an Anthropic body.
fn anthropic_ids(body: &Value) -> (Vec<String>, Vec<String>) {
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

/// (`tool_calls` ids, `tool_call_id`s) of an OpenAI body.
fn openai_ids(body: &Value) -> (Vec<String>, Vec<String>) {
    let (mut calls, mut answers) = (Vec::new(), Vec::new());
    for m in body["messages"].as_array().expect("messages") {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            calls.push(c["id"].as_str().expect("id").to_owned());
        }
        if let Some(id) = m["tool_call_id"].as_str() {
            answers.push(id.to_owned());
        }
    }
    (calls, answers)
}

fn in_anthropic_pattern(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Ids that break Anthropic's pattern, ids that look like encoded ones, and ids that differ
/// only where an encoding might fold them together.
const AWKWARD: &[&str] = &[
    "functions.read:0",
    "functions.read:1",
    "functions_read_0",
    "functions_2eread_3a0",
    "rb_functions.read:0",
    "rb_functions_2eread_3a0",
    "a b",
    "a_b",
    "a__b",
    "a_20b",
    "é",
    "_c3_a9",
    "call/1",
    "call|1",
    "x_x1",
    "",
];

#[test]
fn anthropic_tool_ids_match_its_pattern_stay_distinct_and_pair_call_with_result() {
    let body = request_body(ProviderKind::Anthropic, &calls(AWKWARD), &PARAMS).expect("sendable");
    let (uses, results) = anthropic_ids(&body);
    assert_eq!(uses.len(), AWKWARD.len());
    assert!(uses.iter().all(|id| in_anthropic_pattern(id)), "{uses:?}");
    let mut distinct = uses.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        uses.len(),
        "two ids encoded alike: {uses:?}"
    );
    assert_eq!(uses, results);
}

#[test]
fn tool_ids_a_provider_accepts_are_sent_unchanged() {
    let native = [
        "toolu_01A09q90qw90lq917835lq9",
        "call_abc123",
        "chatcmpl-tool-1",
    ];
    let body = request_body(ProviderKind::Anthropic, &calls(&native), &PARAMS).expect("sendable");
    assert_eq!(anthropic_ids(&body).0, native);
    let body = request_body(ProviderKind::OpenAi, &calls(&native), &PARAMS).expect("sendable");
    assert_eq!(openai_ids(&body).0, native);
}

#[test]
fn a_tool_id_reused_in_later_turns_is_unique_in_an_anthropic_request() {
    let body = request_body(
        ProviderKind::Anthropic,
        &calls(&[
            "call_0",
            "call_0",
            "call_0",
            "functions.read:0",
            "functions.read:0",
        ]),
        &PARAMS,
    )
    .expect("sendable");
    let (uses, results) = anthropic_ids(&body);
    let mut distinct = uses.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{uses:?}");
    assert!(uses.iter().all(|id| in_anthropic_pattern(id)), "{uses:?}");
    assert_eq!(uses, results);
    assert_eq!(uses[0], "call_0", "the first use keeps its id");
}

#[test]
fn openai_tool_call_ids_fit_40_characters_stay_distinct_and_pair_call_with_result() {
    let long_a = "chatcmpl-tool-8d6f0a3c2b1e4f5a9c7d6e5f4a3b2c1d";
    let long_b = "chatcmpl-tool-8d6f0a3c2b1e4f5a9c7d6e5f4a3b2c1e";
    let forty = "x".repeat(40);
    let ids = [long_a, long_b, &forty, "rb_short", "functions.read:0"];
    let body = request_body(ProviderKind::OpenAi, &calls(&ids), &PARAMS).expect("sendable");
    let (sent, answers) = openai_ids(&body);
    assert!(sent.iter().all(|id| id.chars().count() <= 40), "{sent:?}");
    let mut distinct = sent.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "{sent:?}");
    assert_eq!(sent, answers);
    assert_eq!(sent[2], forty, "40 characters fit");
    assert_eq!(sent[4], "functions.read:0", "OpenAI takes any characters");
}

#[test]
fn tool_ids_are_encoded_the_same_in_every_request_of_a_conversation() {
    let ids = ["functions.read:0", "call_0", "call_0"];
    let short = calls(&ids);
    let first = request_body(ProviderKind::Anthropic, &short, &PARAMS).expect("sendable");
    let again = request_body(ProviderKind::Anthropic, &short, &PARAMS).expect("sendable");
    assert_eq!(first, again, "a retry sends the same bytes");
    // A later turn (or a resumed session) adds messages; the earlier ids do not move.
    let longer = calls(&["functions.read:0", "call_0", "call_0", "call_0"]);
    let later = request_body(ProviderKind::Anthropic, &longer, &PARAMS).expect("sendable");
    assert_eq!(anthropic_ids(&later).0[..3], anthropic_ids(&first).0[..]);
}

#[test]
fn whitespace_only_text_is_not_sent_to_anthropic() {
    let conversation = Conversation::from(vec![
        Message::user_text("read a"),
        assistant(vec![
            ContentBlock::text("\n\n"),
            ContentBlock::tool_use("toolu_1", "read", json!({})),
        ]),
        user(vec![
            ContentBlock::tool_result("toolu_1", vec![], false),
            ContentBlock::text(" "),
        ]),
        Message::assistant_text("  \n"),
        Message::user_text("go on"),
    ]);
    let body = request_body(ProviderKind::Anthropic, &conversation, &PARAMS).expect("sendable");
    let texts: Vec<&str> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().expect("text"))
        .collect();
    assert_eq!(texts, ["read a", "go on"]);
}

#[test]
fn a_conversation_with_nothing_to_send_is_refused_for_both_providers() {
    for provider in [ProviderKind::Anthropic, ProviderKind::OpenAi] {
        for blank in ["", "   "] {
            let conversation = Conversation::from(vec![Message::user_text(blank)]);
            let body = request_body(provider, &conversation, &PARAMS);
            if provider == ProviderKind::OpenAi && !blank.is_empty() {
                // OpenAI takes whitespace; only the empty string leaves nothing to send.
                continue;
            }
            assert_eq!(
                body,
                Err(WireError::EmptyConversation),
                "{provider} {blank:?}"
            );
        }
    }
}

#[test]
fn a_user_message_without_content_is_refused_with_a_typed_error_and_nothing_is_sent() {
    for content in [
        vec![],
        vec![ContentBlock::text("")],
        vec![ContentBlock::text(" \n\t"), ContentBlock::text("")],
    ] {
        let mut machine = AgentMachine::new(MachineConfig::default(), 1);
        let commands = machine.step(Millis(0), Event::UserMessage { content });
        assert_eq!(
            commands,
            [Command::Fail {
                error: Box::new(RunError::EmptyUserMessage)
            }]
        );
        assert!(machine.conversation().is_empty(), "nothing was appended");
    }
}
