//! Gemini `GenerateContentRequest` bodies, both directions.
//!
//! The model and whether to stream are in the URL ([`super::path`]), not the body.

use super::{schema, signature_of, FOREIGN_SIGNATURE, SIGNATURE};
use crate::conversation::{
    ContentBlock, Conversation, MediaSource, Message, Role, TargetIdentity, ToolResultBlock,
    ToolResultPart,
};
#[cfg(feature = "server")]
use crate::wire::invalid_request as invalid;
#[cfg(feature = "server")]
use crate::wire::ParsedRequest;
use crate::wire::{RequestParams, WireError};
use serde_json::{json, Map, Value};
use std::collections::HashMap;

/// The body for `conversation`; the caller has checked tool pairing. Refuses a conversation
/// that leaves no content to send.
pub(crate) fn body(
    conversation: &Conversation,
    params: &RequestParams<'_>,
) -> Result<Value, WireError> {
    let mut contents: Vec<Value> = Vec::new();
    // The name of each call, for its `functionResponse` (Gemini pairs by name and order).
    let mut names: HashMap<&str, &str> = HashMap::new();
    for m in conversation.messages() {
        let (role, parts) = match m.role {
            Role::User => ("user", user_parts(m, &names)),
            Role::Assistant => {
                for block in &m.content {
                    if let ContentBlock::ToolUse { id, name, .. } = block {
                        names.insert(id, name);
                    }
                }
                ("model", model_parts(m, params.identity))
            }
        };
        if parts.is_empty() {
            continue;
        }
        // Turns alternate: a message of the same role as the one before joins it.
        match contents.last_mut() {
            Some(last) if last["role"] == role => {
                if let Some(Value::Array(existing)) = last.get_mut("parts") {
                    existing.extend(parts);
                }
            }
            _ => contents.push(json!({"role": role, "parts": parts})),
        }
    }
    if contents.is_empty() {
        return Err(WireError::EmptyConversation);
    }
    let mut body = Map::new();
    body.insert("contents".into(), contents.into());
    if let Some(system) = params.system {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    if !params.tools.is_empty() {
        let declarations: Vec<Value> = params
            .tools
            .iter()
            .map(|t| {
                let mut d = json!({"name": t.name, "description": t.description});
                if let Some(p) = schema::parameters(&t.input_schema) {
                    d["parameters"] = p;
                }
                d
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
    }
    body.insert(
        "generationConfig".into(),
        json!({"maxOutputTokens": params.max_tokens}),
    );
    Ok(Value::Object(body))
}

/// An image as a part: inline data, or a URI the API fetches.
fn image(source: &MediaSource) -> Value {
    match source {
        MediaSource::Base64 { media_type, data } => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
        MediaSource::Url { url } => match image_type(url) {
            Some(mime) => json!({"fileData": {"mimeType": mime, "fileUri": url}}),
            None => json!({"fileData": {"fileUri": url}}),
        },
    }
}

/// The media type of an image URL, from its extension (the description calls `fileData`'s
/// `mimeType` required); `None` when the URL does not say.
fn image_type(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => return None,
    })
}

/// A user message's parts: text, images, and each tool result as a `functionResponse`
/// (`{"output": text}`, or `{"error": text}` for a failed call, the keys the API's
/// description names for a function's output and its error) followed by the result's images
/// as parts of their own.
fn user_parts(m: &Message, names: &HashMap<&str, &str>) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut images = Vec::new();
    for block in &m.content {
        match block {
            ContentBlock::Text { text } if !text.is_empty() => parts.push(json!({"text": text})),
            ContentBlock::Image { source } => parts.push(image(source)),
            ContentBlock::ToolResult(result) => {
                parts.push(function_response(result, names));
                images.extend(result.parts.iter().filter_map(|p| match p {
                    ToolResultPart::Image { source } => Some(image(source)),
                    ToolResultPart::Text { .. } => None,
                }));
            }
            _ => {}
        }
    }
    parts.extend(images);
    parts
}

fn function_response(result: &ToolResultBlock, names: &HashMap<&str, &str>) -> Value {
    let name = names
        .get(result.tool_use_id.as_str())
        .copied()
        .unwrap_or_default();
    let key = if result.is_error { "error" } else { "output" };
    json!({"functionResponse": {"name": name, "response": {key: result.text()}}})
}

/// A model message's parts: text, function calls, and the thought signatures this target
/// produced on the parts they came with; thinking and other providers' reasoning are left
/// out. A turn whose first call carries no signature gets [`FOREIGN_SIGNATURE`] on it.
fn model_parts(m: &Message, to: Option<&TargetIdentity>) -> Vec<Value> {
    let mut parts: Vec<Value> = Vec::new();
    let mut pending: Option<&str> = None;
    let mut first_call = true;
    for block in &m.content {
        let mut part = match block {
            ContentBlock::Text { text } if !text.is_empty() => json!({"text": text}),
            ContentBlock::ToolUse { name, input, .. } => {
                let mut part = json!({"functionCall": {"name": name, "args": &**input}});
                if first_call && pending.is_none() {
                    part[SIGNATURE] = FOREIGN_SIGNATURE.into();
                }
                first_call = false;
                part
            }
            ContentBlock::Reasoning { item, .. } if block.may_go_to(to) => {
                if let Some(signature) = signature_of(item) {
                    if let Some(earlier) = pending.replace(signature) {
                        parts.push(json!({"text": "", SIGNATURE: earlier}));
                    }
                }
                continue;
            }
            _ => continue,
        };
        if let Some(signature) = pending.take() {
            part[SIGNATURE] = signature.into();
        }
        parts.push(part);
    }
    if let Some(signature) = pending {
        parts.push(json!({"text": "", SIGNATURE: signature}));
    }
    parts
}

