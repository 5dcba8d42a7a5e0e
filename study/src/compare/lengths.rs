//! The outage-length sweep: how a fleet that shares one retry budget comes back from a total
//! outage of a second to minutes.
//!
//! The outage study's other models give every agent one turn; here every agent is busy in
//! its tool loop (several turns, a tool call between them) when a total outage hits all of
//! them at once, and nobody starts anything new while it lasts. That is the case where the
//! fleet asks the budget for least during the outage (its agents wait in the queue) and
//! needs the most from it at the recovery: every agent still alive has a retry waiting, with
//! a wait limit running. A budget that drained that queue slower than the provider served
//! the fleet before the outage would fail runs the recovered provider could serve.
//!
//! Each length runs three ways: rebound with one budget shared by the whole fleet in one
//! process, the same fleet as processes sharing one budget in Redis (the simulator's model
//! of [`RedisBudget`](https://docs.rs/rebound-effects)'s client, [`RedisStore`]), and rebound
//! without a budget (what the budget may cost).
//!
//! ```
//! use rebound_study::compare::{run_length_sweep, LengthSweepConfig};
//!
//! let config = LengthSweepConfig::default().with_agents(40).with_lengths_ms(vec![12_000]);
//! let sweep = run_length_sweep(&config).unwrap();
//! assert_eq!(sweep.rows.len(), 3);
//! // Every run still alive when the provider recovered finished.
//! assert!(sweep.rows.iter().all(|r| r.lost_after_recovery == 0));
//! ```

use rebound_core::{
    BudgetConfig, Command, Event, GiveUp, MachineConfig, Millis, PermitKind, RunError,
};
use rebound_sim::redis_store::{RedisStore, RedisTiming};
use rebound_sim::scenario::{Answer, Fault, Outage, RandomFaults, Scenario, ScriptedCall, Turn};
use rebound_sim::{
    simulate_fleet, simulate_fleet_in_redis, FleetAgent, SimConfig, SimError, SimOutcome,
};
use serde_json::json;
use std::fmt;

/// What the sweep runs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LengthSweepConfig {
    /// Seeds every agent's jitter (agent `i` uses a seed derived from it and `i`).
    pub seed: u64,
    /// Agents in the fleet.
    pub agents: usize,
    /// Agents start evenly spread over `[0, stagger_ms)`.
    pub stagger_ms: u64,
    /// When the outage starts (every agent is in its tool loop by then).
    pub outage_from_ms: u64,
    /// The outage lengths to run, one row set each.
    pub lengths_ms: Vec<u64>,
    /// Model turns per agent: one tool call each, then a final answer.
    pub turns: usize,
    /// Processes the fleet is split into for the Redis rows (agents spread evenly).
    pub processes: usize,
    /// rebound's machine (its budget use is cleared for the rows without a budget).
    pub machine: MachineConfig,
    /// The budget shared by the fleet.
    pub budget: BudgetConfig,
}

impl Default for LengthSweepConfig {
    /// 200 agents starting over the first 5 s, ten turns each, a total outage from 10 s
    /// lasting 1, 5, 12, 30 and 60 s; [`MachineConfig::resilient`] and
    /// [`BudgetConfig::default`]; ten processes for the Redis rows.
    fn default() -> Self {
        LengthSweepConfig {
            seed: 1,
            agents: 200,
            stagger_ms: 5_000,
            outage_from_ms: 10_000,
            lengths_ms: vec![1_000, 5_000, 12_000, 30_000, 60_000],
            turns: 10,
            processes: 10,
            machine: MachineConfig::resilient(),
            budget: BudgetConfig::default(),
        }
    }
}

impl LengthSweepConfig {
    /// Sets [`seed`](Self::seed).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets [`agents`](Self::agents).
    #[must_use]
    pub fn with_agents(mut self, agents: usize) -> Self {
        self.agents = agents;
        self
    }

    /// Sets [`lengths_ms`](Self::lengths_ms).
    #[must_use]
    pub fn with_lengths_ms(mut self, lengths_ms: Vec<u64>) -> Self {
        self.lengths_ms = lengths_ms;
        self
    }

