//! The protocol promise drivers rely on: **at most one command awaits an answer at a time**,
//! and until the run ends exactly one does (the machine never waits for nothing).
//!
//! A driver (the tokio runner among them) keeps a single "pending" slot: the one
//! `SendRequest`, `Sleep`, `RunTools`, `Compact` or `AcquirePermit` it still has to answer.
//! This test drives machines of several configurations through random event sequences —
//! every kind of answer, failures of every kind, stale and duplicate answers, answers of the
//! wrong kind, cancels — and checks the promise after every event.

use proptest::prelude::*;
use rebound_core::*;
use serde_json::json;

/// A command that wants an answer, as the driver keeps it.
#[derive(Debug, Clone)]
enum Awaited {
    Request(RequestId),
    Timer(TimerId),
    Tools(BatchId, Vec<ToolCall>),
    Compaction(CompactionId, Snapshot),
    Permit(PermitId),
}

/// Which commands want an answer. No catch-all: a new command must be sorted here.
fn awaited(command: &Command) -> Option<Awaited> {
    match command {
        Command::SendRequest { request, .. } => Some(Awaited::Request(*request)),
        Command::Sleep { timer, .. } => Some(Awaited::Timer(*timer)),
        Command::RunTools { batch, calls } => Some(Awaited::Tools(*batch, calls.clone())),
        Command::Compact {
            compaction,
            conversation,
        } => Some(Awaited::Compaction(*compaction, conversation.clone())),
        Command::AcquirePermit { permit, .. } => Some(Awaited::Permit(*permit)),
        Command::AppendMessage { .. }
        | Command::ReplaceConversation { .. }
        | Command::NotifyRetry { .. }
        | Command::NotifyFallback { .. }
        | Command::NoteBudget { .. }
        | Command::Finish { .. }
        | Command::Fail { .. } => None,
    }
}

/// Whether `event` answers `pending` (same kind, same id).
fn answers(event: &Event, pending: &Awaited) -> bool {
    match (event, pending) {
        (Event::ProviderSucceeded { request, .. }, Awaited::Request(r))
        | (Event::ProviderFailed { request, .. }, Awaited::Request(r)) => request == r,
        (Event::TimerFired { timer }, Awaited::Timer(t)) => timer == t,
        (Event::ToolsFinished { batch, .. }, Awaited::Tools(b, _)) => batch == b,
        (Event::CompactionFinished { compaction, .. }, Awaited::Compaction(c, _)) => {
            compaction == c
        }
        (Event::PermitAnswered { permit, .. }, Awaited::Permit(p)) => permit == p,
        _ => false,
    }
}

/// Whether `event` is an answer to some command (rather than an input of the world).
fn is_answer(event: &Event) -> bool {
    matches!(
        event,
        Event::ProviderSucceeded { .. }
            | Event::ProviderFailed { .. }
            | Event::TimerFired { .. }
            | Event::ToolsFinished { .. }
            | Event::CompactionFinished { .. }
            | Event::PermitAnswered { .. }
    )
}

fn config(choice: u8) -> MachineConfig {
    let read = ToolSpec {
        name: "read".into(),
        description: "Reads a file.".into(),
        input_schema: json!({"type": "object"}),
    };
    let base = MachineConfig::default()
        .with_tools(vec![read])
        .with_retry(RetryConfig::default().with_max_attempts(3));
    match choice % 6 {
        0 => base,
        1 => base.with_retry_budget(BudgetUse::new(2_000)),
        2 => base.with_targets(vec![
            TargetSpec::new(ProviderKind::Anthropic, "claude-sonnet-4-5"),
            TargetSpec::new(ProviderKind::OpenAi, "gpt-4o"),
        ]),
        3 => {
            base.with_compact_with(CompactionMethod::Summary)
                .with_targets(vec![TargetSpec::new(ProviderKind::Anthropic, "small")
                    .with_context_window(Some(100))])
        }
        4 => base.with_max_turns(2).with_auto_compact(false),
        _ => MachineConfig::resilient().with_compact_with(CompactionMethod::Summary),
    }
}

