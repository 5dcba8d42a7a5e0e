//! A request's stream deadlines for Python: core's [`StreamDeadlines`], as every
//! `SendRequest` carries them. The defaults are core's; none is kept here.

use crate::convert::{from_py, to_py, to_u64};
use pyo3::prelude::*;
use rebound_core::StreamDeadlines;

/// How long the answer to a request may take (from the machine's `stream` config): no byte
/// for `idle_ms` fails the attempt, and no content (text, thinking, a tool call or its
/// input; keep-alives are none) for `progress_ms` fails it too.
#[pyclass(frozen, module = "rebound_agent._native", name = "StreamDeadlines")]
pub struct PyStreamDeadlines(pub StreamDeadlines);

#[pymethods]
impl PyStreamDeadlines {
    /// Deadlines of `idle_ms` and `progress_ms` (each at least 1); one not given takes
    /// rebound's default.
    #[new]
    #[pyo3(signature = (idle_ms=None, progress_ms=None))]
    fn new(
        idle_ms: Option<&Bound<'_, PyAny>>,
        progress_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let default = StreamDeadlines::default();
        let idle_ms = idle_ms.map_or(Ok(default.idle_ms), |v| to_u64(v, "idle_ms"))?;
        let progress_ms =
            progress_ms.map_or(Ok(default.progress_ms), |v| to_u64(v, "progress_ms"))?;
        Ok(PyStreamDeadlines(StreamDeadlines::new(
            idle_ms,
            progress_ms,
        )))
    }

    /// The deadlines of their JSON shape (`{"idle_ms", "progress_ms"}`, a field missing
    /// taking its default), as a trace's `send_request` carries them.
    #[staticmethod]
    fn from_json(value: &Bound<'_, PyAny>) -> PyResult<Self> {
        from_py(value, "stream deadlines").map(PyStreamDeadlines)
    }

    /// No byte for this long fails the attempt, in ms (before the response's headers too).
    #[getter]
    fn idle_ms(&self) -> u64 {
        self.0.idle_ms
    }

    /// No content for this long fails the attempt, in ms; bytes alone do not reset it.
    #[getter]
    fn progress_ms(&self) -> u64 {
        self.0.progress_ms
    }

    /// Whether these are rebound's defaults (a trace line then leaves them out).
    #[getter]
    fn is_default(&self) -> bool {
        self.0.is_default()
    }

    /// `{"idle_ms", "progress_ms"}`.
    fn to_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.0)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyStreamDeadlines>()
            .is_ok_and(|o| o.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        self.0.idle_ms.rotate_left(32) ^ self.0.progress_ms
    }

    fn __repr__(&self) -> String {
        format!(
            "StreamDeadlines(idle_ms={}, progress_ms={})",
            self.0.idle_ms, self.0.progress_ms
        )
    }
}
