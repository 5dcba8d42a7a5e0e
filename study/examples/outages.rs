//! The outage experiment: rebound against today's retry policies on the same seeded outages.
//!
//! ```text
//! cargo run --release -p rebound-study --example outages [-- --seed N --agents N --sweep --lengths --charts DIR]
//! ```
//!
//! Prints a Markdown table (the one in `docs/outages.md`) and whether the bar is met, with
//! every rule that failed (exit status 1 when it is not met). `--charts DIR` also writes the
//! SVG charts of [`rebound_study::charts::write_experiment_charts`] into `DIR` (those in
//! `docs/charts/` are `--charts docs/charts`). `--sweep` instead prints one
//! line per candidate configuration of rebound (attempt cap, budget parameters), the search
//! behind [`MachineConfig::resilient`] and [`BudgetConfig::default`]. `--lengths` instead
//! prints the outage-length sweep ([`run_length_sweep`]: a fleet busy in its tool loops
//! through total outages of 1 to 60 s), exit status 1 when a run alive at a recovery failed.

use rebound_core::{BudgetConfig, BudgetUse, MachineConfig};
use rebound_study::compare::{
    run_experiment, run_experiment_with_timelines, run_length_sweep, ExperimentConfig,
    LengthSweepConfig, Policy, Report, Sharing,
};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut config = ExperimentConfig::default();
    let mut sweep = false;
    let mut lengths = false;
    let mut charts: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--sweep" {
            sweep = true;
            continue;
        }
        if arg == "--lengths" {
            lengths = true;
            continue;
        }
        if arg == "--charts" {
            charts = args.next().map(PathBuf::from);
            if charts.is_some() {
                continue;
            }
        }
        let value = args.next().and_then(|v| v.parse::<u64>().ok());
        match (arg.as_str(), value) {
            ("--seed", Some(v)) => config.seed = v,
            ("--agents", Some(v)) => config.agents = usize::try_from(v).unwrap_or(usize::MAX),
            _ => {
                eprintln!(
                    "usage: outages [--seed N] [--agents N] [--sweep] [--lengths] [--charts DIR]"
                );
                return ExitCode::from(2);
            }
        }
    }
    if sweep {
        return run_sweep(config);
    }
    if lengths {
        return run_lengths(config.seed);
    }
    match run_experiment_with_timelines(&config) {
        Ok((report, timelines)) => {
            print!("{report}");
            if let Some(dir) = &charts {
                match rebound_study::charts::write_experiment_charts(&report, &timelines, dir) {
                    Ok(written) => {
                        eprintln!("wrote {} charts into {}", written.len(), dir.display())
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(2);
                    }
                }
            }
            if report.verdict().met() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("the simulator failed (a bug): {e}");
            ExitCode::from(3)
        }
    }
}

