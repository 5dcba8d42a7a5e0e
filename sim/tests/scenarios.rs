//! The built-in scenarios and the driver's edges, by example.

use rebound_core::{
    BudgetConfig, BudgetUse, Command, FailureKind, FinishReason, GiveUp, RunError, StopReason,
};
use rebound_sim::scenario::{Cancel, Fault, Scenario};
use rebound_sim::{replay, simulate, simulate_fleet, FleetAgent, SimConfig, SimError};

fn run(name: &str, seed: u64) -> rebound_sim::SimOutcome {
    let scenario = Scenario::builtin(name).expect("a built-in");
    simulate(&scenario, &SimConfig::default(), seed).expect("the simulation runs")
}

#[test]
fn every_builtin_runs_and_replays() {
    for name in Scenario::builtin_names() {
        for seed in 0..20 {
            let o = run(name, seed);
            let report = replay(&o.trace()).unwrap_or_else(|e| panic!("{name}/{seed}: {e}"));
            assert_eq!(report.outcome.as_ref(), Some(&o.result), "{name}/{seed}");
        }
    }
}

#[test]
fn healthy_finishes_in_three_requests_without_retries() {
    let o = run("healthy", 1);
    assert_eq!(o.result, Ok(FinishReason::Model(StopReason::EndTurn)));
    assert_eq!(o.requests(), 3);
    assert_eq!(o.retry_notifications().count(), 0);
    assert_eq!(o.conversation.len(), 6);
}

#[test]
fn blip_is_survived_with_two_retries_and_the_same_conversation() {
    let o = run("blip", 2);
    let healthy = run("healthy", 2);
    assert!(o.succeeded());
    let attempts: Vec<u32> = o.retry_notifications().map(|(_, i)| i.attempt).collect();
    assert_eq!(attempts, [2, 3]);
    assert_eq!(o.conversation, healthy.conversation);
    assert!(o.elapsed > healthy.elapsed);
}

#[test]
fn demo_shows_every_kind_of_recovery() {
    let o = run("demo", 3);
    assert!(o.succeeded(), "{:?}", o.result);
    let kinds: Vec<FailureKind> = o.retry_notifications().map(|(_, i)| i.kind).collect();
    assert_eq!(
        kinds,
        [
            FailureKind::Unavailable,
            FailureKind::RateLimited,
            FailureKind::StreamMalformed,
            FailureKind::ContextOverflow
        ]
    );
    assert_eq!(
        o.commands()
            .filter(|(_, c)| matches!(c, Command::ReplaceConversation { .. }))
            .count(),
        1
    );
    // After the tool error, the model recovers (on every wire format: the answer does not
    // hang on the error flag only Anthropic carries).
    let texts: Vec<String> = o.conversation.messages().iter().map(|m| m.text()).collect();
    assert!(
        texts.iter().any(|t| t.contains("let me list the sources")),
        "{texts:?}"
    );
    let errors = o
        .conversation
        .messages()
        .iter()
        .flat_map(|m| m.tool_results())
        .filter(|r| r.is_error)
        .count();
    assert_eq!(errors, 1);
}

#[test]
fn tool_errors_become_error_results_and_the_run_goes_on() {
    let o = run("tool-errors", 4);
    assert!(o.succeeded(), "{:?}", o.result);
    let results: Vec<(String, bool)> = o
        .conversation
        .messages()
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| (r.tool_use_id.clone(), r.is_error))
        .collect();
    // Handler error, unknown tool, truncated input, invalid JSON; then a whole-batch error
    // is not reached because the model recovers with `bash`.
    assert_eq!(results.iter().filter(|(_, e)| *e).count(), 4, "{results:?}");
    assert_eq!(results.last().map(|(_, e)| *e), Some(false), "{results:?}");
}

#[test]
fn overflow_compacts_once_then_fits() {
    let o = run("overflow", 5);
    assert!(o.succeeded(), "{:?}", o.result);
    let compactions = o
        .commands()
        .filter(|(_, c)| matches!(c, Command::Compact { .. }))
        .count();
    assert_eq!(compactions, 1);
}

