//! Fault scenarios as data: what the model answers, which faults come before each answer,
//! what the tools do, and random fault models drawn from a seed.
//!
//! A [`Scenario`] says nothing about how it is played: the virtual-clock driver in
//! [`crate::driver`] plays it against an [`AgentMachine`](rebound_core::AgentMachine), and a
//! fake provider server can play the same file on the wire. Both walk it with a
//! [`ScriptCursor`], which decides, request by request, whether the provider fails (and how)
//! or answers (and with what).
//!
//! # Format
//!
//! Scenarios are JSON. Every field has a default, so `{}` is a valid (fault-free, one-answer)
//! scenario. Unknown fields are an error, so a typo does not silently drop a fault.
//!
//! ```
//! use rebound_sim::scenario::Scenario;
//!
//! let json = r#"{
//!   "name": "example",
//!   "provider": "anthropic",
//!   "user_message": "Fix the failing test.",
//!   "tools": [{"name": "read"}, {"name": "edit"}],
//!   "turns": [
//!     {
//!       "faults": [
//!         {"type": "http", "status": 529},
//!         {"type": "http", "status": 429, "headers": {"retry-after": "2"}},
//!         {"type": "transport", "fault": "reset"},
//!         {"type": "stream_cut", "after_events": 12},
//!         {"type": "stream_error", "error_type": "overloaded_error", "message": "Overloaded"}
//!       ],
//!       "answer": {
//!         "text": "Let me look at the file.",
//!         "tool_calls": [
//!           {"name": "read", "input": {"path": "src/lib.rs"},
//!            "outcome": {"type": "error", "message": "file not found: src/lib.rs"}}
//!         ]
//!       }
//!     },
//!     {
//!       "answer": {"text": "The file does not exist; nothing to fix."},
//!       "when_last_tool_error": {
//!         "tool_calls": [{"name": "read", "input": {"path": "src/main.rs"},
//!                         "outcome": {"type": "ok", "text": "fn main() {}"}}]
//!       }
//!     },
//!     {"faults": [{"type": "context_overflow"}], "answer": {"text": "Fixed."}}
//!   ],
//!   "random": {
//!     "failure_rate": 0.1,
//!     "mix": [{"weight": 3, "fault": {"type": "http", "status": 529}},
//!             {"weight": 1, "fault": {"type": "transport", "fault": "timeout"}}],
//!     "outages": [{"from_ms": 10000, "until_ms": 70000,
//!                  "fault": {"type": "http", "status": 529}}]
//!   },
//!   "cancel": {"at_ms": 600000}
//! }"#;
//! let scenario = Scenario::from_json(json).unwrap();
//! assert_eq!(scenario.turns.len(), 3);
//! assert!(Scenario::from_json(r#"{"turns": [{"faults": [{"type": "http"}]}]}"#).is_err());
//! ```
//!
//! ## Top level
//!
//! | field | meaning | default |
//! |---|---|---|
//! | `name`, `description` | labels | `""` |
//! | `provider` | `anthropic` or `openai`: shapes error bodies and classification | `anthropic` |
//! | `user_message` | the message that starts the run | `"Fix the failing test."` |
//! | `history` | `{"turns": N, "bytes": B, "interrupted": false}`: N earlier tool exchanges with B-byte results before the run, so compaction has something to shrink; `interrupted` ends it with a tool call left unanswered (a crashed run) | none |
//! | `resume` | start with `Resume` (continue the history) instead of the user message | `false` |
//! | `tools` | `[{"name", "description"}]`: the tools the machine offers; a call to any other name is an *unknown tool* | `read`, `edit`, `bash` |
//! | `turns` | the model's answers, in order (below); after the last, the model answers `"Done."` | `[]` |
//! | `random` | a random fault model (below) | none |
//! | `context_limit_bytes` | a request whose conversation is larger (by `approx_bytes`) fails with a context overflow | none |
//! | `compaction_error` | when set, compaction fails with this message instead of running the default compactor | none |
//! | `summary` | `{"faults": [...], "text": "..."}`: how the model answers summary requests (those ending with `rebound_core::compaction::SUMMARY_PROMPT`): each fault fails one summary request, in order, then every summary request is answered with `text`. Summary requests do not move the turns' script; the context limit and the random fault model apply to them as to any request | no faults, a short summary naming the messages summarised |
//! | `cancel` | `{"at_ms": T}` or `{"at_step": N}` (after N handled events) | none |
//! | `timing` | latencies in virtual ms (below) | see [`Timing`] |
//!
//! ## Turns
//!
//! `{"faults": [Fault…], "answer": Answer, "when_last_tool_error": Answer}`. Each fault makes
//! one request attempt fail, in order; the next request gets the answer. When the conversation
//! sent ends with a tool result marked `is_error`, `when_last_tool_error` (if given) is answered
//! instead of `answer`.
//!
//! An **answer** is `{"text", "tool_calls": [Call…], "stop_reason", "latency_ms",
//! "batch_error"}`; `stop_reason` defaults to `tool_use` with calls and `end_turn` without.
//! `batch_error` (`{"type": "error", "message"}` or `{"type": "host", "kind", "message"}`)
//! makes the tool source fail the whole batch.
//!
//! A **call** is `{"id", "name", "input", "input_problem", "outcome", "duration_ms"}`:
//! `input_problem` is `{"kind": "invalid_json" | "truncated" | "not_an_object", "raw": "…"}`
//! (the call is then refused without running); `outcome` is `{"type": "ok", "text", "bytes"}`
//! (the default), `{"type": "error", "message"}` (the handler failed), or `{"type": "host",
//! "kind": "out_of_memory" | "canceled" | …, "message"}` (the host failed: the run fails).
//!
//! ## Faults
//!
//! Every fault takes an optional `after_ms` (when the failure surfaces, overriding
//! [`Timing`]).
//!
//! | `type` | fields | what happens |
//! |---|---|---|
//! | `http` | `status`, `headers` (object), `error_type`, `message` | an HTTP error with a provider-shaped body |
//! | `transport` | `fault`: `connect`, `reset`, `timeout`, `dns`, `tls` | no usable response |
//! | `stream_cut` | `after_events` | the stream ends before the message completed |
//! | `stream_cut_bytes` | `after_bytes` | the same, cut after this many bytes of the body (possibly inside an event) |
//! | `stream_error` | `error_type`, `message` | an error event mid-stream (e.g. `overloaded_error`) |
//! | `empty_message` | | the model answers with nothing |
//! | `context_overflow` | | the provider's real "prompt is too long" 400 |
//! | `malformed_stream` | | invalid SSE or JSON |
//! | `stall` | `ms` | no bytes for `ms`: shorter than the client's idle timeout only delays the answer; longer fails as an idle timeout |
//! | `slow_drip` | `interval_ms` | the next answer (or fault) is sent one event every `interval_ms`; the simulator counts it as a stall of `interval_ms` (one silent gap) |
//!
//! ## Random faults
//!
//! `{"failure_rate": p, "mix": [{"weight", "fault"}…], "outages": [{"from_ms", "until_ms",
//! "rate", "fault"}…]}`: an attempt sent inside an outage window fails with the window's fault
//! (with probability `rate`, default 1); other attempts fail with probability `p` with a fault
//! drawn from the weighted mix (default: 529), else follow the script. Faults drawn at random
//! do not use up the script's faults. Draws come from the cursor's seeded RNG.