fn run_lengths(seed: u64) -> ExitCode {
    match run_length_sweep(&LengthSweepConfig::default().with_seed(seed)) {
        Ok(sweep) => {
            print!("{sweep}");
            let lost = sweep
                .rows
                .iter()
                .filter(|r| r.sharing != Sharing::NoBudget)
                .any(|r| r.lost_after_recovery > 0);
            if lost {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("the simulator failed (a bug): {e}");
            ExitCode::from(3)
        }
    }
}

fn run_sweep(base: ExperimentConfig) -> ExitCode {
    let budget = BudgetConfig::default();
    let with = |attempts: u32, budget: Option<BudgetConfig>, max_wait_ms: u64| {
        let mut machine = MachineConfig::resilient();
        machine.retry.max_attempts = attempts;
        machine.retry_budget = budget.as_ref().map(|_| BudgetUse::new(max_wait_ms));
        // Every policy: the bar compares rebound with "rebound, no budget" in the shared
        // short failures.
        base.clone()
            .with_machine(machine)
            .with_budget(budget)
            .with_policies(Policy::all())
    };
    let variant = |label: &str, attempts: u32, b: BudgetConfig, max_wait_ms: u64| {
        (label.to_owned(), with(attempts, Some(b), max_wait_ms))
    };
    let wait = BudgetUse::default().max_wait_ms;
    let tweak = |f: fn(&mut BudgetConfig)| {
        let mut b = budget.clone();
        f(&mut b);
        b
    };
    let candidates: Vec<(String, ExperimentConfig)> = vec![
        (
            "4 attempts, no budget (`MachineConfig::default()`)".into(),
            with(4, None, 0),
        ),
        ("12 attempts, no budget".into(), with(12, None, 0)),
        variant("4 attempts, default budget", 4, budget.clone(), wait),
        variant(
            "**12 attempts, default budget (`resilient()`)**",
            12,
            budget.clone(),
            wait,
        ),
        variant("8 attempts, default budget", 8, budget.clone(), wait),
        variant(
            "12 attempts, no success deposits (the budget before)",
            12,
            tweak(|b| b.deposit_per_success = 0.0),
            wait,
        ),
        variant(
            "12 attempts, 2 tokens per success",
            12,
            tweak(|b| b.deposit_per_success = 2.0),
            wait,
        ),
        variant(
            "12 attempts, 4 tokens per success",
            12,
            tweak(|b| b.deposit_per_success = 4.0),
            wait,
        ),
        variant(
            "12 attempts, default budget, max_wait 0 (refuse outright)",
            12,
            budget.clone(),
            0,
        ),
        variant(
            "12 attempts, default budget, max_wait 5 s",
            12,
            budget.clone(),
            5_000,
        ),
        variant(
            "12 attempts, default budget, max_wait 60 s",
            12,
            budget.clone(),
            60_000,
        ),
        variant(
            "12 attempts, refill 2/s",
            12,
            tweak(|b| b.refill_per_sec = 2.0),
            wait,
        ),
        variant(
            "12 attempts, capacity = initial = 100",
            12,
            tweak(|b| {
                b.capacity = 100.0;
                b.initial = 100.0;
            }),
            wait,
        ),
        variant(
            "12 attempts, deposit 0.2 per first attempt",
            12,
            tweak(|b| b.deposit_per_request = 0.2),
            wait,
        ),
        variant(
            "12 attempts, nothing for an answered retry (the budget before)",
            12,
            tweak(|b| b.deposit_per_answered_retry = 0.0),
            wait,
        ),
        variant(
            "12 attempts, 2 tokens for an answered retry",
            12,
            tweak(|b| b.deposit_per_answered_retry = 2.0),
            wait,
        ),
        variant(
            "12 attempts, 5 tokens for an answered retry",
            12,
            tweak(|b| b.deposit_per_answered_retry = 5.0),
            wait,
        ),
        variant(
            "12 attempts, capacity = initial = 5",
            12,
            tweak(|b| {
                b.capacity = 5.0;
                b.initial = 5.0;
            }),
            wait,
        ),
        variant(
            "12 attempts, capacity = initial = 20",
            12,
            tweak(|b| {
                b.capacity = 20.0;
                b.initial = 20.0;
            }),
            wait,
        ),
    ];
    println!("| rebound configuration | bar | total outage: requests / agent | blip-shared: p50, p99, peak / s | brownout success | stream cuts success | blip-shared success | 3s-outage-shared success | brownout-shared success | rate-limit-shared: success, requests / completed turn |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (label, config) in candidates {
        let report = match run_experiment(&config) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("the simulator failed (a bug): {e}");
                return ExitCode::from(3);
            }
        };
        let cell = |model: &str, f: &dyn Fn(&rebound_study::compare::Row) -> String| {
            rebound_row(&report, model).map_or_else(|| "—".to_owned(), f)
        };
        let pct = |r: &rebound_study::compare::Row| format!("{:.1} %", r.success_rate() * 100.0);
        let secs = |ms: Option<u64>| {
            ms.map_or_else(
                || "—".to_owned(),
                |ms| format!("{:.1} s", ms as f64 / 1000.0),
            )
        };
        println!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            if report.verdict().met() {
                "met"
            } else {
                "**not met**"
            },
            cell("total-outage", &|r| format!(
                "{:.2}",
                r.requests_per_agent()
            )),
            cell("blip-shared", &|r| format!(
                "{}, {}, {}",
                secs(r.p50_ms),
                secs(r.p99_ms),
                r.peak_per_sec
            )),
            cell("brownout", &pct),
            cell("stream-cuts", &pct),
            cell("blip-shared", &pct),
            cell("3s-outage-shared", &pct),
            cell("brownout-shared", &pct),
            cell("rate-limit-shared", &|r| format!(
                "{}, {}",
                pct(r),
                r.requests_per_turn()
                    .map_or_else(|| "—".to_owned(), |x| format!("{x:.2}"))
            )),
        );
    }
    ExitCode::SUCCESS
}

fn rebound_row<'r>(report: &'r Report, model: &str) -> Option<&'r rebound_study::compare::Row> {
    report
        .rows
        .iter()
        .find(|r| r.model == model && r.policy == Policy::Rebound)
}
