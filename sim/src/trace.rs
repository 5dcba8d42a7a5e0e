//! Trace record and replay: the JSON Lines trace format (defined by
//! [`rebound_core::trace`], which writes it).
//!
//! Line 1 is a [`TraceHeader`] (`{"format": "rebound-trace", "version": 1, "seed", "config",
//! …}`); every further line is a [`TraceStep`] (`{"t_ms", "event", "commands"}`). A trace
//! describes the machine only — never the scenario or the driver — so [`replay`] works on
//! traces written by the simulator and by the real runner alike.
//!
//! ```
//! use rebound_sim::{simulate, trace::{replay, Trace}, Scenario, SimConfig};
//!
//! let outcome = simulate(&Scenario::builtin("demo").unwrap(), &SimConfig::default(), 7).unwrap();
//! let mut file = Vec::new();
//! outcome.trace().write_to(&mut file).unwrap();
//!
//! let trace = Trace::read(&file[..]).unwrap();
//! let report = replay(&trace).unwrap();
//! assert_eq!(report.steps, outcome.steps.len());
//!
//! // Change one recorded delay: replay points at that step.
//! let mut altered = trace.clone();
//! let step = altered.steps.iter().position(|s| {
//!     s.commands.iter().any(|c| c["type"] == "sleep")
//! }).unwrap();
//! for c in &mut altered.steps[step].commands {
//!     if c["type"] == "sleep" { c["delay_ms"] = (c["delay_ms"].as_u64().unwrap() + 1).into(); }
//! }
//! let error = replay(&altered).unwrap_err();
//! assert_eq!(error.divergence().step, step);
//! println!("{error}");
//! ```

pub use rebound_core::trace::TraceWriter;
use rebound_core::trace::{command_value, TraceHeader, TraceStep, TRACE_FORMAT, TRACE_VERSION};
use rebound_core::{AgentMachine, Event, FinishReason, Millis, RunError};
use serde_json::Value;
use std::fmt;
use std::io::{self, BufRead, Write};

/// A whole trace in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The first line: how to rebuild the machine.
    pub header: TraceHeader,
    /// One entry per handled event.
    pub steps: Vec<TraceStep>,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// Reading failed.
    #[error("could not read the trace at line {line}: {source}")]
    Io {
        /// 1-based line being read.
        line: usize,
        /// The I/O error.
        source: io::Error,
    },
    /// There is no header line.
    #[error("the trace is empty: expected a header line")]
    Empty,
    /// The header's `format` is not `rebound-trace`.
    #[error("not a rebound trace: the header's format is {found:?}, expected \"rebound-trace\"")]
    UnknownFormat {
        /// What the header says (empty when missing).
        found: String,
    },
    /// The header's `version` is not one this build reads.
    #[error(
        "trace version {found} is not supported (this build reads version {supported}); \
         use the rebound version that wrote it"
    )]
    UnsupportedVersion {
        /// The header's version.
        found: u64,
        /// The version this build reads.
        supported: u32,
    },
    /// The last line ends mid-record (the writer stopped while writing it).
    #[error("the trace is truncated: line {line} is incomplete ({message})")]
    Truncated {
        /// 1-based line.
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A line is not valid JSON or not a header/step.
    #[error("line {line} of the trace is not a valid {what}: {message}")]
    BadLine {
        /// 1-based line.
        line: usize,
        /// `header` or `step`.
        what: &'static str,
        /// The parser's message.
        message: String,
    },
}

impl Trace {
    /// Writes the trace as JSON Lines.
    ///
    /// # Errors
    ///
    /// Any error of `writer`.
    pub fn write_to<W: Write>(&self, writer: W) -> io::Result<()> {
        let mut w = TraceWriter::new(writer, &self.header)?;
        for step in &self.steps {
            w.write_step(step)?;
        }
        w.into_inner().flush()
    }

    /// The trace as a JSON Lines string.
    #[must_use]
    pub fn to_jsonl(&self) -> String {
        let mut out = Vec::new();
        self.write_to(&mut out)
            .unwrap_or_else(|e| unreachable!("writing to a Vec cannot fail: {e}"));
        String::from_utf8(out).unwrap_or_else(|e| unreachable!("serde_json writes UTF-8: {e}"))
    }

