//! The run tally for Python: core's [`RunTally`], read-only, as the machine's run (or the
//! simulator) counted it. Nothing is counted here.

use crate::convert::{from_py, to_py};
use pyo3::prelude::*;
use rebound_core::RunTally;

/// What happened during a run, counted by rebound-core from the events and commands (every
/// driver's tally is this one): a snapshot taken when it was read.
#[pyclass(frozen, module = "rebound_agent._native", name = "RunTally")]
pub struct PyRunTally(RunTally);

impl PyRunTally {
    /// A snapshot of `tally`.
    pub fn of(tally: &RunTally) -> Self {
        PyRunTally(tally.clone())
    }
}

#[pymethods]
impl PyRunTally {
    /// The tally of its JSON shape (`to_json()`'s, or the `tally` of `simulate`).
    #[staticmethod]
    fn from_json(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        from_py(value, "run tally").map(PyRunTally)
    }

    /// Provider requests sent (every attempt, compaction summaries included).
    #[getter]
    fn requests(&self) -> u32 {
        self.0.requests
    }

    /// Retries sent (a retry announced and never sent is not one).
    #[getter]
    fn retries(&self) -> u32 {
        self.0.retries
    }

    /// The announced delays of those retries, summed, in ms.
    #[getter]
    fn retry_wait_ms(&self) -> u64 {
        self.0.retry_wait_ms
    }

    /// Tool calls in appended assistant messages.
    #[getter]
    fn tool_calls(&self) -> u32 {
        self.0.tool_calls
    }

    /// Appended tool results that were errors.
    #[getter]
    fn tool_errors(&self) -> u32 {
        self.0.tool_errors
    }

    /// Compactions applied.
    #[getter]
    fn compactions(&self) -> u32 {
        self.0.compactions
    }

    /// Moves to another target of the fallback chain.
    #[getter]
    fn fallbacks(&self) -> u32 {
        self.0.fallbacks
    }

    /// Answers that began (`ProviderResponding`) and then failed: each one a `StreamReset`.
    #[getter]
    fn stream_resets(&self) -> u32 {
        self.0.stream_resets
    }

    /// Input tokens reported, summed over answered requests.
    #[getter]
    fn input_tokens(&self) -> u64 {
        self.0.input_tokens
    }

    /// Output tokens reported, summed.
    #[getter]
    fn output_tokens(&self) -> u64 {
        self.0.output_tokens
    }

    /// Prompt-cache reads reported, summed.
    #[getter]
    fn cache_read_tokens(&self) -> u64 {
        self.0.cache_read_tokens
    }

    /// Prompt-cache writes reported, summed.
    #[getter]
    fn cache_creation_tokens(&self) -> u64 {
        self.0.cache_creation_tokens
    }

    /// The usage of each answered request, in order: `{"target", "attempt", "purpose",
    /// "usage"}` each (a new list each call).
    #[getter]
    fn usage<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.0.usage)
    }

    /// Time from the first event handled to the last, in ms, on the clock given to `handle`.
    #[getter]
    fn elapsed_ms(&self) -> u64 {
        self.0.elapsed_ms
    }

    /// Every count in its JSON shape (a dict; fields a later rebound adds appear here).
    fn to_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.0)
    }

    /// Equal when every count is (what `to_json()` shows).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyRunTally>().is_ok_and(|o| {
            serde_json::to_value(&o.get().0).ok() == serde_json::to_value(&self.0).ok()
        })
    }

    fn __repr__(&self) -> String {
        let t = &self.0;
        format!(
            "RunTally(requests={}, retries={}, retry_wait_ms={}, tool_calls={}, tool_errors={}, \
             compactions={}, fallbacks={}, stream_resets={}, input_tokens={}, \
             output_tokens={}, elapsed_ms={})",
            t.requests,
            t.retries,
            t.retry_wait_ms,
            t.tool_calls,
            t.tool_errors,
            t.compactions,
            t.fallbacks,
            t.stream_resets,
            t.input_tokens,
            t.output_tokens,
            t.elapsed_ms
        )
    }
}
