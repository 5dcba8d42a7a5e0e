//! Machine behaviour, including the spec's "Phase 6" list at the machine level.

use super::*;
use crate::budget::{BudgetConfig, BudgetNote, PermitKind, RetryBudget, Ticket};
use crate::compaction::{compact, CompactionMethod, CompactionReason, CompactionReport};
use crate::conversation::TargetIdentity;
use crate::response::Usage;
use crate::retry::RetryConfig;
use crate::tool::{CallOutcome, HostFailure, HostFailureKind, ToolOutput, ToolSpec};
use serde_json::json;

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: json!({"type": "object"}),
    }
}

fn config() -> MachineConfig {
    MachineConfig {
        tools: vec![tool("read"), tool("list")],
        retry: RetryConfig {
            jitter: false,
            ..RetryConfig::default()
        },
        ..MachineConfig::default()
    }
}

fn user(text: &str) -> Event {
    Event::UserMessage {
        content: vec![ContentBlock::text(text)],
    }
}

fn text_response(text: &str) -> AssistantResponse {
    AssistantResponse::end_turn(Message::assistant_text(text))
}

fn tool_response(calls: &[(&str, &str, serde_json::Value)]) -> AssistantResponse {
    AssistantResponse::new(
        Message {
            role: Role::Assistant,
            content: calls
                .iter()
                .map(|(id, name, input)| ContentBlock::tool_use(*id, *name, input.clone()))
                .collect(),
        },
        StopReason::ToolUse,
    )
}

fn failure(kind: FailureKind, status: u16) -> ProviderFailure {
    ProviderFailure::new(kind, format!("status {status}")).with_status(status)
}

/// The single SendRequest among `commands`.
fn sent(commands: &[Command]) -> (RequestId, u32, Snapshot) {
    let sends: Vec<_> = commands
        .iter()
        .filter_map(|c| match c {
            Command::SendRequest {
                request,
                attempt,
                conversation,
                ..
            } => Some((*request, *attempt, conversation.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(sends.len(), 1, "expected one SendRequest in {commands:#?}");
    sends.into_iter().next().unwrap()
}

fn sleep(commands: &[Command]) -> (TimerId, u64) {
    commands
        .iter()
        .find_map(|c| match c {
            Command::Sleep { timer, delay_ms } => Some((*timer, *delay_ms)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected a Sleep in {commands:#?}"))
}

fn run_tools(commands: &[Command]) -> (BatchId, Vec<ToolCall>) {
    commands
        .iter()
        .find_map(|c| match c {
            Command::RunTools { batch, calls } => Some((*batch, calls.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected RunTools in {commands:#?}"))
}

/// A machine that sent its first request and got `calls` back, with the commands that
/// answer produced.
fn answered_with_tools(calls: &[(&str, &str, serde_json::Value)]) -> (AgentMachine, Vec<Command>) {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: tool_response(calls),
        },
    );
    (m, out)
}

/// The provider's answer to `request`: it failed with `failure`.
fn failed(request: RequestId, failure: ProviderFailure) -> Event {
    Event::ProviderFailed { request, failure }
}

fn fail_error(commands: &[Command]) -> RunError {
    match commands.last() {
        Some(Command::Fail { error }) => (**error).clone(),
        other => panic!("expected Fail last, got {other:#?}"),
    }
}

fn appended(commands: &[Command]) -> Vec<Message> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::AppendMessage { message } => Some(Message::clone(message)),
            _ => None,
        })
        .collect()
}

fn tool_results(message: &Message) -> Vec<(String, bool, String)> {
    message
        .tool_results()
        .map(|r| (r.tool_use_id.clone(), r.is_error, r.text()))
        .collect()
}

#[test]
fn rate_limited_request_is_retried_without_duplicate_messages() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, attempt, first) = sent(&m.step(Millis(0), user("hi")));
    assert_eq!(attempt, 1);
    let out = m.step(
        Millis(10),
        failed(req, failure(FailureKind::RateLimited, 429)),
    );
    assert!(appended(&out).is_empty());
    let (timer, delay) = sleep(&out);
    assert_eq!(delay, 500);
    let (req2, attempt2, second) = sent(&m.step(Millis(510), Event::TimerFired { timer }));
    assert_eq!(attempt2, 2);
    assert!(
        Arc::ptr_eq(first.arc(), second.arc()),
        "retry must reuse the snapshot"
    );
    let out = m.step(
        Millis(600),
        Event::ProviderSucceeded {
            request: req2,
            response: text_response("hello"),
        },
    );
    assert_eq!(appended(&out), vec![Message::assistant_text("hello")]);
    assert!(matches!(out.last(), Some(Command::Finish { turns: 1, .. })));
    assert_eq!(
        *m.conversation(),
        Conversation::from(vec![
            Message::user_text("hi"),
            Message::assistant_text("hello")
        ])
    );
}

#[test]
fn server_error_notifies_before_the_delay() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(5),
        failed(req, failure(FailureKind::ServerError, 500)),
    );
    assert_eq!(out.len(), 2, "{out:#?}");
    let Command::NotifyRetry { info } = &out[0] else {
        panic!("notification must come first: {out:#?}");
    };
    assert_eq!(
        (info.attempt, info.max_attempts, info.delay_ms, info.status),
        (2, 4, 500, Some(500))
    );
    assert!(matches!(out[1], Command::Sleep { delay_ms: 500, .. }));
    assert_eq!(
        info.to_string(),
        "provider server error: retrying in 0.5s (attempt 2/4)"
    );
}

#[test]
fn backoff_grows_and_attempts_are_capped_with_the_last_failure_returned() {
    let mut m = AgentMachine::new(config(), 1);
    let (mut req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let mut now = Millis(0);
    let mut delays = Vec::new();
    for i in 0..3 {
        let out = m.step(now, failed(req, failure(FailureKind::Unavailable, 529 + i)));
        let (timer, delay) = sleep(&out);
        delays.push(delay);
        now = now.plus(delay);
        req = sent(&m.step(now, Event::TimerFired { timer })).0;
    }
    assert_eq!(delays, [500, 1000, 2000]);
    let out = m.step(now, failed(req, failure(FailureKind::Unavailable, 599)));
    match fail_error(&out) {
        RunError::Provider {
            failure, reason, ..
        } => {
            assert_eq!(failure.status, Some(599));
            assert_eq!(reason, GiveUp::AttemptsExhausted { attempts: 4 });
        }
        other => panic!("{other:?}"),
    }
    assert!(m.is_terminal());
}

#[test]
fn auth_failure_is_not_retried() {
    for (kind, status) in [
        (FailureKind::AuthFailed, 401),
        (FailureKind::AuthFailed, 403),
        (FailureKind::BadRequest, 400),
        (FailureKind::ModelNotFound, 404),
        (FailureKind::QuotaExhausted, 429),
    ] {
        let mut m = AgentMachine::new(config(), 1);
        let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
        let out = m.step(Millis(1), failed(req, failure(kind, status)));
        assert_eq!(out.len(), 1, "{kind:?}: {out:#?}");
        assert!(matches!(
            fail_error(&out),
            RunError::Provider {
                reason: GiveUp::NotRetryable,
                ..
            }
        ));
    }
}

#[test]
fn server_retry_after_wins_and_above_the_cap_fails_at_once() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let mut f = failure(FailureKind::RateLimited, 429);
    f.retry_after_ms = Some(5_000);
    let out = m.step(Millis(1), failed(req, f));
    assert_eq!(sleep(&out).1, 5_000);

    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let mut f = failure(FailureKind::RateLimited, 429);
    f.retry_after_ms = Some(600_001);
    let out = m.step(Millis(1), failed(req, f));
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::RetryAfterTooLong {
                hint_ms: 600_001,
                cap_ms: 600_000
            },
            ..
        }
    ));
}

fn overflow() -> ProviderFailure {
    let mut f = failure(FailureKind::ContextOverflow, 400);
    f.message = "prompt is too long: 205351 tokens > 200000 maximum".into();
    f
}

fn big_conversation() -> Conversation {
    let mut c = Conversation::new();
    c.push(Message::user_text("task"));
    for i in 0..6 {
        c.push(Message::assistant_text(format!("{i}{}", "x".repeat(4_000))));
        c.push(Message::user_text(format!("more {i}")));
    }
    c.push(Message::assistant_text("ok"));
    c
}

#[test]
fn context_overflow_compacts_once_and_retries_once() {
    let mut m = AgentMachine::with_conversation(config(), 1, big_conversation());
    let (req, attempt, _) = sent(&m.step(Millis(0), user("continue")));
    let out = m.step(Millis(1), failed(req, overflow()));
    let Command::NotifyRetry { info } = &out[0] else {
        panic!("{out:#?}")
    };
    assert_eq!(
        (info.kind, info.attempt, info.delay_ms),
        (FailureKind::ContextOverflow, 1, 0)
    );
    let Command::Compact {
        compaction,
        conversation,
    } = &out[1]
    else {
        panic!("{out:#?}")
    };
    let compacted = compact(conversation, &m.config().compaction).unwrap();
    let expected_len = compacted.len();
    let out = m.step(
        Millis(2),
        Event::CompactionFinished {
            compaction: *compaction,
            result: Ok(compacted),
        },
    );
    assert!(matches!(
        &out[0],
        Command::ReplaceConversation { report, .. } if report.before_messages == 15
            && report.after_messages == expected_len
            && report.method == CompactionMethod::Elide
            && report.reason == CompactionReason::Overflow
            && report.after_bytes < report.before_bytes
            && report.after_tokens < report.before_tokens
    ));
    let (req2, attempt2, snap) = sent(&out);
    assert_eq!(attempt2, attempt, "compaction must not consume an attempt");
    assert_eq!(snap.len(), expected_len);
    // Overflowing again fails: one compaction per request.
    let out = m.step(Millis(3), failed(req2, overflow()));
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::OverflowAfterCompaction,
            ..
        }
    ));
}

#[test]
fn compaction_that_does_not_shrink_fails() {
    let mut m = AgentMachine::with_conversation(config(), 1, big_conversation());
    let (req, _, snapshot) = sent(&m.step(Millis(0), user("continue")));
    let out = m.step(Millis(1), failed(req, overflow()));
    let Command::Compact { compaction, .. } = &out[1] else {
        panic!("{out:#?}")
    };
    let out = m.step(
        Millis(2),
        Event::CompactionFinished {
            compaction: *compaction,
            result: Ok((*snapshot).clone()),
        },
    );
    assert!(matches!(
        fail_error(&out),
        RunError::Provider { reason: GiveUp::CompactionFailed { .. }, failure, .. } if failure.kind == FailureKind::ContextOverflow
    ));
}

#[test]
fn overflow_with_compaction_off_fails() {
    let mut m = AgentMachine::new(
        MachineConfig {
            auto_compact: false,
            ..config()
        },
        1,
    );
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, overflow()));
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::CompactionDisabled,
            ..
        }
    ));
}

#[test]
fn unknown_tool_gets_an_error_result_and_a_new_request() {
    let (_, out) = answered_with_tools(&[("t1", "delete_everything", json!({}))]);
    assert!(!out.iter().any(|c| matches!(c, Command::RunTools { .. })));
    let msgs = appended(&out);
    assert_eq!(msgs.len(), 2);
    let results = tool_results(&msgs[1]);
    assert_eq!(results.len(), 1);
    assert!(results[0].1);
    assert_eq!(
        results[0].2,
        "Tool execution failed for `delete_everything`: unknown tool `delete_everything`; \
         available tools: read, list\n\
         You may fix the arguments, try a different tool, or explain the failure to the user."
    );
    let (_, attempt, snap) = sent(&out);
    assert_eq!(attempt, 1);
    assert_eq!(snap.len(), 3);
    assert_eq!(snap.check_tool_pairing(false), Ok(()));
}

