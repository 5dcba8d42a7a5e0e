//! Python bindings of rebound-core and rebound-sim (module `rebound_agent._native`).
//!
//! The package only converts and forwards: every decision is made by the Rust crates. Values
//! cross the boundary in the JSON shape of the trace format; bad input raises one of the
//! typed exceptions of [`errors`], never a panic.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod budget;
mod convert;
mod deadlines;
mod errors;
mod exclusive;

mod machine;
mod sim;
mod tally;
mod wire;

use pyo3::prelude::*;

/// The native module; `rebound_agent/__init__.py` wraps it.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ReboundError", py.get_type::<errors::ReboundError>())?;
    m.add("ConfigError", py.get_type::<errors::ConfigError>())?;
    m.add("EventError", py.get_type::<errors::EventError>())?;
    m.add(
        "UnknownAnswerError",
        py.get_type::<errors::UnknownAnswerError>(),
    )?;
    m.add(
        "UnexpectedEventError",
        py.get_type::<errors::UnexpectedEventError>(),
    )?;
    m.add("StreamError", py.get_type::<errors::StreamError>())?;
    m.add("TraceError", py.get_type::<errors::TraceError>())?;
    m.add("RequestError", py.get_type::<errors::RequestError>())?;
    m.add("BudgetError", py.get_type::<errors::BudgetError>())?;
    m.add(
        "ReentrantCallError",
        py.get_type::<errors::ReentrantCallError>(),
    )?;
    m.add("SimulationError", py.get_type::<errors::SimulationError>())?;
    m.add_class::<machine::PyMachine>()?;
    m.add_class::<machine::PySnapshot>()?;
    m.add_class::<deadlines::PyStreamDeadlines>()?;
    m.add_class::<tally::PyRunTally>()?;
    m.add_function(wrap_pyfunction!(machine::describe, m)?)?;
    m.add_function(wrap_pyfunction!(machine::normalize_event, m)?)?;
    m.add_class::<budget::PyRetryBudget>()?;
    m.add_class::<wire::PyStreamDecoder>()?;
    m.add_class::<sim::ScenarioTools>()?;
    m.add_function(wrap_pyfunction!(wire::request_body, m)?)?;
    m.add_function(wrap_pyfunction!(wire::request_path, m)?)?;
    m.add_function(wrap_pyfunction!(wire::parse_response, m)?)?;
    m.add_function(wrap_pyfunction!(wire::classify_http, m)?)?;
    m.add_function(wrap_pyfunction!(wire::classify_transport, m)?)?;
    m.add_function(wrap_pyfunction!(wire::compact, m)?)?;
    m.add_function(wrap_pyfunction!(sim::builtin_scenarios, m)?)?;
    m.add_function(wrap_pyfunction!(sim::simulate, m)?)?;
    m.add_function(wrap_pyfunction!(sim::simulate_many, m)?)?;
    m.add_function(wrap_pyfunction!(sim::simulate_fleet, m)?)?;
    m.add_function(wrap_pyfunction!(sim::outage_report, m)?)?;
    m.add_function(wrap_pyfunction!(sim::replay, m)?)?;
    m.add_function(wrap_pyfunction!(sim::read_trace, m)?)?;
    Ok(())
}
