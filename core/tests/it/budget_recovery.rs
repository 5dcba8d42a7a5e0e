//! A fleet sharing one retry budget recovers from an outage of any length: the retries that
//! queued during it drain, once the provider answers again, at least at the rate it served
//! before the outage, so every waiter whose wait limit outlasts that drain is granted.
//!
//! The fleet is modelled at the budget's boundary, as the machines and a driver would use it:
//! before the outage, first attempts at a steady rate, each succeeding shortly after; at the
//! outage's start, every agent's request fails and asks for a charged retry (waiting up to
//! 15 s, as `MachineConfig::resilient` does); a retry granted during the outage fails and
//! asks again after a backoff; a retry granted after it is answered, then succeeds. Nobody
//! starts a new request during the outage: the agents are all stuck in it, so the fleet asks
//! the budget for little while it lasts.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use rebound_core::{
    BudgetConfig, BudgetNote, Millis, PermitAsk, PermitDecision, PermitKind, RetryBudget, Ticket,
};
use std::collections::{BTreeMap, BTreeSet};

/// How long a retry waits for a token (`MachineConfig::resilient`'s `max_wait_ms`).
const WAIT_MS: u64 = 15_000;
/// From a request to its answer's first byte, and to its success.
const ANSWER_MS: u64 = 100;
const SUCCESS_MS: u64 = 300;
/// A retry that failed asks again this long after.
const BACKOFF_MS: u64 = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Happening {
    /// A first attempt before the outage (it succeeds `SUCCESS_MS` later).
    FirstAttempt,
    /// A request succeeded.
    Succeeded,
    /// A retry of a request is being answered.
    RetryAnswered,
    /// Agent `n` asks for a charged retry.
    Ask(usize),
    /// The budget's own wake-up.
    Tick,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    Waiting { deadline: Millis },
    Sending,
    Done,
    Denied { deadline: Millis, at: Millis },
}

struct Fleet {
    budget: RetryBudget,
    agents: Vec<Agent>,
    /// (time, order of scheduling) -> what happens then.
    agenda: BTreeMap<(Millis, u64), Happening>,
    scheduled: u64,
    recovery: Millis,
    next_ticket: u64,
    /// Which agent each queued ticket belongs to.
    tickets: BTreeMap<Ticket, usize>,
    /// When a wake-up is scheduled.
    ticks: BTreeSet<Millis>,
}

impl Fleet {
    fn at(&mut self, t: Millis, what: Happening) {
        self.scheduled += 1;
        self.agenda.insert((t, self.scheduled), what);
    }

    fn granted(&mut self, now: Millis, agent: usize) {
        self.agents[agent] = Agent::Sending;
        if now >= self.recovery {
            self.at(now.plus(ANSWER_MS), Happening::RetryAnswered);
            self.at(now.plus(SUCCESS_MS), Happening::Succeeded);
            self.agents[agent] = Agent::Done;
        } else {
            // Sent into the outage: fails, and asks again after a backoff.
            self.at(now.plus(ANSWER_MS + BACKOFF_MS), Happening::Ask(agent));
        }
    }

    fn decided(&mut self, now: Millis, agent: usize, decision: PermitDecision) {
        match decision {
            PermitDecision::Granted => self.granted(now, agent),
            PermitDecision::Denied => {
                let Agent::Waiting { deadline } = self.agents[agent] else {
                    panic!("agent {agent} denied while {:?}", self.agents[agent]);
                };
                self.agents[agent] = Agent::Denied { deadline, at: now };
            }
            PermitDecision::WaitUntil(_) => panic!("nobody noted a rate limit"),
            other => panic!("unexpected decision {other:?}"),
        }
    }

    fn drain(&mut self, now: Millis) {
        while let Some((ticket, decision)) = self.budget.poll_decision() {
            let agent = self.tickets.remove(&ticket).expect("a queued ticket");
            self.decided(now, agent, decision);
        }
        // One wake-up at the budget's next, unless one is due at or before it already.
        if let Some(at) = self.budget.next_wakeup() {
            if self.ticks.range(..=at).next().is_none() {
                self.ticks.insert(at);
                self.at(at, Happening::Tick);
            }
        }
    }

