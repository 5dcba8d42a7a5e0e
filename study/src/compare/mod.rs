//! The outage experiment: rebound's retry policy against the policies people use today, on
//! the same seeded outages, in virtual time.
//!
//! An experiment runs every [`OutageModel`] under every [`Policy`]. A model is a population
//! of agents — `agents` of them, starting evenly spread over the first `stagger_ms` of
//! virtual time — and a fault process ([`Scenario`]) they all meet. Every agent takes one
//! **turn**: one request to the provider, retried as its policy says, until it succeeds or
//! the policy gives up. Agent `i` of a model has the same seed under every policy, so it
//! meets the same fault draws for the same attempts.
//!
//! - **rebound** is the real [`AgentMachine`](rebound_core::AgentMachine), driven by
//!   [`simulate_fleet`]: in a model whose agents share one process, one fleet with one
//!   shared [`RetryBudget`](rebound_core::RetryBudget); otherwise every agent in its own
//!   world (its own process, its own budget).
//! - the **peers** are the modelled retry loops of [`peers`]: per-request loops, and
//!   *budgeted* peers whose retry budget (module `budgets`) every request of a process
//!   shares. They run as a fleet in virtual time (module `fleet`): in a model whose agents share
//!   one process, one budget for all agents; otherwise one per agent.
//!
//! Metrics per (model, policy) are in [`Row`]; [`Report`] prints them as a Markdown table
//! and checks [the bar](Verdict).
//!
//! ```
//! use rebound_study::compare::{run_experiment, ExperimentConfig};
//!
//! let config = ExperimentConfig::default().with_agents(20);
//! let report = run_experiment(&config).unwrap();
//! println!("{report}");
//! assert_eq!(report.rows.len(), config.models.len() * config.policies.len());
//! ```

mod budgets;
mod fleet;
mod lengths;
pub mod peers;
mod report;
mod timeline;

pub use lengths::{run_length_sweep, LengthRow, LengthSweep, LengthSweepConfig, Sharing};
pub use peers::Peer;
pub use report::{Miss, RecoveryLimits, Report, Row, Verdict};
pub use timeline::{run_experiment_with_timelines, run_policy, PolicyRun, Timeline};

use rebound_core::{BudgetConfig, BudgetUse, Command, MachineConfig, StreamDeadlines, TargetSpec};
use rebound_sim::scenario::{Answer, Fault, FaultKind, Outage, RandomFaults, Scenario, Turn};
use rebound_sim::{simulate_fleet, FleetAgent, SimConfig, SimError, SimOutcome};
use std::fmt;

/// Who retries: rebound or a modelled peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Policy {
    /// rebound's machine with [`ExperimentConfig::machine`] and, in shared-process models,
    /// the shared [`ExperimentConfig::budget`].
    Rebound,
    /// The same machine and attempt cap without any retry budget: what the budget buys.
    ReboundWithoutBudget,
    /// A modelled peer.
    Peer(Peer),
}

impl Policy {
    /// Every policy, rebound first.
    #[must_use]
    pub fn all() -> Vec<Policy> {
        let mut all = vec![Policy::Rebound, Policy::ReboundWithoutBudget];
        all.extend(Peer::ALL.map(Policy::Peer));
        all
    }

    /// Whether this is one of rebound's own rows.
    #[must_use]
    pub fn is_rebound(self) -> bool {
        matches!(self, Policy::Rebound | Policy::ReboundWithoutBudget)
    }

    /// The policy's name as the table prints it, without its Markdown emphasis: `rebound`,
    /// `rebound, no budget`, or the peer's [`label`](Peer::label).
    ///
    /// ```
    /// use rebound_study::compare::{Peer, Policy};
    ///
    /// assert_eq!(Policy::Rebound.label(), "rebound");
    /// assert_eq!(Policy::Peer(Peer::VercelAi).label(), "vercel-ai");
    /// assert_eq!(Policy::from_label("vercel-ai"), Some(Policy::Peer(Peer::VercelAi)));
    /// ```
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Policy::Rebound => "rebound",
            Policy::ReboundWithoutBudget => "rebound, no budget",
            Policy::Peer(p) => p.label(),
        }
    }

    /// The policy of [`all`](Self::all) whose [`label`](Self::label) is `label`, if any.
    #[must_use]
    pub fn from_label(label: &str) -> Option<Policy> {
        Policy::all().into_iter().find(|p| p.label() == label)
    }
}