    /// Sets [`budget`](Self::budget).
    #[must_use]
    pub fn with_budget(mut self, budget: BudgetConfig) -> Self {
        self.budget = budget;
        self
    }

    /// The scenario every agent plays for an outage of `length_ms`: `turns - 1` answers
    /// that call a tool, then a text answer; a total 529 outage from
    /// [`outage_from_ms`](Self::outage_from_ms) for `length_ms`.
    #[must_use]
    pub fn scenario(&self, length_ms: u64) -> Scenario {
        let mut turns: Vec<Turn> = (1..self.turns)
            .map(|n| Turn {
                answer: Answer::calls(vec![ScriptedCall::new(
                    "read",
                    json!({ "path": format!("src/part{n}.rs") }),
                )]),
                ..Turn::default()
            })
            .collect();
        turns.push(Turn {
            answer: Answer::text("Done."),
            ..Turn::default()
        });
        let from = self.outage_from_ms;
        let mut scenario = Scenario::default();
        scenario.name = format!("outage-{}s", length_ms / 1_000);
        scenario.description = format!(
            "every attempt from {} s for {} ms gets 529; all agents busy in their tool loops",
            from / 1_000,
            length_ms
        );
        scenario.turns = turns;
        scenario.random = Some(RandomFaults {
            outages: vec![Outage::total(
                from,
                from.saturating_add(length_ms),
                Fault::http(529),
            )],
            ..RandomFaults::default()
        });
        scenario
    }

    fn start_ms(&self, index: usize) -> u64 {
        if self.agents == 0 {
            return 0;
        }
        (index as u64).saturating_mul(self.stagger_ms) / self.agents as u64
    }

    fn agent_seed(&self, index: usize) -> u64 {
        super::splitmix(self.seed ^ super::splitmix(0x6c65_6e67_0000_0000 | index as u64))
    }
}

/// Who shares what budget in a row of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sharing {
    /// One budget in the process every agent runs in.
    OneProcess,
    /// [`LengthSweepConfig::processes`] processes sharing one budget in Redis.
    Redis,
    /// No budget.
    NoBudget,
}

impl fmt::Display for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sharing::OneProcess => "**rebound**, one process",
            Sharing::Redis => "**rebound**, processes, one Redis budget",
            Sharing::NoBudget => "rebound, no budget",
        })
    }
}

/// What one (outage length, sharing) did.
#[derive(Debug, Clone, PartialEq)]
pub struct LengthRow {
    /// How long the outage lasted.
    pub outage_ms: u64,
    /// Who shared what budget.
    pub sharing: Sharing,
    /// Agents in the fleet.
    pub agents: usize,
    /// Runs that finished.
    pub succeeded: usize,
    /// Runs the recovered provider could still serve: not ended when it recovered, and not
    /// ending on their last attempt, sent into the outage.
    pub alive_at_recovery: usize,
    /// Of those, runs that failed after it: runs the recovered provider could have served.
    pub lost_after_recovery: usize,
    /// Requests a second the fleet sent in the five seconds before the outage (what the
    /// provider was serving).
    pub served_per_sec: f64,
    /// Retries waiting for a token from the budget when the provider recovered (asked
    /// before, answered after).
    pub queued_at_recovery: usize,
    /// The time from the recovery until the last of them was answered; `None` when none
    /// waited.
    pub drained_ms: Option<u64>,
    /// The time from the recovery until each run alive at it had an answer again (its
    /// first success after the recovery): the median and the longest; `None` when no run
    /// was alive or one never had.
    pub answered_again_ms: Option<(u64, u64)>,
    /// The most requests the fleet sent in any one-second bucket of the run.
    pub peak_per_sec: u32,
    /// Requests sent, over agents.
    pub requests_per_agent: f64,
}

/// The sweep's rows, by length then sharing.
#[derive(Debug, Clone, PartialEq)]
pub struct LengthSweep {
    /// What ran.
    pub config: LengthSweepConfig,
    /// One row per (length, sharing).
    pub rows: Vec<LengthRow>,
}

