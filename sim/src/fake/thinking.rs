//! The fake server as a thinking model on the Messages API: a request with extended thinking
//! enabled gets answers that start with a signed `thinking` block — and a `redacted_thinking`
//! block after it when the user's words hold Anthropic's test string for redaction — and a
//! request is refused, in the API's words, when it passes thinking back changed or minted for
//! another key, or when it answers tool calls without the thinking of the turn that made
//! them.
//!
//! As with [`super::reasoning`], a block is a pure function of its content and its owner (the
//! server's organisation and the request's API key), so checking needs no memory: a
//! signature is a 64-bit FNV-1a of the owner and the thinking text, and redacted data carries
//! the step it was minted for next to the seal of that step.

use super::reasoning::seal;
use super::reject::Rejection;
use rebound_core::wire;
use rebound_core::{AssistantResponse, ContentBlock, ProviderKind};
use serde_json::Value;

/// The prompt that makes Claude answer with a `redacted_thinking` block, for testing
/// (docs.claude.com, extended thinking, "Thinking redaction").
pub const REDACTED_THINKING_TRIGGER: &str = "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_46C9A13E193C177646C7398A98432ECCCE4C1253D5E2D82641AC0E52CC2876CB";

/// What the fake model thinks, in every answer.
const THOUGHT: &str = "Reading the request before answering.";

/// Whether the request turns extended thinking on (`thinking.type` other than `disabled`).
pub(crate) fn enabled(body: &Value) -> bool {
    body.get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "disabled")
}

/// Whether the user's words in `body` ask for redacted thinking (its last message's text).
pub(crate) fn asks_for_redaction(body: &Value) -> bool {
    let Some(last) = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
    else {
        return false;
    };
    match last.get("content") {
        Some(Value::String(text)) => text.contains(REDACTED_THINKING_TRIGGER),
        Some(Value::Array(blocks)) => blocks.iter().any(|b| {
            b.get("text")
                .and_then(Value::as_str)
                .is_some_and(|t| t.contains(REDACTED_THINKING_TRIGGER))
        }),
        _ => false,
    }
}

/// The signature of `thinking` for `owner`.
fn signature(owner: &str, thinking: &str) -> String {
    format!("EqQB{:016x}", seal(owner, thinking))
}

/// The data of the redacted thinking minted for `owner` with the answer named `step`.
fn redacted_data(owner: &str, step: &str) -> String {
    format!(
        "EmwK{step}.{:016x}",
        seal(owner, &format!("redacted\0{step}"))
    )
}

/// Whether `data` is redacted thinking minted for `owner`.
fn redacted_data_is_valid(owner: &str, data: &str) -> bool {
    let Some(rest) = data.strip_prefix("EmwK") else {
        return false;
    };
    let Some((step, _)) = rest.rsplit_once('.') else {
        return false;
    };
    data == redacted_data(owner, step)
}

/// `response` with the thinking for `step` in front (an empty message stays empty): a
/// signed thinking block, then a redacted one when `redact`.
pub(crate) fn with_thinking(
    mut response: AssistantResponse,
    step: &str,
    owner: &str,
    redact: bool,
) -> AssistantResponse {
    let content = &mut response.message.content;
    if content.is_empty() {
        return response;
    }
    if redact {
        content.insert(
            0,
            ContentBlock::redacted_thinking(redacted_data(owner, step)),
        );
    }
    content.insert(
        0,
        ContentBlock::thinking(THOUGHT, signature(owner, THOUGHT)),
    );
    response
}

fn refuse(message: String) -> Rejection {
    Rejection {
        status: 400,
        body: wire::encode_error_body(
            ProviderKind::Anthropic,
            400,
            Some("invalid_request_error"),
            &message,
        ),
        reason: message,
    }
}