use rebound_core::classify::{classify_error_body, classify_http};
use rebound_core::wire;
use rebound_core::{
    AssistantResponse, ContentBlock, Conversation, FailureKind, Headers, HostFailure,
    HostFailureKind, InputProblemKind, Message, Millis, ProviderFailure, ProviderKind, Role,
    StopReason, ToolInputProblem, ToolResultPart, ToolSpec, TransportFault, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// A fault scenario: the model's answers, the faults before them, the tools' behaviour.
///
/// See the [module documentation](self) for the JSON format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// A short name, e.g. `brownout`.
    pub name: String,
    /// What the scenario models.
    pub description: String,
    /// Which provider's error bodies and classification to use.
    pub provider: ProviderKind,
    /// The user message that starts the run.
    pub user_message: String,
    /// Earlier tool exchanges to start from, so compaction has something to shrink.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<History>,
    /// Start by resuming the history instead of sending `user_message`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resume: bool,
    /// The tools the machine offers.
    pub tools: Vec<ToolDef>,
    /// The model's answers, in order, each with the faults that come before it.
    pub turns: Vec<Turn>,
    /// A random fault model drawn from the seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub random: Option<RandomFaults>,
    /// Requests whose conversation is larger than this (by `approx_bytes`) overflow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_limit_bytes: Option<usize>,
    /// When set, compaction fails with this message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction_error: Option<String>,
    /// How the model answers summary requests.
    #[serde(skip_serializing_if = "SummaryScript::is_default")]
    pub summary: SummaryScript,
    /// When the run is canceled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancel: Option<Cancel>,
    /// Latencies of the simulated world.
    pub timing: Timing,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: String::new(),
            description: String::new(),
            provider: ProviderKind::Anthropic,
            user_message: "Fix the failing test.".to_owned(),
            history: None,
            resume: false,
            tools: ["read", "edit", "bash"].map(ToolDef::named).to_vec(),
            turns: Vec::new(),
            random: None,
            context_limit_bytes: None,
            compaction_error: None,
            summary: SummaryScript::default(),
            cancel: None,
            timing: Timing::default(),
        }
    }
}

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
    fn is_default(&self) -> bool {
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
    let answer = Conversation::from(vec![response.message.clone()]);
    response.usage = Usage {
        input_tokens: rebound_core::compaction::estimate_tokens(request.approx_bytes()),
        output_tokens: rebound_core::compaction::estimate_tokens(answer.approx_bytes()),
        ..Usage::default()
    };
    response
}

/// Synthetic earlier exchanges: `turns` tool calls whose results are `bytes` long.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct History {
    /// How many earlier tool exchanges.
    pub turns: usize,
    /// Size of each earlier tool result, in bytes.
    pub bytes: usize,
    /// End with an assistant tool call that was never answered, as a crashed run leaves it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// The id of the unanswered tool call an interrupted [`History`] ends with.
pub const INTERRUPTED_CALL_ID: &str = "toolu_hist_interrupted";

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    /// The tool's name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
}

impl ToolDef {
    /// A tool with a name and a generic description.
    #[must_use]
    pub fn named(name: &str) -> Self {
        ToolDef {
            name: name.to_owned(),
            description: format!("The `{name}` tool."),
        }
    }
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
    /// How long the answer takes, overriding [`Timing::answer_ms`].
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
    /// `input_problem` carry an empty object as input and are listed as input problems.
    #[must_use]
    pub fn response(&self, turn: usize, alternate: bool) -> AssistantResponse {
        let mut content = Vec::new();
        if let Some(text) = &self.text {
            content.push(ContentBlock::text(text.clone()));
        }
        let mut input_problems = Vec::new();
        for (i, call) in self.tool_calls.iter().enumerate() {
            let id = self.call_id(turn, alternate, i);
            let input = match &call.input_problem {
                Some(p) => {
                    input_problems.push(ToolInputProblem {
                        tool_use_id: id.clone(),
                        kind: p.kind,
                        raw: p.raw.clone(),
                        detail: match p.kind {
                            InputProblemKind::InvalidJson => "expected value at line 1".to_owned(),
                            InputProblemKind::Truncated => {
                                "EOF while parsing an object at line 1".to_owned()
                            }
                            InputProblemKind::NotAnObject => "not an object".to_owned(),
                        },
                    });
                    json!({})
                }
                None => call.input.clone(),
            };
            content.push(ContentBlock::tool_use(id, call.name.clone(), input));
        }
        let stop_reason = match &self.stop_reason {
            Some(reason) => reason.clone(),
            None if self.tool_calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        };
        AssistantResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason,
            usage: Usage::default(),
            input_problems,
        }
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
    /// How long the call runs, overriding [`Timing::tool_ms`].
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

/// One failed request attempt.
///
/// In JSON, the [`FaultKind`]'s fields and `after_ms` sit in one object:
/// `{"type": "http", "status": 529, "after_ms": 40}`. Unknown fields are an error.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fault {
    /// What fails.
    #[serde(flatten)]
    pub kind: FaultKind,
    /// When the failure surfaces after the request was sent, overriding [`Timing`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_ms: Option<u64>,
}

