//! Tools as the machine sees them: specs, calls, outcomes, and the model-readable error text.

use crate::conversation::ToolResultPart;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// A tool the model may call: what the provider is told about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model uses, e.g. `read`.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the input object.
    pub input_schema: Value,
}

/// One call the driver must run, taken from a `tool_use` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The `tool_use` id, echoed in the result.
    pub id: String,
    /// The tool's name (known to be in the configured tool list).
    pub name: String,
    /// The arguments: a JSON object, shared with the conversation's `tool_use` block.
    pub input: Arc<Value>,
}

impl ToolCall {
    /// A call of tool `name` with `input`, to be answered as `id`.
    #[must_use]
    pub fn new(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            input: Arc::new(input),
        }
    }
}

/// What a tool returned when it worked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The result parts, text and/or images.
    pub parts: Vec<ToolResultPart>,
}

impl ToolOutput {
    /// An output with one text part.
    #[must_use]
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            parts: vec![ToolResultPart::text(text)],
        }
    }
}

/// A failure of the host rather than the model's choice: it ends the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HostFailureKind {
    /// The user or embedder canceled.
    Canceled,
    /// Memory ran out.
    OutOfMemory,
    /// The receiver (UI) failed to accept a notification.
    Receiver,
    /// The session store failed to persist a message.
    SessionStore,
    /// Something else on the host side broke (an invariant, a runtime).
    Internal,
}

impl fmt::Display for HostFailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostFailureKind::Canceled => "canceled",
            HostFailureKind::OutOfMemory => "out of memory",
            HostFailureKind::Receiver => "receiver failed",
            HostFailureKind::SessionStore => "session store failed",
            HostFailureKind::Internal => "internal failure",
        })
    }
}

/// A host failure with its context.
///
/// New fields may come in a minor release (it is `#[non_exhaustive]`): build one with
/// [`HostFailure::new`], not a struct literal:
///
/// ```compile_fail
/// use rebound_core::{HostFailure, HostFailureKind};
/// let failure = HostFailure { kind: HostFailureKind::Internal, message: "x".into() };
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
#[non_exhaustive]
pub struct HostFailure {
    /// What failed.
    pub kind: HostFailureKind,
    /// Details for the embedder (never shown to the model).
    pub message: String,
}

impl HostFailure {
    /// A host failure of `kind`.
    #[must_use]
    pub fn new(kind: HostFailureKind, message: impl Into<String>) -> Self {
        HostFailure {
            kind,
            message: message.into(),
        }
    }
}

/// Why a tool call (or a whole batch) failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFailure {
    /// A failure the model can act on: bad arguments, a handler error, a script error, a
    /// timeout, a tool source's per-call error. Becomes an error tool result.
    Model {
        /// What went wrong, for the model.
        message: String,
    },
    /// The host failed (cancel, out of memory): the run fails; nothing is shown to the model.
    Host(HostFailure),
}

impl ToolFailure {
    /// A model-visible failure.
    #[must_use]
    pub fn model(message: impl Into<String>) -> Self {
        ToolFailure::Model {
            message: message.into(),
        }
    }
}

/// The outcome of one call in a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallOutcome {
    /// The `tool_use` id of the call.
    pub tool_use_id: String,
    /// What it produced.
    pub result: Result<ToolOutput, ToolFailure>,
}

impl CallOutcome {
    /// The outcome of the call `tool_use_id`.
    #[must_use]
    pub fn new(tool_use_id: impl Into<String>, result: Result<ToolOutput, ToolFailure>) -> Self {
        CallOutcome {
            tool_use_id: tool_use_id.into(),
            result,
        }
    }

    /// The call `tool_use_id` worked and produced `output`.
    #[must_use]
    pub fn ok(tool_use_id: impl Into<String>, output: ToolOutput) -> Self {
        Self::new(tool_use_id, Ok(output))
    }

    /// The call `tool_use_id` failed in a way the model can act on (bad arguments, a handler
    /// error): it becomes an error tool result and the loop goes on.
    #[must_use]
    pub fn model_error(tool_use_id: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(tool_use_id, Err(ToolFailure::model(message)))
    }
}

/// The outcome of a whole [`Command::RunTools`](crate::Command::RunTools) batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchOutcome {
    /// One outcome per call (any order; the machine restores the calls' order).
    PerCall(Vec<CallOutcome>),
    /// The batch failed as a whole (e.g. a tool source crashed); applies to every call.
    WholeBatch(ToolFailure),
}

impl FromIterator<CallOutcome> for BatchOutcome {
    /// One outcome per call, collected: [`BatchOutcome::PerCall`].
    ///
    /// ```
    /// use rebound_core::{BatchOutcome, CallOutcome, ToolCall, ToolOutput};
    /// use serde_json::json;
    ///
    /// let calls = vec![ToolCall::new("call_1", "read", json!({"path": "a.txt"}))];
    /// let outcome: BatchOutcome = calls
    ///     .iter()
    ///     .map(|call| CallOutcome::ok(&call.id, ToolOutput::text("contents of a.txt")))
    ///     .collect();
    /// assert!(matches!(outcome, BatchOutcome::PerCall(ref outcomes) if outcomes.len() == 1));
    /// ```
    fn from_iter<I: IntoIterator<Item = CallOutcome>>(outcomes: I) -> Self {
        BatchOutcome::PerCall(outcomes.into_iter().collect())
    }
}

