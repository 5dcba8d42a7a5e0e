//! The virtual-clock driver: runs [`AgentMachine`](rebound_core::AgentMachine)s against
//! scripted providers and tools, each through core's [`Run`].
//!
//! A discrete-event loop in the style of quinn's test `Pair`: every command that expects an
//! answer schedules that answer at a virtual time (now + the scripted latency), and the loop
//! jumps to the earliest pending arrival. Ties are broken by scheduling order, so a run is a
//! pure function of (scenario, [`SimConfig`], seed). A step bound guards against livelock, and
//! "nothing pending but not finished" is a loud [`SimError::Stalled`].
//!
//! Many agents can share one simulated world — one clock, one [`RetryBudget`] — with
//! [`simulate_fleet`]; [`simulate`] is the one-agent case. A fleet of processes sharing one
//! budget in Redis runs with [`simulate_fleet_in_redis`], on a virtual Redis
//! ([`redis_store`](crate::redis_store)) with core's Redis client in each process.
//!
//! ```
//! use rebound_sim::{simulate, Scenario, SimConfig};
//!
//! let scenario = Scenario::builtin("blip").unwrap();
//! let outcome = simulate(&scenario, &SimConfig::default(), 42).unwrap();
//! assert!(outcome.succeeded());
//! assert_eq!(outcome.requests(), 5); // two 529s, then three answers
//! assert_eq!(outcome.retry_notifications().count(), 2);
//! ```

pub use crate::record::SimStep;
use crate::record::{Record, Steps};
use crate::redis_store::{ProcessId, RedisStore};
use crate::scenario::{
    final_answer, with_usage, Cancel, Fault, FaultKind, Planned, Scenario, ScriptCursor,
};
use crate::scripted::ScriptedTools;
use crate::trace::Trace;
use rebound_core::run::{Action, Ended, Run, RunParts};
use rebound_core::trace::{TraceHeader, TraceStep};
use rebound_core::{
    AssistantResponse, BudgetConfig, BudgetNote, Command, CompactionError, Conversation, Event,
    FallbackInfo, FinishReason, Handled, IgnoreReason, MachineConfig, Millis, PermitAsk,
    PermitDecision, PermitId, ProviderFailure, ProviderKind, ProviderRetryInfo, RetryBudget,
    RunError, RunTally, Ticket,
};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

/// How the simulated world is set up, beyond the scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SimConfig {
    /// The machine's configuration. Its `tools` are replaced by the scenario's.
    pub machine: MachineConfig,
    /// Events one agent may handle before the run counts as a livelock.
    pub max_steps: usize,
    /// A retry budget shared by every agent of the run. Machines ask it for permits only
    /// when `machine.retry_budget` is set; without a budget, permits are always granted.
    pub budget: Option<BudgetConfig>,
}

rebound_core::objects_only!(SimConfig, "an object of simulator settings");

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            machine: MachineConfig::default(),
            max_steps: 10_000,
            budget: None,
        }
    }
}

impl SimConfig {
    /// Sets [`machine`](Self::machine), the machine's configuration.
    #[must_use]
    pub fn with_machine(mut self, machine: MachineConfig) -> Self {
        self.machine = machine;
        self
    }

    /// Sets [`max_steps`](Self::max_steps), the events one agent may handle before a livelock.
    #[must_use]
    pub fn with_max_steps(mut self, max_steps: usize) -> Self {
        self.max_steps = max_steps;
        self
    }

    /// Sets [`budget`](Self::budget), a retry budget shared by every agent of the run.
    #[must_use]
    pub fn with_budget(mut self, budget: BudgetConfig) -> Self {
        self.budget = Some(budget);
        self
    }
}

/// Why a simulation could not run to its end. Each is a bug in the machine or the driver,
/// never a property of the scenario: a scenario's failures end the run with a
/// [`RunError`] in [`SimOutcome::result`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// An agent handled `max_steps` events without finishing.
    #[error(
        "livelock: agent {agent} (seed {seed}) handled {steps} events at t={now} without \
         finishing; raise SimConfig::max_steps if the scenario really is this long"
    )]
    StepLimit {
        /// Index of the agent.
        agent: usize,
        /// Its seed.
        seed: u64,
        /// Events handled.
        steps: usize,
        /// Virtual time reached.
        now: Millis,
    },
    /// Nothing was pending, but an agent had not finished: the machine is waiting for an
    /// answer to a command it never gave.
    #[error(
        "stalled: nothing pending at t={now} but agent {agent} (seed {seed}) has not \
         finished; its last commands were: {last_commands}"
    )]
    Stalled {
        /// Index of the agent.
        agent: usize,
        /// Its seed.
        seed: u64,
        /// Virtual time reached.
        now: Millis,
        /// The agent's last step's commands, as JSON.
        last_commands: String,
    },
}

