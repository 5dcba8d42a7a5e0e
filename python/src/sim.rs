//! rebound-sim for Python: simulated runs of a scenario (one agent, or a fleet sharing a
//! retry budget), the outage experiment's report, and trace replay with the first
//! divergence as `rebound replay` prints it.

use crate::convert::{from_py, int_arg, retyped, to_py};
use crate::errors::{ConfigError, EventError, SimulationError, TraceError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use rebound_core::{RetryBudget, ToolCall};
use rebound_sim::stats::percentile;
use rebound_sim::{
    replay as replay_trace, run_many, simulate as simulate_one,
    simulate_fleet as simulate_fleet_of, simulate_fleet_with, FleetAgent, Scenario, ScriptedTools,
    SimConfig, Trace,
};
use rebound_study::compare::{run_experiment, ExperimentConfig};

/// A scenario from a built-in name, its JSON text, or a dict of its JSON shape.
fn scenario(obj: &Bound<'_, PyAny>) -> PyResult<Scenario> {
    if let Ok(s) = obj.cast::<PyString>() {
        let text = s.to_str()?;
        if let Some(builtin) = Scenario::builtin(text) {
            return Ok(builtin);
        }
        if !text.trim_start().starts_with('{') {
            return Err(ConfigError::new_err(format!(
                "no built-in scenario named {text:?}; built-ins: {} (or pass the scenario's \
                 JSON text or a dict)",
                Scenario::builtin_names().join(", ")
            )));
        }
        return Scenario::from_json(text)
            .map_err(|e| ConfigError::new_err(format!("bad scenario: {e}")));
    }
    let value: serde_json::Value =
        from_py(obj, "scenario").map_err(|e| retyped(e, ConfigError::new_err))?;
    Scenario::from_json(&value.to_string())
        .map_err(|e| ConfigError::new_err(format!("bad scenario: {e}")))
}

fn sim_config(obj: Option<&Bound<'_, PyAny>>) -> PyResult<SimConfig> {
    match obj.filter(|o| !o.is_none()) {
        Some(c) => from_py(c, "simulator config").map_err(|e| retyped(e, ConfigError::new_err)),
        None => Ok(SimConfig::default()),
    }
}

/// The names of the built-in scenarios.
#[pyfunction]
pub fn builtin_scenarios() -> Vec<&'static str> {
    Scenario::builtin_names().to_vec()
}

/// One simulated run of `scenario` with `seed`, in virtual time: a dict with `seed`,
/// `succeeded`, `result` (`{"Ok": reason}` / `{"Err": error}`), `requests`, `duration_ms`,
/// `retries` (`[[t_ms, text], …]`), `tally` (the run's `RunTally` in its JSON shape, as core
/// counts every run's) and `trace` (JSON Lines, replayable). Raises
/// `SimulationError` when the machine livelocks or stalls (a bug in rebound, with the seed).
#[pyfunction]
#[pyo3(signature = (scenario, seed=None, config=None))]
pub fn simulate<'py>(
    py: Python<'py>,
    scenario: &Bound<'py, PyAny>,
    seed: Option<&Bound<'py, PyAny>>,
    config: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let seed: u64 = seed.map_or(Ok(0), |s| int_arg(s, "seed", ConfigError::new_err))?;
    let scenario = self::scenario(scenario)?;
    let config = sim_config(config)?;
    let outcome = py
        .detach(|| simulate_one(&scenario, &config, seed))
        .map_err(|e| {
            SimulationError::new_err(format!("{e} (scenario {:?}, seed {seed})", scenario.name))
        })?;
    let d = PyDict::new(py);
    d.set_item("seed", outcome.seed)?;
    d.set_item("succeeded", outcome.succeeded())?;
    d.set_item("result", to_py(py, &outcome.result)?)?;
    d.set_item("requests", outcome.requests())?;
    d.set_item("duration_ms", outcome.duration_ms())?;
    let retries = PyList::empty(py);
    for (t, info) in outcome.retry_notifications() {
        retries.append(to_py(py, &(t.0, info.to_string()))?)?;
    }
    d.set_item("retries", retries)?;
    d.set_item("tally", to_py(py, &outcome.tally())?)?;
    d.set_item("trace", outcome.trace().to_jsonl())?;
    Ok(d)
}

