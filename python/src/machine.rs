//! `AgentMachine` for Python, driven through core's [`Run`] as every shell drives it: events
//! in as JSON-shaped objects, the run's actions out as a tag and fields (the Python layer
//! makes them typed objects), conversations as shared snapshots. The tally, the trace, the
//! end of the run and the stream resets are the run's; this module only converts.

use crate::convert::{from_py, retyped, secrets_arg, to_py, to_u64};
use crate::deadlines::PyStreamDeadlines;
use crate::errors::{
    ConfigError, EventError, ReboundError, UnexpectedEventError, UnknownAnswerError,
};
use crate::exclusive::Exclusive;
use crate::tally::PyRunTally;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rebound_core::run::{Action, Issued, Refusal, Run, Step};
use rebound_core::{
    Command, Conversation, Event, FallbackInfo, Handled, IgnoreReason, MachineConfig, Millis,
    ProviderRetryInfo, RunError,
};
use rebound_sim::Trace;
use std::sync::{Arc, OnceLock};

/// A shared, read-only conversation as a command carried it (no copy is made), or the
/// summary of one read from a trace (`{"messages": n, "digest": "…"}`).
#[pyclass(frozen, module = "rebound_agent._native", name = "Snapshot")]
pub struct PySnapshot {
    inner: SnapshotInner,
    digest: OnceLock<u64>,
}

enum SnapshotInner {
    Full(Arc<Conversation>),
    Summary { messages: usize, digest: u64 },
}

impl PySnapshot {
    /// A snapshot of a whole conversation.
    pub fn full(conversation: Arc<Conversation>) -> Self {
        PySnapshot {
            inner: SnapshotInner::Full(conversation),
            digest: OnceLock::new(),
        }
    }

    /// The conversation, when the snapshot holds it.
    pub fn conversation(&self) -> PyResult<&Arc<Conversation>> {
        match &self.inner {
            SnapshotInner::Full(c) => Ok(c),
            SnapshotInner::Summary { .. } => Err(ReboundError::new_err(
                "this snapshot was read from a trace: it holds only the message count and \
                 digest, not the messages",
            )),
        }
    }

    fn digest_value(&self) -> u64 {
        match &self.inner {
            SnapshotInner::Full(c) => *self
                .digest
                .get_or_init(|| rebound_core::Snapshot(Arc::clone(c)).digest()),
            SnapshotInner::Summary { digest, .. } => *digest,
        }
    }

    fn len(&self) -> usize {
        match &self.inner {
            SnapshotInner::Full(c) => c.len(),
            SnapshotInner::Summary { messages, .. } => *messages,
        }
    }
}

#[pymethods]
impl PySnapshot {
    /// A snapshot of `conversation`: a list of messages in their JSON shape.
    #[staticmethod]
    fn of(conversation: &Bound<'_, PyAny>) -> PyResult<Self> {
        let conversation: Conversation = from_py(conversation, "conversation")?;
        Ok(Self::full(Arc::new(conversation)))
    }

    /// The snapshot of a trace's `{"messages": n, "digest": "<16 hex digits>"}`.
    #[staticmethod]
    fn from_json(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        #[derive(serde::Deserialize)]
        struct Summary {
            messages: usize,
            digest: String,
        }
        let s: Summary = from_py(value, "snapshot summary")?;
        let digest = u64::from_str_radix(&s.digest, 16).map_err(|e| {
            EventError::new_err(format!(
                "invalid snapshot summary: digest {:?} is not 16 hex digits ({e})",
                s.digest
            ))
        })?;
        Ok(PySnapshot {
            inner: SnapshotInner::Summary {
                messages: s.messages,
                digest,
            },
            digest: OnceLock::new(),
        })
    }

    /// Whether the messages themselves are here (not only a trace's summary).
    #[getter]
    fn has_messages(&self) -> bool {
        matches!(self.inner, SnapshotInner::Full(_))
    }

    /// The 64-bit FNV-1a digest of the conversation's JSON, 16 hex digits, as in traces.
    #[getter]
    fn digest(&self) -> String {
        format!("{:016x}", self.digest_value())
    }