/// The text of an error tool result: what the model reads when a call failed, the error
/// first, then what it may do about it (the same words for every provider and tool).
///
/// ```
/// assert_eq!(
///     rebound_core::tool_error_text("read", "file not found: src/foo.rs"),
///     "Tool execution failed for `read`: file not found: src/foo.rs\n\
///      You may fix the arguments, try a different tool, or explain the failure to the user."
/// );
/// ```
///
/// The tool's name is quoted by its first 80 bytes: the name comes from the model, which may
/// send anything (a megabyte-long name is not sent back whole).
#[must_use]
pub fn tool_error_text(tool: &str, message: &str) -> String {
    let tool = bounded(tool, 80);
    format!(
        "{TOOL_ERROR_OPENING}{tool}`: {message}\n\
         You may fix the arguments, try a different tool, or explain the failure to the user."
    )
}

/// How every [`tool_error_text`] begins.
const TOOL_ERROR_OPENING: &str = "Tool execution failed for `";

/// Whether `text` reads as a tool result's error text ([`tool_error_text`]'s words): how a
/// request of a wire format without an error flag on tool results (OpenAI Chat and
/// Responses) is read back as carrying an error (the fake provider server's scripts branch
/// on it).
///
/// ```
/// use rebound_core::tool::{reads_as_tool_error, tool_error_text};
/// assert!(reads_as_tool_error(&tool_error_text("read", "file not found")));
/// assert!(!reads_as_tool_error("lexer.rs\nparse.rs"));
/// ```
#[must_use]
pub fn reads_as_tool_error(text: &str) -> bool {
    text.starts_with(TOOL_ERROR_OPENING)
}

/// What the model is told when it calls a tool that is not configured: the name it used
/// (its first 80 bytes) and the names it may use, at most 1,000 bytes in all. The machine
/// says it for calls outside its tool list, and a tool set for calls outside its own, in the
/// same words.
///
/// ```
/// assert_eq!(
///     rebound_core::tool::unknown_tool_message("rm", &["read", "list"]),
///     "unknown tool `rm`; available tools: read, list"
/// );
/// assert_eq!(
///     rebound_core::tool::unknown_tool_message("rm", &[]),
///     "unknown tool `rm`; no tools are available"
/// );
/// ```
#[must_use]
pub fn unknown_tool_message(name: &str, available: &[&str]) -> String {
    let name = bounded(name, 80);
    let text = if available.is_empty() {
        format!("unknown tool `{name}`; no tools are available")
    } else {
        format!(
            "unknown tool `{name}`; available tools: {}",
            available.join(", ")
        )
    };
    bounded(&text, 1000)
}

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut: how
/// model-readable error texts stay bounded whatever a model or a tool sent.
///
/// ```
/// use rebound_core::tool::bounded;
/// assert_eq!(bounded("héllo", 2), "h…");
/// assert_eq!(bounded("héllo", 3), "hé…");
/// assert_eq!(bounded("hi", 2), "hi");
/// ```
#[must_use]
pub fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The deepest a tool call's input may nest (an object or array inside another counts one
/// level; `{}` is 1). Deeper input is refused where it arrives, with an error result the
/// model can act on, and replaced by `{}` in the conversation: a JSON value nested much
/// deeper cannot be read back by `serde_json` (its limit is 128 levels for a whole session
/// or request line), so keeping it would make the session, and every later request, unreadable.
pub const MAX_TOOL_INPUT_DEPTH: usize = 64;

/// Whether `value` nests deeper than `limit` levels. Stops descending at `limit + 1`, so it
/// costs at most one visit per node and never recurses deeper than `limit + 1` frames.
///
/// ```
/// use rebound_core::tool::nests_deeper_than;
/// use serde_json::json;
/// assert!(!nests_deeper_than(&json!({"a": [1, {"b": 2}]}), 3));
/// assert!(nests_deeper_than(&json!({"a": [1, {"b": {}}]}), 3));
/// assert!(!nests_deeper_than(&json!(7), 0));
/// ```
#[must_use]
pub fn nests_deeper_than(value: &Value, limit: usize) -> bool {
    let deeper = |child: &Value| limit == 0 || nests_deeper_than(child, limit - 1);
    match value {
        Value::Array(items) => limit == 0 || items.iter().any(deeper),
        Value::Object(entries) => limit == 0 || entries.values().any(deeper),
        _ => false,
    }
}

#[cfg(test)]
mod unknown_tool_tests {
    use super::*;

    #[test]
    fn a_huge_tool_name_is_quoted_back_bounded() {
        let name = "x".repeat(1 << 20);
        let text = tool_error_text(&name, &unknown_tool_message(&name, &["read"]));
        assert!(text.len() < 400, "{} bytes", text.len());
        assert!(text.starts_with("Tool execution failed for `xxx"));
    }

    #[test]
    fn a_hostile_name_or_a_huge_tool_list_stays_bounded() {
        let long = "é".repeat(10_000);
        let text = unknown_tool_message(&long, &["read"]);
        assert!(text.len() < 200, "{}", text.len());
        assert!(text.contains('…'));
        let many: Vec<String> = (0..1000).map(|i| format!("tool_{i}")).collect();
        let names: Vec<&str> = many.iter().map(String::as_str).collect();
        let text = unknown_tool_message("x", &names);
        assert!(text.len() <= 1000 + '…'.len_utf8());
        assert!(text.starts_with("unknown tool `x`; available tools: tool_0, tool_1"));
    }
}