impl<'de> Deserialize<'de> for Fault {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // By hand rather than `flatten`, which would accept unknown fields silently.
        let mut map = serde_json::Map::<String, Value>::deserialize(d)?;
        let after_ms = match map.remove("after_ms") {
            None | Some(Value::Null) => None,
            Some(v) => Some(u64::deserialize(v).map_err(D::Error::custom)?),
        };
        let kind = FaultKind::deserialize(Value::Object(map)).map_err(D::Error::custom)?;
        Ok(Fault { kind, after_ms })
    }
}

impl From<FaultKind> for Fault {
    fn from(kind: FaultKind) -> Self {
        Fault {
            kind,
            after_ms: None,
        }
    }
}

impl Fault {
    /// An HTTP error with `status` and no headers.
    #[must_use]
    pub fn http(status: u16) -> Self {
        FaultKind::Http {
            status,
            headers: BTreeMap::new(),
            error_type: None,
            message: None,
        }
        .into()
    }

    /// An HTTP error with `status` and one header.
    #[must_use]
    pub fn http_with(status: u16, header: &str, value: &str) -> Self {
        FaultKind::Http {
            status,
            headers: BTreeMap::from([(header.to_owned(), value.to_owned())]),
            error_type: None,
            message: None,
        }
        .into()
    }

    /// A transport fault.
    #[must_use]
    pub fn transport(fault: TransportFault) -> Self {
        FaultKind::Transport { fault }.into()
    }

    /// The failure a client classifies this fault as, for `provider`.
    ///
    /// HTTP faults and mid-stream errors go through [`rebound_core::classify`] with a
    /// provider-shaped error body, exactly as a real client would see them. A
    /// `context_overflow` is the provider's real "prompt is too long" 400; should the
    /// classifier not recognize it, the scenario's meaning wins (kind `ContextOverflow`). A
    /// `stall` is the idle timeout it causes when it is longer than the client's.
    #[must_use]
    pub fn failure(&self, provider: ProviderKind) -> ProviderFailure {
        match &self.kind {
            FaultKind::Http {
                status,
                headers,
                error_type,
                message,
            } => {
                let body = error_body(provider, *status, error_type.as_deref(), message.as_deref());
                let headers: Headers = headers.iter().collect();
                classify_http(provider, *status, &headers, body.as_bytes(), None)
            }
            FaultKind::Transport { fault } => ProviderFailure::transport(*fault, None),
            FaultKind::StreamCut { after_events } => ProviderFailure::transport(
                TransportFault::StreamCut,
                Some(&format!("after {after_events} events")),
            ),
            FaultKind::StreamCutBytes { after_bytes } => ProviderFailure::transport(
                TransportFault::StreamCut,
                Some(&format!("after {after_bytes} bytes")),
            ),
            FaultKind::StreamError {
                error_type,
                message,
            } => {
                let body = stream_error_body(provider, error_type, message);
                classify_error_body(provider, None, body.as_bytes())
            }
            FaultKind::EmptyMessage => {
                ProviderFailure::transport(TransportFault::EmptyMessage, None)
            }
            FaultKind::ContextOverflow => {
                let body = overflow_body(provider);
                let failure = classify_http(provider, 400, &Headers::new(), body.as_bytes(), None);
                if failure.kind == FailureKind::ContextOverflow {
                    failure
                } else {
                    ProviderFailure {
                        kind: FailureKind::ContextOverflow,
                        ..failure
                    }
                }
            }
            FaultKind::MalformedStream => {
                ProviderFailure::transport(TransportFault::MalformedStream, None)
            }
            FaultKind::Stall { ms }
            | FaultKind::SlowDrip {
                interval_ms: ms, ..
            } => ProviderFailure::transport(
                TransportFault::IdleTimeout,
                Some(&format!("no bytes for {ms} ms")),
            ),
        }
    }

    /// For faults that only slow the stream down (`stall`, `slow_drip`): the longest silence
    /// the client sees, in ms. Shorter than the client's idle timeout, the fault delays what
    /// comes next by this much; longer, it fails the attempt as an idle timeout.
    #[must_use]
    pub fn silence_ms(&self) -> Option<u64> {
        match self.kind {
            FaultKind::Stall { ms } => Some(ms),
            FaultKind::SlowDrip { interval_ms } => Some(interval_ms),
            _ => None,
        }
    }

    /// When the failure surfaces after the request was sent, in virtual ms (for a stall: the
    /// client's idle timeout).
    #[must_use]
    pub fn delay_ms(&self, timing: &Timing, idle_timeout_ms: u64) -> u64 {
        if let Some(ms) = self.after_ms {
            return ms;
        }
        match &self.kind {
            FaultKind::Http { .. } | FaultKind::ContextOverflow => timing.error_ms,
            FaultKind::Transport { fault } => match fault {
                TransportFault::Timeout => timing.timeout_ms,
                TransportFault::IdleTimeout => idle_timeout_ms,
                TransportFault::Reset | TransportFault::StreamCut => timing.error_ms,
                _ => timing.connect_ms,
            },
            FaultKind::StreamCut { after_events } => timing
                .first_event_ms
                .saturating_add(u64::from(*after_events).saturating_mul(timing.event_ms)),
            FaultKind::StreamCutBytes { .. } => timing.first_event_ms,
            FaultKind::StreamError { .. } | FaultKind::MalformedStream => {
                timing.first_event_ms.saturating_add(timing.event_ms)
            }
            FaultKind::EmptyMessage => timing.first_event_ms,
            FaultKind::Stall { .. } | FaultKind::SlowDrip { .. } => {
                timing.first_event_ms.saturating_add(idle_timeout_ms)
            }
        }
    }
}

