//! A shared budget under a total outage, for any fleet size and arrival rate proptest picks:
//! the retries it allows are bounded by what the budget was paid (its initial tokens, a share
//! of every first attempt, refill over the run), whatever the number of agents.

use proptest::prelude::*;
use rebound_core::{BudgetConfig, MachineConfig};
use rebound_sim::scenario::{Answer, Fault, Outage, RandomFaults, Turn};
use rebound_sim::{simulate_fleet, FleetAgent, Scenario, SimConfig};

/// One turn answered "Done.", every attempt in the first ten minutes of which gets 529: the
/// outage study's `total-outage` model.
fn total_outage() -> Scenario {
    let mut scenario = Scenario::default();
    scenario.name = "total-outage".into();
    scenario.description =
        "every attempt in the first ten minutes gets 529; all agents in one process".into();
    scenario.turns = vec![Turn {
        answer: Answer::text("Done."),
        ..Turn::default()
    }];
    scenario.random = Some(RandomFaults {
        outages: vec![Outage::total(0, 600_000, Fault::http(529))],
        ..RandomFaults::default()
    });
    scenario
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_total_outage_costs_the_fleet_no_more_retries_than_its_budget_was_paid(
        agents in 1usize..200,
        stagger_ms in 0u64..20_000,
        seed in any::<u64>(),
    ) {
        let scenario = total_outage();
        let budget = BudgetConfig::default();
        let config = SimConfig::default().with_machine(MachineConfig::resilient()).with_budget(budget.clone());
        let fleet: Vec<FleetAgent<'_>> = (0..agents)
            .map(|i| FleetAgent {
                scenario: &scenario,
                seed: seed ^ i as u64,
                start_ms: i as u64 * stagger_ms / agents as u64,
            })
            .collect();
        let outcomes = simulate_fleet(&fleet, &config).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(outcomes.iter().all(|o| !o.succeeded()));
        let requests: u64 = outcomes.iter().map(|o| u64::from(o.requests())).sum();
        let end_ms = outcomes.iter().map(|o| o.elapsed.0).max().unwrap_or(0);
        let retries = requests - agents as u64;
        let paid = budget.initial
            + budget.deposit_per_request * agents as f64
            + budget.refill_per_sec * end_ms as f64 / 1_000.0;
        prop_assert!(
            retries as f64 <= paid.floor(),
            "{agents} agents over {stagger_ms} ms sent {retries} retries; the budget was paid {paid:.2}"
        );
        // And the run ends in bounded time, so the refill term is bounded for any fleet: each
        // agent's retries take at most (attempts - 1) x (longest backoff + longest wait for a
        // token + the error's latency) after its start.
        let machine = &config.machine;
        let retries_ms = u64::from(machine.retry.attempts() - 1)
            * (machine.retry.max_delay_ms
                + machine.retry_budget.map_or(0, |b| b.max_wait_ms)
                + scenario.timing.error_ms);
        prop_assert!(end_ms <= stagger_ms + retries_ms, "the outage ran until {end_ms} ms");
    }
}
