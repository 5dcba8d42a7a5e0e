//! The outage experiment: rebound against today's retry policies on the same seeded outages.
//!
//! ```text
//! cargo run --release -p rebound-sim --example outages [-- --seed N --agents N]
//! ```
//!
//! Prints a Markdown table (the one in `docs/outages.md`) and whether the bar is met.

use rebound_sim::compare::{run_experiment, ExperimentConfig};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut config = ExperimentConfig::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse::<u64>().ok());
        match (arg.as_str(), value) {
            ("--seed", Some(v)) => config.seed = v,
            ("--agents", Some(v)) => config.agents = usize::try_from(v).unwrap_or(usize::MAX),
            _ => {
                eprintln!("usage: outages [--seed N] [--agents N]");
                return ExitCode::from(2);
            }
        }
    }
    match run_experiment(&config) {
        Ok(report) => {
            print!("{report}");
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
