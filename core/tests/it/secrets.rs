//! Secrets named to a run: masked in every failure it is told of, before the machine decides,
//! so no command, outcome or recorded step holds one, and the recorded steps replay to the
//! same commands in a run that was named none.

use rebound_core::run::{Action, Run};
use rebound_core::{
    BatchOutcome, CallOutcome, Command, Event, FailureKind, HostFailure, HostFailureKind,
    MachineConfig, Millis, ProviderFailure, RetryConfig, SecretError, Secrets, ToolSpec,
};
use serde_json::json;

const KEY: &str = "gw-live-4f2a9b7c1d83e6";
const TOKEN: &str = "deploy-token-5e6f7a8b";

fn config() -> MachineConfig {
    MachineConfig::default()
        .with_retry(RetryConfig::default().with_jitter(false))
        .with_tools(vec![ToolSpec {
            name: "deploy".into(),
            description: "Deploys.".into(),
            input_schema: json!({"type": "object"}),
        }])
}

fn commands(run: &mut Run) -> Vec<Command> {
    std::iter::from_fn(|| run.poll())
        .filter_map(|a| match a {
            Action::Command(c) => Some(c),
            _ => None,
        })
        .collect()
}

fn echoed(kind: FailureKind) -> ProviderFailure {
    let mut f = ProviderFailure::new(kind, format!("key {KEY} refused"));
    f.request_id = Some(format!("req_{KEY}"));
    f
}

/// Plays a run that calls a tool failing with `TOKEN`, is overloaded, then refused, every
/// failure echoing `KEY`; returns every command and the run.
fn play(run: &mut Run) -> Vec<Command> {
    let mut all = Vec::new();
    let mut now = 0;
    let mut event = Event::user_text("deploy");
    let mut answers = 0;
    loop {
        let _ = run.handle(Millis(now), event);
        let step = commands(run);
        all.extend(step.iter().cloned());
        let next = step.into_iter().find_map(|c| match c {
            Command::SendRequest { request, .. } => {
                answers += 1;
                Some(match answers {
                    1 => Event::ProviderSucceeded {
                        request,
                        response: serde_json::from_value(json!({
                            "message": {"role": "assistant", "content": [
                                {"type": "tool_use", "id": "toolu_1", "name": "deploy", "input": {}}
                            ]},
                            "stop_reason": "tool_use",
                            "usage": {"input_tokens": 1, "output_tokens": 1}
                        }))
                        .expect("a response"),
                    },
                    2 => Event::ProviderFailed {
                        request,
                        failure: echoed(FailureKind::Unavailable),
                    },
                    _ => Event::ProviderFailed {
                        request,
                        failure: echoed(FailureKind::AuthFailed),
                    },
                })
            }
            Command::RunTools { batch, calls } => Some(Event::ToolsFinished {
                batch,
                outcome: BatchOutcome::PerCall(vec![CallOutcome::model_error(
                    &calls[0].id,
                    format!("token {TOKEN} expired"),
                )]),
            }),
            Command::Sleep { timer, .. } => Some(Event::TimerFired { timer }),
            _ => None,
        });
        match next {
            Some(e) => event = e,
            None => return all,
        }
        now += 10;
    }
}

#[test]
fn a_run_named_secrets_holds_none_in_its_commands_outcome_or_steps() {
    let secrets = Secrets::new([KEY, TOKEN]).expect("long enough");
    let mut run = Run::new(config(), 1).recording(true).with_secrets(secrets);
    let commands = play(&mut run);
    let text = format!("{commands:?} {:?}", run.end());
    let steps: Vec<String> = run
        .steps()
        .iter()
        .map(|s| serde_json::to_string(&s.to_trace()).expect("a step"))
        .collect();
    let steps = steps.join("\n");
    assert!(
        matches!(commands.last(), Some(Command::Fail { .. })),
        "{text}"
    );
    assert!(text.contains("key *** refused"), "{text}");
    assert!(text.contains("token *** expired"), "{text}");
    assert!(text.contains("req_***"), "{text}");
    for secret in [KEY, TOKEN] {
        assert!(!text.contains(secret), "{secret}: {text}");
        assert!(!steps.contains(secret), "{secret}: {steps}");
    }

    // The steps as recorded replay to the same commands without the secrets.
    let mut replay = Run::new(config(), 1);
    let mut replayed = Vec::new();
    for step in run.steps() {
        let _ = replay.handle(step.at, step.event.clone());
        replayed.extend(self::commands(&mut replay));
    }
    assert_eq!(replayed, commands);
}

#[test]
fn a_host_failure_and_a_machine_driven_directly_are_masked_too() {
    let mut m = rebound_core::AgentMachine::new(config(), 1)
        .with_secrets(Secrets::new([KEY]).expect("long enough"));
    let _ = m.step(Millis(0), Event::user_text("hi"));
    let failed = m.step(
        Millis(1),
        Event::HostFailed {
            failure: HostFailure::new(HostFailureKind::SessionStore, format!("db {KEY} down")),
        },
    );
    let text = format!("{failed:?}");
    assert!(
        text.contains("db *** down") && !text.contains(KEY),
        "{text}"
    );
    assert_eq!(format!("{:?}", m.secrets()), "Secrets(1 named)");
}

#[test]
fn a_secret_too_short_to_mask_is_refused() {
    assert_eq!(
        Secrets::new(["long-enough", "abc"]),
        Err(SecretError::TooShort { index: 1, len: 3 })
    );
}
