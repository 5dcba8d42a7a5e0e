//! Events per second through the machine on a retry-heavy run.
//!
//! Run: `cargo bench -p rebound-core --bench machine`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rebound_core::{
    AgentMachine, AssistantResponse, BatchOutcome, CallOutcome, Command, ContentBlock, Event,
    FailureKind, Handled, IgnoreReason, MachineConfig, Message, Millis, ProviderFailure,
    ToolOutput, ToolSpec,
};
use serde_json::json;

/// One run: a user message, then per turn three overloaded attempts, a stream cut, a tool call
/// and its result; finally a text answer. Returns the number of events handled.
fn retry_heavy_run(turns: usize) -> usize {
    let config = MachineConfig::default()
        .with_tools(vec![ToolSpec {
            name: "read".into(),
            description: "read a file".into(),
            input_schema: json!({"type": "object"}),
        }])
        .with_retry(rebound_core::RetryConfig::default().with_max_attempts(6));
    let mut m = AgentMachine::new(config, 7);
    let mut now = Millis(0);
    let mut events = 0;
    let mut inbox = vec![Event::UserMessage {
        content: vec![ContentBlock::text("go")],
    }];
    let mut failures_this_turn = 0;
    let mut turn = 0;
    while let Some(event) = inbox.pop() {
        events += 1;
        assert_ne!(
            m.handle(now, event),
            Handled::Ignored(IgnoreReason::Unexpected)
        );
        while let Some(cmd) = m.poll() {
            match cmd {
                Command::SendRequest { request, .. } => {
                    if failures_this_turn < 4 {
                        failures_this_turn += 1;
                        let failure = if failures_this_turn == 4 {
                            ProviderFailure::transport(
                                rebound_core::TransportFault::StreamCut,
                                None,
                            )
                        } else {
                            ProviderFailure::new(FailureKind::Unavailable, "Overloaded")
                                .with_status(529)
                        };
                        inbox.push(Event::ProviderFailed { request, failure });
                    } else {
                        failures_this_turn = 0;
                        turn += 1;
                        let response = if turn <= turns {
                            AssistantResponse::tool_use(Message::assistant(vec![
                                ContentBlock::tool_use(
                                    format!("t{turn}"),
                                    "read",
                                    json!({"path": "src/lib.rs"}),
                                ),
                            ]))
                        } else {
                            AssistantResponse::end_turn(Message::assistant_text("done"))
                        };
                        inbox.push(Event::ProviderSucceeded { request, response });
                    }
                }
                Command::Sleep { timer, delay_ms } => {
                    now = now.plus(delay_ms);
                    inbox.push(Event::TimerFired { timer });
                }
                Command::RunTools { batch, calls } => {
                    let outcomes = calls
                        .into_iter()
                        .map(|c| CallOutcome {
                            tool_use_id: c.id,
                            result: Ok(ToolOutput::text("fn main() {}")),
                        })
                        .collect();
                    inbox.push(Event::ToolsFinished {
                        batch,
                        outcome: BatchOutcome::PerCall(outcomes),
                    });
                }
                Command::Finish { .. } | Command::Fail { .. } => return events,
                _ => {}
            }
        }
    }
    events
}

fn bench(c: &mut Criterion) {
    let events = retry_heavy_run(20) as u64;
    let mut group = c.benchmark_group("machine");
    group.throughput(Throughput::Elements(events));
    group.bench_function("retry_heavy_20_turns", |b| b.iter(|| retry_heavy_run(20)));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
