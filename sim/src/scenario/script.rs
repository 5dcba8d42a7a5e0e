//! What the scripted model answers and what its tool calls do.

use super::Fault;
use rebound_core::wire;
use rebound_core::{
    AssistantResponse, ContentBlock, Conversation, HostFailure, HostFailureKind, InputProblemKind,
    Message, StopReason, ToolInputProblem, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How the scripted model answers summary requests: `faults` fail the first summary
/// requests, in order; then each is answered with `text`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SummaryScript {
    /// Faults for the first summary requests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
    /// The summary; by default one naming how many messages it summarises.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl SummaryScript {
    pub(super) fn is_default(&self) -> bool {
        *self == SummaryScript::default()
    }

    /// The answer to `request`, a summary request.
    #[must_use]
    pub fn response(&self, request: &Conversation) -> AssistantResponse {
        let text = self.text.clone().unwrap_or_else(|| {
            format!(
                "Summary of the {} earlier messages: the task is the user's first request; \
                 the steps so far succeeded; continue with the next one.",
                request.len()
            )
        });
        with_usage(
            AssistantResponse::end_turn(Message::assistant_text(text)),
            request,
        )
    }
}

/// `response` with the usage the scripted provider reports for it: the request's and the
/// answer's estimated tokens ([`rebound_core::compaction::estimate_tokens`]).
#[must_use]
pub fn with_usage(mut response: AssistantResponse, request: &Conversation) -> AssistantResponse {
    response.usage = Usage::new(
        rebound_core::compaction::estimate_tokens(request.approx_bytes()),
        rebound_core::compaction::estimate_tokens(response.message.approx_bytes()),
    );
    response
}

/// One model turn: the faults before it, then the answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Turn {
    /// Faults injected before the answer, one per request attempt, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
    /// The answer.
    pub answer: Answer,
    /// The answer given instead when the conversation sent ends with an error tool result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when_last_tool_error: Option<Answer>,
}

/// What the model answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Answer {
    /// Text before the tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptedCall>,
    /// Why the model stopped; defaults to `tool_use` with calls, `end_turn` without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// How long the answer takes, overriding [`Timing::answer_ms`](super::Timing::answer_ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// When set, the tool source fails the whole batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_error: Option<ToolError>,
}

impl Answer {
    /// A plain text answer.
    #[must_use]
    pub fn text(text: &str) -> Self {
        Answer {
            text: Some(text.to_owned()),
            ..Answer::default()
        }
    }

    /// An answer making these calls.
    #[must_use]
    pub fn calls(calls: Vec<ScriptedCall>) -> Self {
        Answer {
            tool_calls: calls,
            ..Answer::default()
        }
    }

    /// The id of call `index` of this answer when it has none of its own: unique per turn
    /// and per answer (`alternate` is the `when_last_tool_error` answer).
    #[must_use]
    pub fn call_id(&self, turn: usize, alternate: bool, index: usize) -> String {
        match self.tool_calls.get(index).and_then(|c| c.id.clone()) {
            Some(id) => id,
            None => format!(
                "toolu_{turn:02}{}_{index}",
                if alternate { "_alt" } else { "" }
            ),
        }
    }

    /// The assistant response this answer is, as a client would assemble it. Calls with an
    /// `input_problem` carry an empty object as input and are listed as input problems,
    /// classified as a client's decoder classifies their raw arguments
    /// ([`rebound_core::wire::tool_input_problem`]): a scripted `truncated` call is only
    /// truncated when the answer stopped at the token limit (`stop_reason: max_tokens`);
    /// otherwise its broken JSON is `invalid_json`, as on the wire.
    #[must_use]
    pub fn response(&self, turn: usize, alternate: bool) -> AssistantResponse {
        let mut content = Vec::new();
        if let Some(text) = &self.text {
            content.push(ContentBlock::text(text.clone()));
        }
        let stop_reason = match &self.stop_reason {
            Some(reason) => reason.clone(),
            None if self.tool_calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        };
        let output_stopped = stop_reason == StopReason::MaxTokens;
        let mut input_problems = Vec::new();
        for (i, call) in self.tool_calls.iter().enumerate() {
            let id = self.call_id(turn, alternate, i);
            let input = match &call.input_problem {
                Some(p) => {
                    // As the encoders render it: a truncated call's block is left open.
                    let closed = p.kind != InputProblemKind::Truncated;
                    match wire::tool_input_problem(&p.raw, output_stopped, closed) {
                        Some((kind, detail)) => {
                            input_problems.push(ToolInputProblem {
                                tool_use_id: id.clone(),
                                kind,
                                raw: p.raw.clone(),
                                detail,
                            });
                            json!({})
                        }
                        // Arguments that parse after all are the call's input.
                        None => serde_json::from_str(&p.raw).unwrap_or_else(|_| json!({})),
                    }
                }
                None => call.input.clone(),
            };
            content.push(ContentBlock::tool_use(id, call.name.clone(), input));
        }
        AssistantResponse::new(Message::assistant(content), stop_reason)
            .with_input_problems(input_problems)
    }
}

