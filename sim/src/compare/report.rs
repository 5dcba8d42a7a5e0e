//! The experiment's results: one [`Row`] per (model, policy), a Markdown table, and the bar.

use super::{ExperimentConfig, OutageModel, Policy};
use crate::stats::percentile;
use std::fmt;

/// One agent's turn, as the summary needs it.
pub(super) struct TurnView<'a> {
    pub(super) start_ms: u64,
    pub(super) requests: &'a [u64],
    pub(super) completed_at: Option<u64>,
}

/// The metrics of one policy in one outage model.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The model's name.
    pub model: String,
    /// Who retried.
    pub policy: Policy,
    /// Agents (one turn each).
    pub agents: usize,
    /// Turns that completed.
    pub completed: usize,
    /// Requests sent, over all agents.
    pub requests: u64,
    /// Virtual time from an agent's start to its turn's completion, over completed turns:
    /// the median, in ms (`None` when no turn completed).
    pub p50_ms: Option<u64>,
    /// The same, 99th percentile (nearest rank).
    pub p99_ms: Option<u64>,
    /// The most requests sent by all agents together in any one second of the model's
    /// window (see [`OutageModel::window_ms`]).
    pub peak_per_sec: u32,
    /// Whether the bar applies to the model.
    pub in_bar: bool,
    /// The model's amplification limit for rebound, if any.
    pub max_requests_per_agent: Option<f64>,
}

impl Row {
    pub(super) fn summarize(model: &OutageModel, policy: Policy, turns: &[TurnView<'_>]) -> Row {
        let mut times: Vec<u64> = turns
            .iter()
            .filter_map(|t| t.completed_at.map(|c| c.saturating_sub(t.start_ms)))
            .collect();
        times.sort_unstable();
        let (from, until) = model.window_ms.unwrap_or((
            0,
            turns
                .iter()
                .flat_map(|t| t.requests.iter().copied())
                .max()
                .unwrap_or(0)
                .saturating_add(1),
        ));
        let seconds = usize::try_from(until.saturating_sub(from).div_ceil(1_000)).unwrap_or(0);
        let mut buckets = vec![0u32; seconds];
        for &at in turns.iter().flat_map(|t| t.requests) {
            if (from..until).contains(&at) {
                if let Some(b) = buckets.get_mut(((at - from) / 1_000) as usize) {
                    *b += 1;
                }
            }
        }
        Row {
            model: model.name.clone(),
            policy,
            agents: turns.len(),
            completed: times.len(),
            requests: turns.iter().map(|t| t.requests.len() as u64).sum(),
            p50_ms: (!times.is_empty()).then(|| percentile(&times, 50.0)),
            p99_ms: (!times.is_empty()).then(|| percentile(&times, 99.0)),
            peak_per_sec: buckets.into_iter().max().unwrap_or(0),
            in_bar: model.in_bar,
            max_requests_per_agent: model.max_requests_per_agent,
        }
    }

    /// Completed turns over agents.
    #[must_use]
    pub fn success_rate(&self) -> f64 {
        if self.agents == 0 {
            0.0
        } else {
            self.completed as f64 / self.agents as f64
        }
    }

    /// Requests per completed turn (the amplification); `None` when no turn completed.
    #[must_use]
    pub fn requests_per_turn(&self) -> Option<f64> {
        (self.completed > 0).then(|| self.requests as f64 / self.completed as f64)
    }

    /// Requests per agent.
    #[must_use]
    pub fn requests_per_agent(&self) -> f64 {
        if self.agents == 0 {
            0.0
        } else {
            self.requests as f64 / self.agents as f64
        }
    }

    /// Whether this row Pareto-dominates `other` in the bar's sense: strictly higher
    /// success *and* strictly fewer requests per completed turn (a row that completed
    /// nothing has infinitely many).
    #[must_use]
    pub fn dominates(&self, other: &Row) -> bool {
        let per_turn = |r: &Row| r.requests_per_turn().unwrap_or(f64::INFINITY);
        self.success_rate() > other.success_rate() && per_turn(self) < per_turn(other)
    }
}

/// Whether rebound (with its budget) met the bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `(model, peer)` pairs where the peer Pareto-dominates rebound, in models of the bar.
    pub dominated_by: Vec<(String, String)>,
    /// `(model, requests per agent, limit)` where rebound sent more than the model allows.
    pub over_limit: Vec<(String, f64, f64)>,
    /// Whether rebound ran at all (the bar needs its rows).
    pub rebound_ran: bool,
}

