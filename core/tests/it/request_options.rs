//! Request options in each API's own words: every shared option mapped to the field each API
//! reads, each API's constraints refused before a request is built, and `extra_body` merged
//! last without ever replacing a key rebound sets.

use rebound_core::wire::{
    request_body, OptionsError, ReasoningEffort, RequestOptions, RequestParams, ToolChoice,
    WireError,
};
use rebound_core::{Conversation, Message, ProviderKind, ToolSpec};
use serde_json::{json, Value};

const A: ProviderKind = ProviderKind::Anthropic;
const C: ProviderKind = ProviderKind::OpenAi;
const R: ProviderKind = ProviderKind::OpenAiResponses;

fn tools() -> Vec<ToolSpec> {
    ["read", "write"]
        .into_iter()
        .map(|name| ToolSpec {
            name: name.into(),
            description: format!("{name} a file"),
            input_schema: json!({"type": "object"}),
        })
        .collect()
}

fn conversation() -> Conversation {
    Conversation::from(vec![Message::user_text("hello")])
}

/// The body for `provider` with `options`, the two tools offered and an output limit of 4096.
fn body(provider: ProviderKind, options: &RequestOptions) -> Result<Value, WireError> {
    let tools = tools();
    let params = RequestParams::new("m", 4096)
        .with_tools(&tools)
        .with_options(options);
    request_body(provider, &conversation(), &params)
}

fn options_error(provider: ProviderKind, options: &RequestOptions) -> OptionsError {
    match body(provider, options) {
        Err(WireError::Options(e)) => {
            assert_eq!(options.check(provider, 4096), Err(e.clone()), "{e}");
            e
        }
        other => panic!("{provider}: expected an options error, got {other:?}"),
    }
}

#[test]
fn no_options_leave_each_body_as_before() {
    let tools = tools();
    let plain = RequestParams::new("m", 4096).with_tools(&tools);
    let empty = RequestOptions::new();
    for provider in [A, C, R] {
        let without = request_body(provider, &conversation(), &plain).unwrap();
        let with = body(provider, &empty).unwrap();
        assert_eq!(without, with, "{provider}");
        for key in [
            "temperature",
            "tool_choice",
            "parallel_tool_calls",
            "thinking",
        ] {
            assert!(with.get(key).is_none(), "{provider}: {key}");
        }
    }
}

#[test]
fn sampling_and_stop_sequences_use_each_apis_field() {
    let options = RequestOptions::new()
        .with_temperature(0.5)
        .with_top_p(0.9)
        .with_stop_sequence("END")
        .with_stop_sequence("\n\nHuman:");
    let a = body(A, &options).unwrap();
    assert_eq!(a["temperature"], 0.5);
    assert_eq!(a["top_p"], 0.9);
    assert_eq!(a["stop_sequences"], json!(["END", "\n\nHuman:"]));
    assert!(a.get("stop").is_none());
    let c = body(C, &options).unwrap();
    assert_eq!(c["temperature"], 0.5);
    assert_eq!(c["top_p"], 0.9);
    assert_eq!(c["stop"], json!(["END", "\n\nHuman:"]));
    assert!(c.get("stop_sequences").is_none());
    // The output limit stays where it was, in each API's field.
    assert_eq!(a["max_tokens"], 4096);
    assert_eq!(c["max_completion_tokens"], 4096);
    let r = body(R, &options.clone().with_extra_body(Default::default()));
    assert!(matches!(
        r,
        Err(WireError::Options(OptionsError::Unsupported {
            provider: R,
            option: "stop sequences",
            ..
        }))
    ));
    let r = body(
        R,
        &RequestOptions::new().with_temperature(1.5).with_top_p(0.1),
    )
    .unwrap();
    assert_eq!(
        (r["temperature"].clone(), r["top_p"].clone()),
        (json!(1.5), json!(0.1))
    );
    assert_eq!(r["max_output_tokens"], 4096);
}