impl fmt::Display for Policy {
    /// The [`label`](Policy::label), rebound's in bold (`**rebound**`), as the table
    /// prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Rebound => write!(f, "**{}**", self.label()),
            other => f.write_str(other.label()),
        }
    }
}

/// One outage model: the faults, and whether its agents share one process.
#[derive(Debug, Clone, PartialEq)]
pub struct OutageModel {
    /// A short name, e.g. `brownout`.
    pub name: String,
    /// One line on what it models.
    pub description: String,
    /// The fault process every agent meets (one turn answered `"Done."`).
    pub scenario: Scenario,
    /// Whether all agents run in one process, sharing rebound's retry budget and each
    /// budgeted peer's. When false, each agent is its own process with its own budget.
    pub shared_process: bool,
    /// The window `[from_ms, until_ms)` in which the peak request rate is measured; `None`
    /// for the whole run.
    pub window_ms: Option<(u64, u64)>,
    /// The most requests per agent rebound may send in this model (the bar's amplification
    /// limit), if any.
    pub max_requests_per_agent: Option<f64>,
    /// The most requests per completed turn rebound may send in this model, if any (a row
    /// that completed nothing exceeds every limit).
    pub max_requests_per_turn: Option<f64>,
    /// The least share of turns (0 to 1) rebound must complete in this model, if any.
    pub min_success: Option<f64>,
    /// The least share of "rebound, no budget"'s success rebound must reach in this model,
    /// if any (`0.99`: 99 % of it): what the budget may cost when the failure is short.
    pub min_success_of_unbudgeted: Option<f64>,
    /// How much slower and burstier than "rebound, no budget" rebound may recover in this
    /// model, if at all: what the budget may cost in time and peak rate when the failure is
    /// short.
    pub recovery_of_unbudgeted: Option<RecoveryLimits>,
    /// Whether rebound's agents have somewhere else to go: a second target of the fallback
    /// chain (another model) that the model's outages spare. The peers model one client
    /// each and have no chain.
    pub fallback: bool,
    /// Whether rebound must complete its turns sooner than every other policy: its median
    /// time to completion below every other row's of the model that completed a turn.
    pub fastest: bool,
    /// Whether the bar applies to this model (extra models only inform).
    pub in_bar: bool,
}

impl OutageModel {
    fn new(name: &str, description: &str, scenario: Scenario) -> Self {
        let mut scenario = scenario;
        scenario.name = name.to_owned();
        scenario.description = description.to_owned();
        OutageModel {
            name: name.to_owned(),
            description: description.to_owned(),
            scenario,
            shared_process: false,
            window_ms: None,
            max_requests_per_agent: None,
            max_requests_per_turn: None,
            min_success: None,
            min_success_of_unbudgeted: None,
            recovery_of_unbudgeted: None,
            fallback: false,
            fastest: false,
            in_bar: true,
        }
    }

    /// The windows `[from_ms, until_ms)` of virtual time in which the model's outages
    /// strike (the scenario's random outages; a model of scripted faults, such as the
    /// blip, has none): what the charts shade.
    ///
    /// ```
    /// use rebound_study::compare::OutageModel;
    ///
    /// let models = OutageModel::standard();
    /// let brownout = models.iter().find(|m| m.name == "brownout").unwrap();
    /// assert_eq!(brownout.outage_windows_ms(), [(0, 120_000)]);
    /// assert!(models[0].outage_windows_ms().is_empty()); // the blip
    /// ```
    #[must_use]
    pub fn outage_windows_ms(&self) -> Vec<(u64, u64)> {
        self.scenario
            .random
            .as_ref()
            .map(|r| r.outages.iter().map(|o| (o.from_ms, o.until_ms)).collect())
            .unwrap_or_default()
    }

