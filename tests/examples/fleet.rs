//! The fleet on real I/O: real runners over loopback HTTP against the fake provider server
//! (the server behind `rebound serve`), playing the shared outages of the outage experiment,
//! beside what the simulator predicts for the same scenario, configuration and agents.
//!
//! ```text
//! cargo run --release -p rebound-tests --example fleet [-- --seed N --agents 200 --processes 20 --scale 0.2 --redis redis://127.0.0.1:6379]
//! ```
//!
//! Two fleets per model: `200 runners, 1 process` (one `SharedBudget` for all) and
//! `20 processes × 10` (child processes of this binary, each with its own budget); with
//! `--redis`, a third: the same 20 processes sharing one `RedisBudget` in that redis-server
//! (a fleet on many machines), against the same processes simulated on a virtual Redis
//! (`rebound_sim::redis_store`: each process runs core's `BudgetClient`, the state machine
//! `RedisBudget` drives, over a network where every call is a round trip, with
//! `RedisOptions`' defaults). The real processes time their budget's calls (see [`TimedBudget`]); the
//! simulated ones run with what that play measured: the median call as the round trip, the
//! calls that missed the 50 ms call timeout as stalls of that chance, and the calls on a new
//! connection that missed (checks at start, repeats after a timeout) as the chance that
//! opening a connection misses its own bound (`rebound_sim::redis_store::CallStalls`); each simulated process checks Redis at its
//! start, as the real ones do. So the simulated processes fall back, repeat and withdraw
//! orphaned asks about as often as the real store had to on this machine, loaded or not.
//! `tests/tests/fleet.rs` is a small version of this comparison that `cargo test` runs. Time is
//! scaled by `--scale` on both sides — the scenario's windows, latencies and `retry-after`,
//! the retry policy's delays, the budget's wait and refill — so a model that takes a minute
//! of virtual time plays in twelve seconds. The server plays the scenario's latencies
//! (`FakeServerConfig::play_latency`). Figures are reported in unscaled (virtual) time, so
//! they compare with `docs/outages.md`. Exit status 1 when real and simulated runs differ
//! beyond noise (see [`differs`]): one of the two has a bug.

use rebound_core::{BudgetConfig, BudgetNote, PermitAsk, PermitDecision, PermitKind, ProviderKind};
use rebound_effects::budget::{
    BudgetEvent, BudgetStore, RedisBudget, RedisOptions, RedisUrl, SharedBudget,
};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::{RunInput, Runner};
use rebound_sim::fake::{FakeServer, FakeServerConfig, Outcome, ScenarioClock, ScriptScope};
use rebound_sim::redis_store::{CallStalls, ProcessId, RedisStore, RedisTiming};
use rebound_sim::{simulate_fleet, simulate_fleet_in_redis, FleetAgent, SimConfig};
use rebound_study::compare::{ExperimentConfig, OutageModel};
use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The shared outages played (models of the outage experiment).
const MODELS: [&str; 4] = [
    "3s-outage-shared",
    "brownout-shared",
    "rate-limit-shared",
    "total-outage",
];

#[derive(Debug, Clone)]
struct Options {
    seed: u64,
    agents: usize,
    processes: usize,
    scale: f64,
    /// The models to play (default: all of [`MODELS`]).
    models: Vec<String>,
    /// A redis-server for the fleet of processes sharing one budget (`redis://HOST:PORT`).
    redis: Option<String>,
}

/// How a fleet's agents share budgets.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sharing {
    /// All agents in one process, one budget in memory.
    OneProcess,
    /// Child processes, a budget each.
    PerProcess(usize),
    /// Child processes sharing one budget in Redis.
    Redis(usize),
}

