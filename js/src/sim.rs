//! rebound-sim and rebound-study for JavaScript: simulated runs of a scenario (one agent, or
//! a fleet sharing a retry budget), many seeded runs as `rebound sim` sums them up, the
//! outage experiment of `rebound sim --compare` (whole, or one policy in one outage model with
//! every agent's attempts, for the playground), a scenario's scripted tools, and trace
//! replay with the first divergence as `rebound replay` prints it.
//!
//! Every result is JSON text that `lib/sim.js` parses: the package's own reports in
//! JavaScript's naming (`durationMs`), the values of rebound's trace format inside them in
//! their JSON shape (a `tally`, a `result`, an event). Seeds, which may pass 2^53, are
//! written as decimal strings (`lib/sim.js` makes them bigints). The simulator and the study
//! decide everything; this module converts.

use crate::convert::{from_json, seed, to_json, whole};
use crate::errors::{error, Kind, Result};
use rebound_core::{RetryBudget, ToolCall};
use rebound_sim::stats::percentile;
use rebound_sim::{
    replay as replay_trace, run_many, simulate as simulate_one, simulate_fleet,
    simulate_fleet_with, FleetAgent, Scenario, ScriptedTools, SimConfig, SimError, Trace,
};
use rebound_study::compare::{
    run_experiment, run_policy, ExperimentConfig, OutageModel, Policy, Row,
};
use serde_json::{json, Value};
use wasm_bindgen::prelude::*;

/// A scenario from a built-in name or its JSON text.
fn scenario(text: &str) -> Result<Scenario> {
    if let Some(builtin) = Scenario::builtin(text) {
        return Ok(builtin);
    }
    if !text.trim_start().starts_with('{') {
        return Err(error(
            Kind::Config,
            format!(
                "no built-in scenario named {text:?}; built-ins: {} (or pass a scenario object \
                 or its JSON text)",
                Scenario::builtin_names().join(", ")
            ),
        ));
    }
    Scenario::from_json(text).map_err(|e| error(Kind::Config, format!("bad scenario: {e}")))
}

/// A simulator configuration from its JSON text, or the defaults.
fn sim_config(config_json: Option<String>) -> Result<SimConfig> {
    match config_json {
        Some(text) => from_json(&text, "simulator config", Kind::Config),
        None => Ok(SimConfig::default()),
    }
}

/// A simulator failure (a livelock or a stall: a bug in rebound), naming what reproduces it.
fn sim_error(e: &SimError, context: impl std::fmt::Display) -> JsValue {
    error(
        Kind::Rebound,
        format!("the simulator failed: {e} ({context})"),
    )
}

/// A whole number from a JavaScript number that fits `T`, or a ConfigError naming `what`.
fn whole_as<T: TryFrom<u64>>(value: f64, what: &str) -> Result<T> {
    let n = whole(value, what, Kind::Config)?;
    T::try_from(n).map_err(|_| {
        error(
            Kind::Config,
            format!("{what} must be a whole number that fits, not {value}"),
        )
    })
}

/// The names of the built-in scenarios.
#[wasm_bindgen(js_name = builtinScenarios)]
pub fn builtin_scenarios() -> Vec<String> {
    Scenario::builtin_names()
        .iter()
        .map(|&n| n.to_owned())
        .collect()
}

/// One simulated run of `scenario` (a built-in name or its JSON text) with `seed`, in
/// virtual time, under `config_json` (a SimConfig's JSON text, or nothing for the
/// defaults): JSON text of `{seed, succeeded, result, requests, durationMs, retries: [{tMs,
/// text}], tally, trace}`. Throws a ConfigError for a bad scenario, config or seed, a
/// ReboundError when the machine livelocks or stalls (a bug, with the seed).
#[wasm_bindgen]
pub fn simulate(
    scenario_text: &str,
    seed_value: JsValue,
    config_json: Option<String>,
) -> Result<String> {
    let seed = seed(&seed_value)?;
    let scenario = scenario(scenario_text)?;
    let config = sim_config(config_json)?;
    let outcome = simulate_one(&scenario, &config, seed)
        .map_err(|e| sim_error(&e, format!("scenario {:?}, seed {seed}", scenario.name)))?;
    let retries: Vec<Value> = outcome
        .retry_notifications()
        .map(|(t, info)| json!({ "tMs": t.0, "text": info.to_string() }))
        .collect();
    to_json(&json!({
        "seed": outcome.seed.to_string(),
        "succeeded": outcome.succeeded(),
        "result": outcome.result,
        "requests": outcome.requests(),
        "durationMs": outcome.duration_ms(),
        "retries": retries,
        "tally": outcome.tally(),
        "trace": outcome.trace().to_jsonl(),
    }))
}