#[test]
fn temperature_ranges_are_each_apis_own() {
    assert!(body(C, &RequestOptions::new().with_temperature(2.0)).is_ok());
    assert!(body(R, &RequestOptions::new().with_temperature(0.0)).is_ok());
    let e = options_error(A, &RequestOptions::new().with_temperature(1.5));
    assert_eq!(
        e.to_string(),
        "temperature 1.5 is out of range for the Anthropic Messages API: it takes 0 to 1"
    );
    for bad in [-0.1, 2.01, f64::NAN, f64::INFINITY] {
        for provider in [C, R] {
            let e = options_error(provider, &RequestOptions::new().with_temperature(bad));
            assert!(matches!(
                e,
                OptionsError::OutOfRange {
                    option: "temperature",
                    ..
                }
            ));
        }
        let e = options_error(A, &RequestOptions::new().with_top_p(bad));
        assert!(matches!(
            e,
            OptionsError::OutOfRange {
                option: "top_p",
                ..
            }
        ));
    }
}

#[test]
fn chat_takes_at_most_four_stop_sequences_and_none_may_be_empty() {
    let five = (0..5).fold(RequestOptions::new(), |o, i| {
        o.with_stop_sequence(format!("s{i}"))
    });
    let e = options_error(C, &five);
    assert!(
        matches!(
            e,
            OptionsError::TooManyStopSequences {
                count: 5,
                max: 4,
                ..
            }
        ),
        "{e}"
    );
    assert!(body(A, &five).is_ok(), "Anthropic sets no such limit");
    let empty = RequestOptions::new().with_stop_sequence("");
    for provider in [A, C] {
        assert_eq!(
            options_error(provider, &empty),
            OptionsError::EmptyStopSequence
        );
    }
}

#[test]
fn tool_choice_in_each_apis_shape() {
    let cases = [
        (
            ToolChoice::Auto,
            json!({"type": "auto"}),
            json!("auto"),
            json!("auto"),
        ),
        (
            ToolChoice::Any,
            json!({"type": "any"}),
            json!("required"),
            json!("required"),
        ),
        (
            ToolChoice::None,
            json!({"type": "none"}),
            json!("none"),
            json!("none"),
        ),
        (
            ToolChoice::tool("read"),
            json!({"type": "tool", "name": "read"}),
            json!({"type": "function", "function": {"name": "read"}}),
            json!({"type": "function", "name": "read"}),
        ),
    ];
    for (choice, anthropic, chat, responses) in cases {
        let options = RequestOptions::new().with_tool_choice(choice.clone());
        assert_eq!(
            body(A, &options).unwrap()["tool_choice"],
            anthropic,
            "{choice}"
        );
        assert_eq!(body(C, &options).unwrap()["tool_choice"], chat, "{choice}");
        assert_eq!(
            body(R, &options).unwrap()["tool_choice"],
            responses,
            "{choice}"
        );
    }
}

