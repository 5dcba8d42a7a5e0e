//! The conversation model: messages made of text, tool-use, tool-result and media blocks.
//!
//! The serde shape is Anthropic's Messages shape, so a saved session is readable and portable:
//!
//! ```
//! use rebound_core::{ContentBlock, Message, Role};
//!
//! let m: Message = serde_json::from_str(r#"{"role":"user","content":"hello"}"#).unwrap();
//! assert_eq!(m.role, Role::User);
//! assert_eq!(m.content, vec![ContentBlock::text("hello")]);
//! ```

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person, or tool results sent back on their side of the exchange.
    User,
    /// The model.
    Assistant,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        })
    }
}

/// Where the bytes of an image (or other media) come from, in Anthropic's `source` shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum MediaSource {
    /// Inline base64 data with its media type, e.g. `image/png`.
    Base64 {
        /// The IANA media type, e.g. `image/png`.
        media_type: String,
        /// Base64-encoded bytes.
        data: String,
    },
    /// A URL the provider fetches itself.
    Url {
        /// The URL.
        url: String,
    },
}

impl MediaSource {
    /// The media type when it is known (inline data), e.g. `image/png`.
    #[must_use]
    pub fn media_type(&self) -> Option<&str> {
        match self {
            MediaSource::Base64 { media_type, .. } => Some(media_type),
            MediaSource::Url { .. } => None,
        }
    }
}

/// Who produced a piece of encrypted reasoning or signed thinking: an opaque identity of a
/// target, the same for the same provider kind, base URL and credentials (API key,
/// organisation), different otherwise.
///
/// Encrypted reasoning goes back only to the target that produced it: OpenAI answers
/// another organisation's (or key's) `encrypted_content` with 400
/// `invalid_encrypted_content`, Anthropic another's thinking signature with 400 "Invalid
/// `signature` in `thinking` block". So the machine records the current target's identity
/// ([`TargetSpec::identity`](crate::TargetSpec::identity)) on every such block of an
/// assistant message it appends, sessions keep it, and the request builders leave out the
/// blocks another identity owns ([`RequestParams::identity`](crate::wire::RequestParams)).
///
/// It is data, made by the driver: the tokio runner's HTTP providers derive it from the
/// provider kind, the base URL and a keyed hash of the key and extra headers, never the key
/// itself (it is written into sessions and traces). Core only compares identities.
///
/// ```
/// use rebound_core::{ContentBlock, TargetIdentity};
/// use serde_json::json;
///
/// let ours = TargetIdentity::new("openai_responses:1f2e3d");
/// let theirs = TargetIdentity::new("openai_responses:9a8b7c");
/// let item = ContentBlock::Reasoning {
///     item: json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA…"}),
///     owner: Some(ours.clone()),
/// };
/// assert!(item.may_go_to(Some(&ours)));
/// assert!(!item.may_go_to(Some(&theirs)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TargetIdentity(Arc<str>);

impl TargetIdentity {
    /// An identity from its text (opaque: only compared).
    #[must_use]
    pub fn new(identity: impl Into<Arc<str>>) -> Self {
        TargetIdentity(identity.into())
    }

    /// The identity's text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TargetIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One part of a tool result: text or an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolResultPart {
    /// Text shown to the model.
    Text {
        /// The text.
        text: String,
    },
    /// An image shown to the model.
    Image {
        /// Where the image bytes are.
        source: MediaSource,
    },
}

impl ToolResultPart {
    /// A text part.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        ToolResultPart::Text { text: text.into() }
    }

    /// The text of a text part; `None` for an image (or another kind of part).
    #[must_use]
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ToolResultPart::Text { text } => Some(text),
            ToolResultPart::Image { .. } => None,
        }
    }
}

/// The answer to one `tool_use` block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultBlock {
    /// The `id` of the `tool_use` block this answers.
    pub tool_use_id: String,
    /// What the tool returned (or the error text when `is_error`).
    #[serde(
        rename = "content",
        default,
        deserialize_with = "deserialize_result_parts"
    )]
    pub parts: Vec<ToolResultPart>,
    /// Whether the tool failed; sessions written before this flag existed read as `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolResultBlock {
    /// All text parts joined by newlines (images are skipped).
    #[must_use]
    pub fn text(&self) -> String {
        join_text(self.parts.iter().filter_map(|p| match p {
            ToolResultPart::Text { text } => Some(text.as_str()),
            ToolResultPart::Image { .. } => None,
        }))
    }
}

