//! `AgentMachine` for JavaScript, driven through core's [`Run`] as every shell drives it:
//! events in as JSON text, the run's actions out as JSON text (`lib/machine.js` parses them
//! and attaches the conversation), conversations as shared [`Snapshot`]s. The tally, the
//! trace, the end of the run, the stream resets and the check of an answer's id are the
//! run's; this module only converts.

use crate::convert::{from_json, millis, seed, to_json};
use crate::errors::{error, Kind, Result};
use rebound_core::compaction::CompactionReport;
use rebound_core::run::{Action, Issued, Refusal, Run, Step};
use rebound_core::{
    Command, Conversation, Event, FallbackInfo, Handled, IgnoreReason, MachineConfig,
    ProviderRetryInfo, RequestPurpose, RunError, Secrets, StreamDeadlines,
};
use rebound_sim::Trace;
use serde::Serialize;
use std::sync::Arc;
use wasm_bindgen::prelude::*;

/// A shared, read-only conversation as a command carried it (no copy is made), or the
/// summary of one read from a trace (`{"messages": n, "digest": "…"}`).
#[wasm_bindgen]
pub struct Snapshot {
    inner: SnapshotInner,
}

enum SnapshotInner {
    Full {
        conversation: Arc<Conversation>,
        digest: std::cell::OnceCell<u64>,
    },
    Summary {
        messages: usize,
        digest: u64,
    },
}

impl Snapshot {
    /// A snapshot of a whole conversation.
    pub fn full(conversation: Arc<Conversation>) -> Self {
        Snapshot {
            inner: SnapshotInner::Full {
                conversation,
                digest: std::cell::OnceCell::new(),
            },
        }
    }

    /// The conversation, when the snapshot holds it.
    pub fn conversation(&self) -> Result<&Arc<Conversation>> {
        match &self.inner {
            SnapshotInner::Full { conversation, .. } => Ok(conversation),
            SnapshotInner::Summary { .. } => Err(error(
                Kind::Rebound,
                "this snapshot was read from a trace: it holds only the message count and \
                 digest, not the messages",
            )),
        }
    }

    fn digest_value(&self) -> u64 {
        match &self.inner {
            SnapshotInner::Full {
                conversation,
                digest,
            } => *digest.get_or_init(|| rebound_core::Snapshot(Arc::clone(conversation)).digest()),
            SnapshotInner::Summary { digest, .. } => *digest,
        }
    }

    fn len(&self) -> usize {
        match &self.inner {
            SnapshotInner::Full { conversation, .. } => conversation.len(),
            SnapshotInner::Summary { messages, .. } => *messages,
        }
    }
}

#[wasm_bindgen]
impl Snapshot {
    /// A snapshot of a conversation: the JSON text of a list of messages.
    #[wasm_bindgen(js_name = fromMessages)]
    pub fn from_messages(messages_json: &str) -> Result<Snapshot> {
        let conversation: Conversation = from_json(messages_json, "conversation", Kind::Event)?;
        Ok(Snapshot::full(Arc::new(conversation)))
    }

    /// The snapshot of a trace's `{"messages": n, "digest": "<16 hex digits>"}` (JSON text).
    #[wasm_bindgen(js_name = fromSummary)]
    pub fn from_summary(summary_json: &str) -> Result<Snapshot> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Summary {
            messages: usize,
            digest: String,
        }
        let s: Summary = from_json(summary_json, "snapshot summary", Kind::Event)?;
        let digest = u64::from_str_radix(&s.digest, 16)
            .ok()
            .filter(|_| s.digest.len() == 16)
            .ok_or_else(|| {
                error(
                    Kind::Event,
                    format!(
                        "invalid snapshot summary: digest {:?} is not 16 hex digits",
                        s.digest
                    ),
                )
            })?;
        Ok(Snapshot {
            inner: SnapshotInner::Summary {
                messages: s.messages,
                digest,
            },
        })
    }

    /// Whether the messages themselves are here (not only a trace's summary).
    #[wasm_bindgen(getter, js_name = hasMessages)]
    pub fn has_messages(&self) -> bool {
        matches!(self.inner, SnapshotInner::Full { .. })
    }

    /// The 64-bit FNV-1a digest of the conversation's JSON, 16 hex digits, as in traces.
    #[wasm_bindgen(getter)]
    pub fn digest(&self) -> String {
        format!("{:016x}", self.digest_value())
    }

    /// The number of messages.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> usize {
        self.len()
    }

    /// The messages, as JSON text.
    #[wasm_bindgen(js_name = messagesJson)]
    pub fn messages_json(&self) -> Result<String> {
        to_json(&**self.conversation()?)
    }

    /// Whether `other` is the same conversation (by its messages when both hold them, else
    /// by length and digest).
    pub fn equals(&self, other: &Snapshot) -> bool {
        match (&self.inner, &other.inner) {
            (
                SnapshotInner::Full {
                    conversation: a, ..
                },
                SnapshotInner::Full {
                    conversation: b, ..
                },
            ) => Arc::ptr_eq(a, b) || a == b,
            _ => self.len() == other.len() && self.digest_value() == other.digest_value(),
        }
    }
}