/// Agents running `scenario` in one simulated world: one virtual clock and, when
/// `config["budget"]` is set, one retry budget they share (machines ask it only when
/// `config["machine"]["retry_budget"]` is set). `agents` is a list of `(seed, start_ms)`.
/// A dict: `runs`, one dict per agent in the order given (`seed`, `succeeded`, `result`,
/// `requests`, `started_ms`, `ended_ms`), and `budget`, the shared budget's stats (None
/// without one). Raises `SimulationError` when a machine livelocks or stalls.
#[pyfunction]
#[pyo3(signature = (scenario, agents, config=None))]
pub fn simulate_fleet<'py>(
    py: Python<'py>,
    scenario: &Bound<'py, PyAny>,
    agents: &Bound<'py, PyAny>,
    config: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let agents: Vec<(u64, u64)> =
        from_py(agents, "agents (seed, start_ms)").map_err(|e| retyped(e, ConfigError::new_err))?;
    let scenario = self::scenario(scenario)?;
    let config = sim_config(config)?;
    let fleet: Vec<FleetAgent<'_>> = agents
        .iter()
        .map(|&(seed, start_ms)| FleetAgent {
            scenario: &scenario,
            seed,
            start_ms,
        })
        .collect();
    let (outcomes, stats) = py
        .detach(|| match &config.budget {
            Some(budget) => {
                let mut budget = RetryBudget::new(budget.clone());
                simulate_fleet_with(&fleet, &config, &mut budget).map(|o| (o, Some(budget.stats())))
            }
            None => simulate_fleet_of(&fleet, &config).map(|o| (o, None)),
        })
        .map_err(|e| SimulationError::new_err(format!("{e} (scenario {:?})", scenario.name)))?;
    let runs = PyList::empty(py);
    for outcome in &outcomes {
        let run = PyDict::new(py);
        run.set_item("seed", outcome.seed)?;
        run.set_item("succeeded", outcome.succeeded())?;
        run.set_item("result", to_py(py, &outcome.result)?)?;
        run.set_item("requests", outcome.requests())?;
        run.set_item("started_ms", outcome.started.0)?;
        run.set_item("ended_ms", outcome.elapsed.0)?;
        runs.append(run)?;
    }
    let d = PyDict::new(py);
    d.set_item("runs", runs)?;
    d.set_item("budget", stats.map(|s| to_py(py, &s)).transpose()?)?;
    Ok(d)
}

/// `runs` simulated runs of `scenario` with seeds `first_seed..first_seed + runs`: the
/// statistics `rebound sim` prints, as a dict (`table` is its Markdown table).
#[pyfunction]
#[pyo3(signature = (scenario, runs=None, first_seed=None, config=None))]
pub fn simulate_many<'py>(
    py: Python<'py>,
    scenario: &Bound<'py, PyAny>,
    runs: Option<&Bound<'py, PyAny>>,
    first_seed: Option<&Bound<'py, PyAny>>,
    config: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let runs: u32 = runs.map_or(Ok(100), |r| int_arg(r, "runs", ConfigError::new_err))?;
    let first_seed: u64 =
        first_seed.map_or(Ok(0), |s| int_arg(s, "first_seed", ConfigError::new_err))?;
    let scenario = self::scenario(scenario)?;
    let config = sim_config(config)?;
    let stats = py.detach(|| run_many(&scenario, &config, first_seed, runs));
    let d = PyDict::new(py);
    d.set_item("scenario", &stats.scenario)?;
    d.set_item("runs", stats.runs)?;
    d.set_item("succeeded", stats.succeeded)?;
    d.set_item("success_rate", stats.success_rate())?;
    d.set_item("failures", to_py(py, &stats.failures)?)?;
    d.set_item("sim_errors", stats.sim_errors)?;
    d.set_item(
        "first_sim_error",
        stats.first_sim_error.as_ref().map(ToString::to_string),
    )?;
    d.set_item("mean_requests", stats.mean_requests())?;
    d.set_item("p99_requests", percentile(&stats.requests, 99.0))?;
    d.set_item("retries", stats.retries)?;
    d.set_item("p50_ms", stats.elapsed_percentile(50.0))?;
    d.set_item("p99_ms", stats.elapsed_percentile(99.0))?;
    let per_run = PyList::empty(py);
    for r in &stats.per_run {
        per_run.append((r.seed, r.succeeded, r.requests, r.elapsed_ms))?;
    }
    d.set_item("per_run", per_run)?;
    d.set_item(
        "table",
        format!(
            "{}\n{}",
            rebound_sim::Stats::markdown_header(),
            stats.markdown_row()
        ),
    )?;
    Ok(d)
}