/// One block of message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call made by the model.
    ToolUse {
        /// The provider-assigned call id, echoed by the matching result.
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments: a JSON object (an empty object when the model's input was unusable).
        /// Shared with the [`ToolCall`](crate::ToolCall) that runs it: large inputs (a file
        /// to write) are not copied.
        input: Arc<Value>,
    },
    /// The result of a tool call, sent back in the next user message.
    ToolResult(ToolResultBlock),
    /// An image.
    Image {
        /// Where the image bytes are.
        source: MediaSource,
    },
    /// Extended thinking from the model, passed back verbatim on later requests — when
    /// signed, only to the target that produced it (see [`TargetIdentity`]).
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature over the thinking; empty when the provider gave none.
        #[serde(default)]
        signature: String,
        /// The target that produced it; `None` in sessions written before provenance was
        /// kept (and for targets that have no identity): an unknown owner.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<TargetIdentity>,
    },
    /// Extended thinking the provider encrypted whole (Anthropic's `redacted_thinking`, when
    /// its safety systems flag the reasoning): nothing to show, passed back verbatim on later
    /// requests, only to the target that produced it (see [`TargetIdentity`]). In a tool loop
    /// with thinking enabled it counts as the thinking the last assistant turn must start with.
    RedactedThinking {
        /// The encrypted thinking, as the provider sent it.
        data: String,
        /// The target that produced it; `None` for a block of unknown owner.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<TargetIdentity>,
    },
    /// An OpenAI Responses `reasoning` output item, kept exactly as received (its `id`,
    /// `summary`, `encrypted_content`, …) and sent back unchanged to the Responses API on
    /// later requests, only to the target that produced it (see [`TargetIdentity`]);
    /// requests to other providers leave it out (they cannot read it).
    ///
    /// Serialized as `{"type": "reasoning", "item": {…}, "owner": "…"}`.
    Reasoning {
        /// The item as the provider sent it.
        item: Value,
        /// The target that produced it; `None` in sessions written before provenance was
        /// kept (and for targets that have no identity): an unknown owner.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<TargetIdentity>,
    },
}

impl ContentBlock {
    /// A thinking block with no known owner (the machine records the target that produced
    /// it when the message is appended).
    #[must_use]
    pub fn thinking(thinking: impl Into<String>, signature: impl Into<String>) -> Self {
        ContentBlock::Thinking {
            thinking: thinking.into(),
            signature: signature.into(),
            owner: None,
        }
    }

    /// A redacted thinking block with no known owner (the machine records the target that
    /// produced it when the message is appended).
    #[must_use]
    pub fn redacted_thinking(data: impl Into<String>) -> Self {
        ContentBlock::RedactedThinking {
            data: data.into(),
            owner: None,
        }
    }

    /// A Responses reasoning item with no known owner (the machine records the target that
    /// produced it when the message is appended).
    #[must_use]
    pub fn reasoning(item: Value) -> Self {
        ContentBlock::Reasoning { item, owner: None }
    }

    /// Whether this block is reasoning only its producer can read back: a Responses
    /// reasoning item (its `encrypted_content`), signed thinking or redacted thinking.
    /// Unsigned thinking (what OpenAI-compatible servers stream as `reasoning_content`) is
    /// never sent anywhere.
    #[must_use]
    pub fn is_owned_reasoning(&self) -> bool {
        match self {
            ContentBlock::Reasoning { .. } | ContentBlock::RedactedThinking { .. } => true,
            ContentBlock::Thinking { signature, .. } => !signature.is_empty(),
            _ => false,
        }
    }