/// A command in its JSON shape for JavaScript: the machine's own fields, but a conversation
/// is not written (it crosses as a [`Snapshot`], fetched by `polledSnapshot`), and a
/// compaction's report is one object, as the Python binding has it.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Polled<'a> {
    SendRequest {
        request: u64,
        target: usize,
        attempt: u32,
        purpose: RequestPurpose,
        deadlines: &'a StreamDeadlines,
    },
    Compact {
        compaction: u64,
    },
    ReplaceConversation {
        report: &'a CompactionReport,
    },
    StreamReset {
        request: u64,
        attempt: u32,
    },
}

/// The native machine: a [`Run`] of core's machine. Use `AgentMachine` of `lib/machine.js`,
/// which parses what it hands out.
#[wasm_bindgen]
pub struct Machine {
    run: Run,
    issued: Issued,
    /// Whether the run records its steps (for `traceJsonl`).
    record: bool,
    /// The conversation of the command polled last, for `polledSnapshot`.
    polled: Option<Arc<Conversation>>,
}

#[wasm_bindgen]
impl Machine {
    /// A machine of `config_json` (a MachineConfig's JSON text, or nothing for the
    /// defaults), jitter `seed` (a number, bigint or decimal string), an optional starting
    /// conversation (JSON text of its messages), recording its steps when `record`, and
    /// masking each of `secrets` in every failure it is told of.
    #[wasm_bindgen(constructor)]
    pub fn new(
        config_json: Option<String>,
        seed_value: JsValue,
        conversation_json: Option<String>,
        record: bool,
        secrets: Vec<String>,
    ) -> Result<Machine> {
        let seed = seed(&seed_value)?;
        let secrets = Secrets::new(secrets).map_err(|e| error(Kind::Config, e))?;
        let config: MachineConfig = match config_json {
            None => MachineConfig::default(),
            Some(text) => from_json(&text, "machine config", Kind::Config)?,
        };
        let run = match conversation_json {
            Some(text) => Run::with_conversation(
                config,
                seed,
                from_json::<Conversation>(&text, "conversation", Kind::Config)?,
            ),
            None => Run::new(config, seed),
        };
        Ok(Machine {
            run: run
                .recording(record)
                .with_secrets(secrets)
                .meta("driver", "javascript"),
            issued: Issued::default(),
            record,
            polled: None,
        })
    }

    /// Feeds one event (its JSON text) at `now_ms`; returns `"accepted"`, `"stale"` or
    /// `"terminal"`. Throws (leaving the machine unchanged) for a malformed event, an answer
    /// to a command never emitted, or an event the machine did not ask for. What was not
    /// polled of the previous event's actions is dropped: the new event supersedes them.
    pub fn handle(&mut self, now_ms: f64, event_json: &str) -> Result<String> {
        let now = millis(now_ms)?;
        let event: Event = from_json(event_json, "event", Kind::Event)?;
        let handled = self
            .issued
            .handle(&mut self.run, now, event)
            .map_err(|refusal| {
                let kind = match refusal {
                    Refusal::UnknownAnswer(_) => Kind::UnknownAnswer,
                    Refusal::Unexpected => Kind::UnexpectedEvent,
                    _ => Kind::Event,
                };
                error(kind, refusal)
            })?;
        Ok(match handled {
            Handled::Accepted => "accepted",
            Handled::Ignored(IgnoreReason::Terminal) => "terminal",
            _ => "stale",
        }
        .to_owned())
    }

    /// The next action as JSON text (`{"type": …, …}`), or nothing when there is none: a
    /// command of the machine, or `stream_reset` (`request`, `attempt`) when an answer that
    /// had begun failed. A command that carries a conversation leaves it for
    /// `polledSnapshot`.
    pub fn poll(&mut self) -> Result<Option<String>> {
        self.polled = None;
        let Some(action) = self.run.poll() else {
            return Ok(None);
        };
        let command = match action {
            Action::Command(command) => command,
            Action::StreamReset { request, attempt } => {
                return to_json(&Polled::StreamReset {
                    request: request.0,
                    attempt,
                })
                .map(Some)
            }
            other => {
                return Err(error(
                    Kind::Rebound,
                    format!(
                        "the run asked for an action this build of rebound-agent cannot hand \
                         out: {other:?}; rebuild the package against its rebound-core"
                    ),
                ))
            }
        };
        self.issued.note(&command);
        let text = match &command {
            Command::SendRequest {
                request,
                target,
                attempt,
                conversation,
                purpose,
                deadlines,
            } => {
                self.polled = Some(Arc::clone(conversation.arc()));
                to_json(&Polled::SendRequest {
                    request: request.0,
                    target: *target,
                    attempt: *attempt,
                    purpose: *purpose,
                    deadlines,
                })?
            }
            Command::Compact {
                compaction,
                conversation,
            } => {
                self.polled = Some(Arc::clone(conversation.arc()));
                to_json(&Polled::Compact {
                    compaction: compaction.0,
                })?
            }
            Command::ReplaceConversation {
                conversation,
                report,
            } => {
                self.polled = Some(Arc::clone(conversation.arc()));
                to_json(&Polled::ReplaceConversation { report })?
            }
            Command::AppendMessage { .. }
            | Command::Sleep { .. }
            | Command::NotifyRetry { .. }
            | Command::NotifyFallback { .. }
            | Command::RunTools { .. }
            | Command::AcquirePermit { .. }
            | Command::NoteBudget { .. }
            | Command::Finish { .. }
            | Command::Fail { .. } => to_json(&command)?,
        };
        Ok(Some(text))
    }