    /// The five outage models of the issue, then four where a failure hits all agents of
    /// one process and a shared budget binds: the blip, a three-second total outage, the
    /// brownout and the rate limit; then a rate limit whose server delay (90 s) is longer
    /// than some clients honour, once with nowhere else to go and once with a fallback
    /// target. All are in the bar; the limits each adds are on the model.
    #[must_use]
    pub fn standard() -> Vec<OutageModel> {
        let one_turn = |faults: Vec<Fault>, random: Option<RandomFaults>| {
            let mut scenario = Scenario::default();
            scenario.turns = vec![Turn {
                faults,
                answer: Answer::text("Done."),
                ..Turn::default()
            }];
            scenario.random = random;
            scenario
        };
        let window = |outage: Outage| {
            Some(RandomFaults {
                outages: vec![outage],
                ..RandomFaults::default()
            })
        };
        let brownout = window(Outage {
            rate: Some(0.5),
            ..Outage::total(0, 120_000, Fault::http(503))
        });
        let rate_limit = window(Outage::total(
            0,
            12_000,
            Fault::http_with(429, "retry-after", "5"),
        ));
        let long_retry_after = Outage::total(0, 60_000, Fault::http_with(429, "retry-after", "90"));
        vec![
            OutageModel::new(
                "blip",
                "each agent's first two attempts get 529 overloaded",
                one_turn(vec![Fault::http(529), Fault::http(529)], None),
            ),
            OutageModel {
                window_ms: Some((0, 12_000)),
                ..OutageModel::new(
                    "rate-limit",
                    "429 with `retry-after: 5` for every attempt in the first 12 s",
                    one_turn(vec![], rate_limit.clone()),
                )
            },
            OutageModel {
                window_ms: Some((0, 60_000)),
                ..OutageModel::new(
                    "stream-cuts",
                    "30 % of attempts in the first minute have their stream cut mid-message",
                    one_turn(
                        vec![],
                        window(Outage {
                            rate: Some(0.3),
                            ..Outage::total(
                                0,
                                60_000,
                                FaultKind::StreamCut { after_events: 25 }.into(),
                            )
                        }),
                    ),
                )
            },
            OutageModel {
                window_ms: Some((0, 120_000)),
                ..OutageModel::new(
                    "brownout",
                    "50 % of attempts in the first two minutes get 503",
                    one_turn(vec![], brownout.clone()),
                )
            },
            OutageModel {
                shared_process: true,
                window_ms: Some((0, 600_000)),
                max_requests_per_agent: Some(1.2),
                ..OutageModel::new(
                    "total-outage",
                    "every attempt in the first ten minutes gets 529; all agents in one process",
                    one_turn(vec![], window(Outage::total(0, 600_000, Fault::http(529)))),
                )
            },
            OutageModel {
                shared_process: true,
                min_success_of_unbudgeted: Some(0.99),
                recovery_of_unbudgeted: Some(RecoveryLimits::FAST),
                ..OutageModel::new(
                    "blip-shared",
                    "the blip, all agents in one process",
                    one_turn(vec![Fault::http(529), Fault::http(529)], None),
                )
            },
            OutageModel {
                shared_process: true,
                window_ms: Some((2_000, 5_000)),
                min_success_of_unbudgeted: Some(0.99),
                recovery_of_unbudgeted: Some(RecoveryLimits::FAST),
                ..OutageModel::new(
                    "3s-outage-shared",
                    "every attempt from 2 s to 5 s gets 529, all agents in one process",
                    one_turn(
                        vec![],
                        window(Outage::total(2_000, 5_000, Fault::http(529))),
                    ),
                )
            },
            OutageModel {
                shared_process: true,
                window_ms: Some((0, 120_000)),
                min_success_of_unbudgeted: Some(0.99),
                recovery_of_unbudgeted: Some(RecoveryLimits::FAST),
                ..OutageModel::new(
                    "brownout-shared",
                    "the brownout, all agents in one process",
                    one_turn(vec![], brownout),
                )
            },
            // Last, so that adding it left every other model's agent seeds as they were.
            OutageModel {
                shared_process: true,
                window_ms: Some((0, 12_000)),
                min_success: Some(1.0),
                max_requests_per_turn: Some(1.5),
                ..OutageModel::new(
                    "rate-limit-shared",
                    "the rate limit, all agents in one process",
                    one_turn(vec![], rate_limit),
                )
            },
            OutageModel {
                window_ms: Some((0, 60_000)),
                min_success: Some(1.0),
                ..OutageModel::new(
                    "long-retry-after",
                    "429 with `retry-after: 90` for every attempt in the first 60 s",
                    one_turn(vec![], window(long_retry_after.clone())),
                )
            },
            OutageModel {
                window_ms: Some((0, 60_000)),
                min_success: Some(1.0),
                fallback: true,
                fastest: true,
                ..OutageModel::new(
                    "long-retry-after-fallback",
                    "the long retry-after on the primary model; rebound has a healthy fallback \
                     model",
                    one_turn(
                        vec![],
                        window(Outage {
                            target: Some(0),
                            ..long_retry_after
                        }),
                    ),
                )
            },
        ]
    }
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ExperimentConfig {
    /// Seeds every agent's fault draws and jitter.
    pub seed: u64,
    /// Agents per model.
    pub agents: usize,
    /// Agents start evenly spread over `[0, stagger_ms)`: agent `i` at
    /// `i * stagger_ms / agents`.
    pub stagger_ms: u64,
    /// rebound's machine configuration (its `retry_budget` is cleared for
    /// [`Policy::ReboundWithoutBudget`]).
    pub machine: MachineConfig,
    /// The retry budget each rebound process holds (shared by all agents of a
    /// shared-process model).
    pub budget: Option<BudgetConfig>,
    /// Every simulated client's stream idle timeout, in ms: the other stacks', and
    /// rebound's (it replaces `machine.stream.idle_ms`), so every policy waits as long for
    /// a stalled stream.
    pub idle_timeout_ms: u64,
    /// The models to run.
    pub models: Vec<OutageModel>,
    /// The policies to run, in table order.
    pub policies: Vec<Policy>,
}

impl Default for ExperimentConfig {
    /// 1,000 agents per model starting over the first 10 s, every standard model and
    /// policy, rebound with [`MachineConfig::resilient`] and
    /// [`BudgetConfig::default`].
    fn default() -> Self {
        ExperimentConfig {
            seed: 1,
            agents: 1_000,
            stagger_ms: 10_000,
            machine: MachineConfig::resilient(),
            budget: Some(BudgetConfig::default()),
            idle_timeout_ms: 60_000,
            models: OutageModel::standard(),
            policies: Policy::all(),
        }
    }
}

impl ExperimentConfig {
    /// When agent `index` sends its request.
    #[must_use]
    pub fn start_ms(&self, index: usize) -> u64 {
        if self.agents == 0 {
            return 0;
        }
        (index as u64).saturating_mul(self.stagger_ms) / self.agents as u64
    }

