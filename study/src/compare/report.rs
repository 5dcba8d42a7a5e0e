//! The experiment's results: one [`Row`] per (model, policy), a Markdown table, and the bar.

use super::{ExperimentConfig, OutageModel, Policy};
use rebound_sim::stats::percentile;
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

    /// The two lines that head the [`Report`]'s Markdown table (no final newline): the
    /// columns of [`markdown_row`](Self::markdown_row).
    #[must_use]
    pub fn markdown_header() -> &'static str {
        "| model | policy | success | time to completion p50 | p99 | requests / completed turn \
         | requests / agent | peak requests / s |\n|---|---|---:|---:|---:|---:|---:|---:|"
    }

    /// The row's line of the [`Report`]'s Markdown table (`| model | policy | success |
    /// … |`, no newline): what `rebound sim --compare` prints for it.
    #[must_use]
    pub fn markdown_row(&self) -> String {
        format!(
            "| {} | {} | {:.1} % | {} | {} | {} | {:.2} | {} |",
            self.model,
            self.policy,
            self.success_rate() * 100.0,
            secs(self.p50_ms),
            secs(self.p99_ms),
            self.requests_per_turn()
                .map_or_else(|| "—".to_owned(), |x| format!("{x:.2}")),
            self.requests_per_agent(),
            self.peak_per_sec,
        )
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

/// How much slower and burstier than "rebound, no budget" rebound may recover: each a
/// ratio of rebound's figure to the unbudgeted row's.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RecoveryLimits {
    /// Median time to completion, at most this many times "rebound, no budget"'s.
    pub p50: f64,
    /// 99th percentile time to completion, at most this many times.
    pub p99: f64,
    /// Peak requests per second, at most this many times.
    pub peak: f64,
}

impl RecoveryLimits {
    /// The bar's: median at most 1.5 times, 99th percentile at most twice, peak at most
    /// 1.05 times: recover about as fast as without a budget, without a bigger burst.
    pub const FAST: RecoveryLimits = RecoveryLimits {
        p50: 1.5,
        p99: 2.0,
        peak: 1.05,
    };
}

/// One rule of the bar that rebound's budgeted row broke, with the numbers.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Miss {
    /// A policy (a peer, budgeted or not) has both strictly higher success and strictly
    /// fewer requests per completed turn than rebound.
    Dominated {
        /// The model.
        model: String,
        /// The dominating policy, as the table names it.
        policy: String,
        /// rebound's success (0 to 1).
        rebound_success: f64,
        /// rebound's requests per completed turn (`None`: no turn completed).
        rebound_per_turn: Option<f64>,
        /// The policy's success.
        success: f64,
        /// The policy's requests per completed turn.
        per_turn: Option<f64>,
    },
    /// More requests per agent than the model's [`OutageModel::max_requests_per_agent`].
    RequestsPerAgent {
        /// The model.
        model: String,
        /// rebound's requests per agent.
        got: f64,
        /// The limit.
        limit: f64,
    },
    /// More requests per completed turn than the model's
    /// [`OutageModel::max_requests_per_turn`].
    RequestsPerTurn {
        /// The model.
        model: String,
        /// rebound's requests per completed turn (`None`: no turn completed).
        got: Option<f64>,
        /// The limit.
        limit: f64,
    },
    /// Less success than the model's [`OutageModel::min_success`].
    Success {
        /// The model.
        model: String,
        /// rebound's success (0 to 1).
        got: f64,
        /// The least allowed.
        min: f64,
    },
    /// Less success than the model's [`OutageModel::min_success_of_unbudgeted`] share of
    /// "rebound, no budget"'s.
    SuccessOfUnbudgeted {
        /// The model.
        model: String,
        /// rebound's success (0 to 1).
        got: f64,
        /// "rebound, no budget"'s success.
        unbudgeted: f64,
        /// The share of it required.
        min_share: f64,
    },
    /// A peer's median time to completion is no longer than rebound's, in a model
    /// with [`OutageModel::fastest`].
    Slower {
        /// The model.
        model: String,
        /// The policy at least as fast, as the table names it.
        policy: String,
        /// rebound's median time to completion, in ms (`None`: no turn completed).
        rebound_p50_ms: Option<u64>,
        /// The policy's, in ms.
        p50_ms: u64,
    },
    /// rebound recovered slower or with a higher peak than the model's
    /// [`OutageModel::recovery_of_unbudgeted`] allows.
    Recovery {
        /// The model.
        model: String,
        /// Which figure: `"p50"`, `"p99"` (time to completion) or `"peak"` (requests per
        /// second).
        figure: &'static str,
        /// rebound's (ms, or requests per second; `None`: no turn completed).
        got: Option<u64>,
        /// "rebound, no budget"'s.
        unbudgeted: Option<u64>,
        /// The largest ratio allowed.
        max_ratio: f64,
    },
    /// A rule of the model that needs "rebound, no budget", which did not run.
    Unchecked {
        /// The model.
        model: String,
    },
}