#[test]
fn invalid_and_truncated_input_get_error_results_without_running() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let mut response = tool_response(&[
        ("a", "read", json!({"path": "x"})),
        ("b", "read", json!({})),
        ("c", "list", json!([1, 2])),
        ("d", "read", json!({})),
    ]);
    response.stop_reason = StopReason::MaxTokens;
    response = response.with_input_problems(vec![
        ToolInputProblem {
            tool_use_id: "b".into(),
            kind: InputProblemKind::InvalidJson,
            raw: "{\"path\": ".into(),
            detail: "EOF while parsing".into(),
        },
        ToolInputProblem {
            tool_use_id: "d".into(),
            kind: InputProblemKind::Truncated,
            raw: "{\"path\": \"src/ma".into(),
            detail: "cut at max_tokens".into(),
        },
    ]);
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response,
        },
    );
    let (batch, calls) = run_tools(&out);
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    let out = m.step(
        Millis(2),
        Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::PerCall(vec![CallOutcome {
                tool_use_id: "a".into(),
                result: Ok(ToolOutput::text("contents")),
            }]),
        },
    );
    let results = tool_results(&appended(&out)[0]);
    let flags: Vec<_> = results.iter().map(|r| (r.0.as_str(), r.1)).collect();
    assert_eq!(flags, [("a", false), ("b", true), ("c", true), ("d", true)]);
    assert_eq!(results[0].2, "contents");
    assert!(results[1].2.contains("not valid JSON"));
    assert!(results[2].2.contains("must be a JSON object"));
    assert!(results[3].2.contains("output token limit"));
    sent(&out);
}

#[test]
fn handler_error_gives_an_error_result_and_another_model_turn() {
    let (mut m, out) = answered_with_tools(&[
        ("a", "read", json!({"path": "missing.rs"})),
        ("b", "list", json!({})),
    ]);
    let (batch, calls) = run_tools(&out);
    assert_eq!(calls.len(), 2);
    // Outcomes arrive out of order; results keep the calls' order.
    let out = m.step(
        Millis(2),
        Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::PerCall(vec![
                CallOutcome {
                    tool_use_id: "b".into(),
                    result: Ok(ToolOutput::text("a.rs")),
                },
                CallOutcome {
                    tool_use_id: "a".into(),
                    result: Err(ToolFailure::model("file not found: missing.rs")),
                },
            ]),
        },
    );
    let results = tool_results(&appended(&out)[0]);
    assert_eq!(results[0].0, "a");
    assert!(results[0].1);
    assert!(results[0]
        .2
        .starts_with("Tool execution failed for `read`: file not found: missing.rs\n"));
    assert_eq!(
        (results[1].0.as_str(), results[1].1, results[1].2.as_str()),
        ("b", false, "a.rs")
    );
    let (req2, _, _) = sent(&out);
    let out = m.step(
        Millis(3),
        Event::ProviderSucceeded {
            request: req2,
            response: text_response("sorry"),
        },
    );
    assert!(matches!(out.last(), Some(Command::Finish { turns: 2, .. })));
}

#[test]
fn whole_batch_failure_becomes_an_error_result_per_call() {
    let (mut m, out) = answered_with_tools(&[
        ("a", "read", json!({})),
        ("x", "nope", json!({})),
        ("b", "list", json!({})),
    ]);
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(2),
        Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::WholeBatch(ToolFailure::model("MCP server exited")),
        },
    );
    let results = tool_results(&appended(&out)[0]);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r.1));
    assert!(results[0].2.contains("MCP server exited"));
    assert!(results[1].2.contains("unknown tool"));
    assert!(results[2].2.contains("MCP server exited"));
}

#[test]
fn cancellation_and_host_failures_fail_the_run() {
    let host = HostFailure::new(HostFailureKind::OutOfMemory, "allocation of 8 GiB failed");
    for outcome in [
        BatchOutcome::WholeBatch(ToolFailure::Host(host.clone())),
        BatchOutcome::PerCall(vec![CallOutcome {
            tool_use_id: "a".into(),
            result: Err(ToolFailure::Host(host.clone())),
        }]),
    ] {
        let (mut m, out) = answered_with_tools(&[("a", "read", json!({}))]);
        let (batch, _) = run_tools(&out);
        let out = m.step(Millis(2), Event::ToolsFinished { batch, outcome });
        assert_eq!(out.len(), 1);
        assert_eq!(
            fail_error(&out),
            RunError::Host {
                failure: host.clone()
            }
        );
        assert_eq!(m.conversation().len(), 2, "no tool results are appended");
    }
    // Cancel during a backoff: fails at once, and the timer firing later sends nothing.
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        failed(req, failure(FailureKind::Unavailable, 529)),
    );
    let (timer, _) = sleep(&out);
    assert_eq!(
        fail_error(&m.step(Millis(2), Event::Cancel)),
        RunError::Canceled
    );
    assert_eq!(
        m.handle(Millis(600), Event::TimerFired { timer }),
        Handled::Ignored(IgnoreReason::Terminal)
    );
    assert!(m.poll().is_none());
}

#[test]
fn stale_and_duplicate_answers_are_ignored() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        failed(req, failure(FailureKind::Unavailable, 503)),
    );
    let (timer, _) = sleep(&out);
    // A late success for the failed request must not append anything.
    assert_eq!(
        m.handle(
            Millis(2),
            Event::ProviderSucceeded {
                request: req,
                response: text_response("late")
            }
        ),
        Handled::Ignored(IgnoreReason::Stale)
    );
    assert_eq!(
        m.handle(
            Millis(3),
            Event::TimerFired {
                timer: TimerId(999)
            }
        ),
        Handled::Ignored(IgnoreReason::Stale)
    );
    assert_eq!(
        m.handle(Millis(3), user("again")),
        Handled::Ignored(IgnoreReason::Unexpected)
    );
    assert!(m.poll().is_none());
    let (req2, _, _) = sent(&m.step(Millis(600), Event::TimerFired { timer }));
    assert_eq!(
        m.handle(Millis(601), Event::TimerFired { timer }),
        Handled::Ignored(IgnoreReason::Stale)
    );
    m.step(
        Millis(700),
        Event::ProviderSucceeded {
            request: req2,
            response: text_response("ok"),
        },
    );
    assert_eq!(m.conversation().len(), 2);
}

#[test]
fn empty_responses_are_retried_with_a_small_cap() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: text_response("  "),
        },
    );
    assert!(appended(&out).is_empty());
    let (timer, _) = sleep(&out);
    let (req, _, _) = sent(&m.step(Millis(600), Event::TimerFired { timer }));
    let out = m.step(
        Millis(601),
        Event::ProviderSucceeded {
            request: req,
            response: text_response(""),
        },
    );
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::EmptyResponses { count: 2 },
            ..
        }
    ));
}

#[test]
fn max_turns_stops_after_answering_open_tool_calls() {
    let mut m = AgentMachine::new(
        MachineConfig {
            max_turns: Some(1),
            ..config()
        },
        1,
    );
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: tool_response(&[("a", "read", json!({}))]),
        },
    );
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(2),
        Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::PerCall(vec![CallOutcome {
                tool_use_id: "a".into(),
                result: Ok(ToolOutput::text("x")),
            }]),
        },
    );
    assert_eq!(appended(&out).len(), 1);
    assert!(matches!(
        out.last(),
        Some(Command::Finish {
            reason: FinishReason::MaxTurns,
            turns: 1
        })
    ));
    assert_eq!(m.conversation().check_tool_pairing(false), Ok(()));
}

#[test]
fn a_batch_stopped_by_a_cancel_keeps_the_results_of_the_calls_that_finished() {
    let canceled = HostFailure::new(HostFailureKind::Canceled, "canceled during `list`");
    let oom = HostFailure::new(HostFailureKind::OutOfMemory, "allocation of 8 GiB failed");
    for (stop, error) in [
        (canceled.clone(), RunError::Canceled),
        (oom.clone(), RunError::Host { failure: oom }),
    ] {
        let (mut m, out) = answered_with_tools(&[
            ("a", "read", json!({})),
            ("b", "list", json!({})),
            ("c", "read", json!({})),
        ]);
        let (batch, _) = run_tools(&out);
        // `a` finished, `b` was stopped, `c` never started (no outcome at all).
        let outcome = BatchOutcome::PerCall(vec![
            CallOutcome::ok("a", ToolOutput::text("a's contents")),
            CallOutcome::new("b", Err(ToolFailure::Host(stop))),
        ]);
        let out = m.step(Millis(2), Event::ToolsFinished { batch, outcome });
        assert_eq!(out.len(), 2, "{out:#?}");
        let results = tool_results(&appended(&out)[0]);
        assert_eq!(results[0], ("a".into(), false, "a's contents".into()));
        for (result, name) in results[1..].iter().zip(["list", "read"]) {
            assert!(result.1, "{results:?}");
            assert!(result.2.contains("interrupted"), "{results:?}");
            assert!(result.2.contains(name), "{results:?}");
        }
        assert_eq!(fail_error(&out), error);
        assert_eq!(m.conversation().len(), 3);
        assert_eq!(m.conversation().check_tool_pairing(false), Ok(()));
        // The next run goes on from the results: nothing is answered twice.
        let mut next = AgentMachine::with_conversation(config(), 1, m.conversation().clone());
        let out = next.step(Millis(0), user("go on"));
        assert!(tool_results(&appended(&out)[0]).is_empty());
        let (_, _, snap) = sent(&out);
        assert_eq!(snap.check_tool_pairing(false), Ok(()));
    }
    // A refused call has its answer too: it is kept beside the interrupted one.
    let (mut m, out) = answered_with_tools(&[("a", "read", json!({})), ("b", "nope", json!({}))]);
    let (batch, _) = run_tools(&out);
    let outcome = BatchOutcome::PerCall(vec![CallOutcome::new(
        "a",
        Err(ToolFailure::Host(canceled)),
    )]);
    let out = m.step(Millis(2), Event::ToolsFinished { batch, outcome });
    let results = tool_results(&appended(&out)[0]);
    assert!(results[0].2.contains("interrupted"), "{results:?}");
    assert!(results[1].2.contains("unknown tool"), "{results:?}");
    assert_eq!(fail_error(&out), RunError::Canceled);
}

#[test]
fn resume_answers_interrupted_tool_calls_and_continues() {
    let mut c = Conversation::new();
    c.push(Message::user_text("hi"));
    c.push(tool_response(&[("a", "read", json!({}))]).message);
    let mut m = AgentMachine::with_conversation(config(), 1, c);
    let out = m.step(Millis(0), Event::Resume);
    let results = tool_results(&appended(&out)[0]);
    assert!(results[0].1 && results[0].2.contains("interrupted"));
    let (_, _, snap) = sent(&out);
    assert_eq!(snap.check_tool_pairing(false), Ok(()));

    let mut done = Conversation::new();
    done.push(Message::user_text("hi"));
    done.push(Message::assistant_text("bye"));
    let mut m = AgentMachine::with_conversation(config(), 1, done);
    assert!(matches!(
        m.step(Millis(0), Event::Resume).last(),
        Some(Command::Finish {
            reason: FinishReason::NothingToDo,
            ..
        })
    ));
}

#[test]
fn duplicate_and_empty_tool_ids_are_made_unique() {
    let (_, out) = answered_with_tools(&[
        ("a", "read", json!({})),
        ("a", "list", json!({})),
        ("", "read", json!({})),
    ]);
    let (_, calls) = run_tools(&out);
    let ids: BTreeSet<_> = calls.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids.len(), 3);
    assert!(!ids.contains(""));

    // Many calls (checked through a sorted list rather than a scan), one id repeated.
    let mut many: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    many[39] = "c17".into();
    let calls: Vec<(&str, &str, serde_json::Value)> = many
        .iter()
        .map(|id| (id.as_str(), "read", json!({})))
        .collect();
    let (_, out) = answered_with_tools(&calls);
    let (_, calls) = run_tools(&out);
    let ids: BTreeSet<_> = calls.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids.len(), 40);
    assert_eq!(calls[17].id, "c17", "the first occurrence keeps its id");
}