    /// Parses a trace from a string.
    ///
    /// # Errors
    ///
    /// See [`Trace::read`].
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        Trace::read(text.as_bytes())
    }

    /// Reads a trace line by line. Blank lines are skipped.
    ///
    /// # Errors
    ///
    /// [`TraceError`]: an empty input, a header of another format or version, a line that is
    /// not valid JSON (with its number), or a last line cut short.
    pub fn read<R: BufRead>(mut reader: R) -> Result<Trace, TraceError> {
        let mut header: Option<TraceHeader> = None;
        let mut steps = Vec::new();
        let mut line = String::new();
        let mut number = 0;
        loop {
            line.clear();
            number += 1;
            let n = reader
                .read_line(&mut line)
                .map_err(|source| TraceError::Io {
                    line: number,
                    source,
                })?;
            if n == 0 {
                break;
            }
            let complete = line.ends_with('\n');
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let bad = |what: &'static str, e: serde_json::Error| {
                if !complete && (e.is_eof() || e.is_syntax()) {
                    TraceError::Truncated {
                        line: number,
                        message: e.to_string(),
                    }
                } else {
                    TraceError::BadLine {
                        line: number,
                        what,
                        message: e.to_string(),
                    }
                }
            };
            match &header {
                None => {
                    let mut value: Value =
                        serde_json::from_str(text).map_err(|e| bad("header", e))?;
                    let format = value.get("format").and_then(Value::as_str).unwrap_or("");
                    if format != TRACE_FORMAT {
                        return Err(TraceError::UnknownFormat {
                            found: format.to_owned(),
                        });
                    }
                    match value.get("version").and_then(Value::as_u64) {
                        Some(v) if v == u64::from(TRACE_VERSION) => {}
                        found => {
                            return Err(TraceError::UnsupportedVersion {
                                found: found.unwrap_or(0),
                                supported: TRACE_VERSION,
                            })
                        }
                    }
                    // Recorded before `fallback_after_ms` existed: those runs never moved
                    // on to the next target early, so the replay must not either.
                    if let Some(retry) = value
                        .pointer_mut("/config/retry")
                        .and_then(Value::as_object_mut)
                    {
                        retry
                            .entry("fallback_after_ms")
                            .or_insert(Value::from(u64::MAX));
                    }
                    header =
                        Some(
                            serde_json::from_value(value).map_err(|e| TraceError::BadLine {
                                line: number,
                                what: "header",
                                message: e.to_string(),
                            })?,
                        );
                }
                Some(_) => steps.push(serde_json::from_str(text).map_err(|e| bad("step", e))?),
            }
        }
        Ok(Trace {
            header: header.ok_or(TraceError::Empty)?,
            steps,
        })
    }
}

/// What a replay without divergence found.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayReport {
    /// Steps replayed.
    pub steps: usize,
    /// Commands compared.
    pub commands: usize,
    /// How the replayed run ended, if it did.
    pub outcome: Option<Result<FinishReason, RunError>>,
    /// Time of the last step.
    pub elapsed: Millis,
}

/// What `rebound replay` and the bindings print for a replay without divergence:
/// `replayed 12 steps and 30 commands identically`.
impl std::fmt::Display for ReplayReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "replayed {} steps and {} commands identically",
            self.steps, self.commands
        )
    }
}

/// Why a replay failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The replayed machine produced other commands than the recorded ones.
    #[error("{0}")]
    Diverged(Box<Divergence>),
}

impl ReplayError {
    /// The divergence.
    #[must_use]
    pub fn divergence(&self) -> &Divergence {
        match self {
            ReplayError::Diverged(d) => d,
        }
    }
}

