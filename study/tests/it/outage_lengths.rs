//! A fleet busy in its tool loops, sharing one retry budget (in its process, or in Redis),
//! comes back from a total outage of any length: every run the recovered provider could
//! serve finishes, the retries that queued during the outage drain at least at the rate the
//! provider served before it, and the recovery is no burstier than without a budget.

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed};
use rebound_study::compare::{
    run_length_sweep, LengthRow, LengthSweep, LengthSweepConfig, Sharing,
};

/// The checks every length's rows must pass.
fn assert_recovers(sweep: &LengthSweep) {
    let config = &sweep.config;
    let timing = config.scenario(0).timing;
    // The budget hears that retries work again when a retry it granted is answered: the
    // next refill grant (one token) and its first byte.
    let heard_ms = (1_000.0 / config.budget.refill_per_sec).ceil() as u64 + timing.first_event_ms;
    for &length in &config.lengths_ms {
        let unbudgeted = sweep
            .row(length, Sharing::NoBudget)
            .expect("a row without a budget");
        for sharing in [Sharing::OneProcess, Sharing::Redis] {
            let row: &LengthRow = sweep.row(length, sharing).expect("a row per sharing");
            let at = format!(
                "{length} ms outage, {sharing} (seed {}): {row:?}",
                config.seed
            );
            assert_eq!(row.lost_after_recovery, 0, "{at}");
            if let Some(drained) = row.drained_ms {
                let at_rate =
                    (row.queued_at_recovery as f64 * 1_000.0 / row.served_per_sec).ceil() as u64;
                assert!(
                    drained <= heard_ms + at_rate + 1_000,
                    "{at}: {} queued retries took {drained} ms, more than {heard_ms} ms to hear \
                     of the recovery and {at_rate} ms at the rate served before the outage",
                    row.queued_at_recovery
                );
            }
            assert!(
                f64::from(row.peak_per_sec) <= 1.05 * f64::from(unbudgeted.peak_per_sec),
                "{at}: peak {} against {} without a budget",
                row.peak_per_sec,
                unbudgeted.peak_per_sec
            );
        }
    }
}

#[test]
fn a_busy_fleet_recovers_from_outages_of_one_to_sixty_seconds() {
    let sweep = run_length_sweep(&LengthSweepConfig::default()).expect("the sweep runs");
    assert_recovers(&sweep);
    // The lengths that outlast the pace's ten seconds of asks are the ones that matter.
    for length in [12_000, 30_000, 60_000] {
        assert!(sweep.row(length, Sharing::OneProcess).is_some());
    }
    let twelve = sweep
        .row(12_000, Sharing::OneProcess)
        .expect("the twelve-second row");
    assert!(twelve.queued_at_recovery > 100, "{twelve:?}");
    assert_eq!(twelve.succeeded, twelve.agents, "{twelve:?}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 12,
        rng_seed: RngSeed::Fixed(0x0007_a9e5),
        // Shrunk failures beside this file (outage_lengths.proptest-regressions): the
        // default would look for the crate's root from here, find this binary's main.rs,
        // and keep them in tests/proptest-regressions/ instead.
        failure_persistence: Some(Box::new(
            FileFailurePersistence::WithSource("proptest-regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_busy_fleet_recovers_from_an_outage_of_any_length(
        length_ms in prop_oneof![1_000u64..60_000, 60_000u64..600_000],
        agents in 20usize..160,
        seed in any::<u64>(),
    ) {
        let config = LengthSweepConfig::default()
            .with_seed(seed)
            .with_agents(agents)
            .with_lengths_ms(vec![length_ms]);
        let sweep = run_length_sweep(&config).expect("the sweep runs");
        assert_recovers(&sweep);
    }
}