/// What a [`Fault`] is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultKind {
    /// An HTTP error response with a provider-shaped JSON error body.
    Http {
        /// The status, e.g. 529.
        status: u16,
        /// Response headers, e.g. `retry-after`.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        /// The provider's error type (default: the provider's usual one for the status).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_type: Option<String>,
        /// The error message (default: the provider's usual one for the status).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// No usable HTTP response: `connect`, `reset`, `timeout`, `dns`, `tls`.
    Transport {
        /// Which fault.
        fault: TransportFault,
    },
    /// The stream ends after `after_events` events, before the message completed.
    StreamCut {
        /// Events sent before the cut.
        #[serde(default)]
        after_events: u32,
    },
    /// An error event in the middle of the stream.
    StreamError {
        /// The provider's error type.
        #[serde(default = "overloaded_error")]
        error_type: String,
        /// The error message.
        #[serde(default = "overloaded")]
        message: String,
    },
    /// The model answers with nothing.
    EmptyMessage,
    /// The prompt does not fit the context window.
    ContextOverflow,
    /// The stream is not valid SSE or JSON.
    MalformedStream,
    /// No bytes for `ms`.
    Stall {
        /// How long the stream is silent.
        ms: u64,
    },
    /// The stream ends after `after_bytes` bytes of the body (possibly inside an event),
    /// before the message completed.
    StreamCutBytes {
        /// Body bytes sent before the cut.
        after_bytes: u64,
    },
    /// What comes next is sent slowly: one event every `interval_ms`.
    SlowDrip {
        /// The silence before each event.
        interval_ms: u64,
    },
}

fn overloaded_error() -> String {
    "overloaded_error".to_owned()
}

fn overloaded() -> String {
    "Overloaded".to_owned()
}

/// The error body `provider` sends with `status`, with its usual error type and message
/// unless given: [`rebound_core::wire::encode_error_body`] with [`default_error_message`].
#[must_use]
pub fn error_body(
    provider: ProviderKind,
    status: u16,
    error_type: Option<&str>,
    message: Option<&str>,
) -> String {
    let message = message.unwrap_or_else(|| default_error_message(provider, status));
    let body = wire::encode_error_body(provider, status, error_type, message);
    String::from_utf8_lossy(&body).into_owned()
}

/// The message `provider` usually sends with an error `status`.
#[must_use]
pub fn default_error_message(provider: ProviderKind, status: u16) -> &'static str {
    match provider {
        ProviderKind::Anthropic => match status {
            400 => "Invalid request",
            401 => "invalid x-api-key",
            403 => "Your API key does not have permission",
            404 => "model: not found",
            413 => "Request exceeds the maximum allowed size",
            429 => "Number of request tokens has exceeded your per-minute rate limit",
            529 => "Overloaded",
            _ => "Internal server error",
        },
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => match status {
            400 => "Invalid request",
            401 => "Incorrect API key provided",
            403 => "Country, region, or territory not supported",
            404 => "The model does not exist or you do not have access to it.",
            429 => "Rate limit reached for requests",
            503 => "The server is overloaded or not ready yet.",
            _ => "The server had an error while processing your request.",
        },
    }
}

/// The body (the JSON of the `data:` line) of a mid-stream error event:
/// [`rebound_core::wire::encode_stream_error_event`] without its SSE framing.
#[must_use]
pub fn stream_error_body(provider: ProviderKind, error_type: &str, message: &str) -> String {
    let event = wire::encode_stream_error_event(provider, error_type, message);
    let event = String::from_utf8_lossy(&event);
    event
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .unwrap_or_default()
        .to_owned()
}

/// Token counts in the scripted context overflow: (tokens sent, the model's limit).
#[must_use]
pub fn overflow_tokens(provider: ProviderKind) -> (u64, u64) {
    match provider {
        ProviderKind::Anthropic => (208_310, 200_000),
        ProviderKind::OpenAi => (130_412, 128_000),
        ProviderKind::OpenAiResponses => (272_913, 272_000),
    }
}

/// The provider's real context-overflow 400 body, for `tokens` over `limit`.
#[must_use]
pub fn overflow_body_for(provider: ProviderKind, tokens: u64, limit: u64) -> String {
    let message = wire::context_overflow_message(provider, tokens, limit);
    let error_type = match provider {
        ProviderKind::Anthropic => "invalid_request_error",
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "context_length_exceeded",
    };
    let body = wire::encode_error_body(provider, 400, Some(error_type), &message);
    String::from_utf8_lossy(&body).into_owned()
}

/// The provider's real context-overflow 400 body (the scripted `context_overflow` fault).
#[must_use]
pub fn overflow_body(provider: ProviderKind) -> String {
    let (tokens, limit) = overflow_tokens(provider);
    overflow_body_for(provider, tokens, limit)
}

/// A random fault model: failures per attempt and outage windows, drawn from a seed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RandomFaults {
    /// Probability that an attempt outside every outage fails (0 to 1).
    pub failure_rate: f64,
    /// The faults drawn when an attempt fails, weighted (empty: always 529).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mix: Vec<WeightedFault>,
    /// Windows of virtual time in which every attempt fails.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outages: Vec<Outage>,
}

/// A fault and its weight in a [`RandomFaults`] mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedFault {
    /// Relative weight.
    pub weight: u32,
    /// The fault.
    pub fault: Fault,
}

/// Attempts sent in `[from_ms, until_ms)` fail with `fault` — every one of them, or each with
/// probability `rate` (a brownout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outage {
    /// Start of the window, in virtual ms.
    pub from_ms: u64,
    /// End of the window (exclusive), in virtual ms.
    pub until_ms: u64,
    /// Probability that an attempt in the window fails (default 1: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// The fault attempts in the window get.
    pub fault: Fault,
    /// Only attempts sent to this target of the fallback chain (0 = the primary) are hit;
    /// `None` hits every target. Models one provider or model being down while another
    /// is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<usize>,
}

impl Outage {
    /// A window in which every attempt fails with `fault`.
    #[must_use]
    pub fn total(from_ms: u64, until_ms: u64, fault: Fault) -> Self {
        Outage {
            from_ms,
            until_ms,
            rate: None,
            fault,
            target: None,
        }
    }
}

/// When the run is canceled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Cancel {
    /// At this virtual time.
    AtMs(u64),
    /// Right after this many events were handled.
    AtStep(usize),
}

