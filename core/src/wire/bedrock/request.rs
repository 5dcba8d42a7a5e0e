//! Converse request bodies (`POST /model/{modelId}/converse` and `…/converse-stream`), both
//! directions.
//!
//! The model id is in the URL ([`path`]), not the body; so is the choice to stream (the
//! body is the same for both operations). What goes in the body, as botocore's
//! `bedrock-runtime` service model (2023-09-30) names it:
//!
//! - `messages`: `{"role": "user" | "assistant", "content": [block, …]}`, roles
//!   alternating (Bedrock refuses two messages of one role in a row: consecutive messages of
//!   one role are merged, as happens when every block of a message between them was left
//!   out). Blocks: `{"text"}` (blank text left out: Bedrock refuses it, as Anthropic does),
//!   `{"image": {"format", "source": {"bytes"}}}`, `{"toolUse": {"toolUseId", "name",
//!   "input"}}`, `{"toolResult": {"toolUseId", "content": [{"text"} | {"image"}],
//!   "status"}}`, and signed thinking as `{"reasoningContent": {"reasoningText": {"text",
//!   "signature"}}}` or `{"reasoningContent": {"redactedContent": base64}}` — only to the
//!   target that produced it ([`ContentBlock::may_go_to`]). Unsigned thinking and OpenAI
//!   Responses reasoning items are left out.
//! - `system`: `[{"text"}]`; `toolConfig`: `{"tools": [{"toolSpec": {"name",
//!   "description", "inputSchema": {"json": schema}}}]}`; `inferenceConfig`:
//!   `{"maxTokens"}`.
//!
//! Tool-use ids: `ToolUseId` is 1 to 64 characters of `[a-zA-Z0-9_-]` in the service model
//! until 2026-04 (botocore commit eee227dd5 widened the pattern to `[a-zA-Z0-9_.:-]+`);
//! requests keep to the narrower set, which both accept and which Anthropic's models behind
//! Bedrock take too. Each id is first escaped into that set as for Anthropic
//! (`anthropic::tool_id::encode`, injective), then kept to 40 characters, unique in the
//! request, as for OpenAI (`openai::tool_id::ToolIds`, which keeps ids of at most 40 bytes
//! not starting with `rb_` and hashes the others into `rb_` and 32 hex digits). So ids
//! Bedrock minted (`tooluse_…`), Anthropic's (`toolu_…`) and OpenAI's (`call_…`) go as they
//! are; others become `rb_` and 32 hex digits; a call and its result always carry the same
//! id, and one id is never sent twice.

