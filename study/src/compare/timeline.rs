//! Requests per second over virtual time, per (model, policy): the retry storm as the charts
//! (module `charts`) draw it. Recorded beside the [`Report`], never changing it.

use super::{AgentTurn, ExperimentConfig, OutageModel, Policy, Report, Row};
use rebound_sim::SimError;

/// The requests all agents of one policy sent in one outage model, per second of virtual
/// time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The model's name.
    pub model: String,
    /// Who retried.
    pub policy: Policy,
    /// `per_sec[i]`: the requests (first attempts and retries) sent in `[i s, i + 1 s)` of
    /// virtual time, up to the second of the last request.
    pub per_sec: Vec<u32>,
    /// The seconds in which the turns completed, the same way.
    pub completed_per_sec: Vec<u32>,
}

impl Timeline {
    pub(super) fn record(model: &OutageModel, policy: Policy, turns: &[AgentTurn]) -> Timeline {
        Timeline {
            model: model.name.clone(),
            policy,
            per_sec: per_second(turns.iter().flat_map(|t| t.requests.iter().copied())),
            completed_per_sec: per_second(turns.iter().filter_map(|t| t.completed_at)),
        }
    }

    /// The most requests sent in any one second (0 when none was).
    #[must_use]
    pub fn peak(&self) -> u32 {
        self.per_sec.iter().copied().max().unwrap_or(0)
    }
}

fn per_second(times_ms: impl Iterator<Item = u64>) -> Vec<u32> {
    let mut buckets: Vec<u32> = Vec::new();
    for at in times_ms {
        let second = usize::try_from(at / 1_000).unwrap_or(usize::MAX);
        if second >= buckets.len() {
            buckets.resize(second.saturating_add(1), 0);
        }
        buckets[second] += 1;
    }
    buckets
}

/// [`run_experiment`](super::run_experiment), also returning one [`Timeline`] per row of the
/// report, in the report's order. The report is the one `run_experiment` returns for
/// `config`.
///
/// ```
/// use rebound_study::compare::{run_experiment_with_timelines, ExperimentConfig};
///
/// let config = ExperimentConfig::default().with_agents(20);
/// let (report, timelines) = run_experiment_with_timelines(&config).unwrap();
/// assert_eq!(timelines.len(), report.rows.len());
/// for (row, timeline) in report.rows.iter().zip(&timelines) {
///     assert_eq!(row.requests, timeline.per_sec.iter().map(|&n| u64::from(n)).sum::<u64>());
/// }
/// ```
///
/// # Errors
///
/// As [`run_experiment`](super::run_experiment).
pub fn run_experiment_with_timelines(
    config: &ExperimentConfig,
) -> Result<(Report, Vec<Timeline>), SimError> {
    let mut timelines = Vec::new();
    let report = super::run_observed(config, |model, policy, turns| {
        timelines.push(Timeline::record(model, policy, turns));
    })?;
    Ok((report, timelines))
}

/// One policy in one outage model, alone: its [`Row`] and [`Timeline`] and every agent's
/// [`AgentTurn`]. What the outage playground of the npm package draws.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PolicyRun {
    /// The row [`run_experiment`](super::run_experiment) gives this (model, policy).
    pub row: Row,
    /// The requests per second, as [`run_experiment_with_timelines`] records them.
    pub timeline: Timeline,
    /// Every agent's turn, in agent order.
    pub turns: Vec<AgentTurn>,
}

