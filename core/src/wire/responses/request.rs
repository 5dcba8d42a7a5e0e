//! Responses request bodies (`POST {base}/responses`), both directions.
//!
//! Requests are stateless: `store: false`, and `include: ["reasoning.encrypted_content"]` so
//! reasoning items come back with their encrypted content and can be passed back whole;
//! nothing refers to a response stored on the server (`previous_response_id` is never sent).

use crate::conversation::{
    ContentBlock, Conversation, MediaSource, Message, Role, TargetIdentity, ToolResultBlock,
    ToolResultPart,
};
use crate::wire::openai::tool_id::ToolIds;
#[cfg(feature = "server")]
use crate::wire::ParsedRequest;
#[cfg(feature = "server")]
use crate::wire::{invalid_request as invalid, parse_tool_spec};
use crate::wire::{RequestParams, WireError};
use serde_json::{json, Map, Value};

/// The body for `conversation`; the caller has checked tool pairing. Refuses a conversation
/// that leaves no input item to send.
pub(crate) fn body(
    conversation: &Conversation,
    params: &RequestParams<'_>,
) -> Result<Value, WireError> {
    let mut input = Vec::new();
    let mut ids = ToolIds::new(params.tool_ids);
    for m in conversation.messages() {
        match m.role {
            Role::User => user_items(m, &ids, &mut input),
            Role::Assistant => assistant_items(m, params.identity, &mut ids, &mut input),
        }
    }
    if input.is_empty() {
        return Err(WireError::EmptyConversation);
    }
    let mut body = Map::new();
    body.insert("model".into(), params.model.into());
    if let Some(system) = params.system {
        body.insert("instructions".into(), system.into());
    }
    body.insert("input".into(), input.into());
    body.insert("max_output_tokens".into(), params.max_tokens.into());
    if !params.tools.is_empty() {
        let tools: Vec<Value> = params
            .tools
            .iter()
            .map(|t| {
                // Function tools are strict by default in this API, which refuses schemas
                // that are not in its strict subset; rebound's tools are plain JSON Schema.
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), tools.into());
    }
    body.insert("store".into(), false.into());
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    body.insert("stream".into(), params.stream.into());
    Ok(Value::Object(body))
}

fn image_url(source: &MediaSource) -> String {
    match source {
        MediaSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        MediaSource::Url { url } => url.clone(),
    }
}

fn input_image(source: &MediaSource) -> Value {
    json!({"type": "input_image", "image_url": image_url(source), "detail": "auto"})
}

/// A tool result's `output`: its text, or (when it holds images) a list of `input_text` and
/// `input_image` parts.
fn tool_output(result: &ToolResultBlock) -> Value {
    let has_image = result
        .parts
        .iter()
        .any(|p| matches!(p, ToolResultPart::Image { .. }));
    if !has_image {
        return result.text().into();
    }
    result
        .parts
        .iter()
        .map(|p| match p {
            ToolResultPart::Text { text } => json!({"type": "input_text", "text": text}),
            ToolResultPart::Image { source } => input_image(source),
        })
        .collect::<Vec<_>>()
        .into()
}

/// Tool results become `function_call_output` items (first, as pairing requires), the rest
/// one user `message` item of `input_text` and `input_image` parts.
fn user_items(m: &Message, ids: &ToolIds<'_>, out: &mut Vec<Value>) {
    for r in m.tool_results() {
        out.push(json!({
            "type": "function_call_output",
            "call_id": ids.tool_result(&r.tool_use_id),
            "output": tool_output(r),
        }));
    }
    let parts: Vec<Value> = m
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } if !text.is_empty() => {
                Some(json!({"type": "input_text", "text": text}))
            }
            ContentBlock::Image { source } => Some(input_image(source)),
            _ => None,
        })
        .collect();
    if !parts.is_empty() {
        out.push(json!({"type": "message", "role": "user", "content": parts}));
    }
}