impl Sharing {
    fn processes(self) -> usize {
        match self {
            Sharing::OneProcess => 1,
            Sharing::PerProcess(n) | Sharing::Redis(n) => n,
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let mut options = Options {
        seed: 1,
        agents: 200,
        processes: 20,
        scale: 0.2,
        models: MODELS.iter().map(|m| (*m).to_owned()).collect(),
        redis: None,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().map(String::as_str).unwrap_or_default();
        let ok = match flag.as_str() {
            "--seed" => value.parse().map(|v| options.seed = v).is_ok(),
            "--agents" => value.parse().map(|v| options.agents = v).is_ok(),
            "--processes" => value.parse().map(|v| options.processes = v).is_ok(),
            "--redis" => {
                options.redis = Some(value.trim_end_matches('/').to_owned());
                value.starts_with("redis://")
            }
            "--models" => {
                options.models = value.split(',').map(str::to_owned).collect();
                options.models.iter().all(|m| MODELS.contains(&m.as_str()))
            }
            "--scale" => value
                .parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0 && *s <= 1.0)
                .map(|v| options.scale = v)
                .is_some(),
            _ => false,
        };
        if !ok {
            eprintln!(
                "usage: fleet [--seed N] [--agents N] [--processes N] [--scale 0<S<=1] \
                 [--redis redis://HOST:PORT] [--models {}]",
                MODELS.join(",")
            );
            return ExitCode::from(2);
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("no tokio runtime: {e}");
            return ExitCode::from(3);
        }
    };
    // Runners are not `Send` (their receivers need not be): they run on a local set, the
    // fake server on the runtime's workers.
    runtime.block_on(tokio::task::LocalSet::new().run_until(parent(options)))
}

/// What one fleet did, on one side (real or simulated).
#[derive(Debug, Clone, Copy)]
struct Figures {
    agents: usize,
    completed: usize,
    requests: usize,
    peak_per_sec: usize,
    /// The standard deviation of requests per agent, where it is known (the simulated side).
    per_agent_sd: Option<f64>,
    /// How often a process of a Redis fleet fell back to its local budget, and came back.
    redis_events: Option<RedisEvents>,
}

/// A Redis fleet's `BudgetEvent`s, summed over its processes (simulated: the store's
/// counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RedisEvents {
    fell_back: u64,
    restored: u64,
    /// Real: of the fallbacks, those at a process's start (`RedisBudget::check`, which
    /// connects); simulated: none (a simulated process is connected from the start).
    at_start: u64,
    /// Simulated only: calls whose reply missed the call timeout, charged asks given up
    /// to Redis (orphans), and tokens those paid back.
    timed_out: u64,
    orphaned: u64,
    repaid: u64,
}

/// The calls a Redis fleet's processes timed (see [`TimedBudget`]), over all of them,
/// and the calls on a new connection whose outcome they saw: each process's check at its
/// start (its first call), and the repeat of an ask whose first call missed.
#[derive(Debug, Clone, Default)]
struct CallTimes {
    /// Calls answered within the call timeout, in µs.
    in_time_us: Vec<u64>,
    /// Calls that took longer than the call timeout.
    missed: u64,
    /// Checks at start, and those that failed.
    checks: u64,
    checks_missed: u64,
    /// Repeats of a timed ask whose first call missed, and those that missed too (the
    /// process fell back).
    repeats: u64,
    repeats_missed: u64,
}

impl CallTimes {
    fn calls(&self) -> u64 {
        self.in_time_us.len() as u64 + self.missed
    }

    /// The call taking `q` (0 to 1) of the calls answered in time, in ms.
    fn quantile_ms(&self, q: f64) -> f64 {
        let mut sorted = self.in_time_us.clone();
        sorted.sort_unstable();
        let Some(last) = sorted.len().checked_sub(1) else {
            return 0.0;
        };
        let at = ((last as f64) * q).round() as usize;
        sorted[at.min(last)] as f64 / 1e3
    }

    /// Calls on a new connection (checks and repeats), and those that missed.
    fn fresh(&self) -> (u64, u64) {
        (
            self.checks + self.repeats,
            self.checks_missed + self.repeats_missed,
        )
    }