    /// The seed of agent `index` in model `model` (the same under every policy).
    #[must_use]
    pub fn agent_seed(&self, model: usize, index: usize) -> u64 {
        splitmix(self.seed ^ splitmix(((model as u64) << 32) | index as u64))
    }
}

impl ExperimentConfig {
    /// Sets [`seed`](Self::seed), which seeds every agent's fault draws and jitter.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets [`agents`](Self::agents), the agents per model.
    #[must_use]
    pub fn with_agents(mut self, agents: usize) -> Self {
        self.agents = agents;
        self
    }

    /// Sets [`stagger_ms`](Self::stagger_ms), the span the agents' starts are spread over.
    #[must_use]
    pub fn with_stagger_ms(mut self, stagger_ms: u64) -> Self {
        self.stagger_ms = stagger_ms;
        self
    }

    /// Sets [`machine`](Self::machine), rebound's machine configuration.
    #[must_use]
    pub fn with_machine(mut self, machine: MachineConfig) -> Self {
        self.machine = machine;
        self
    }

    /// Sets [`budget`](Self::budget), the retry budget of each rebound process (`None`: none).
    #[must_use]
    pub fn with_budget(mut self, budget: Option<BudgetConfig>) -> Self {
        self.budget = budget;
        self
    }

    /// Sets [`idle_timeout_ms`](Self::idle_timeout_ms), the simulated client's stream idle timeout.
    #[must_use]
    pub fn with_idle_timeout_ms(mut self, idle_timeout_ms: u64) -> Self {
        self.idle_timeout_ms = idle_timeout_ms;
        self
    }