/// Agents running `scenario` in one simulated world: one virtual clock and, when the
/// config's `budget` is set, one retry budget they share (machines ask it only when the
/// config's `machine.retry_budget` is set). Agent `i` has seed `seeds[i]` and starts at
/// `starts_ms[i]`. JSON text of `{runs: [{seed, succeeded, result, requests, startedMs,
/// endedMs}], budget}` (`budget`: the shared budget's stats, or null without one).
#[wasm_bindgen(js_name = simulateFleet)]
pub fn simulate_fleet_of(
    scenario_text: &str,
    seeds: Vec<JsValue>,
    starts_ms: Vec<f64>,
    config_json: Option<String>,
) -> Result<String> {
    if seeds.len() != starts_ms.len() {
        return Err(error(
            Kind::Config,
            format!(
                "{} seeds but {} start times: give each agent both",
                seeds.len(),
                starts_ms.len()
            ),
        ));
    }
    let scenario = scenario(scenario_text)?;
    let config = sim_config(config_json)?;
    let mut agents = Vec::with_capacity(seeds.len());
    for (s, &start) in seeds.iter().zip(&starts_ms) {
        agents.push(FleetAgent {
            scenario: &scenario,
            seed: seed(s)?,
            start_ms: whole(start, "an agent's startMs", Kind::Config)?,
        });
    }
    let (outcomes, stats) = match &config.budget {
        Some(budget) => {
            let mut budget = RetryBudget::new(budget.clone());
            simulate_fleet_with(&agents, &config, &mut budget).map(|o| (o, Some(budget.stats())))
        }
        None => simulate_fleet(&agents, &config).map(|o| (o, None)),
    }
    .map_err(|e| sim_error(&e, format!("scenario {:?}", scenario.name)))?;
    let runs: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            json!({
                "seed": o.seed.to_string(),
                "succeeded": o.succeeded(),
                "result": o.result,
                "requests": o.requests(),
                "startedMs": o.started.0,
                "endedMs": o.elapsed.0,
            })
        })
        .collect();
    let budget = stats.map(|s| {
        json!({
            "granted": s.granted,
            "denied": s.denied,
            "queued": s.queued,
            "depositedMilli": s.deposited_milli,
        })
    });
    to_json(&json!({ "runs": runs, "budget": budget }))
}

/// `runs` simulated runs of `scenario` with seeds `first_seed..first_seed + runs`: the
/// statistics `rebound sim --scenario … --runs … --seed …` prints, as JSON text
/// (`table` is its Markdown table, as the CLI prints it).
#[wasm_bindgen(js_name = simulateMany)]
pub fn simulate_many(
    scenario_text: &str,
    runs: f64,
    first_seed: JsValue,
    config_json: Option<String>,
) -> Result<String> {
    let runs: u32 = whole_as(runs, "runs")?;
    let first_seed = seed(&first_seed)?;
    let scenario = scenario(scenario_text)?;
    let config = sim_config(config_json)?;
    let stats = run_many(&scenario, &config, first_seed, runs);
    let per_run: Vec<Value> = stats
        .per_run
        .iter()
        .map(|r| {
            json!({
                "seed": r.seed.to_string(),
                "succeeded": r.succeeded,
                "requests": r.requests,
                "elapsedMs": r.elapsed_ms,
            })
        })
        .collect();
    to_json(&json!({
        "scenario": stats.scenario,
        "runs": stats.runs,
        "succeeded": stats.succeeded,
        "successRate": stats.success_rate(),
        "failures": stats.failures,
        "simErrors": stats.sim_errors,
        "firstSimError": stats.first_sim_error.as_ref().map(ToString::to_string),
        "meanRequests": stats.mean_requests(),
        "p99Requests": percentile(&stats.requests, 99.0),
        "retries": stats.retries,
        "p50Ms": stats.elapsed_percentile(50.0),
        "p99Ms": stats.elapsed_percentile(99.0),
        "perRun": per_run,
        "table": format!(
            "{}\n{}",
            rebound_sim::Stats::markdown_header(),
            stats.markdown_row()
        ),
    }))
}

/// A row of the outage experiment, in the package's naming.
fn row_value(r: &Row) -> Value {
    json!({
        "model": r.model,
        "policy": r.policy.label(),
        "agents": r.agents,
        "completed": r.completed,
        "successRate": r.success_rate(),
        "requests": r.requests,
        "requestsPerTurn": r.requests_per_turn(),
        "requestsPerAgent": r.requests_per_agent(),
        "p50Ms": r.p50_ms,
        "p99Ms": r.p99_ms,
        "peakPerSec": r.peak_per_sec,
        "tableRow": r.markdown_row(),
    })
}