    /// The model's timing: the median call (whole ms, at least 1) as the round trip, the
    /// calls that missed the timeout as stalls of that chance, and the calls on a new
    /// connection that missed as the chance that opening one stalls; each stall long enough
    /// to miss the call timeout and the connect timeout (how much later the reply came does
    /// not change what the process does: it gave up at the timeout). `None` when nothing
    /// was timed.
    fn timing(&self) -> Option<RedisTiming> {
        if self.calls() == 0 {
            return None;
        }
        let timing = RedisTiming::default();
        let round_trip_ms = if self.in_time_us.is_empty() {
            timing.call_timeout_ms
        } else {
            (self.quantile_ms(0.5).ceil() as u64).max(1)
        };
        let per_million = |missed: u64, of: u64| {
            u32::try_from(missed * 1_000_000 / of.max(1)).unwrap_or(u32::MAX)
        };
        let (fresh, fresh_missed) = self.fresh();
        // Long enough to miss the call timeout, and on a new connection the connect timeout.
        let stalls = CallStalls::new(
            per_million(self.missed, self.calls()),
            timing.call_timeout_ms.max(timing.connect_timeout_ms) + 1,
        )
        .with_fresh_per_million(per_million(fresh_missed, fresh));
        Some(timing.with_round_trip_ms(round_trip_ms).with_stalls(stalls))
    }
}

impl Figures {
    fn of(completed: &[bool], requests: &[u64], window_ms: Option<(u64, u64)>) -> Figures {
        Figures {
            agents: completed.len(),
            completed: completed.iter().filter(|c| **c).count(),
            requests: requests.len(),
            peak_per_sec: peak(requests, window_ms),
            per_agent_sd: None,
            redis_events: None,
        }
    }

    fn success(&self) -> f64 {
        self.completed as f64 / self.agents.max(1) as f64
    }

    fn per_agent(&self) -> f64 {
        self.requests as f64 / self.agents.max(1) as f64
    }

    fn per_turn(&self) -> Option<f64> {
        (self.completed > 0).then(|| self.requests as f64 / self.completed as f64)
    }
}

/// The most requests in any one virtual second of the window.
fn peak(requests: &[u64], window_ms: Option<(u64, u64)>) -> usize {
    let (from, until) = window_ms.unwrap_or((0, u64::MAX));
    let mut buckets = std::collections::BTreeMap::<u64, usize>::new();
    for at in requests.iter().filter(|at| (from..until).contains(*at)) {
        *buckets.entry((at - from) / 1_000).or_default() += 1;
    }
    buckets.into_values().max().unwrap_or(0)
}

/// Differences beyond noise between the real and the simulated fleet: success or requests
/// per agent further apart than three standard errors of the difference of two samples of
/// this size (the server draws random faults from one stream, the simulator per agent), and
/// than 3 points of success or 10 % of requests per agent.
fn differs(real: &Figures, sim: &Figures) -> bool {
    let n = sim.agents.max(1) as f64;
    let p = sim.success();
    let success_noise = (3.0 * (2.0 * p * (1.0 - p) / n).sqrt()).max(0.03);
    let sd = sim.per_agent_sd.unwrap_or(0.0);
    let requests_noise = (3.0 * sd * (2.0 / n).sqrt()).max(0.1 * sim.per_agent().max(1.0));
    (real.success() - sim.success()).abs() > success_noise
        || (real.per_agent() - sim.per_agent()).abs() > requests_noise
}