    fn run(&mut self) {
        while let Some(((now, _), what)) = self.agenda.pop_first() {
            match what {
                Happening::FirstAttempt => {
                    let ask = PermitAsk {
                        kind: PermitKind::FirstAttempt,
                        target: 0,
                        deadline: now,
                        since: now,
                    };
                    self.next_ticket += 1;
                    let decision = self.budget.request(now, Ticket(self.next_ticket), ask);
                    assert_eq!(decision, Some(PermitDecision::Granted));
                    self.at(now.plus(SUCCESS_MS), Happening::Succeeded);
                }
                Happening::Succeeded => {
                    self.budget.record(now, BudgetNote::Succeeded { target: 0 })
                }
                Happening::RetryAnswered => self
                    .budget
                    .record(now, BudgetNote::RetryAnswered { target: 0 }),
                Happening::Ask(agent) => {
                    let deadline = now.plus(WAIT_MS);
                    self.agents[agent] = Agent::Waiting { deadline };
                    let ask = PermitAsk {
                        kind: PermitKind::Charged,
                        target: 0,
                        deadline,
                        since: Millis(agent as u64),
                    };
                    self.next_ticket += 1;
                    let ticket = Ticket(self.next_ticket);
                    match self.budget.request(now, ticket, ask) {
                        Some(decision) => self.decided(now, agent, decision),
                        None => {
                            self.tickets.insert(ticket, agent);
                        }
                    }
                }
                Happening::Tick => {
                    self.ticks.remove(&now);
                    self.budget.tick(now);
                }
            }
            self.drain(now);
        }
    }
}

/// Runs a fleet: `rate` first attempts a second for `before_s` seconds, then an outage of
/// `outage_ms` in which `agents` retries queue; returns the agents' ends and the recovery.
fn recover(rate: u64, before_s: u64, outage_ms: u64, agents: usize) -> (Vec<Agent>, Millis) {
    let start = Millis(before_s * 1_000);
    let recovery = start.plus(outage_ms);
    let mut fleet = Fleet {
        budget: RetryBudget::new(BudgetConfig::default()),
        agents: vec![Agent::Sending; agents],
        agenda: BTreeMap::new(),
        scheduled: 0,
        recovery,
        next_ticket: 0,
        tickets: BTreeMap::new(),
        ticks: BTreeSet::new(),
    };
    for k in 0..rate * before_s {
        fleet.at(Millis(k * 1_000 / rate), Happening::FirstAttempt);
    }
    // Each agent's request in flight when the outage starts fails within half a second.
    for agent in 0..agents {
        let failed = start.plus(agent as u64 * 500 / agents as u64);
        fleet.at(failed.plus(BACKOFF_MS), Happening::Ask(agent));
    }
    fleet.run();
    (fleet.agents, recovery)
}

/// Every denied agent's wait limit ended before the queue alive at the recovery could drain
/// at `rate` (plus the time the budget needs to hear that retries work again: one refill
/// grant, two seconds at the default's half a token a second, and its answer).
fn assert_drained_at(rate: u64, agents: &[Agent], recovery: Millis) {
    let alive = agents
        .iter()
        .filter(|a| match a {
            Agent::Denied { at, .. } => *at >= recovery,
            _ => true,
        })
        .count() as u64;
    let drained = recovery.plus(2_000 + ANSWER_MS + 1_000 + alive * 1_000 / rate);
    for (n, agent) in agents.iter().enumerate() {
        match agent {
            Agent::Done => {}
            Agent::Denied { deadline, at } => assert!(
                *deadline < drained,
                "agent {n} was denied at {at:?} (its deadline) although the provider recovered \
                 at {recovery:?} and {alive} waiters drain at {rate} a second by {drained:?}"
            ),
            other => panic!("agent {n} ended {other:?}"),
        }
    }
}

#[test]
fn a_queue_formed_in_a_twelve_second_outage_drains_at_the_rate_served_before_it() {
    // Sixty agents, forty requests a second before the outage: at the recovery, sixty
    // retries wait, each with 3.5 s left. At the bucket's ten a second they would not all go.
    let (agents, recovery) = recover(40, 5, 12_000, 60);
    assert_drained_at(40, &agents, recovery);
    assert!(agents.iter().all(|a| *a == Agent::Done), "{agents:?}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        rng_seed: RngSeed::Fixed(0x007a_9e50),
        ..ProptestConfig::default()
    })]

    #[test]
    fn after_an_outage_of_any_length_the_queue_drains_at_least_at_the_rate_served_before_it(
        rate in 11u64..120,
        before_s in 2u64..15,
        outage_ms in prop_oneof![1_000u64..60_000, 60_000u64..600_000],
        agents in 5usize..150,
    ) {
        let (ends, recovery) = recover(rate, before_s, outage_ms, agents);
        assert_drained_at(rate, &ends, recovery);
    }
}