/// Latencies of the simulated world, in virtual ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timing {
    /// A complete answer.
    pub answer_ms: u64,
    /// An HTTP error response.
    pub error_ms: u64,
    /// A connect, DNS or TLS failure.
    pub connect_ms: u64,
    /// A request timeout.
    pub timeout_ms: u64,
    /// The first stream event.
    pub first_event_ms: u64,
    /// Each further stream event.
    pub event_ms: u64,
    /// A tool call.
    pub tool_ms: u64,
    /// A compaction.
    pub compaction_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            answer_ms: 1_500,
            error_ms: 150,
            connect_ms: 50,
            timeout_ms: 30_000,
            first_event_ms: 400,
            event_ms: 20,
            tool_ms: 100,
            compaction_ms: 300,
        }
    }
}

/// Why a scenario could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// The text is not valid scenario JSON.
    #[error("scenario is not valid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// The JSON is well-formed but describes an impossible scenario.
    #[error("invalid scenario: {0}")]
    Invalid(String),
}

impl Scenario {
    /// Parses and validates a scenario.
    ///
    /// # Errors
    ///
    /// [`ScenarioError::Json`] with the position for malformed JSON, unknown fields or wrong
    /// types; [`ScenarioError::Invalid`] for values that make no sense (see
    /// [`validate`](Self::validate)).
    pub fn from_json(text: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = serde_json::from_str(text).map_err(|e| ScenarioError::Json {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// The scenario as pretty JSON.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks values JSON types cannot: status codes, probabilities, windows, weights, names.
    ///
    /// # Errors
    ///
    /// [`ScenarioError::Invalid`] naming the first bad value.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        let bad = |m: String| Err(ScenarioError::Invalid(m));
        let check_fault = |f: &Fault, at: &str| -> Result<(), ScenarioError> {
            if let FaultKind::Http { status, .. } = f.kind {
                if !(100..=599).contains(&status) {
                    return bad(format!("{at}: HTTP status {status} is not in 100..=599"));
                }
                if (200..300).contains(&status) {
                    return bad(format!("{at}: HTTP status {status} is not an error"));
                }
            }
            Ok(())
        };
        for (t, turn) in self.turns.iter().enumerate() {
            for (i, f) in turn.faults.iter().enumerate() {
                check_fault(f, &format!("turns[{t}].faults[{i}]"))?;
            }
            for answer in std::iter::once(&turn.answer).chain(&turn.when_last_tool_error) {
                for (i, call) in answer.tool_calls.iter().enumerate() {
                    if call.name.is_empty() {
                        return bad(format!("turns[{t}]: tool call {i} has an empty name"));
                    }
                }
            }
        }
        if let Some(r) = &self.random {
            if !(0.0..=1.0).contains(&r.failure_rate) {
                return bad(format!(
                    "random.failure_rate {} is not between 0 and 1",
                    r.failure_rate
                ));
            }
            if r.failure_rate > 0.0 && !r.mix.is_empty() && r.mix.iter().all(|w| w.weight == 0) {
                return bad("random.mix: every weight is 0".to_owned());
            }
            for (i, w) in r.mix.iter().enumerate() {
                check_fault(&w.fault, &format!("random.mix[{i}]"))?;
            }
            for (i, o) in r.outages.iter().enumerate() {
                if o.from_ms >= o.until_ms {
                    return bad(format!(
                        "random.outages[{i}]: from_ms {} is not before until_ms {}",
                        o.from_ms, o.until_ms
                    ));
                }
                if let Some(rate) = o.rate {
                    if !(0.0..=1.0).contains(&rate) {
                        return bad(format!(
                            "random.outages[{i}].rate {rate} is not between 0 and 1"
                        ));
                    }
                }
                check_fault(&o.fault, &format!("random.outages[{i}]"))?;
            }
        }
        if self.tools.iter().any(|t| t.name.is_empty()) {
            return bad("a tool has an empty name".to_owned());
        }
        Ok(())
    }

    /// The tool specs to configure the machine with.
    #[must_use]
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }

    /// The conversation the run starts from: the synthetic [`History`], if any.
    #[must_use]
    pub fn initial_conversation(&self) -> Option<Conversation> {
        let h = self.history?;
        let mut c = Conversation::new();
        c.push(Message::user_text("Look around the repository first."));
        let output = ToolOutcome::Ok {
            text: Some(String::new()),
            bytes: Some(h.bytes),
        };
        for i in 0..h.turns {
            let id = format!("toolu_hist_{i}");
            c.push(Message {
                role: Role::Assistant,
                content: vec![ContentBlock::tool_use(
                    id.clone(),
                    "read",
                    json!({"path": format!("src/file{i}.rs")}),
                )],
            });
            let text = output.output_text("read").unwrap_or_default();
            c.push(Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result(
                    id,
                    vec![ToolResultPart::text(text)],
                    false,
                )],
            });
        }
        if h.interrupted {
            c.push(Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text("One more look."),
                    ContentBlock::tool_use(
                        INTERRUPTED_CALL_ID,
                        "bash",
                        json!({"command": "cargo test"}),
                    ),
                ],
            });
        } else {
            c.push(Message::assistant_text("I have looked around."));
        }
        Some(c)
    }

    /// The scenario without any fault: no scripted or random faults, no context limit, no
    /// compaction error, no cancel, no stalls. Answers and tool behaviour are unchanged.
    #[must_use]
    pub fn without_faults(&self) -> Scenario {
        let mut s = self.clone();
        for turn in &mut s.turns {
            turn.faults.clear();
        }
        s.random = None;
        s.context_limit_bytes = None;
        s.compaction_error = None;
        s.cancel = None;
        s
    }
}

/// The answer given when a scenario's turns are all used.
#[must_use]
pub fn final_answer() -> Answer {
    Answer::text("Done.")
}

