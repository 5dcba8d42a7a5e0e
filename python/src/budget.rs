//! core's `RetryBudget` for Python: one token bucket of retries shared by every machine of a
//! process. Asks, notes and decisions cross in their JSON shape; core decides everything.
//!
//! The only thing kept here besides the budget is the set of tickets whose answer is still
//! to come, so that a ticket given twice is refused (core names a waiting request by its
//! ticket alone: a second request with the same ticket would make its answers ambiguous).

use crate::convert::{from_py, retyped, to_py, to_u64};
use crate::errors::{BudgetError, ConfigError};
use crate::exclusive::Exclusive;
use pyo3::prelude::*;
use rebound_core::{
    BudgetConfig, BudgetNote, Millis, PermitAsk, PermitDecision, RetryBudget, Ticket,
};
use serde_json::Value;
use std::collections::BTreeSet;

/// The native retry budget. `rebound_agent.RetryBudget` is this class; for an asyncio fleet,
/// `rebound_agent.SharedBudget` drives it.
/// Threads sharing it take turns (see [`Exclusive`]).
#[pyclass(frozen, module = "rebound_agent._native", name = "RetryBudget")]
pub struct PyRetryBudget {
    state: Exclusive<BudgetState>,
    config: BudgetConfig,
}

/// What a budget's calls change.
struct BudgetState {
    budget: RetryBudget,
    /// Tickets queued by `request` whose answer `poll_decision` has not handed out yet.
    pending: BTreeSet<u64>,
}

/// The JSON object of a Python dict (or of a JSON text holding one), for `T` to read. Only
/// an object: serde would also read a struct from a list, by position (`[1, 2]` as a
/// config of capacity 1 and initial 2), which is no JSON shape of these types.
fn object(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<serde_json::Map<String, Value>> {
    match from_py::<Value>(obj, what) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(BudgetError::new_err(format!(
            "invalid {what}: expected a dict (a JSON object), got {}",
            kind(&other)
        ))),
        Err(e) => Err(BudgetError::new_err(message(obj.py(), &e))),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "None",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    }
}

/// A `T` read from a JSON object; a malformed one is a [`BudgetError`].
fn read<T: serde::de::DeserializeOwned>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<T> {
    serde_json::from_value(Value::Object(object(obj, what)?))
        .map_err(|e| BudgetError::new_err(format!("invalid {what}: {e}")))
}

/// A budget config from its JSON shape: core reads it (an object only, unknown fields
/// refused, defaults for the rest).
fn budget_config(obj: &Bound<'_, PyAny>) -> PyResult<BudgetConfig> {
    from_py(obj, "budget config").map_err(|e| retyped(e, ConfigError::new_err))
}

/// The message of a Python exception, without its type's name.
fn message(py: Python<'_>, err: &PyErr) -> String {
    err.value(py).to_string()
}

fn millis(obj: &Bound<'_, PyAny>) -> PyResult<Millis> {
    to_u64(obj, "now_ms").map(Millis)
}

/// A permit decision in its JSON shape: `"granted"`, `"denied"` or `{"wait_until": ms}`.
fn decision<'py>(py: Python<'py>, decision: &PermitDecision) -> PyResult<Bound<'py, PyAny>> {
    to_py(py, decision)
}

#[pymethods]
impl PyRetryBudget {
    #[new]
    #[pyo3(signature = (config=None))]
    fn new(config: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let config = match config.filter(|c| !c.is_none()) {
            Some(c) => budget_config(c)?,
            None => BudgetConfig::default(),
        };
        let state = BudgetState {
            budget: RetryBudget::new(config.clone()),
            pending: BTreeSet::new(),
        };
        Ok(PyRetryBudget {
            state: Exclusive::new(state, "this retry budget"),
            config,
        })
    }

