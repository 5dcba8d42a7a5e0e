//! What the driver keeps of a run while it plays: every step, or only the counts statistics
//! need.
//!
//! A [`SimOutcome`](crate::SimOutcome) keeps every event and command, so a run can be written
//! as a trace and replayed. [`run_many`](crate::run_many) asks for hundreds of thousands of
//! runs and reads four numbers from each; keeping (and then dropping) every step was a fifth
//! of its time. Both play the same world loop; only the [`Record`] differs.

use rebound_core::run::Step;
use rebound_core::trace::TraceHeader;
use rebound_core::RunTally;

/// One step of a simulated run: the time, the event handed to the machine, the commands it
/// emitted (core's [`Step`], the one every driver records).
pub type SimStep = Step;

/// What a finished run keeps.
pub(crate) trait Record: Sized {
    /// Whether the run records its steps (they are cloned as the run goes).
    const STEPS: bool;

    /// Keeps what this record needs of a finished run: its header (given when
    /// [`STEPS`](Self::STEPS)), its steps and its tally.
    fn finish(header: Option<TraceHeader>, steps: Vec<SimStep>, tally: RunTally) -> Self;
}

/// Every step, with the trace header.
#[derive(Debug)]
pub(crate) struct Steps {
    pub(crate) header: TraceHeader,
    pub(crate) steps: Vec<SimStep>,
}

impl Record for Steps {
    const STEPS: bool = true;

    fn finish(header: Option<TraceHeader>, steps: Vec<SimStep>, _tally: RunTally) -> Self {
        Steps {
            header: header.unwrap_or_else(|| unreachable!("a recording run has a header")),
            steps,
        }
    }
}

/// The counts only.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) run: RunTally,
}

impl Record for Tally {
    const STEPS: bool = false;

    fn finish(_header: Option<TraceHeader>, _steps: Vec<SimStep>, tally: RunTally) -> Self {
        Tally { run: tally }
    }
}
