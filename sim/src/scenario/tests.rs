//! Unit tests of the scenario format, its faults and its cursor.

use super::*;
use rebound_core::{FailureKind, Millis};
use std::collections::BTreeMap;

#[test]
fn bad_scenarios_are_typed_errors_with_positions() {
    let e = Scenario::from_json("{\n  \"turns\": [1]\n}").unwrap_err();
    assert!(matches!(e, ScenarioError::Json { line: 2, .. }), "{e}");
    let e = Scenario::from_json(r#"{"turnz": []}"#).unwrap_err();
    assert!(e.to_string().contains("turnz"), "{e}");
    let e = Scenario::from_json(r#"{"turns": [{"faults": [{"type": "http", "status": 999}]}]}"#)
        .unwrap_err();
    assert!(matches!(e, ScenarioError::Invalid(_)), "{e}");
    let e = Scenario::from_json(
        r#"{"turns": [{"faults": [{"type": "http", "status": 529, "statsu": 1}]}]}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("statsu"), "{e}");
    let e = Scenario::from_json(r#"{"turns": [{"faults": [{"type": "teapot"}]}]}"#).unwrap_err();
    assert!(e.to_string().contains("teapot"), "{e}");
    let timed = Scenario::from_json(
        r#"{"turns": [{"faults": [{"type": "stream_cut", "after_events": 3, "after_ms": 40}]}]}"#,
    )
    .unwrap();
    assert_eq!(timed.turns[0].faults[0].after_ms, Some(40));
    assert_eq!(Scenario::from_json(&timed.to_json()).unwrap(), timed);
    let mid = Scenario::from_json(
        r#"{"turns": [{"faults": [{"type": "stream_error", "after_deltas": 3}]}]}"#,
    )
    .unwrap();
    assert!(matches!(
        mid.turns[0].faults[0].kind,
        FaultKind::StreamError {
            after_deltas: 3,
            ..
        }
    ));
    assert_eq!(Scenario::from_json(&mid.to_json()).unwrap(), mid);
    // The default is not written back: today's files stay as they are.
    let plain = Fault::from(FaultKind::StreamError {
        error_type: "overloaded_error".into(),
        message: "Overloaded".into(),
        after_deltas: 0,
    });
    assert!(!serde_json::to_string(&plain)
        .unwrap()
        .contains("after_deltas"));
    let e = Scenario::from_json(
        r#"{"turns": [{"faults": [{"type": "stream_error", "after_delta": 3}]}]}"#,
    )
    .unwrap_err();
    assert!(e.to_string().contains("after_delta"), "{e}");
    let e = Scenario::from_json(r#"{"random": {"failure_rate": 1.5}}"#).unwrap_err();
    assert!(matches!(e, ScenarioError::Invalid(_)), "{e}");
    let e = Scenario::from_json(
        r#"{"random": {"outages": [{"from_ms": 5, "until_ms": 5, "fault": {"type": "empty_message"}}]}}"#,
    )
    .unwrap_err();
    assert!(matches!(e, ScenarioError::Invalid(_)), "{e}");
    assert!(Scenario::from_json("").is_err());
    assert!(Scenario::from_json("{}").is_ok());
}

#[test]
fn http_faults_are_classified_by_status() {
    let p = ProviderKind::Anthropic;
    assert_eq!(Fault::http(529).failure(p).kind, FailureKind::Unavailable);
    assert_eq!(Fault::http(429).failure(p).kind, FailureKind::RateLimited);
    assert_eq!(Fault::http(401).failure(p).kind, FailureKind::AuthFailed);
    let hinted = Fault::http_with(429, "retry-after-ms", "1500").failure(p);
    assert_eq!(hinted.retry_after_ms, Some(1_500));
    let overflow = Fault::from(FaultKind::ContextOverflow).failure(ProviderKind::OpenAi);
    assert_eq!(overflow.kind, FailureKind::ContextOverflow);
    assert_eq!(overflow.status, Some(400));
}

#[test]
fn responses_stream_errors_are_classified_like_their_http_twins() {
    let r = ProviderKind::OpenAiResponses;
    for (code, status) in [
        ("rate_limit_exceeded", 429),
        ("server_error", 500),
        ("context_length_exceeded", 400),
    ] {
        let in_stream = Fault::from(FaultKind::StreamError {
            error_type: code.into(),
            message: "failed".into(),
            after_deltas: 0,
        })
        .failure(r);
        let http = Fault::from(FaultKind::Http {
            status,
            headers: BTreeMap::new(),
            error_type: Some(code.into()),
            message: None,
        })
        .failure(r);
        assert_eq!(in_stream.kind, http.kind, "{code}");
        assert_eq!(in_stream.status, None, "{code}");
    }
    let overflow = Fault::from(FaultKind::ContextOverflow).failure(r);
    assert_eq!(overflow.kind, FailureKind::ContextOverflow);
}

#[test]
fn conditional_answers_follow_the_last_tool_result() {
    let s = Scenario::from_json(
        r#"{"turns": [
            {"faults": [{"type": "http", "status": 529}],
             "answer": {"tool_calls": [{"name": "read", "input": {"path": "a"}}]}},
            {"faults": [{"type": "http", "status": 429}],
             "answer": {"text": "It is there."},
             "when_last_tool_error": {"text": "That path is wrong."}}
        ]}"#,
    )
    .unwrap();
    let mut cursor = ScriptCursor::new(1);
    let mut c = Conversation::new();
    c.push(Message::user_text("go"));
    assert!(matches!(cursor.next(&s, Millis(0), &c), Planned::Fault(_)));
    assert!(matches!(
        cursor.next(&s, Millis(0), &c),
        Planned::Answer {
            turn: 0,
            alternate: false,
            ..
        }
    ));
    c.push(Message {
        role: Role::User,
        content: vec![ContentBlock::tool_result(
            "x",
            vec![ToolResultPart::text("no")],
            true,
        )],
    });
    assert!(matches!(cursor.next(&s, Millis(0), &c), Planned::Fault(_)));
    assert!(matches!(
        cursor.next(&s, Millis(0), &c),
        Planned::Answer {
            turn: 1,
            alternate: true,
            ..
        }
    ));
}

#[test]
fn outage_windows_fail_every_attempt_inside_them() {
    let s = Scenario::builtin("total-outage").unwrap();
    let mut cursor = ScriptCursor::new(3);
    let c = Conversation::new();
    for t in [0, 1, 599_999] {
        assert!(matches!(cursor.next(&s, Millis(t), &c), Planned::Fault(_)));
    }
    assert!(matches!(
        cursor.next(&s, Millis(600_000), &c),
        Planned::Answer { turn: 0, .. }
    ));
}

#[test]
fn padded_outputs_have_the_requested_size() {
    for n in [0, 1, 5, 100, 6_000] {
        let out = ToolOutcome::Ok {
            text: Some("hello".into()),
            bytes: Some(n),
        };
        assert_eq!(out.output_text("t").unwrap().len(), n);
    }
}