impl LengthSweep {
    /// The row of `sharing` for the outage of `outage_ms`.
    #[must_use]
    pub fn row(&self, outage_ms: u64, sharing: Sharing) -> Option<&LengthRow> {
        self.rows
            .iter()
            .find(|r| r.outage_ms == outage_ms && r.sharing == sharing)
    }
}

/// Runs every length of `config` three ways.
///
/// # Errors
///
/// A [`SimError`] when a machine livelocks or stalls in the simulator (a bug).
pub fn run_length_sweep(config: &LengthSweepConfig) -> Result<LengthSweep, SimError> {
    let mut rows = Vec::new();
    for &length in &config.lengths_ms {
        let scenario = config.scenario(length);
        let agents: Vec<FleetAgent<'_>> = (0..config.agents)
            .map(|i| FleetAgent {
                scenario: &scenario,
                seed: config.agent_seed(i),
                start_ms: config.start_ms(i),
            })
            .collect();
        for sharing in [Sharing::OneProcess, Sharing::Redis, Sharing::NoBudget] {
            let outcomes = run_fleet(config, &agents, sharing)?;
            rows.push(summarize(config, length, sharing, &outcomes));
        }
    }
    Ok(LengthSweep {
        config: config.clone(),
        rows,
    })
}

fn run_fleet(
    config: &LengthSweepConfig,
    agents: &[FleetAgent<'_>],
    sharing: Sharing,
) -> Result<Vec<SimOutcome>, SimError> {
    let mut machine = config.machine.clone();
    let max_steps = 1_000 * config.turns.max(1);
    match sharing {
        Sharing::OneProcess => {
            machine.retry_budget.get_or_insert_with(Default::default);
            let sim = SimConfig::default()
                .with_machine(machine)
                .with_max_steps(max_steps)
                .with_budget(config.budget.clone());
            simulate_fleet(agents, &sim)
        }
        Sharing::Redis => {
            machine.retry_budget.get_or_insert_with(Default::default);
            let sim = SimConfig::default()
                .with_machine(machine)
                .with_max_steps(max_steps);
            let processes = config.processes.clamp(1, agents.len().max(1));
            let mut split: Vec<Vec<FleetAgent<'_>>> = vec![Vec::new(); processes];
            for (i, agent) in agents.iter().enumerate() {
                split[i % processes].push(*agent);
            }
            let mut store = RedisStore::new(config.budget.clone(), RedisTiming::default());
            let by_process = simulate_fleet_in_redis(&split, &sim, &mut store)?;
            // Back to the agents' order.
            let mut outcomes: Vec<Option<SimOutcome>> = vec![None; agents.len()];
            for (p, runs) in by_process.into_iter().enumerate() {
                for (k, run) in runs.into_iter().enumerate() {
                    outcomes[k * processes + p] = Some(run);
                }
            }
            Ok(outcomes.into_iter().flatten().collect())
        }
        Sharing::NoBudget => {
            machine.retry_budget = None;
            let sim = SimConfig::default()
                .with_machine(machine)
                .with_max_steps(max_steps);
            simulate_fleet(agents, &sim)
        }
    }
}

fn summarize(
    config: &LengthSweepConfig,
    outage_ms: u64,
    sharing: Sharing,
    outcomes: &[SimOutcome],
) -> LengthRow {
    let from = Millis(config.outage_from_ms);
    let recovery = from.plus(outage_ms);
    let requests: Vec<u64> = outcomes
        .iter()
        .flat_map(|o| {
            o.commands()
                .filter(|(_, c)| matches!(c, Command::SendRequest { .. }))
                .map(|(t, _)| t.0)
        })
        .collect();
    let before = from.0.saturating_sub(5_000);
    let served = requests
        .iter()
        .filter(|t| (before..from.0).contains(t))
        .count();
    let served_per_sec = served as f64 * 1_000.0 / from.0.saturating_sub(before).max(1) as f64;
    let mut buckets = std::collections::BTreeMap::<u64, u32>::new();
    for t in &requests {
        *buckets.entry(t / 1_000).or_default() += 1;
    }
    let alive: Vec<&SimOutcome> = outcomes
        .iter()
        .filter(|o| o.elapsed >= recovery && !ended_on_its_last_attempt(o, recovery))
        .collect();
    let lost = alive.iter().filter(|o| !o.succeeded()).count();
    // Each alive run's first success after the recovery; a lost run has none.
    let answered: Option<Vec<u64>> = alive
        .iter()
        .map(|o| {
            o.steps
                .iter()
                .find(|s| s.at >= recovery && matches!(s.event, Event::ProviderSucceeded { .. }))
                .map(|s| s.at.since(recovery))
        })
        .collect();
    let answered_again_ms = answered.filter(|a| !a.is_empty()).map(|mut a| {
        a.sort_unstable();
        (a[(a.len() - 1) / 2], a[a.len() - 1])
    });
    // The budget's queue at the recovery: charged permits asked before it, answered after.
    let mut queued = 0;
    let mut drained: Option<u64> = None;
    for o in outcomes {
        let mut asked = std::collections::BTreeMap::new();
        for step in &o.steps {
            for command in &step.commands {
                if let Command::AcquirePermit { permit, ask } = command {
                    if ask.kind == PermitKind::Charged {
                        asked.insert(*permit, step.at);
                    }
                }
            }
            if let Event::PermitAnswered { permit, .. } = &step.event {
                if let Some(at) = asked.remove(permit) {
                    if at < recovery && step.at >= recovery {
                        queued += 1;
                        let ms = step.at.since(recovery);
                        drained = Some(drained.map_or(ms, |d| d.max(ms)));
                    }
                }
            }
        }
    }
    LengthRow {
        outage_ms,
        sharing,
        agents: outcomes.len(),
        succeeded: outcomes.iter().filter(|o| o.succeeded()).count(),
        alive_at_recovery: alive.len(),
        lost_after_recovery: lost,
        served_per_sec,
        queued_at_recovery: queued,
        drained_ms: drained,
        answered_again_ms,
        peak_per_sec: buckets.values().copied().max().unwrap_or(0),
        requests_per_agent: requests.len() as f64 / outcomes.len().max(1) as f64,
    }
}

/// Whether `run` failed because its attempts ran out, the last of them sent before
/// `recovery`: it had no retry left for the recovered provider.
fn ended_on_its_last_attempt(run: &SimOutcome, recovery: Millis) -> bool {
    let exhausted = matches!(
        &run.result,
        Err(RunError::Provider {
            reason: GiveUp::AttemptsExhausted { .. },
            ..
        })
    );
    let last_sent = run
        .commands()
        .filter(|(_, c)| matches!(c, Command::SendRequest { .. }))
        .map(|(t, _)| t)
        .last();
    exhausted && last_sent.is_some_and(|t| t < recovery)
}

impl fmt::Display for LengthSweep {
    /// The sweep as a Markdown table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "{} agents starting over the first {} s, {} turns each (a tool call between \
             them); a total outage (529) from {} s; seed {}. Redis rows: {} processes.",
            c.agents,
            c.stagger_ms / 1_000,
            c.turns,
            c.outage_from_ms / 1_000,
            c.seed,
            c.processes
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "| outage | policy | success | alive at recovery | lost after it | requests / s \
             before | queued at recovery | queue drained in | answered again: p50, max | \
             peak requests / s | requests / agent |"
        )?;
        writeln!(f, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")?;
        let secs = |ms: u64| format!("{:.1} s", ms as f64 / 1_000.0);
        for r in &self.rows {
            let drained = r.drained_ms.map_or_else(|| "—".to_owned(), secs);
            let answered = r.answered_again_ms.map_or_else(
                || "—".to_owned(),
                |(p50, max)| format!("{}, {}", secs(p50), secs(max)),
            );
            writeln!(
                f,
                "| {} s | {} | {:.1} % | {} | {} | {:.0} | {} | {} | {} | {} | {:.2} |",
                r.outage_ms as f64 / 1_000.0,
                r.sharing,
                r.succeeded as f64 * 100.0 / r.agents.max(1) as f64,
                r.alive_at_recovery,
                r.lost_after_recovery,
                r.served_per_sec,
                r.queued_at_recovery,
                drained,
                answered,
                r.peak_per_sec,
                r.requests_per_agent
            )?;
        }
        Ok(())
    }
}
