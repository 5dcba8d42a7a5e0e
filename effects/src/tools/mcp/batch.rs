//! Running a batch of calls on the server: concurrent `tools/call` requests under one
//! deadline, and what every call is answered when the server times out, dies or is canceled.

use super::content::call_result;
use super::server::{start, Server, LAST_WORDS};
use super::{stderr_note, McpError, McpSource};
use crate::tools::schema::bounded;
use crate::tools::set::human_duration;
use crate::tools::{ToolContext, ToolSource};
use async_trait::async_trait;
use futures_util::stream::{FuturesUnordered, StreamExt};
use rebound_core::{
    BatchOutcome, CallOutcome, HostFailure, HostFailureKind, ToolCall, ToolFailure, ToolOutput,
    ToolSpec,
};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceError;
use serde_json::Value;

/// Why a batch could not finish on this server.
enum Broken {
    TimedOut,
    Gone(String),
}

#[async_trait]
impl ToolSource for McpSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn specs(&self) -> Vec<ToolSpec> {
        self.specs.clone()
    }

    async fn run_batch(&self, calls: Vec<ToolCall>, ctx: ToolContext) -> BatchOutcome {
        let mut slot = self.server.lock().await;
        if !slot.as_mut().is_some_and(Server::is_usable) {
            if let Some(mut old) = slot.take() {
                old.kill();
            }
            let started = tokio::select! {
                biased;
                () = ctx.cancel().cancelled() => return canceled(),
                started = start(&self.command, &self.argv, &self.config) => started,
            };
            match started {
                Ok((server, _, _)) => *slot = Some(server),
                Err(e) => return self.restart_failed(&e),
            }
        }
        // If this future is dropped mid-batch (the ToolSet's timeout, a cancel), the calls
        // in flight are abandoned: kill the server so nothing of theirs lingers.
        let mut guard = KillUnlessDone {
            slot: &mut slot,
            done: false,
        };
        let Some(server) = guard.slot.as_mut() else {
            return self.restart_failed(&McpError::EmptyCommand);
        };
        let peer = server.service.peer().clone();

        let mut results: Vec<Option<Result<ToolOutput, ToolFailure>>> = vec![None; calls.len()];
        let mut pending = FuturesUnordered::new();
        for (index, call) in calls.iter().enumerate() {
            let original = self
                .originals
                .get(&call.name)
                .cloned()
                .unwrap_or_else(|| call.name.clone());
            let arguments = match &*call.input {
                Value::Object(map) => Some(map.clone()),
                Value::Null => None,
                _ => {
                    results[index] =
                        Some(Err(ToolFailure::model("the input must be a JSON object")));
                    continue;
                }
            };
            let mut params = CallToolRequestParams::new(original);
            params.arguments = arguments;
            let peer = peer.clone();
            pending.push(async move { (index, peer.call_tool(params).await) });
        }

        let deadline = tokio::time::sleep(self.config.call_timeout);
        tokio::pin!(deadline);
        let mut broken = None;
        while !pending.is_empty() {
            tokio::select! {
                biased;
                () = ctx.cancel().cancelled() => {
                    // The guard kills the server.
                    return canceled();
                }
                next = pending.next() => match next {
                    Some((index, Ok(result))) => results[index] = Some(call_result(result)),
                    Some((index, Err(ServiceError::McpError(error)))) => {
                        results[index] = Some(Err(ToolFailure::model(format!(
                            "the MCP server refused the call: {} (JSON-RPC error {})",
                            bounded(&error.message, 1000),
                            error.code.0
                        ))));
                    }
                    Some((index, Err(ServiceError::UnexpectedResponse))) => {
                        results[index] = Some(Err(ToolFailure::model(
                            "the MCP server answered with something other than a tool result \
                             (it may have asked for user input, which rebound does not support)",
                        )));
                    }
                    Some((_, Err(error))) => {
                        broken = Some(Broken::Gone(error.to_string()));
                        break;
                    }
                    None => break,
                },
                () = &mut deadline => {
                    broken = Some(Broken::TimedOut);
                    break;
                }
            }
        }
        drop(pending);

        if let Some(broken) = broken {
            let message = match broken {
                Broken::TimedOut => format!(
                    "the MCP server `{}` did not answer within {}; it was stopped and will be \
                     restarted for the next tool calls",
                    bounded(&self.command, 200),
                    human_duration(self.config.call_timeout)
                ),
                Broken::Gone(error) => {
                    // Give the process a moment to be reaped, for its exit status, and then
                    // for its last words to be read.
                    let status = tokio::time::timeout(LAST_WORDS, server.child.wait())
                        .await
                        .ok()
                        .and_then(Result::ok);
                    let how = match status {
                        Some(status) => format!("exited ({status})"),
                        None => format!("stopped answering ({error})"),
                    };
                    let stderr = if status.is_some() {
                        server.stderr.last_words(LAST_WORDS).await
                    } else {
                        server.stderr.text()
                    };
                    format!(
                        "the MCP server `{}` {how} before answering this call{}; it will be \
                         restarted for the next tool calls",
                        bounded(&self.command, 200),
                        stderr_note(&stderr)
                    )
                }
            };
            for result in &mut results {
                if result.is_none() {
                    *result = Some(Err(ToolFailure::model(message.clone())));
                }
            }
            // Leave `done` false: the guard kills the server and empties the slot.
        } else {
            guard.done = true;
        }
        drop(guard);

        BatchOutcome::PerCall(
            calls
                .into_iter()
                .zip(results)
                .map(|(call, result)| CallOutcome {
                    tool_use_id: call.id,
                    result: result.unwrap_or_else(|| {
                        Err(ToolFailure::model("the MCP server gave no answer"))
                    }),
                })
                .collect(),
        )
    }
}

/// Kills and forgets the server when a batch ends without finishing cleanly.
struct KillUnlessDone<'a> {
    slot: &'a mut Option<Server>,
    done: bool,
}

impl Drop for KillUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Some(mut server) = self.slot.take() {
                server.kill();
            }
        }
    }
}

fn canceled() -> BatchOutcome {
    BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure::new(
        HostFailureKind::Canceled,
        "the MCP tool batch was canceled",
    )))
}