/// The outage experiment (`rebound sim --compare`): rebound against the modelled retry
/// policies of other agent stacks on the same seeded outages, `agents` agents per outage
/// model. A dict: `table` (the Markdown report), `rows`, `met` (rebound met its bar) and
/// `misses`.
#[pyfunction]
#[pyo3(signature = (seed=None, agents=None))]
pub fn outage_report<'py>(
    py: Python<'py>,
    seed: Option<&Bound<'py, PyAny>>,
    agents: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    // The study's defaults (`rebound sim --compare`'s) for what is not given.
    let mut config = ExperimentConfig::default();
    if let Some(seed) = seed {
        config = config.with_seed(int_arg(seed, "seed", ConfigError::new_err)?);
    }
    if let Some(agents) = agents {
        config = config.with_agents(int_arg(agents, "agents", ConfigError::new_err)?);
    }
    let seed = config.seed;
    let report = py
        .detach(|| run_experiment(&config))
        .map_err(|e| SimulationError::new_err(format!("{e} (experiment seed {seed})")))?;
    let d = PyDict::new(py);
    d.set_item("table", report.to_string())?;
    let rows = PyList::empty(py);
    for r in &report.rows {
        let row = PyDict::new(py);
        row.set_item("model", &r.model)?;
        row.set_item("policy", r.policy.label())?;
        row.set_item("agents", r.agents)?;
        row.set_item("completed", r.completed)?;
        row.set_item("success_rate", r.success_rate())?;
        row.set_item("requests", r.requests)?;
        row.set_item("requests_per_turn", r.requests_per_turn())?;
        row.set_item("p50_ms", r.p50_ms)?;
        row.set_item("p99_ms", r.p99_ms)?;
        row.set_item("peak_per_sec", r.peak_per_sec)?;
        rows.append(row)?;
    }
    d.set_item("rows", rows)?;
    let verdict = report.verdict();
    d.set_item("met", verdict.met())?;
    let misses: Vec<String> = verdict.misses.iter().map(ToString::to_string).collect();
    d.set_item("misses", misses)?;
    Ok(d)
}