/// Everything one simulated run produced.
#[derive(Debug, Clone)]
pub struct SimOutcome {
    /// The seed of the run (machine jitter and the scenario's random faults).
    pub seed: u64,
    /// How the run ended.
    pub result: Result<FinishReason, RunError>,
    /// The final conversation.
    pub conversation: Conversation,
    /// Every handled event with its commands, in order.
    pub steps: Vec<SimStep>,
    /// Requests sent, per target index.
    pub requests_per_target: Vec<u32>,
    /// Virtual time at the end of the run, on the world's clock.
    pub elapsed: Millis,
    /// When the run started, on the world's clock (a fleet agent's `start_ms`; else 0).
    pub started: Millis,
    /// The trace header describing the machine (seed, config, initial conversation).
    pub header: TraceHeader,
}

impl SimOutcome {
    /// Whether the run finished (rather than failed).
    #[must_use]
    pub fn succeeded(&self) -> bool {
        self.result.is_ok()
    }

    /// All commands with the time they were emitted.
    pub fn commands(&self) -> impl Iterator<Item = (Millis, &Command)> {
        self.steps
            .iter()
            .flat_map(|s| s.commands.iter().map(move |c| (s.at, c)))
    }

    /// How long the run took in virtual time, from its start to its end.
    #[must_use]
    pub fn duration_ms(&self) -> u64 {
        self.elapsed.since(self.started)
    }

    /// Provider requests sent, over all targets.
    #[must_use]
    pub fn requests(&self) -> u32 {
        self.requests_per_target.iter().sum()
    }

    /// What happened, counted as the tokio runner counts it (core's [`RunTally`]).
    #[must_use]
    pub fn tally(&self) -> RunTally {
        let mut tally = RunTally::default();
        for step in &self.steps {
            tally.event(step.at, &step.event);
            for command in &step.commands {
                tally.command(command);
            }
        }
        tally
    }

    /// The retry notifications with their times.
    pub fn retry_notifications(&self) -> impl Iterator<Item = (Millis, &ProviderRetryInfo)> {
        self.commands().filter_map(|(t, c)| match c {
            Command::NotifyRetry { info } => Some((t, info)),
            _ => None,
        })
    }

    /// The fallback notifications with their times.
    pub fn fallback_notifications(&self) -> impl Iterator<Item = (Millis, &FallbackInfo)> {
        self.commands().filter_map(|(t, c)| match c {
            Command::NotifyFallback { info } => Some((t, info)),
            _ => None,
        })
    }

    /// The run as a trace, ready to write or replay.
    #[must_use]
    pub fn trace(&self) -> Trace {
        Trace {
            header: self.header.clone(),
            steps: self
                .steps
                .iter()
                .map(|s| TraceStep::new(s.at, s.event.clone(), &s.commands))
                .collect(),
        }
    }
}

/// One agent of a fleet: a scenario, a seed, and when it starts.
#[derive(Debug, Clone, Copy)]
pub struct FleetAgent<'s> {
    /// What the agent's provider and tools do.
    pub scenario: &'s Scenario,
    /// Its machine's seed (and its scenario's random faults).
    pub seed: u64,
    /// When its user message arrives, in virtual ms.
    pub start_ms: u64,
}

/// Runs `scenario` for one agent with `seed`.
///
/// # Errors
///
/// A [`SimError`] when the machine livelocks or stalls (a bug, never a scenario's failure).
pub fn simulate(
    scenario: &Scenario,
    config: &SimConfig,
    seed: u64,
) -> Result<SimOutcome, SimError> {
    simulate_in::<Steps>(scenario, config, seed, &mut Cache::default()).map(SimOutcome::from)
}