    /// The messages, in their JSON shape (a new list each call).
    fn messages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &**self.conversation()?)
    }

    /// The trace's form: `{"messages": n, "digest": "…"}`.
    fn to_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("messages", self.len())?;
        d.set_item("digest", self.digest())?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.len()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PySnapshot>().is_ok_and(|o| {
            let o = o.get();
            match (&self.inner, &o.inner) {
                (SnapshotInner::Full(a), SnapshotInner::Full(b)) => Arc::ptr_eq(a, b) || a == b,
                _ => self.len() == o.len() && self.digest_value() == o.digest_value(),
            }
        })
    }

    fn __hash__(&self) -> u64 {
        self.digest_value()
    }

    fn __repr__(&self) -> String {
        format!(
            "Snapshot(messages={}, digest={:?})",
            self.len(),
            self.digest()
        )
    }
}

/// The native machine: a [`Run`] of core's machine. Use `rebound_agent.AgentMachine`, which
/// wraps it with typed events and commands. Calls from several threads take turns (see
/// [`Exclusive`]); Python objects are read before a call takes the run and made after it
/// let go.
#[pyclass(frozen, module = "rebound_agent._native", name = "Machine")]
pub struct PyMachine {
    state: Exclusive<MachineState>,
    /// Whether the run records its steps (for `trace_jsonl`).
    record: bool,
}

/// What a machine's calls change.
struct MachineState {
    run: Run,
    issued: Issued,
}

impl PyMachine {
    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut MachineState) -> PyResult<R>,
    ) -> PyResult<R> {
        self.state.with(py, f)
    }
}

#[pymethods]
impl PyMachine {
    #[new]
    #[pyo3(signature = (config=None, seed=None, conversation=None, record=false, secrets=None))]
    fn new(
        config: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        conversation: Option<&Bound<'_, PyAny>>,
        record: bool,
        secrets: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let seed = seed.map_or(Ok(0), |s| to_u64(s, "seed"))?;
        let secrets = secrets_arg(secrets)?;
        let config: MachineConfig = match config {
            None => MachineConfig::default(),
            Some(c) if c.is_none() => MachineConfig::default(),
            Some(c) => {
                from_py(c, "machine config").map_err(|e| retyped(e, ConfigError::new_err))?
            }
        };
        let conversation: Option<Conversation> = match conversation {
            Some(c) if !c.is_none() => {
                Some(from_py(c, "conversation").map_err(|e| retyped(e, ConfigError::new_err))?)
            }
            _ => None,
        };
        let run = match conversation {
            Some(c) => Run::with_conversation(config, seed, c),
            None => Run::new(config, seed),
        };
        let state = MachineState {
            run: run
                .recording(record)
                .with_secrets(secrets)
                .meta("driver", "python"),
            issued: Issued::default(),
        };
        Ok(PyMachine {
            state: Exclusive::new(state, "this machine"),
            record,
        })
    }

