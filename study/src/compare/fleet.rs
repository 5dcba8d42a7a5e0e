//! The peers as a fleet in virtual time: every agent of a model takes its turn under one
//! [`Peer`], and the agents of one process spend one budget.
//!
//! A small discrete-event loop: a heap of due events ordered by `(time, sequence)`, where
//! the sequence number is the order in which events were scheduled, so that two events
//! due at the same millisecond are handled in a fixed order. Nothing here iterates a hash
//! map or reads a clock; the same members, scenario and seeds give the same records.
//!
//! Each agent meets the fault process exactly as rebound's simulated agent does: its own
//! [`ScriptCursor`] seeded with the agent's seed, asked at the moment each attempt is sent,
//! the scenario's [`Timing`](rebound_sim::scenario::Timing) for how long the attempt takes, and a
//! stall shorter than the idle timeout only delaying what the same attempt gets next (as
//! the driver does). So every policy meets the same faults for the same attempts. A
//! budget only changes *whether and when* an agent makes its next attempt.

use super::peers::{Admission, Peer, PeerState, Process, Seen};
use rebound_core::{Conversation, Message, Millis};
use rebound_sim::scenario::{FaultKind, Planned, Scenario, ScriptCursor};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One agent of a fleet: its seed and when its turn starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Member {
    /// Seeds the agent's fault draws and (salted per peer) its jitter.
    pub(crate) seed: u64,
    /// When the agent attempts its request first, in virtual ms.
    pub(crate) start_ms: u64,
}

/// What one agent's turn did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnRecord {
    /// When each attempt was sent to the provider, in virtual ms (attempts the client
    /// rejected locally are not sent, and not here).
    pub(crate) requests: Vec<u64>,
    /// When the turn completed, if it did.
    pub(crate) completed_at: Option<u64>,
}

/// What comes due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// An agent's next step (its index).
    Agent(usize),
    /// A process may let held attempts go (its index).
    Process(usize),
}

/// What an agent does when its next event is due.
#[derive(Debug)]
enum Next {
    /// Make an attempt (or, when its process holds it, wait for the process to grant it).
    Attempt,
    /// The attempt in flight succeeds.
    Answered,
    /// The attempt in flight fails with this.
    Failed(Seen),
}

struct Agent {
    cursor: ScriptCursor,
    rng: fastrand::Rng,
    state: PeerState,
    /// Index of the agent's process.
    process: usize,
    next: Next,
    record: TurnRecord,
}

/// The most events one agent may cause: far above any peer's attempt cap (Gemini CLI's, the
/// largest, is 4 stream attempts of 10 requests each, two events per attempt: 80; Codex's,
/// 6 of 5), and for the adaptive AWS peer, the process's wake-ups that let its attempts go.
const EVENTS_PER_AGENT: usize = 200;

/// The same for [`Peer::LinkerdBudget`], whose loop has no count limit: only its budget
/// bounds it, at 10 retries a second from the reserve (plus a fifth of the deposits), so
/// a lone proxy retrying a total outage makes at most about 20 events a second; this
/// covers eight minutes of it.
const EVENTS_PER_LINKERD_AGENT: usize = 10_000;