    /// The target that produced this reasoning, when known (see
    /// [`is_owned_reasoning`](Self::is_owned_reasoning)); `None` for every other block.
    #[must_use]
    pub fn owner(&self) -> Option<&TargetIdentity> {
        match self {
            ContentBlock::Thinking { owner, .. }
            | ContentBlock::RedactedThinking { owner, .. }
            | ContentBlock::Reasoning { owner, .. } => owner.as_ref(),
            _ => None,
        }
    }

    /// Whether a request to the target `to` may carry this block, as far as ownership goes:
    /// every block that is not [owned reasoning](Self::is_owned_reasoning), reasoning of an
    /// unknown owner, and reasoning whose owner is `to`. Reasoning owned by another target
    /// — another provider, base URL, key or organisation — is refused by that API (OpenAI:
    /// 400 `invalid_encrypted_content`; Anthropic: 400 "Invalid `signature` in `thinking`
    /// block"), so it never goes there; a driver that does not know who it sends to
    /// (`to: None`) sends no owned reasoning at all.
    #[must_use]
    pub fn may_go_to(&self, to: Option<&TargetIdentity>) -> bool {
        if !self.is_owned_reasoning() {
            return true;
        }
        match self.owner() {
            None => true,
            Some(owner) => Some(owner) == to,
        }
    }

    /// A text block.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A tool-use block.
    #[must_use]
    pub fn tool_use(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input: Arc::new(input),
        }
    }

    /// A tool-result block.
    #[must_use]
    pub fn tool_result(
        tool_use_id: impl Into<String>,
        parts: Vec<ToolResultPart>,
        is_error: bool,
    ) -> Self {
        ContentBlock::ToolResult(ToolResultBlock {
            tool_use_id: tool_use_id.into(),
            parts,
            is_error,
        })
    }
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its blocks; a plain string in JSON reads as one text block.
    #[serde(deserialize_with = "deserialize_content")]
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// The message's approximate size in bytes: what [`Conversation::approx_bytes`] counts
    /// for it.
    #[must_use]
    pub fn approx_bytes(&self) -> usize {
        self.content.iter().map(block_bytes).sum()
    }

    /// A user message with these blocks.
    #[must_use]
    pub fn user(content: Vec<ContentBlock>) -> Self {
        Message {
            role: Role::User,
            content,
        }
    }

    /// An assistant message with these blocks, e.g. text followed by
    /// [`tool_use`](ContentBlock::tool_use) blocks.
    #[must_use]
    pub fn assistant(content: Vec<ContentBlock>) -> Self {
        Message {
            role: Role::Assistant,
            content,
        }
    }

    /// A user message with one text block.
    #[must_use]
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// An assistant message with one text block.
    #[must_use]
    pub fn assistant_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// All text blocks joined by newlines.
    #[must_use]
    pub fn text(&self) -> String {
        join_text(self.content.iter().filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        }))
    }

    /// The tool-use blocks as (id, name, input), in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => {
                Some((id.as_str(), name.as_str(), &**input))
            }
            _ => None,
        })
    }

    /// The tool-result blocks, in order.
    pub fn tool_results(&self) -> impl Iterator<Item = &ToolResultBlock> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r),
            _ => None,
        })
    }

    /// Whether the message has no content worth sending: no blocks, or only blank text.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.content.iter().all(|b| match b {
            ContentBlock::Text { text } => text.trim().is_empty(),
            ContentBlock::Thinking { .. }
            | ContentBlock::RedactedThinking { .. }
            | ContentBlock::Reasoning { .. } => true,
            _ => false,
        })
    }
}

