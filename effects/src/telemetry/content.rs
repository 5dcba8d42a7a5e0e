//! Message content in the GenAI conventions' JSON shape (`gen-ai-input-messages.json`,
//! `gen-ai-output-messages.json`): recorded only when the embedder opts in.

use rebound_core::{ContentBlock, MediaSource, Message, Role, StopReason, ToolResultPart};
use serde_json::{json, Map, Value};

/// The conversation sent, as `gen_ai.input.messages`: one entry per message, a user message
/// made only of tool results as role `tool`.
pub(crate) fn input_messages<'a>(messages: impl Iterator<Item = &'a Message>) -> String {
    Value::Array(messages.map(|m| message(m, None)).collect()).to_string()
}

/// The answer, as `gen_ai.output.messages`.
pub(crate) fn output_messages(answer: &Message, stop: &StopReason) -> String {
    Value::Array(vec![message(answer, Some(stop))]).to_string()
}

fn message(m: &Message, finish: Option<&StopReason>) -> Value {
    let only_results = !m.content.is_empty()
        && m.content
            .iter()
            .all(|b| matches!(b, ContentBlock::ToolResult(_)));
    let role = match m.role {
        _ if only_results => "tool",
        Role::Assistant => "assistant",
        _ => "user",
    };
    let mut out = Map::new();
    out.insert("role".into(), role.into());
    out.insert(
        "parts".into(),
        Value::Array(m.content.iter().filter_map(part).collect()),
    );
    if let Some(stop) = finish {
        out.insert("finish_reason".into(), stop.as_str().into());
    }
    Value::Object(out)
}

fn part(block: &ContentBlock) -> Option<Value> {
    Some(match block {
        ContentBlock::Text { text } => json!({"type": "text", "content": text}),
        ContentBlock::ToolUse { id, name, input } => {
            json!({"type": "tool_call", "id": id, "name": name, "arguments": **input})
        }
        ContentBlock::ToolResult(result) => json!({
            "type": "tool_call_response",
            "id": result.tool_use_id,
            "response": result.parts.iter().filter_map(|p| match p {
                ToolResultPart::Text { text } => Some(text.as_str()),
                _ => None,
            }).collect::<Vec<_>>().join("\n"),
        }),
        ContentBlock::Thinking { thinking, .. } => {
            json!({"type": "reasoning", "content": thinking})
        }
        ContentBlock::Image { source } => media(source),
        // Provider-specific items (encrypted reasoning) carry nothing a person reads.
        _ => return None,
    })
}

/// An image, without its bytes: telemetry is not the place for them.
fn media(source: &MediaSource) -> Value {
    match source {
        MediaSource::Url { url } => json!({"type": "uri", "modality": "image", "uri": url}),
        other => json!({
            "type": "blob",
            "modality": "image",
            "mime_type": other.media_type().unwrap_or_default(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::ToolResultBlock;

    #[test]
    fn messages_take_the_conventions_shape() {
        let call = Message::assistant(vec![
            ContentBlock::text("Let me look."),
            ContentBlock::tool_use("t1", "read", json!({"path": "a.txt"})),
        ]);
        let result = Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult(ToolResultBlock {
                tool_use_id: "t1".into(),
                parts: vec![ToolResultPart::text("hello")],
                is_error: false,
            })],
        };
        let v: Value = serde_json::from_str(&input_messages([&call, &result].into_iter())).unwrap();
        assert_eq!(
            v,
            json!([
                {"role": "assistant", "parts": [
                    {"type": "text", "content": "Let me look."},
                    {"type": "tool_call", "id": "t1", "name": "read", "arguments": {"path": "a.txt"}}
                ]},
                {"role": "tool", "parts": [
                    {"type": "tool_call_response", "id": "t1", "response": "hello"}
                ]}
            ])
        );
        let out: Value =
            serde_json::from_str(&output_messages(&call, &StopReason::ToolUse)).unwrap();
        assert_eq!(out[0]["finish_reason"], "tool_use");
    }
}
