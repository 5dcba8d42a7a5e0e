//! Scripted tool outcomes as any driver answers them: the simulator on its virtual clock, and
//! the real runner when it plays a scenario against the fake provider server.

use crate::scenario::{Answer, Scenario, ScriptedCall, ToolError, ToolOutcome};
use rebound_core::{BatchOutcome, CallOutcome, HostFailure, ToolCall, ToolFailure, ToolOutput};
use std::collections::BTreeMap;

impl ToolOutcome {
    /// What a call of `tool` scripted with this outcome produces.
    pub fn result(&self, tool: &str) -> Result<ToolOutput, ToolFailure> {
        match self {
            ToolOutcome::Ok { .. } => {
                Ok(ToolOutput::text(self.output_text(tool).unwrap_or_default()))
            }
            ToolOutcome::Error { message } => Err(ToolFailure::model(message.clone())),
            ToolOutcome::Host { kind, message } => {
                Err(ToolFailure::Host(HostFailure::new(*kind, message.clone())))
            }
        }
    }
}

impl ToolError {
    /// The failure a tool source reports for the whole batch.
    #[must_use]
    pub fn failure(&self) -> ToolFailure {
        match self {
            ToolError::Error { message } => ToolFailure::model(message.clone()),
            ToolError::Host { kind, message } => {
                ToolFailure::Host(HostFailure::new(*kind, message.clone()))
            }
        }
    }
}

/// Every scripted tool call of a scenario, keyed by the id it carries on the wire, so a
/// driver can answer a `RunTools` batch whatever request produced it.
#[derive(Debug, Clone)]
pub struct ScriptedTools<'s> {
    calls: BTreeMap<String, (&'s Answer, &'s ScriptedCall)>,
}

impl<'s> ScriptedTools<'s> {
    /// Indexes the calls of every answer (and alternate answer) of `scenario`.
    #[must_use]
    pub fn new(scenario: &'s Scenario) -> Self {
        let mut calls = BTreeMap::new();
        for (turn, t) in scenario.turns.iter().enumerate() {
            let answers = std::iter::once((false, &t.answer))
                .chain(t.when_last_tool_error.iter().map(|a| (true, a)));
            for (alternate, answer) in answers {
                for (i, call) in answer.tool_calls.iter().enumerate() {
                    calls.insert(answer.call_id(turn, alternate, i), (answer, call));
                }
            }
        }
        ScriptedTools { calls }
    }

    /// How long the batch takes (its slowest call, `default_ms` for unscripted ones) and what
    /// it produces. Unscripted calls succeed with `"<name> finished"`; a scripted
    /// `batch_error` on the answer the calls belong to fails the whole batch.
    #[must_use]
    pub fn run(&self, calls: &[ToolCall], default_ms: u64) -> (u64, BatchOutcome) {
        let batch_error = calls.iter().find_map(|c| {
            self.calls
                .get(&c.id)
                .and_then(|(a, _)| a.batch_error.as_ref())
        });
        if let Some(error) = batch_error {
            return (default_ms, BatchOutcome::WholeBatch(error.failure()));
        }
        let mut slowest = 0;
        let outcomes = calls
            .iter()
            .map(|call| {
                let script = self.calls.get(&call.id).map(|(_, c)| *c);
                slowest = slowest.max(script.and_then(|s| s.duration_ms).unwrap_or(default_ms));
                let result = match script {
                    Some(s) => s.outcome.result(&call.name),
                    None => Ok(ToolOutput::text(format!("{} finished", call.name))),
                };
                CallOutcome {
                    tool_use_id: call.id.clone(),
                    result,
                }
            })
            .collect();
        (slowest, BatchOutcome::PerCall(outcomes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_of_primary_and_alternate_answers_are_answered_by_id() {
        // Its second turn answers a failed read with a `when_last_tool_error` answer.
        let scenario = Scenario::builtin("tool-errors").expect("tool-errors exists");
        let tools = ScriptedTools::new(&scenario);
        let call = |id: &str, name: &str| ToolCall {
            id: id.into(),
            name: name.into(),
            input: json!({}).into(),
        };
        let (_, outcome) = tools.run(&[call("toolu_00_0", "read")], 100);
        let BatchOutcome::PerCall(outcomes) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(
            matches!(&outcomes[0].result, Err(ToolFailure::Model { message }) if message.contains("not found"))
        );
        let (_, outcome) = tools.run(&[call("toolu_01_alt_0", "bash")], 100);
        let BatchOutcome::PerCall(outcomes) = outcome else {
            panic!("{outcome:?}")
        };
        assert!(
            format!("{:?}", outcomes[0].result).contains("lexer.rs"),
            "{:?}",
            outcomes[0].result
        );
    }
}