#[test]
fn parallel_tool_calls_is_a_flag_of_anthropics_tool_choice() {
    let one_at_a_time = RequestOptions::new().with_parallel_tool_calls(false);
    let a = body(A, &one_at_a_time).unwrap();
    assert_eq!(
        a["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    assert!(a.get("parallel_tool_calls").is_none());
    for provider in [C, R] {
        let b = body(provider, &one_at_a_time).unwrap();
        assert_eq!(b["parallel_tool_calls"], false, "{provider}");
        assert!(b.get("tool_choice").is_none(), "{provider}");
    }
    let forced = one_at_a_time
        .clone()
        .with_tool_choice(ToolChoice::tool("write"));
    assert_eq!(
        body(A, &forced).unwrap()["tool_choice"],
        json!({"type": "tool", "name": "write", "disable_parallel_tool_use": true})
    );
    // `none` takes no flag in Anthropic's schema: no tool is called at all.
    let none = one_at_a_time.with_tool_choice(ToolChoice::None);
    assert_eq!(
        body(A, &none).unwrap()["tool_choice"],
        json!({"type": "none"})
    );
    let parallel = RequestOptions::new()
        .with_parallel_tool_calls(true)
        .with_tool_choice(ToolChoice::Any);
    assert_eq!(
        body(A, &parallel).unwrap()["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": false})
    );
}

#[test]
fn tool_options_are_left_out_of_a_request_without_tools_and_a_named_tool_must_be_offered() {
    let options = RequestOptions::new()
        .with_tool_choice(ToolChoice::tool("read"))
        .with_parallel_tool_calls(false);
    let params = RequestParams::new("m", 4096).with_options(&options);
    for provider in [A, C, R] {
        let b = request_body(provider, &conversation(), &params).unwrap();
        assert!(b.get("tool_choice").is_none(), "{provider}");
        assert!(b.get("parallel_tool_calls").is_none(), "{provider}");
        let unknown = RequestOptions::new().with_tool_choice(ToolChoice::tool("delete"));
        assert_eq!(
            body(provider, &unknown),
            Err(WireError::Options(OptionsError::UnknownTool {
                name: "delete".into()
            }))
        );
        let blank = RequestOptions::new().with_tool_choice(ToolChoice::tool(" "));
        assert_eq!(options_error(provider, &blank), OptionsError::EmptyToolName);
    }
}

#[test]
fn reasoning_effort_for_openai_and_a_thinking_budget_for_anthropic() {
    let effort = RequestOptions::new().with_reasoning_effort(ReasoningEffort::High);
    assert_eq!(body(C, &effort).unwrap()["reasoning_effort"], "high");
    assert_eq!(
        body(R, &effort).unwrap()["reasoning"],
        json!({"effort": "high"})
    );
    let e = options_error(A, &effort);
    assert!(
        matches!(
            e,
            OptionsError::Unsupported {
                option: "reasoning effort",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("thinking budget"), "{e}");
    let thinking = RequestOptions::new().with_thinking_budget(2048);
    assert_eq!(
        body(A, &thinking).unwrap()["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    for provider in [C, R] {
        let e = options_error(provider, &thinking);
        assert!(matches!(
            e,
            OptionsError::Unsupported {
                option: "thinking budget",
                ..
            }
        ));
    }
    for effort in ReasoningEffort::ALL {
        assert_eq!(effort.as_str().parse::<ReasoningEffort>(), Ok(effort));
    }
    assert!("extreme".parse::<ReasoningEffort>().is_err());
}

#[test]
fn anthropic_thinking_budget_is_bounded_by_1024_and_the_output_limit() {
    for budget in [1024, 4095] {
        assert!(body(A, &RequestOptions::new().with_thinking_budget(budget)).is_ok());
    }
    for budget in [0, 1023, 4096, 10_000] {
        let e = options_error(A, &RequestOptions::new().with_thinking_budget(budget));
        assert_eq!(
            e,
            OptionsError::ThinkingBudget {
                budget,
                max_tokens: 4096
            }
        );
    }
}

#[test]
fn anthropic_thinking_refuses_what_the_api_refuses_alongside_it() {
    let thinking = RequestOptions::new().with_thinking_budget(2048);
    let refused = [
        thinking.clone().with_temperature(0.7),
        thinking.clone().with_top_p(0.9),
        thinking.clone().with_tool_choice(ToolChoice::Any),
        thinking.clone().with_tool_choice(ToolChoice::tool("read")),
    ];
    for options in refused {
        let e = options_error(A, &options);
        assert!(matches!(e, OptionsError::Conflict { .. }), "{e}");
    }
    let allowed = thinking
        .with_temperature(1.0)
        .with_top_p(0.95)
        .with_tool_choice(ToolChoice::Auto);
    assert!(body(A, &allowed).is_ok());
}

#[test]
fn user_id_is_anthropic_metadata_and_openai_safety_identifier() {
    let options = RequestOptions::new().with_user_id("user-7f3a");
    assert_eq!(
        body(A, &options).unwrap()["metadata"],
        json!({"user_id": "user-7f3a"})
    );
    for provider in [C, R] {
        let b = body(provider, &options).unwrap();
        assert_eq!(b["safety_identifier"], "user-7f3a");
        assert!(
            b.get("user").is_none(),
            "`user` is deprecated in favour of safety_identifier"
        );
    }
    let long = RequestOptions::new().with_user_id("x".repeat(65));
    assert!(body(A, &long).is_ok());
    assert!(matches!(
        options_error(C, &long),
        OptionsError::UserId {
            len: 65,
            max: 64,
            ..
        }
    ));
    let blank = RequestOptions::new().with_user_id(" ");
    assert!(matches!(
        options_error(A, &blank),
        OptionsError::UserId { .. }
    ));
}

#[test]
fn extra_body_adds_top_level_keys_last() {
    let options = RequestOptions::new()
        .with_temperature(0.3)
        .with_extra_field("top_k", json!(40))
        .with_extra_field("service_tier", json!("auto"));
    let a = body(A, &options).unwrap();
    assert_eq!(a["top_k"], 40);
    assert_eq!(a["service_tier"], "auto");
    assert_eq!(a["temperature"], 0.3);
    let c = body(
        C,
        &RequestOptions::new().with_extra_field("metadata", json!({"run": "7"})),
    );
    assert_eq!(c.unwrap()["metadata"], json!({"run": "7"}));
}

#[test]
fn extra_body_never_replaces_a_key_rebound_sets() {
    let owned = [
        (
            A,
            &[
                "model",
                "messages",
                "system",
                "stream",
                "tools",
                "max_tokens",
            ][..],
        ),
        (
            C,
            &[
                "model",
                "messages",
                "stream",
                "stream_options",
                "tools",
                "max_completion_tokens",
            ],
        ),
        (
            R,
            &[
                "model",
                "input",
                "instructions",
                "stream",
                "tools",
                "store",
                "include",
                "max_output_tokens",
                "previous_response_id",
                "conversation",
            ],
        ),
    ];
    for (provider, keys) in owned {
        for key in keys {
            let options = RequestOptions::new().with_extra_field(*key, json!(true));
            let e = options_error(provider, &options);
            assert!(
                matches!(&e, OptionsError::ExtraBodyKey { key: k, .. } if k == key),
                "{provider} {key}: {e}"
            );
        }
    }
    // A typed option and the same key in the extra body: one place only.
    let twice = RequestOptions::new()
        .with_temperature(0.2)
        .with_extra_field("temperature", json!(0.9));
    for provider in [A, C, R] {
        assert!(matches!(
            options_error(provider, &twice),
            OptionsError::ExtraBodyKey { .. }
        ));
    }
    let twice = RequestOptions::new()
        .with_user_id("u")
        .with_extra_field("metadata", json!({"user_id": "v"}));
    assert!(matches!(
        options_error(A, &twice),
        OptionsError::ExtraBodyKey { .. }
    ));
    // Without the typed option the key is the caller's to set.
    let thinking = RequestOptions::new().with_extra_field("thinking", json!({"type": "adaptive"}));
    assert_eq!(
        body(A, &thinking).unwrap()["thinking"],
        json!({"type": "adaptive"})
    );
}

#[test]
fn errors_and_debug_never_show_extra_body_values() {
    let options = RequestOptions::new().with_extra_field("stream", json!("gw-secret-123"));
    let e = options_error(A, &options);
    assert!(!e.to_string().contains("gw-secret-123"), "{e}");
    let shown = format!("{options:?}");
    assert!(shown.contains("stream"), "{shown}");
    assert!(!shown.contains("gw-secret-123"), "{shown}");
}