/// Runs model `config.models[model]` under `policy` only, with every agent's seed and start
/// as [`run_experiment`](super::run_experiment) gives them (they depend on the model's
/// index and on `config.agents`, not on the other models or policies), so its row is the
/// experiment's row for the pair.
///
/// ```
/// use rebound_study::compare::{run_experiment, run_policy, ExperimentConfig, Policy};
///
/// let config = ExperimentConfig::default().with_agents(20);
/// let run = run_policy(&config, 0, Policy::Rebound).unwrap();
/// assert_eq!(run.turns.len(), 20);
/// assert_eq!(run.row, run_experiment(&config).unwrap().rows[0]);
/// ```
///
/// # Errors
///
/// As [`run_experiment`](super::run_experiment).
///
/// # Panics
///
/// When `model` is not an index of `config.models` (a caller's bug).
pub fn run_policy(
    config: &ExperimentConfig,
    model: usize,
    policy: Policy,
) -> Result<PolicyRun, SimError> {
    let Some(outage) = config.models.get(model) else {
        panic!(
            "run_policy: model {model} is not an index of the config's {} models",
            config.models.len()
        );
    };
    let turns = super::run_turns(config, model, outage, policy)?;
    Ok(PolicyRun {
        row: Row::summarize(outage, policy, &super::turns_view(&turns)),
        timeline: Timeline::record(outage, policy, &turns),
        turns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::run_experiment;

    #[test]
    fn requests_are_counted_in_the_second_they_were_sent() {
        assert_eq!(per_second([0, 999, 1_000, 3_500].into_iter()), [2, 1, 0, 1]);
        assert!(per_second(std::iter::empty()).is_empty());
    }

    #[test]
    fn timelines_leave_the_report_as_run_experiment_makes_it() {
        let config = ExperimentConfig {
            agents: 30,
            ..ExperimentConfig::default()
        };
        let (report, timelines) = run_experiment_with_timelines(&config).unwrap();
        assert_eq!(report, run_experiment(&config).unwrap());
        for (row, timeline) in report.rows.iter().zip(&timelines) {
            assert_eq!((&row.model, row.policy), (&timeline.model, timeline.policy));
            let sent: u64 = timeline.per_sec.iter().map(|&n| u64::from(n)).sum();
            let completed: u32 = timeline.completed_per_sec.iter().sum();
            assert_eq!(sent, row.requests);
            assert_eq!(completed as usize, row.completed);
            if row.model == "blip" {
                // No window: the peak is over the whole run, as the timeline's.
                assert_eq!(row.peak_per_sec, timeline.peak());
            }
        }
    }

    #[test]
    fn one_policy_run_alone_gives_the_experiments_row_timeline_and_turns() {
        let config = ExperimentConfig::default().with_agents(25);
        let (report, timelines) = run_experiment_with_timelines(&config).unwrap();
        let policies = config.policies.len();
        for (m, model) in config.models.iter().enumerate() {
            for (p, &policy) in config.policies.iter().enumerate() {
                let run = run_policy(&config, m, policy).unwrap();
                let i = m * policies + p;
                assert_eq!(run.row, report.rows[i], "{} / {policy}", model.name);
                assert_eq!(run.timeline, timelines[i], "{} / {policy}", model.name);
                assert_eq!(run.turns.len(), 25);
                let starts: Vec<u64> = (0..25).map(|a| config.start_ms(a)).collect();
                assert_eq!(
                    run.turns.iter().map(|t| t.start_ms).collect::<Vec<_>>(),
                    starts
                );
                let sent: usize = run.turns.iter().map(|t| t.requests.len()).sum();
                assert_eq!(sent as u64, run.row.requests);
                let completed = run
                    .turns
                    .iter()
                    .filter(|t| t.completed_at.is_some())
                    .count();
                assert_eq!(completed, run.row.completed);
                for turn in &run.turns {
                    assert!(turn.requests.windows(2).all(|w| w[0] <= w[1]));
                    assert!(turn.requests.first().is_none_or(|&t| t >= turn.start_ms));
                    if let (Some(done), Some(&last)) = (turn.completed_at, turn.requests.last()) {
                        assert!(done >= last);
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "not an index")]
    fn a_model_index_out_of_range_is_a_callers_bug() {
        let config = ExperimentConfig::default().with_agents(1);
        let _ = run_policy(&config, config.models.len(), Policy::Rebound);
    }
}