fn pct(x: f64) -> String {
    format!("{:.1} %", x * 100.0)
}

fn per_turn(x: Option<f64>) -> String {
    x.map_or_else(|| "no completed turn".to_owned(), |x| format!("{x:.2}"))
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Miss::Dominated {
                model,
                policy,
                rebound_success,
                rebound_per_turn,
                success,
                per_turn: theirs,
            } => write!(
                f,
                "{model}: dominated by {policy}: {} success at {} requests per completed turn, \
                 against rebound's {} at {}",
                pct(*success),
                per_turn(*theirs),
                pct(*rebound_success),
                per_turn(*rebound_per_turn),
            ),
            Miss::RequestsPerAgent { model, got, limit } => write!(
                f,
                "{model}: {got:.3} requests per agent, more than the limit of {limit}"
            ),
            Miss::RequestsPerTurn {
                model,
                got: Some(got),
                limit,
            } => write!(
                f,
                "{model}: {got:.2} requests per completed turn, more than the limit of {limit}"
            ),
            Miss::RequestsPerTurn {
                model,
                got: None,
                limit,
            } => write!(
                f,
                "{model}: no turn completed, so requests per completed turn exceed the limit \
                 of {limit}"
            ),
            Miss::Success { model, got, min } => write!(
                f,
                "{model}: {} success, less than the required {}",
                pct(*got),
                pct(*min)
            ),
            Miss::SuccessOfUnbudgeted {
                model,
                got,
                unbudgeted,
                min_share,
            } => write!(
                f,
                "{model}: {} success, less than {:.0} % of rebound without a budget's {} \
                 (at least {})",
                pct(*got),
                min_share * 100.0,
                pct(*unbudgeted),
                pct(min_share * unbudgeted),
            ),
            Miss::Slower {
                model,
                policy,
                rebound_p50_ms,
                p50_ms,
            } => write!(
                f,
                "{model}: {policy} completes its median turn in {}, rebound in {}",
                secs(Some(*p50_ms)),
                secs(*rebound_p50_ms),
            ),
            Miss::Recovery {
                model,
                figure,
                got,
                unbudgeted,
                max_ratio,
            } => {
                let show = |x: &Option<u64>| match (*figure, x) {
                    ("peak", Some(n)) => format!("{n} requests per second"),
                    (_, x) => secs(*x),
                };
                write!(
                    f,
                    "{model}: {figure} of {}, more than {max_ratio} times rebound without a \
                     budget's {}",
                    show(got),
                    show(unbudgeted),
                )
            }
            Miss::Unchecked { model } => write!(
                f,
                "{model}: not checked: its limit compares rebound with \"rebound, no budget\", \
                 which did not run"
            ),
        }
    }
}

/// Whether rebound (with its budget) met the bar.
///
/// The bar, in every model of the bar ([`OutageModel::in_bar`]): no policy other than
/// rebound's own rows has both strictly higher success and strictly fewer requests per
/// completed turn than rebound ([`Row::dominates`]); and the model's own limits hold —
/// [`OutageModel::max_requests_per_agent`], [`OutageModel::max_requests_per_turn`],
/// [`OutageModel::min_success`], [`OutageModel::min_success_of_unbudgeted`],
/// [`OutageModel::fastest`].
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Every rule broken, model by model in table order.
    pub misses: Vec<Miss>,
    /// Whether rebound ran at all (the bar needs its rows).
    pub rebound_ran: bool,
}

impl Verdict {
    /// No rule broken, and rebound ran.
    #[must_use]
    pub fn met(&self) -> bool {
        self.rebound_ran && self.misses.is_empty()
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
            misses: Vec::new(),
            rebound_ran: false,
        };
        for rebound in self.rows.iter().filter(|r| r.policy == Policy::Rebound) {
            verdict.rebound_ran = true;
            let Some(model) = self.config.models.iter().find(|m| m.name == rebound.model) else {
                panic!(
                    "invariant: every row belongs to a model of the report's configuration, \
                     but {:?} does not",
                    rebound.model
                );
            };
            if !model.in_bar {
                continue;
            }
            verdict
                .misses
                .extend(model_misses(model, rebound, &self.rows));
        }
        verdict
    }
}