/// The first step at which a replayed machine did something else than the recorded one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct Divergence {
    /// 0-based index of the step (the trace's line `step + 2`).
    pub step: usize,
    /// The step's time.
    pub t_ms: Millis,
    /// The step's event.
    pub event: Event,
    /// 0-based index of the first differing command.
    pub command: usize,
    /// The recorded commands of the step.
    pub expected: Vec<Value>,
    /// The commands the replayed machine produced.
    pub actual: Vec<Value>,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let event = serde_json::to_string(&self.event).unwrap_or_default();
        writeln!(
            f,
            "replay diverged at step {} (line {}, t={}) after event {event}",
            self.step,
            self.step + 2,
            self.t_ms
        )?;
        writeln!(
            f,
            "first difference at command {} ({} recorded, {} replayed):",
            self.command,
            self.expected.len(),
            self.actual.len()
        )?;
        let show = |v: Option<&Value>| {
            v.map_or_else(
                || "(none)".to_owned(),
                |v| serde_json::to_string(v).unwrap_or_default(),
            )
        };
        let expected = self.expected.get(self.command);
        let actual = self.actual.get(self.command);
        writeln!(f, "  - expected: {}", show(expected))?;
        writeln!(f, "  + actual:   {}", show(actual))?;
        if let (Some(Value::Object(e)), Some(Value::Object(a))) = (expected, actual) {
            for (key, ev) in e {
                let av = a.get(key);
                if av != Some(ev) {
                    writeln!(f, "    field `{key}`: expected {ev}, actual {}", show(av))?;
                }
            }
            for (key, av) in a {
                if !e.contains_key(key) {
                    writeln!(f, "    field `{key}`: not expected, actual {av}")?;
                }
            }
        }
        Ok(())
    }
}

fn same_commands(actual: &[Value], recorded: &[Value]) -> bool {
    actual.len() == recorded.len()
        && actual
            .iter()
            .zip(recorded)
            .all(|(a, r)| recorded_matches(a, r))
}

/// Whether a command the machine emits now matches the recorded one. A field the recorded
/// command lacks is not compared: it was added to the command after the trace was written
/// (e.g. the compaction report's `before_bytes`, `reason` and `method` beside the message
/// counts), so older traces still replay.
fn recorded_matches(actual: &Value, recorded: &Value) -> bool {
    match (actual, recorded) {
        (Value::Object(a), Value::Object(r)) => r
            .iter()
            .all(|(key, rv)| a.get(key).is_some_and(|av| recorded_matches(av, rv))),
        (Value::Array(a), Value::Array(r)) => {
            a.len() == r.len() && a.iter().zip(r).all(|(av, rv)| recorded_matches(av, rv))
        }
        (a, r) => a == r,
    }
}

