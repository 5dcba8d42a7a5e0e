//! Walking a scenario request by request: the [`ScriptCursor`].

use rebound_core::wire;
use rebound_core::{Conversation, Millis, ProviderKind, Role};

use super::{Answer, Fault, FaultKind, Scenario, SummaryScript, WeightedFault};
use std::collections::BTreeMap;

/// What the provider does with one request, as decided by a [`ScriptCursor`].
#[derive(Debug, Clone, PartialEq)]
pub enum Planned<'s> {
    /// The attempt fails with this fault.
    Fault(&'s Fault),
    /// The conversation is over the scenario's `context_limit_bytes`.
    Overflow {
        /// The conversation's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A summary request, answered with this script's summary.
    Summary(&'s SummaryScript),
    /// The attempt succeeds with this answer.
    Answer {
        /// Index of the turn answered; `turns.len()` for the final `"Done."`.
        turn: usize,
        /// Whether this is the turn's `when_last_tool_error` answer.
        alternate: bool,
        /// The answer (`None`: the scenario is used up; answer [`final_answer`](super::final_answer)).
        answer: Option<&'s Answer>,
    },
}

/// Walks a scenario request by request; shared by the simulator and a fake provider server.
///
/// It owns only a position and the RNG of the random fault model (seeded from the run's
/// seed), so the same scenario and seed give the same plan for the same requests.
///
/// ```
/// use rebound_core::{Conversation, Message, Millis};
/// use rebound_sim::scenario::{Planned, Scenario, ScriptCursor};
///
/// let s = Scenario::builtin("blip").unwrap();
/// let mut cursor = ScriptCursor::new(7);
/// let mut conversation = Conversation::new();
/// conversation.push(Message::user_text("hi"));
/// assert!(matches!(cursor.next(&s, Millis(0), &conversation), Planned::Fault(_)));
/// assert!(matches!(cursor.next(&s, Millis(0), &conversation), Planned::Fault(_)));
/// assert!(matches!(cursor.next(&s, Millis(0), &conversation), Planned::Answer { turn: 0, .. }));
/// ```
#[derive(Debug, Clone)]
pub struct ScriptCursor {
    turn: usize,
    fault: usize,
    summary_fault: usize,
    rng: fastrand::Rng,
}

impl ScriptCursor {
    /// A cursor at the start, its random fault model seeded from `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        ScriptCursor {
            turn: 0,
            fault: 0,
            summary_fault: 0,
            // A different stream from the machine's jitter RNG, which uses `seed` itself.
            rng: fastrand::Rng::with_seed(seed ^ 0x5ce7_a810_fa17_5eed),
        }
    }

    /// Index of the next turn to answer.
    #[must_use]
    pub fn turn(&self) -> usize {
        self.turn
    }

    /// Decides what the request sent at `now` with `conversation` gets, and moves on, for a
    /// request to the primary target (see [`next_on`](Self::next_on)).
    pub fn next<'s>(
        &mut self,
        scenario: &'s Scenario,
        now: Millis,
        conversation: &Conversation,
    ) -> Planned<'s> {
        self.next_on(scenario, now, conversation, 0)
    }

    /// Decides what a request sent at `now` with `conversation` to target `target` of the
    /// fallback chain gets, and moves on. Outages with a `target` hit only that target;
    /// scripted turn faults and the random mix hit every target.
    pub fn next_on<'s>(
        &mut self,
        scenario: &'s Scenario,
        now: Millis,
        conversation: &Conversation,
        target: usize,
    ) -> Planned<'s> {
        if let Some(limit) = scenario.context_limit_bytes {
            let bytes = conversation.approx_bytes();
            if bytes > limit {
                return Planned::Overflow { bytes, limit };
            }
        }
        if let Some(random) = &scenario.random {
            for o in &random.outages {
                let aimed = o.target.is_none_or(|t| t == target);
                if aimed && (o.from_ms..o.until_ms).contains(&now.0) {
                    let hit = match o.rate {
                        None => true,
                        Some(rate) => self.rng.f64() < rate,
                    };
                    if hit {
                        return Planned::Fault(&o.fault);
                    }
                }
            }
            if random.failure_rate > 0.0 && self.rng.f64() < random.failure_rate {
                if let Some(f) = pick(&random.mix, &mut self.rng) {
                    return Planned::Fault(f);
                }
                return Planned::Fault(&DEFAULT_RANDOM_FAULT);
            }
        }
        if rebound_core::compaction::is_summary_request(conversation) {
            if let Some(f) = scenario.summary.faults.get(self.summary_fault) {
                self.summary_fault += 1;
                return Planned::Fault(f);
            }
            return Planned::Summary(&scenario.summary);
        }
        let Some(turn) = scenario.turns.get(self.turn) else {
            return Planned::Answer {
                turn: self.turn,
                alternate: false,
                answer: None,
            };
        };
        if let Some(f) = turn.faults.get(self.fault) {
            self.fault += 1;
            return Planned::Fault(f);
        }
        let index = self.turn;
        self.turn += 1;
        self.fault = 0;
        match &turn.when_last_tool_error {
            Some(alt) if last_tool_result_failed(scenario.provider, conversation) => {
                Planned::Answer {
                    turn: index,
                    alternate: true,
                    answer: Some(alt),
                }
            }
            _ => Planned::Answer {
                turn: index,
                alternate: false,
                answer: Some(&turn.answer),
            },
        }
    }
}

static DEFAULT_RANDOM_FAULT: Fault = Fault {
    kind: FaultKind::Http {
        status: 529,
        headers: BTreeMap::new(),
        error_type: None,
        message: None,
    },
    after_ms: None,
};

fn pick<'s>(mix: &'s [WeightedFault], rng: &mut fastrand::Rng) -> Option<&'s Fault> {
    let total: u64 = mix.iter().map(|w| u64::from(w.weight)).sum();
    if total == 0 {
        return None;
    }
    let mut x = rng.u64(0..total);
    for w in mix {
        let weight = u64::from(w.weight);
        if x < weight {
            return Some(&w.fault);
        }
        x -= weight;
    }
    None
}

/// Whether the conversation, as `provider` receives it, ends with a user message holding an
/// error tool result: never where the wire carries no error flag
/// ([`wire::carries_tool_error_flag`]), so a scripted model behind OpenAI's formats never
/// answers `when_last_tool_error`, as over HTTP.
#[must_use]
pub fn last_tool_result_failed(provider: ProviderKind, conversation: &Conversation) -> bool {
    wire::carries_tool_error_flag(provider)
        && conversation
            .last()
            .is_some_and(|m| m.role == Role::User && m.tool_results().any(|r| r.is_error))
}
