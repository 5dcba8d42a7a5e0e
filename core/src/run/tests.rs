use super::*;
use crate::failure::{FailureKind, ProviderFailure};
use crate::response::AssistantResponse;
use crate::tool::{HostFailure, HostFailureKind};
use crate::{Message, RetryConfig};

fn config() -> MachineConfig {
    MachineConfig::default().with_retry(RetryConfig::default().with_jitter(false))
}

/// Polls everything queued.
fn drain(run: &mut Run) -> Vec<Action> {
    std::iter::from_fn(|| run.poll()).collect()
}

fn request_of(actions: &[Action]) -> RequestId {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Command(Command::SendRequest { request, .. }) => Some(*request),
            _ => None,
        })
        .expect("a request")
}

fn timer_of(actions: &[Action]) -> TimerId {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Command(Command::Sleep { timer, .. }) => Some(*timer),
            _ => None,
        })
        .expect("a sleep")
}

fn cut(request: RequestId) -> Event {
    Event::ProviderFailed {
        request,
        failure: ProviderFailure::new(FailureKind::Unavailable, "stream cut"),
    }
}

fn answer(request: RequestId) -> Event {
    Event::ProviderSucceeded {
        request,
        response: AssistantResponse::end_turn(Message::assistant_text("done")),
    }
}

#[test]
fn an_answer_that_began_and_failed_is_a_stream_reset_told_before_the_retry() {
    let mut run = Run::new(config(), 1);
    let _ = run.handle(Millis(0), Event::user_text("hi"));
    let first = request_of(&drain(&mut run));
    assert!(run.responding(Millis(10), first).is_empty());
    let _ = run.handle(Millis(20), cut(first));
    let actions = drain(&mut run);
    assert_eq!(
        actions[0],
        Action::StreamReset {
            request: first,
            attempt: 1
        }
    );
    assert!(matches!(
        actions[1],
        Action::Command(Command::NotifyRetry { .. })
    ));
    assert_eq!(run.tally().stream_resets, 1);
    // The retry fails before any byte: no reset.
    let _ = run.handle(
        Millis(600),
        Event::TimerFired {
            timer: timer_of(&actions),
        },
    );
    let second = request_of(&drain(&mut run));
    let _ = run.handle(Millis(700), cut(second));
    let actions = drain(&mut run);
    assert!(!actions
        .iter()
        .any(|a| matches!(a, Action::StreamReset { .. })));
    assert_eq!(run.tally().stream_resets, 1);
}

#[test]
fn the_awaited_command_is_kept_through_stale_answers_and_cleared_by_its_answer() {
    let mut run = Run::new(config(), 1);
    assert_eq!(run.awaited(), None);
    let _ = run.handle(Millis(0), Event::user_text("hi"));
    let request = request_of(&drain(&mut run));
    assert_eq!(
        run.awaited(),
        Some(Awaited::Request {
            request,
            attempt: 1
        })
    );
    let stale = RequestId(request.0 + 100);
    assert_eq!(
        run.handle(Millis(5), answer(stale)),
        Handled::Ignored(IgnoreReason::Stale)
    );
    assert!(drain(&mut run).is_empty());
    assert!(run.awaited().is_some());
    assert_eq!(run.handle(Millis(9), answer(request)), Handled::Accepted);
    let actions = drain(&mut run);
    assert!(matches!(
        actions.last(),
        Some(Action::Command(Command::Finish { .. }))
    ));
    assert_eq!(run.awaited(), None);
    let end = run.end().expect("ended").as_ref().expect("finished");
    assert_eq!(end.turns, 1);
}

