//! What the driver keeps of a run while it plays: every step, or only the counts statistics
//! need.
//!
//! A [`SimOutcome`](crate::SimOutcome) keeps every event and command, so a run can be written
//! as a trace and replayed. [`run_many`](crate::run_many) asks for hundreds of thousands of
//! runs and reads four numbers from each; keeping (and then dropping) every step was a fifth
//! of its time. Both play the same world loop; only the [`Record`] differs.

use rebound_core::trace::{TraceHeader, TraceStep};
use rebound_core::{Command, Event, Millis, RunTally};

/// One handled event and the commands it produced.
#[derive(Debug, Clone, PartialEq)]
pub struct SimStep {
    /// When the event was handled.
    pub at: Millis,
    /// The event.
    pub event: Event,
    /// The commands the machine emitted, in order.
    pub commands: Vec<Command>,
}

/// How a world loop keeps what happens to one agent.
pub(crate) trait Record {
    /// An empty record of a run that `header` describes (called only if the record keeps it).
    fn new(header: impl FnOnce() -> TraceHeader) -> Self;
    /// The agent is about to handle `event` at `at`.
    fn event(&mut self, at: Millis, event: &Event);
    /// The machine emitted `command` while handling the last event.
    fn command(&mut self, command: Command);
    /// Events handled so far.
    fn steps(&self) -> usize;
    /// The last step as a trace line, for error reports; empty when steps are not kept.
    fn last_step_json(&self) -> String;
}

/// Every step (events with the commands they produced) and the trace header.
#[derive(Debug)]
pub(crate) struct Steps {
    pub(crate) header: TraceHeader,
    pub(crate) steps: Vec<SimStep>,
}

impl Record for Steps {
    fn new(header: impl FnOnce() -> TraceHeader) -> Self {
        Steps {
            header: header(),
            steps: Vec::new(),
        }
    }

    fn event(&mut self, at: Millis, event: &Event) {
        self.steps.push(SimStep {
            at,
            event: event.clone(),
            commands: Vec::new(),
        });
    }

    fn command(&mut self, command: Command) {
        if let Some(step) = self.steps.last_mut() {
            step.commands.push(command);
        }
    }

    fn steps(&self) -> usize {
        self.steps.len()
    }

    fn last_step_json(&self) -> String {
        self.steps
            .last()
            .map(|s| {
                serde_json::to_string(&TraceStep::new(s.at, s.event.clone(), &s.commands))
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }
}

/// Counts only: events handled, and core's [`RunTally`] (the same counts the tokio runner
/// reports).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Events handled.
    pub(crate) steps: usize,
    /// What happened, counted as every driver counts it.
    pub(crate) run: RunTally,
}

impl Record for Tally {
    fn new(_header: impl FnOnce() -> TraceHeader) -> Self {
        Tally::default()
    }

    fn event(&mut self, at: Millis, event: &Event) {
        self.steps += 1;
        self.run.event(at, event);
    }

    fn command(&mut self, command: Command) {
        self.run.command(&command);
    }

    fn steps(&self) -> usize {
        self.steps
    }

    fn last_step_json(&self) -> String {
        String::new()
    }
}
