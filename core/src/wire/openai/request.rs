//! Chat Completions request bodies (`POST {base}/chat/completions`), both directions.

use crate::conversation::{
    ContentBlock, Conversation, MediaSource, Message, Role, ToolResultBlock, ToolResultPart,
};
use crate::wire::openai::tool_id::ToolIds;
#[cfg(feature = "server")]
use crate::wire::ParsedRequest;
#[cfg(feature = "server")]
use crate::wire::{invalid_request as invalid, parse_tool_spec};
use crate::wire::{RequestParams, WireError};
use serde_json::{json, Map, Value};

/// The note that replaces an image in a tool result: Chat tool messages carry text only.
pub(crate) const TOOL_IMAGE_NOTE: &str =
    "[image omitted: Chat Completions tool messages cannot carry images]";

/// The body for `conversation`; the caller has checked tool pairing. Refuses a conversation
/// that leaves no message to send besides the system prompt (the API answers 400 "[] is too
/// short - 'messages'" to an empty list).
pub(crate) fn body(
    conversation: &Conversation,
    params: &RequestParams<'_>,
) -> Result<Value, WireError> {
    let mut messages = Vec::new();
    let mut ids = ToolIds::new(params.tool_ids);
    for m in conversation.messages() {
        match m.role {
            Role::User => user_messages(m, &ids, &mut messages),
            Role::Assistant => messages.extend(assistant_message(m, &mut ids)),
        }
    }
    if messages.is_empty() {
        return Err(WireError::EmptyConversation);
    }
    if let Some(system) = params.system {
        messages.insert(0, json!({"role": "system", "content": system}));
    }
    let mut body = Map::new();
    body.insert("model".into(), params.model.into());
    body.insert("messages".into(), messages.into());
    body.insert("max_completion_tokens".into(), params.max_tokens.into());
    if !params.tools.is_empty() {
        let tools: Vec<Value> = params
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), tools.into());
    }
    body.insert("stream".into(), params.stream.into());
    if params.stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(body))
}

/// The content of the `tool` message answering one call.
pub(crate) fn tool_message_text(result: &ToolResultBlock) -> String {
    let parts: Vec<&str> = result
        .parts
        .iter()
        .map(|p| match p {
            ToolResultPart::Text { text } => text.as_str(),
            ToolResultPart::Image { .. } => TOOL_IMAGE_NOTE,
        })
        .collect();
    parts.join("\n")
}

fn image_url(source: &MediaSource) -> String {
    match source {
        MediaSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        MediaSource::Url { url } => url.clone(),
    }
}

/// Tool results become `tool` messages (first, as pairing requires), the rest one user
/// message: a plain string when it is a single text, else text and `image_url` parts.
fn user_messages(m: &Message, ids: &ToolIds<'_>, out: &mut Vec<Value>) {
    for r in m.tool_results() {
        out.push(json!({
            "role": "tool",
            "tool_call_id": ids.tool_result(&r.tool_use_id),
            "content": tool_message_text(r),
        }));
    }
    let rest: Vec<&ContentBlock> = m
        .content
        .iter()
        .filter(|b| match b {
            ContentBlock::Text { text } => !text.is_empty(),
            ContentBlock::Image { .. } => true,
            _ => false,
        })
        .collect();
    match rest.as_slice() {
        [] => {}
        [ContentBlock::Text { text }] => out.push(json!({"role": "user", "content": text})),
        blocks => {
            let parts: Vec<Value> = blocks
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(json!({"type": "text", "text": text})),
                    ContentBlock::Image { source } => Some(json!({
                        "type": "image_url",
                        "image_url": {"url": image_url(source)},
                    })),
                    _ => None,
                })
                .collect();
            out.push(json!({"role": "user", "content": parts}));
        }
    }
}

/// Text joined, tool calls with their arguments as JSON strings; thinking left out.
fn assistant_message<'a>(m: &'a Message, ids: &mut ToolIds<'a>) -> Option<Value> {
    let text: String = m
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let calls: Vec<Value> = m
        .tool_uses()
        .map(|(id, name, input)| {
            json!({
                "id": ids.tool_use(id),
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })
        })
        .collect();
    if text.is_empty() && calls.is_empty() {
        return None;
    }
    let mut msg = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !calls.is_empty() {
        msg["tool_calls"] = calls.into();
    }
    Some(msg)
}