async fn parent(options: Options) -> ExitCode {
    let experiment = ExperimentConfig::default()
        .with_seed(options.seed)
        .with_agents(options.agents);
    let models = OutageModel::standard();
    println!(
        "{} agents starting over the first 10 s; seed {}; time scaled by {} on both sides, \
         figures in virtual time.\n",
        options.agents, options.seed, options.scale
    );
    println!("| model | fleet | side | success | requests / agent | requests / completed turn | peak requests / s |");
    println!("|---|---|---|---:|---:|---:|---:|");
    // The model's round trip when a play timed no call: this Redis's, measured before.
    let timing = match &options.redis {
        Some(redis) => match round_trip_ms(redis).await {
            Ok(ms) => {
                eprintln!("redis round trip (median of 20 calls before the plays): {ms} ms");
                RedisTiming::default().with_round_trip_ms(ms)
            }
            Err(e) => {
                eprintln!("{redis}: {e}");
                return ExitCode::from(3);
            }
        },
        None => RedisTiming::default(),
    };
    let mut any_differs = false;
    let mut redis_notes = Vec::new();
    for name in &options.models {
        let Some((m, model)) = models.iter().enumerate().find(|(_, m)| m.name == *name) else {
            eprintln!("no model {name}");
            return ExitCode::from(3);
        };
        let processes = options.processes.max(1);
        let mut fleets = vec![Sharing::OneProcess, Sharing::PerProcess(processes)];
        if options.redis.is_some() {
            fleets.push(Sharing::Redis(processes));
        }
        for sharing in fleets {
            let per = options.agents.div_ceil(processes);
            let fleet = match sharing {
                Sharing::OneProcess => format!("{} runners, 1 process", options.agents),
                Sharing::PerProcess(_) => format!("{processes} processes × {per}"),
                Sharing::Redis(_) => format!("{processes} processes × {per}, one Redis budget"),
            };
            let started = std::time::Instant::now();
            let (real, calls) = match play_real(&options, &experiment, m, model, sharing).await {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("{name}, {fleet}: {e}");
                    return ExitCode::from(3);
                }
            };
            // The simulated Redis fleet runs with the calls of this very play.
            let timing = calls.as_ref().and_then(CallTimes::timing).unwrap_or(timing);
            let sim = match play_sim(&options, &experiment, m, model, sharing, timing) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("{name}, {fleet}: the simulator failed (a bug): {e}");
                    return ExitCode::from(3);
                }
            };
            eprintln!(
                "{name}, {fleet}: played in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            let differ = differs(&real, &sim);
            any_differs |= differ;
            if let (Some(r), Some(s), Some(calls)) = (real.redis_events, sim.redis_events, &calls) {
                redis_notes.push(format!(
                    "- {name}: {} calls timed: in time p50 {:.1} ms, p90 {:.1}, p99 {:.1}, \
                     max {:.1}; {} ({:.2} %) missed the {} ms timeout. On a new connection: \
                     {} of {} checks at start and {} of {} repeats missed. Model: round \
                     trip {} ms, stalls {} per million, {} per million on a new \
                     connection. Real processes fell back {} times ({} at their start) and \
                     came back {}; simulated {} and {} ({} calls timed out, {} asks \
                     orphaned, {} tokens paid back).",
                    calls.calls(),
                    calls.quantile_ms(0.5),
                    calls.quantile_ms(0.9),
                    calls.quantile_ms(0.99),
                    calls.quantile_ms(1.0),
                    calls.missed,
                    calls.missed as f64 * 100.0 / calls.calls().max(1) as f64,
                    timing.call_timeout_ms,
                    calls.checks_missed,
                    calls.checks,
                    calls.repeats_missed,
                    calls.repeats,
                    timing.round_trip_ms,
                    timing.stalls.per_million,
                    timing.stalls.fresh_per_million,
                    r.fell_back,
                    r.at_start,
                    r.restored,
                    s.fell_back,
                    s.restored,
                    s.timed_out,
                    s.orphaned,
                    s.repaid
                ));
            }
            for (side, f) in [("real", &real), ("simulated", &sim)] {
                println!(
                    "| {name} | {fleet} | {side}{} | {:.1} % | {:.2} | {} | {} |",
                    if differ && side == "real" {
                        " (**differs**)"
                    } else {
                        ""
                    },
                    f.success() * 100.0,
                    f.per_agent(),
                    f.per_turn()
                        .map_or_else(|| "—".to_owned(), |x| format!("{x:.2}")),
                    f.peak_per_sec
                );
            }
        }
    }
    println!(
        "\nReal and simulated fleets {}.",
        if any_differs {
            "**differ** beyond noise (three standard errors, and 3 points of success or 10 % of \
             requests per agent)"
        } else {
            "agree within noise"
        }
    );
    if !redis_notes.is_empty() {
        println!(
            "\nOne Redis budget: the calls the real processes timed (notes and first \
             attempts' asks while shared), the model's timing from them, and fallbacks to a \
             local budget (`BudgetEvent`).\n"
        );
        for note in redis_notes {
            println!("{note}");
        }
    }
    if any_differs {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Which agents process `p` of `processes` runs.
fn share(agents: usize, processes: usize, p: usize) -> std::ops::Range<usize> {
    let per = agents.div_ceil(processes);
    (p * per).min(agents)..((p + 1) * per).min(agents)
}

/// The simulated fleet: one budget for all (one process), a budget per process, or the
/// processes sharing one budget in Redis on the store's model with `timing`.
fn play_sim(
    options: &Options,
    experiment: &ExperimentConfig,
    m: usize,
    model: &OutageModel,
    sharing: Sharing,
    timing: RedisTiming,
) -> Result<Figures, rebound_sim::SimError> {
    let scenario = rebound_tests::scaled::scenario(&model.scenario, options.scale);
    let (machine, budget) = rebound_tests::scaled::config(options.scale);
    let config = SimConfig::default()
        .with_machine(machine)
        .with_budget(budget.clone());
    let processes = sharing.processes();
    let groups: Vec<Vec<FleetAgent<'_>>> = (0..processes)
        .map(|p| {
            share(options.agents, processes, p)
                .map(|i| FleetAgent {
                    scenario: &scenario,
                    seed: experiment.agent_seed(m, i),
                    start_ms: scaled_start(experiment, i, options.scale),
                })
                .collect()
        })
        .collect();
    let mut redis_events = None;
    let outcomes = match sharing {
        Sharing::OneProcess | Sharing::PerProcess(_) => groups
            .iter()
            .map(|agents| simulate_fleet(agents, &config))
            .collect::<Result<Vec<_>, _>>()?,
        Sharing::Redis(_) => {
            let mut store = RedisStore::new(budget, timing).with_seed(options.seed);
            // Each process checks Redis at its start, as the real children do.
            for p in 0..processes {
                store.check(rebound_core::Millis::ZERO, ProcessId(p));
            }
            let outcomes = simulate_fleet_in_redis(&groups, &config, &mut store)?;
            let counts = store.counts();
            redis_events = Some(RedisEvents {
                fell_back: counts.fell_back,
                restored: counts.restored,
                at_start: 0,
                timed_out: counts.timed_out,
                orphaned: counts.orphaned,
                repaid: counts.repaid,
            });
            outcomes
        }
    };
    let mut completed = Vec::new();
    let mut requests = Vec::new();
    let mut per_agent = Vec::new();
    for outcome in outcomes.iter().flatten() {
        completed.push(outcome.succeeded());
        per_agent.push(f64::from(outcome.requests()));
        requests.extend(
            outcome
                .commands()
                .filter(|(_, c)| matches!(c, rebound_core::Command::SendRequest { .. }))
                .map(|(t, _)| unscale(t.0, options.scale)),
        );
    }
    let n = per_agent.len().max(1) as f64;
    let mean = per_agent.iter().sum::<f64>() / n;
    let variance = per_agent.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
    Ok(Figures {
        per_agent_sd: Some(variance.sqrt()),
        redis_events,
        ..Figures::of(&completed, &requests, model.window_ms)
    })
}

/// The median time of 20 calls to the budget script on `redis` (a budget of its own name),
/// in whole ms, at least 1.
async fn round_trip_ms(redis: &str) -> Result<u64, String> {
    let url: RedisUrl = format!("{redis}/fleet-round-trip-{}", epoch_ms())
        .parse()
        .map_err(|e| format!("{e}"))?;
    let budget = RedisBudget::new(&url, BudgetConfig::default(), RedisOptions::default())
        .map_err(|e| e.to_string())?;
    // The first call connects.
    budget.stats().await.map_err(|e| e.to_string())?;
    let mut times = Vec::new();
    for _ in 0..20 {
        let started = std::time::Instant::now();
        budget.stats().await.map_err(|e| e.to_string())?;
        times.push(started.elapsed());
    }
    times.sort();
    let median = times[times.len() / 2];
    Ok(u64::try_from(median.as_micros().div_ceil(1_000))
        .unwrap_or(u64::MAX)
        .max(1))
}

fn scaled_start(experiment: &ExperimentConfig, i: usize, scale: f64) -> u64 {
    (experiment.start_ms(i) as f64 * scale).round() as u64
}

fn unscale(ms: u64, scale: f64) -> u64 {
    (ms as f64 / scale).round() as u64
}

async fn play_real(
    options: &Options,
    experiment: &ExperimentConfig,
    m: usize,
    model: &OutageModel,
    sharing: Sharing,
) -> Result<(Figures, Option<CallTimes>), String> {
    let processes = sharing.processes();
    let scenario = rebound_tests::scaled::scenario(&model.scenario, options.scale);
    // One script (random faults from one stream) and one clock from the server's start for
    // the whole fleet: the agents all say the same thing.
    let mut server_config = FakeServerConfig::new(scenario, options.seed)
        .with_script(ScriptScope::Shared)
        .with_clock(ScenarioClock::ServerStart);
    server_config.play_latency = true;
    let server = FakeServer::start(server_config)
        .await
        .map_err(|e| e.to_string())?;
    // The server's clock starts at its start; the agents' start times count from there.
    let t0_epoch_ms = epoch_ms();
    let url = server.base_url();
    let mut completed = vec![false; options.agents];
    let mut redis_events = None;
    let mut calls = None;
    if processes == 1 {
        let budget = SharedBudget::new(rebound_tests::scaled::config(options.scale).1);
        for (i, done) in run_agents(
            &url,
            options,
            experiment,
            m,
            0..options.agents,
            t0_epoch_ms,
            &budget,
        )
        .await
        {
            completed[i] = done;
        }
    } else {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        // A budget of its own per process ("-"), or one in Redis named for this play.
        let budget = match (sharing, &options.redis) {
            (Sharing::Redis(_), Some(redis)) => {
                format!(
                    "{redis}/fleet-{}-{}-{t0_epoch_ms}",
                    model.name, options.seed
                )
            }
            _ => "-".to_owned(),
        };
        let mut children = Vec::new();
        for p in 0..processes {
            let range = share(options.agents, processes, p);
            let child = tokio::process::Command::new(&exe)
                .args([
                    "--child".to_owned(),
                    url.clone(),
                    model.name.clone(),
                    options.seed.to_string(),
                    options.agents.to_string(),
                    options.scale.to_string(),
                    t0_epoch_ms.to_string(),
                    range.start.to_string(),
                    range.end.to_string(),
                    budget.clone(),
                ])
                .stdout(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot start a child: {e}"))?;
            children.push(child);
        }
        let mut events = RedisEvents::default();
        let mut timed = CallTimes::default();
        for child in children {
            let out = child.wait_with_output().await.map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!("a child failed: {}", out.status));
            }
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some(counts) = line.strip_prefix("events ") {
                    let mut counts = counts.split_whitespace().map(str::parse::<u64>);
                    if let (Some(Ok(fell_back)), Some(Ok(restored)), Some(Ok(at_start))) =
                        (counts.next(), counts.next(), counts.next())
                    {
                        events.fell_back += fell_back;
                        events.restored += restored;
                        events.at_start += at_start;
                    }
                    continue;
                }
                if let Some(times) = line.strip_prefix("calls ") {
                    let mut numbers = times.split_whitespace().map(str::parse::<u64>);
                    if let (Some(Ok(missed)), Some(Ok(repeats)), Some(Ok(repeats_missed))) =
                        (numbers.next(), numbers.next(), numbers.next())
                    {
                        timed.missed += missed;
                        timed.repeats += repeats;
                        timed.repeats_missed += repeats_missed;
                        timed.in_time_us.extend(numbers.filter_map(Result::ok));
                    }
                    continue;
                }
                let mut words = line.split_whitespace();
                if let (Some(i), Some(done)) = (words.next(), words.next()) {
                    if let Ok(i) = i.parse::<usize>() {
                        if let Some(slot) = completed.get_mut(i) {
                            *slot = done == "1";
                        }
                    }
                }
            }
        }
        if matches!(sharing, Sharing::Redis(_)) {
            timed.checks = processes as u64;
            timed.checks_missed = events.at_start;
            redis_events = Some(events);
            calls = Some(timed);
        }
    }
    let requests: Vec<u64> = server
        .requests()
        .iter()
        .filter(|r| !matches!(r.outcome, Outcome::Rejected { .. }))
        .map(|r| unscale(r.at_ms, options.scale))
        .collect();
    server.shutdown().await;
    let figures = Figures {
        redis_events,
        ..Figures::of(&completed, &requests, model.window_ms)
    };
    Ok((figures, calls))
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Runs agents `range` of the fleet, sharing `budget`: agent `i` starts at its scaled start
/// time after `t0_epoch_ms`. Returns whether each completed its turn.
async fn run_agents(
    url: &str,
    options: &Options,
    experiment: &ExperimentConfig,
    m: usize,
    range: std::ops::Range<usize>,
    t0_epoch_ms: u64,
    budget: &(impl BudgetStore + Clone + 'static),
) -> Vec<(usize, bool)> {
    let (machine, _) = rebound_tests::scaled::config(options.scale);
    let mut tasks = tokio::task::JoinSet::new();
    for i in range {
        let start_at = t0_epoch_ms + scaled_start(experiment, i, options.scale);
        let seed = experiment.agent_seed(m, i);
        let url = url.to_owned();
        let machine = machine.clone();
        let budget = budget.clone();
        tasks.spawn_local(async move {
            let wait = start_at.saturating_sub(epoch_ms());
            tokio::time::sleep(Duration::from_millis(wait)).await;
            let mut config = HttpProviderConfig::new(
                ProviderKind::Anthropic,
                format!("fleet-agent-{i}"),
                ApiKey::new("fleet-test-key"),
            );
            config.base_url = url;
            let done = match HttpProvider::new(config) {
                Ok(provider) => {
                    let mut runner = Runner::new(machine, vec![Box::new(provider)])
                        .seed(seed)
                        .budget(budget);
                    runner.run(RunInput::text("Say hello.")).await.is_ok()
                }
                Err(_) => false,
            };
            (i, done)
        });
    }
    let mut results = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Ok(r) = joined {
            results.push(r);
        }
    }
    results
}

