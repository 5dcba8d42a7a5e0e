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
    /// (Responses: `input_tokens`) and Gemini's `promptTokenCount` already include cached
    /// tokens; Anthropic's `input_tokens` and Bedrock's `inputTokens` exclude the tokens read
    /// from and written to the cache, which count too.
    #[must_use]
    pub fn context_tokens(&self, provider: ProviderKind) -> u64 {
        match provider {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses | ProviderKind::Gemini => {
                self.input_tokens
            }
            // Bedrock counts as Anthropic does: `inputTokens` leave the cache out.
            ProviderKind::Anthropic | ProviderKind::Bedrock => self
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
///
/// Besides the message, its stop reason and usage, a response may carry rarer details:
/// tool calls whose input is unusable ([`input_problems`](Self::input_problems)) and who
/// answered ([`id`](Self::id), [`model`](Self::model)). They live in one box, set with the
/// `with_*` methods, so that a response (and every [`Event`](crate::Event) that carries one)
/// stays small enough to move without a `memcpy` call (128 bytes, issue 21).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AssistantResponse {
    /// The assistant message (role `assistant`).
    pub message: Message,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Token usage, when reported.
    pub usage: Usage,
    /// The rare details; `None` when there are none (never `Some` of an empty one).
    details: Option<Box<ResponseDetails>>,
}

/// The rarely set parts of a response, boxed.
#[derive(Debug, Clone, Default, PartialEq)]
struct ResponseDetails {
    input_problems: Vec<ToolInputProblem>,
    id: Option<String>,
    model: Option<String>,
}

impl ResponseDetails {
    fn is_empty(&self) -> bool {
        self.input_problems.is_empty() && self.id.is_none() && self.model.is_none()
    }
}

/// The serialized shape (traces, sessions of runs): flat, each detail left out when unset.
#[derive(Serialize, Deserialize)]
struct ResponseFields<M, P> {
    message: M,
    stop_reason: StopReason,
    #[serde(default)]
    usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_problems: Option<P>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

impl Serialize for AssistantResponse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let problems = self.input_problems();
        ResponseFields {
            message: &self.message,
            stop_reason: self.stop_reason.clone(),
            usage: self.usage,
            input_problems: (!problems.is_empty()).then_some(problems),
            id: self.id().map(str::to_owned),
            model: self.model().map(str::to_owned),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for AssistantResponse {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = ResponseFields::<Message, Vec<ToolInputProblem>>::deserialize(d)?;
        let mut response = AssistantResponse::new(f.message, f.stop_reason).with_usage(f.usage);
        response.set_details(ResponseDetails {
            input_problems: f.input_problems.unwrap_or_default(),
            id: f.id,
            model: f.model,
        });
        Ok(response)
    }
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
            details: None,
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
        let mut details = self.take_details();
        details.input_problems = problems;
        self.set_details(details);
        self
    }

    /// Sets the provider's id of the response.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        let mut details = self.take_details();
        details.id = Some(id.into());
        self.set_details(details);
        self
    }

    /// Sets the model that produced the response.
    ///
    /// ```
    /// use rebound_core::{AssistantResponse, Message};
    ///
    /// let response = AssistantResponse::end_turn(Message::assistant_text("hi"))
    ///     .with_id("msg_01")
    ///     .with_model("claude-sonnet-4-5-20250929");
    /// assert_eq!(response.id(), Some("msg_01"));
    /// assert_eq!(response.model(), Some("claude-sonnet-4-5-20250929"));
    /// assert!(response.input_problems().is_empty());
    /// ```
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        let mut details = self.take_details();
        details.model = Some(model.into());
        self.set_details(details);
        self
    }

    /// Tool calls whose input is unusable (invalid JSON, truncated, not an object); almost
    /// always none.
    #[must_use]
    pub fn input_problems(&self) -> &[ToolInputProblem] {
        self.details
            .as_ref()
            .map_or(&[], |d| d.input_problems.as_slice())
    }

    /// The provider's id of this response (`msg_…`, `chatcmpl-…`, `resp_…`), when it sent
    /// one: telemetry's `gen_ai.response.id`, and what to quote to the provider about it.
    #[must_use]
    pub fn id(&self) -> Option<&str> {
        self.details.as_ref().and_then(|d| d.id.as_deref())
    }

    /// The model that produced the response, as the provider names it (often a dated
    /// version of the model asked for), when it said: telemetry's `gen_ai.response.model`.
    #[must_use]
    pub fn model(&self) -> Option<&str> {
        self.details.as_ref().and_then(|d| d.model.as_deref())
    }

    /// Takes the input problems out (the machine consumes them).
    pub(crate) fn take_input_problems(&mut self) -> Vec<ToolInputProblem> {
        let mut details = self.take_details();
        let problems = std::mem::take(&mut details.input_problems);
        self.set_details(details);
        problems
    }

    fn take_details(&mut self) -> ResponseDetails {
        self.details.take().map(|d| *d).unwrap_or_default()
    }

    fn set_details(&mut self, details: ResponseDetails) {
        self.details = (!details.is_empty()).then(|| Box::new(details));
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

    #[test]
    fn a_response_serializes_flat_and_reads_back_the_same() {
        let plain = AssistantResponse::end_turn(Message::assistant_text("hi"));
        let json = serde_json::to_value(&plain).unwrap();
        assert_eq!(json.get("input_problems"), None);
        assert_eq!(json.get("id"), None);
        let detailed = plain
            .clone()
            .with_id("msg_1")
            .with_model("m-2025")
            .with_input_problems(vec![ToolInputProblem {
                tool_use_id: "t".into(),
                kind: InputProblemKind::Truncated,
                raw: "{".into(),
                detail: "EOF".into(),
            }]);
        let json = serde_json::to_value(&detailed).unwrap();
        assert_eq!(json["id"], "msg_1");
        assert_eq!(json["input_problems"][0]["tool_use_id"], "t");
        for r in [plain, detailed] {
            let back: AssistantResponse =
                serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
            assert_eq!(back, r);
        }
        // Empty details are no details: equal to a response that never had any.
        let emptied = AssistantResponse::end_turn(Message::assistant_text("hi"))
            .with_input_problems(Vec::new());
        assert_eq!(
            emptied,
            AssistantResponse::end_turn(Message::assistant_text("hi"))
        );
    }
}