    /// Feeds one event (its JSON shape) at `now_ms`; returns `"accepted"`, `"stale"` or
    /// `"terminal"`. Raises (leaving the machine unchanged) for a malformed event or an
    /// answer to a command never emitted, and for an event the machine did not ask for.
    /// What was not polled of the previous event's actions is dropped: the new event
    /// supersedes them.
    fn handle(
        &self,
        py: Python<'_>,
        now_ms: &Bound<'_, PyAny>,
        event: &Bound<'_, PyAny>,
    ) -> PyResult<&'static str> {
        let now = Millis(to_u64(now_ms, "now_ms")?);
        let event: Event = from_py(event, "event")?;
        self.with(py, |state| {
            let handled = state
                .issued
                .handle(&mut state.run, now, event)
                .map_err(|refusal| match refusal {
                    Refusal::UnknownAnswer(e) => UnknownAnswerError::new_err(e.to_string()),
                    Refusal::Unexpected => UnexpectedEventError::new_err(refusal.to_string()),
                    _ => EventError::new_err(refusal.to_string()),
                })?;
            Ok(match handled {
                Handled::Accepted => "accepted",
                Handled::Ignored(IgnoreReason::Terminal) => "terminal",
                _ => "stale",
            })
        })
    }

    /// The next action as `(type, fields)`, or `None` when there is none: a command of the
    /// machine, or `"stream_reset"` (`request`, `attempt`) when an answer that had begun
    /// failed.
    fn poll<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<(Bound<'py, PyString>, Bound<'py, PyDict>)>> {
        let action = self.with(py, |state| {
            let action = state.run.poll();
            if let Some(Action::Command(command)) = &action {
                state.issued.note(command);
            }
            Ok(action)
        })?;
        match action {
            None => Ok(None),
            Some(Action::Command(command)) => command_fields(py, &command).map(Some),
            Some(Action::StreamReset { request, attempt }) => {
                let d = PyDict::new(py);
                d.set_item(intern!(py, "request"), request.0)?;
                d.set_item(intern!(py, "attempt"), attempt)?;
                Ok(Some((intern!(py, "stream_reset").clone(), d)))
            }
            Some(other) => Err(ReboundError::new_err(format!(
                "the run asked for an action this build of rebound_agent cannot hand out: \
                 {other:?}; rebuild the package against its rebound-core"
            ))),
        }
    }

    /// The conversation as it stands (only complete messages).
    fn conversation(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        self.with(py, |state| {
            Ok(PySnapshot::full(Arc::clone(
                state.run.machine().snapshot().arc(),
            )))
        })
    }

    /// Assistant messages appended in this run.
    #[getter]
    fn turns(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |state| Ok(state.run.machine().turns()))
    }

    /// Index of the target requests currently go to.
    #[getter]
    fn target(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |state| Ok(state.run.machine().target()))
    }

    /// Whether the run ended (finished or failed).
    #[getter]
    fn is_terminal(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |state| Ok(state.run.is_ended()))
    }

    /// The jitter seed.
    #[getter]
    fn seed(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |state| Ok(state.run.seed()))
    }

    /// What happened so far, counted by core's run.
    #[getter]
    fn tally(&self, py: Python<'_>) -> PyResult<PyRunTally> {
        self.with(py, |state| Ok(PyRunTally::of(state.run.tally())))
    }

    /// How the run ended: `{"Ok": reason}` or `{"Err": error}`, or `None` while it runs.
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        // In its JSON shape while the run is held; made a Python object after.
        let end = self.with(py, |state| {
            state
                .run
                .end()
                .map(|end| serde_json::to_value(end.as_ref().map(|ended| &ended.reason)))
                .transpose()
                .map_err(|e| ReboundError::new_err(format!("the outcome has no JSON shape: {e}")))
        })?;
        end.map(|outcome| to_py(py, &outcome)).transpose()
    }

    /// The configuration, in its JSON shape.
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let config = self.with(py, |state| Ok(state.run.machine().config().clone()))?;
        to_py(py, &config)
    }

    /// Core's compaction of `conversation` (a Snapshot or a list of messages) with this
    /// machine's compaction policy: the `result` of CompactionFinished, `{"Ok": messages}`
    /// or `{"Err": "why"}`.
    fn compact_default<'py>(
        &self,
        py: Python<'py>,
        conversation: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let conversation = crate::wire::conversation(conversation)?;
        let result = self.with(py, |state| Ok(state.run.compact_default(&conversation)))?;
        let d = PyDict::new(py);
        match result {
            Ok(c) => d.set_item("Ok", to_py(py, &c)?)?,
            Err(e) => d.set_item("Err", e.to_string())?,
        }
        Ok(d.into_any())
    }

    /// The run so far as a trace (JSON Lines), when the machine was made with `record=True`.
    fn trace_jsonl(&self, py: Python<'_>) -> PyResult<String> {
        if !self.record {
            return Err(ReboundError::new_err(
                "this machine records no trace: create it with record=True",
            ));
        }
        self.with(py, |state| {
            Ok(Trace {
                header: state.run.header(),
                steps: state.run.steps().iter().map(Step::to_trace).collect(),
            }
            .to_jsonl())
        })
    }
}

fn snapshot<'py>(py: Python<'py>, s: &rebound_core::Snapshot) -> PyResult<Bound<'py, PyAny>> {
    Ok(Bound::new(py, PySnapshot::full(Arc::clone(s.arc())))?.into_any())
}

