//! Fallback chains against an outage of one target: properties over seeds, attempt caps and
//! outage lengths (issue 11).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use rebound_core::{
    Command, FailureKind, MachineConfig, ProviderKind, RetryConfig, RunError, TargetSpec,
};
use rebound_sim::scenario::{Fault, Outage, RandomFaults};
use rebound_sim::{simulate, Scenario, SimConfig};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(128)
}

fn config(attempts: u32, targets: usize) -> SimConfig {
    SimConfig::default().with_machine(
        MachineConfig::default()
            .with_retry(RetryConfig::default().with_max_attempts(attempts))
            .with_targets(
                (0..targets)
                    .map(|i| {
                        TargetSpec::new(
                            [
                                ProviderKind::Anthropic,
                                ProviderKind::OpenAi,
                                ProviderKind::OpenAiResponses,
                            ][i % 3],
                            format!("model-{i}"),
                        )
                        .with_context_window(None)
                    })
                    .collect(),
            ),
    )
}

/// The coding task with `target` down (status `status`) for `down_ms`.
fn outage_on(target: usize, status: u16, down_ms: u64) -> Scenario {
    let mut s = Scenario::builtin("healthy").expect("built-in");
    s.random = Some(RandomFaults {
        outages: vec![Outage {
            target: Some(target),
            ..Outage::total(0, down_ms, Fault::http(status))
        }],
        ..RandomFaults::default()
    });
    s
}

proptest! {
    #![proptest_config(Config {
        cases: cases(),
        rng_seed: RngSeed::Fixed(11),
        failure_persistence: None,
        ..Config::default()
    })]

    /// An overloaded primary is abandoned only once its attempts are spent; the fallback
    /// finishes the run; switching changes nothing in the conversation.
    #[test]
    fn a_down_primary_falls_back_only_after_its_attempts_are_spent(
        seed in any::<u64>(),
        attempts in 1u32..7,
        status in prop::sample::select(vec![429u16, 500, 503, 529]),
    ) {
        let scenario = outage_on(0, status, 3_600_000);
        let o = simulate(&scenario, &config(attempts, 2), seed).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(o.succeeded(), "seed {seed}: {:?}", o.result);
        prop_assert_eq!(o.requests_per_target[0], attempts, "seed {}", seed);
        let fallbacks: Vec<_> = o.fallback_notifications().collect();
        prop_assert_eq!(fallbacks.len(), 1);
        prop_assert_eq!((fallbacks[0].1.from, fallbacks[0].1.to), (0, 1));
        let healthy = simulate(&scenario.without_faults(), &config(attempts, 1), seed)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&o.conversation, &healthy.conversation, "seed {}", seed);
    }

    /// Each target gets at most its own attempt budget; when every target is down the final
    /// error names each target's last failure.
    #[test]
    fn every_target_down_bounds_attempts_per_target_and_lists_each_failure(
        seed in any::<u64>(),
        attempts in 1u32..5,
        targets in 1usize..4,
    ) {
        let mut scenario = Scenario::builtin("healthy").expect("built-in");
        scenario.random = Some(RandomFaults {
            outages: vec![Outage::total(0, 3_600_000, Fault::http(503))],
            ..RandomFaults::default()
        });
        let o = simulate(&scenario, &config(attempts, targets), seed).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(o.requests_per_target.len(), targets);
        prop_assert!(o.requests_per_target.iter().all(|&n| n == attempts), "{:?}", o.requests_per_target);
        match &o.result {
            Err(RunError::Provider { earlier, target, .. }) => {
                prop_assert_eq!(*target, targets - 1);
                prop_assert_eq!(earlier.len(), targets - 1);
            }
            other => prop_assert!(false, "expected a provider failure, got {:?}", other),
        }
    }

    /// Non-fallback kinds (bad request, auth) on the primary never reach the fallback, and
    /// quota exhaustion falls back at once.
    #[test]
    fn only_the_right_kinds_fall_back(
        seed in any::<u64>(),
        status in prop::sample::select(vec![400u16, 401, 403]),
    ) {
        let o = simulate(&outage_on(0, status, 3_600_000), &config(4, 2), seed)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(!o.succeeded());
        prop_assert_eq!(o.fallback_notifications().count(), 0);
        prop_assert_eq!(o.requests_per_target.get(1).copied().unwrap_or(0), 0);

        let mut quota = outage_on(0, 429, 3_600_000);
        if let Some(r) = quota.random.as_mut() {
            r.outages[0].fault = Fault::http(429);
            if let rebound_sim::scenario::FaultKind::Http { error_type, message, .. } = &mut r.outages[0].fault.kind {
                *error_type = Some("rate_limit_error".into());
                *message = Some("This request would exceed your organization's monthly spend limit.".into());
            }
        }
        let o = simulate(&quota, &config(4, 2), seed).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(o.succeeded(), "{:?}", o.result);
        prop_assert_eq!(o.requests_per_target[0], 1, "quota exhaustion falls back at once");
        let first_failure = o.steps.iter().find_map(|s| match &s.event {
            rebound_core::Event::ProviderFailed { failure, .. } => Some(failure.kind),
            _ => None,
        });
        prop_assert_eq!(first_failure, Some(FailureKind::QuotaExhausted));
        let fell_back = o
            .commands()
            .any(|(_, c)| matches!(c, Command::NotifyFallback { .. }));
        prop_assert!(fell_back, "no fallback notification");
    }
}