/// A process's `RedisBudget` with the calls the fleet can time from outside timed: a note
/// (`record`, one call) and an uncharged ask (a first attempt's or a hinted retry's
/// `acquire`, one call, made once more after a timeout), each while the budget is shared
/// (so it goes to Redis). A charged ask is not timed: it may wait in Redis's queue. A call
/// that took longer than the call timeout, as this process's task saw it, missed it; an
/// ask that missed was repeated on a new connection, and the repeat missed too when the
/// budget fell back.
#[derive(Debug, Clone)]
struct TimedBudget {
    budget: RedisBudget,
    timeout: Duration,
    log: Arc<Mutex<CallTimes>>,
}

impl TimedBudget {
    /// Times `call`, made once more after a timeout if `repeated`.
    async fn timed<T>(&self, call: impl Future<Output = T>, repeated: bool) -> T {
        if !self.budget.is_shared() {
            return call.await;
        }
        let started = std::time::Instant::now();
        let out = call.await;
        let took = started.elapsed();
        let mut log = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if took > self.timeout {
            log.missed += 1;
            if repeated {
                log.repeats += 1;
                log.repeats_missed += u64::from(!self.budget.is_shared());
            }
        } else {
            log.in_time_us
                .push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        }
        out
    }
}

// `BudgetStore` is an `async_trait`: its methods, as that macro writes them.
impl BudgetStore for TimedBudget {
    fn origin(&self) -> tokio::time::Instant {
        self.budget.origin()
    }

