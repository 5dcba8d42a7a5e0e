//! Trace types: the JSON Lines record of a run that replays it exactly.
//!
//! Line 1 is a [`TraceHeader`]; every further line is a [`TraceStep`]: the time, the event
//! handed to the machine, and the commands it emitted. Commands are stored as JSON values
//! (conversations as `{"messages", "digest"}` summaries), which is all replay needs to compare.
//! Secrets never enter a trace: the machine never sees an API key.

use crate::conversation::Conversation;
use crate::machine::{Command, Event, MachineConfig};
use crate::time::Millis;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{self, Write};

/// The `format` field of every trace header.
pub const TRACE_FORMAT: &str = "rebound-trace";
/// The trace format version this crate writes and reads.
pub const TRACE_VERSION: u32 = 1;

/// The first line of a trace: everything needed to rebuild the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceHeader {
    /// Always [`TRACE_FORMAT`].
    pub format: String,
    /// The format version, [`TRACE_VERSION`].
    pub version: u32,
    /// The machine's jitter seed.
    pub seed: u64,
    /// The machine's configuration.
    pub config: MachineConfig,
    /// The conversation the machine started from, when it continued a session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_conversation: Option<Conversation>,
    /// Free-form facts about the run (driver, scenario name, provider), never secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
}

impl TraceHeader {
    /// A header for a machine built with `config` and `seed`.
    #[must_use]
    pub fn new(seed: u64, config: MachineConfig) -> Self {
        TraceHeader {
            format: TRACE_FORMAT.to_owned(),
            version: TRACE_VERSION,
            seed,
            config,
            initial_conversation: None,
            meta: BTreeMap::new(),
        }
    }
}

/// One line after the header: an event at a time and the commands it produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStep {
    /// When the event was handled.
    pub t_ms: Millis,
    /// The event.
    pub event: Event,
    /// The commands, as JSON values.
    pub commands: Vec<Value>,
}

impl TraceStep {
    /// Records a step.
    #[must_use]
    pub fn new(t_ms: Millis, event: Event, commands: &[Command]) -> Self {
        TraceStep {
            t_ms,
            event,
            commands: commands.iter().map(command_value).collect(),
        }
    }
}

/// The JSON form of a command as stored in traces.
#[must_use]
pub fn command_value(command: &Command) -> Value {
    serde_json::to_value(command).unwrap_or(Value::Null)
}

/// Writes a trace as it happens: the header first, then one line per step.
///
/// For drivers that record while running (the tokio runner): nothing is kept in memory.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    writer: W,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header line.
    ///
    /// # Errors
    ///
    /// Any error of `writer`.
    pub fn new(mut writer: W, header: &TraceHeader) -> io::Result<Self> {
        serde_json::to_writer(&mut writer, header)?;
        writer.write_all(b"\n")?;
        Ok(TraceWriter { writer })
    }

    /// Writes one step line.
    ///
    /// # Errors
    ///
    /// Any error of the writer.
    pub fn write_step(&mut self, step: &TraceStep) -> io::Result<()> {
        serde_json::to_writer(&mut self.writer, step)?;
        self.writer.write_all(b"\n")
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.writer
    }
}
