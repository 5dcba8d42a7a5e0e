//! A fleet of processes sharing one retry budget in a real `redis-server`, against the same
//! fleet simulated on the virtual Redis (`rebound_sim::redis_store`): both run core's
//! `BudgetClient`, one over real connections and the fake provider server on loopback, the
//! other in virtual time. They must agree within noise on how many turns complete and how
//! many requests the fleet sends; a difference beyond noise is a bug on one side.
//!
//! Small, so it runs in seconds: three processes (three `RedisBudget`s, each with its own
//! owner id, connection, subscription and local budget — what Redis sees of three
//! processes) of ten agents, playing two outages of the outage experiment with time scaled
//! down (windows, latencies, backoff, the budget's wait and refill): the 3 s outage, where
//! retries wait in Redis's queue and are woken, and the total outage, where the one budget
//! is what keeps the fleet's requests down (a budget per process would send far more). The
//! long comparison, with child processes, every shared outage and the simulated side given
//! the real calls' timing, is the `fleet` example.
//!
//! Starts its own `redis-server` (see `effects/tests/redis_support/server.rs`): skipped,
//! saying so, where none is installed, unless `REBOUND_REQUIRE_REDIS` is set.

#[path = "../../effects/tests/redis_support/server.rs"]
mod server;

use rebound_core::{Command, Millis, ProviderKind};
use rebound_effects::budget::{BudgetEvent, RedisBudget, RedisOptions};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::{RunInput, Runner};
use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome, ScenarioClock, ScriptScope};
use rebound_sim::redis_store::{ProcessId, RedisStore, RedisTiming};
use rebound_sim::{simulate_fleet_in_redis, FleetAgent, SimConfig};
use rebound_study::compare::{ExperimentConfig, OutageModel};
use rebound_tests::scaled;
use server::RedisServer;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PROCESSES: usize = 3;
const PER_PROCESS: usize = 10;
const SEED: u64 = 1;

/// What a fleet did: how many turns completed, and how many requests it sent.
#[derive(Debug)]
struct Fleet {
    completed: usize,
    requests: usize,
}

impl Fleet {
    fn agents(&self) -> f64 {
        (PROCESSES * PER_PROCESS) as f64
    }

    fn success(&self) -> f64 {
        self.completed as f64 / self.agents()
    }