/// [`simulate`], keeping what `R` keeps, and reusing what `cache` already holds (for many
/// runs of one scenario with one config) and adding to it.
pub(crate) fn simulate_in<'s, R: Record>(
    scenario: &'s Scenario,
    config: &SimConfig,
    seed: u64,
    cache: &mut Cache<'s>,
) -> Result<Finished<R>, SimError> {
    let agents = [FleetAgent {
        scenario,
        seed,
        start_ms: 0,
    }];
    let mut outcomes = match &config.budget {
        Some(budget) => run_world(
            &agents,
            config,
            Budget::InProcess(&mut RetryBudget::new(budget.clone())),
            cache,
        ),
        None => run_world(&agents, config, Budget::None, cache),
    }?;
    Ok(outcomes.remove(0))
}

/// Runs many agents in one world: one virtual clock and, when `config.budget` is set, one
/// shared [`RetryBudget`]. Outcomes are in the order of `agents`.
///
/// ```
/// use rebound_core::{BudgetUse, BudgetConfig};
/// use rebound_sim::{simulate_fleet, FleetAgent, Scenario, SimConfig};
///
/// let outage = Scenario::builtin("total-outage").unwrap();
/// let mut config = SimConfig::default();
/// config.machine.retry.max_attempts = 8;
/// config.machine.retry_budget = Some(BudgetUse::default());
/// config.budget = Some(BudgetConfig::default());
/// let agents: Vec<FleetAgent> = (0..50)
///     .map(|i| FleetAgent { scenario: &outage, seed: i, start_ms: i * 100 })
///     .collect();
/// let outcomes = simulate_fleet(&agents, &config).unwrap();
/// let requests: u32 = outcomes.iter().map(|o| o.requests()).sum();
/// // Without the budget, 50 agents would send 8 requests each.
/// assert!(requests < 50 * 8, "{requests}");
/// ```
///
/// # Errors
///
/// A [`SimError`] when a machine livelocks or stalls.
pub fn simulate_fleet(
    agents: &[FleetAgent<'_>],
    config: &SimConfig,
) -> Result<Vec<SimOutcome>, SimError> {
    match &config.budget {
        Some(budget) => simulate_fleet_with(agents, config, &mut RetryBudget::new(budget.clone())),
        None => run_world::<Steps>(agents, config, Budget::None, &mut Cache::default())
            .map(|runs| runs.into_iter().map(SimOutcome::from).collect()),
    }
}

/// [`simulate_fleet`] with a retry budget owned by the caller (`config.budget` is ignored),
/// for experiments that inspect the budget afterwards or carry it from one world to the next.
///
/// # Errors
///
/// A [`SimError`] when a machine livelocks or stalls.
pub fn simulate_fleet_with(
    agents: &[FleetAgent<'_>],
    config: &SimConfig,
    budget: &mut RetryBudget,
) -> Result<Vec<SimOutcome>, SimError> {
    run_world::<Steps>(
        agents,
        config,
        Budget::InProcess(budget),
        &mut Cache::default(),
    )
    .map(|runs| runs.into_iter().map(SimOutcome::from).collect())
}

/// Runs a fleet of processes sharing one retry budget in a virtual Redis,
/// [`RedisStore`] (each process deciding with core's Redis client, as the real ones do):
/// `processes[p]` are the agents of process [`ProcessId`]`(p)`, all in one
/// world (one clock). Machines ask `store` for permits only when `machine.retry_budget` is
/// set (`config.budget` is ignored: the store holds the budget). Outcomes come back per
/// process, in the order given; `store` keeps what the processes did with it.
///
/// ```
/// use rebound_core::{BudgetConfig, BudgetUse};
/// use rebound_sim::redis_store::{RedisStore, RedisTiming};
/// use rebound_sim::{simulate_fleet_in_redis, FleetAgent, Scenario, SimConfig};
///
/// let outage = Scenario::builtin("total-outage").unwrap();
/// let mut config = SimConfig::default();
/// config.machine.retry.max_attempts = 8;
/// config.machine.retry_budget = Some(BudgetUse::default());
/// let processes: Vec<Vec<FleetAgent>> = (0..5)
///     .map(|p| {
///         (0..10)
///             .map(|i| FleetAgent { scenario: &outage, seed: p * 10 + i, start_ms: i * 100 })
///             .collect()
///     })
///     .collect();
/// let mut store = RedisStore::new(BudgetConfig::default(), RedisTiming::default());
/// let outcomes = simulate_fleet_in_redis(&processes, &config, &mut store).unwrap();
/// let requests: u32 = outcomes.iter().flatten().map(|o| o.requests()).sum();
/// // One budget for the five processes: far fewer than 50 agents' 8 requests each.
/// assert!(requests < 50 * 8, "{requests}");
/// assert!(store.counts().calls > 0);
/// ```
///
/// # Errors
///
/// A [`SimError`] when a machine livelocks or stalls.
pub fn simulate_fleet_in_redis(
    processes: &[Vec<FleetAgent<'_>>],
    config: &SimConfig,
    store: &mut RedisStore,
) -> Result<Vec<Vec<SimOutcome>>, SimError> {
    let agents: Vec<FleetAgent<'_>> = processes.iter().flatten().copied().collect();
    let process_of: Vec<ProcessId> = processes
        .iter()
        .enumerate()
        .flat_map(|(p, agents)| std::iter::repeat_n(ProcessId(p), agents.len()))
        .collect();
    let budget = Budget::Redis { store, process_of };
    let mut outcomes = run_world::<Steps>(&agents, config, budget, &mut Cache::default())?
        .into_iter()
        .map(SimOutcome::from);
    Ok(processes
        .iter()
        .map(|agents| outcomes.by_ref().take(agents.len()).collect())
        .collect())
}

/// Plays `agents` in one world until every run ends, keeping of each what `R` keeps.
pub(crate) fn run_world<'s, R: Record>(
    agents: &[FleetAgent<'s>],
    config: &SimConfig,
    budget: Budget<'_>,
    cache: &mut Cache<'s>,
) -> Result<Vec<Finished<R>>, SimError> {
    for agent in agents {
        cache.prepare(agent.scenario, config);
    }
    let Cache {
        classified,
        prepared,
    } = cache;
    let mut world = World {
        queue: BinaryHeap::new(),
        seq: 0,
        budget,
        tickets: BTreeMap::new(),
        next_ticket: 0,
        tick_at: None,
        classified,
    };
    let mut states: Vec<Agent<'_, '_, R>> = agents
        .iter()
        .enumerate()
        .map(|(i, a)| Agent::new(a, prepared_for(prepared, a.scenario), i, &mut world))
        .collect();
    let mut live = states.len();
    let mut now = Millis::ZERO;
    while live > 0 {
        let Some(Pending { at, due, .. }) = world.queue.pop() else {
            let (agent, state) = states
                .iter()
                .enumerate()
                .find(|(_, s)| !s.run.is_ended())
                .unwrap_or_else(|| unreachable!("live counts agents that are not terminal"));
            let last_commands = state.last_step_json();
            return Err(SimError::Stalled {
                agent,
                seed: state.seed,
                now,
                last_commands,
            });
        };
        now = at;
        let (agent, event) = match due {
            Due::Agent { agent, event } => (agent, event),
            Due::BudgetTick => {
                world.budget_tick(at);
                continue;
            }
        };
        let state = &mut states[agent];
        if state.run.is_ended() {
            continue; // an answer that arrives after the run ended
        }
        if state.run.handled() >= config.max_steps {
            return Err(SimError::StepLimit {
                agent,
                seed: state.seed,
                steps: state.run.handled(),
                now,
            });
        }
        // Shown if the check below fails; release builds skip the check and this copy.
        let shown = cfg!(debug_assertions).then(|| event.clone());
        let handled = state.run.report(at, event);
        // Answers racing a cancel or the run's end are normal (`Stale`, `Terminal`); an
        // event the machine never asked for is a bug of this driver.
        debug_assert_ne!(
            handled,
            Handled::Ignored(IgnoreReason::Unexpected),
            "the simulator sent agent {agent} an event its machine did not ask for: {shown:?}"
        );
        while let Some(action) = state.run.poll() {
            if let Action::Command(command) = action {
                state.execute(at, &command, &mut world);
            }
        }
        if state.cancel == Some(Cancel::AtStep(state.run.handled())) {
            // Ahead of anything else due now: the cancel is the very next event.
            world.push_urgent(at, agent, Event::Cancel);
        }
        if state.run.is_ended() {
            state.elapsed = at;
            live -= 1;
            world.forget_agent(agent);
        }
    }
    Ok(states.into_iter().map(Agent::finish).collect())
}

struct Pending {
    at: Millis,
    /// 0 for events that must come before everything else due at the same time.
    order: u8,
    seq: u64,
    due: Due,
}

/// What comes due: an event for one agent, or the shared budget's next refill or deadline.
enum Due {
    Agent { agent: usize, event: Event },
    BudgetTick,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order, self.seq) == (other.at, other.order, other.seq)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest arrival must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order, other.seq).cmp(&(self.at, self.order, self.seq))
    }
}