use crate::conversation::{
    ContentBlock, Conversation, MediaSource, Message, Role, TargetIdentity, ToolResultBlock,
    ToolResultPart,
};
#[cfg(feature = "server")]
use crate::tool::ToolSpec;
use crate::wire::anthropic::tool_id;
#[cfg(feature = "server")]
use crate::wire::invalid_request as invalid;
use crate::wire::openai::tool_id::ToolIds;
#[cfg(feature = "server")]
use crate::wire::ParsedRequest;
use crate::wire::{RequestParams, ToolIdForm, WireError};
use serde_json::{json, Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The note that replaces an image Bedrock cannot take: Converse takes images as inline
/// bytes (or an S3 location) in PNG, JPEG, GIF or WebP, never a URL.
pub(crate) const IMAGE_OMITTED: &str =
    "[image omitted: Bedrock Converse takes only inline PNG, JPEG, GIF or WebP images]";

/// The URL path of a Converse request for `model`, to append to the endpoint
/// (`https://bedrock-runtime.{region}.amazonaws.com`): `/model/{modelId}/converse-stream`
/// when `stream`, else `/model/{modelId}/converse`. The model id is a URI label, so every
/// byte outside `[A-Za-z0-9._~-]` is percent-encoded, as the AWS SDKs do (`:` in
/// `anthropic.claude-3-5-sonnet-20240620-v1:0`, `/` and `:` in an inference profile ARN).
pub(crate) fn path(model: &str, stream: bool) -> String {
    let mut out = String::with_capacity(model.len() + 24);
    out.push_str("/model/");
    crate::wire::label::push_encoded(&mut out, model);
    out.push_str(if stream {
        "/converse-stream"
    } else {
        "/converse"
    });
    out
}

/// The body for `conversation`; the caller has checked tool pairing. Refuses a conversation
/// left with no message once the blocks Bedrock rejects are dropped.
pub(crate) fn body(
    conversation: &Conversation,
    params: &RequestParams<'_>,
) -> Result<Value, WireError> {
    // Every id escaped into Bedrock's characters first (the keys `ToolIds` then keeps short
    // and unique); the map outlives the `ToolIds` that borrows from it.
    let mut escaped: BTreeMap<&str, Cow<'_, str>> = BTreeMap::new();
    for m in conversation.messages() {
        for b in &m.content {
            let id = match b {
                ContentBlock::ToolUse { id, .. } => id.as_str(),
                ContentBlock::ToolResult(r) => r.tool_use_id.as_str(),
                _ => continue,
            };
            escaped.entry(id).or_insert_with(|| tool_id::encode(id, 0));
        }
    }
    let mut ids = ToolIds::new(ToolIdForm::Standard);
    let mut messages: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in conversation.messages() {
        let content = blocks(m, params.identity, &escaped, &mut ids);
        if content.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((role, last)) if *role == m.role => last.extend(content),
            _ => messages.push((m.role, content)),
        }
    }
    if messages.is_empty() {
        return Err(WireError::EmptyConversation);
    }
    let mut body = Map::new();
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    body.insert("messages".into(), messages.into());
    if let Some(system) = params.system.filter(|s| !blank(s)) {
        body.insert("system".into(), json!([{ "text": system }]));
    }
    body.insert(
        "inferenceConfig".into(),
        json!({"maxTokens": params.max_tokens}),
    );
    if !params.tools.is_empty() {
        let tools: Vec<Value> = params
            .tools
            .iter()
            .map(|t| {
                let mut spec = Map::new();
                spec.insert("name".into(), t.name.clone().into());
                // `NonEmptyString`: an empty description is left out.
                if !t.description.is_empty() {
                    spec.insert("description".into(), t.description.clone().into());
                }
                spec.insert("inputSchema".into(), json!({"json": t.input_schema}));
                json!({ "toolSpec": spec })
            })
            .collect();
        body.insert("toolConfig".into(), json!({ "tools": tools }));
    }
    Ok(Value::Object(body))
}

/// Whether Bedrock refuses `text` in a text block: empty or only whitespace (a
/// `ValidationException`: "The text field in the ContentBlock object at messages.0.content.0
/// is blank. Add text to the text field, and try again.").
fn blank(text: &str) -> bool {
    text.trim().is_empty()
}

/// `{"image": …}` for inline data of a format Converse takes; `None` for anything else.
fn image(source: &MediaSource) -> Option<Value> {
    let MediaSource::Base64 { media_type, data } = source else {
        return None;
    };
    let format = match media_type.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => return None,
    };
    // `ImageSourceBytesBlob` has a minimum length of 1.
    if data.is_empty() {
        return None;
    }
    Some(json!({"image": {"format": format, "source": {"bytes": data}}}))
}

/// The id sent for a tool call or result with `id`.
fn sent_id<'a>(escaped: &'a BTreeMap<&str, Cow<'_, str>>, id: &str) -> &'a str {
    // Every id of the conversation was escaped before the messages are encoded.
    escaped.get(id).map_or("rb_", |e| e.as_ref())
}

/// A tool result's `content`: its text parts (blank ones left out) and images (an image
/// Bedrock cannot take becomes [`IMAGE_OMITTED`]).
fn result_content(result: &ToolResultBlock) -> Vec<Value> {
    result
        .parts
        .iter()
        .filter_map(|p| match p {
            ToolResultPart::Text { text } if blank(text) => None,
            ToolResultPart::Text { text } => Some(json!({ "text": text })),
            ToolResultPart::Image { source } => {
                Some(image(source).unwrap_or_else(|| json!({ "text": IMAGE_OMITTED })))
            }
        })
        .collect()
}

