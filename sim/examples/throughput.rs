//! Simulator throughput: many seeded runs of every built-in scenario, timed on the wall clock.
//!
//! ```sh
//! cargo run --release -p rebound-sim --example throughput            # 20,000 runs per scenario
//! cargo run --release -p rebound-sim --example throughput -- 2000    # fewer
//! ```
//!
//! Prints, per scenario and overall, simulated runs per second and how much faster than real
//! time the simulated time passes (virtual time simulated / wall time spent), then the same
//! for one fleet of 1,000 agents sharing a retry budget through a ten-minute outage.

use rebound_core::{BudgetConfig, BudgetUse};
use rebound_sim::{run_many, simulate_fleet, FleetAgent, Scenario, SimConfig, Stats};
use std::time::Instant;

fn main() {
    let runs: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let config = SimConfig::default();
    // Untimed: the first scenario timed would otherwise pay for the process's first page
    // faults and the allocator's first growth.
    for name in Scenario::builtin_names() {
        let scenario = Scenario::builtin(name).expect("a built-in scenario");
        let _ = run_many(&scenario, &config, 0, runs.min(500));
    }

    println!("{}", Stats::markdown_header());
    let mut rows = Vec::new();
    let (mut total_runs, mut total_virtual_ms, mut total_wall) = (0u64, 0u64, 0.0f64);
    for name in Scenario::builtin_names() {
        let scenario = Scenario::builtin(name).expect("a built-in scenario");
        let started = Instant::now();
        let stats = run_many(&scenario, &config, 0, runs);
        let wall = started.elapsed().as_secs_f64();
        println!("{}", stats.markdown_row());
        total_runs += u64::from(stats.runs);
        total_virtual_ms += stats.total_elapsed_ms();
        total_wall += wall;
        rows.push((
            name.to_string(),
            f64::from(stats.runs) / wall,
            stats.total_elapsed_ms() as f64 / 1000.0 / wall,
        ));
    }

    println!();
    println!("| scenario | simulated runs/s | simulated time / wall time |");
    println!("|---|---:|---:|");
    for (name, per_sec, ratio) in &rows {
        println!("| {name} | {per_sec:.0} | {ratio:.0}× |");
    }
    println!(
        "| **all ({total_runs} runs)** | **{:.0}** | **{:.0}×** |",
        total_runs as f64 / total_wall,
        total_virtual_ms as f64 / 1000.0 / total_wall
    );

    // One world of 1,000 agents sharing a retry budget through a ten-minute outage.
    let outage = Scenario::builtin("total-outage").expect("a built-in scenario");
    let agents: Vec<FleetAgent<'_>> = (0..1_000)
        .map(|i| FleetAgent {
            scenario: &outage,
            seed: i,
            start_ms: i * 60,
        })
        .collect();
    let mut fleet_config = SimConfig::default();
    fleet_config.machine.retry.max_attempts = 8;
    fleet_config.machine.retry_budget = Some(BudgetUse::default());
    fleet_config.budget = Some(BudgetConfig::default());
    let started = Instant::now();
    let outcomes = simulate_fleet(&agents, &fleet_config).expect("the fleet runs");
    let wall = started.elapsed().as_secs_f64();
    let requests: u32 = outcomes.iter().map(|o| o.requests()).sum();
    let events: usize = outcomes.iter().map(|o| o.steps.len()).sum();
    let end = outcomes.iter().map(|o| o.elapsed.0).max().unwrap_or(0);
    println!();
    println!(
        "fleet: 1,000 agents, shared budget, total outage: {requests} requests, {events} events, \
         {:.1} s virtual in {:.1} ms wall ({:.0} events/s)",
        end as f64 / 1000.0,
        wall * 1000.0,
        events as f64 / wall
    );
}