impl Verdict {
    /// No domination, no limit exceeded, and rebound ran.
    #[must_use]
    pub fn met(&self) -> bool {
        self.rebound_ran && self.dominated_by.is_empty() && self.over_limit.is_empty()
    }
}

/// Every row of an experiment, printable as Markdown.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The configuration that produced it.
    pub config: ExperimentConfig,
    /// One row per (model, policy), models in order, policies in order within a model.
    pub rows: Vec<Row>,
}

impl Report {
    pub(super) fn new(config: &ExperimentConfig, rows: Vec<Row>) -> Report {
        Report {
            config: config.clone(),
            rows,
        }
    }

    /// Checks the bar on rebound's budgeted rows.
    #[must_use]
    pub fn verdict(&self) -> Verdict {
        let mut verdict = Verdict {
            dominated_by: Vec::new(),
            over_limit: Vec::new(),
            rebound_ran: false,
        };
        for rebound in self.rows.iter().filter(|r| r.policy == Policy::Rebound) {
            verdict.rebound_ran = true;
            if !rebound.in_bar {
                continue;
            }
            for peer in self
                .rows
                .iter()
                .filter(|r| r.model == rebound.model && !r.policy.is_rebound())
            {
                if peer.dominates(rebound) {
                    verdict
                        .dominated_by
                        .push((rebound.model.clone(), peer.policy.to_string()));
                }
            }
            if let Some(limit) = rebound.max_requests_per_agent {
                if rebound.requests_per_agent() > limit {
                    verdict.over_limit.push((
                        rebound.model.clone(),
                        rebound.requests_per_agent(),
                        limit,
                    ));
                }
            }
        }
        verdict
    }
}

fn secs(ms: Option<u64>) -> String {
    ms.map_or_else(
        || "—".to_owned(),
        |ms| format!("{:.1} s", ms as f64 / 1000.0),
    )
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let retry = &c.machine.retry;
        writeln!(
            f,
            "{} agents per model, starting evenly over the first {:.0} s; seed {}.",
            c.agents,
            c.stagger_ms as f64 / 1000.0,
            c.seed
        )?;
        write!(
            f,
            "rebound: {} attempts, backoff {} ms doubling to {} ms{}",
            retry.max_attempts,
            retry.initial_delay_ms,
            retry.max_delay_ms,
            if retry.jitter { " (jittered)" } else { "" },
        )?;
        match (&c.budget, c.machine.retry_budget) {
            (Some(b), Some(u)) => writeln!(
                f,
                "; budget per process: capacity {}, initial {}, deposit {} per first attempt, \
                 refill {}/s, a retry waits up to {} ms for a token.\n",
                b.capacity, b.initial, b.deposit_per_request, b.refill_per_sec, u.max_wait_ms
            )?,
            _ => writeln!(f, "; no retry budget.\n")?,
        }
        writeln!(
            f,
            "| model | policy | success | time to completion p50 | p99 | requests / completed turn | requests / agent | peak requests / s |"
        )?;
        writeln!(f, "|---|---|---:|---:|---:|---:|---:|---:|")?;
        for r in &self.rows {
            writeln!(
                f,
                "| {} | {} | {:.1} % | {} | {} | {} | {:.2} | {} |",
                r.model,
                r.policy,
                r.success_rate() * 100.0,
                secs(r.p50_ms),
                secs(r.p99_ms),
                r.requests_per_turn()
                    .map_or_else(|| "—".to_owned(), |x| format!("{x:.2}")),
                r.requests_per_agent(),
                r.peak_per_sec,
            )?;
        }
        let v = self.verdict();
        writeln!(f)?;
        if !v.rebound_ran {
            return writeln!(f, "The bar was not checked: rebound did not run.");
        }
        writeln!(
            f,
            "The bar (no peer has both higher success and fewer requests per completed turn \
             than rebound in any model of the bar; at most the model's limit of requests per \
             agent): **{}**.",
            if v.met() { "met" } else { "not met" }
        )?;
        for (model, peer) in &v.dominated_by {
            writeln!(f, "- {model}: dominated by {peer}")?;
        }
        for (model, got, limit) in &v.over_limit {
            writeln!(
                f,
                "- {model}: {got:.3} requests per agent, more than {limit}"
            )?;
        }
        Ok(())
    }
}