#[test]
fn a_host_failure_after_the_finish_fails_the_run_and_drops_what_was_queued() {
    let mut run = Run::new(config(), 1);
    let _ = run.handle(Millis(0), Event::user_text("hi"));
    let request = request_of(&drain(&mut run));
    let _ = run.handle(Millis(9), answer(request));
    // The shell could not store the answer (the first command) and says so before it
    // executes the finish.
    assert!(matches!(
        run.poll(),
        Some(Action::Command(Command::AppendMessage { .. }))
    ));
    let failure = HostFailure::new(HostFailureKind::SessionStore, "disk full");
    assert_eq!(
        run.handle(Millis(10), Event::HostFailed { failure }),
        Handled::Ignored(IgnoreReason::Terminal)
    );
    assert_eq!(run.poll(), None, "the finish is not shown");
    assert!(matches!(
        run.end(),
        Some(Err(RunError::Host { failure })) if failure.kind == HostFailureKind::SessionStore
    ));
    // A run that failed keeps its own error.
    let mut canceled = Run::new(config(), 1);
    let _ = canceled.handle(Millis(0), Event::user_text("hi"));
    let _ = canceled.handle(Millis(1), Event::Cancel);
    let failure = HostFailure::new(HostFailureKind::Receiver, "closed");
    let _ = canceled.handle(Millis(2), Event::HostFailed { failure });
    assert_eq!(canceled.end(), Some(&Err(RunError::Canceled)));
}

#[test]
fn recorded_steps_are_what_the_machine_did_and_replay_to_the_same_commands() {
    let conversation = Conversation::from(vec![
        Message::user_text("before"),
        Message::assistant_text("ok"),
    ]);
    let mut run = Run::with_conversation(config(), 3, conversation.clone())
        .recording(true)
        .meta("driver", "test");
    let _ = run.handle(Millis(0), Event::user_text("hi"));
    let request = request_of(&drain(&mut run));
    let _ = run.responding(Millis(4), request);
    let _ = run.handle(Millis(9), answer(request));
    drain(&mut run);
    let header = run.header();
    assert_eq!(header.seed, 3);
    assert_eq!(header.initial_conversation, Some(conversation.clone()));
    assert_eq!(header.meta.get("driver").map(String::as_str), Some("test"));
    let steps = run.take_steps();
    assert_eq!(steps.len(), 3);
    assert!(run.steps().is_empty());
    let mut machine = AgentMachine::with_conversation(config(), 3, conversation);
    for step in &steps {
        assert_eq!(machine.step(step.at, step.event.clone()), step.commands);
    }
    // Not recording: nothing kept, the same tally.
    let mut quiet = Run::new(config(), 3);
    let _ = quiet.handle(Millis(0), Event::user_text("hi"));
    let request = request_of(&drain(&mut quiet));
    let _ = quiet.handle(Millis(9), answer(request));
    assert!(quiet.steps().is_empty());
    assert_eq!(quiet.handled(), 2);
}

#[test]
fn an_event_the_machine_did_not_ask_for_changes_nothing() {
    let mut run = Run::new(config(), 1).recording(true);
    let _ = run.handle(Millis(0), Event::user_text("hi"));
    let appended = run.poll();
    assert!(matches!(
        appended,
        Some(Action::Command(Command::AppendMessage { .. }))
    ));
    let before = (run.tally().clone(), run.steps().len(), run.handled());
    // A second user message during the run: refused, and the request still queued.
    assert_eq!(
        run.handle(Millis(50), Event::user_text("again")),
        Handled::Ignored(IgnoreReason::Unexpected)
    );
    assert_eq!(
        (run.tally().clone(), run.steps().len(), run.handled()),
        before
    );
    assert!(matches!(
        run.poll(),
        Some(Action::Command(Command::SendRequest { .. }))
    ));
}

#[test]
fn a_time_earlier_than_one_handed_before_is_recorded_and_counted_as_that_one() {
    let mut run = Run::new(config(), 1).recording(true);
    let _ = run.handle(Millis(1_000), Event::user_text("hi"));
    let request = request_of(&drain(&mut run));
    let _ = run.handle(Millis(500), answer(request));
    drain(&mut run);
    let times: Vec<Millis> = run.steps().iter().map(|s| s.at).collect();
    assert_eq!(times, [Millis(1_000), Millis(1_000)]);
    assert_eq!(run.tally().elapsed_ms, 0);
}