/// A command as its trace type tag and its fields, conversations as [`PySnapshot`]s.
fn command_fields<'py>(
    py: Python<'py>,
    command: &Command,
) -> PyResult<(Bound<'py, PyString>, Bound<'py, PyDict>)> {
    let d = PyDict::new(py);
    let tag = match command {
        Command::AppendMessage { message } => {
            d.set_item(intern!(py, "message"), to_py(py, &**message)?)?;
            intern!(py, "append_message")
        }
        Command::SendRequest {
            request,
            target,
            attempt,
            conversation,
            purpose,
            deadlines,
        } => {
            d.set_item(intern!(py, "request"), request.0)?;
            d.set_item(intern!(py, "target"), *target)?;
            d.set_item(intern!(py, "attempt"), *attempt)?;
            d.set_item(intern!(py, "conversation"), snapshot(py, conversation)?)?;
            d.set_item(intern!(py, "purpose"), to_py(py, purpose)?)?;
            d.set_item(intern!(py, "deadlines"), PyStreamDeadlines(*deadlines))?;
            intern!(py, "send_request")
        }
        Command::Sleep { timer, delay_ms } => {
            d.set_item(intern!(py, "timer"), timer.0)?;
            d.set_item(intern!(py, "delay_ms"), *delay_ms)?;
            intern!(py, "sleep")
        }
        Command::NotifyRetry { info } => {
            d.set_item(intern!(py, "info"), to_py(py, info)?)?;
            intern!(py, "notify_retry")
        }
        Command::NotifyFallback { info } => {
            d.set_item(intern!(py, "info"), to_py(py, info)?)?;
            intern!(py, "notify_fallback")
        }
        Command::Compact {
            compaction,
            conversation,
        } => {
            d.set_item(intern!(py, "compaction"), compaction.0)?;
            d.set_item(intern!(py, "conversation"), snapshot(py, conversation)?)?;
            intern!(py, "compact")
        }
        Command::ReplaceConversation {
            conversation,
            report,
        } => {
            d.set_item(intern!(py, "conversation"), snapshot(py, conversation)?)?;
            d.set_item(intern!(py, "report"), to_py(py, report)?)?;
            intern!(py, "replace_conversation")
        }
        Command::RunTools { batch, calls } => {
            d.set_item(intern!(py, "batch"), batch.0)?;
            d.set_item(intern!(py, "calls"), to_py(py, calls)?)?;
            intern!(py, "run_tools")
        }
        Command::AcquirePermit { permit, ask } => {
            d.set_item(intern!(py, "permit"), permit.0)?;
            d.set_item(intern!(py, "ask"), to_py(py, ask)?)?;
            intern!(py, "acquire_permit")
        }
        Command::NoteBudget { note } => {
            d.set_item(intern!(py, "note"), to_py(py, note)?)?;
            intern!(py, "note_budget")
        }
        Command::Finish { reason, turns } => {
            d.set_item(intern!(py, "reason"), to_py(py, reason)?)?;
            d.set_item(intern!(py, "turns"), *turns)?;
            intern!(py, "finish")
        }
        Command::Fail { error } => {
            d.set_item(intern!(py, "error"), to_py(py, &**error)?)?;
            intern!(py, "fail")
        }
    };
    Ok((tag.clone(), d))
}

/// The one-line text a person reads for a retry notice (`"retry_info"`), a fallback notice
/// (`"fallback_info"`) or a run error (`"run_error"`), given its JSON shape: e.g.
/// `provider unavailable: retrying in 2.4s (attempt 2/4)`.
#[pyfunction]
pub fn describe(kind: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(match kind {
        "retry_info" => from_py::<ProviderRetryInfo>(value, "retry info")?.to_string(),
        "fallback_info" => from_py::<FallbackInfo>(value, "fallback info")?.to_string(),
        "run_error" => from_py::<RunError>(value, "run error")?.to_string(),
        other => {
            return Err(ReboundError::new_err(format!(
                "cannot describe a {other:?}: expected \"retry_info\", \"fallback_info\" or \
                 \"run_error\""
            )))
        }
    })
}

/// Checks that `event` (its JSON shape) is an event the machine can read, and returns it
/// as the machine reads it (normalized JSON shape).
#[pyfunction]
pub fn normalize_event<'py>(
    py: Python<'py>,
    event: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let event: Event = from_py(event, "event")?;
    to_py(py, &event)
}