/// What the provider does with one request, as decided by a [`ScriptCursor`].
#[derive(Debug, Clone, PartialEq)]
pub enum Planned<'s> {
    /// The attempt fails with this fault.
    Fault(&'s Fault),
    /// The conversation is over the scenario's `context_limit_bytes`.
    Overflow {
        /// The conversation's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A summary request, answered with this script's summary.
    Summary(&'s SummaryScript),
    /// The attempt succeeds with this answer.
    Answer {
        /// Index of the turn answered; `turns.len()` for the final `"Done."`.
        turn: usize,
        /// Whether this is the turn's `when_last_tool_error` answer.
        alternate: bool,
        /// The answer (`None`: the scenario is used up; answer [`final_answer`]).
        answer: Option<&'s Answer>,
    },
}

/// Walks a scenario request by request; shared by the simulator and a fake provider server.
///
/// It owns only a position and the RNG of the random fault model (seeded from the run's
/// seed), so the same scenario and seed give the same plan for the same requests.
///
/// ```
/// use rebound_core::{Conversation, Message, Millis};
/// use rebound_sim::scenario::{Planned, Scenario, ScriptCursor};
///
/// let s = Scenario::builtin("blip").unwrap();
/// let mut cursor = ScriptCursor::new(7);
/// let mut conversation = Conversation::new();
/// conversation.push(Message::user_text("hi"));
/// assert!(matches!(cursor.next(&s, Millis(0), &conversation), Planned::Fault(_)));
/// assert!(matches!(cursor.next(&s, Millis(0), &conversation), Planned::Fault(_)));
/// assert!(matches!(cursor.next(&s, Millis(0), &conversation), Planned::Answer { turn: 0, .. }));
/// ```
#[derive(Debug, Clone)]
pub struct ScriptCursor {
    turn: usize,
    fault: usize,
    summary_fault: usize,
    rng: fastrand::Rng,
}

impl ScriptCursor {
    /// A cursor at the start, its random fault model seeded from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        ScriptCursor {
            turn: 0,
            fault: 0,
            summary_fault: 0,
            // A different stream from the machine's jitter RNG, which uses `seed` itself.
            rng: fastrand::Rng::with_seed(seed ^ 0x5ce7_a810_fa17_5eed),
        }
    }

    /// Index of the next turn to answer.
    #[must_use]
    pub fn turn(&self) -> usize {
        self.turn
    }

    /// Decides what the request sent at `now` with `conversation` gets, and moves on, for a
    /// request to the primary target (see [`next_on`](Self::next_on)).
    pub fn next<'s>(
        &mut self,
        scenario: &'s Scenario,
        now: Millis,
        conversation: &Conversation,
    ) -> Planned<'s> {
        self.next_on(scenario, now, conversation, 0)
    }

    /// Decides what a request sent at `now` with `conversation` to target `target` of the
    /// fallback chain gets, and moves on. Outages with a `target` hit only that target;
    /// scripted turn faults and the random mix hit every target.
    pub fn next_on<'s>(
        &mut self,
        scenario: &'s Scenario,
        now: Millis,
        conversation: &Conversation,
        target: usize,
    ) -> Planned<'s> {
        if let Some(limit) = scenario.context_limit_bytes {
            let bytes = conversation.approx_bytes();
            if bytes > limit {
                return Planned::Overflow { bytes, limit };
            }
        }
        if let Some(random) = &scenario.random {
            for o in &random.outages {
                let aimed = o.target.map_or(true, |t| t == target);
                if aimed && (o.from_ms..o.until_ms).contains(&now.0) {
                    let hit = match o.rate {
                        None => true,
                        Some(rate) => self.rng.f64() < rate,
                    };
                    if hit {
                        return Planned::Fault(&o.fault);
                    }
                }
            }
            if random.failure_rate > 0.0 && self.rng.f64() < random.failure_rate {
                if let Some(f) = pick(&random.mix, &mut self.rng) {
                    return Planned::Fault(f);
                }
                return Planned::Fault(&DEFAULT_RANDOM_FAULT);
            }
        }
        if rebound_core::compaction::is_summary_request(conversation) {
            if let Some(f) = scenario.summary.faults.get(self.summary_fault) {
                self.summary_fault += 1;
                return Planned::Fault(f);
            }
            return Planned::Summary(&scenario.summary);
        }
        let Some(turn) = scenario.turns.get(self.turn) else {
            return Planned::Answer {
                turn: self.turn,
                alternate: false,
                answer: None,
            };
        };
        if let Some(f) = turn.faults.get(self.fault) {
            self.fault += 1;
            return Planned::Fault(f);
        }
        let index = self.turn;
        self.turn += 1;
        self.fault = 0;
        match &turn.when_last_tool_error {
            Some(alt) if last_tool_result_failed(conversation) => Planned::Answer {
                turn: index,
                alternate: true,
                answer: Some(alt),
            },
            _ => Planned::Answer {
                turn: index,
                alternate: false,
                answer: Some(&turn.answer),
            },
        }
    }
}

static DEFAULT_RANDOM_FAULT: Fault = Fault {
    kind: FaultKind::Http {
        status: 529,
        headers: BTreeMap::new(),
        error_type: None,
        message: None,
    },
    after_ms: None,
};

fn pick<'s>(mix: &'s [WeightedFault], rng: &mut fastrand::Rng) -> Option<&'s Fault> {
    let total: u64 = mix.iter().map(|w| u64::from(w.weight)).sum();
    if total == 0 {
        return None;
    }
    let mut x = rng.u64(0..total);
    for w in mix {
        let weight = u64::from(w.weight);
        if x < weight {
            return Some(&w.fault);
        }
        x -= weight;
    }
    None
}

/// Whether the conversation ends with a user message holding an error tool result.
#[must_use]
pub fn last_tool_result_failed(conversation: &Conversation) -> bool {
    conversation
        .last()
        .is_some_and(|m| m.role == Role::User && m.tool_results().any(|r| r.is_error))
}

// ----- built-ins ---------------------------------------------------------------------------