    fn acquire<'life0, 'async_trait>(
        &'life0 self,
        ask: PermitAsk,
    ) -> Pin<Box<dyn Future<Output = PermitDecision> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            if ask.kind == PermitKind::Charged {
                self.budget.acquire(ask).await
            } else {
                self.timed(self.budget.acquire(ask), true).await
            }
        })
    }

    fn record<'life0, 'async_trait>(
        &'life0 self,
        note: BudgetNote,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.timed(self.budget.record(note), false))
    }

    fn tokens(&self) -> Option<f64> {
        self.budget.tokens()
    }
}

/// `--child URL MODEL SEED AGENTS SCALE T0_EPOCH_MS FIRST END BUDGET`: runs agents
/// FIRST..END with a budget of their own (BUDGET `-`) or the one in Redis that BUDGET names,
/// printing `INDEX 1|0` per agent and, with Redis, `events FELL_BACK RESTORED AT_START` (how
/// often the budget fell back to its local one, and came back; whether its check at start
/// failed) and `calls MISSED REPEATS REPEATS_MISSED US…` (see [`TimedBudget`]: how many timed
/// calls missed the call timeout, how many of those were repeated and missed again, and how
/// long each of the others took).
fn child(args: &[String]) -> ExitCode {
    let parsed = (|| {
        let [url, model, seed, agents, scale, t0, first, end, budget] = args else {
            return None;
        };
        Some((
            url.clone(),
            model.clone(),
            seed.parse::<u64>().ok()?,
            agents.parse::<usize>().ok()?,
            scale.parse::<f64>().ok()?,
            t0.parse::<u64>().ok()?,
            first.parse::<usize>().ok()?,
            end.parse::<usize>().ok()?,
            budget.clone(),
        ))
    })();
    let Some((url, model, seed, agents, scale, t0, first, end, budget)) = parsed else {
        eprintln!("fleet --child: bad arguments");
        return ExitCode::from(2);
    };
    let options = Options {
        seed,
        agents,
        processes: 1,
        scale,
        models: Vec::new(),
        redis: None,
    };
    let experiment = ExperimentConfig::default()
        .with_seed(seed)
        .with_agents(agents);
    let Some(m) = OutageModel::standard()
        .iter()
        .position(|candidate| candidate.name == model)
    else {
        eprintln!("fleet --child: no model {model}");
        return ExitCode::from(2);
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::from(3);
    };
    let config = rebound_tests::scaled::config(scale).1;
    let fell_back = Arc::new(AtomicU64::new(0));
    let restored = Arc::new(AtomicU64::new(0));
    let at_start = Arc::new(AtomicU64::new(0));
    let log = Arc::new(Mutex::new(CallTimes::default()));
    let results = runtime.block_on(tokio::task::LocalSet::new().run_until(async {
        if budget == "-" {
            let budget = SharedBudget::new(config);
            let results = run_agents(&url, &options, &experiment, m, first..end, t0, &budget).await;
            return Ok::<_, String>(results);
        }
        let redis_url = budget.parse().map_err(|e| format!("{e}"))?;
        let (fell, back) = (Arc::clone(&fell_back), Arc::clone(&restored));
        let on_event = Arc::new(move |event: &BudgetEvent| {
            let counter = match event {
                BudgetEvent::FellBack { .. } => &fell,
                BudgetEvent::Restored { .. } => &back,
                _ => return,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        });
        let redis_options = RedisOptions::default().with_on_event(on_event);
        let timeout = redis_options.call_timeout;
        let budget =
            RedisBudget::new(&redis_url, config, redis_options).map_err(|e| e.to_string())?;
        // At start, as `rebound run` does: a Redis that cannot keep the budget is an error,
        // not a fleet silently on local budgets (a slow first answer is not: the budget
        // tries again at its next decision).
        if let Err(e) = budget.check().await {
            if e.is_permanent() {
                return Err(e.to_string());
            }
            at_start.store(1, Ordering::Relaxed);
        }
        let budget = TimedBudget {
            budget,
            timeout,
            log: Arc::clone(&log),
        };
        Ok(run_agents(&url, &options, &experiment, m, first..end, t0, &budget).await)
    }));
    let results = match results {
        Ok(results) => results,
        Err(e) => {
            eprintln!("fleet --child: {e}");
            return ExitCode::from(2);
        }
    };
    for (i, done) in results {
        println!("{i} {}", u8::from(done));
    }
    if budget != "-" {
        println!(
            "events {} {} {}",
            fell_back.load(Ordering::Relaxed),
            restored.load(Ordering::Relaxed),
            at_start.load(Ordering::Relaxed)
        );
        let log = log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let times: Vec<String> = log.in_time_us.iter().map(u64::to_string).collect();
        println!(
            "calls {} {} {} {}",
            log.missed,
            log.repeats,
            log.repeats_missed,
            times.join(" ")
        );
    }
    ExitCode::SUCCESS
}