/// The experiment's configuration: `rebound sim --compare`'s, with `seed` and `agents` per
/// model.
fn experiment(seed_value: &JsValue, agents: Option<f64>) -> Result<ExperimentConfig> {
    let mut config = ExperimentConfig::default();
    if !(seed_value.is_undefined() || seed_value.is_null()) {
        config = config.with_seed(seed(seed_value)?);
    }
    if let Some(agents) = agents {
        config = config.with_agents(whole_as(agents, "agents")?);
    }
    Ok(config)
}

/// The outage experiment (`rebound sim --compare`): rebound against the modelled retry
/// policies of other agent stacks on the same seeded outages, `agents` agents (1,000) per
/// outage model, experiment seed `seed` (1). JSON text of `{table, rows, met, misses}`:
/// the Markdown report the CLI prints, one row per (model, policy), whether rebound met its
/// bar and each rule it broke.
#[wasm_bindgen(js_name = outageReport)]
pub fn outage_report(seed_value: JsValue, agents: Option<f64>) -> Result<String> {
    let config = experiment(&seed_value, agents)?;
    let report = run_experiment(&config)
        .map_err(|e| sim_error(&e, format!("experiment seed {}", config.seed)))?;
    let verdict = report.verdict();
    let rows: Vec<Value> = report.rows.iter().map(row_value).collect();
    let misses: Vec<String> = verdict.misses.iter().map(ToString::to_string).collect();
    to_json(&json!({
        "table": report.to_string(),
        "rows": rows,
        "met": verdict.met(),
        "misses": misses,
    }))
}

/// The outage models of the experiment, in table order: JSON text of `[{name, description,
/// sharedProcess, fallback, windowMs, outagesMs}]` (`windowMs`: where the peak rate is
/// measured, or null for the whole run; `outagesMs`: the windows the outages strike,
/// `[from, until]` each).
#[wasm_bindgen(js_name = outageModels)]
pub fn outage_models() -> Result<String> {
    let models: Vec<Value> = OutageModel::standard()
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "description": m.description,
                "sharedProcess": m.shared_process,
                "fallback": m.fallback,
                "windowMs": m.window_ms,
                "outagesMs": m.outage_windows_ms(),
            })
        })
        .collect();
    to_json(&models)
}

/// The policies the experiment compares, in table order: JSON text of `[{name, rebound,
/// budgeted}]` (`name` as the table prints it, without emphasis: `rebound`, `rebound, no
/// budget`, then the peers; `budgeted`: a retry budget shared by the process's requests).
#[wasm_bindgen(js_name = outagePolicies)]
pub fn outage_policies() -> Result<String> {
    let policies: Vec<Value> = Policy::all()
        .into_iter()
        .map(|p| {
            json!({
                "name": p.label(),
                "rebound": p.is_rebound(),
                "budgeted": match p {
                    Policy::Rebound => true,
                    Policy::ReboundWithoutBudget => false,
                    Policy::Peer(peer) => peer.is_budgeted(),
                    _ => false,
                },
            })
        })
        .collect();
    to_json(&policies)
}

/// One policy in one outage model of the experiment, with `agents` agents (1,000) and
/// experiment seed `seed` (1): the row `rebound sim --compare --seed …` prints for the pair
/// (`row`, with `tableRow` its Markdown line), the requests and completions per second
/// (`perSec`, `completedPerSec`, as the charts draw them), and every agent's turn (`turns`:
/// `[{startMs, requestsMs, completedMs}]`, `completedMs` null when the policy gave up).
/// Throws a ConfigError for an unknown model or policy.
#[wasm_bindgen(js_name = runOutage)]
pub fn run_outage(
    model: &str,
    policy: &str,
    seed_value: JsValue,
    agents: Option<f64>,
) -> Result<String> {
    let config = experiment(&seed_value, agents)?;
    let index = config
        .models
        .iter()
        .position(|m| m.name == model)
        .ok_or_else(|| {
            let names: Vec<&str> = config.models.iter().map(|m| m.name.as_str()).collect();
            error(
                Kind::Config,
                format!(
                    "no outage model named {model:?}; the models: {}",
                    names.join(", ")
                ),
            )
        })?;
    let policy = Policy::from_label(policy.trim_matches('*')).ok_or_else(|| {
        let names: Vec<&str> = Policy::all().into_iter().map(Policy::label).collect();
        error(
            Kind::Config,
            format!(
                "no policy named {policy:?}; the policies: {}",
                names.join("; ")
            ),
        )
    })?;
    let run = run_policy(&config, index, policy).map_err(|e| {
        sim_error(
            &e,
            format!(
                "model {model:?}, policy {:?}, experiment seed {}",
                policy.label(),
                config.seed
            ),
        )
    })?;
    let turns: Vec<Value> = run
        .turns
        .iter()
        .map(|t| {
            json!({
                "startMs": t.start_ms,
                "requestsMs": t.requests,
                "completedMs": t.completed_at,
            })
        })
        .collect();
    to_json(&json!({
        "seed": config.seed.to_string(),
        "row": row_value(&run.row),
        "tableHeader": Row::markdown_header(),
        "perSec": run.timeline.per_sec,
        "completedPerSec": run.timeline.completed_per_sec,
        "peakPerSec": run.timeline.peak(),
        "staggerMs": config.stagger_ms,
        "turns": turns,
    }))
}