/// Few calls are matched to outcomes by a scan, many through a sorted index: either way
/// results keep the calls' order and a refused call keeps its refusal. Outcomes that do not
/// answer the batch's calls, each once (a stray id, the refused call's, one twice, one
/// missing), are refused with the reason and leave the machine waiting for the right ones.
#[test]
fn outcomes_are_matched_to_calls_by_id_for_few_and_many_calls() {
    for n in [3, 40] {
        // Ids in an order unlike their sort order; the last call names an unknown tool.
        let ids: Vec<String> = (0..n).map(|i| format!("call_{}", (i * 7) % n)).collect();
        let mut calls: Vec<(&str, &str, serde_json::Value)> = ids
            .iter()
            .map(|id| (id.as_str(), "read", json!({})))
            .collect();
        calls[n - 1].1 = "delete";
        let (mut m, out) = answered_with_tools(&calls);
        let (batch, run) = run_tools(&out);
        assert_eq!(run.len(), n - 1, "n = {n}");
        let outcome = |id: &str| CallOutcome {
            tool_use_id: id.to_owned(),
            result: Ok(ToolOutput::text(format!("out {id}"))),
        };
        let outcomes: Vec<CallOutcome> = ids[..n - 1].iter().rev().map(|id| outcome(id)).collect();
        let with = |change: &dyn Fn(&mut Vec<CallOutcome>)| {
            let mut changed = outcomes.clone();
            change(&mut changed);
            BatchOutcome::PerCall(changed)
        };
        let wrong = [
            // A stray id that sorts between two of the batch's ids.
            (
                with(&|o| o.push(outcome(&format!("{}x", ids[1])))),
                "not a call",
            ),
            (with(&|o| o.push(outcome(&ids[n - 1]))), "not a call"),
            (with(&|o| o.push(outcome(&ids[0]))), "two outcomes"),
            (
                with(&|o| o.retain(|x| x.tool_use_id != ids[1])),
                "no outcome",
            ),
        ];
        for (outcome, why) in wrong {
            let told = m.tool_outcome_mismatch(batch, &outcome).unwrap_or_default();
            assert!(told.contains(why), "n = {n}: {told:?}");
            assert_eq!(
                m.handle(Millis(2), Event::ToolsFinished { batch, outcome }),
                Handled::Ignored(IgnoreReason::Mismatched),
                "n = {n}: {why}"
            );
            assert_eq!(m.poll(), None);
        }
        let out = m.step(
            Millis(2),
            Event::ToolsFinished {
                batch,
                outcome: BatchOutcome::PerCall(outcomes),
            },
        );
        let results = tool_results(&appended(&out)[0]);
        assert_eq!(results.len(), n, "n = {n}");
        for (i, (id, is_error, text)) in results.iter().enumerate() {
            assert_eq!(id, &ids[i], "n = {n}");
            if i == n - 1 {
                assert!(*is_error && text.contains("delete"), "n = {n}: {text}");
            } else {
                assert_eq!((*is_error, text.as_str()), (false, &*format!("out {id}")));
            }
        }
    }
}

#[test]
fn corrupt_conversation_fails_with_an_invariant_error() {
    let mut c = Conversation::new();
    c.push(Message::user_text("hi"));
    c.push(tool_response(&[("a", "read", json!({}))]).message);
    c.push(Message::user_text("no results here"));
    let mut m = AgentMachine::with_conversation(config(), 1, c);
    assert!(matches!(
        fail_error(&m.step(Millis(0), user("x"))),
        RunError::Invariant { .. }
    ));
}

fn fallback_config() -> MachineConfig {
    MachineConfig {
        targets: vec![
            TargetSpec {
                provider: crate::ProviderKind::Anthropic,
                model: "claude".into(),
                context_window: None,
                identity: None,
            },
            TargetSpec {
                provider: crate::ProviderKind::OpenAi,
                model: "gpt".into(),
                context_window: None,
                identity: None,
            },
        ],
        ..config()
    }
}

#[test]
fn fallback_happens_only_after_the_primary_attempts_are_spent() {
    let mut m = AgentMachine::new(fallback_config(), 1);
    let (mut req, _, first) = sent(&m.step(Millis(0), user("hi")));
    let mut now = Millis(0);
    for _ in 0..3 {
        let out = m.step(now, failed(req, failure(FailureKind::Unavailable, 529)));
        assert!(!out
            .iter()
            .any(|c| matches!(c, Command::NotifyFallback { .. })));
        let (timer, delay) = sleep(&out);
        now = now.plus(delay);
        req = sent(&m.step(now, Event::TimerFired { timer })).0;
    }
    let out = m.step(now, failed(req, failure(FailureKind::Unavailable, 529)));
    let Command::NotifyFallback { info } = &out[0] else {
        panic!("{out:#?}")
    };
    assert_eq!(
        (info.from, info.to, info.to_label.as_str()),
        (0, 1, "openai:gpt")
    );
    match &out[1] {
        Command::SendRequest {
            target: 1,
            attempt: 1,
            conversation,
            ..
        } => {
            assert_eq!(conversation, &first);
        }
        other => panic!("{other:#?}"),
    }
}

fn rate_limited_for(retry_after_ms: u64) -> ProviderFailure {
    let mut f = failure(FailureKind::RateLimited, 429);
    f.retry_after_ms = Some(retry_after_ms);
    f
}

#[test]
fn a_90_s_retry_after_with_nowhere_else_to_go_is_waited_out_and_shown_first() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, rate_limited_for(90_000)));
    let Some(Command::NotifyRetry { info }) = out.first() else {
        panic!("the wait is told before it starts: {out:#?}")
    };
    assert_eq!((info.delay_ms, info.retry_after_ms), (90_000, Some(90_000)));
    let (timer, delay) = sleep(&out);
    assert_eq!(delay, 90_000);
    let (_, attempt, _) = sent(&m.step(Millis(90_001), Event::TimerFired { timer }));
    assert_eq!(attempt, 2);
}

#[test]
fn a_90_s_retry_after_with_a_fallback_target_moves_to_it_at_once() {
    let mut m = AgentMachine::new(fallback_config(), 1);
    let (req, _, first) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, rate_limited_for(90_000)));
    assert!(!out.iter().any(|c| matches!(c, Command::Sleep { .. })));
    let Command::NotifyFallback { info } = &out[0] else {
        panic!("{out:#?}")
    };
    assert_eq!((info.from, info.to), (0, 1));
    match &out[1] {
        Command::SendRequest {
            target: 1,
            attempt: 1,
            conversation,
            ..
        } => assert_eq!(conversation, &first),
        other => panic!("{other:#?}"),
    }
    // The first target's reason is kept for the final error.
    let out = m.step(
        Millis(2),
        failed(sent(&out).0, failure(FailureKind::AuthFailed, 401)),
    );
    let RunError::Provider { earlier, .. } = fail_error(&out) else {
        panic!("{out:#?}")
    };
    assert_eq!(
        earlier[0].reason,
        GiveUp::RetryAfterLong {
            hint_ms: 90_000,
            fallback_after_ms: 30_000
        }
    );
}

#[test]
fn a_retry_after_within_the_fallback_threshold_is_waited_even_with_a_fallback() {
    let mut m = AgentMachine::new(fallback_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, rate_limited_for(30_000)));
    assert_eq!(sleep(&out).1, 30_000);
}

#[test]
fn a_retry_after_above_the_cap_with_nowhere_else_to_go_fails_the_run() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, rate_limited_for(3_600_000)));
    assert!(!out.iter().any(|c| matches!(c, Command::Sleep { .. })));
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::RetryAfterTooLong {
                hint_ms: 3_600_000,
                cap_ms: 600_000
            },
            target: 0,
            ..
        }
    ));
}

#[test]
fn cancel_ends_a_long_server_wait_at_once() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, rate_limited_for(90_000)));
    let (timer, _) = sleep(&out);
    assert_eq!(
        fail_error(&m.step(Millis(2), Event::Cancel)),
        RunError::Canceled
    );
    assert!(m
        .step(Millis(90_001), Event::TimerFired { timer })
        .is_empty());
}

#[test]
fn quota_exhaustion_falls_back_at_once_and_the_final_error_lists_every_target() {
    let mut m = AgentMachine::new(fallback_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        failed(req, failure(FailureKind::QuotaExhausted, 429)),
    );
    let (req, _, _) = sent(&out);
    let out = m.step(
        Millis(2),
        failed(req, failure(FailureKind::AuthFailed, 401)),
    );
    let error = fail_error(&out);
    let RunError::Provider {
        earlier, target, ..
    } = &error
    else {
        panic!("{error:?}")
    };
    assert_eq!(*target, 1);
    assert_eq!(earlier.len(), 1);
    assert_eq!(earlier[0].failure.kind, FailureKind::QuotaExhausted);
    let text = error.to_string();
    assert!(
        text.contains("anthropic:claude") && text.contains("quota exhausted"),
        "{text}"
    );
}

#[test]
fn overflow_and_bad_requests_never_fall_back() {
    let mut m = AgentMachine::new(
        MachineConfig {
            auto_compact: false,
            ..fallback_config()
        },
        1,
    );
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, overflow()));
    assert!(matches!(
        fail_error(&out),
        RunError::Provider { target: 0, .. }
    ));
    let mut m = AgentMachine::new(fallback_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        failed(req, failure(FailureKind::BadRequest, 400)),
    );
    assert!(matches!(
        fail_error(&out),
        RunError::Provider { target: 0, .. }
    ));
}

fn budgeted(max_wait_ms: u64) -> MachineConfig {
    MachineConfig {
        retry_budget: Some(BudgetUse { max_wait_ms }),
        ..config()
    }
}