/// Decodes a Chat Completions request body. `tool` messages, and a user message right after
/// them, become one user message (results first), which is how rebound holds them.
#[cfg(feature = "server")]
pub(crate) fn parse(v: &Value) -> Result<ParsedRequest, WireError> {
    let model = v
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("missing \"model\""))?
        .to_owned();
    let max_tokens = v
        .get("max_completion_tokens")
        .and_then(Value::as_u64)
        .or_else(|| v.get("max_tokens").and_then(Value::as_u64))
        .and_then(|n| u32::try_from(n).ok());
    let raw = v
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("missing \"messages\" array"))?;
    let mut system: Vec<String> = Vec::new();
    let mut messages: Vec<Message> = Vec::new();
    for (i, m) in raw.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = m.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => system.push(
                content_blocks(content, i)?
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            "user" => {
                let blocks = content_blocks(content, i)?;
                match messages.last_mut() {
                    Some(last) if only_results(last) => last.content.extend(blocks),
                    _ => messages.push(Message {
                        role: Role::User,
                        content: blocks,
                    }),
                }
            }
            "tool" => {
                let id = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        invalid(&format!("message {i}: tool message without tool_call_id"))
                    })?;
                let text: String = content_blocks(content, i)?
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                // Chat has no error flag: a result in core's error words is read as one.
                let is_error = crate::tool::reads_as_tool_error(&text);
                let parts = if text.is_empty() {
                    Vec::new()
                } else {
                    vec![ToolResultPart::Text { text }]
                };
                let block = ContentBlock::ToolResult(ToolResultBlock {
                    tool_use_id: id.to_owned(),
                    parts,
                    is_error,
                });
                match messages.last_mut() {
                    Some(last) if only_results(last) => last.content.push(block),
                    _ => messages.push(Message {
                        role: Role::User,
                        content: vec![block],
                    }),
                }
            }
            "assistant" => {
                let mut blocks = content_blocks(content, i)?;
                if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                    for call in calls {
                        let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
                        let function = call.get("function").unwrap_or(&Value::Null);
                        let name = function
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        let args = function
                            .get("arguments")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        let input = if args.trim().is_empty() {
                            Value::Object(Map::new())
                        } else {
                            serde_json::from_str(args).map_err(|e| {
                                invalid(&format!("message {i}: tool call `{id}` arguments: {e}"))
                            })?
                        };
                        blocks.push(ContentBlock::tool_use(id, name, input));
                    }
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content: blocks,
                });
            }
            other => return Err(invalid(&format!("message {i}: unknown role `{other}`"))),
        }
    }
    let tools = match v.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools
            .iter()
            .map(|t| {
                let f = t.get("function").unwrap_or(&Value::Null);
                parse_tool_spec(f, "parameters", "tool without a function name")
            })
            .collect::<Result<_, WireError>>()?,
        Some(_) => return Err(invalid("\"tools\" must be an array")),
    };
    Ok(ParsedRequest {
        model,
        system: (!system.is_empty()).then(|| system.join("\n")),
        tools,
        max_tokens,
        stream: v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        conversation: Conversation::from(messages),
    })
}

#[cfg(feature = "server")]
fn only_results(m: &Message) -> bool {
    m.role == Role::User
        && !m.content.is_empty()
        && m.content
            .iter()
            .all(|b| matches!(b, ContentBlock::ToolResult(_)))
}

/// Message content: a string, null, or an array of `text` / `image_url` parts.
#[cfg(feature = "server")]
fn content_blocks(content: &Value, i: usize) -> Result<Vec<ContentBlock>, WireError> {
    match content {
        Value::Null => Ok(Vec::new()),
        Value::String(s) if s.is_empty() => Ok(Vec::new()),
        Value::String(s) => Ok(vec![ContentBlock::text(s.clone())]),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => Some(Ok(ContentBlock::text(
                    p.get("text").and_then(Value::as_str).unwrap_or_default(),
                ))),
                Some("image_url") => {
                    let url = p
                        .get("image_url")
                        .and_then(|u| u.get("url"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    Some(Ok(ContentBlock::Image {
                        source: media_source(url),
                    }))
                }
                _ => None,
            })
            .collect(),
        _ => Err(invalid(&format!(
            "message {i}: content must be a string, null or an array"
        ))),
    }
}

/// A `data:` URL becomes inline base64 data; anything else stays a URL.
#[cfg(feature = "server")]
fn media_source(url: &str) -> MediaSource {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((media_type, data)) = rest.split_once(";base64,") {
            return MediaSource::Base64 {
                media_type: media_type.to_owned(),
                data: data.to_owned(),
            };
        }
    }
    MediaSource::Url {
        url: url.to_owned(),
    }
}