impl Scenario {
    /// Names of the built-in scenarios, for [`builtin`](Self::builtin).
    #[must_use]
    pub fn builtin_names() -> &'static [&'static str] {
        &[
            "healthy",
            "blip",
            "rate-limit-window",
            "stream-cuts",
            "brownout",
            "total-outage",
            "tool-errors",
            "overflow",
            "demo",
        ]
    }

    /// A built-in scenario by name (see [`builtin_names`](Self::builtin_names)).
    ///
    /// ```
    /// use rebound_sim::scenario::Scenario;
    /// for name in Scenario::builtin_names() {
    ///     let s = Scenario::builtin(name).unwrap();
    ///     // Every built-in survives a round trip through its JSON form.
    ///     assert_eq!(Scenario::from_json(&s.to_json()).unwrap(), s);
    /// }
    /// assert!(Scenario::builtin("nope").is_none());
    /// ```
    #[must_use]
    pub fn builtin(name: &str) -> Option<Scenario> {
        let mut s = coding_task();
        s.name = name.to_owned();
        match name {
            "healthy" => {
                s.description = "A three-turn coding task with no faults.".into();
            }
            "blip" => {
                s.description = "Two 529 overloaded errors before the first answer.".into();
                s.turns[0].faults = vec![Fault::http(529), Fault::http(529)];
            }
            "rate-limit-window" => {
                s.description =
                    "429 with retry-after: 5 for every request in the first 12 s.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage::total(
                        0,
                        12_000,
                        Fault::http_with(429, "retry-after", "5"),
                    )],
                    ..RandomFaults::default()
                });
            }
            "stream-cuts" => {
                s.description =
                    "For a minute, 30 % of attempts have their stream cut mid-message.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage {
                        rate: Some(0.3),
                        ..Outage::total(0, 60_000, FaultKind::StreamCut { after_events: 25 }.into())
                    }],
                    ..RandomFaults::default()
                });
            }
            "brownout" => {
                s.description = "Half of all attempts fail with 503 for two minutes.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage {
                        rate: Some(0.5),
                        ..Outage::total(0, 120_000, Fault::http(503))
                    }],
                    ..RandomFaults::default()
                });
            }
            "total-outage" => {
                s.description = "Every attempt fails with 529 for ten minutes.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage::total(0, 600_000, Fault::http(529))],
                    ..RandomFaults::default()
                });
            }
            "tool-errors" => {
                s.description = "Every kind of model-visible tool failure, then recovery.".into();
                s.turns[0].answer = Answer::calls(vec![
                    ScriptedCall::new("read", json!({"path": "src/parser.rs"}))
                        .with_outcome(ToolOutcome::error("file not found: src/parser.rs")),
                    ScriptedCall::new("grep", json!({"pattern": "fn parse"})),
                    ScriptedCall {
                        input_problem: Some(InputProblem {
                            kind: InputProblemKind::Truncated,
                            raw: r#"{"path": "src/pa"#.into(),
                        }),
                        ..ScriptedCall::new("read", json!({}))
                    },
                    ScriptedCall {
                        input_problem: Some(InputProblem {
                            kind: InputProblemKind::InvalidJson,
                            raw: r#"{"path": src/lib.rs}"#.into(),
                        }),
                        ..ScriptedCall::new("read", json!({}))
                    },
                ]);
                s.turns[1].answer.batch_error = Some(ToolError::Error {
                    message: "the tool server crashed".into(),
                });
                s.turns[1].when_last_tool_error = Some(Answer::calls(vec![ScriptedCall::new(
                    "bash",
                    json!({"command": "ls src"}),
                )
                .with_outcome(ToolOutcome::ok("lexer.rs\nparse.rs\nlib.rs"))]));
            }
            "overflow" => {
                s.description =
                    "A long session over the context limit: compacted once, then it fits.".into();
                s.history = Some(History {
                    turns: 8,
                    bytes: 8_000,
                    interrupted: false,
                });
                s.context_limit_bytes = Some(40_000);
            }
            "demo" => return Some(demo()),
            _ => return None,
        }
        Some(s)
    }
}

/// read → edit → done.
fn coding_task() -> Scenario {
    Scenario {
        turns: vec![
            Turn {
                answer: Answer {
                    text: Some("Let me read the parser.".into()),
                    ..Answer::calls(vec![ScriptedCall::new(
                        "read",
                        json!({"path": "src/parse.rs"}),
                    )
                    .with_outcome(ToolOutcome::ok("fn parse(input: &str) -> Ast { panic!(\"unwritten\") }"))])
                },
                ..Turn::default()
            },
            Turn {
                answer: Answer::calls(vec![ScriptedCall::new(
                    "edit",
                    json!({"path": "src/parse.rs", "old": "panic!(\"unwritten\")", "new": "Ast::new(input)"}),
                )
                .with_outcome(ToolOutcome::ok("1 replacement"))]),
                ..Turn::default()
            },
            Turn {
                answer: Answer::text("Fixed: `parse` now builds the AST."),
                ..Turn::default()
            },
        ],
        ..Scenario::default()
    }
}