#[test]
fn total_outage_exhausts_the_attempts_with_the_last_529() {
    let o = run("total-outage", 6);
    match &o.result {
        Err(RunError::Provider {
            failure,
            reason: GiveUp::AttemptsExhausted { attempts: 4 },
            ..
        }) => assert_eq!(failure.status, Some(529)),
        other => panic!("{other:?}"),
    }
    assert_eq!(o.requests(), 4);
}

#[test]
fn a_fleet_sharing_a_budget_sends_fewer_requests_into_an_outage() {
    let outage = Scenario::builtin("total-outage").expect("a built-in");
    let agents: Vec<FleetAgent<'_>> = (0..200)
        .map(|i| FleetAgent {
            scenario: &outage,
            seed: i,
            start_ms: i * 50,
        })
        .collect();
    let mut config = SimConfig::default();
    config.machine.retry.max_attempts = 10;
    let unbudgeted: u32 = simulate_fleet(&agents, &config)
        .expect("runs")
        .iter()
        .map(|o| o.requests())
        .sum();
    config.machine.retry_budget = Some(BudgetUse::default());
    config.budget = Some(BudgetConfig::default());
    let outcomes = simulate_fleet(&agents, &config).expect("runs");
    let budgeted: u32 = outcomes.iter().map(|o| o.requests()).sum();
    assert_eq!(unbudgeted, 200 * 10);
    assert!(budgeted * 3 < unbudgeted, "{budgeted} vs {unbudgeted}");
    assert!(outcomes.iter().any(|o| matches!(
        o.result,
        Err(RunError::Provider {
            reason: GiveUp::BudgetExhausted,
            ..
        })
    )));
    // Each agent's trace replays on its own, permits included.
    for o in outcomes.iter().take(20) {
        replay(&o.trace()).expect("replays");
    }
}

#[test]
fn fleet_runs_are_deterministic() {
    let brownout = Scenario::builtin("brownout").expect("a built-in");
    let agents: Vec<FleetAgent<'_>> = (0..30)
        .map(|i| FleetAgent {
            scenario: &brownout,
            seed: i,
            start_ms: i * 10,
        })
        .collect();
    let mut config = SimConfig::default();
    config.machine.retry_budget = Some(BudgetUse::default());
    config.budget = Some(BudgetConfig::default());
    let a = simulate_fleet(&agents, &config).expect("runs");
    let b = simulate_fleet(&agents, &config).expect("runs");
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.steps, y.steps);
    }
}

#[test]
fn cancel_at_a_time_fails_the_run_at_that_time() {
    let mut s = Scenario::builtin("blip").expect("a built-in");
    s.cancel = Some(Cancel::AtMs(200));
    let o = simulate(&s, &SimConfig::default(), 7).expect("runs");
    assert_eq!(o.result, Err(RunError::Canceled));
    assert_eq!(o.elapsed.0, 200);
    // The first 529 came at 150 ms; its retry would have been at 400 ms or later.
    assert_eq!(o.requests(), 1);
    assert!(o
        .commands()
        .all(|(t, c)| t.0 < 200 || !matches!(c, Command::SendRequest { .. })));
}