fn join_text<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, p) in parts.enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(p);
    }
    out
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ContentRepr {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

fn deserialize_content<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ContentBlock>, D::Error> {
    Ok(match ContentRepr::deserialize(d)? {
        ContentRepr::Text(text) => vec![ContentBlock::Text { text }],
        ContentRepr::Blocks(blocks) => blocks,
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum PartsRepr {
    Text(String),
    Parts(Vec<ToolResultPart>),
}

fn deserialize_result_parts<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<ToolResultPart>, D::Error> {
    Ok(match PartsRepr::deserialize(d)? {
        PartsRepr::Text(text) if text.is_empty() => Vec::new(),
        PartsRepr::Text(text) => vec![ToolResultPart::Text { text }],
        PartsRepr::Parts(parts) => parts,
    })
}

/// Why a conversation cannot be sent as it is: a tool call without its answer, or the like.
///
/// Anthropic answers such a request with a 400 ("tool_use ids were found without tool_result
/// blocks immediately after"); finding it before sending turns a provider error into a local,
/// explainable one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PairingError {
    /// An assistant `tool_use` is not answered in the very next (user) message.
    #[error("message {message}: tool_use `{tool_use_id}` has no tool_result in the next message")]
    MissingResult {
        /// Index of the assistant message holding the call.
        message: usize,
        /// The unanswered call.
        tool_use_id: String,
    },
    /// A `tool_result` answers no `tool_use` of the previous assistant message.
    #[error("message {message}: tool_result for unknown tool_use `{tool_use_id}`")]
    UnknownResult {
        /// Index of the user message holding the result.
        message: usize,
        /// The id it claims to answer.
        tool_use_id: String,
    },
    /// A `tool_result` comes after other content or out of the calls' order.
    #[error("message {message}: tool_result blocks must come first and in the order of the calls")]
    ResultsOutOfOrder {
        /// Index of the user message.
        message: usize,
    },
    /// A tool-use id appears twice in one assistant message.
    #[error("message {message}: tool_use id `{tool_use_id}` is used twice")]
    DuplicateToolUseId {
        /// Index of the assistant message.
        message: usize,
        /// The repeated id.
        tool_use_id: String,
    },
}

/// An ordered list of messages: the state an agent run builds up.
///
/// Messages are shared, not copied: cloning a conversation, taking a snapshot of it for a
/// request, or handing a message to the driver in [`Command::AppendMessage`] shares each
/// message behind an [`Arc`]. A message never changes once it is in a conversation.
///
/// It also keeps its [`approx_bytes`](Conversation::approx_bytes) up to date as messages are
/// pushed, so asking for it costs nothing however long the conversation grows.
///
/// [`Command::AppendMessage`]: crate::Command::AppendMessage
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    messages: Vec<Arc<Message>>,
    /// The sum of the messages' [`Message::approx_bytes`].
    bytes: usize,
}

impl PartialEq for Conversation {
    fn eq(&self, other: &Self) -> bool {
        self.messages == other.messages
    }
}

impl Serialize for Conversation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.messages.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Conversation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<Arc<Message>>::deserialize(d).map(Conversation::from)
    }
}

impl Conversation {
    /// An empty conversation.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The messages, oldest first. Each derefs to a [`Message`].
    #[must_use]
    pub fn messages(&self) -> &[Arc<Message>] {
        &self.messages
    }

    /// Number of messages.
    #[must_use]
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are no messages.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The newest message.
    #[must_use]
    pub fn last(&self) -> Option<&Message> {
        self.messages.last().map(|m| &**m)
    }

    /// Appends a message.
    pub fn push(&mut self, message: impl Into<Arc<Message>>) {
        let message = message.into();
        self.bytes += message.approx_bytes();
        self.messages.push(message);
    }

    /// Consumes the conversation, returning its messages: each one moved out when nothing
    /// else shares it, else copied.
    #[must_use]
    pub fn into_messages(self) -> Vec<Message> {
        self.messages
            .into_iter()
            .map(|m| Arc::try_unwrap(m).unwrap_or_else(|shared| (*shared).clone()))
            .collect()
    }

    /// This conversation without the [owned reasoning](ContentBlock::is_owned_reasoning)
    /// blocks for which `drop` says so; messages left unchanged are shared, not copied, and
    /// a message left with no block at all is kept empty (a request builder skips it).
    /// `None` when no block is dropped.
    #[must_use]
    pub fn without_reasoning(
        &self,
        mut drop: impl FnMut(&ContentBlock) -> bool,
    ) -> Option<Conversation> {
        let mut touched = false;
        let messages: Vec<Arc<Message>> = self
            .messages
            .iter()
            .map(|m| {
                if !m.content.iter().any(|b| b.is_owned_reasoning() && drop(b)) {
                    return Arc::clone(m);
                }
                touched = true;
                let content = m
                    .content
                    .iter()
                    .filter(|b| !(b.is_owned_reasoning() && drop(b)))
                    .cloned()
                    .collect();
                Arc::new(Message {
                    role: m.role,
                    content,
                })
            })
            .collect();
        touched.then(|| Conversation::from(messages))
    }