    /// Sets [`models`](Self::models), the models to run.
    #[must_use]
    pub fn with_models(mut self, models: Vec<OutageModel>) -> Self {
        self.models = models;
        self
    }

    /// Sets [`policies`](Self::policies), the policies to run, in table order.
    #[must_use]
    pub fn with_policies(mut self, policies: Vec<Policy>) -> Self {
        self.policies = policies;
        self
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What one agent's turn did, whoever drove it: when it started, when each attempt went
/// to the provider, when it completed. What [`run_policy`] shows of every agent (a
/// timeline of each agent's attempts); the [`Row`] and [`Timeline`] are summaries of these.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentTurn {
    /// When the agent started its turn (sent, or asked to send, its first attempt), in
    /// virtual ms: [`ExperimentConfig::start_ms`].
    pub start_ms: u64,
    /// When each attempt was sent to the provider, in virtual ms, in order (attempts a
    /// client rejected locally were not sent, and are not here).
    pub requests: Vec<u64>,
    /// When the turn completed (its answer arrived), if it did; `None` when the policy gave
    /// up.
    pub completed_at: Option<u64>,
}

/// Runs every model under every policy.
///
/// # Errors
///
/// A [`SimError`] when rebound's machine livelocks or stalls in the simulator (a bug).
pub fn run_experiment(config: &ExperimentConfig) -> Result<Report, SimError> {
    run_observed(config, |_, _, _| {})
}

/// [`run_experiment`], showing every (model, policy)'s turns to `observe` as they are made.
fn run_observed(
    config: &ExperimentConfig,
    mut observe: impl FnMut(&OutageModel, Policy, &[AgentTurn]),
) -> Result<Report, SimError> {
    let mut rows = Vec::new();
    for (m, model) in config.models.iter().enumerate() {
        for &policy in &config.policies {
            let turns = run_turns(config, m, model, policy)?;
            observe(model, policy, &turns);
            rows.push(Row::summarize(model, policy, &turns_view(&turns)));
        }
    }
    Ok(Report::new(config, rows))
}

/// Every agent's turn of model `m` (`model`, the config's `m`th) under `policy`.
fn run_turns(
    config: &ExperimentConfig,
    m: usize,
    model: &OutageModel,
    policy: Policy,
) -> Result<Vec<AgentTurn>, SimError> {
    Ok(match policy {
        Policy::Rebound => run_rebound(config, m, model, true)?,
        Policy::ReboundWithoutBudget => run_rebound(config, m, model, false)?,
        Policy::Peer(peer) => run_peer(config, m, model, peer),
    })
}

fn turns_view(turns: &[AgentTurn]) -> Vec<report::TurnView<'_>> {
    turns
        .iter()
        .map(|t| report::TurnView {
            start_ms: t.start_ms,
            requests: &t.requests,
            completed_at: t.completed_at,
        })
        .collect()
}

fn run_peer(
    config: &ExperimentConfig,
    m: usize,
    model: &OutageModel,
    peer: Peer,
) -> Vec<AgentTurn> {
    let members: Vec<fleet::Member> = (0..config.agents)
        .map(|i| fleet::Member {
            seed: config.agent_seed(m, i),
            start_ms: config.start_ms(i),
        })
        .collect();
    let records = fleet::run_peer_fleet(
        peer,
        &model.scenario,
        &members,
        model.shared_process,
        config.idle_timeout_ms,
    );
    members
        .iter()
        .zip(records)
        .map(|(member, record)| AgentTurn {
            start_ms: member.start_ms,
            requests: record.requests,
            completed_at: record.completed_at,
        })
        .collect()
}

fn run_rebound(
    config: &ExperimentConfig,
    m: usize,
    model: &OutageModel,
    budgeted: bool,
) -> Result<Vec<AgentTurn>, SimError> {
    let mut machine = config.machine.clone();
    machine.stream = StreamDeadlines::new(config.idle_timeout_ms, machine.stream.progress_ms);
    if model.fallback {
        let provider = model.scenario.provider;
        machine.targets = vec![
            TargetSpec::new(provider, "primary-model"),
            TargetSpec::new(provider, "fallback-model"),
        ];
    }
    let budget = if budgeted {
        if machine.retry_budget.is_none() && config.budget.is_some() {
            machine.retry_budget = Some(BudgetUse::default());
        }
        config.budget.clone()
    } else {
        machine.retry_budget = None;
        None
    };
    let mut sim = SimConfig::default()
        .with_machine(machine)
        .with_max_steps(10_000);
    sim.budget = budget;
    let agents: Vec<FleetAgent<'_>> = (0..config.agents)
        .map(|i| FleetAgent {
            scenario: &model.scenario,
            seed: config.agent_seed(m, i),
            start_ms: config.start_ms(i),
        })
        .collect();
    let outcomes: Vec<SimOutcome> = if model.shared_process {
        simulate_fleet(&agents, &sim)?
    } else {
        let mut all = Vec::with_capacity(agents.len());
        for agent in &agents {
            all.extend(simulate_fleet(std::slice::from_ref(agent), &sim)?);
        }
        all
    };
    Ok(agents
        .iter()
        .zip(outcomes)
        .map(|(agent, outcome)| AgentTurn {
            start_ms: agent.start_ms,
            requests: outcome
                .commands()
                .filter(|(_, c)| matches!(c, Command::SendRequest { .. }))
                .map(|(t, _)| t.0)
                .collect(),
            completed_at: outcome.succeeded().then_some(outcome.elapsed.0),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_is_found_by_its_label_and_prints_it_as_the_table_does() {
        let all = Policy::all();
        for &policy in &all {
            assert_eq!(Policy::from_label(policy.label()), Some(policy));
            assert_eq!(policy.to_string().trim_matches('*'), policy.label());
        }
        let mut labels: Vec<&str> = all.iter().map(|p| p.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), all.len(), "labels are unique");
        assert_eq!(Policy::Rebound.to_string(), "**rebound**");
        assert_eq!(Policy::from_label("**rebound**"), None);
        assert_eq!(Policy::from_label("nobody"), None);
    }

    #[test]
    fn budgeted_peers_give_the_same_rows_for_a_seed_and_other_rows_for_another() {
        let config = |seed: u64| ExperimentConfig {
            seed,
            agents: 200,
            policies: Peer::ALL
                .into_iter()
                .filter(|p| p.is_budgeted())
                .map(Policy::Peer)
                .collect(),
            ..ExperimentConfig::default()
        };
        let run = |seed| run_experiment(&config(seed)).expect("peers never fail");
        let first = run(1);
        assert_eq!(first.rows, run(1).rows);
        assert_eq!(first.rows.len(), 7 * OutageModel::standard().len());
        assert_ne!(first.rows, run(2).rows);
    }
}