#[test]
fn a_step_bound_stops_a_run_that_goes_on_too_long() {
    let mut s = Scenario::builtin("total-outage").expect("a built-in");
    s.turns[0].faults = vec![Fault::http(529); 3];
    let mut config = SimConfig::default();
    config.machine.retry.max_attempts = 1_000;
    config.max_steps = 50;
    match simulate(&s, &config, 8) {
        Err(e @ SimError::StepLimit { steps: 50, .. }) => {
            assert!(e.to_string().contains("seed 8"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_scenario_file_drives_the_simulator() {
    let json = r#"{
        "name": "file",
        "provider": "openai",
        "turns": [
            {"faults": [{"type": "http", "status": 503}, {"type": "stall", "ms": 120000}],
             "answer": {"text": "hello"}}
        ]
    }"#;
    let s = Scenario::from_json(json).expect("valid");
    let o = simulate(&s, &SimConfig::default(), 9).expect("runs");
    assert!(o.succeeded());
    let kinds: Vec<FailureKind> = o.retry_notifications().map(|(_, i)| i.kind).collect();
    assert_eq!(
        kinds,
        [FailureKind::Unavailable, FailureKind::StreamMalformed]
    );
    // The stall lasted until the client's idle timeout.
    assert!(o.elapsed.0 > 60_000, "{}", o.elapsed);
}

#[test]
fn rate_limit_window_is_survived_by_obeying_retry_after() {
    let o = run("rate-limit-window", 10);
    assert!(o.succeeded(), "{:?}", o.result);
    let delays: Vec<u64> = o.retry_notifications().map(|(_, i)| i.delay_ms).collect();
    assert!(delays.iter().all(|&d| d == 5_000), "{delays:?}");
}

#[test]
fn a_caller_owned_budget_is_spent_by_the_fleet() {
    let outage = Scenario::builtin("total-outage").expect("a built-in");
    let agents: Vec<FleetAgent<'_>> = (0..20)
        .map(|i| FleetAgent {
            scenario: &outage,
            seed: i,
            start_ms: 0,
        })
        .collect();
    let mut config = SimConfig::default();
    config.machine.retry_budget = Some(BudgetUse::new(0));
    let mut budget = rebound_core::RetryBudget::new(
        BudgetConfig::default()
            .with_capacity(5.0)
            .with_initial(5.0)
            .with_deposit_per_request(0.0)
            .with_deposit_per_success(0.0)
            .with_refill_per_sec(0.0),
    );
    let outcomes =
        rebound_sim::simulate_fleet_with(&agents, &config, &mut budget).expect("the fleet runs");
    // 20 first attempts plus exactly the 5 retries the budget held.
    let requests: u32 = outcomes.iter().map(|o| o.requests()).sum();
    assert_eq!(requests, 25);
    assert_eq!(budget.balance(rebound_core::Millis(1_000_000)), 0.0);
}

/// `run_many` keeps counts only; they must be what the full outcomes say, run by run,
/// including with a shared budget, a step bound that stops runs, and a simulator error.
#[test]
fn run_many_counts_what_the_full_outcomes_say() {
    let mut budgeted = SimConfig::default();
    budgeted.machine.retry_budget = Some(BudgetUse::default());
    budgeted.budget = Some(BudgetConfig::default());
    let bounded = SimConfig::default().with_max_steps(12);
    let mut stopped_by_the_bound = 0;
    for (config, label) in [
        (SimConfig::default(), "default"),
        (budgeted, "budget"),
        (bounded, "step bound"),
    ] {
        for name in Scenario::builtin_names() {
            let scenario = Scenario::builtin(name).expect("a built-in");
            let stats = rebound_sim::run_many(&scenario, &config, 100, 25);
            let mut expected = rebound_sim::Stats {
                scenario: scenario.name.clone(),
                ..rebound_sim::Stats::default()
            };
            for seed in 100..125 {
                expected.runs += 1;
                match simulate(&scenario, &config, seed) {
                    Ok(o) => {
                        expected.per_run.push(rebound_sim::RunSummary {
                            seed,
                            succeeded: o.succeeded(),
                            requests: o.requests(),
                            elapsed_ms: o.duration_ms(),
                        });
                        expected.requests.push(o.requests());
                        expected.elapsed_ms.push(o.duration_ms());
                        expected.retries += u64::from(o.tally().retries);
                        match &o.result {
                            Ok(_) => expected.succeeded += 1,
                            Err(e) => {
                                *expected.failures.entry(e.kind().to_owned()).or_default() += 1;
                            }
                        }
                    }
                    Err(e) => {
                        expected.sim_errors += 1;
                        expected.first_sim_error.get_or_insert(e);
                    }
                }
            }
            expected.requests.sort_unstable();
            expected.elapsed_ms.sort_unstable();
            assert_eq!(stats, expected, "{name} ({label})");
            stopped_by_the_bound += stats.sim_errors;
        }
    }
    assert!(stopped_by_the_bound > 0, "the step bound stopped no run");
}