    /// A rough size in bytes of what would be sent: text, tool inputs and results, media data.
    ///
    /// Used to check that a compaction shrank the conversation; not a token count.
    #[must_use]
    pub fn approx_bytes(&self) -> usize {
        self.bytes
    }

    /// Checks that every assistant `tool_use` is answered, first and in order, by a
    /// `tool_result` in the next message, and that no result answers nothing.
    ///
    /// A trailing assistant message with open tool calls is allowed: its answers have not been
    /// produced yet. Pass `allow_open_tail = false` to refuse that too (a request must not end
    /// with open calls).
    pub fn check_tool_pairing(&self, allow_open_tail: bool) -> Result<(), PairingError> {
        let mut open: Vec<&str> = Vec::new();
        let mut open_at = 0;
        for (i, m) in self.messages.iter().enumerate() {
            match m.role {
                Role::Assistant => {
                    if let Some(id) = open.first() {
                        return Err(PairingError::MissingResult {
                            message: open_at,
                            tool_use_id: (*id).to_owned(),
                        });
                    }
                    open.clear();
                    for (id, _, _) in m.tool_uses() {
                        if open.contains(&id) {
                            return Err(PairingError::DuplicateToolUseId {
                                message: i,
                                tool_use_id: id.to_owned(),
                            });
                        }
                        open.push(id);
                    }
                    open_at = i;
                }
                Role::User => {
                    let mut expected = open.iter();
                    let mut seen_other = false;
                    for block in &m.content {
                        match block {
                            ContentBlock::ToolResult(r) => {
                                if seen_other {
                                    return Err(PairingError::ResultsOutOfOrder { message: i });
                                }
                                if !open.contains(&r.tool_use_id.as_str()) {
                                    return Err(PairingError::UnknownResult {
                                        message: i,
                                        tool_use_id: r.tool_use_id.clone(),
                                    });
                                }
                                if expected.next() != Some(&r.tool_use_id.as_str()) {
                                    return Err(PairingError::ResultsOutOfOrder { message: i });
                                }
                            }
                            _ => seen_other = true,
                        }
                    }
                    if let Some(id) = expected.next() {
                        return Err(PairingError::MissingResult {
                            message: open_at,
                            tool_use_id: (*id).to_owned(),
                        });
                    }
                    open.clear();
                }
            }
        }
        match open.first() {
            Some(id) if !allow_open_tail => Err(PairingError::MissingResult {
                message: open_at,
                tool_use_id: (*id).to_owned(),
            }),
            _ => Ok(()),
        }
    }
}

impl From<Vec<Message>> for Conversation {
    fn from(messages: Vec<Message>) -> Self {
        messages.into_iter().collect()
    }
}

impl From<Vec<Arc<Message>>> for Conversation {
    fn from(messages: Vec<Arc<Message>>) -> Self {
        let bytes = messages.iter().map(|m| m.approx_bytes()).sum();
        Conversation { messages, bytes }
    }
}

impl FromIterator<Message> for Conversation {
    fn from_iter<I: IntoIterator<Item = Message>>(messages: I) -> Self {
        Conversation::from(messages.into_iter().map(Arc::new).collect::<Vec<_>>())
    }
}

fn block_bytes(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text { text } => text.len(),
        ContentBlock::ToolUse { id, name, input } => id.len() + name.len() + json_len(input),
        ContentBlock::ToolResult(r) => {
            r.tool_use_id.len()
                + r.parts
                    .iter()
                    .map(|p| match p {
                        ToolResultPart::Text { text } => text.len(),
                        ToolResultPart::Image { source } => source_bytes(source),
                    })
                    .sum::<usize>()
        }
        ContentBlock::Image { source } => source_bytes(source),
        ContentBlock::Thinking {
            thinking,
            signature,
            ..
        } => thinking.len() + signature.len(),
        ContentBlock::RedactedThinking { data, .. } => data.len(),
        ContentBlock::Reasoning { item, .. } => json_len(item),
    }
}