/// A trace read from its text, or a TraceError.
fn parse_trace(text: &str) -> Result<Trace> {
    Trace::parse(text).map_err(|e| error(Kind::Trace, e))
}

/// Replays a trace (its JSON Lines text) into a fresh machine and compares every step's
/// commands with the recorded ones: JSON text of `{identical, steps, commands, outcome,
/// elapsedMs, divergence, text}` (`divergence`: null, or the first one: `{step, line, tMs,
/// event, command, expected, actual}`; `text`: what `rebound replay` prints). Throws a
/// TraceError for a trace that cannot be read.
#[wasm_bindgen]
pub fn replay(text: &str) -> Result<String> {
    let trace = parse_trace(text)?;
    let steps = trace.steps.len();
    to_json(&match replay_trace(&trace) {
        Ok(report) => json!({
            "identical": true,
            "steps": steps,
            "commands": report.commands,
            "outcome": report.outcome,
            "elapsedMs": report.elapsed.0,
            "divergence": null,
            "text": report.to_string(),
        }),
        Err(e) => {
            let d = e.divergence();
            json!({
                "identical": false,
                "steps": steps,
                "commands": null,
                "outcome": null,
                "elapsedMs": d.t_ms.0,
                "divergence": {
                    "step": d.step,
                    "line": d.step + 2,
                    "tMs": d.t_ms.0,
                    "event": d.event,
                    "command": d.command,
                    "expected": d.expected,
                    "actual": d.actual,
                },
                "text": e.to_string(),
            })
        }
    })
}

/// Reads a trace (its JSON Lines text): JSON text of `{header, steps}` in the trace format's
/// shape (each step `{t_ms, event, commands}`). Throws a TraceError.
#[wasm_bindgen(js_name = readTrace)]
pub fn read_trace(text: &str) -> Result<String> {
    let trace = parse_trace(text)?;
    to_json(&json!({ "header": trace.header, "steps": trace.steps }))
}

/// The tools a scenario scripts, as `rebound serve`'s scenarios expect them and as
/// `rebound demo` and the simulator run them: a scripted call fails or succeeds as its
/// answer says, an unscripted one answers `"<name> finished"`, a scripted `batch_error`
/// fails the whole batch. For agents tested against `rebound serve --scenario`.
#[wasm_bindgen]
pub struct ScenarioTools {
    scenario: Scenario,
}

#[wasm_bindgen]
impl ScenarioTools {
    /// The tools of `scenario` (a built-in name or its JSON text). Throws a ConfigError for
    /// a bad scenario.
    #[wasm_bindgen(constructor)]
    pub fn new(scenario_text: &str) -> Result<ScenarioTools> {
        Ok(ScenarioTools {
            scenario: scenario(scenario_text)?,
        })
    }

    /// The tools' specs (`name`, `description`, `input_schema`) as JSON text, for a machine
    /// config's `tools`.
    #[wasm_bindgen(js_name = specsJson)]
    pub fn specs_json(&self) -> Result<String> {
        to_json(&self.scenario.tool_specs())
    }

    /// Runs a batch of calls (the JSON text of a `run_tools` command's `calls`): JSON text
    /// of `{durationMs, outcome}`, the batch's scripted duration and its outcome as
    /// `tools_finished` takes it (`{"per_call": […]}` or `{"whole_batch": failure}`).
    /// Nothing is waited. Throws an EventError for calls that are not `{id, name, input}`.
    pub fn run(&self, calls_json: &str) -> Result<String> {
        let calls: Vec<ToolCall> = from_json(calls_json, "tool calls", Kind::Event)?;
        let (ms, outcome) =
            ScriptedTools::new(&self.scenario).run(&calls, self.scenario.timing.tool_ms);
        to_json(&json!({ "durationMs": ms, "outcome": outcome }))
    }
}