/// The rules `rebound` (its row in `model`) breaks, given every row of the report.
fn model_misses(model: &OutageModel, rebound: &Row, rows: &[Row]) -> Vec<Miss> {
    let name = || model.name.clone();
    let mut misses = Vec::new();
    for other in rows
        .iter()
        .filter(|r| r.model == rebound.model && !r.policy.is_rebound())
    {
        if other.dominates(rebound) {
            misses.push(Miss::Dominated {
                model: name(),
                policy: other.policy.to_string(),
                rebound_success: rebound.success_rate(),
                rebound_per_turn: rebound.requests_per_turn(),
                success: other.success_rate(),
                per_turn: other.requests_per_turn(),
            });
        }
    }
    if let Some(limit) = model.max_requests_per_agent {
        if rebound.requests_per_agent() > limit {
            misses.push(Miss::RequestsPerAgent {
                model: name(),
                got: rebound.requests_per_agent(),
                limit,
            });
        }
    }
    if let Some(limit) = model.max_requests_per_turn {
        let got = rebound.requests_per_turn();
        if got.is_none_or(|x| x > limit) {
            misses.push(Miss::RequestsPerTurn {
                model: name(),
                got,
                limit,
            });
        }
    }
    if let Some(min) = model.min_success {
        if rebound.success_rate() < min {
            misses.push(Miss::Success {
                model: name(),
                got: rebound.success_rate(),
                min,
            });
        }
    }
    if model.fastest {
        for other in rows
            .iter()
            .filter(|r| r.model == rebound.model && !r.policy.is_rebound())
        {
            let Some(p50_ms) = other.p50_ms else { continue };
            if rebound.p50_ms.is_none_or(|ours| ours >= p50_ms) {
                misses.push(Miss::Slower {
                    model: name(),
                    policy: other.policy.to_string(),
                    rebound_p50_ms: rebound.p50_ms,
                    p50_ms,
                });
            }
        }
    }
    if model.min_success_of_unbudgeted.is_some() || model.recovery_of_unbudgeted.is_some() {
        match rows
            .iter()
            .find(|r| r.model == rebound.model && r.policy == Policy::ReboundWithoutBudget)
        {
            Some(unbudgeted) => {
                if let Some(min_share) = model.min_success_of_unbudgeted {
                    if rebound.success_rate() < min_share * unbudgeted.success_rate() {
                        misses.push(Miss::SuccessOfUnbudgeted {
                            model: name(),
                            got: rebound.success_rate(),
                            unbudgeted: unbudgeted.success_rate(),
                            min_share,
                        });
                    }
                }
                if let Some(limits) = model.recovery_of_unbudgeted {
                    misses.extend(recovery_misses(&name(), limits, rebound, unbudgeted));
                }
            }
            None => misses.push(Miss::Unchecked { model: name() }),
        }
    }
    misses
}

/// Reads one figure of a row.
type Figure = fn(&Row) -> Option<u64>;

/// The [`RecoveryLimits`] rebound's row breaks against "rebound, no budget"'s.
fn recovery_misses(
    model: &str,
    limits: RecoveryLimits,
    rebound: &Row,
    unbudgeted: &Row,
) -> Vec<Miss> {
    let peak = |r: &Row| Some(u64::from(r.peak_per_sec));
    let figures: [(&'static str, Figure, f64); 3] = [
        ("p50", |r| r.p50_ms, limits.p50),
        ("p99", |r| r.p99_ms, limits.p99),
        ("peak", peak, limits.peak),
    ];
    figures
        .into_iter()
        .filter_map(|(figure, of, max_ratio)| {
            let (got, theirs) = (of(rebound), of(unbudgeted));
            let within = match (got, theirs) {
                // Nothing completed without a budget: any completion is within.
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(got), Some(theirs)) => got as f64 <= max_ratio * theirs as f64,
            };
            (!within).then(|| Miss::Recovery {
                model: model.to_owned(),
                figure,
                got,
                unbudgeted: theirs,
                max_ratio,
            })
        })
        .collect()
}

