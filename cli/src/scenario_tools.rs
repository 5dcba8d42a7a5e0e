//! Tools that answer as a scenario scripts them: for `rebound demo` and for tests that run
//! the real runner against the fake provider server.

use rebound_core::{BatchOutcome, HostFailure, HostFailureKind, ToolCall, ToolFailure, ToolSpec};
use rebound_effects::provider::BoxFuture;
use rebound_effects::runner::ToolExecutor;
use rebound_sim::{Scenario, ScriptedTools};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs tool batches the way a [`Scenario`] scripts them, waiting each call's scripted
/// duration (scaled by `time_scale`) in real time.
#[derive(Debug, Clone)]
pub struct ScenarioTools {
    scenario: Arc<Scenario>,
    time_scale: f64,
}

impl ScenarioTools {
    /// Tools of `scenario`, waiting scripted durations times `time_scale` (0 = no waiting).
    #[must_use]
    pub fn new(scenario: Arc<Scenario>, time_scale: f64) -> Self {
        ScenarioTools {
            scenario,
            time_scale: if time_scale.is_finite() && time_scale > 0.0 {
                time_scale
            } else {
                0.0
            },
        }
    }
}

impl ToolExecutor for ScenarioTools {
    fn specs(&self) -> Vec<ToolSpec> {
        self.scenario.tool_specs()
    }

    fn run_batch<'a>(
        &'a self,
        calls: Vec<ToolCall>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome> {
        Box::pin(async move {
            let (ms, outcome) =
                ScriptedTools::new(&self.scenario).run(&calls, self.scenario.timing.tool_ms);
            let wait = Duration::from_secs_f64(ms as f64 * self.time_scale / 1000.0);
            tokio::select! {
                () = tokio::time::sleep(wait) => outcome,
                () = cancel.cancelled() => BatchOutcome::WholeBatch(ToolFailure::Host(
                    HostFailure::new(HostFailureKind::Canceled, "canceled while tools ran"),
                )),
            }
        })
    }
}
