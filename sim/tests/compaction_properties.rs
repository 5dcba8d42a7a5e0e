//! Property tests of compaction (issue 17): over random sessions, context windows,
//! thresholds, context limits and summariser faults, a run never compacts twice for one
//! request, never loops, and its trace replays.

use proptest::prelude::*;
use rebound_core::{
    Command, CompactionMethod, MachineConfig, ProviderKind, RequestPurpose, RetryConfig, TargetSpec,
};
use rebound_sim::scenario::{
    Answer, Fault, FaultKind, History, Scenario, ScriptedCall, SummaryScript, Turn,
};
use rebound_sim::{replay, simulate, SimConfig};
use serde_json::json;

fn fault(kind: u8) -> Fault {
    match kind {
        0 => Fault::http(400),
        1 => Fault::http(529),
        _ => Fault::from(FaultKind::ContextOverflow),
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    history: (usize, usize),
    turns: Vec<bool>,
    summary_faults: Vec<u8>,
    limit: Option<usize>,
    window: Option<u64>,
    percent: u8,
    summary: bool,
) -> (Scenario, SimConfig) {
    let mut scenario = Scenario::default();
    scenario.history = Some(History {
        turns: history.0,
        bytes: history.1,
        interrupted: false,
    });
    scenario.turns = turns
        .iter()
        .map(|overflow| Turn {
            faults: if *overflow {
                vec![Fault::from(FaultKind::ContextOverflow)]
            } else {
                Vec::new()
            },
            answer: Answer::calls(vec![ScriptedCall::new("read", json!({"path": "a"}))]),
            when_last_tool_error: None,
        })
        .collect();
    scenario.summary = SummaryScript {
        faults: summary_faults.into_iter().map(fault).collect(),
        text: None,
    };
    scenario.context_limit_bytes = limit;
    let machine = MachineConfig::default()
        .with_retry(RetryConfig::default().with_jitter(false))
        .with_targets(vec![TargetSpec::new(
            ProviderKind::Anthropic,
            "claude-test",
        )
        .with_context_window(window)])
        .with_compact_with(if summary {
            CompactionMethod::Summary
        } else {
            CompactionMethod::Elide
        })
        .with_compact_threshold_percent(percent);
    (scenario, SimConfig::default().with_machine(machine))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn compaction_runs_at_most_once_per_request_and_never_loops(
        history in (0usize..12, 10usize..6_000),
        turns in proptest::collection::vec(any::<bool>(), 0..6),
        summary_faults in proptest::collection::vec(0u8..3, 0..5),
        limit in proptest::option::of(2_000usize..40_000),
        window in proptest::option::of(500u64..20_000),
        percent in 0u8..=100,
        summary in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (scenario, config) = case(history, turns, summary_faults, limit, window, percent, summary);
        let outcome = simulate(&scenario, &config, seed)
            .map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
        // One group per appended message: the commands of one request.
        let mut replaced = 0;
        let mut elisions = 0;
        let mut turn_sends = 0;
        for step in &outcome.steps {
            for c in &step.commands {
                match c {
                    Command::AppendMessage { .. } => {
                        replaced = 0;
                        elisions = 0;
                        turn_sends = 0;
                    }
                    Command::ReplaceConversation { .. } => replaced += 1,
                    Command::Compact { .. } => elisions += 1,
                    Command::SendRequest { purpose: RequestPurpose::Turn, .. } => turn_sends += 1,
                    _ => {}
                }
                prop_assert!(replaced <= 1, "seed {seed}: two compactions for one request");
                prop_assert!(elisions <= 1, "seed {seed}: two elisions for one request");
                prop_assert!(
                    turn_sends <= config.machine.retry.attempts() as usize + 1,
                    "seed {seed}: {turn_sends} sends for one request"
                );
            }
        }
        prop_assert!(replay(&outcome.trace()).is_ok(), "seed {seed}: the trace diverged");
    }
}