/// The length of `value`'s compact JSON text (its `Display`), counted without building it.
///
/// Walked by hand: going through serde_json's serializer into a counting writer cost a third
/// more for the small inputs tool calls usually carry (callgrind, docs/performance.md).
fn json_len(value: &Value) -> usize {
    match value {
        Value::Null => "null".len(),
        Value::Bool(true) => "true".len(),
        Value::Bool(false) => "false".len(),
        Value::Number(n) => {
            let mut count = CountChars(0);
            // Writing into a counter cannot fail.
            let _ = fmt::Write::write_fmt(&mut count, format_args!("{n}"));
            count.0
        }
        Value::String(s) => string_len(s),
        // Brackets, the commas between items, the items.
        Value::Array(items) => {
            2 + items.len().saturating_sub(1) + items.iter().map(json_len).sum::<usize>()
        }
        // Braces, the commas between entries, and per entry its key, a colon and its value.
        Value::Object(entries) => {
            2 + entries.len().saturating_sub(1)
                + entries
                    .iter()
                    .map(|(key, value)| string_len(key) + 1 + json_len(value))
                    .sum::<usize>()
        }
    }
}

/// The length of `s` as a JSON string the way serde_json writes it: quoted, with `"`, `\`
/// and the control characters escaped (the usual ones as `\n`, the rest as `\u00XX`).
fn string_len(s: &str) -> usize {
    /// Per byte, how many bytes its escape adds.
    const EXTRA: [u8; 256] = {
        let mut extra = [0; 256];
        let mut b = 0;
        while b < 0x20 {
            extra[b] = 5;
            b += 1;
        }
        let short = [b'"', b'\\', 0x08, b'\t', b'\n', 0x0C, b'\r'];
        let mut i = 0;
        while i < short.len() {
            extra[short[i] as usize] = 1;
            i += 1;
        }
        extra
    };
    let escapes: usize = s.bytes().map(|b| usize::from(EXTRA[usize::from(b)])).sum();
    2 + s.len() + escapes
}

/// A `fmt::Write` that only counts what it is given.
struct CountChars(usize);