#[test]
fn a_tool_input_too_deep_to_read_back_is_recorded_as_the_machine_takes_it() {
    use crate::trace::TraceStep;
    use crate::{ContentBlock, StopReason, ToolSpec};
    let mut deep = serde_json::json!({});
    for _ in 0..150 {
        deep = serde_json::json!({ "a": deep });
    }
    let config = config().with_tools(vec![ToolSpec {
        name: "read".into(),
        description: "Reads.".into(),
        input_schema: serde_json::json!({"type": "object"}),
    }]);
    let mut run = Run::new(config.clone(), 1).recording(true);
    let _ = run.handle(Millis(0), Event::user_text("hi"));
    let request = request_of(&drain(&mut run));
    let message = Message {
        role: crate::Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: "t1".into(),
            name: "read".into(),
            input: std::sync::Arc::new(deep),
        }],
    };
    let response = AssistantResponse::new(message, StopReason::ToolUse);
    let _ = run.handle(Millis(5), Event::ProviderSucceeded { request, response });
    drain(&mut run);
    let steps = run.take_steps();
    let mut machine = AgentMachine::new(config, 1);
    for step in &steps {
        let line =
            serde_json::to_string(&TraceStep::new(step.at, step.event.clone(), &step.commands))
                .expect("a step line");
        let read: TraceStep = serde_json::from_str(&line).expect("the step reads back");
        assert_eq!(machine.step(step.at, read.event), step.commands);
    }
}

#[test]
fn issued_refuses_an_answer_to_an_id_never_emitted_and_names_the_ones_that_were() {
    use super::Issued;
    let mut run = Run::new(MachineConfig::default(), 1);
    let mut issued = Issued::default();
    assert_eq!(
        run.handle(Millis(0), Event::user_text("hi")),
        Handled::Accepted
    );
    let mut request = None;
    while let Some(action) = run.poll() {
        if let Action::Command(command) = action {
            issued.note(&command);
            if let Command::SendRequest { request: r, .. } = command {
                request = Some(r);
            }
        }
    }
    let request = request.expect("a request");
    let answer = |id| Event::ProviderResponding { request: id };
    assert_eq!(issued.check(&answer(request)), Ok(()));
    let err = issued
        .check(&answer(crate::machine::RequestId(request.0 + 5)))
        .expect_err("never emitted");
    assert_eq!(err.recent, vec![request.0]);
    let text = err.to_string();
    assert!(text.contains("never emitted a SendRequest"), "{text}");
    assert!(text.contains(&format!("emitted: {}", request.0)), "{text}");
    let timer = Event::TimerFired {
        timer: crate::machine::TimerId(0),
    };
    assert!(issued
        .check(&timer)
        .expect_err("no sleep yet")
        .to_string()
        .contains("it has emitted no Sleep yet"));
    assert_eq!(issued.check(&Event::user_text("again")), Ok(()));
}

#[test]
fn issued_handle_refuses_what_the_bindings_refuse_and_leaves_the_run_as_it_was() {
    use super::{Issued, Refusal};
    let mut run = Run::new(MachineConfig::default(), 1);
    let issued = Issued::default();
    assert_eq!(
        issued.handle(&mut run, Millis(0), Event::user_text("hi")),
        Ok(Handled::Accepted)
    );
    let before = run.handled();
    // An answer to a request this issued set never saw: refused before the run sees it.
    let unknown = issued.handle(
        &mut run,
        Millis(1),
        Event::ProviderResponding {
            request: crate::machine::RequestId(1),
        },
    );
    assert!(
        matches!(unknown, Err(Refusal::UnknownAnswer(_))),
        "{unknown:?}"
    );
    // A second user message during the run: the machine did not ask for it.
    let again = issued.handle(&mut run, Millis(2), Event::user_text("again"));
    assert_eq!(again, Err(Refusal::Unexpected));
    assert!(again
        .expect_err("refused")
        .to_string()
        .contains("did not ask for this event now"));
    assert_eq!(run.handled(), before, "neither changed the run");
    assert!(!run.is_ended());
}