/// Plays one turn of `scenario` for every member under `peer`. With `shared_process`, all
/// members run in one process and spend one budget; otherwise each has its own. Records
/// come back in member order.
///
/// # Panics
///
/// If the fleet causes more than [`EVENTS_PER_AGENT`] events per member
/// ([`EVENTS_PER_LINKERD_AGENT`] for Linkerd): a peer that retries without end, which is a
/// bug in its model.
pub(crate) fn run_peer_fleet(
    peer: Peer,
    scenario: &Scenario,
    members: &[Member],
    shared_process: bool,
    idle_timeout_ms: u64,
) -> Vec<TurnRecord> {
    let mut conversation = Conversation::new();
    conversation.push(Message::user_text(scenario.user_message.clone()));
    let mut processes: Vec<Process> = if shared_process {
        let first = members.iter().map(|m| m.start_ms).min().unwrap_or(0);
        vec![peer.new_process(first)]
    } else {
        members
            .iter()
            .map(|m| peer.new_process(m.start_ms))
            .collect()
    };
    let mut agents: Vec<Agent> = members
        .iter()
        .enumerate()
        .map(|(i, m)| Agent {
            cursor: ScriptCursor::new(m.seed),
            rng: fastrand::Rng::with_seed(m.seed ^ peer.salt().wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            state: PeerState::default(),
            process: if shared_process { 0 } else { i },
            next: Next::Attempt,
            record: TurnRecord {
                requests: Vec::new(),
                completed_at: None,
            },
        })
        .collect();
    let mut due: BinaryHeap<Reverse<(u64, u64, Due)>> = BinaryHeap::new();
    let mut sequence = 0u64;
    let mut schedule = |due: &mut BinaryHeap<_>, at: u64, what: Due| {
        due.push(Reverse((at, sequence, what)));
        sequence += 1;
        sequence - 1
    };
    for (i, m) in members.iter().enumerate() {
        schedule(&mut due, m.start_ms, Due::Agent(i));
    }
    // The one valid wake-up of each process holding attempts (by sequence number); a
    // wake-up that was moved since it was scheduled is skipped when it comes due.
    let mut wakes: Vec<Option<(u64, u64)>> = vec![None; processes.len()];
    let per_agent = if peer == Peer::LinkerdBudget {
        EVENTS_PER_LINKERD_AGENT
    } else {
        EVENTS_PER_AGENT
    };
    let bound = members.len().saturating_mul(per_agent);
    let mut events = 0usize;
    while let Some(Reverse((now, seq, what))) = due.pop() {
        let p = match what {
            Due::Process(p) => {
                if wakes[p].map(|(_, s)| s) != Some(seq) {
                    continue;
                }
                wakes[p] = None;
                p
            }
            Due::Agent(i) => agents[i].process,
        };
        events += 1;
        assert!(
            events <= bound,
            "invariant: a peer's turn ends within {per_agent} events per agent, but \
             {peer} passed {bound} for {} agents (a retry loop without end in its model)",
            members.len()
        );
        let mut send_now = Vec::new();
        match what {
            Due::Process(_) => send_now = processes[p].grant(now),
            Due::Agent(i) => {
                let agent = &mut agents[i];
                let process = &mut processes[p];
                let failed = match std::mem::replace(&mut agent.next, Next::Attempt) {
                    Next::Attempt => {
                        match peer.admit(process, &agent.state, &mut agent.rng, now, i) {
                            Admission::Send => {
                                send_now.push(i);
                                None
                            }
                            Admission::Reject => {
                                agent.state.attempts += 1;
                                Some(Seen::LOCAL_REJECTION)
                            }
                            Admission::Wait => None,
                        }
                    }
                    Next::Answered => {
                        peer.on_success(process, &agent.state, now);
                        agent.record.completed_at = Some(now);
                        None
                    }
                    Next::Failed(seen) => Some(seen),
                };
                if let Some(failed) = failed {
                    if let Some(wait) =
                        peer.decide(&failed, &mut agent.state, &mut agent.rng, process, now)
                    {
                        schedule(&mut due, now.saturating_add(wait), Due::Agent(i));
                    }
                }
            }
        }
        for i in send_now {
            let agent = &mut agents[i];
            agent.state.attempts += 1;
            agent.record.requests.push(now);
            let (next, at) = play_attempt(
                peer,
                &mut agent.cursor,
                scenario,
                &conversation,
                now,
                idle_timeout_ms,
            );
            agent.next = next;
            schedule(&mut due, at, Due::Agent(i));
        }
        // Whatever happened may have moved when the process lets its next attempt go.
        let next = processes[p].next_grant(now);
        if next != wakes[p].map(|(at, _)| at) {
            wakes[p] = next.map(|at| (at, schedule(&mut due, at, Due::Process(p))));
        }
    }
    agents.into_iter().map(|a| a.record).collect()
}

/// Sends one attempt of `peer` at `sent`: what it gets, and when the client learns it.
fn play_attempt(
    peer: Peer,
    cursor: &mut ScriptCursor,
    scenario: &Scenario,
    conversation: &Conversation,
    sent: u64,
    idle_timeout_ms: u64,
) -> (Next, u64) {
    let timing = &scenario.timing;
    // As the simulator's driver does: a stall shorter than the idle timeout only delays
    // what the same request gets next.
    let mut stalled = 0u64;
    loop {
        match cursor.next(scenario, Millis(sent.saturating_add(stalled)), conversation) {
            Planned::Summary(_) => return (Next::Answered, sent + stalled + timing.answer_ms),
            Planned::Answer { answer, .. } => {
                let latency = answer
                    .and_then(|a| a.latency_ms)
                    .unwrap_or(timing.answer_ms);
                return (Next::Answered, sent + stalled + latency);
            }
            Planned::Overflow { .. } => {
                let seen = Seen::of(&FaultKind::ContextOverflow, scenario.provider, peer);
                return (Next::Failed(seen), sent + stalled + timing.error_ms);
            }
            Planned::Fault(fault) => {
                if let FaultKind::Stall { ms } = fault.kind {
                    if ms < idle_timeout_ms {
                        stalled = stalled.saturating_add(ms);
                        continue;
                    }
                }
                let delay = fault.delay_ms(timing, idle_timeout_ms);
                return (
                    Next::Failed(Seen::of(&fault.kind, scenario.provider, peer)),
                    sent + stalled + delay,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_sim::scenario::{Answer, Fault, Outage, RandomFaults, Turn};

    fn members(n: u64) -> Vec<Member> {
        (0..n)
            .map(|i| Member {
                seed: i * 7919 + 3,
                start_ms: i * 10,
            })
            .collect()
    }

    fn outage(until_ms: u64, fault: Fault) -> Scenario {
        let mut scenario = Scenario::default();
        scenario.turns = vec![Turn {
            answer: Answer::text("Done."),
            ..Turn::default()
        }];
        scenario.random = Some(RandomFaults {
            outages: vec![Outage::total(0, until_ms, fault)],
            ..RandomFaults::default()
        });
        scenario
    }

    #[test]
    fn the_same_members_give_the_same_records_for_every_peer() {
        let mut scenario = outage(0, Fault::http(503));
        scenario.random = Some(RandomFaults {
            outages: vec![Outage {
                rate: Some(0.5),
                ..Outage::total(0, 5_000, Fault::http(503))
            }],
            ..RandomFaults::default()
        });
        for peer in Peer::ALL {
            for shared in [false, true] {
                let first = run_peer_fleet(peer, &scenario, &members(300), shared, 60_000);
                let second = run_peer_fleet(peer, &scenario, &members(300), shared, 60_000);
                assert_eq!(first, second, "{peer}, shared {shared}");
            }
        }
    }

    #[test]
    fn a_shared_quota_runs_dry_where_per_agent_quotas_do_not() {
        // Every attempt fails for a minute: 300 agents want 2 retries each, 600 in all.
        let scenario = outage(60_000, Fault::http(503));
        let sent = |shared: bool| -> usize {
            run_peer_fleet(Peer::AwsStandard, &scenario, &members(300), shared, 60_000)
                .iter()
                .map(|r| r.requests.len())
                .sum()
        };
        assert_eq!(
            sent(false),
            900,
            "each agent's own 500 tokens pay both retries"
        );
        // One process: 500 tokens pay 100 retries of 5, then every retry is refused.
        assert_eq!(sent(true), 300 + 100);
    }

    #[test]
    fn a_locally_rejected_attempt_is_not_sent_and_is_retried() {
        // Nothing is accepted for 20 s: the shared throttle soon rejects most attempts.
        let scenario = outage(20_000, Fault::http(503));
        let records = run_peer_fleet(Peer::SreAdaptive, &scenario, &members(300), true, 60_000);
        let sent: usize = records.iter().map(|r| r.requests.len()).sum();
        assert!(sent < 300 * 3 / 2, "{sent} requests sent");
        assert!(records.iter().all(|r| r.completed_at.is_none()));
        assert!(records.iter().all(|r| r.requests.len() <= 3));
        // Per agent, a lone client's history is its own: it sends its first attempt.
        let alone = run_peer_fleet(Peer::SreAdaptive, &scenario, &members(300), false, 60_000);
        assert!(alone.iter().all(|r| !r.requests.is_empty()));
    }

    #[test]
    fn an_adaptive_client_holds_first_attempts_after_a_throttling_error() {
        // 429s for the first 2 s; 300 agents start over 3 s.
        let scenario = outage(2_000, Fault::http(429));
        let records = run_peer_fleet(Peer::AwsAdaptive, &scenario, &members(300), true, 60_000);
        let held = members(300)
            .iter()
            .zip(&records)
            .filter(|(m, r)| r.requests.first().is_some_and(|&t| t > m.start_ms))
            .count();
        assert!(held > 100, "{held} first attempts held");
        // Without throttling errors, nothing is held.
        let brownout = outage(2_000, Fault::http(503));
        let records = run_peer_fleet(Peer::AwsAdaptive, &brownout, &members(300), true, 60_000);
        assert!(members(300)
            .iter()
            .zip(&records)
            .all(|(m, r)| r.requests.first() == Some(&m.start_ms)));
    }

    #[test]
    fn envoy_retries_overflow_when_a_fifth_of_open_requests_are_retries() {
        // Every attempt fails for a minute. Alone, each agent's Envoy retries once; shared,
        // at most max(open / 5, 3) retries are open at once.
        let scenario = outage(60_000, Fault::http(503));
        let sent = |shared: bool| -> usize {
            run_peer_fleet(Peer::EnvoyBudget, &scenario, &members(300), shared, 60_000)
                .iter()
                .map(|r| r.requests.len())
                .sum()
        };
        assert_eq!(sent(false), 600);
        let shared = sent(true);
        assert!((300..450).contains(&shared), "{shared}");
    }
}