impl fmt::Write for CountChars {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

fn source_bytes(source: &MediaSource) -> usize {
    match source {
        MediaSource::Base64 { media_type, data } => media_type.len() + data.len(),
        MediaSource::Url { url } => url.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_input_counts_as_long_as_its_compact_json_text() {
        for input in [
            json!({}),
            json!({"path": "src/lib.rs", "n": [1, 2.5, -3, null, true]}),
            json!({"quote\"d": "tab\t newline\n \u{1} é 日本 🦀", "nested": {"a": {"b": []}}}),
        ] {
            let block = ContentBlock::tool_use("id_1", "read", input.clone());
            let message = Message {
                role: Role::Assistant,
                content: vec![block],
            };
            assert_eq!(
                message.approx_bytes(),
                "id_1".len() + "read".len() + input.to_string().len(),
                "{input}"
            );
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            // Every escape serde_json writes, between ordinary and multi-byte characters.
            "[\\x00-\\x20\"\\\\/a\\x7f\u{e9}\u{65e5}\u{1f980}]{0,12}".prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
                prop::collection::btree_map("[\\x00-\\x7f\u{e9}]{0,6}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(21),
            ..proptest::prelude::ProptestConfig::default()
        })]

        #[test]
        fn the_counted_json_length_is_the_length_of_the_written_text(value in json_value()) {
            proptest::prop_assert_eq!(json_len(&value), value.to_string().len());
        }
    }

    #[test]
    fn the_kept_size_is_the_sum_of_the_messages_however_the_conversation_was_made() {
        let messages = vec![
            Message::user_text("read the file"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::tool_use(
                    "t1",
                    "read",
                    json!({"path": "é.rs"}),
                )],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result(
                    "t1",
                    vec![ToolResultPart::text("fn main() {}")],
                    false,
                )],
            },
        ];
        let sum: usize = messages.iter().map(Message::approx_bytes).sum();
        let mut pushed = Conversation::new();
        for m in &messages {
            pushed.push(m.clone());
        }
        let from_vec = Conversation::from(messages.clone());
        let collected: Conversation = messages.iter().cloned().collect();
        let read: Conversation =
            serde_json::from_str(&serde_json::to_string(&pushed).unwrap()).unwrap();
        for c in [&pushed, &from_vec, &collected, &read, &read.clone()] {
            assert_eq!(c.approx_bytes(), sum);
            assert_eq!(*c, pushed);
        }
        assert_eq!(Conversation::new().approx_bytes(), 0);
    }

    #[test]
    fn tool_result_without_is_error_reads_as_success() {
        let m: Message = serde_json::from_value(json!({
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
        }))
        .unwrap();
        let r = m.tool_results().next().unwrap();
        assert!(!r.is_error);
        assert_eq!(r.text(), "ok");
    }

    #[test]
    fn is_error_is_serialized_only_when_set() {
        let ok = ContentBlock::tool_result("t1", vec![ToolResultPart::text("fine")], false);
        let err = ContentBlock::tool_result("t2", vec![ToolResultPart::text("bad")], true);
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"fine"}]})
        );
        assert_eq!(serde_json::to_value(&err).unwrap()["is_error"], json!(true));
    }

    #[test]
    fn plain_string_content_reads_as_one_text_block() {
        let m: Message =
            serde_json::from_value(json!({"role": "assistant", "content": "hi"})).unwrap();
        assert_eq!(m, Message::assistant_text("hi"));
    }

    #[test]
    fn messages_round_trip_in_anthropic_shape() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::thinking("hmm", "sig"),
                ContentBlock::text("let me look"),
                ContentBlock::tool_use("toolu_1", "read", json!({"path": "a.rs"})),
                ContentBlock::Image {
                    source: MediaSource::Base64 {
                        media_type: "image/png".into(),
                        data: "AAAA".into(),
                    },
                },
            ],
        };
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["content"][2]["type"], "tool_use");
        assert_eq!(v["content"][3]["source"]["type"], "base64");
        let back: Message = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn reasoning_items_keep_the_provider_item_verbatim_in_sessions() {
        let item = json!({"id": "rs_1", "type": "reasoning", "summary": [],
                          "encrypted_content": "gAAAAB-opaque"});
        let block = ContentBlock::reasoning(item.clone());
        let v = serde_json::to_value(&block).unwrap();
        assert_eq!(v, json!({"type": "reasoning", "item": item}));
        assert_eq!(serde_json::from_value::<ContentBlock>(v).unwrap(), block);
        // Like thinking, a reasoning item alone is no content worth sending.
        let m = Message {
            role: Role::Assistant,
            content: vec![block],
        };
        assert!(m.is_empty());
    }

    #[test]
    fn the_owner_of_reasoning_survives_a_session_and_old_sessions_read_as_unknown_owner() {
        let owner = TargetIdentity::new("openai_responses:0123abcd");
        let item = json!({"id": "rs_1", "type": "reasoning", "encrypted_content": "gAAAAB"});
        let owned = ContentBlock::Reasoning {
            item: item.clone(),
            owner: Some(owner.clone()),
        };
        let v = serde_json::to_value(&owned).unwrap();
        assert_eq!(v["owner"], "openai_responses:0123abcd");
        assert_eq!(serde_json::from_value::<ContentBlock>(v).unwrap(), owned);
        let thinking = ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: "sig".into(),
            owner: Some(owner.clone()),
        };
        let v = serde_json::to_value(&thinking).unwrap();
        assert_eq!(serde_json::from_value::<ContentBlock>(v).unwrap(), thinking);
        // Lines written before provenance was kept.
        let old: ContentBlock =
            serde_json::from_value(json!({"type": "reasoning", "item": item})).unwrap();
        assert_eq!(old.owner(), None);
        let old: ContentBlock =
            serde_json::from_value(json!({"type": "thinking", "thinking": "t", "signature": "s"}))
                .unwrap();
        assert_eq!(old.owner(), None);
        assert!(old.is_owned_reasoning());
    }

    #[test]
    fn owned_reasoning_may_go_only_to_its_owner_and_unknown_owners_anywhere() {
        let a = TargetIdentity::new("a");
        let b = TargetIdentity::new("b");
        let item = json!({"type": "reasoning", "id": "rs_1"});
        let of_a = ContentBlock::Reasoning {
            item: item.clone(),
            owner: Some(a.clone()),
        };
        assert!(of_a.may_go_to(Some(&a)));
        assert!(!of_a.may_go_to(Some(&b)));
        assert!(!of_a.may_go_to(None));
        let unknown = ContentBlock::reasoning(item);
        assert!(unknown.may_go_to(Some(&b)));
        assert!(unknown.may_go_to(None));
        // Unsigned thinking and ordinary blocks are nobody's.
        let unsigned = ContentBlock::Thinking {
            thinking: "t".into(),
            signature: String::new(),
            owner: Some(a.clone()),
        };
        assert!(!unsigned.is_owned_reasoning());
        assert!(unsigned.may_go_to(Some(&b)));
        assert!(ContentBlock::text("hi").may_go_to(None));
    }

    #[test]
    fn without_reasoning_drops_only_what_it_is_told_and_shares_the_rest() {
        let item = json!({"type": "reasoning", "id": "rs_1"});
        let c = Conversation::from(vec![
            Message::user_text("go"),
            Message::assistant(vec![
                ContentBlock::reasoning(item.clone()),
                ContentBlock::text("done"),
            ]),
            Message::user_text("again"),
        ]);
        assert_eq!(c.without_reasoning(|_| false), None);
        let stripped = c
            .without_reasoning(|_| true)
            .expect("a reasoning item to drop");
        assert_eq!(
            stripped.messages()[1].content,
            vec![ContentBlock::text("done")]
        );
        assert!(Arc::ptr_eq(&stripped.messages()[0], &c.messages()[0]));
        assert!(Arc::ptr_eq(&stripped.messages()[2], &c.messages()[2]));
        assert_eq!(
            stripped.approx_bytes(),
            c.approx_bytes() - item.to_string().len()
        );
        // The original keeps its reasoning.
        assert_eq!(c.messages()[1].content.len(), 2);
    }

    fn exchange(results: Vec<ContentBlock>) -> Conversation {
        Conversation::from(vec![
            Message::user_text("go"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::tool_use("a", "read", json!({})),
                    ContentBlock::tool_use("b", "list", json!({})),
                ],
            },
            Message {
                role: Role::User,
                content: results,
            },
        ])
    }

    fn result(id: &str) -> ContentBlock {
        ContentBlock::tool_result(id, vec![ToolResultPart::text("x")], false)
    }

    #[test]
    fn pairing_accepts_results_first_in_call_order() {
        let mut c = exchange(vec![result("a"), result("b"), ContentBlock::text("more")]);
        assert_eq!(c.check_tool_pairing(false), Ok(()));
        c.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_use("c", "read", json!({}))],
        });
        assert_eq!(c.check_tool_pairing(true), Ok(()));
        assert!(matches!(
            c.check_tool_pairing(false),
            Err(PairingError::MissingResult { message: 3, .. })
        ));
    }

    #[test]
    fn pairing_refuses_missing_unknown_and_misordered_results() {
        assert!(matches!(
            exchange(vec![result("a")]).check_tool_pairing(true),
            Err(PairingError::MissingResult { tool_use_id, .. }) if tool_use_id == "b"
        ));
        assert!(matches!(
            exchange(vec![result("a"), result("b"), result("z")]).check_tool_pairing(true),
            Err(PairingError::UnknownResult { .. })
        ));
        assert!(matches!(
            exchange(vec![result("b"), result("a")]).check_tool_pairing(true),
            Err(PairingError::ResultsOutOfOrder { .. })
        ));
        assert!(matches!(
            exchange(vec![ContentBlock::text("hi"), result("a"), result("b")])
                .check_tool_pairing(true),
            Err(PairingError::ResultsOutOfOrder { .. })
        ));
    }
}