/// The bar in words, from the models' limits.
fn bar_in_words(models: &[OutageModel]) -> String {
    let mut rules = vec![
        "in every model of the bar, no peer has both higher success and fewer requests per \
         completed turn than rebound"
            .to_owned(),
    ];
    for m in models.iter().filter(|m| m.in_bar) {
        let mut limits = Vec::new();
        if let Some(x) = m.max_requests_per_agent {
            limits.push(format!("at most {x} requests per agent"));
        }
        if let Some(x) = m.min_success {
            limits.push(format!("at least {} success", pct(x)));
        }
        if let Some(x) = m.max_requests_per_turn {
            limits.push(format!("at most {x} requests per completed turn"));
        }
        if m.fastest {
            limits.push("a shorter median time to completion than every other policy".to_owned());
        }
        if let Some(x) = m.min_success_of_unbudgeted {
            limits.push(format!(
                "at least {:.0} % of \"rebound, no budget\"'s success",
                x * 100.0
            ));
        }
        if let Some(r) = m.recovery_of_unbudgeted {
            limits.push(format!(
                "a median time to completion at most {}, a 99th percentile at most {} and a \
                 peak request rate at most {} times \"rebound, no budget\"'s",
                r.p50, r.p99, r.peak
            ));
        }
        if !limits.is_empty() {
            rules.push(format!("{}: {}", m.name, limits.join(" and ")));
        }
    }
    rules.join("; ")
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
                 {} per success, {} per request whose retry is answered, refill {}/s, a retry \
                 waits up to {} ms for a token.\n",
                b.capacity,
                b.initial,
                b.deposit_per_request,
                b.deposit_per_success,
                b.deposit_per_answered_retry,
                b.refill_per_sec,
                u.max_wait_ms
            )?,
            _ => writeln!(f, "; no retry budget.\n")?,
        }
        writeln!(f, "{}", Row::markdown_header())?;
        for r in &self.rows {
            writeln!(f, "{}", r.markdown_row())?;
        }
        let v = self.verdict();
        writeln!(f)?;
        if !v.rebound_ran {
            return writeln!(f, "The bar was not checked: rebound did not run.");
        }
        writeln!(
            f,
            "The bar ({}): **{}**.",
            bar_in_words(&c.models),
            if v.met() { "met" } else { "not met" }
        )?;
        for miss in &v.misses {
            writeln!(f, "- {miss}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::Peer;

    fn row(model: &str, policy: Policy, completed: usize, requests: u64) -> Row {
        Row {
            model: model.to_owned(),
            policy,
            agents: 100,
            completed,
            requests,
            p50_ms: None,
            p99_ms: None,
            peak_per_sec: 0,
            in_bar: true,
            max_requests_per_agent: None,
        }
    }

    fn report(rows: Vec<Row>) -> Report {
        Report::new(&ExperimentConfig::default(), rows)
    }

    #[test]
    fn a_row_prints_as_its_line_of_the_table() {
        let mut r = row("blip", Policy::Rebound, 50, 300);
        r.p50_ms = Some(1_234);
        r.p99_ms = Some(20_050);
        r.peak_per_sec = 17;
        assert_eq!(
            r.markdown_row(),
            "| blip | **rebound** | 50.0 % | 1.2 s | 20.1 s | 6.00 | 3.00 | 17 |"
        );
        let none = row("blip", Policy::Peer(Peer::NoRetries), 0, 100);
        assert_eq!(
            none.markdown_row(),
            "| blip | no retries | 0.0 % | — | — | — | 1.00 | 0 |"
        );
        let table = report(vec![r.clone(), none.clone()]).to_string();
        let lines: Vec<&str> = table.lines().collect();
        let header = lines
            .iter()
            .position(|l| l.starts_with("| model |"))
            .unwrap();
        assert_eq!(
            lines[header..header + 4].join("\n"),
            format!(
                "{}\n{}\n{}",
                Row::markdown_header(),
                r.markdown_row(),
                none.markdown_row()
            )
        );
        assert_eq!(
            Row::markdown_header()
                .lines()
                .next()
                .unwrap()
                .matches('|')
                .count(),
            r.markdown_row().matches('|').count()
        );
    }

    #[test]
    fn a_budgeted_peer_that_dominates_rebound_is_named_with_both_rows_numbers() {
        let v = report(vec![
            row("blip", Policy::Rebound, 50, 300),
            row("blip", Policy::ReboundWithoutBudget, 100, 200),
            row("blip", Policy::Peer(Peer::GrpcThrottled), 60, 240),
            row("blip", Policy::Peer(Peer::NoRetries), 40, 100),
        ])
        .verdict();
        assert!(!v.met());
        assert_eq!(v.misses.len(), 1, "{:?}", v.misses);
        assert_eq!(
            v.misses[0].to_string(),
            "blip: dominated by grpc (A6 retry throttling): 60.0 % success at 4.00 requests \
             per completed turn, against rebound's 50.0 % at 6.00"
        );
    }

    #[test]
    fn the_shared_rate_limit_needs_every_turn_done_in_at_most_one_and_a_half_requests() {
        let v = report(vec![row("rate-limit-shared", Policy::Rebound, 90, 180)]).verdict();
        let text: Vec<String> = v.misses.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "rate-limit-shared: 2.00 requests per completed turn, more than the limit of 1.5",
                "rate-limit-shared: 90.0 % success, less than the required 100.0 %",
            ]
        );
        assert!(
            report(vec![row("rate-limit-shared", Policy::Rebound, 100, 150)])
                .verdict()
                .met()
        );
    }

    #[test]
    fn with_a_fallback_at_hand_rebound_must_finish_before_every_peer() {
        let timed = |policy, p50_ms| Row {
            p50_ms,
            ..row("long-retry-after-fallback", policy, 100, 200)
        };
        let slow = report(vec![
            timed(Policy::Rebound, Some(91_700)),
            // rebound's own rows are not rivals.
            timed(Policy::ReboundWithoutBudget, Some(1_600)),
            timed(Policy::Peer(Peer::OpenAiPython), Some(91_700)),
            // A peer that completed nothing has no time to beat.
            Row {
                completed: 0,
                ..timed(Policy::Peer(Peer::VercelAi), None)
            },
        ])
        .verdict();
        let text: Vec<String> = slow.misses.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "long-retry-after-fallback: openai-python completes its median turn in 91.7 s, \
              rebound in 91.7 s"
            ]
        );
        let fast = report(vec![
            timed(Policy::Rebound, Some(1_600)),
            timed(Policy::Peer(Peer::OpenAiPython), Some(91_700)),
        ]);
        assert!(fast.verdict().met());
    }

    #[test]
    fn shared_short_failures_compare_rebound_with_itself_without_a_budget() {
        let v = report(vec![
            row("3s-outage-shared", Policy::Rebound, 98, 100),
            row("3s-outage-shared", Policy::ReboundWithoutBudget, 100, 200),
        ])
        .verdict();
        assert_eq!(
            v.misses,
            [Miss::SuccessOfUnbudgeted {
                model: "3s-outage-shared".to_owned(),
                got: 0.98,
                unbudgeted: 1.0,
                min_share: 0.99,
            }]
        );
        assert_eq!(
            v.misses[0].to_string(),
            "3s-outage-shared: 98.0 % success, less than 99 % of rebound without a budget's \
             100.0 % (at least 99.0 %)"
        );
        // 99 % of it is enough; and without the row the rule cannot pass.
        let enough = report(vec![
            row("3s-outage-shared", Policy::Rebound, 99, 100),
            row("3s-outage-shared", Policy::ReboundWithoutBudget, 100, 200),
        ]);
        assert!(enough.verdict().met());
        let alone = report(vec![row("3s-outage-shared", Policy::Rebound, 99, 100)]).verdict();
        assert!(matches!(alone.misses[..], [Miss::Unchecked { .. }]));
    }

    #[test]
    fn the_total_outage_still_limits_requests_per_agent() {
        let v = report(vec![row("total-outage", Policy::Rebound, 0, 121)]).verdict();
        assert_eq!(
            v.misses[0].to_string(),
            "total-outage: 1.210 requests per agent, more than the limit of 1.2"
        );
    }

    #[test]
    fn a_shared_blip_must_recover_about_as_fast_as_without_a_budget_and_no_burstier() {
        let timed = |policy, p50, p99, peak| Row {
            p50_ms: Some(p50),
            p99_ms: Some(p99),
            peak_per_sec: peak,
            ..row("blip-shared", policy, 100, 300)
        };
        let unbudgeted = timed(Policy::ReboundWithoutBudget, 2_900, 3_200, 300);
        let v = report(vec![
            timed(Policy::Rebound, 4_400, 6_400, 316),
            unbudgeted.clone(),
        ])
        .verdict();
        let shown: Vec<String> = v.misses.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "blip-shared: p50 of 4.4 s, more than 1.5 times rebound without a budget's 2.9 s",
                "blip-shared: peak of 316 requests per second, more than 1.05 times rebound \
                 without a budget's 300 requests per second"
            ]
        );
        // At the limits (1.5, 2 and 1.05 times) it is met.
        let v = report(vec![timed(Policy::Rebound, 4_350, 6_400, 315), unbudgeted]).verdict();
        assert!(v.met(), "{:?}", v.misses);
    }
}