/// A provider failure picked by `r`.
fn failure(r: u32) -> ProviderFailure {
    match r % 8 {
        0 => ProviderFailure::new(FailureKind::RateLimited, "slow down")
            .with_status(429)
            .with_retry_after_ms(u64::from(r % 3) * 20_000),
        1 => ProviderFailure::new(FailureKind::Unavailable, "Overloaded").with_status(529),
        2 => ProviderFailure::new(FailureKind::ContextOverflow, "prompt is too long")
            .with_status(400),
        3 => ProviderFailure::new(FailureKind::AuthFailed, "bad key").with_status(401),
        4 => ProviderFailure::new(FailureKind::QuotaExhausted, "quota").with_status(429),
        5 => ProviderFailure::transport(TransportFault::StreamCut, None),
        6 => ProviderFailure::transport(TransportFault::EmptyMessage, None),
        _ => ProviderFailure::new(FailureKind::ServerError, "oops").with_status(500),
    }
}

/// A model answer picked by `r`: text, an empty message, or tool calls (known, unknown,
/// repeated ids).
fn response(r: u32, turn: u32) -> AssistantResponse {
    let usage = Usage::new(u64::from(r % 300), 10);
    match r % 6 {
        0 => AssistantResponse::end_turn(Message::assistant_text("done")).with_usage(usage),
        1 => AssistantResponse::end_turn(Message::assistant(Vec::new())),
        _ => {
            let calls = (0..1 + r % 3)
                .map(|i| {
                    let name = if (r >> 8) % 4 == 0 { "nope" } else { "read" };
                    let id = if (r >> 10) % 5 == 0 {
                        "dup".to_owned()
                    } else {
                        format!("call_{turn}_{i}")
                    };
                    ContentBlock::tool_use(id, name, json!({"path": "a.txt"}))
                })
                .collect();
            AssistantResponse::tool_use(Message::assistant(calls)).with_usage(usage)
        }
    }
}

/// The answer to `pending` that `r` picks.
fn answer(pending: &Awaited, r: u32, now: Millis, turn: u32, policy: &CompactionPolicy) -> Event {
    match pending {
        Awaited::Request(request) => {
            let request = *request;
            if r % 3 == 0 {
                Event::ProviderFailed {
                    request,
                    failure: failure(r >> 2),
                }
            } else {
                Event::ProviderSucceeded {
                    request,
                    response: response(r >> 2, turn),
                }
            }
        }
        Awaited::Timer(timer) => Event::TimerFired { timer: *timer },
        Awaited::Tools(batch, calls) => {
            let outcome = match r % 6 {
                0 => BatchOutcome::WholeBatch(ToolFailure::model("the source crashed")),
                1 if r % 7 == 0 => BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure::new(
                    HostFailureKind::OutOfMemory,
                    "oom",
                ))),
                // One outcome missing (the run fails: a driver bug).
                2 if r % 5 == 0 => calls
                    .iter()
                    .skip(1)
                    .map(|c| CallOutcome::ok(&c.id, ToolOutput::text("ok")))
                    .collect(),
                _ => calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        if (r >> i) % 2 == 0 {
                            CallOutcome::ok(&c.id, ToolOutput::text("contents"))
                        } else {
                            CallOutcome::model_error(&c.id, "file not found")
                        }
                    })
                    .collect(),
            };
            Event::ToolsFinished {
                batch: *batch,
                outcome,
            }
        }
        Awaited::Compaction(compaction, conversation) => Event::CompactionFinished {
            compaction: *compaction,
            result: if r % 4 == 0 {
                Err(CompactionError::compactor("the compactor failed"))
            } else {
                compact(conversation, policy)
            },
        },
        Awaited::Permit(permit) => Event::PermitAnswered {
            permit: *permit,
            decision: match r % 4 {
                0 => PermitDecision::Denied,
                1 => PermitDecision::WaitUntil(now.plus(u64::from(r % 5_000))),
                _ => PermitDecision::Granted,
            },
        },
    }
}