/// Where a world's retry budget lives.
pub(crate) enum Budget<'b> {
    /// Nowhere: every permit is granted at once.
    None,
    /// In memory, shared by every agent of the world (one process).
    InProcess(&'b mut RetryBudget),
    /// In Redis, agent `i` in process `process_of[i]`.
    Redis {
        store: &'b mut RedisStore,
        process_of: Vec<ProcessId>,
    },
}

impl Budget<'_> {
    fn tick(&mut self, now: Millis) {
        match self {
            Budget::None => {}
            Budget::InProcess(budget) => budget.tick(now),
            Budget::Redis { store, .. } => store.tick(now),
        }
    }

    fn cancel(&mut self, ticket: Ticket) {
        match self {
            Budget::None => {}
            Budget::InProcess(budget) => {
                budget.cancel(ticket);
            }
            Budget::Redis { store, .. } => {
                store.cancel(ticket);
            }
        }
    }

    fn poll_decision(&mut self) -> Option<(Ticket, PermitDecision)> {
        match self {
            Budget::None => None,
            Budget::InProcess(budget) => budget.poll_decision(),
            Budget::Redis { store, .. } => store.poll_decision(),
        }
    }

    fn next_wakeup(&self) -> Option<Millis> {
        match self {
            Budget::None => None,
            Budget::InProcess(budget) => budget.next_wakeup(),
            Budget::Redis { store, .. } => store.next_wakeup(),
        }
    }
}

