//! The property durable runs rest on (`rebound-durable`, #36): a run that crashes at any
//! step and is replayed from its journal into a fresh machine makes the same decisions.
//!
//! A durable run journals each event an effect produced (as JSON) with the time it
//! happened. After a crash at step `k`, a fresh machine with the same configuration and seed
//! is given the journal's first `k` events at their times: every command it emits must be
//! the one the first machine emitted. Then the effect that was in flight at the crash runs
//! again (in the scripted world it answers as it did), and the run must end exactly as the
//! run without the crash: same outcome, same conversation.

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
use rebound_core::{AgentMachine, Command, Event, RetryConfig};
use rebound_sim::{simulate, Scenario, SimConfig};

fn proptest_config() -> ProptestConfig {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    ProptestConfig {
        cases: env("PROPTEST_CASES").map_or(256, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        rng_seed: RngSeed::Fixed(env("PROPTEST_RNG_SEED").unwrap_or(0x0d0a_b1e5)),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// What the journal gives back: the event as written and read again (JSON, as Restate
/// stores a step's result).
fn through_journal(event: &Event) -> Result<Event, String> {
    let json = serde_json::to_string(event).map_err(|e| format!("{event:?} not written: {e}"))?;
    serde_json::from_str(&json).map_err(|e| format!("{json} not read back: {e}"))
}

/// Crashes the run of `scenario` with `seed` after `crash_at` of its steps (a fraction of
/// them, 0 to 1), replays, and compares.
fn crash_and_replay(name: &str, seed: u64, crash_at: f64) -> Result<(), String> {
    let scenario = Scenario::builtin(name).ok_or_else(|| format!("no scenario {name}"))?;
    let mut config = SimConfig::default();
    config.machine.retry = RetryConfig::default().with_max_attempts(6);
    let run = simulate(&scenario, &config, seed).map_err(|e| format!("{name}/{seed}: {e}"))?;
    let header = run.trace().header;
    let steps = &run.steps;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let k = ((steps.len() as f64) * crash_at).floor() as usize;
    let k = k.min(steps.len());

    // After the crash: a fresh machine, the journal's prefix.
    let fresh = |header: &rebound_core::trace::TraceHeader| match &header.initial_conversation {
        Some(c) => AgentMachine::with_conversation(header.config.clone(), header.seed, c.clone()),
        None => AgentMachine::new(header.config.clone(), header.seed),
    };
    let mut machine = fresh(&header);
    for (i, step) in steps.iter().enumerate() {
        let event = through_journal(&step.event)?;
        let commands: Vec<Command> = machine.step(step.at, event);
        if commands != step.commands {
            let phase = if i < k {
                "replaying the journal"
            } else {
                "after the restart"
            };
            return Err(format!(
                "{name}/{seed}, crash after {k} of {} steps: step {i} ({phase}) gave \
                 {commands:?}, the run without the crash {:?}",
                steps.len(),
                step.commands
            ));
        }
    }
    let outcome = machine.outcome().cloned();
    let expected = run.result.clone();
    let same_outcome = match (&outcome, &expected) {
        (Some(Ok(reason)), Ok(expected)) => reason == expected,
        (Some(Err(error)), Err(expected)) => error == expected,
        _ => false,
    };
    if !same_outcome {
        return Err(format!(
            "{name}/{seed}: ended {outcome:?}, without the crash {expected:?}"
        ));
    }
    if machine.conversation() != &run.conversation {
        return Err(format!("{name}/{seed}: the conversation differs"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn a_run_replayed_from_any_prefix_of_its_journal_decides_the_same(
        which in 0..Scenario::builtin_names().len(),
        seed in 0u64..1_000_000,
        crash_at in 0.0f64..=1.0,
    ) {
        let name = Scenario::builtin_names()[which];
        if let Err(e) = crash_and_replay(name, seed, crash_at) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Every built-in scenario, crashed at every step of one run.
#[test]
fn every_builtin_scenario_replays_from_every_step() {
    for name in Scenario::builtin_names() {
        let scenario = Scenario::builtin(name).expect("a built-in scenario");
        let steps = simulate(&scenario, &SimConfig::default(), 11)
            .expect("the run ends")
            .steps
            .len();
        for k in 0..=steps {
            #[allow(clippy::cast_precision_loss)]
            let at = if steps == 0 {
                0.0
            } else {
                k as f64 / steps as f64
            };
            crash_and_replay(name, 11, at).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
