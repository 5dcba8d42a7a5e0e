//! Anthropic Messages request bodies (`POST /v1/messages`), both directions.

use crate::conversation::{ContentBlock, Conversation, Message, TargetIdentity};
use crate::wire::anthropic::tool_id::ToolIds;
#[cfg(feature = "server")]
use crate::wire::ParsedRequest;
#[cfg(feature = "server")]
use crate::wire::{invalid_request as invalid, parse_tool_spec};
use crate::wire::{RequestParams, WireError};
use serde_json::{json, Map, Value};

/// The body for `conversation`; the caller has checked tool pairing. Refuses a conversation
/// left with no message once the blocks Anthropic rejects are dropped.
pub(crate) fn body(
    conversation: &Conversation,
    params: &RequestParams<'_>,
) -> Result<Value, WireError> {
    let mut ids = ToolIds::default();
    let messages: Vec<Value> = conversation
        .messages()
        .iter()
        .filter_map(|m| message(m, params.identity, &mut ids))
        .collect();
    if messages.is_empty() {
        return Err(WireError::EmptyConversation);
    }
    let mut body = Map::new();
    body.insert("model".into(), params.model.into());
    body.insert("max_tokens".into(), params.max_tokens.into());
    if let Some(system) = params.system {
        body.insert("system".into(), system.into());
    }
    body.insert("messages".into(), messages.into());
    if !params.tools.is_empty() {
        let tools: Vec<Value> = params
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
        body.insert("tools".into(), tools.into());
    }
    body.insert("stream".into(), params.stream.into());
    Ok(Value::Object(body))
}

/// Leaves extended thinking out of `body` when its messages cannot carry it, and says
/// whether it did.
///
/// With thinking enabled, a request that answers tool calls must pass back the thinking of
/// the assistant turn that made them: its last assistant message must start with a
/// `thinking` or `redacted_thinking` block, or the API answers 400 "Expected `thinking` or
/// `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final
/// `assistant` message must start with a thinking block (preceeding the lastmost set of
/// `tool_use` and `tool_result` blocks). … To avoid this requirement, disable `thinking`."
/// (quoted in anomalyco/opencode#3077). That turn's thinking is missing when another target
/// produced it (it may not go back, see [`ContentBlock::may_go_to`]), when another provider
/// answered it, or when a retry left reasoning out; so, as the API advises, that request
/// goes without thinking. The model thinks again once the tool loop ends (a request whose
/// last message is the user's own words).
pub(crate) fn fit_thinking(body: &mut Map<String, Value>) -> bool {
    let enabled = body
        .get("thinking")
        .is_some_and(|t| t.get("type").and_then(Value::as_str) != Some("disabled"));
    let Some(Value::Array(messages)) = body.get("messages") else {
        return false;
    };
    let blocks = |m: &Value| m.get("content").and_then(Value::as_array).cloned();
    let is = |b: &Value, kinds: &[&str]| {
        b.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| kinds.contains(&t))
    };
    let answers_tools = messages.last().is_some_and(|m| {
        m.get("role").and_then(Value::as_str) == Some("user")
            && blocks(m).is_some_and(|c| c.iter().any(|b| is(b, &["tool_result"])))
    });
    let starts_with_thinking = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .and_then(blocks)
        .and_then(|c| c.first().cloned())
        .is_some_and(|b| is(&b, &["thinking", "redacted_thinking"]));
    if enabled && answers_tools && !starts_with_thinking {
        body.remove("thinking");
        return true;
    }
    false
}

/// Whether Anthropic refuses `text` in a text block: empty ("text content blocks must be
/// non-empty") or only whitespace ("text content blocks must contain non-whitespace text";
/// both 400s, quoted in anthropics/claude-code#59812 and #23369). Models and other providers
/// produce such blocks (a "\n\n" before a tool call), so they are left out of requests.
fn blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// One message in the Messages shape (the conversation model's own serde shape), without
/// the blocks Anthropic would reject: blank text (also inside tool results), thinking
/// that carries no signature or that another target signed ([`ContentBlock::may_go_to`]),
/// and OpenAI Responses reasoning items; tool ids in the form Anthropic accepts
/// ([`ToolIds`]).
fn message<'a>(
    m: &'a Message,
    to: Option<&TargetIdentity>,
    ids: &mut ToolIds<'a>,
) -> Option<Value> {
    let mut content = Vec::with_capacity(m.content.len());
    for b in &m.content {
        let keep = match b {
            ContentBlock::Text { text } => !blank(text),
            ContentBlock::Thinking { signature, .. } => !signature.is_empty() && b.may_go_to(to),
            ContentBlock::RedactedThinking { .. } => b.may_go_to(to),
            // An OpenAI Responses reasoning item: Anthropic cannot read it.
            ContentBlock::Reasoning { .. } => false,
            _ => true,
        };
        if !keep {
            continue;
        }
        let mut v = match b {
            // The block as the API sent it: the owner is rebound's, not Anthropic's.
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
            ContentBlock::RedactedThinking { data, .. } => {
                json!({"type": "redacted_thinking", "data": data})
            }
            _ => match serde_json::to_value(b) {
                Ok(v) => v,
                Err(_) => continue,
            },
        };
        match b {
            ContentBlock::ToolUse { id, .. } => v["id"] = ids.tool_use(id).into(),
            ContentBlock::ToolResult(r) => {
                v["tool_use_id"] = ids.tool_result(&r.tool_use_id).into();
                if let Some(Value::Array(parts)) = v.get_mut("content") {
                    parts.retain(|p| {
                        p.get("type").and_then(Value::as_str) != Some("text")
                            || !p.get("text").and_then(Value::as_str).is_some_and(blank)
                    });
                }
            }
            _ => {}
        }
        content.push(v);
    }
    if content.is_empty() {
        return None;
    }
    Some(json!({"role": m.role, "content": content}))
}

/// Decodes a Messages request body.
#[cfg(feature = "server")]
pub(crate) fn parse(v: &Value) -> Result<ParsedRequest, WireError> {
    let model = v
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("missing \"model\""))?
        .to_owned();
    let max_tokens = v
        .get("max_tokens")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    let system = match v.get("system") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Some(_) => {
            return Err(invalid(
                "\"system\" must be a string or an array of text blocks",
            ))
        }
    };
    let messages: Vec<Message> = match v.get("messages") {
        Some(m @ Value::Array(_)) => {
            serde_json::from_value(m.clone()).map_err(|e| invalid(&format!("\"messages\": {e}")))?
        }
        _ => return Err(invalid("missing \"messages\" array")),
    };
    let tools = match v.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools
            .iter()
            .map(|t| parse_tool_spec(t, "input_schema", "tool without a \"name\""))
            .collect::<Result<_, WireError>>()?,
        Some(_) => return Err(invalid("\"tools\" must be an array")),
    };
    Ok(ParsedRequest {
        model,
        system,
        tools,
        max_tokens,
        stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        conversation: Conversation::from(messages),
    })
}