struct World<'b> {
    queue: BinaryHeap<Pending>,
    seq: u64,
    budget: Budget<'b>,
    /// Who holds each ticket waiting in the budget.
    tickets: BTreeMap<Ticket, (usize, PermitId)>,
    next_ticket: u64,
    /// The budget tick already in the queue, if any.
    tick_at: Option<Millis>,
    /// Faults already classified.
    classified: &'b mut Classified,
}

/// What a world reuses from one run to the next: classified failures and prepared
/// scenarios. Kept across the runs of [`run_many`](crate::run_many), whose runs share one
/// scenario and one [`SimConfig`].
#[derive(Default)]
pub(crate) struct Cache<'s> {
    classified: Classified,
    prepared: Vec<Prepared<'s>>,
}

impl<'s> Cache<'s> {
    /// Prepares `scenario` for runs with `config`, unless it already is.
    fn prepare(&mut self, scenario: &'s Scenario, config: &SimConfig) {
        if self
            .prepared
            .iter()
            .any(|p| std::ptr::eq(p.scenario, scenario))
        {
            return;
        }
        let mut machine = config.machine.clone();
        machine.tools = scenario.tool_specs();
        self.prepared.push(Prepared {
            scenario,
            machine: Arc::new(machine),
            initial: scenario.initial_conversation(),
            tools: ScriptedTools::new(scenario),
        });
    }
}

/// What every run of one scenario starts from, built once: the machine's config with the
/// scenario's tools (shared by the machines), the initial conversation (its messages are
/// shared between runs), and the scripted tool calls by id.
struct Prepared<'s> {
    scenario: &'s Scenario,
    machine: Arc<MachineConfig>,
    initial: Option<Conversation>,
    tools: ScriptedTools<'s>,
}

/// The preparation of `scenario`, which [`Cache::prepare`] made.
fn prepared_for<'p, 's>(prepared: &'p [Prepared<'s>], scenario: &Scenario) -> &'p Prepared<'s> {
    prepared
        .iter()
        .find(|p| std::ptr::eq(p.scenario, scenario))
        .unwrap_or_else(|| unreachable!("every agent's scenario is prepared before it starts"))
}

/// Failures already classified: [`Fault::failure`] renders a fault's bytes and classifies
/// them, the same every time for the same fault and provider, so each is done once a world.
/// Bounded by the faults a scenario names.
#[derive(Debug, Default)]
pub(crate) struct Classified(Vec<(ProviderKind, Fault, ProviderFailure, bool)>);