fn kind(block: &Value) -> &str {
    block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// 400 unless every thinking block of the request is one this server minted for `owner`,
/// unchanged, and — with thinking enabled — a request that answers tool calls passes back
/// the thinking of the turn that made them (each refusal in the API's words).
pub(crate) fn check(body: &Value, owner: &str) -> Result<(), Rejection> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Ok(());
    };
    let blocks = |m: &Value| m.get("content").and_then(Value::as_array).cloned();
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in blocks(m).unwrap_or_default().iter().enumerate() {
            let text = |key: &str| b.get(key).and_then(Value::as_str).unwrap_or_default();
            match kind(b) {
                // Anthropic 400 (anthropics/claude-code#10627).
                "thinking" if text("signature") != signature(owner, text("thinking")) => {
                    return Err(refuse(format!(
                        "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                    )));
                }
                // Anthropic 400 (anthropics/claude-code#56708).
                "redacted_thinking" if !redacted_data_is_valid(owner, text("data")) => {
                    return Err(refuse(format!(
                        "messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                    )));
                }
                _ => {}
            }
        }
    }
    if !enabled(body) {
        return Ok(());
    }
    let answers_tools = messages.last().is_some_and(|m| {
        m.get("role").and_then(Value::as_str) == Some("user")
            && blocks(m).is_some_and(|c| c.iter().any(|b| kind(b) == "tool_result"))
    });
    let last_assistant = messages
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| m.get("role").and_then(Value::as_str) == Some("assistant"));
    let (Some((i, m)), true) = (last_assistant, answers_tools) else {
        return Ok(());
    };
    let first = blocks(m).and_then(|c| c.first().map(|b| kind(b).to_owned()));
    match first.as_deref() {
        Some("thinking" | "redacted_thinking") => Ok(()),
        // The API's words (Kilo-Org/kilocode#5219).
        found => Err(refuse(format!(
            "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
             found `{}`. When `thinking` is enabled, a final `assistant` message must start \
             with a thinking block (preceeding the lastmost set of `tool_use` and \
             `tool_result` blocks). We recommend you include thinking blocks from previous \
             turns. To avoid this requirement, disable `thinking`. Please consult our \
             documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
            found.unwrap_or("text")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::Message;
    use serde_json::json;

    #[test]
    fn minted_blocks_verify_for_their_owner_only() {
        let response = with_thinking(
            AssistantResponse::end_turn(Message::assistant_text("hi")),
            "t0",
            "org\0key-a",
            true,
        );
        // The blocks as the API sends them.
        let content = wire::encode_response_json(ProviderKind::Anthropic, &response, "m", "id")
            ["content"]
            .clone();
        let blocks = content.as_array().expect("content blocks");
        let body = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [blocks[0], blocks[1], {"type": "text", "text": "hi"}]},
            {"role": "user", "content": "more"},
        ]});
        assert!(check(&body, "org\0key-a").is_ok());
        let other = check(&body, "org\0key-b").unwrap_err();
        assert_eq!(
            other.reason,
            "messages.1.content.0: Invalid `signature` in `thinking` block"
        );
        let mut changed = body.clone();
        changed["messages"][1]["content"][1]["data"] = json!("EmwKt0.0000000000000000");
        assert_eq!(
            check(&changed, "org\0key-a").unwrap_err().reason,
            "messages.1.content.1: Invalid `data` in `redacted_thinking` block"
        );
    }

    #[test]
    fn a_tool_loop_with_thinking_on_needs_the_turns_thinking() {
        let loop_body = |first: Value| {
            json!({"thinking": {"type": "enabled", "budget_tokens": 1024}, "messages": [
                {"role": "user", "content": "read a"},
                {"role": "assistant", "content": [first, {"type": "tool_use", "id": "t", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "a"}]},
            ]})
        };
        let thought =
            json!({"type": "thinking", "thinking": THOUGHT, "signature": signature("o", THOUGHT)});
        assert!(check(&loop_body(thought), "o").is_ok());
        let refused =
            check(&loop_body(json!({"type": "text", "text": "Reading."})), "o").unwrap_err();
        assert!(refused.reason.starts_with(
            "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`."
        ));
        let mut off = loop_body(json!({"type": "text", "text": "Reading."}));
        off.as_object_mut().map(|o| o.remove("thinking"));
        assert!(check(&off, "o").is_ok());
    }
}
