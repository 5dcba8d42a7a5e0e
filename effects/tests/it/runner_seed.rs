//! The runner's jitter seed: drawn per runner unless given, and recorded so a run replays.

use crate::shared_buf;

use rebound_core::{AssistantResponse, FailureKind, MachineConfig, ProviderFailure, RetryConfig};
use rebound_effects::provider::{BoxFuture, DeltaSink, Provider, ProviderRequest, SendError};
use rebound_effects::runner::{RunInput, Runner, TraceRecorder};
use rebound_sim::Trace;
use shared_buf::SharedBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A provider that is overloaded once (so the run sleeps a jittered delay that depends on the
/// seed), then refuses the key (so the run ends at once).
#[derive(Default)]
struct OverloadedThenRefusing {
    calls: AtomicU32,
}

impl Provider for OverloadedThenRefusing {
    fn label(&self) -> String {
        "overloaded-then-refusing".into()
    }

    fn send<'a>(
        &'a self,
        _request: ProviderRequest<'a>,
        _deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<AssistantResponse, SendError>> {
        let first = self.calls.fetch_add(1, Ordering::SeqCst) == 0;
        Box::pin(async move {
            Err(SendError::Provider(if first {
                ProviderFailure::new(FailureKind::Unavailable, "Overloaded").with_status(529)
            } else {
                ProviderFailure::new(FailureKind::AuthFailed, "invalid x-api-key").with_status(401)
            }))
        })
    }
}

/// Runs `runner` once (with a trace recorder attached) and returns the recorded trace.
async fn traced_run(runner: Runner) -> Trace {
    let buf = SharedBuf::default();
    let mut runner = runner.trace(TraceRecorder::new(buf.clone()));
    let result = runner.run(RunInput::text("hi")).await;
    assert!(result.is_err(), "the provider refuses the key: {result:?}");
    let text = buf.text();
    Trace::parse(&text).expect("a readable trace")
}

fn runner() -> Runner {
    let config =
        MachineConfig::default().with_retry(RetryConfig::default().with_initial_delay_ms(200));
    Runner::new(config, vec![Box::new(OverloadedThenRefusing::default())])
}

#[tokio::test]
async fn runners_without_a_seed_each_draw_their_own_and_record_it() {
    let mut seeds = Vec::new();
    for _ in 0..4 {
        seeds.push(traced_run(runner()).await.header.seed);
    }
    let mut distinct = seeds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    // Four draws of 53 random bits: a collision means the seed is not drawn.
    assert_eq!(distinct.len(), 4, "{seeds:?}");
}

#[tokio::test]
async fn the_seed_a_runner_reports_is_the_one_its_trace_replays_with() {
    let drawn = runner();
    let seed = drawn.jitter_seed();
    assert!(
        seed < 1 << 53,
        "{seed} does not survive a JSON reader using doubles"
    );
    assert_eq!(traced_run(drawn).await.header.seed, seed);

    let given = runner().seed(42);
    assert_eq!(given.jitter_seed(), 42);
    let mut trace = traced_run(given).await;
    assert_eq!(trace.header.seed, 42);
    let jittered = trace
        .steps
        .iter()
        .flat_map(|s| &s.commands)
        .any(|c| c.get("type").and_then(|t| t.as_str()) == Some("sleep"));
    assert!(
        jittered,
        "the run slept a jittered delay: {:?}",
        trace.steps
    );
    rebound_sim::replay(&trace).expect("replays with the recorded seed");
    // The seed matters: with another one the jittered delay differs.
    trace.header.seed = 43;
    assert!(rebound_sim::replay(&trace).is_err());
}