/// The permit request among `commands`: (id, kind, target, deadline).
fn permit(commands: &[Command]) -> (PermitId, PermitKind, usize, Millis) {
    commands
        .iter()
        .find_map(|c| match c {
            Command::AcquirePermit { permit, ask } => {
                Some((*permit, ask.kind, ask.target, ask.deadline))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no AcquirePermit in {commands:#?}"))
}

fn notes(commands: &[Command]) -> Vec<BudgetNote> {
    commands
        .iter()
        .filter_map(|c| match c {
            Command::NoteBudget { note } => Some(*note),
            _ => None,
        })
        .collect()
}

fn granted(permit: PermitId) -> Event {
    Event::PermitAnswered {
        permit,
        decision: PermitDecision::Granted,
    }
}

#[test]
fn with_a_budget_every_attempt_asks_first_and_a_denied_retry_fails() {
    let mut m = AgentMachine::new(budgeted(500), 1);
    let (p, kind, target, _) = permit(&m.step(Millis(0), user("hi")));
    assert_eq!((kind, target), (PermitKind::FirstAttempt, 0));
    let (req, attempt, _) = sent(&m.step(Millis(0), granted(p)));
    assert_eq!(attempt, 1);
    let (timer, d) = sleep(&m.step(
        Millis(0),
        failed(req, failure(FailureKind::Unavailable, 529)),
    ));
    let (p, kind, _, deadline) = permit(&m.step(Millis(d), Event::TimerFired { timer }));
    assert_eq!(kind, PermitKind::Charged);
    assert_eq!(deadline, Millis(d + 500));
    let (req, attempt, _) = sent(&m.step(Millis(d + 100), granted(p)));
    assert_eq!(attempt, 2);
    let now = Millis(d + 200);
    let (timer, d2) = sleep(&m.step(now, failed(req, failure(FailureKind::Unavailable, 529))));
    let now = now.plus(d2);
    let (p, _, _, _) = permit(&m.step(now, Event::TimerFired { timer }));
    let out = m.step(
        now.plus(500),
        Event::PermitAnswered {
            permit: p,
            decision: PermitDecision::Denied,
        },
    );
    let error = fail_error(&out);
    assert!(matches!(
        error,
        RunError::Provider {
            reason: GiveUp::BudgetExhausted,
            ..
        }
    ));
    assert!(
        error.to_string().contains("retry budget exhausted"),
        "{error}"
    );
    // The budget may be a fleet's, in Redis: the message does not say whose.
    assert!(!error.to_string().contains("this process"), "{error}");
}

#[test]
fn a_permit_answered_late_or_twice_is_handled_once() {
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
    // The machine waits as long as the budget takes; a timer or stale answer changes nothing.
    assert_eq!(
        m.handle(Millis(1), Event::TimerFired { timer: TimerId(99) }),
        Handled::Ignored(IgnoreReason::Stale)
    );
    sent(&m.step(Millis(3_000), granted(p)));
    assert_eq!(
        m.handle(Millis(3_001), granted(p)),
        Handled::Ignored(IgnoreReason::Stale)
    );
}

#[test]
fn a_rate_limited_retry_tells_the_budget_and_costs_no_token() {
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
    let (req, _, _) = sent(&m.step(Millis(0), granted(p)));
    let mut f = failure(FailureKind::RateLimited, 429);
    f.retry_after_ms = Some(2_000);
    let out = m.step(Millis(300), failed(req, f));
    assert_eq!(
        notes(&out),
        [BudgetNote::RateLimited {
            target: 0,
            until: Millis(2_300)
        }]
    );
    let (timer, delay) = sleep(&out);
    assert_eq!(delay, 2_000);
    let (p, kind, _, _) = permit(&m.step(Millis(2_300), Event::TimerFired { timer }));
    assert_eq!(kind, PermitKind::Hinted);
    sent(&m.step(Millis(2_300), granted(p)));
}

#[test]
fn a_success_is_noted_to_the_budget_before_the_message_is_appended() {
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
    let (request, _, _) = sent(&m.step(Millis(0), granted(p)));
    let out = m.step(
        Millis(900),
        Event::ProviderSucceeded {
            request,
            response: text_response("hello"),
        },
    );
    assert!(matches!(
        out[0],
        Command::NoteBudget {
            note: BudgetNote::Succeeded { target: 0 }
        }
    ));
    assert!(matches!(out[1], Command::AppendMessage { .. }));
    // Without a budget, nothing is noted.
    let mut m = AgentMachine::new(config(), 1);
    let (request, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(900),
        Event::ProviderSucceeded {
            request,
            response: text_response("hello"),
        },
    );
    assert!(notes(&out).is_empty());
}

#[test]
fn a_shared_rate_limit_delays_even_a_first_attempt_visibly() {
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let (p, _, _, _) = permit(&m.step(Millis(100), user("hi")));
    let out = m.step(
        Millis(100),
        Event::PermitAnswered {
            permit: p,
            decision: PermitDecision::WaitUntil(Millis(5_100)),
        },
    );
    let info = out
        .iter()
        .find_map(|c| match c {
            Command::NotifyRetry { info } => Some(info.clone()),
            _ => None,
        })
        .expect("the wait is told to the UI");
    let (timer, delay) = sleep(&out);
    assert_eq!(info.kind, FailureKind::RateLimited);
    assert_eq!(info.attempt, 1);
    assert_eq!(info.delay_ms, delay);
    assert_eq!(info.retry_after_ms, Some(5_000));
    assert!((5_000..=7_000).contains(&delay), "{delay}");
    let now = Millis(100 + delay);
    let (p, kind, _, _) = permit(&m.step(now, Event::TimerFired { timer }));
    assert_eq!(kind, PermitKind::FirstAttempt);
    let (_, attempt, _) = sent(&m.step(now, granted(p)));
    assert_eq!(attempt, 1);
}

#[test]
fn a_shared_rate_limit_above_the_cap_gives_up_the_target() {
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
    let cap = m.config().retry.max_retry_after_ms;
    let out = m.step(
        Millis(0),
        Event::PermitAnswered {
            permit: p,
            decision: PermitDecision::WaitUntil(Millis(cap + 1)),
        },
    );
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::RetryAfterTooLong { .. },
            ..
        }
    ));
}

#[test]
fn a_90_s_retry_after_is_noted_to_the_fleet_whether_the_agent_waits_or_moves_on() {
    for (config, waits) in [
        (budgeted(5_000), true),
        (
            MachineConfig {
                retry_budget: Some(BudgetUse { max_wait_ms: 5_000 }),
                ..fallback_config()
            },
            false,
        ),
    ] {
        let mut m = AgentMachine::new(config, 1);
        let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
        let (req, _, _) = sent(&m.step(Millis(0), granted(p)));
        let out = m.step(Millis(10), failed(req, rate_limited_for(90_000)));
        assert!(
            out.contains(&Command::NoteBudget {
                note: BudgetNote::RateLimited {
                    target: 0,
                    until: Millis(90_010)
                }
            }),
            "{out:#?}"
        );
        let slept = out.iter().any(|c| matches!(c, Command::Sleep { .. }));
        assert_eq!(slept, waits, "{out:#?}");
    }
}

#[test]
fn a_long_shared_rate_limit_with_a_fallback_target_moves_to_it_at_once() {
    let mut m = AgentMachine::new(
        MachineConfig {
            retry_budget: Some(BudgetUse { max_wait_ms: 5_000 }),
            ..fallback_config()
        },
        1,
    );
    let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(0),
        Event::PermitAnswered {
            permit: p,
            decision: PermitDecision::WaitUntil(Millis(90_000)),
        },
    );
    assert!(!out.iter().any(|c| matches!(c, Command::Sleep { .. })));
    assert!(matches!(out[0], Command::NotifyFallback { .. }), "{out:#?}");
    let (_, kind, target, _) = permit(&out);
    assert_eq!((kind, target), (PermitKind::FirstAttempt, 1));
}

#[test]
fn a_budgeted_fleet_on_one_budget_completes_a_blip_that_drains_the_bucket() {
    // Ten agents on a one-token budget, every first attempt failing once: successes pay for
    // the retries that wait.
    let mut budget = RetryBudget::new(BudgetConfig {
        capacity: 1.0,
        initial: 1.0,
        deposit_per_request: 0.0,
        deposit_per_success: 1.0,
        refill_per_sec: 0.0,
        deposit_per_answered_retry: 0.0,
    });
    let mut machines: Vec<AgentMachine> = (0..10)
        .map(|i| AgentMachine::new(budgeted(60_000), i))
        .collect();
    // (time, agent, event) in arrival order.
    let mut inbox: std::collections::BTreeMap<(u64, u64), (usize, Event)> = Default::default();
    let mut seq = 0u64;
    let mut push = |inbox: &mut std::collections::BTreeMap<(u64, u64), (usize, Event)>,
                    at: u64,
                    agent: usize,
                    event: Event| {
        seq += 1;
        inbox.insert((at, seq), (agent, event));
    };
    for agent in 0..10 {
        push(&mut inbox, 0, agent, user("hi"));
    }
    let mut tickets: std::collections::BTreeMap<Ticket, (usize, PermitId)> = Default::default();
    let mut failed_once = [false; 10];
    while let Some(((at, _), (agent, event))) = inbox.pop_first() {
        let now = Millis(at);
        for command in machines[agent].step(now, event) {
            match command {
                Command::AcquirePermit { permit, ask } => {
                    let ticket = Ticket(permit.0 * 100 + agent as u64);
                    tickets.insert(ticket, (agent, permit));
                    if let Some(decision) = budget.request(now, ticket, ask) {
                        push(
                            &mut inbox,
                            at,
                            agent,
                            Event::PermitAnswered { permit, decision },
                        );
                    }
                }
                Command::NoteBudget { note } => budget.record(now, note),
                Command::SendRequest { request, .. } => {
                    let event = if failed_once[agent] {
                        Event::ProviderSucceeded {
                            request,
                            response: text_response("ok"),
                        }
                    } else {
                        failed_once[agent] = true;
                        Event::ProviderFailed {
                            request,
                            failure: failure(FailureKind::Unavailable, 529),
                        }
                    };
                    push(&mut inbox, at + 100, agent, event);
                }
                Command::Sleep { timer, delay_ms } => {
                    push(
                        &mut inbox,
                        at + delay_ms,
                        agent,
                        Event::TimerFired { timer },
                    );
                }
                _ => {}
            }
            while let Some((ticket, decision)) = budget.poll_decision() {
                let (agent, permit) = tickets[&ticket];
                push(
                    &mut inbox,
                    at,
                    agent,
                    Event::PermitAnswered { permit, decision },
                );
            }
        }
    }
    assert!(machines.iter().all(|m| matches!(m.outcome(), Some(Ok(_)))));
    assert_eq!(budget.stats().granted, 10);
}

#[test]
fn same_seed_and_events_give_identical_commands() {
    let run = |seed| {
        let mut cfg = config();
        cfg.retry.jitter = true;
        let mut m = AgentMachine::new(cfg, seed);
        let mut out = Vec::new();
        let (mut req, _, _) = sent(&m.step(Millis(0), user("hi")));
        let mut now = Millis(0);
        for _ in 0..3 {
            let cmds = m.step(now, failed(req, failure(FailureKind::Unavailable, 503)));
            let (timer, delay) = sleep(&cmds);
            out.push(delay);
            now = now.plus(delay);
            req = sent(&m.step(now, Event::TimerFired { timer })).0;
        }
        out
    };
    assert_eq!(run(9), run(9));
    assert_ne!(run(9), run(10), "jitter must depend on the seed");
}

#[test]
fn after_a_fallback_later_turns_stay_on_the_fallback_target() {
    let mut m = AgentMachine::new(fallback_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        failed(req, failure(FailureKind::QuotaExhausted, 429)),
    );
    let (req, _, _) = sent(&out);
    let out = m.step(
        Millis(2),
        Event::ProviderSucceeded {
            request: req,
            response: tool_response(&[("a", "read", json!({}))]),
        },
    );
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(3),
        Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::PerCall(vec![CallOutcome {
                tool_use_id: "a".into(),
                result: Ok(ToolOutput::text("x")),
            }]),
        },
    );
    assert!(matches!(
        out.last(),
        Some(Command::SendRequest {
            target: 1,
            attempt: 1,
            ..
        })
    ));
    assert_eq!(m.target(), 1);
}

// ----- summarising compaction and compaction before overflow -------------------------------

fn summary_config(window: Option<u64>) -> MachineConfig {
    MachineConfig {
        compact_with: CompactionMethod::Summary,
        targets: vec![TargetSpec {
            provider: crate::ProviderKind::Anthropic,
            model: "claude-test".into(),
            context_window: window,
            identity: None,
        }],
        ..config()
    }
}

