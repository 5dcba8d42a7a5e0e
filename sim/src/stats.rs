//! Many seeded runs of one scenario, summarized: success rate, requests, virtual time.

use crate::driver::{simulate_in, Cache, SimConfig, SimError};
use crate::record::{Steps, Tally};
use crate::scenario::Scenario;
use std::collections::BTreeMap;
use std::fmt;

/// A summary of [`run_many`]: what a CLI prints after `rebound sim --runs K`.
///
/// Its [`Display`](fmt::Display) is a one-row Markdown table; print
/// [`Stats::markdown_header`] once and [`Stats::markdown_row`] per scenario to compare
/// several.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// The scenario's name.
    pub scenario: String,
    /// Runs made.
    pub runs: u32,
    /// Runs that finished.
    pub succeeded: u32,
    /// Failed runs per [`RunError::kind`](rebound_core::RunError::kind).
    pub failures: BTreeMap<String, u32>,
    /// Runs the simulator could not complete (machine bugs), with the first error.
    pub sim_errors: u32,
    /// The first simulator error, if any.
    pub first_sim_error: Option<SimError>,
    /// Provider requests per completed run, sorted.
    pub requests: Vec<u32>,
    /// Virtual time per completed run in ms, sorted.
    pub elapsed_ms: Vec<u64>,
    /// Retries over all runs, counted as core's `RunTally` counts them (a compaction's retry
    /// is a compaction, not a retry).
    pub retries: u64,
    /// Every run the simulator completed, in seed order: what the scenario charts of the
    /// `rebound-study` crate draw.
    pub per_run: Vec<RunSummary>,
}

/// One run of [`run_many`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunSummary {
    /// The run's seed.
    pub seed: u64,
    /// Whether it finished (rather than failed).
    pub succeeded: bool,
    /// Provider requests it sent (attempts, over all turns and targets).
    pub requests: u32,
    /// Its virtual time from start to finish or failure, in ms.
    pub elapsed_ms: u64,
}

/// Runs `scenario` `runs` times with seeds `first_seed..first_seed + runs`.
///
/// ```
/// use rebound_sim::{run_many, Scenario, SimConfig};
///
/// let stats = run_many(&Scenario::builtin("brownout").unwrap(), &SimConfig::default(), 0, 200);
/// assert_eq!(stats.runs, 200);
/// assert!(stats.success_rate() > 0.5);
/// println!("{stats}");
/// ```
#[must_use]
pub fn run_many(scenario: &Scenario, config: &SimConfig, first_seed: u64, runs: u32) -> Stats {
    let mut stats = Stats {
        scenario: scenario.name.clone(),
        ..Stats::default()
    };
    let mut cache = Cache::default();
    for seed in (0..u64::from(runs)).map(|i| first_seed.wrapping_add(i)) {
        stats.runs += 1;
        // Counts only: a run's steps are not kept (see `record`).
        match simulate_in::<Tally>(scenario, config, seed, &mut cache) {
            Ok(run) => {
                let requests = run.requests_per_target.iter().sum();
                let elapsed_ms = run.elapsed.since(run.started);
                stats.per_run.push(RunSummary {
                    seed,
                    succeeded: run.result.is_ok(),
                    requests,
                    elapsed_ms,
                });
                stats.requests.push(requests);
                stats.elapsed_ms.push(elapsed_ms);
                stats.retries += u64::from(run.record.run.retries);
                match &run.result {
                    Ok(_) => stats.succeeded += 1,
                    Err(e) => *stats.failures.entry(e.kind().to_owned()).or_default() += 1,
                }
            }
            Err(counted) if stats.first_sim_error.is_none() => {
                stats.sim_errors += 1;
                // Played again keeping its steps, so the error shows what the agent last did
                // (the same error: a run is a pure function of its seed).
                let full = simulate_in::<Steps>(scenario, config, seed, &mut cache);
                stats.first_sim_error = Some(full.err().unwrap_or(counted));
            }
            Err(_) => stats.sim_errors += 1,
        }
    }
    stats.requests.sort_unstable();
    stats.elapsed_ms.sort_unstable();
    stats
}

/// The nearest-rank `p`-th percentile (0–100) of sorted `values`, or 0 when empty.
#[must_use]
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Stats {
    /// Finished runs over all runs (0 when there were none).
    #[must_use]
    pub fn success_rate(&self) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            f64::from(self.succeeded) / f64::from(self.runs)
        }
    }

    /// Mean provider requests per run.
    #[must_use]
    pub fn mean_requests(&self) -> f64 {
        if self.requests.is_empty() {
            0.0
        } else {
            self.requests.iter().map(|&r| f64::from(r)).sum::<f64>() / self.requests.len() as f64
        }
    }

    /// Virtual time at percentile `p`, in ms.
    #[must_use]
    pub fn elapsed_percentile(&self, p: f64) -> u64 {
        percentile(&self.elapsed_ms, p)
    }

    /// Total virtual time over all runs, in ms.
    #[must_use]
    pub fn total_elapsed_ms(&self) -> u64 {
        self.elapsed_ms.iter().sum()
    }

    /// The header of the Markdown table [`markdown_row`](Self::markdown_row) fills.
    #[must_use]
    pub fn markdown_header() -> &'static str {
        "| scenario | runs | success | requests/run (mean, p99) | retries | virtual time p50 | p99 | failures |\n\
         |---|---:|---:|---:|---:|---:|---:|---|"
    }

    /// One Markdown table row.
    #[must_use]
    pub fn markdown_row(&self) -> String {
        let mut failures: Vec<String> = self
            .failures
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        if self.sim_errors > 0 {
            failures.push(format!("simulator errors: {}", self.sim_errors));
        }
        format!(
            "| {} | {} | {:.1} % | {:.2}, {} | {} | {} | {} | {} |",
            if self.scenario.is_empty() {
                "(unnamed)"
            } else {
                &self.scenario
            },
            self.runs,
            self.success_rate() * 100.0,
            self.mean_requests(),
            percentile(&self.requests, 99.0),
            self.retries,
            seconds(self.elapsed_percentile(50.0)),
            seconds(self.elapsed_percentile(99.0)),
            if failures.is_empty() {
                "-".to_owned()
            } else {
                failures.join(", ")
            },
        )
    }
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", Stats::markdown_header())?;
        writeln!(f, "{}", self.markdown_row())?;
        if let Some(e) = &self.first_sim_error {
            writeln!(f, "\nfirst simulator error: {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile::<u64>(&[], 50.0), 0);
    }
}
