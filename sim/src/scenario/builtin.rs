//! The built-in scenarios, by name.

use rebound_core::InputProblemKind;

use super::{
    Answer, Fault, FaultKind, History, InputProblem, Outage, RandomFaults, Scenario, ScriptedCall,
    ToolError, ToolOutcome, Turn,
};
use serde_json::json;

impl Scenario {
    /// Names of the built-in scenarios, for [`builtin`](Self::builtin).
    #[must_use]
    pub fn builtin_names() -> &'static [&'static str] {
        &[
            "healthy",
            "blip",
            "rate-limit-window",
            "stream-cuts",
            "brownout",
            "total-outage",
            "tool-errors",
            "overflow",
            "demo",
        ]
    }

    /// A built-in scenario by name (see [`builtin_names`](Self::builtin_names)).
    ///
    /// ```
    /// use rebound_sim::scenario::Scenario;
    /// for name in Scenario::builtin_names() {
    ///     let s = Scenario::builtin(name).unwrap();
    ///     // Every built-in survives a round trip through its JSON form.
    ///     assert_eq!(Scenario::from_json(&s.to_json()).unwrap(), s);
    /// }
    /// assert!(Scenario::builtin("nope").is_none());
    /// ```
    #[must_use]
    pub fn builtin(name: &str) -> Option<Scenario> {
        let mut s = coding_task();
        s.name = name.to_owned();
        match name {
            "healthy" => {
                s.description = "A three-turn coding task with no faults.".into();
            }
            "blip" => {
                s.description = "Two 529 overloaded errors before the first answer.".into();
                s.turns[0].faults = vec![Fault::http(529), Fault::http(529)];
            }
            "rate-limit-window" => {
                s.description =
                    "429 with retry-after: 5 for every request in the first 12 s.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage::total(
                        0,
                        12_000,
                        Fault::http_with(429, "retry-after", "5"),
                    )],
                    ..RandomFaults::default()
                });
            }
            "stream-cuts" => {
                s.description =
                    "For a minute, 30 % of attempts have their stream cut mid-message.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage {
                        rate: Some(0.3),
                        ..Outage::total(0, 60_000, FaultKind::StreamCut { after_events: 25 }.into())
                    }],
                    ..RandomFaults::default()
                });
            }
            "brownout" => {
                s.description = "Half of all attempts fail with 503 for two minutes.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage {
                        rate: Some(0.5),
                        ..Outage::total(0, 120_000, Fault::http(503))
                    }],
                    ..RandomFaults::default()
                });
            }
            "total-outage" => {
                s.description = "Every attempt fails with 529 for ten minutes.".into();
                s.random = Some(RandomFaults {
                    outages: vec![Outage::total(0, 600_000, Fault::http(529))],
                    ..RandomFaults::default()
                });
            }
            "tool-errors" => {
                s.description = "Every kind of model-visible tool failure, then recovery.".into();
                s.turns[0].answer = Answer::calls(vec![
                    ScriptedCall::new("read", json!({"path": "src/parser.rs"}))
                        .with_outcome(ToolOutcome::error("file not found: src/parser.rs")),
                    ScriptedCall::new("grep", json!({"pattern": "fn parse"})),
                    ScriptedCall {
                        input_problem: Some(InputProblem {
                            kind: InputProblemKind::Truncated,
                            raw: r#"{"path": "src/pa"#.into(),
                        }),
                        ..ScriptedCall::new("read", json!({}))
                    },
                    ScriptedCall {
                        input_problem: Some(InputProblem {
                            kind: InputProblemKind::InvalidJson,
                            raw: r#"{"path": src/lib.rs}"#.into(),
                        }),
                        ..ScriptedCall::new("read", json!({}))
                    },
                ]);
                s.turns[1].answer.batch_error = Some(ToolError::Error {
                    message: "the tool server crashed".into(),
                });
                s.turns[1].when_last_tool_error = Some(Answer::calls(vec![ScriptedCall::new(
                    "bash",
                    json!({"command": "ls src"}),
                )
                .with_outcome(ToolOutcome::ok("lexer.rs\nparse.rs\nlib.rs"))]));
            }
            "overflow" => {
                s.description =
                    "A long session over the context limit: compacted once, then it fits.".into();
                s.history = Some(History {
                    turns: 8,
                    bytes: 8_000,
                    interrupted: false,
                });
                s.context_limit_bytes = Some(40_000);
            }
            "demo" => return Some(demo()),
            _ => return None,
        }
        Some(s)
    }
}