    /// The conversation of the command polled last (`send_request`, `compact`,
    /// `replace_conversation`), shared with the machine.
    #[wasm_bindgen(js_name = polledSnapshot)]
    pub fn polled_snapshot(&self) -> Option<Snapshot> {
        self.polled.as_ref().map(|c| Snapshot::full(Arc::clone(c)))
    }

    /// The conversation as it stands (only complete messages).
    pub fn conversation(&self) -> Snapshot {
        Snapshot::full(Arc::clone(self.run.machine().snapshot().arc()))
    }

    /// Assistant messages appended in this run.
    #[wasm_bindgen(getter)]
    pub fn turns(&self) -> u32 {
        self.run.machine().turns()
    }

    /// Index of the target requests currently go to.
    #[wasm_bindgen(getter)]
    pub fn target(&self) -> usize {
        self.run.machine().target()
    }

    /// Whether the run ended (finished or failed).
    #[wasm_bindgen(getter, js_name = isTerminal)]
    pub fn is_terminal(&self) -> bool {
        self.run.is_ended()
    }

    /// The jitter seed, as a decimal string (it may pass 2^53).
    #[wasm_bindgen(getter)]
    pub fn seed(&self) -> String {
        self.run.seed().to_string()
    }

    /// What happened so far, counted by core's run (JSON text of the tally).
    #[wasm_bindgen(js_name = tallyJson)]
    pub fn tally_json(&self) -> Result<String> {
        to_json(self.run.tally())
    }

    /// How the run ended, as JSON text: `{"Ok": reason}` or `{"Err": error}`, or nothing
    /// while it runs.
    #[wasm_bindgen(js_name = outcomeJson)]
    pub fn outcome_json(&self) -> Result<Option<String>> {
        self.run
            .end()
            .map(|end| to_json(&end.as_ref().map(|ended| &ended.reason)))
            .transpose()
    }

    /// The configuration, as JSON text.
    #[wasm_bindgen(js_name = configJson)]
    pub fn config_json(&self) -> Result<String> {
        to_json(self.run.machine().config())
    }

    /// Core's compaction of `conversation` with this machine's compaction policy: the
    /// `result` of `compaction_finished` as JSON text, `{"Ok": messages}` or
    /// `{"Err": "why"}`.
    #[wasm_bindgen(js_name = compactDefault)]
    pub fn compact_default(&self, conversation: &Snapshot) -> Result<String> {
        let result = self.run.compact_default(conversation.conversation()?);
        match result {
            Ok(c) => to_json(&serde_json::json!({ "Ok": c })),
            Err(e) => to_json(&serde_json::json!({ "Err": e.to_string() })),
        }
    }

    /// The run so far as a trace (JSON Lines), when the machine was made recording.
    #[wasm_bindgen(js_name = traceJsonl)]
    pub fn trace_jsonl(&self) -> Result<String> {
        if !self.record {
            return Err(error(
                Kind::Rebound,
                "this machine records no trace: create it with record: true",
            ));
        }
        Ok(Trace {
            header: self.run.header(),
            steps: self.run.steps().iter().map(Step::to_trace).collect(),
        }
        .to_jsonl())
    }
}

/// The one-line text a person reads for a retry notice (`"retry_info"`), a fallback notice
/// (`"fallback_info"`) or a run error (`"run_error"`), given its JSON text: e.g.
/// `provider unavailable: retrying in 2.4s (attempt 2/4)`.
#[wasm_bindgen]
pub fn describe(kind: &str, value_json: &str) -> Result<String> {
    Ok(match kind {
        "retry_info" => {
            from_json::<ProviderRetryInfo>(value_json, "retry info", Kind::Event)?.to_string()
        }
        "fallback_info" => {
            from_json::<FallbackInfo>(value_json, "fallback info", Kind::Event)?.to_string()
        }
        "run_error" => from_json::<RunError>(value_json, "run error", Kind::Event)?.to_string(),
        other => {
            return Err(error(
                Kind::Rebound,
                format!(
                    "cannot describe a {other:?}: expected \"retry_info\", \"fallback_info\" \
                     or \"run_error\""
                ),
            ))
        }
    })
}

/// Checks that `event_json` is an event the machine can read, and returns it as the machine
/// reads it (normalized JSON text).
#[wasm_bindgen(js_name = normalizeEvent)]
pub fn normalize_event(event_json: &str) -> Result<String> {
    let event: Event = from_json(event_json, "event", Kind::Event)?;
    to_json(&event)
}