/// Blocks in order: consecutive text blocks as one assistant `message` item, tool calls as
/// `function_call` items, reasoning items exactly as received (those another target owns
/// left out: [`ContentBlock::may_go_to`]); thinking (another provider's) left out.
///
/// An assistant message's text is sent as a string, joined without a separator as for Chat
/// (the API's `EasyInputMessage`): OpenAI's OpenAPI description takes `output_text` parts
/// only in an `OutputMessage`, which needs the `id` and `status` of a stored response and
/// `annotations` and `logprobs` in each part, none of which a stateless request has.
fn assistant_items<'a>(
    m: &'a Message,
    to: Option<&TargetIdentity>,
    ids: &mut ToolIds<'a>,
    out: &mut Vec<Value>,
) {
    let mut text = String::new();
    let flush = |text: &mut String, out: &mut Vec<Value>| {
        if !text.is_empty() {
            out.push(json!({
                "type": "message",
                "role": "assistant",
                "content": std::mem::take(text),
            }));
        }
    };
    for b in &m.content {
        match b {
            ContentBlock::Text { text: t } => text.push_str(t),
            ContentBlock::ToolUse { id, name, input } => {
                flush(&mut text, out);
                out.push(json!({
                    "type": "function_call",
                    "call_id": ids.tool_use(id),
                    "name": name,
                    "arguments": input.to_string(),
                }));
            }
            ContentBlock::Reasoning { item, .. } => {
                // Only OpenAI's own items: a Gemini thought signature is another kind.
                if b.may_go_to(to) && item.get("type").and_then(Value::as_str) == Some("reasoning")
                {
                    flush(&mut text, out);
                    out.push(item.clone());
                }
            }
            ContentBlock::Thinking { .. }
            | ContentBlock::RedactedThinking { .. }
            | ContentBlock::ToolResult(_)
            | ContentBlock::Image { .. } => {}
        }
    }
    flush(&mut text, out);
}

/// Decodes a Responses request body: `instructions` and system/developer messages are the
/// system prompt; assistant messages, `function_call` and `reasoning` items in a row make
/// one assistant message; `function_call_output` items, and a user message right after
/// them, one user message (results first), which is how rebound holds them.
#[cfg(feature = "server")]
pub(crate) fn parse(v: &Value) -> Result<ParsedRequest, WireError> {
    let model = v
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("missing \"model\""))?
        .to_owned();
    let max_tokens = v
        .get("max_output_tokens")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    let mut system: Vec<String> = Vec::new();
    if let Some(instructions) = v.get("instructions").and_then(Value::as_str) {
        if !instructions.is_empty() {
            system.push(instructions.to_owned());
        }
    }
    let mut messages: Vec<Message> = Vec::new();
    match v.get("input") {
        Some(Value::String(text)) => messages.push(Message::user_text(text.clone())),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                read_item(item, i, &mut system, &mut messages)?;
            }
        }
        _ => return Err(invalid("missing \"input\" (a string or an array of items)")),
    }
    let tools = match v.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools
            .iter()
            // Built-in tools (web search, file search, …) are not rebound's to run.
            .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
            .map(|t| parse_tool_spec(t, "parameters", "function tool without a \"name\""))
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

/// Appends `block` to the last message when it has `role` (and, for a user message, holds
/// only tool results so far when `after_results`), else to a new message.
#[cfg(feature = "server")]
fn push_block(messages: &mut Vec<Message>, role: Role, block: ContentBlock, after_results: bool) {
    match messages.last_mut() {
        Some(last) if last.role == role && (!after_results || only_results(last)) => {
            last.content.push(block);
        }
        _ => messages.push(Message {
            role,
            content: vec![block],
        }),
    }
}