/// An event the machine is not waiting for: a wrong id or a wrong kind.
fn unasked(r: u32) -> Event {
    let id = u64::from(r % 50) + 1_000;
    match r % 5 {
        0 => Event::TimerFired { timer: TimerId(id) },
        1 => Event::ProviderFailed {
            request: RequestId(id),
            failure: failure(r),
        },
        2 => Event::PermitAnswered {
            permit: PermitId(id),
            decision: PermitDecision::Granted,
        },
        3 => Event::ToolsFinished {
            batch: BatchId(id),
            outcome: BatchOutcome::PerCall(Vec::new()),
        },
        _ => Event::user_text("a second message during the run"),
    }
}

fn check(choice: u8, seed: u64, actions: &[u32]) -> Result<(), TestCaseError> {
    let config = config(choice);
    let policy = config.compaction.clone();
    let mut machine = AgentMachine::new(config, seed);
    let mut now = Millis(0);
    let mut pending: Option<Awaited> = None;
    let mut last_answer: Option<Event> = None;
    let mut turn = 0;
    let mut event = Event::user_text("hello");
    for (step, r) in actions.iter().copied().enumerate() {
        let handled = machine.handle(now, event.clone());
        let commands: Vec<Command> = std::iter::from_fn(|| machine.poll()).collect();
        let new: Vec<Awaited> = commands.iter().filter_map(awaited).collect();
        for command in &commands {
            prop_assert_eq!(
                command.awaits_answer(),
                awaited(command).is_some(),
                "{:?}",
                command
            );
        }
        match handled {
            Handled::Accepted => {
                if is_answer(&event) {
                    let Some(p) = &pending else {
                        return Err(TestCaseError::fail(format!(
                            "step {step}: {event:?} accepted with nothing awaited"
                        )));
                    };
                    prop_assert!(
                        answers(&event, p),
                        "step {step}: {event:?} accepted while {p:?} was awaited"
                    );
                    pending = None;
                    last_answer = Some(event.clone());
                }
                if machine.is_terminal() {
                    // A cancel or a host failure abandons what was awaited.
                    pending = None;
                }
            }
            Handled::Ignored(reason) => {
                prop_assert!(
                    commands.is_empty(),
                    "step {step}: {event:?} ignored ({reason:?}) yet emitted {commands:?}"
                );
            }
            other => {
                return Err(TestCaseError::fail(format!(
                    "step {step}: a Handled this test does not know: {other:?}"
                )))
            }
        }
        let count = usize::from(pending.is_some()) + new.len();
        prop_assert!(
            count <= 1,
            "step {step}: {count} commands await an answer after {event:?}: pending {pending:?}, \
             new {new:?}"
        );
        if let Some(n) = new.into_iter().next() {
            pending = Some(n);
        }
        if machine.is_terminal() {
            prop_assert!(
                pending.is_none(),
                "step {step}: the run ended awaiting {pending:?}"
            );
            return Ok(());
        }
        let Some(p) = &pending else {
            return Err(TestCaseError::fail(format!(
                "step {step}: the run goes on but awaits nothing after {event:?} \
                 (commands {commands:?})"
            )));
        };
        if let Awaited::Request(_) = p {
            turn += 1;
        }
        // The next event: mostly the answer, sometimes noise.
        now = now.plus(u64::from(r % 700));
        event = match (r >> 24) % 16 {
            0 => unasked(r),
            1 => last_answer.clone().unwrap_or_else(|| unasked(r)),
            2 if r % 5 == 0 => Event::Cancel,
            _ => answer(p, r >> 3, now, turn, &policy),
        };
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn at_most_one_command_awaits_an_answer_and_one_always_does(
        choice in 0u8..6,
        seed in any::<u64>(),
        actions in prop::collection::vec(any::<u32>(), 1..200),
    ) {
        check(choice, seed, &actions)?;
    }
}