/// The single SendRequest among `commands`, with its purpose.
fn sent_for(commands: &[Command]) -> (RequestId, RequestPurpose, Snapshot) {
    let sends: Vec<_> = commands
        .iter()
        .filter_map(|c| match c {
            Command::SendRequest {
                request,
                purpose,
                conversation,
                ..
            } => Some((*request, *purpose, conversation.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(sends.len(), 1, "expected one SendRequest in {commands:#?}");
    sends.into_iter().next().unwrap()
}

fn report(commands: &[Command]) -> CompactionReport {
    commands
        .iter()
        .find_map(|c| match c {
            Command::ReplaceConversation { report, .. } => Some(report.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected ReplaceConversation in {commands:#?}"))
}

#[test]
fn overflow_asks_the_model_for_a_summary_and_retries_with_it_and_the_latest_exchange() {
    let original = big_conversation();
    let mut m = AgentMachine::with_conversation(summary_config(None), 1, original.clone());
    let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
    let out = m.step(Millis(1), failed(req, overflow()));
    assert!(
        matches!(&out[0], Command::NotifyRetry { info } if info.kind == FailureKind::ContextOverflow)
    );
    let (summary_req, purpose, asked) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Summary);
    assert!(crate::compaction::is_summary_request(&asked));
    assert!(asked.approx_bytes() < original.approx_bytes());
    let out = m.step(
        Millis(2),
        Event::ProviderSucceeded {
            request: summary_req,
            response: text_response("The task: continue. Done: six steps."),
        },
    );
    let r = report(&out);
    assert_eq!(
        (r.reason, r.method, r.summary_error.clone()),
        (CompactionReason::Overflow, CompactionMethod::Summary, None)
    );
    assert!(r.after_messages < r.before_messages, "{r:?}");
    assert!(r.after_bytes * 4 < r.before_bytes, "{r:?}");
    let (_, purpose, retried) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Turn);
    let first = &retried.messages()[0];
    assert_eq!(first.role, Role::User);
    assert!(first
        .text()
        .contains("The task: continue. Done: six steps."));
    // The latest exchange is kept verbatim; the summary is not an assistant turn.
    let n = retried.len();
    assert_eq!(
        retried.messages()[n - 2..],
        m.conversation().messages()[n - 2..]
    );
    assert_eq!(retried.messages()[n - 1].text(), "continue");
    assert_eq!(retried.messages()[1].role, Role::Assistant);
    assert!(!appended(&out)
        .iter()
        .any(|msg| msg.text().contains("six steps")));
}

#[test]
fn a_failed_summary_request_falls_back_to_elision_and_says_why() {
    let mut m = AgentMachine::with_conversation(summary_config(None), 1, big_conversation());
    let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
    let out = m.step(Millis(1), failed(req, overflow()));
    let (summary_req, _, _) = sent_for(&out);
    let out = m.step(
        Millis(2),
        failed(summary_req, failure(FailureKind::BadRequest, 400)),
    );
    let Some(Command::Compact {
        compaction,
        conversation,
    }) = out.last()
    else {
        panic!("{out:#?}")
    };
    let elided = compact(conversation, &m.config().compaction).unwrap();
    let out = m.step(
        Millis(3),
        Event::CompactionFinished {
            compaction: *compaction,
            result: Ok(elided),
        },
    );
    let r = report(&out);
    assert_eq!(r.method, CompactionMethod::Elide);
    assert!(
        r.summary_error.as_deref().unwrap().contains("status 400"),
        "{r:?}"
    );
    assert!(r.to_string().contains("elided instead"));
    let (_, purpose, _) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Turn);
    assert_eq!(
        m.target(),
        0,
        "a summary failure never falls back to another target"
    );
}

#[test]
fn a_summary_request_is_retried_under_the_retry_policy() {
    let mut m = AgentMachine::with_conversation(summary_config(None), 1, big_conversation());
    let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
    let out = m.step(Millis(1), failed(req, overflow()));
    let (summary_req, _, first) = sent_for(&out);
    let out = m.step(
        Millis(2),
        failed(summary_req, failure(FailureKind::Unavailable, 529)),
    );
    assert!(matches!(&out[0], Command::NotifyRetry { info } if info.attempt == 2));
    let (timer, _) = sleep(&out);
    let out = m.step(Millis(3_000), Event::TimerFired { timer });
    let (_, purpose, again) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Summary);
    assert_eq!(again, first);
}

#[test]
fn a_summary_request_that_overflows_too_drops_its_oldest_turns_and_is_sent_again() {
    let mut c = Conversation::new();
    c.push(Message::user_text("task"));
    for i in 0..40 {
        c.push(Message::assistant_text(format!(
            "step {i} {}",
            "y".repeat(900)
        )));
        c.push(Message::user_text(format!("more {i}")));
    }
    c.push(Message::assistant_text("ok"));
    let mut m = AgentMachine::with_conversation(summary_config(None), 1, c);
    let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
    let out = m.step(Millis(1), failed(req, overflow()));
    let (mut summary_req, _, mut asked) = sent_for(&out);
    let mut sizes = vec![asked.approx_bytes()];
    // Keep refusing: it shrinks each time, then gives up on the summary and elides.
    loop {
        let out = m.step(Millis(2), failed(summary_req, overflow()));
        if let Some(Command::Compact { .. }) = out.last() {
            break;
        }
        (summary_req, _, asked) = sent_for(&out);
        assert!(crate::compaction::is_summary_request(&asked));
        assert!(asked.approx_bytes() < *sizes.last().unwrap(), "{sizes:?}");
        assert_eq!(asked.check_tool_pairing(false), Ok(()));
        sizes.push(asked.approx_bytes());
        assert!(
            sizes.len() < 20,
            "the summary request must stop shrinking: {sizes:?}"
        );
    }
    assert!(sizes.len() > 2, "{sizes:?}");
}

fn with_usage(text: &str, input_tokens: u64) -> AssistantResponse {
    let mut r = tool_response(&[("t1", "read", json!({"path": "a"}))]);
    r.message.content.insert(0, ContentBlock::text(text));
    r.usage = Usage {
        input_tokens,
        output_tokens: 10,
        ..Usage::default()
    };
    r
}

#[test]
fn input_tokens_past_the_threshold_compact_before_the_next_request() {
    let mut m =
        AgentMachine::with_conversation(summary_config(Some(10_000)), 1, big_conversation());
    let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
    // 8,400 tokens of a 10,000 window: under 85 %, no compaction.
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: with_usage("a", 8_400),
        },
    );
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(2),
        Event::ToolsFinished {
            batch,
            outcome: ok_outcome("t1"),
        },
    );
    let (req, purpose, _) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Turn);
    // 8,500 tokens: the next request is preceded by a summary.
    let out = m.step(
        Millis(3),
        Event::ProviderSucceeded {
            request: req,
            response: with_usage("b", 8_500),
        },
    );
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(4),
        Event::ToolsFinished {
            batch,
            outcome: ok_outcome("t1"),
        },
    );
    let (summary_req, purpose, _) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Summary);
    assert!(!out.iter().any(|c| matches!(c, Command::NotifyRetry { .. })));
    let out = m.step(
        Millis(5),
        Event::ProviderSucceeded {
            request: summary_req,
            response: text_response("summary"),
        },
    );
    let r = report(&out);
    assert_eq!(
        (r.reason, r.method),
        (CompactionReason::Threshold, CompactionMethod::Summary)
    );
    let (req, purpose, snap) = sent_for(&out);
    assert_eq!(
        (purpose, snap.len()),
        (RequestPurpose::Turn, m.conversation().len())
    );
    // The compacted request overflows anyway: no second compaction for it.
    let out = m.step(Millis(6), failed(req, overflow()));
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::OverflowAfterCompaction,
            ..
        }
    ));
}

#[test]
fn a_threshold_compaction_that_cannot_shrink_sends_the_request_anyway() {
    let config = MachineConfig {
        compact_with: CompactionMethod::Elide,
        ..summary_config(Some(100))
    };
    let mut m = AgentMachine::new(config, 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: with_usage("a", 99),
        },
    );
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(2),
        Event::ToolsFinished {
            batch,
            outcome: ok_outcome("t1"),
        },
    );
    let Some(Command::Compact { compaction, .. }) = out.last() else {
        panic!("{out:#?}")
    };
    let out = m.step(
        Millis(3),
        Event::CompactionFinished {
            compaction: *compaction,
            result: Err(CompactionError::compactor("cannot shrink")),
        },
    );
    let (_, purpose, _) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Turn);
}

fn ok_outcome(id: &str) -> BatchOutcome {
    BatchOutcome::PerCall(vec![CallOutcome {
        tool_use_id: id.into(),
        result: Ok(ToolOutput::text("contents")),
    }])
}

#[test]
fn into_conversation_gives_the_finished_conversation_whether_or_not_a_snapshot_lives() {
    let finished = |keep_snapshot: bool| {
        let mut m = AgentMachine::new(config(), 1);
        let (request, _, snapshot) = sent(&m.step(Millis(0), user("hi")));
        let kept = keep_snapshot.then_some(snapshot);
        m.step(
            Millis(10),
            Event::ProviderSucceeded {
                request,
                response: text_response("hello"),
            },
        );
        assert!(m.is_terminal());
        let expected = m.conversation().clone();
        let kept_len = kept.as_ref().map(|s| s.len());
        (m.into_conversation(), expected, kept_len)
    };
    for keep in [false, true] {
        let (taken, expected, kept_len) = finished(keep);
        assert_eq!(taken, expected);
        assert_eq!(taken.len(), 2);
        // A snapshot taken for the request still shows what was sent, not the answer.
        assert_eq!(kept_len, keep.then_some(1));
    }
}

/// Commands and events are moved through queues at every step; at 128 bytes or less the
/// compiler moves them inline instead of calling `memcpy` (measured in docs/performance.md,
/// issue 21). A new variant that grows them past that should box its payload, as
/// `Command::Fail` does.
#[cfg(target_pointer_width = "64")]
#[test]
fn commands_and_events_stay_small_enough_to_move_inline() {
    assert!(
        std::mem::size_of::<Command>() <= 128,
        "{}",
        std::mem::size_of::<Command>()
    );
    assert!(
        std::mem::size_of::<Event>() <= 128,
        "{}",
        std::mem::size_of::<Event>()
    );
}

#[test]
fn a_tool_input_nested_too_deep_is_refused_and_replaced_before_it_is_stored() {
    let deep = (1..=MAX_TOOL_INPUT_DEPTH).fold(json!({}), |inner, _| json!({ "a": inner }));
    let fits = (1..MAX_TOOL_INPUT_DEPTH).fold(json!({}), |inner, _| json!({ "a": inner }));
    let (_, out) = answered_with_tools(&[("deep", "read", deep), ("fits", "read", fits.clone())]);
    let msgs = appended(&out);
    // The stored call holds `{}`, not the input no session or request could hold.
    let inputs: Vec<serde_json::Value> = msgs[0]
        .tool_uses()
        .map(|(_, _, input)| input.clone())
        .collect();
    assert_eq!(inputs, [json!({}), fits]);
    // Only the call that fits runs; the other gets an error result the model can act on.
    let (_, calls) = run_tools(&out);
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["fits"]
    );
}

#[test]
fn a_retry_being_answered_tells_the_budget_once_a_request() {
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
    let (request, _, _) = sent(&m.step(Millis(0), granted(p)));
    // A first attempt being answered is no evidence about retries.
    let out = m.step(Millis(300), Event::ProviderResponding { request });
    assert_eq!(notes(&out), []);
    let failed = Event::ProviderFailed {
        request,
        failure: failure(FailureKind::ServerError, 500),
    };
    let (timer, _) = sleep(&m.step(Millis(400), failed));
    let (p, kind, _, _) = permit(&m.step(Millis(2_000), Event::TimerFired { timer }));
    assert_eq!(kind, PermitKind::Charged);
    let (request, attempt, _) = sent(&m.step(Millis(2_000), granted(p)));
    assert_eq!(attempt, 2);
    let out = m.step(Millis(2_300), Event::ProviderResponding { request });
    assert_eq!(notes(&out), [BudgetNote::RetryAnswered { target: 0 }]);
    // Once an attempt: a second sign is stale.
    assert_eq!(
        m.handle(Millis(2_310), Event::ProviderResponding { request }),
        Handled::Ignored(IgnoreReason::Stale)
    );
    // Once a request: its success pays only the success.
    let out = m.step(
        Millis(3_000),
        Event::ProviderSucceeded {
            request,
            response: text_response("hello"),
        },
    );
    assert_eq!(notes(&out), [BudgetNote::Succeeded { target: 0 }]);
}

#[test]
fn a_retry_that_succeeds_unannounced_is_noted_as_answered_before_its_success() {
    // A driver that cannot tell when an answer begins: the success says it.
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
    let (request, _, _) = sent(&m.step(Millis(0), granted(p)));
    let failed = Event::ProviderFailed {
        request,
        failure: failure(FailureKind::ServerError, 500),
    };
    let (timer, _) = sleep(&m.step(Millis(400), failed));
    let (p, _, _, _) = permit(&m.step(Millis(2_000), Event::TimerFired { timer }));
    let (request, _, _) = sent(&m.step(Millis(2_000), granted(p)));
    let out = m.step(
        Millis(3_000),
        Event::ProviderSucceeded {
            request,
            response: text_response("hello"),
        },
    );
    assert_eq!(
        notes(&out),
        [
            BudgetNote::RetryAnswered { target: 0 },
            BudgetNote::Succeeded { target: 0 }
        ]
    );
    // Without a budget, nothing is noted, and the sign is still welcome.
    let mut m = AgentMachine::new(config(), 1);
    let (request, _, _) = sent(&m.step(Millis(0), user("hi")));
    assert_eq!(
        m.handle(Millis(100), Event::ProviderResponding { request }),
        Handled::Accepted
    );
    assert_eq!(m.poll(), None);
}