#[cfg(feature = "server")]
fn read_item(
    item: &Value,
    i: usize,
    system: &mut Vec<String>,
    messages: &mut Vec<Message>,
) -> Result<(), WireError> {
    let ty = item.get("type").and_then(Value::as_str);
    let role = item.get("role").and_then(Value::as_str);
    match (ty, role) {
        (Some("message") | None, Some(role)) => {
            let content = item.get("content").unwrap_or(&Value::Null);
            let blocks = content_blocks(content, i)?;
            match role {
                "system" | "developer" => system.push(
                    blocks
                        .iter()
                        .filter_map(|b| match b {
                            ContentBlock::Text { text } => Some(text.as_str()),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                "user" => match messages.last_mut() {
                    Some(last) if only_results(last) => last.content.extend(blocks),
                    _ => messages.push(Message {
                        role: Role::User,
                        content: blocks,
                    }),
                },
                "assistant" => {
                    for b in blocks {
                        push_block(messages, Role::Assistant, b, false);
                    }
                    // An assistant message with no text still marks the turn.
                    if messages.last().map(|m| m.role) != Some(Role::Assistant) {
                        messages.push(Message {
                            role: Role::Assistant,
                            content: Vec::new(),
                        });
                    }
                }
                other => return Err(invalid(&format!("input[{i}]: unknown role `{other}`"))),
            }
        }
        (Some("function_call"), _) => {
            let field = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or_default();
            let id = field("call_id");
            let args = field("arguments");
            let input = if args.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(args).map_err(|e| {
                    invalid(&format!("input[{i}]: function_call `{id}` arguments: {e}"))
                })?
            };
            let block = ContentBlock::tool_use(id, field("name"), input);
            push_block(messages, Role::Assistant, block, false);
        }
        (Some("reasoning"), _) => {
            let block = ContentBlock::reasoning(item.clone());
            push_block(messages, Role::Assistant, block, false);
        }
        (Some("function_call_output"), _) => {
            let id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| {
                invalid(&format!("input[{i}]: function_call_output without call_id"))
            })?;
            let parts = match item.get("output") {
                Some(Value::String(s)) if s.is_empty() => Vec::new(),
                Some(Value::String(s)) => vec![ToolResultPart::text(s.clone())],
                Some(output @ Value::Array(_)) => content_blocks(output, i)?
                    .into_iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { text } => Some(ToolResultPart::Text { text }),
                        ContentBlock::Image { source } => Some(ToolResultPart::Image { source }),
                        _ => None,
                    })
                    .collect(),
                _ => {
                    return Err(invalid(&format!(
                        "input[{i}]: function_call_output `output` must be a string or an array"
                    )))
                }
            };
            // Responses has no error flag: a result in core's error words is read as one.
            let is_error = parts.first().is_some_and(
                |p| matches!(p, ToolResultPart::Text { text } if crate::tool::reads_as_tool_error(text)),
            );
            let block = ContentBlock::ToolResult(ToolResultBlock {
                tool_use_id: id.to_owned(),
                parts,
                is_error,
            });
            push_block(messages, Role::User, block, true);
        }
        (Some(other), _) => {
            return Err(invalid(&format!(
                "input[{i}]: unsupported item type `{other}`"
            )))
        }
        (None, None) => return Err(invalid(&format!("input[{i}]: item without type or role"))),
    }
    Ok(())
}

#[cfg(feature = "server")]
fn only_results(m: &Message) -> bool {
    m.role == Role::User
        && !m.content.is_empty()
        && m.content
            .iter()
            .all(|b| matches!(b, ContentBlock::ToolResult(_)))
}

/// Message content: a string or an array of `input_text` / `output_text` / `refusal` /
/// `input_image` parts (other parts, such as files, are skipped).
#[cfg(feature = "server")]
fn content_blocks(content: &Value, i: usize) -> Result<Vec<ContentBlock>, WireError> {
    match content {
        Value::Null => Ok(Vec::new()),
        Value::String(s) if s.is_empty() => Ok(Vec::new()),
        Value::String(s) => Ok(vec![ContentBlock::text(s.clone())]),
        Value::Array(parts) => Ok(parts
            .iter()
            .filter_map(|p| {
                let text = |key: &str| p.get(key).and_then(Value::as_str).unwrap_or_default();
                match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text") => Some(ContentBlock::text(text("text"))),
                    Some("refusal") => Some(ContentBlock::text(text("refusal"))),
                    Some("input_image") => Some(ContentBlock::Image {
                        source: media_source(text("image_url")),
                    }),
                    _ => None,
                }
            })
            .collect()),
        _ => Err(invalid(&format!(
            "input[{i}]: content must be a string or an array"
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
