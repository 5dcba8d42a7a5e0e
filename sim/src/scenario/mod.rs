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
//! instead of `answer` — with Anthropic only: OpenAI's tool messages carry no error flag, so
//! a model behind them cannot tell.
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
//! | `stream_error` | `error_type`, `message`, `after_deltas` | an error event mid-stream (e.g. `overloaded_error`): after the stream's first event, before any output (`after_deltas` 0, the default), or after the answer's first `after_deltas` text deltas (its last, when it has fewer) — a mid-answer error |
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
//! do not use up the script's faults. Draws come from the cursor's seeded RNG. Windows are
//! read on the scenario's clock: in the simulator, virtual ms since the run (for a fleet, the
//! fleet) started; on the fake provider server, real ms since the conversation's first
//! request by default (see the Conversations section of `rebound_sim::fake`).

use rebound_core::{
    ContentBlock, Conversation, Message, ProviderKind, Role, ToolResultPart, ToolSpec,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

mod builtin;
mod cursor;
mod fault;
mod random;
mod render;
mod script;
#[cfg(test)]
mod tests;

pub use cursor::{last_tool_result_failed, Planned, ScriptCursor};
pub use fault::{Fault, FaultKind};
pub use random::{Outage, RandomFaults, WeightedFault};
pub use render::{
    default_error_message, error_body, message_id, overflow_body, overflow_body_for,
    overflow_tokens, render, stream_error_body, BodyKind, Rendered, WireRequest,
};
pub use script::{
    final_answer, with_usage, Answer, InputProblem, ScriptedCall, SummaryScript, ToolError,
    ToolOutcome, Turn,
};

/// A fault scenario: the model's answers, the faults before them, the tools' behaviour.
///
/// See the [module documentation](self) for the JSON format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
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

/// When the run is canceled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Cancel {
    /// At this virtual time.
    AtMs(u64),
    /// Right after this many events were handled.
    AtStep(usize),
}

/// Latencies of the simulated world, in virtual ms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
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
#[non_exhaustive]
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