/// One message's content blocks in the Converse shape, without the blocks Bedrock would
/// refuse or must not see (see the module doc).
fn blocks<'a>(
    m: &Message,
    to: Option<&TargetIdentity>,
    escaped: &'a BTreeMap<&str, Cow<'_, str>>,
    ids: &mut ToolIds<'a>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(m.content.len());
    for b in &m.content {
        match b {
            ContentBlock::Text { text } => {
                if !blank(text) {
                    out.push(json!({ "text": text }));
                }
            }
            ContentBlock::Image { source } => {
                out.push(image(source).unwrap_or_else(|| json!({ "text": IMAGE_OMITTED })));
            }
            ContentBlock::ToolUse { id, name, input } => {
                let id = ids.tool_use(sent_id(escaped, id));
                out.push(json!({"toolUse": {"toolUseId": id, "name": name, "input": &**input}}));
            }
            ContentBlock::ToolResult(r) => {
                let mut result = Map::new();
                result.insert(
                    "toolUseId".into(),
                    ids.tool_result(sent_id(escaped, &r.tool_use_id)).into(),
                );
                result.insert("content".into(), result_content(r).into());
                // Only an error is marked: `status` is an optional field that only some
                // models take (Claude 3 and later, Nova); a success needs no mark.
                if r.is_error {
                    result.insert("status".into(), "error".into());
                }
                out.push(json!({ "toolResult": result }));
            }
            ContentBlock::Thinking {
                thinking,
                signature,
                ..
            } => {
                if !signature.is_empty() && b.may_go_to(to) {
                    out.push(json!({"reasoningContent": {"reasoningText": {
                        "text": thinking, "signature": signature,
                    }}}));
                }
            }
            ContentBlock::RedactedThinking { data, .. } => {
                if b.may_go_to(to) {
                    out.push(json!({"reasoningContent": {"redactedContent": data}}));
                }
            }
            // An OpenAI Responses reasoning item: Bedrock cannot read it.
            ContentBlock::Reasoning { .. } => {}
        }
    }
    out
}

/// The model id and whether the response streams, from a request's URL path
/// (`/model/{modelId}/converse` or `/model/{modelId}/converse-stream`, the id
/// percent-decoded), for the fake server: the body names neither.
#[cfg(feature = "server")]
pub(crate) fn parse_path(path: &str) -> Option<(String, bool)> {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let rest = path.strip_prefix("/model/")?;
    let (model, stream) = if let Some(model) = rest.strip_suffix("/converse-stream") {
        (model, true)
    } else {
        (rest.strip_suffix("/converse")?, false)
    };
    let model = crate::wire::label::decode(model)?;
    (!model.is_empty()).then_some((model, stream))
}

