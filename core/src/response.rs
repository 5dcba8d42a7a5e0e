//! A complete assistant response: the message plus what the provider said about it.

use crate::conversation::Message;
use crate::failure::ProviderKind;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why the model stopped producing output.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished its turn (`end_turn` / `stop`).
    EndTurn,
    /// The model wants tool results (`tool_use` / `tool_calls`).
    ToolUse,
    /// The output token limit was hit (`max_tokens` / `length`).
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// The provider filtered the output (`content_filter`).
    ContentFilter,
    /// The model refused (`refusal`).
    Refusal,
    /// A long-running turn was paused (`pause_turn`).
    PauseTurn,
    /// Any other value, kept verbatim.
    Other(String),
}

impl StopReason {
    /// The wire name in Anthropic's vocabulary.
    #[must_use]
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ContentFilter => "content_filter",
            StopReason::Refusal => "refusal",
            StopReason::PauseTurn => "pause_turn",
            StopReason::Other(s) => s,
        }
    }
}

impl From<String> for StopReason {
    /// Reads both Anthropic (`end_turn`, `max_tokens`) and OpenAI (`stop`, `length`,
    /// `tool_calls`) names.
    fn from(s: String) -> Self {
        match s.as_str() {
            "end_turn" | "stop" => StopReason::EndTurn,
            "tool_use" | "tool_calls" | "function_call" => StopReason::ToolUse,
            "max_tokens" | "length" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "content_filter" => StopReason::ContentFilter,
            "refusal" => StopReason::Refusal,
            "pause_turn" => StopReason::PauseTurn,
            _ => StopReason::Other(s),
        }
    }
}

impl From<StopReason> for String {
    fn from(r: StopReason) -> Self {
        r.as_str().to_owned()
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token usage reported by the provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Tokens written to the prompt cache (Anthropic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Tokens read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
}

impl Usage {
    /// Usage of `input_tokens` prompt tokens and `output_tokens` completion tokens, nothing
    /// cached.
    #[must_use]
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }

    /// Sets [`cache_creation_input_tokens`](Self::cache_creation_input_tokens).
    #[must_use]
    pub fn with_cache_creation_input_tokens(mut self, tokens: u64) -> Self {
        self.cache_creation_input_tokens = Some(tokens);
        self
    }

    /// Sets [`cache_read_input_tokens`](Self::cache_read_input_tokens).
    #[must_use]
    pub fn with_cache_read_input_tokens(mut self, tokens: u64) -> Self {
        self.cache_read_input_tokens = Some(tokens);
        self
    }

    /// The tokens of the prompt as the context window counts them: OpenAI's `prompt_tokens`
    /// (Responses: `input_tokens`) already include cached tokens; Anthropic's `input_tokens` exclude the tokens read
    /// from and written to the cache, which count too.
    #[must_use]
    pub fn context_tokens(&self, provider: ProviderKind) -> u64 {
        match provider {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => self.input_tokens,
            ProviderKind::Anthropic => self
                .input_tokens
                .saturating_add(self.cache_read_input_tokens.unwrap_or(0))
                .saturating_add(self.cache_creation_input_tokens.unwrap_or(0)),
        }
    }
}

/// What was wrong with the input the model produced for one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputProblemKind {
    /// The streamed arguments were not valid JSON.
    InvalidJson,
    /// Output stopped (`max_tokens` / `length`) before the arguments were complete.
    Truncated,
    /// The arguments were valid JSON but not an object.
    NotAnObject,
    /// The arguments nest deeper than [`MAX_TOOL_INPUT_DEPTH`](crate::tool::MAX_TOOL_INPUT_DEPTH)
    /// levels (no session or request could hold them).
    TooDeep,
}

/// A tool call whose input cannot be used; the machine answers it with an error result
/// without running anything. The call's `input` in the message is then an empty object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolInputProblem {
    /// The `tool_use` id.
    pub tool_use_id: String,
    /// What was wrong.
    pub kind: InputProblemKind,
    /// The raw argument text the model produced (possibly cut short).
    pub raw: String,
    /// Parser detail, e.g. `EOF while parsing an object at line 1 column 12`.
    pub detail: String,
}

/// A complete assistant response as assembled from a provider stream or JSON body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AssistantResponse {
    /// The assistant message (role `assistant`).
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Token usage, when reported.
    #[serde(default)]
    pub usage: Usage,
    /// Tool calls whose input is unusable (invalid JSON, truncated, not an object); almost
    /// always none. A boxed slice, not a `Vec`, keeps the response (and every
    /// [`Event`](crate::Event) that carries one) small enough to move without a `memcpy` call.
    #[serde(default, skip_serializing_if = "<[_]>::is_empty")]
    pub input_problems: Box<[ToolInputProblem]>,
}

impl AssistantResponse {
    /// A response holding `message` that stopped for `stop_reason`, with no usage reported
    /// and no input problems.
    #[must_use]
    pub fn new(message: Message, stop_reason: StopReason) -> Self {
        AssistantResponse {
            message,
            stop_reason,
            usage: Usage::default(),
            input_problems: Box::default(),
        }
    }

    /// A response holding `message` that ended its turn normally.
    #[must_use]
    pub fn end_turn(message: Message) -> Self {
        Self::new(message, StopReason::EndTurn)
    }

    /// A response whose `message` asks for tools: its `tool_use` blocks become a
    /// [`Command::RunTools`](crate::Command::RunTools).
    ///
    /// ```
    /// use rebound_core::{AssistantResponse, ContentBlock, Message, StopReason};
    /// use serde_json::json;
    ///
    /// let response = AssistantResponse::tool_use(Message::assistant(vec![
    ///     ContentBlock::text("Let me look."),
    ///     ContentBlock::tool_use("call_1", "read", json!({"path": "README.md"})),
    /// ]));
    /// assert_eq!(response.stop_reason, StopReason::ToolUse);
    /// assert_eq!(response.message.tool_uses().count(), 1);
    /// ```
    #[must_use]
    pub fn tool_use(message: Message) -> Self {
        Self::new(message, StopReason::ToolUse)
    }

    /// Sets the token usage the provider reported.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Sets the tool calls whose input is unusable.
    #[must_use]
    pub fn with_input_problems(mut self, problems: Vec<ToolInputProblem>) -> Self {
        self.input_problems = problems.into_boxed_slice();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_of_both_providers_map_to_one_vocabulary() {
        for (wire, reason) in [
            ("end_turn", StopReason::EndTurn),
            ("stop", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("max_tokens", StopReason::MaxTokens),
            ("content_filter", StopReason::ContentFilter),
        ] {
            assert_eq!(StopReason::from(wire.to_owned()), reason);
        }
        let odd: StopReason = serde_json::from_str("\"model_context_window_exceeded\"").unwrap();
        assert_eq!(odd.as_str(), "model_context_window_exceeded");
    }
}