/// Replays a trace (its JSON Lines text) into a fresh machine and compares every step's
/// commands with the recorded ones. A dict: `identical`, `steps`, `commands`, `outcome`,
/// `elapsed_ms`, `divergence` (None, or the first divergence: `step`, `line`, `t_ms`,
/// `event`, `command`, `expected`, `actual`) and `text`, what `rebound replay` prints.
/// Raises `TraceError` for a trace that cannot be read.
#[pyfunction]
pub fn replay<'py>(py: Python<'py>, trace: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let text: String = if let Ok(s) = trace.cast::<PyString>() {
        s.to_str()?.to_owned()
    } else if let Ok(b) = trace.extract::<Vec<u8>>() {
        String::from_utf8(b)
            .map_err(|e| TraceError::new_err(format!("the trace is not UTF-8: {e}")))?
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "trace must be the trace's text (str or bytes)",
        ));
    };
    let trace = Trace::parse(&text).map_err(|e| TraceError::new_err(e.to_string()))?;
    let d = PyDict::new(py);
    d.set_item("steps", trace.steps.len())?;
    match replay_trace(&trace) {
        Ok(report) => {
            d.set_item("identical", true)?;
            d.set_item("commands", report.commands)?;
            d.set_item(
                "outcome",
                report.outcome.as_ref().map(|o| to_py(py, o)).transpose()?,
            )?;
            d.set_item("elapsed_ms", report.elapsed.0)?;
            d.set_item("divergence", py.None())?;
            d.set_item("text", report.to_string())?;
        }
        Err(e) => {
            let div = e.divergence();
            d.set_item("identical", false)?;
            d.set_item("commands", py.None())?;
            d.set_item("outcome", py.None())?;
            d.set_item("elapsed_ms", div.t_ms.0)?;
            let v = PyDict::new(py);
            v.set_item("step", div.step)?;
            v.set_item("line", div.step + 2)?;
            v.set_item("t_ms", div.t_ms.0)?;
            v.set_item("event", to_py(py, &div.event)?)?;
            v.set_item("command", div.command)?;
            v.set_item("expected", to_py(py, &div.expected)?)?;
            v.set_item("actual", to_py(py, &div.actual)?)?;
            d.set_item("divergence", v)?;
            d.set_item("text", e.to_string())?;
        }
    }
    Ok(d)
}

/// Reads a trace (JSON Lines text) and returns its header and steps in their JSON shape:
/// `{"header": {...}, "steps": [{"t_ms", "event", "commands"}, ...]}`. Raises `TraceError`.
#[pyfunction]
pub fn read_trace<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyDict>> {
    let trace = Trace::parse(text).map_err(|e| TraceError::new_err(e.to_string()))?;
    let d = PyDict::new(py);
    d.set_item("header", to_py(py, &trace.header)?)?;
    d.set_item("steps", to_py(py, &trace.steps)?)?;
    Ok(d)
}

/// The tools a scenario scripts, as `rebound serve`'s scenarios expect them and as
/// `rebound demo` and the simulator run them: a scripted call fails or succeeds as its
/// answer says, an unscripted one answers `"<name> finished"`, a scripted `batch_error`
/// fails the whole batch. For agents tested against `rebound serve --scenario`.
#[pyclass(module = "rebound_agent._native", frozen)]
pub struct ScenarioTools {
    scenario: Scenario,
}

#[pymethods]
impl ScenarioTools {
    /// The tools of `scenario` (a built-in name, its JSON text, or a dict). Raises
    /// `ConfigError` for a bad scenario.
    #[new]
    fn new(scenario: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(ScenarioTools {
            scenario: self::scenario(scenario)?,
        })
    }

    /// The tools' specs (`name`, `description`, `input_schema`), for a machine config's
    /// `tools` and a request's tool list.
    fn specs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.scenario.tool_specs())
    }

    /// Runs a batch of calls (the `calls` of a `RunTools` command): `(duration_ms, outcome)`,
    /// the batch's scripted duration and its outcome as `ToolsFinished` takes it
    /// (`{"per_call": [...]}` or `{"whole_batch": failure}`). Nothing is waited. Raises
    /// `EventError` for calls that are not `{"id", "name", "input"}` dicts.
    fn run<'py>(
        &self,
        py: Python<'py>,
        calls: &Bound<'py, PyAny>,
    ) -> PyResult<(u64, Bound<'py, PyAny>)> {
        let calls: Vec<ToolCall> =
            from_py(calls, "tool calls").map_err(|e| retyped(e, EventError::new_err))?;
        let (ms, outcome) =
            ScriptedTools::new(&self.scenario).run(&calls, self.scenario.timing.tool_ms);
        Ok((ms, to_py(py, &outcome)?))
    }
}