/// A 529, a 429 with retry-after, a stream cut, a tool error the model recovers from, and a
/// context overflow that compacts.
fn demo() -> Scenario {
    let turns = vec![
        Turn {
            faults: vec![Fault::http(529)],
            answer: Answer {
                text: Some("I'll start by reading the parser.".into()),
                ..Answer::calls(vec![ScriptedCall::new(
                    "read",
                    json!({"path": "src/parser.rs"}),
                )
                .with_outcome(ToolOutcome::error("file not found: src/parser.rs"))])
            },
            ..Turn::default()
        },
        Turn {
            faults: vec![Fault::http_with(429, "retry-after", "2")],
            answer: Answer::text("The parser is where I expected it."),
            when_last_tool_error: Some(Answer {
                text: Some("That path is wrong; let me list the sources.".into()),
                ..Answer::calls(vec![ScriptedCall::new(
                    "bash",
                    json!({"command": "ls src"}),
                )
                .with_outcome(ToolOutcome::ok("lexer.rs\nparse.rs\nlib.rs"))])
            }),
        },
        Turn {
            faults: vec![FaultKind::StreamCut { after_events: 14 }.into()],
            answer: Answer::calls(vec![ScriptedCall::new(
                "read",
                json!({"path": "src/parse.rs"}),
            )
            .with_outcome(ToolOutcome::Ok {
                text: Some("fn parse(input: &str) -> Ast { panic!(\"unwritten\") }\n".into()),
                bytes: Some(6_000),
            })]),
            ..Turn::default()
        },
        Turn {
            faults: vec![FaultKind::ContextOverflow.into()],
            answer: Answer::calls(vec![ScriptedCall::new(
                "edit",
                json!({"path": "src/parse.rs", "old": "panic!(\"unwritten\")", "new": "Ast::new(input)"}),
            )
            .with_outcome(ToolOutcome::ok("1 replacement"))]),
            ..Turn::default()
        },
        Turn {
            answer: Answer::text("Fixed: `parse` now builds the AST instead of panicking."),
            ..Turn::default()
        },
    ];
    Scenario {
        name: "demo".into(),
        description: "A 529, a 429 with retry-after, a stream cut, a tool error the model \
                      recovers from, and a context overflow that compacts."
            .into(),
        history: Some(History {
            turns: 3,
            bytes: 3_000,
            interrupted: false,
        }),
        turns,
        ..Scenario::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_scenarios_are_typed_errors_with_positions() {
        let e = Scenario::from_json("{\n  \"turns\": [1]\n}").unwrap_err();
        assert!(matches!(e, ScenarioError::Json { line: 2, .. }), "{e}");
        let e = Scenario::from_json(r#"{"turnz": []}"#).unwrap_err();
        assert!(e.to_string().contains("turnz"), "{e}");
        let e =
            Scenario::from_json(r#"{"turns": [{"faults": [{"type": "http", "status": 999}]}]}"#)
                .unwrap_err();
        assert!(matches!(e, ScenarioError::Invalid(_)), "{e}");
        let e = Scenario::from_json(
            r#"{"turns": [{"faults": [{"type": "http", "status": 529, "statsu": 1}]}]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("statsu"), "{e}");
        let e =
            Scenario::from_json(r#"{"turns": [{"faults": [{"type": "teapot"}]}]}"#).unwrap_err();
        assert!(e.to_string().contains("teapot"), "{e}");
        let timed = Scenario::from_json(
            r#"{"turns": [{"faults": [{"type": "stream_cut", "after_events": 3, "after_ms": 40}]}]}"#,
        )
        .unwrap();
        assert_eq!(timed.turns[0].faults[0].after_ms, Some(40));
        assert_eq!(Scenario::from_json(&timed.to_json()).unwrap(), timed);
        let e = Scenario::from_json(r#"{"random": {"failure_rate": 1.5}}"#).unwrap_err();
        assert!(matches!(e, ScenarioError::Invalid(_)), "{e}");
        let e = Scenario::from_json(
            r#"{"random": {"outages": [{"from_ms": 5, "until_ms": 5, "fault": {"type": "empty_message"}}]}}"#,
        )
        .unwrap_err();
        assert!(matches!(e, ScenarioError::Invalid(_)), "{e}");
        assert!(Scenario::from_json("").is_err());
        assert!(Scenario::from_json("{}").is_ok());
    }

    #[test]
    fn http_faults_are_classified_by_status() {
        let p = ProviderKind::Anthropic;
        assert_eq!(Fault::http(529).failure(p).kind, FailureKind::Unavailable);
        assert_eq!(Fault::http(429).failure(p).kind, FailureKind::RateLimited);
        assert_eq!(Fault::http(401).failure(p).kind, FailureKind::AuthFailed);
        let hinted = Fault::http_with(429, "retry-after-ms", "1500").failure(p);
        assert_eq!(hinted.retry_after_ms, Some(1_500));
        let overflow = Fault::from(FaultKind::ContextOverflow).failure(ProviderKind::OpenAi);
        assert_eq!(overflow.kind, FailureKind::ContextOverflow);
        assert_eq!(overflow.status, Some(400));
    }

    #[test]
    fn responses_stream_errors_are_classified_like_their_http_twins() {
        let r = ProviderKind::OpenAiResponses;
        for (code, status) in [
            ("rate_limit_exceeded", 429),
            ("server_error", 500),
            ("context_length_exceeded", 400),
        ] {
            let in_stream = Fault::from(FaultKind::StreamError {
                error_type: code.into(),
                message: "failed".into(),
            })
            .failure(r);
            let http = Fault::from(FaultKind::Http {
                status,
                headers: BTreeMap::new(),
                error_type: Some(code.into()),
                message: None,
            })
            .failure(r);
            assert_eq!(in_stream.kind, http.kind, "{code}");
            assert_eq!(in_stream.status, None, "{code}");
        }
        let overflow = Fault::from(FaultKind::ContextOverflow).failure(r);
        assert_eq!(overflow.kind, FailureKind::ContextOverflow);
    }

    #[test]
    fn conditional_answers_follow_the_last_tool_result() {
        let s = Scenario::builtin("demo").unwrap();
        let mut cursor = ScriptCursor::new(1);
        let mut c = Conversation::new();
        c.push(Message::user_text("go"));
        assert!(matches!(cursor.next(&s, Millis(0), &c), Planned::Fault(_)));
        assert!(matches!(
            cursor.next(&s, Millis(0), &c),
            Planned::Answer {
                turn: 0,
                alternate: false,
                ..
            }
        ));
        c.push(Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "x",
                vec![ToolResultPart::text("no")],
                true,
            )],
        });
        assert!(matches!(cursor.next(&s, Millis(0), &c), Planned::Fault(_)));
        assert!(matches!(
            cursor.next(&s, Millis(0), &c),
            Planned::Answer {
                turn: 1,
                alternate: true,
                ..
            }
        ));
    }

    #[test]
    fn outage_windows_fail_every_attempt_inside_them() {
        let s = Scenario::builtin("total-outage").unwrap();
        let mut cursor = ScriptCursor::new(3);
        let c = Conversation::new();
        for t in [0, 1, 599_999] {
            assert!(matches!(cursor.next(&s, Millis(t), &c), Planned::Fault(_)));
        }
        assert!(matches!(
            cursor.next(&s, Millis(600_000), &c),
            Planned::Answer { turn: 0, .. }
        ));
    }

    #[test]
    fn padded_outputs_have_the_requested_size() {
        for n in [0, 1, 5, 100, 6_000] {
            let out = ToolOutcome::Ok {
                text: Some("hello".into()),
                bytes: Some(n),
            };
            assert_eq!(out.output_text("t").unwrap().len(), n);
        }
    }
}