    /// Asks for a permit at `now_ms` under `ticket` (an AcquirePermit's `ask`, JSON shape).
    /// Returns the decision when it is known at once, or None when the request waits: its
    /// answer comes from `poll_decision`. Drain `poll_decision` after every call.
    fn request<'py>(
        &self,
        py: Python<'py>,
        now_ms: &Bound<'py, PyAny>,
        ticket: &Bound<'py, PyAny>,
        ask: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let now = millis(now_ms)?;
        let ticket = to_u64(ticket, "ticket")?;
        let ask: PermitAsk = read(ask, "permit ask")?;
        let decided = self.state.with(py, |state| {
            if state.pending.contains(&ticket) {
                return Err(BudgetError::new_err(format!(
                    "ticket {ticket} already names a request whose answer poll_decision has \
                     not handed out; give each waiting request its own ticket"
                )));
            }
            let decided = state.budget.request(now, Ticket(ticket), ask);
            if decided.is_none() {
                state.pending.insert(ticket);
            }
            Ok(decided)
        })?;
        decided.map(|d| decision(py, &d)).transpose()
    }

    /// Takes what a machine noted (a NoteBudget's `note`, JSON shape) at `now_ms`. Drain
    /// `poll_decision` afterwards.
    fn record(
        &self,
        py: Python<'_>,
        now_ms: &Bound<'_, PyAny>,
        note: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let now = millis(now_ms)?;
        let note: BudgetNote = read(note, "budget note")?;
        self.state.with(py, |state| {
            state.budget.record(now, note);
            Ok(())
        })
    }

    /// Lets time pass to `now_ms`: refill, the grants it pays for, denials at deadlines.
    /// Drain `poll_decision` afterwards.
    fn tick(&self, py: Python<'_>, now_ms: &Bound<'_, PyAny>) -> PyResult<()> {
        let now = millis(now_ms)?;
        self.state.with(py, |state| {
            state.budget.tick(now);
            Ok(())
        })
    }

    /// Withdraws a waiting request; returns whether it was waiting.
    fn cancel(&self, py: Python<'_>, ticket: &Bound<'_, PyAny>) -> PyResult<bool> {
        let ticket = to_u64(ticket, "ticket")?;
        self.state.with(py, |state| {
            let was_waiting = state.budget.cancel(Ticket(ticket));
            if was_waiting {
                state.pending.remove(&ticket);
            }
            Ok(was_waiting)
        })
    }

    /// The next answer decided for a waiting request, `(ticket, decision)`, or None.
    fn poll_decision<'py>(&self, py: Python<'py>) -> PyResult<Option<(u64, Bound<'py, PyAny>)>> {
        let decided = self.state.with(py, |state| {
            let decided = state.budget.poll_decision();
            if let Some((ticket, _)) = &decided {
                state.pending.remove(&ticket.0);
            }
            Ok(decided)
        })?;
        let Some((ticket, d)) = decided else {
            return Ok(None);
        };
        Ok(Some((ticket.0, decision(py, &d)?)))
    }

    /// When `tick` next changes something without other input (ms), or None when nobody
    /// waits.
    fn next_wakeup(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.state
            .with(py, |state| Ok(state.budget.next_wakeup().map(|t| t.0)))
    }

    /// Tokens available at `now_ms` (after refilling up to it, which may decide waiters:
    /// drain `poll_decision` afterwards).
    fn balance(&self, py: Python<'_>, now_ms: &Bound<'_, PyAny>) -> PyResult<f64> {
        let now = millis(now_ms)?;
        self.state.with(py, |state| Ok(state.budget.balance(now)))
    }

    /// Charged permits waiting in the queue.
    #[getter]
    fn waiting(&self, py: Python<'_>) -> PyResult<usize> {
        self.state.with(py, |state| Ok(state.budget.waiting()))
    }

    /// What the budget did so far: `{"granted", "denied", "queued", "deposited_milli"}`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stats = self.state.with(py, |state| Ok(state.budget.stats()))?;
        to_py(py, &stats)
    }

    /// The configuration, in its JSON shape, every default filled in.
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.config)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (waiting, stats) = self.state.with(py, |state| {
            Ok((state.budget.waiting(), state.budget.stats()))
        })?;
        Ok(format!(
            "RetryBudget(capacity={}, waiting={}, granted={}, denied={})",
            self.config.capacity, waiting, stats.granted, stats.denied
        ))
    }
}