// ----- reasoning goes back only to its owner ------------------------------------------------

fn identity(name: &str) -> TargetIdentity {
    TargetIdentity::new(format!("openai_responses:{name}"))
}

/// Two Responses targets with distinct identities (another organisation's key, say).
fn two_owners_config() -> MachineConfig {
    MachineConfig {
        targets: vec![
            TargetSpec::new(crate::ProviderKind::OpenAiResponses, "gpt-a")
                .with_identity(identity("a")),
            TargetSpec::new(crate::ProviderKind::OpenAiResponses, "gpt-b")
                .with_identity(identity("b")),
        ],
        ..config()
    }
}

fn reasoning_item(id: &str) -> serde_json::Value {
    json!({"id": id, "type": "reasoning", "summary": [], "encrypted_content": format!("gAAAA-{id}")})
}

/// An answer with a reasoning item and signed thinking before its text.
fn reasoned_response(id: &str, text: &str) -> AssistantResponse {
    AssistantResponse::end_turn(Message::assistant(vec![
        ContentBlock::reasoning(reasoning_item(id)),
        ContentBlock::thinking("thought", format!("sig-{id}")),
        ContentBlock::text(text),
    ]))
}

fn rejected() -> ProviderFailure {
    ProviderFailure::new(
        FailureKind::ReasoningRejected,
        "The encrypted content gAAA...Rg== could not be verified.",
    )
    .with_status(400)
    .with_error_type("invalid_request_error")
}

fn reasoning_blocks(conversation: &Conversation) -> usize {
    conversation
        .messages()
        .iter()
        .flat_map(|m| m.content.iter())
        .filter(|b| b.is_owned_reasoning())
        .count()
}

#[test]
fn reasoning_in_an_appended_answer_records_the_target_that_produced_it() {
    let mut m = AgentMachine::new(two_owners_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: reasoned_response("rs_1", "hello"),
        },
    );
    let message = &appended(&out)[0];
    let owners: Vec<Option<&TargetIdentity>> = message
        .content
        .iter()
        .filter(|b| b.is_owned_reasoning())
        .map(ContentBlock::owner)
        .collect();
    assert_eq!(owners, vec![Some(&identity("a")), Some(&identity("a"))]);
    assert_eq!(message.content[2], ContentBlock::text("hello"));
}

#[test]
fn redacted_thinking_is_recorded_as_its_producers_and_counts_as_its_thinking() {
    let mut m = AgentMachine::new(two_owners_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: AssistantResponse::end_turn(Message::assistant(vec![
                ContentBlock::redacted_thinking("EmwKAhgB"),
                ContentBlock::text("hello"),
            ])),
        },
    );
    let message = &appended(&out)[0];
    assert_eq!(message.content[0].owner(), Some(&identity("a")));
    // Thinking of unknown owner from an older session, next to thinking whose owner is
    // known, cannot be told apart from another target's: not even the primary gets it.
    let mut messages = vec![
        Message::user_text("earlier"),
        Message::assistant(vec![
            ContentBlock::thinking("old thought", "sig-old"),
            ContentBlock::text("ok"),
        ]),
    ];
    messages.extend(m.conversation().messages().iter().map(|m| (**m).clone()));
    let mut m =
        AgentMachine::with_conversation(two_owners_config(), 2, Conversation::from(messages));
    let (_, _, next) = sent(&m.step(Millis(2), user("more")));
    let blocks: Vec<&ContentBlock> = next
        .messages()
        .iter()
        .flat_map(|msg| msg.content.iter())
        .filter(|b| b.is_owned_reasoning())
        .collect();
    assert_eq!(blocks, vec![&message.content[0]]);
}

#[test]
fn a_target_without_identity_leaves_its_reasoning_of_unknown_owner() {
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: reasoned_response("rs_1", "hello"),
        },
    );
    assert!(appended(&out)[0]
        .content
        .iter()
        .all(|b| b.owner().is_none()));
}

/// A conversation from an old session: an answer whose reasoning has no recorded owner,
/// then the user's next message.
fn old_session() -> Conversation {
    Conversation::from(vec![
        Message::user_text("hi"),
        Message::assistant(vec![
            ContentBlock::reasoning(reasoning_item("rs_old")),
            ContentBlock::text("hello"),
        ]),
    ])
}

#[test]
fn reasoning_of_unknown_owner_goes_to_the_primary_but_not_to_a_fallback() {
    let mut m = AgentMachine::with_conversation(two_owners_config(), 1, old_session());
    let (req, _, first) = sent(&m.step(Millis(0), user("and then?")));
    assert_eq!(
        reasoning_blocks(&first),
        1,
        "the primary gets it, as before"
    );
    // The primary is down for good (a quota): the fallback gets the conversation without it.
    let out = m.step(
        Millis(1),
        failed(req, failure(FailureKind::QuotaExhausted, 429)),
    );
    assert!(matches!(out[0], Command::NotifyFallback { .. }));
    let (_, _, second) = sent(&out);
    assert_eq!(reasoning_blocks(&second), 0);
    assert_eq!(second.len(), first.len());
    assert_eq!(
        second.messages()[1].content,
        vec![ContentBlock::text("hello")]
    );
    // The stored conversation keeps it.
    assert_eq!(reasoning_blocks(m.conversation()), 1);
}

#[test]
fn rejected_reasoning_is_retried_once_at_once_without_any_reasoning_and_announced() {
    let mut m = AgentMachine::with_conversation(two_owners_config(), 1, old_session());
    let (req, attempt, first) = sent(&m.step(Millis(0), user("and then?")));
    assert_eq!((attempt, reasoning_blocks(&first)), (1, 1));
    let out = m.step(Millis(1), failed(req, rejected()));
    let Some(Command::NotifyRetry { info }) = out.first() else {
        panic!("the retry is announced first: {out:#?}")
    };
    assert!(info.is_without_reasoning());
    assert_eq!(
        (info.attempt, info.delay_ms),
        (1, 0),
        "costs no attempt, waits for nothing"
    );
    assert_eq!(
        info.to_string(),
        "reasoning rejected: retrying once without reasoning items"
    );
    assert!(!out.iter().any(|c| matches!(c, Command::Sleep { .. })));
    let (req, attempt, retry) = sent(&out);
    assert_eq!((attempt, reasoning_blocks(&retry)), (1, 0));
    // The answer comes back, with new reasoning of the primary's own.
    let out = m.step(
        Millis(2),
        Event::ProviderSucceeded {
            request: req,
            response: reasoned_response("rs_new", "then this"),
        },
    );
    assert!(matches!(out.last(), Some(Command::Finish { .. })));
    // Both kept; the next run sends the primary's own, never the unknown one again.
    let mut m = AgentMachine::with_conversation(two_owners_config(), 2, m.into_conversation());
    let (_, _, next) = sent(&m.step(Millis(3), user("more")));
    let sent_items: Vec<&ContentBlock> = next
        .messages()
        .iter()
        .flat_map(|msg| msg.content.iter())
        .filter(|b| b.is_owned_reasoning())
        .collect();
    assert_eq!(sent_items.len(), 2);
    assert!(sent_items.iter().all(|b| b.owner() == Some(&identity("a"))));
    assert_eq!(reasoning_blocks(m.conversation()), 3);
}

#[test]
fn the_same_session_resumed_on_the_same_target_keeps_sending_its_reasoning() {
    let mut m = AgentMachine::new(two_owners_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response: reasoned_response("rs_1", "hello"),
        },
    );
    let saved = serde_json::to_string(m.conversation()).unwrap();
    let loaded: Conversation = serde_json::from_str(&saved).unwrap();
    let mut m = AgentMachine::with_conversation(two_owners_config(), 2, loaded);
    let (_, _, next) = sent(&m.step(Millis(2), user("more")));
    assert_eq!(reasoning_blocks(&next), 2);
}