impl Classified {
    /// The failure `fault` is from `provider`, and whether its answer begins first
    /// ([`Fault::played`]).
    fn played(&mut self, fault: &Fault, provider: ProviderKind) -> (ProviderFailure, bool) {
        if let Some((_, _, failure, begins)) = self
            .0
            .iter()
            .find(|(p, f, _, _)| *p == provider && f == fault)
        {
            return (failure.clone(), *begins);
        }
        let (failure, begins) = fault.played(provider);
        self.0
            .push((provider, fault.clone(), failure.clone(), begins));
        (failure, begins)
    }

    fn failure(&mut self, fault: &Fault, provider: ProviderKind) -> ProviderFailure {
        self.played(fault, provider).0
    }
}

impl World<'_> {
    fn push(&mut self, at: Millis, agent: usize, event: Event) {
        self.enqueue(at, 1, Due::Agent { agent, event });
    }

    fn push_urgent(&mut self, at: Millis, agent: usize, event: Event) {
        self.enqueue(at, 0, Due::Agent { agent, event });
    }

    fn enqueue(&mut self, at: Millis, order: u8, due: Due) {
        self.seq += 1;
        self.queue.push(Pending {
            at,
            order,
            seq: self.seq,
            due,
        });
    }

    /// Forwards a machine's permit request to the budget (granted at once without one).
    fn ask(&mut self, now: Millis, agent: usize, permit: PermitId, ask: PermitAsk) {
        self.next_ticket += 1;
        let ticket = Ticket(self.next_ticket);
        let decision = match &mut self.budget {
            Budget::None => Some(PermitDecision::Granted),
            Budget::InProcess(budget) => budget.request(now, ticket, ask),
            Budget::Redis { store, process_of } => {
                store.request(now, process_of[agent], ticket, ask)
            }
        };
        if decision.is_none() {
            self.tickets.insert(ticket, (agent, permit));
        }
        if let Some(decision) = decision {
            self.push(now, agent, Event::PermitAnswered { permit, decision });
        }
        self.settle(now);
    }

    fn note(&mut self, now: Millis, agent: usize, note: BudgetNote) {
        match &mut self.budget {
            Budget::None => {}
            Budget::InProcess(budget) => budget.record(now, note),
            Budget::Redis { store, process_of } => store.record(now, process_of[agent], note),
        }
        self.settle(now);
    }

    fn budget_tick(&mut self, at: Millis) {
        if self.tick_at != Some(at) {
            return; // superseded by an earlier tick
        }
        self.tick_at = None;
        self.budget.tick(at);
        self.settle(at);
    }

    /// An agent that ended waits for nothing: its tickets leave the queue.
    fn forget_agent(&mut self, agent: usize) {
        let budget = &mut self.budget;
        self.tickets.retain(|ticket, (a, _)| {
            let mine = *a == agent;
            if mine {
                budget.cancel(*ticket);
            }
            !mine
        });
    }

    /// Delivers the budget's decisions for waiting permits, and schedules its next tick.
    fn settle(&mut self, now: Millis) {
        let budget = &mut self.budget;
        let mut answers = Vec::new();
        while let Some((ticket, decision)) = budget.poll_decision() {
            if let Some((agent, permit)) = self.tickets.remove(&ticket) {
                answers.push((agent, Event::PermitAnswered { permit, decision }));
            }
        }
        let wakeup = budget.next_wakeup();
        for (agent, event) in answers {
            self.push(now, agent, event);
        }
        if let Some(at) = wakeup {
            // Never at `now`: what is due now was settled just above.
            let at = at.max(now.plus(1));
            if self.tick_at.is_none_or(|t| at < t) {
                self.tick_at = Some(at);
                self.enqueue(at, 1, Due::BudgetTick);
            }
        }
    }
}

/// What the scripted provider answers a request: after how long, what, and when its first
/// piece arrives (if it streams any).
struct Reply {
    delay: u64,
    result: Result<AssistantResponse, ProviderFailure>,
    begins: Option<u64>,
}

