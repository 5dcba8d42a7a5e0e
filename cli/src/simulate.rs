//! `rebound sim`: many seeded virtual-time runs of a scenario.

use super::{load_scenario, SimArgs, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use rebound_sim::{run_many, simulate, SimConfig, Stats};
use std::path::{Path, PathBuf};

/// Runs `rebound sim` and returns the exit code: 0 when every run completed in the simulator
/// (a scenario may well make runs fail — that is a statistic), 1 when the simulator itself
/// failed (a livelock or stall: a bug, printed with the command that reproduces it).
pub fn sim(args: &SimArgs) -> i32 {
    if args.compare {
        return compare(args.seed.unwrap_or(1), args.charts.as_deref());
    }
    let seed = args.seed.unwrap_or(0);
    let name = args.scenario.clone().unwrap_or_default();
    let scenario = match load_scenario(&name) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rebound: {e}");
            return EXIT_USAGE;
        }
    };
    let config = SimConfig::default();
    if let Some(path) = &args.trace_out {
        match simulate(&scenario, &config, seed) {
            Ok(outcome) => {
                let written = rebound_effects::private_file::create(path)
                    .and_then(|f| outcome.trace().write_to(std::io::BufWriter::new(f)));
                if let Err(e) = written {
                    eprintln!("rebound: cannot write trace {}: {e}", path.display());
                    return EXIT_USAGE;
                }
            }
            Err(e) => {
                eprintln!("rebound: {e}");
                eprintln!("reproduce: {}", repro(&name, seed));
                return EXIT_FAILED;
            }
        }
    }
    let stats = run_many(&scenario, &config, seed, args.runs.max(1));
    println!("{}", Stats::markdown_header());
    println!("{}", stats.markdown_row());
    if let Some(dir) = &args.charts {
        match rebound_study::charts::write_scenario_charts(&stats, dir) {
            Ok(written) => report_charts(&written, dir),
            Err(e) => {
                eprintln!("rebound: {e}");
                return EXIT_FAILED;
            }
        }
    }
    if let Some(error) = &stats.first_sim_error {
        eprintln!("rebound: the simulator failed: {error}");
        if let Some(seed) = error_seed(error) {
            eprintln!("reproduce: {}", repro(&name, seed));
        }
        return EXIT_FAILED;
    }
    EXIT_OK
}

fn report_charts(written: &[PathBuf], dir: &Path) {
    eprintln!(
        "rebound: wrote {} charts into {}",
        written.len(),
        dir.display()
    );
}

fn repro(scenario: &str, seed: u64) -> String {
    format!("cargo run --release -- sim --scenario {scenario} --seed {seed} --runs 1")
}

fn error_seed(error: &rebound_sim::SimError) -> Option<u64> {
    match error {
        rebound_sim::SimError::StepLimit { seed, .. }
        | rebound_sim::SimError::Stalled { seed, .. } => Some(*seed),
        _ => None,
    }
}

/// `rebound sim --compare`: the outage experiment, as a Markdown table; exit 1 when rebound
/// misses its bar (dominated by a peer in any model, or one of the per-model limits of
/// `docs/outages.md`, each named in the report).
/// With `charts`, also writes the experiment's charts there.
fn compare(seed: u64, charts: Option<&Path>) -> i32 {
    let config = rebound_study::compare::ExperimentConfig::default().with_seed(seed);
    match rebound_study::compare::run_experiment_with_timelines(&config) {
        Ok((report, timelines)) => {
            println!("{report}");
            if let Some(dir) = charts {
                match rebound_study::charts::write_experiment_charts(&report, &timelines, dir) {
                    Ok(written) => report_charts(&written, dir),
                    Err(e) => {
                        eprintln!("rebound: {e}");
                        return EXIT_FAILED;
                    }
                }
            }
            if report.verdict().met() {
                EXIT_OK
            } else {
                EXIT_FAILED
            }
        }
        Err(e) => {
            eprintln!("rebound: the simulator failed: {e}");
            EXIT_FAILED
        }
    }
}