/// One scripted tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptedCall {
    /// The `tool_use` id; generated when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool's name (a name not in the scenario's tools is an unknown tool).
    pub name: String,
    /// The arguments.
    pub input: Value,
    /// When set, the model's input was unusable and the call is refused without running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_problem: Option<InputProblem>,
    /// What running the call produces.
    pub outcome: ToolOutcome,
    /// How long the call runs, overriding [`Timing::tool_ms`](super::Timing::tool_ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl ScriptedCall {
    /// A call of `name` with `input` that succeeds.
    #[must_use]
    pub fn new(name: &str, input: Value) -> Self {
        ScriptedCall {
            name: name.to_owned(),
            input,
            ..ScriptedCall::default()
        }
    }

    /// Builder: sets the outcome.
    #[must_use]
    pub fn with_outcome(mut self, outcome: ToolOutcome) -> Self {
        self.outcome = outcome;
        self
    }
}

/// An unusable tool input, as the client's stream assembler would report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputProblem {
    /// What was wrong.
    pub kind: InputProblemKind,
    /// The raw argument text the model produced.
    #[serde(default)]
    pub raw: String,
}

/// What a scripted tool call produces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum ToolOutcome {
    /// The tool worked.
    Ok {
        /// The output text (default: `"<name> finished"`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Pad (or cut) the output to this many bytes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes: Option<usize>,
    },
    /// The handler failed: the model gets an error result.
    Error {
        /// What went wrong, for the model.
        message: String,
    },
    /// The host failed: the run fails.
    Host {
        /// What failed.
        kind: HostFailureKind,
        /// Details.
        #[serde(default)]
        message: String,
    },
}

impl Default for ToolOutcome {
    fn default() -> Self {
        ToolOutcome::Ok {
            text: None,
            bytes: None,
        }
    }
}

impl ToolOutcome {
    /// A successful outcome with this text.
    #[must_use]
    pub fn ok(text: &str) -> Self {
        ToolOutcome::Ok {
            text: Some(text.to_owned()),
            bytes: None,
        }
    }

    /// A handler error with this message.
    #[must_use]
    pub fn error(message: &str) -> Self {
        ToolOutcome::Error {
            message: message.to_owned(),
        }
    }

    /// The output text of a successful call of `tool` (`None` for failures).
    #[must_use]
    pub fn output_text(&self, tool: &str) -> Option<String> {
        match self {
            ToolOutcome::Ok { text, bytes } => {
                let mut text = text.clone().unwrap_or_else(|| format!("{tool} finished"));
                if let Some(n) = *bytes {
                    if text.len() > n {
                        let mut cut = n;
                        while !text.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        text.truncate(cut);
                    } else {
                        let pad = "0123456789abcdef\n".repeat((n - text.len()) / 17 + 1);
                        text.push_str(&pad[..n - text.len()]);
                    }
                }
                Some(text)
            }
            _ => None,
        }
    }
}

/// A tool source's failure of a whole batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum ToolError {
    /// A failure the model sees as an error result for every call.
    Error {
        /// What went wrong, for the model.
        message: String,
    },
    /// A host failure: the run fails.
    Host {
        /// What failed.
        kind: HostFailureKind,
        /// Details.
        #[serde(default)]
        message: String,
    },
}

impl ToolError {
    /// The host failure, when this is one.
    #[must_use]
    pub fn host_failure(&self) -> Option<HostFailure> {
        match self {
            ToolError::Host { kind, message } => Some(HostFailure::new(*kind, message.clone())),
            ToolError::Error { .. } => None,
        }
    }
}

/// The answer given when a scenario's turns are all used.
#[must_use]
pub fn final_answer() -> Answer {
    Answer::text("Done.")
}