struct Agent<'p, 's, R> {
    index: usize,
    seed: u64,
    scenario: &'s Scenario,
    run: Run,
    cursor: ScriptCursor,
    cancel: Option<Cancel>,
    /// The scenario's tool calls by id.
    tools: &'p ScriptedTools<'s>,
    record: std::marker::PhantomData<R>,
    requests: Vec<u32>,
    started: Millis,
    elapsed: Millis,
}

impl<'p, 's, R: Record> Agent<'p, 's, R> {
    fn new(
        spec: &FleetAgent<'s>,
        prepared: &'p Prepared<'s>,
        index: usize,
        world: &mut World<'_>,
    ) -> Self {
        let scenario = spec.scenario;
        let config = Arc::clone(&prepared.machine);
        let requests = vec![0; config.target_count()];
        let mut run = match &prepared.initial {
            Some(c) => Run::with_conversation(config, spec.seed, c.clone()),
            None => Run::new(config, spec.seed),
        }
        .recording(R::STEPS);
        if R::STEPS {
            run = run.meta("driver", "rebound-sim");
            if !scenario.name.is_empty() {
                run = run.meta("scenario", scenario.name.clone());
            }
        }
        let start = Millis(spec.start_ms);
        let first = if scenario.resume {
            Event::Resume
        } else {
            Event::UserMessage {
                content: vec![rebound_core::ContentBlock::text(
                    scenario.user_message.clone(),
                )],
            }
        };
        world.push(start, index, first);
        match scenario.cancel {
            Some(Cancel::AtMs(t)) => world.push(start.plus(t), index, Event::Cancel),
            Some(Cancel::AtStep(0)) => world.push_urgent(start, index, Event::Cancel),
            _ => {}
        }
        Agent {
            index,
            seed: spec.seed,
            scenario,
            run,
            cursor: ScriptCursor::new(spec.seed),
            cancel: scenario.cancel,
            tools: &prepared.tools,
            record: std::marker::PhantomData,
            requests,
            started: start,
            elapsed: Millis::ZERO,
        }
    }

    fn execute(&mut self, now: Millis, command: &Command, world: &mut World<'_>) {
        match command {
            Command::SendRequest {
                request,
                target,
                conversation,
                deadlines,
                ..
            } => {
                if *target >= self.requests.len() {
                    self.requests.resize(target + 1, 0);
                }
                self.requests[*target] += 1;
                let Reply {
                    delay,
                    result,
                    begins,
                } = self.reply(
                    now,
                    *target,
                    conversation,
                    deadlines.silence_limit_ms(),
                    world.classified,
                );
                if let Some(after) = begins {
                    // The answer's first piece, as the runner tells the machine of it.
                    let begun = Event::ProviderResponding { request: *request };
                    world.push(now.plus(after.min(delay)), self.index, begun);
                }
                let event = match result {
                    Ok(response) => Event::ProviderSucceeded {
                        request: *request,
                        response,
                    },
                    Err(failure) => Event::ProviderFailed {
                        request: *request,
                        failure,
                    },
                };
                world.push(now.plus(delay), self.index, event);
            }
            Command::Sleep { timer, delay_ms } => {
                world.push(
                    now.plus(*delay_ms),
                    self.index,
                    Event::TimerFired { timer: *timer },
                );
            }
            Command::RunTools { batch, calls } => {
                // Concurrently: the batch takes as long as its slowest call.
                let (delay, outcome) = self.tools.run(calls, self.scenario.timing.tool_ms);
                world.push(
                    now.plus(delay),
                    self.index,
                    Event::ToolsFinished {
                        batch: *batch,
                        outcome,
                    },
                );
            }
            Command::Compact {
                compaction,
                conversation,
            } => {
                let result = match &self.scenario.compaction_error {
                    Some(message) => Err(CompactionError::compactor(message.clone())),
                    None => self.run.compact_default(conversation),
                };
                world.push(
                    now.plus(self.scenario.timing.compaction_ms),
                    self.index,
                    Event::CompactionFinished {
                        compaction: *compaction,
                        result,
                    },
                );
            }
            Command::AcquirePermit { permit, ask } => {
                world.ask(now, self.index, *permit, *ask);
            }
            Command::NoteBudget { note } => world.note(now, self.index, *note),
            Command::AppendMessage { .. }
            | Command::ReplaceConversation { .. }
            | Command::NotifyRetry { .. }
            | Command::NotifyFallback { .. }
            | Command::Finish { .. }
            | Command::Fail { .. } => {} // recorded in the step
        }
    }