/// Reads a request body back (the fake server): `model` is left empty and `stream` false,
/// both being in the URL ([`super::parse_path`]). Calls get the ids
/// `gc_{message}_{part}`; each `functionResponse` answers the first unanswered call of the
/// turn before it with its name. Thought signatures come back as reasoning items before
/// their part, as the stream decoder makes them, except [`FOREIGN_SIGNATURE`], which is
/// not Gemini's.
#[cfg(feature = "server")]
pub(crate) fn parse(v: &Value) -> Result<ParsedRequest, WireError> {
    let contents = v
        .get("contents")
        .and_then(Value::as_array)
        .ok_or_else(|| invalid("missing \"contents\""))?;
    let mut messages = Vec::with_capacity(contents.len());
    let mut open_calls: Vec<(String, String)> = Vec::new();
    for (n, content) in contents.iter().enumerate() {
        let role = match content.get("role").and_then(Value::as_str) {
            Some("model") => Role::Assistant,
            Some("user") | None => Role::User,
            Some(other) => return Err(invalid(&format!("unknown role {other:?}"))),
        };
        let parts = content
            .get("parts")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(&format!("contents[{n}] has no \"parts\"")))?;
        let mut blocks = Vec::new();
        let mut calls = Vec::new();
        for (k, part) in parts.iter().enumerate() {
            if let Some(signature) = part.get(SIGNATURE).and_then(Value::as_str) {
                if signature != FOREIGN_SIGNATURE && role == Role::Assistant {
                    blocks.push(ContentBlock::reasoning(json!({SIGNATURE: signature})));
                }
            }
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                if part.get("thought").and_then(Value::as_bool) == Some(true) {
                    blocks.push(ContentBlock::thinking(text, ""));
                } else if !text.is_empty() {
                    blocks.push(ContentBlock::text(text));
                }
            } else if let Some(call) = part.get("functionCall") {
                let name = call.get("name").and_then(Value::as_str).ok_or_else(|| {
                    invalid(&format!("contents[{n}].parts[{k}]: call has no name"))
                })?;
                let id = call
                    .get("id")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("gc_{n}_{k}"), str::to_owned);
                let args = call.get("args").cloned().unwrap_or_else(|| json!({}));
                calls.push((id.clone(), name.to_owned()));
                blocks.push(ContentBlock::tool_use(id, name, args));
            } else if let Some(response) = part.get("functionResponse") {
                let name = response.get("name").and_then(Value::as_str).unwrap_or("");
                let at = open_calls
                    .iter()
                    .position(|(_, called)| called == name)
                    .ok_or_else(|| {
                        invalid(&format!(
                            "contents[{n}].parts[{k}]: functionResponse {name:?} answers no call"
                        ))
                    })?;
                let (id, _) = open_calls.remove(at);
                let answer = response.get("response");
                let (text, is_error) = match answer.and_then(|a| a.get("error")) {
                    Some(e) => (as_text(e), true),
                    None => (
                        answer
                            .and_then(|a| a.get("result").or(a.get("output")))
                            .map_or_else(|| answer.map(as_text).unwrap_or_default(), as_text),
                        false,
                    ),
                };
                blocks.push(ContentBlock::tool_result(
                    id,
                    vec![ToolResultPart::text(text)],
                    is_error,
                ));
            } else if let Some(data) = part.get("inlineData") {
                let field = |k| data.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                blocks.push(ContentBlock::Image {
                    source: MediaSource::Base64 {
                        media_type: field("mimeType"),
                        data: field("data"),
                    },
                });
            } else if let Some(uri) = part
                .get("fileData")
                .and_then(|f| f.get("fileUri"))
                .and_then(Value::as_str)
            {
                blocks.push(ContentBlock::Image {
                    source: MediaSource::Url {
                        url: uri.to_owned(),
                    },
                });
            }
        }
        if role == Role::Assistant {
            open_calls = calls;
        }
        messages.push(Message {
            role,
            content: blocks,
        });
    }
    let system = v
        .get("systemInstruction")
        .and_then(|s| s.get("parts"))
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        });
    let mut tools = Vec::new();
    for group in v
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for d in group
            .get("functionDeclarations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = d
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("a function declaration has no name"))?;
            let input_schema = match (d.get("parametersJsonSchema"), d.get("parameters")) {
                (Some(s), _) => s.clone(),
                (None, Some(s)) => schema::to_json_schema(s),
                (None, None) => json!({"type": "object", "properties": {}}),
            };
            tools.push(crate::tool::ToolSpec {
                name: name.to_owned(),
                description: d
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                input_schema,
            });
        }
    }
    let max_tokens = v
        .get("generationConfig")
        .and_then(|c| c.get("maxOutputTokens"))
        .and_then(Value::as_u64)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    Ok(ParsedRequest {
        model: String::new(),
        system,
        tools,
        max_tokens,
        stream: false,
        conversation: Conversation::from(messages),
    })
}

/// A function's answer as text: a string as it is, anything else as JSON.
#[cfg(feature = "server")]
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