#[test]
fn reasoning_rejected_again_without_reasoning_fails_the_run_with_a_typed_error() {
    let mut m = AgentMachine::with_conversation(two_owners_config(), 1, old_session());
    let (req, _, _) = sent(&m.step(Millis(0), user("and then?")));
    let out = m.step(Millis(1), failed(req, rejected()));
    let (req, _, _) = sent(&out);
    let out = m.step(Millis(2), failed(req, rejected()));
    // No second retry, no fallback: the run fails.
    assert!(!out.iter().any(|c| matches!(
        c,
        Command::NotifyRetry { .. } | Command::NotifyFallback { .. } | Command::SendRequest { .. }
    )));
    match fail_error(&out) {
        RunError::Provider {
            failure, reason, ..
        } => {
            assert_eq!(failure.kind, FailureKind::ReasoningRejected);
            assert_eq!(reason, GiveUp::ReasoningRejectedAgain);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        m.outcome().map(|o| o.as_ref().err().map(RunError::kind)),
        Some(Some("reasoning_rejected"))
    );
}

#[test]
fn x_should_retry_does_not_turn_rejected_reasoning_into_a_plain_retry() {
    let mut m = AgentMachine::with_conversation(config(), 1, old_session());
    let (req, _, _) = sent(&m.step(Millis(0), user("and then?")));
    let out = m.step(Millis(1), failed(req, rejected().with_should_retry(true)));
    let (_, _, retry) = sent(&out);
    assert_eq!(reasoning_blocks(&retry), 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(38),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever mix of rejections, other failures and answers a provider gives, a request is
    /// retried without reasoning at most once, only right after a rejection, and a rejection
    /// of a request sent without reasoning after one ends the run.
    #[test]
    fn a_request_is_retried_without_reasoning_at_most_once(
        answers in proptest::collection::vec(0u8..4, 1..24),
    ) {
        let mut m = AgentMachine::with_conversation(two_owners_config(), 7, old_session());
        let mut out = m.step(Millis(0), user("go"));
        let mut now = Millis(0);
        let mut retries_without = 0;
        let mut turns = 0;
        for answer in answers {
            if m.is_terminal() {
                break;
            }
            if let Some((timer, delay)) = out.iter().find_map(|c| match c {
                Command::Sleep { timer, delay_ms } => Some((*timer, *delay_ms)),
                _ => None,
            }) {
                now = now.plus(delay);
                out = m.step(now, Event::TimerFired { timer });
                continue;
            }
            let (request, _, snapshot) = sent(&out);
            let event = match answer {
                0 | 1 => Event::ProviderFailed { request, failure: rejected() },
                2 => Event::ProviderFailed {
                    request,
                    failure: failure(FailureKind::Unavailable, 529),
                },
                _ => Event::ProviderSucceeded {
                    request,
                    response: reasoned_response(&format!("rs_{turns}"), "ok"),
                },
            };
            let was_rejection = answer <= 1;
            out = m.step(now, event);
            let announced = out.iter().any(|c| matches!(
                c, Command::NotifyRetry { info } if info.is_without_reasoning()));
            if announced {
                proptest::prop_assert!(was_rejection);
                retries_without += 1;
                let (_, _, retry) = sent(&out);
                proptest::prop_assert_eq!(reasoning_blocks(&retry), 0);
            }
            if was_rejection && reasoning_blocks(&snapshot) == 0 && !announced {
                // Refused although nothing was sent: only the retry's second refusal.
                proptest::prop_assert!(m.is_terminal());
            }
            if matches!(out.last(), Some(Command::Finish { .. })) {
                turns += 1;
                retries_without = 0;
                let done = std::mem::replace(&mut m, AgentMachine::new(config(), 0));
                m = AgentMachine::with_conversation(two_owners_config(), 7, done.into_conversation());
                out = m.step(now, user("next"));
            }
            proptest::prop_assert!(retries_without <= 1, "more than one retry without reasoning per request");
        }
    }
}

#[test]
fn the_getters_report_the_configuration_given_and_the_turns_as_they_are_appended() {
    let given = MachineConfig {
        max_turns: Some(7),
        ..config()
    };
    let mut m = AgentMachine::new(given.clone(), 1);
    assert_eq!(m.config(), &given);
    assert_eq!(m.turns(), 0);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    // A failed attempt appends nothing, so it is no turn.
    let out = m.step(
        Millis(1),
        failed(req, failure(FailureKind::Unavailable, 529)),
    );
    assert_eq!(m.turns(), 0);
    let (timer, _) = sleep(&out);
    let (req, _, _) = sent(&m.step(Millis(5_000), Event::TimerFired { timer }));
    let out = m.step(
        Millis(5_001),
        Event::ProviderSucceeded {
            request: req,
            response: tool_response(&[("a", "read", json!({"path": "a.rs"}))]),
        },
    );
    assert_eq!(m.turns(), 1);
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(5_002),
        Event::ToolsFinished {
            batch,
            outcome: BatchOutcome::PerCall(vec![CallOutcome {
                tool_use_id: "a".into(),
                result: Ok(ToolOutput::text("a.rs")),
            }]),
        },
    );
    let (req, _, _) = sent(&out);
    let out = m.step(
        Millis(5_003),
        Event::ProviderSucceeded {
            request: req,
            response: text_response("done"),
        },
    );
    assert_eq!(m.turns(), 2);
    assert!(matches!(out.last(), Some(Command::Finish { turns: 2, .. })));
    assert_eq!(m.config(), &given);
}

#[test]
fn an_answer_naming_another_compaction_is_stale_while_one_runs() {
    let mut m = AgentMachine::with_conversation(config(), 1, big_conversation());
    let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
    let out = m.step(Millis(1), failed(req, overflow()));
    let Command::Compact {
        compaction,
        conversation,
    } = &out[1]
    else {
        panic!("{out:#?}")
    };
    let compacted = compact(conversation, &m.config().compaction).unwrap();
    // A driver's late or mistaken answer (another id) changes nothing and sends nothing.
    assert_eq!(
        m.handle(
            Millis(2),
            Event::CompactionFinished {
                compaction: CompactionId(compaction.0 + 1),
                result: Ok(compacted.clone()),
            }
        ),
        Handled::Ignored(IgnoreReason::Stale)
    );
    assert!(m.poll().is_none());
    assert_eq!(m.conversation().len(), conversation.len());
    // The answer it asked for is still taken.
    let out = m.step(
        Millis(3),
        Event::CompactionFinished {
            compaction: *compaction,
            result: Ok(compacted),
        },
    );
    sent(&out);
}

#[test]
fn an_answer_to_an_earlier_attempt_is_stale_while_a_later_one_is_awaited() {
    let mut m = AgentMachine::new(config(), 1);
    let (req1, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(
        Millis(1),
        failed(req1, failure(FailureKind::Unavailable, 503)),
    );
    let (timer1, _) = sleep(&out);
    let (req2, _, _) = sent(&m.step(Millis(600), Event::TimerFired { timer: timer1 }));
    assert_ne!(req1, req2, "every attempt is a new request id");
    // The first attempt's answer arrives late (a driver that did not cancel it): the second
    // attempt is still awaited, and nothing is appended.
    assert_eq!(
        m.handle(
            Millis(601),
            Event::ProviderSucceeded {
                request: req1,
                response: text_response("late"),
            }
        ),
        Handled::Ignored(IgnoreReason::Stale)
    );
    assert!(m.poll().is_none());
    assert_eq!(m.conversation().len(), 1);
    let out = m.step(
        Millis(602),
        failed(req2, failure(FailureKind::Unavailable, 503)),
    );
    let (timer2, _) = sleep(&out);
    assert_ne!(timer1, timer2, "every sleep is a new timer id");
    assert_eq!(
        m.handle(Millis(603), Event::TimerFired { timer: timer1 }),
        Handled::Ignored(IgnoreReason::Stale)
    );
    let out = m.step(
        Millis(604),
        Event::ProviderSucceeded {
            request: req2,
            response: text_response("too late too"),
        },
    );
    assert!(out.is_empty(), "{out:#?}");
    let (req3, _, _) = sent(&m.step(Millis(2_000), Event::TimerFired { timer: timer2 }));
    assert!(req3 != req1 && req3 != req2);
}

#[test]
fn resume_answers_only_an_assistants_calls() {
    // A session whose last message is the user's, holding a tool_use block (no API writes
    // one; a hand-edited or foreign session can): nothing is answered for it, the request
    // goes out with the conversation as it is.
    let mut c = Conversation::new();
    c.push(Message::user(vec![
        ContentBlock::text("hi"),
        ContentBlock::tool_use("u1", "read", json!({})),
    ]));
    let mut m = AgentMachine::with_conversation(config(), 1, c);
    let out = m.step(Millis(0), Event::Resume);
    assert!(appended(&out).is_empty(), "{out:#?}");
    let (_, _, snap) = sent(&out);
    assert_eq!(snap.len(), 1);
}

#[test]
fn a_zero_threshold_or_a_zero_window_never_compacts_before_a_request() {
    // 0 % turns the threshold off; a window of 0 tokens is no known window: either way only
    // an overflow compacts.
    for (percent, window) in [(0, Some(10_000)), (85, Some(0)), (0, Some(0))] {
        let config = MachineConfig {
            compact_threshold_percent: percent,
            ..summary_config(window)
        };
        let mut m = AgentMachine::with_conversation(config, 1, big_conversation());
        let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
        let out = m.step(
            Millis(1),
            Event::ProviderSucceeded {
                request: req,
                response: with_usage("a", 9_999),
            },
        );
        let (batch, _) = run_tools(&out);
        let out = m.step(
            Millis(2),
            Event::ToolsFinished {
                batch,
                outcome: ok_outcome("t1"),
            },
        );
        let (_, purpose, _) = sent_for(&out);
        assert_eq!(purpose, RequestPurpose::Turn, "{percent} % of {window:?}");
        assert!(
            !out.iter().any(|c| matches!(c, Command::Compact { .. })),
            "{percent} % of {window:?}: {out:#?}"
        );
    }
}

#[test]
fn every_permit_ask_of_a_turn_carries_the_time_the_turn_began() {
    // The budget serves the oldest request first: its age is the turn's, not the attempt's.
    let since = |commands: &[Command]| {
        commands
            .iter()
            .find_map(|c| match c {
                Command::AcquirePermit { ask, .. } => Some(ask.since),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no AcquirePermit in {commands:#?}"))
    };
    let mut m = AgentMachine::new(budgeted(5_000), 1);
    let out = m.step(Millis(1_000), user("hi"));
    assert_eq!(since(&out), Millis(1_000));
    let (p, _, _, _) = permit(&out);
    let (req, _, _) = sent(&m.step(Millis(1_001), granted(p)));
    let (timer, d) = sleep(&m.step(
        Millis(1_002),
        failed(req, failure(FailureKind::Unavailable, 529)),
    ));
    let out = m.step(Millis(1_002 + d), Event::TimerFired { timer });
    assert_eq!(since(&out), Millis(1_000));
}

/// A long conversation: a task and 400 exchanges of about 2 KB each (a few hundred bytes
/// once elided).
fn long_conversation() -> Conversation {
    let mut c = Conversation::new();
    c.push(Message::user_text("task"));
    for i in 0..400 {
        c.push(Message::assistant_text(format!(
            "{i:02}{}",
            "y".repeat(2_000)
        )));
        c.push(Message::user_text(format!("go on {i}")));
    }
    c
}

/// A machine with `config` on `long_conversation()` whose last request filled 85 % of a
/// 10,000-token window, at the moment its next request starts (at `now`): the commands then.
fn threshold_reached(config: MachineConfig, now: u64) -> (AgentMachine, Vec<Command>) {
    let mut m = AgentMachine::with_conversation(config, 1, long_conversation());
    let mut out = m.step(Millis(now - 3), user("continue"));
    if let Some(Command::AcquirePermit { permit, .. }) = out
        .iter()
        .find(|c| matches!(c, Command::AcquirePermit { .. }))
        .cloned()
    {
        out = m.step(Millis(now - 2), granted(permit));
    }
    let (req, _, _) = sent(&out);
    let out = m.step(
        Millis(now - 1),
        Event::ProviderSucceeded {
            request: req,
            response: with_usage("a", 8_500),
        },
    );
    let (batch, _) = run_tools(&out);
    let out = m.step(
        Millis(now),
        Event::ToolsFinished {
            batch,
            outcome: ok_outcome("t1"),
        },
    );
    (m, out)
}

#[test]
fn a_summary_request_fills_seven_tenths_of_a_known_window() {
    // 10,000 tokens at 4 bytes a token: 28,000 bytes for the turns to summarise, the rest
    // left for the prompt and the answer. The oldest exchanges go until it fits, no more.
    let (_, out) = threshold_reached(summary_config(Some(10_000)), 100);
    let (_, purpose, snap) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Summary);
    let prompt = snap.messages().last().map_or(0, |m| m.approx_bytes());
    let summarised = snap.approx_bytes() - prompt;
    assert!(
        (27_000..=28_000).contains(&summarised),
        "{summarised} bytes of turns in the summary request"
    );
}

#[test]
fn a_summary_request_asks_the_budget_as_a_request_starting_when_compaction_began() {
    let config = MachineConfig {
        retry_budget: Some(BudgetUse { max_wait_ms: 5_000 }),
        ..summary_config(Some(10_000))
    };
    let (_, out) = threshold_reached(config, 2_000);
    let ask = out
        .iter()
        .find_map(|c| match c {
            Command::AcquirePermit { ask, .. } => Some(*ask),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no AcquirePermit in {out:#?}"));
    assert_eq!(
        (ask.kind, ask.since),
        (PermitKind::FirstAttempt, Millis(2_000))
    );
}

#[test]
fn after_an_overflow_without_a_known_window_a_summary_request_is_half_the_conversation() {
    // Short messages, which elision leaves as they are: the limit binds.
    let mut c = Conversation::new();
    c.push(Message::user_text("task"));
    for i in 0..400 {
        c.push(Message::assistant_text(format!(
            "{i:03}{}",
            "z".repeat(100)
        )));
        c.push(Message::user_text(format!("go on {i}")));
    }
    let mut m = AgentMachine::with_conversation(summary_config(None), 1, c);
    let (req, _, _) = sent(&m.step(Millis(0), user("continue")));
    let half = m.conversation().approx_bytes() / 2;
    let out = m.step(Millis(1), failed(req, overflow()));
    let (_, purpose, snap) = sent_for(&out);
    assert_eq!(purpose, RequestPurpose::Summary);
    let prompt = snap.messages().last().map_or(0, |m| m.approx_bytes());
    let summarised = snap.approx_bytes() - prompt;
    assert!(
        // Give or take the note of what was dropped and the prompt's own message.
        (half - 1_000..=half + 500).contains(&summarised),
        "{summarised} bytes of turns in the summary request, half is {half}"
    );
}

#[test]
fn a_shrunk_summary_request_costs_no_attempt() {
    let (mut m, out) = threshold_reached(summary_config(Some(10_000)), 100);
    let (req, attempt, first) = sent(&out);
    let out = m.step(Millis(101), failed(req, overflow()));
    let (_, purpose, smaller) = sent_for(&out);
    let (_, again, _) = sent(&out);
    assert_eq!(purpose, RequestPurpose::Summary);
    assert!(smaller.approx_bytes() < first.approx_bytes());
    assert_eq!(
        again, attempt,
        "the summary request sent again at no attempt's cost"
    );
}

#[test]
fn after_a_fallback_the_request_keeps_its_one_compaction_and_its_start() {
    let config = MachineConfig {
        retry_budget: Some(BudgetUse { max_wait_ms: 5_000 }),
        ..fallback_config()
    };
    let since = |commands: &[Command]| {
        commands
            .iter()
            .find_map(|c| match c {
                Command::AcquirePermit { ask, .. } => Some((ask.target, ask.since)),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no AcquirePermit in {commands:#?}"))
    };
    let mut m = AgentMachine::with_conversation(config, 1, big_conversation());
    let out = m.step(Millis(1_000), user("continue"));
    assert_eq!(since(&out), (0, Millis(1_000)));
    let (p, _, _, _) = permit(&out);
    let (req, _, _) = sent(&m.step(Millis(1_001), granted(p)));
    let out = m.step(Millis(1_002), failed(req, overflow()));
    let Some(Command::Compact {
        compaction,
        conversation,
    }) = out
        .iter()
        .find(|c| matches!(c, Command::Compact { .. }))
        .cloned()
    else {
        panic!("{out:#?}")
    };
    let compacted = compact(&conversation, &m.config().compaction).unwrap();
    let out = m.step(
        Millis(1_003),
        Event::CompactionFinished {
            compaction,
            result: Ok(compacted),
        },
    );
    let (p, _, _, _) = permit(&out);
    let (req, _, _) = sent(&m.step(Millis(1_004), granted(p)));
    // A long rate limit moves the request to the other target: still the same turn.
    let out = m.step(Millis(1_005), failed(req, rate_limited_for(90_000)));
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::NotifyFallback { .. })),
        "{out:#?}"
    );
    assert_eq!(since(&out), (1, Millis(1_000)));
    let (p, _, _, _) = permit(&out);
    let (req, _, _) = sent(&m.step(Millis(1_006), granted(p)));
    // It was compacted once already: an overflow now fails rather than compacting again.
    let out = m.step(Millis(1_007), failed(req, overflow()));
    assert!(matches!(
        fail_error(&out),
        RunError::Provider {
            reason: GiveUp::OverflowAfterCompaction,
            ..
        }
    ));
}

#[test]
fn a_shared_rate_limit_at_the_cap_is_waited_and_the_fleet_spread_over_a_quarter_of_it() {
    // The hint equal to the cap is still waited; the return is spread over a quarter of the
    // wait, capped at the longest backoff (10 s here), not over the 2 s floor alone.
    let mut longest = 0;
    for seed in 1..=20 {
        let mut m = AgentMachine::new(budgeted(5_000), seed);
        let cap = m.config().retry.max_retry_after_ms;
        let (p, _, _, _) = permit(&m.step(Millis(0), user("hi")));
        let out = m.step(
            Millis(0),
            Event::PermitAnswered {
                permit: p,
                decision: PermitDecision::WaitUntil(Millis(cap)),
            },
        );
        let (_, delay) = sleep(&out);
        assert!((cap..=cap + 10_000).contains(&delay), "{delay}");
        longest = longest.max(delay - cap);
    }
    assert!(longest > 2_000, "spread over {longest} ms at most");
}

#[test]
fn a_refused_input_is_quoted_back_to_the_model_up_to_200_characters() {
    let long = format!("{{\"path\": \"{}", "é".repeat(300));
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let response = tool_response(&[("b", "read", json!({})), ("c", "read", json!({}))])
        .with_input_problems(vec![
            ToolInputProblem {
                tool_use_id: "b".into(),
                kind: InputProblemKind::InvalidJson,
                raw: "{\"path\": ".into(),
                detail: "EOF while parsing".into(),
            },
            ToolInputProblem {
                tool_use_id: "c".into(),
                kind: InputProblemKind::InvalidJson,
                raw: long.clone(),
                detail: "EOF while parsing".into(),
            },
        ]);
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response,
        },
    );
    let results = tool_results(appended(&out).last().expect("the results"));
    assert!(
        results[0].2.contains("(EOF while parsing): {\"path\": \n"),
        "{}",
        results[0].2
    );
    // Cut at a character, not a byte, with an ellipsis.
    let first_200: String = long.chars().take(200).collect();
    assert!(
        results[1].2.contains(&format!(": {first_200}…\n")),
        "{}",
        results[1].2
    );
}

#[test]
fn an_input_too_deep_is_refused_beside_another_calls_problem() {
    // The decoder reported a problem for another call only: this call's depth is still found.
    let mut deep = json!("leaf");
    for _ in 0..100 {
        deep = json!({ "d": deep });
    }
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let response = tool_response(&[
        ("a", "read", deep),
        ("b", "read", json!({})),
        ("c", "read", json!({"path": "c.rs"})),
    ])
    .with_input_problems(vec![ToolInputProblem {
        tool_use_id: "b".into(),
        kind: InputProblemKind::InvalidJson,
        raw: "{".into(),
        detail: "EOF while parsing".into(),
    }]);
    let out = m.step(
        Millis(1),
        Event::ProviderSucceeded {
            request: req,
            response,
        },
    );
    let (_, calls) = run_tools(&out);
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["c"],
        "only the sound call runs"
    );
}

#[test]
fn repeated_and_empty_tool_ids_are_renamed_in_order_from_one() {
    let (_, out) = answered_with_tools(&[
        ("a", "read", json!({})),
        ("a", "list", json!({})),
        ("", "read", json!({})),
    ]);
    let (_, calls) = run_tools(&out);
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids[0], "a", "the first keeps its id");
    for (id, n) in ids[1..].iter().zip(1..) {
        let (prefix, number) = id.rsplit_once('_').expect("a numbered id");
        assert!(prefix.starts_with("call_rebound_"), "{id}");
        assert_eq!(number, n.to_string(), "{ids:?}");
    }
}

#[test]
fn a_repeated_id_is_renamed_without_an_empty_one_and_among_many_calls() {
    // Two calls, the same id (the scan of a few calls).
    let (_, out) = answered_with_tools(&[("a", "read", json!({})), ("a", "list", json!({}))]);
    let (_, calls) = run_tools(&out);
    assert_ne!(calls[0].id, calls[1].id);
    // Forty calls, all the same id (the sorted check of many).
    let same: Vec<(&str, &str, serde_json::Value)> =
        (0..40).map(|_| ("x", "read", json!({}))).collect();
    let (_, out) = answered_with_tools(&same);
    let (_, calls) = run_tools(&out);
    let ids: BTreeSet<_> = calls.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids.len(), 40);
}

#[test]
fn the_small_helpers_say_what_their_names_say() {
    assert!(RequestPurpose::Turn.is_turn());
    assert!(!RequestPurpose::Summary.is_turn());
    assert!(StreamDeadlines::default().is_default());
    assert!(!StreamDeadlines::new(1_000, 600_000).is_default());
    // Silence fails at whichever deadline comes first.
    assert_eq!(
        StreamDeadlines::new(30_000, 600_000).silence_limit_ms(),
        30_000
    );
    assert_eq!(
        StreamDeadlines::new(900_000, 600_000).silence_limit_ms(),
        600_000
    );
    assert_eq!(
        BudgetUse::new(5_000).with_max_wait_ms(9_000).max_wait_ms,
        9_000
    );
    let resilient = MachineConfig::resilient();
    assert_eq!(resilient.retry.max_attempts, 12);
    assert_eq!(resilient.retry_budget.map(|b| b.max_wait_ms), Some(15_000));
    assert_eq!(FinishReason::MaxTurns.to_string(), "max_turns");
    assert_eq!(FinishReason::NothingToDo.to_string(), "nothing_to_do");
    assert_eq!(
        FinishReason::Model(StopReason::EndTurn).to_string(),
        "end_turn"
    );
}

#[test]
fn only_finish_and_fail_end_a_run_and_a_fallback_says_where_it_goes() {
    let mut m = AgentMachine::new(fallback_config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let out = m.step(Millis(1), failed(req, rate_limited_for(90_000)));
    assert!(out.iter().all(|c| !c.is_terminal()), "{out:#?}");
    let info = out
        .iter()
        .find_map(|c| match c {
            Command::NotifyFallback { info } => Some(info.clone()),
            _ => None,
        })
        .expect("a fallback");
    let text = info.to_string();
    assert!(
        text.starts_with(&format!("{} (status 429): falling back from ", info.kind)),
        "{text}"
    );
    assert!(
        text.ends_with(&format!("{} to {}", info.from_label, info.to_label)),
        "{text}"
    );
    let (req, _, _) = sent(&out);
    let out = m.step(
        Millis(2),
        Event::ProviderSucceeded {
            request: req,
            response: text_response("done"),
        },
    );
    assert!(out.last().is_some_and(Command::is_terminal), "{out:#?}");
    assert_eq!(out.iter().filter(|c| c.is_terminal()).count(), 1);
    let mut m = AgentMachine::new(config(), 1);
    m.step(Millis(0), user("hi"));
    let out = m.step(Millis(1), Event::Cancel);
    assert!(out.last().is_some_and(Command::is_terminal), "{out:#?}");
}

#[test]
fn a_snapshot_is_equal_to_another_of_the_same_conversation_and_its_digest_is_fnv_1a() {
    // The trace format's digest: 64-bit FNV-1a of the conversation's JSON.
    let fnv = |bytes: &[u8]| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let mut a = Conversation::new();
    a.push(Message::user_text("hi"));
    let mut b = Conversation::new();
    b.push(Message::user_text("ho"));
    let snap = |c: &Conversation| Snapshot(Arc::new(c.clone()));
    assert_eq!(snap(&a), snap(&a));
    assert_ne!(snap(&a), snap(&b));
    let json = serde_json::to_vec(&a).unwrap();
    assert_eq!(snap(&a).digest(), fnv(&json));
    assert_ne!(snap(&a).digest(), snap(&b).digest());
}

#[test]
fn each_builder_sets_its_own_setting_and_keeps_the_others() {
    let retry = RetryConfig {
        max_attempts: 3,
        ..RetryConfig::default()
    };
    let targets = vec![
        TargetSpec::new(crate::ProviderKind::OpenAi, "llama3").with_context_window(Some(8_192))
    ];
    let compaction = crate::CompactionPolicy {
        max_tail_result_bytes: 1_024,
        ..crate::CompactionPolicy::default()
    };
    let built = MachineConfig::default()
        .with_retry(retry.clone())
        .with_tools(vec![tool("read")])
        .with_targets(targets.clone())
        .with_max_turns(7)
        .with_auto_compact(false)
        .with_compaction(compaction.clone())
        .with_compact_with(CompactionMethod::Summary)
        .with_compact_threshold_percent(60)
        .with_retry_budget(BudgetUse::new(2_000))
        .with_stream(StreamDeadlines::new(5_000, 60_000));
    let expected = MachineConfig {
        retry,
        tools: vec![tool("read")],
        targets,
        max_turns: Some(7),
        auto_compact: false,
        compaction,
        compact_with: CompactionMethod::Summary,
        compact_threshold_percent: 60,
        retry_budget: Some(BudgetUse::new(2_000)),
        stream: StreamDeadlines::new(5_000, 60_000),
        ..MachineConfig::default()
    };
    assert_eq!(built, expected);
}

#[test]
fn a_cancel_the_host_reports_is_the_runs_cancel_and_only_a_providers_failure_is_one() {
    assert_eq!(
        RunError::from(HostFailure::new(
            HostFailureKind::Canceled,
            "batch saw the cancel"
        )),
        RunError::Canceled
    );
    let host = RunError::from(HostFailure::new(HostFailureKind::Internal, "bug"));
    assert!(matches!(host, RunError::Host { .. }), "{host:?}");
    assert!(host.provider_failure().is_none());
    // A provider's failure, when the run gives up on it, is there to read.
    let mut m = AgentMachine::new(config(), 1);
    let (req, _, _) = sent(&m.step(Millis(0), user("hi")));
    let error = fail_error(&m.step(
        Millis(1),
        failed(req, failure(FailureKind::BadRequest, 400)),
    ));
    assert_eq!(
        error.provider_failure().map(|f| (f.kind, f.status)),
        Some((FailureKind::BadRequest, Some(400)))
    );
}