    /// What the scripted provider answers to a request sent at `now`, and when.
    fn reply(
        &mut self,
        now: Millis,
        target: usize,
        conversation: &Conversation,
        idle_timeout_ms: u64,
        classified: &mut Classified,
    ) -> Reply {
        let scenario = self.scenario;
        let timing = &scenario.timing;
        let mut stalled = 0u64;
        loop {
            match self
                .cursor
                .next_on(scenario, now.plus(stalled), conversation, target)
            {
                Planned::Fault(fault) => {
                    if let Some(ms) = fault.silence_ms() {
                        if ms < idle_timeout_ms {
                            // The stream resumes: the stall only delays what comes next.
                            stalled = stalled.saturating_add(ms);
                            continue;
                        }
                    }
                    let delay = fault.delay_ms(timing, idle_timeout_ms);
                    let (failure, begins) = classified.played(fault, scenario.provider);
                    return Reply {
                        delay: stalled.saturating_add(delay),
                        result: Err(failure),
                        begins: begins.then(|| stalled.saturating_add(timing.first_event_ms)),
                    };
                }
                Planned::Overflow { bytes, limit } => {
                    let fault = Fault::from(FaultKind::ContextOverflow);
                    let mut failure = classified.failure(&fault, scenario.provider);
                    failure.message =
                        format!("{} ({bytes} bytes > limit {limit})", failure.message).into();
                    return Reply {
                        delay: stalled.saturating_add(fault.delay_ms(timing, idle_timeout_ms)),
                        result: Err(failure),
                        begins: None,
                    };
                }
                Planned::Summary(script) => {
                    return Reply {
                        delay: stalled.saturating_add(timing.answer_ms),
                        result: Ok(script.response(conversation)),
                        begins: Some(timing.first_event_ms),
                    };
                }
                Planned::Answer {
                    turn,
                    alternate,
                    answer,
                } => {
                    let response = with_usage(
                        match answer {
                            Some(a) => a.response(turn, alternate),
                            None => final_answer().response(turn, false),
                        },
                        conversation,
                    );
                    let latency = answer
                        .and_then(|a| a.latency_ms)
                        .unwrap_or(timing.answer_ms);
                    return Reply {
                        delay: stalled.saturating_add(latency),
                        result: Ok(response),
                        begins: Some(timing.first_event_ms),
                    };
                }
            }
        }
    }

    fn finish(self) -> Finished<R> {
        let header = R::STEPS.then(|| self.run.header());
        // The machine's handle to the conversation is usually the last one (every request
        // snapshot was taken before the final append): taken, not copied.
        let RunParts {
            conversation,
            tally,
            steps,
            end,
            ..
        } = self.run.into_parts();
        let result = match end {
            Some(Ok(Ended { reason, .. })) => Ok(reason),
            Some(Err(error)) => Err(error),
            None => unreachable!("outcomes are taken only after every run ended"),
        };
        Finished {
            seed: self.seed,
            result,
            conversation,
            record: R::finish(header, steps, tally),
            requests_per_target: self.requests,
            elapsed: self.elapsed,
            started: self.started,
        }
    }

    /// The last recorded step as a trace line (empty when steps are not recorded).
    fn last_step_json(&self) -> String {
        self.run
            .steps()
            .last()
            .map(|s| serde_json::to_string(&s.to_trace()).unwrap_or_default())
            .unwrap_or_default()
    }
}

/// One agent's ended run, with what its [`Record`] kept.
pub(crate) struct Finished<R> {
    pub(crate) seed: u64,
    pub(crate) result: Result<FinishReason, RunError>,
    pub(crate) conversation: Conversation,
    pub(crate) record: R,
    pub(crate) requests_per_target: Vec<u32>,
    pub(crate) elapsed: Millis,
    pub(crate) started: Millis,
}

impl From<Finished<Steps>> for SimOutcome {
    fn from(run: Finished<Steps>) -> Self {
        SimOutcome {
            seed: run.seed,
            result: run.result,
            conversation: run.conversation,
            steps: run.record.steps,
            requests_per_target: run.requests_per_target,
            elapsed: run.elapsed,
            started: run.started,
            header: run.record.header,
        }
    }
}