/// Decodes a Converse request body. The body names neither the model nor whether to stream
/// (the URL does: [`parse_path`]), so `model` is left empty and `stream` false for the
/// caller to fill in from the path. Ids are read as they are; a `toolResult` with `status`
/// `error` is an error result; blocks rebound does not model (documents, videos, cache
/// points, guard content) are skipped.
#[cfg(feature = "server")]
pub(crate) fn parse(v: &Value) -> Result<ParsedRequest, WireError> {
    let max_tokens = v
        .get("inferenceConfig")
        .and_then(|c| c.get("maxTokens"))
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    let system = match v.get("system") {
        None | Some(Value::Null) => None,
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        Some(_) => return Err(invalid("\"system\" must be an array of system blocks")),
    };
    let Some(Value::Array(items)) = v.get("messages") else {
        return Err(invalid("missing \"messages\" array"));
    };
    let mut messages = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some(other) => return Err(invalid(&format!("messages[{i}]: unknown role `{other}`"))),
            None => return Err(invalid(&format!("messages[{i}]: missing \"role\""))),
        };
        let Some(Value::Array(content)) = m.get("content") else {
            return Err(invalid(&format!(
                "messages[{i}]: missing \"content\" array"
            )));
        };
        let mut blocks = Vec::with_capacity(content.len());
        for (j, b) in content.iter().enumerate() {
            if let Some(block) =
                read_block(b).map_err(|e| invalid(&format!("messages[{i}].content[{j}]: {e}")))?
            {
                blocks.push(block);
            }
        }
        messages.push(Message {
            role,
            content: blocks,
        });
    }
    let tools = match v.get("toolConfig").and_then(|c| c.get("tools")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools
            .iter()
            // System tools and cache points are not rebound's to run.
            .filter_map(|t| t.get("toolSpec"))
            .map(|spec| {
                Ok(ToolSpec {
                    name: spec
                        .get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| invalid("toolSpec without a \"name\""))?
                        .to_owned(),
                    description: str_field(spec, "description").to_owned(),
                    input_schema: spec
                        .get("inputSchema")
                        .and_then(|s| s.get("json"))
                        .cloned()
                        .unwrap_or(Value::Null),
                })
            })
            .collect::<Result<_, WireError>>()?,
        Some(_) => return Err(invalid("\"toolConfig.tools\" must be an array")),
    };
    Ok(ParsedRequest {
        model: String::new(),
        system,
        tools,
        max_tokens,
        stream: false,
        conversation: Conversation::from(messages),
    })
}

#[cfg(feature = "server")]
fn str_field<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// An image block's source as rebound holds it: inline base64 of `image/{format}`.
#[cfg(feature = "server")]
fn read_image(image: &Value) -> Result<MediaSource, String> {
    let format = str_field(image, "format");
    let data = image
        .get("source")
        .and_then(|s| s.get("bytes"))
        .and_then(Value::as_str)
        .ok_or("image without source.bytes (S3 locations are not read)")?;
    Ok(MediaSource::Base64 {
        media_type: format!("image/{format}"),
        data: data.to_owned(),
    })
}

/// One content block of a request; `Ok(None)` for kinds rebound does not model.
#[cfg(feature = "server")]
fn read_block(b: &Value) -> Result<Option<ContentBlock>, String> {
    if let Some(text) = b.get("text").and_then(Value::as_str) {
        return Ok(Some(ContentBlock::text(text)));
    }
    if let Some(image) = b.get("image") {
        return Ok(Some(ContentBlock::Image {
            source: read_image(image)?,
        }));
    }
    if let Some(call) = b.get("toolUse") {
        let input = call.get("input").cloned().unwrap_or(Value::Null);
        return Ok(Some(ContentBlock::tool_use(
            str_field(call, "toolUseId"),
            str_field(call, "name"),
            input,
        )));
    }
    if let Some(result) = b.get("toolResult") {
        let id = result
            .get("toolUseId")
            .and_then(Value::as_str)
            .ok_or("toolResult without toolUseId")?;
        let mut parts = Vec::new();
        for p in result
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(text) = p.get("text").and_then(Value::as_str) {
                parts.push(ToolResultPart::text(text));
            } else if let Some(image) = p.get("image") {
                parts.push(ToolResultPart::Image {
                    source: read_image(image)?,
                });
            } else if let Some(json) = p.get("json") {
                parts.push(ToolResultPart::text(json.to_string()));
            }
        }
        return Ok(Some(ContentBlock::tool_result(
            id,
            parts,
            str_field(result, "status") == "error",
        )));
    }
    if let Some(reasoning) = b.get("reasoningContent") {
        if let Some(text) = reasoning.get("reasoningText") {
            return Ok(Some(ContentBlock::thinking(
                str_field(text, "text"),
                str_field(text, "signature"),
            )));
        }
        if let Some(data) = reasoning.get("redactedContent").and_then(Value::as_str) {
            return Ok(Some(ContentBlock::redacted_thinking(data)));
        }
        return Err("reasoningContent without reasoningText or redactedContent".to_owned());
    }
    Ok(None)
}