/// Replays `trace` into a fresh machine built from its header, comparing every step's
/// commands with the recorded ones.
///
/// # Errors
///
/// [`ReplayError::Diverged`] with the first [`Divergence`].
pub fn replay(trace: &Trace) -> Result<ReplayReport, ReplayError> {
    let header = &trace.header;
    let mut machine = match &header.initial_conversation {
        Some(c) => AgentMachine::with_conversation(header.config.clone(), header.seed, c.clone()),
        None => AgentMachine::new(header.config.clone(), header.seed),
    };
    let mut commands = 0;
    let mut elapsed = Millis::ZERO;
    for (index, step) in trace.steps.iter().enumerate() {
        let actual: Vec<Value> = machine
            .step(step.t_ms, step.event.clone())
            .iter()
            .map(command_value)
            .collect();
        if !same_commands(&actual, &step.commands) {
            let command = actual
                .iter()
                .zip(&step.commands)
                .position(|(a, e)| !recorded_matches(a, e))
                .unwrap_or_else(|| actual.len().min(step.commands.len()));
            return Err(ReplayError::Diverged(Box::new(Divergence {
                step: index,
                t_ms: step.t_ms,
                event: step.event.clone(),
                command,
                expected: step.commands.clone(),
                actual,
            })));
        }
        commands += actual.len();
        elapsed = step.t_ms;
    }
    Ok(ReplayReport {
        steps: trace.steps.len(),
        commands,
        outcome: machine.outcome().cloned(),
        elapsed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{simulate, Scenario, SimConfig};

    fn demo_trace() -> String {
        simulate(
            &Scenario::builtin("demo").unwrap(),
            &SimConfig::default(),
            3,
        )
        .unwrap()
        .trace()
        .to_jsonl()
    }

    #[test]
    fn a_written_trace_reads_back_identically() {
        let text = demo_trace();
        let trace = Trace::parse(&text).unwrap();
        assert_eq!(trace.to_jsonl(), text);
        assert!(replay(&trace).unwrap().outcome.unwrap().is_ok());
    }

    #[test]
    fn a_trace_recorded_before_the_fallback_threshold_never_moves_on_early() {
        let text = demo_trace();
        let field = "\"fallback_after_ms\":30000,";
        assert!(
            text.contains(field),
            "the header writes every retry setting"
        );
        let old = text.replacen(field, "", 1);
        let trace = Trace::parse(&old).unwrap();
        assert_eq!(trace.header.config.retry.fallback_after_ms, u64::MAX);
        assert_eq!(
            Trace::parse(&text)
                .unwrap()
                .header
                .config
                .retry
                .fallback_after_ms,
            30_000
        );
    }

    #[test]
    fn unknown_format_and_version_are_typed_errors() {
        let text = demo_trace();
        let other = text.replacen("rebound-trace", "other-trace", 1);
        assert!(matches!(
            Trace::parse(&other),
            Err(TraceError::UnknownFormat { found }) if found == "other-trace"
        ));
        let newer = text.replacen("\"version\":1", "\"version\":2", 1);
        assert!(matches!(
            Trace::parse(&newer),
            Err(TraceError::UnsupportedVersion { found: 2, .. })
        ));
        assert!(matches!(Trace::parse(""), Err(TraceError::Empty)));
        assert!(matches!(
            Trace::parse("[1,2]\n"),
            Err(TraceError::UnknownFormat { .. })
        ));
    }

    #[test]
    fn a_cut_last_line_is_truncated_and_a_bad_middle_line_names_its_number() {
        let text = demo_trace();
        let cut = &text[..text.len() - 10];
        let lines = cut.lines().count();
        match Trace::parse(cut) {
            Err(TraceError::Truncated { line, .. }) => assert_eq!(line, lines),
            other => panic!("{other:?}"),
        }
        let mut broken: Vec<&str> = text.lines().collect();
        broken[2] = "{\"t_ms\": 5, \"event\": ";
        let broken = broken.join("\n") + "\n";
        match Trace::parse(&broken) {
            Err(TraceError::BadLine { line: 3, what, .. }) => assert_eq!(what, "step"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_divergence_names_the_step_and_the_differing_field() {
        let mut trace = Trace::parse(&demo_trace()).unwrap();
        let step = trace
            .steps
            .iter()
            .position(|s| s.commands.iter().any(|c| c["type"] == "notify_retry"))
            .unwrap();
        for c in &mut trace.steps[step].commands {
            if c["type"] == "notify_retry" {
                c["info"]["attempt"] = 9.into();
            }
        }
        let e = replay(&trace).unwrap_err();
        let d = e.divergence();
        assert_eq!(d.step, step);
        let text = d.to_string();
        assert!(text.contains(&format!("step {step}")), "{text}");
        assert!(text.contains("field `info`"), "{text}");
    }

    #[test]
    fn a_trace_written_before_compaction_reports_still_replays() {
        let trace = simulate(
            &Scenario::builtin("demo").unwrap(),
            &SimConfig::default(),
            3,
        )
        .unwrap()
        .trace();
        let mut old = trace.clone();
        let mut stripped = 0;
        for step in &mut old.steps {
            for c in &mut step.commands {
                if c["type"] == "replace_conversation" {
                    let fields = c.as_object_mut().unwrap();
                    for key in [
                        "before_bytes",
                        "after_bytes",
                        "before_tokens",
                        "after_tokens",
                    ] {
                        fields.remove(key);
                    }
                    fields.remove("reason");
                    fields.remove("method");
                    stripped += 1;
                }
            }
        }
        assert!(stripped > 0, "the demo scenario compacts");
        assert!(replay(&old).is_ok());
        // What the old trace did record is still compared.
        for step in &mut old.steps {
            for c in &mut step.commands {
                if c["type"] == "replace_conversation" {
                    c["after_messages"] = 1.into();
                }
            }
        }
        assert!(replay(&old).is_err());
    }
}