    fn requests_per_agent(&self) -> f64 {
        self.requests as f64 / self.agents()
    }
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The fleet in virtual time, on the virtual Redis, each process checking Redis at its
/// start as the real ones do.
fn simulated(experiment: &ExperimentConfig, m: usize, model: &OutageModel, scale: f64) -> Fleet {
    let scenario = scaled::scenario(&model.scenario, scale);
    let (machine, budget) = scaled::config(scale);
    let config = SimConfig::default()
        .with_machine(machine)
        .with_budget(budget.clone());
    let processes: Vec<Vec<FleetAgent<'_>>> = (0..PROCESSES)
        .map(|p| {
            (p * PER_PROCESS..(p + 1) * PER_PROCESS)
                .map(|i| FleetAgent {
                    scenario: &scenario,
                    seed: experiment.agent_seed(m, i),
                    start_ms: scaled::ms(experiment.start_ms(i), scale),
                })
                .collect()
        })
        .collect();
    let mut store = RedisStore::new(budget, RedisTiming::default()).with_seed(SEED);
    for p in 0..PROCESSES {
        store.check(Millis::ZERO, ProcessId(p));
    }
    let outcomes = simulate_fleet_in_redis(&processes, &config, &mut store)
        .unwrap_or_else(|e| panic!("the simulator failed (a bug): {e}"));
    let outcomes: Vec<_> = outcomes.into_iter().flatten().collect();
    Fleet {
        completed: outcomes.iter().filter(|o| o.succeeded()).count(),
        requests: outcomes
            .iter()
            .flat_map(|o| o.commands())
            .filter(|(_, c)| matches!(c, Command::SendRequest { .. }))
            .count(),
    }
}

/// The fleet for real: runners over loopback HTTP against the fake provider server, each
/// process's agents sharing its `RedisBudget`. Also returns how often a budget fell back.
async fn real(
    redis: &RedisServer,
    experiment: &ExperimentConfig,
    m: usize,
    model: &OutageModel,
    scale: f64,
) -> (Fleet, u64) {
    // One script and one clock from the server's start for the whole fleet, as before
    // conversations were told apart: the agents all say the same thing.
    let mut server_config = FakeServerConfig::new(scaled::scenario(&model.scenario, scale), SEED)
        .with_script(ScriptScope::Shared)
        .with_clock(ScenarioClock::ServerStart);
    server_config.play_latency = true;
    let server = FakeServer::start(server_config)
        .await
        .expect("the fake provider server starts");
    let t0 = epoch_ms();
    let url = server.base_url();
    let (machine, budget_config) = scaled::config(scale);
    let fell_back = Arc::new(AtomicU64::new(0));
    let name: rebound_effects::budget::RedisUrl = redis
        .budget_url(&format!("fleet-{t0}"))
        .parse()
        .expect("a budget URL");
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..PROCESSES {
        let counter = Arc::clone(&fell_back);
        let options = RedisOptions::default().with_on_event(Arc::new(move |e: &BudgetEvent| {
            if matches!(e, BudgetEvent::FellBack { .. }) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
        let budget = RedisBudget::new(&name, budget_config.clone(), options).expect("a budget");
        // At start, as `rebound run` and the example's children do.
        if let Err(e) = budget.check().await {
            assert!(!e.is_permanent(), "{e}");
        }
        for i in p * PER_PROCESS..(p + 1) * PER_PROCESS {
            let start_at = t0 + scaled::ms(experiment.start_ms(i), scale);
            let seed = experiment.agent_seed(m, i);
            let (url, machine, budget) = (url.clone(), machine.clone(), budget.clone());
            tasks.spawn_local(async move {
                tokio::time::sleep(Duration::from_millis(start_at.saturating_sub(epoch_ms())))
                    .await;
                let mut config = HttpProviderConfig::new(
                    ProviderKind::Anthropic,
                    format!("fleet-agent-{i}"),
                    ApiKey::new("fleet-test-key"),
                );
                config.base_url = url;
                let provider = HttpProvider::new(config).expect("a provider");
                let mut runner = Runner::new(machine, vec![Box::new(provider)])
                    .seed(seed)
                    .budget(budget);
                runner.run(RunInput::text("Say hello.")).await.is_ok()
            });
        }
    }
    let mut completed = 0;
    while let Some(done) = tasks.join_next().await {
        completed += usize::from(done.expect("an agent's task ends"));
    }
    let requests = server
        .requests()
        .iter()
        .filter(|r| !matches!(r.outcome, Outcome::Rejected { .. }))
        .count();
    server.shutdown().await;
    let fleet = Fleet {
        completed,
        requests,
    };
    (fleet, fell_back.load(Ordering::Relaxed))
}

/// Plays `name` at `scale` on both sides; fails when they differ beyond noise.
fn compare(test: &str, name: &str, scale: f64) {
    let Some(redis) = RedisServer::start(test) else {
        return;
    };
    let models = OutageModel::standard();
    let (m, model) = models
        .iter()
        .enumerate()
        .find(|(_, m)| m.name == name)
        .expect("the model");
    let experiment = ExperimentConfig::default()
        .with_seed(SEED)
        .with_agents(PROCESSES * PER_PROCESS);
    let sim = simulated(&experiment, m, model, scale);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let started = std::time::Instant::now();
    // Runners are not `Send`: they run on a local set, the servers on the workers.
    let (real, fell_back) = runtime.block_on(tokio::task::LocalSet::new().run_until(real(
        &redis,
        &experiment,
        m,
        model,
        scale,
    )));
    let played = started.elapsed();
    // Noise. Success: three standard errors of the difference of two samples of this size,
    // and at least 3 points (as the example judges). Requests: the two sides play the same
    // agents (seeds, start times), so they are paired, and the example's three standard
    // errors of two independent samples would be loose enough here, with 30 agents, to let a
    // budget per process pass for one shared budget in the total outage (5.5 requests per
    // agent against 2.7): 15 % of the simulated figure, and at least 0.2, instead (measured:
    // within 9 %).
    let n = real.agents();
    let p = sim.success();
    let success_noise = (3.0 * (2.0 * p * (1.0 - p) / n).sqrt()).max(0.03);
    let requests_noise = (0.15 * sim.requests_per_agent()).max(0.2);
    let report = format!(
        "{name}, {PROCESSES} processes × {PER_PROCESS}, scale {scale}: real {} of {n} turns, \
         {:.2} requests per agent ({fell_back} fallbacks; played in {:.1} s); simulated {} \
         turns, {:.2} requests per agent",
        real.completed,
        real.requests_per_agent(),
        played.as_secs_f64(),
        sim.completed,
        sim.requests_per_agent(),
    );
    eprintln!("{report}");
    assert!(
        (real.success() - sim.success()).abs() <= success_noise,
        "success differs beyond noise ({success_noise:.3}): {report}"
    );
    assert!(
        (real.requests_per_agent() - sim.requests_per_agent()).abs() <= requests_noise,
        "requests per agent differ beyond noise ({requests_noise:.2}): {report}"
    );
}

#[test]
fn a_real_fleet_sharing_redis_agrees_with_the_simulated_one_in_a_three_second_outage() {
    compare("fleet 3s-outage-shared", "3s-outage-shared", 0.25);
}

#[test]
fn a_real_fleet_sharing_redis_agrees_with_the_simulated_one_in_a_total_outage() {
    compare("fleet total-outage", "total-outage", 0.05);
}