/// read → edit → done.
fn coding_task() -> Scenario {
    Scenario {
        turns: vec![
            Turn {
                answer: Answer {
                    text: Some("Let me read the parser.".into()),
                    ..Answer::calls(vec![ScriptedCall::new(
                        "read",
                        json!({"path": "src/parse.rs"}),
                    )
                    .with_outcome(ToolOutcome::ok("fn parse(input: &str) -> Ast { panic!(\"unwritten\") }"))])
                },
                ..Turn::default()
            },
            Turn {
                answer: Answer::calls(vec![ScriptedCall::new(
                    "edit",
                    json!({"path": "src/parse.rs", "old": "panic!(\"unwritten\")", "new": "Ast::new(input)"}),
                )
                .with_outcome(ToolOutcome::ok("1 replacement"))]),
                ..Turn::default()
            },
            Turn {
                answer: Answer::text("Fixed: `parse` now builds the AST."),
                ..Turn::default()
            },
        ],
        ..Scenario::default()
    }
}

/// A 529, a 429 with retry-after, a stream cut, a tool error the model recovers from, and a
/// context overflow that compacts: the same story in every wire format (no answer hangs on
/// `when_last_tool_error`).
fn demo() -> Scenario {
    let turns = vec![
        Turn {
            faults: vec![Fault::http(529)],
            answer: Answer {
                text: Some("I'll start by reading the parser.".into()),
                ..Answer::calls(vec![ScriptedCall::new(
                    "read",
                    json!({"path": "src/parser.rs"}),
                )
                .with_outcome(ToolOutcome::error("file not found: src/parser.rs"))])
            },
            ..Turn::default()
        },
        // The model reads the error in the tool's result and recovers, whatever the wire
        // format: an answer that does not hang on `when_last_tool_error`, which only
        // Anthropic's error flag can choose, so the demo tells one story on every format.
        Turn {
            faults: vec![Fault::http_with(429, "retry-after", "2")],
            answer: Answer {
                text: Some("That path is wrong; let me list the sources.".into()),
                ..Answer::calls(vec![ScriptedCall::new(
                    "bash",
                    json!({"command": "ls src"}),
                )
                .with_outcome(ToolOutcome::ok("lexer.rs\nparse.rs\nlib.rs"))])
            },
            ..Turn::default()
        },
        Turn {
            faults: vec![FaultKind::StreamCut { after_events: 14 }.into()],
            answer: Answer::calls(vec![ScriptedCall::new(
                "read",
                json!({"path": "src/parse.rs"}),
            )
            .with_outcome(ToolOutcome::Ok {
                text: Some("fn parse(input: &str) -> Ast { panic!(\"unwritten\") }\n".into()),
                bytes: Some(6_000),
            })]),
            ..Turn::default()
        },
        Turn {
            faults: vec![FaultKind::ContextOverflow.into()],
            answer: Answer::calls(vec![ScriptedCall::new(
                "edit",
                json!({"path": "src/parse.rs", "old": "panic!(\"unwritten\")", "new": "Ast::new(input)"}),
            )
            .with_outcome(ToolOutcome::ok("1 replacement"))]),
            ..Turn::default()
        },
        Turn {
            answer: Answer::text("Fixed: `parse` now builds the AST instead of panicking."),
            ..Turn::default()
        },
    ];
    Scenario {
        name: "demo".into(),
        description: "A 529, a 429 with retry-after, a stream cut, a tool error the model \
                      recovers from, and a context overflow that compacts."
            .into(),
        history: Some(History {
            turns: 3,
            bytes: 3_000,
            interrupted: false,
        }),
        turns,
        ..Scenario::default()
    }
}
