//! Every request body rebound builds with request options passes the providers' own OpenAPI
//! descriptions of the request: Anthropic's `CreateMessageParams`, OpenAI's
//! `CreateChatCompletionRequest` and `CreateResponse`, converted to JSON Schema (draft
//! 2020-12, `$defs`). Every option, then combinations, then a few thousand seeded random
//! option sets: whatever [`RequestOptions::check`] accepts must be a body the API's schema
//! accepts. And the schemas can fail: bodies an API refuses are refused by them too.
//!
//! The schemas are data taken from the providers' published descriptions (sources, commits
//! and the conversion in `SOURCES.md` beside them). They are looked for in
//! `$REBOUND_OPENAPI_DIR`, then `effects/tests/fixtures/openapi/`, then `openapi/` in the
//! `shared/` folder beside the workspace; where none holds them the test says so on stderr
//! and checks nothing (set `REBOUND_REQUIRE_OPENAPI=1` to make that a failure).

use rebound_core::wire::{
    request_body, ReasoningEffort, RequestOptions, RequestParams, ToolChoice,
};
use rebound_core::{
    ContentBlock, Conversation, Message, ProviderKind, Role, ToolResultPart, ToolSpec,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const KINDS: [ProviderKind; 3] = [
    ProviderKind::Anthropic,
    ProviderKind::OpenAi,
    ProviderKind::OpenAiResponses,
];

/// The seed of the random option sets; a failure prints the set and its index.
const SEED: u64 = 0x5eed_3504;
const RANDOM_SETS: usize = 2_000;
const MAX_TOKENS: u32 = 8_192;

fn file_name(kind: ProviderKind) -> &'static str {
    match kind {
        ProviderKind::Anthropic => "anthropic-messages.request.schema.json",
        ProviderKind::OpenAi => "openai-chat-completions.request.schema.json",
        _ => "openai-responses.request.schema.json",
    }
}

/// The folder holding the three schemas, if any does.
fn schema_dir() -> Option<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("REBOUND_OPENAPI_DIR").map(PathBuf::from),
        Some(manifest.join("tests/fixtures/openapi")),
        Some(manifest.join("../../shared/openapi")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|dir| KINDS.iter().all(|k| dir.join(file_name(*k)).is_file()))
}

struct Schemas {
    validators: Vec<(ProviderKind, jsonschema::Validator)>,
}

impl Schemas {
    fn load() -> Option<Schemas> {
        let Some(dir) = schema_dir() else {
            let required = std::env::var_os("REBOUND_REQUIRE_OPENAPI").is_some();
            assert!(
                !required,
                "REBOUND_REQUIRE_OPENAPI is set but no schemas were found"
            );
            eprintln!(
                "request_openapi: no OpenAPI request schemas found (REBOUND_OPENAPI_DIR, \
                 effects/tests/fixtures/openapi, ../shared/openapi): nothing checked"
            );
            return None;
        };
        let validators = KINDS
            .iter()
            .map(|kind| {
                let path = dir.join(file_name(*kind));
                let text = std::fs::read_to_string(&path).expect("a readable schema");
                let mut schema: Value = serde_json::from_str(&text).expect("a JSON schema");
                if *kind != ProviderKind::Anthropic {
                    // OpenAI's descriptions leave `additionalProperties` open, but the API
                    // answers 400 "Unrecognized request argument supplied" to an unknown
                    // top-level key: so no key may go unevaluated by the description.
                    schema["unevaluatedProperties"] = json!(false);
                }
                let validator = jsonschema::draft202012::new(&schema)
                    .unwrap_or_else(|e| panic!("{}: not a valid schema: {e}", path.display()));
                (*kind, validator)
            })
            .collect();
        Some(Schemas { validators })
    }

    fn validator(&self, kind: ProviderKind) -> &jsonschema::Validator {
        &self
            .validators
            .iter()
            .find(|(k, _)| *k == kind)
            .expect("a validator per kind")
            .1
    }

    /// The schema's complaints about `body`, one line each.
    fn errors(&self, kind: ProviderKind, body: &Value) -> Vec<String> {
        self.validator(kind)
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path))
            .collect()
    }

    #[track_caller]
    fn assert_valid(&self, kind: ProviderKind, body: &Value, what: &str) {
        let errors = self.errors(kind, body);
        assert!(
            errors.is_empty(),
            "{kind} {what}: the API's schema refuses the body:\n{}\n{body:#}",
            errors.join("\n")
        );
    }

    #[track_caller]
    fn assert_refused(&self, kind: ProviderKind, body: &Value, what: &str) {
        assert!(
            !self.errors(kind, body).is_empty(),
            "{kind} {what}: the schema accepts a body the API refuses:\n{body:#}"
        );
    }
}

fn tools() -> Vec<ToolSpec> {
    ["read", "write"]
        .into_iter()
        .map(|name| ToolSpec {
            name: name.into(),
            description: format!("{name} a file"),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            }),
        })
        .collect()
}

/// Text, a tool call, an error result and an answer: a conversation of every ordinary kind.
fn conversation() -> Conversation {
    Conversation::from(vec![
        Message::user_text("Read a.txt"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("Reading it."),
                ContentBlock::tool_use("toolu_1", "read", json!({"path": "a.txt"})),
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "toolu_1",
                vec![ToolResultPart::text("file not found: a.txt")],
                true,
            )],
        },
        Message::assistant_text("It does not exist."),
        Message::user_text("Then write it."),
    ])
}

fn body(kind: ProviderKind, options: &RequestOptions) -> Value {
    let tools = tools();
    let params = RequestParams::new("model-x", MAX_TOKENS)
        .with_system("Be brief.")
        .with_tools(&tools)
        .with_options(options);
    request_body(kind, &conversation(), &params)
        .unwrap_or_else(|e| panic!("{kind}: {options:?} was accepted by check but: {e}"))
}

/// Every option `kind`'s API has, each set.
fn every_option(kind: ProviderKind) -> RequestOptions {
    let options = RequestOptions::new()
        .with_top_p(0.96)
        .with_tool_choice(ToolChoice::Auto)
        .with_parallel_tool_calls(false)
        .with_user_id("4f1e0c-hash")
        .with_extra_field("service_tier", json!("auto"));
    match kind {
        ProviderKind::Anthropic => options
            .with_stop_sequence("STOP")
            .with_thinking_budget(4_096)
            .with_extra_field("top_k", json!(40)),
        ProviderKind::OpenAi => options
            .with_temperature(1.2)
            .with_stop_sequence("STOP")
            .with_reasoning_effort(ReasoningEffort::High)
            .with_extra_field("seed", json!(7)),
        _ => options
            .with_temperature(1.2)
            .with_reasoning_effort(ReasoningEffort::High)
            .with_extra_field("top_logprobs", json!(2)),
    }
}

#[test]
fn bodies_with_every_option_pass_each_apis_openapi_description() {
    let Some(schemas) = Schemas::load() else {
        return;
    };
    for kind in KINDS {
        schemas.assert_valid(kind, &body(kind, &RequestOptions::new()), "no options");
        schemas.assert_valid(kind, &body(kind, &every_option(kind)), "every option");
    }
}

#[test]
fn each_tool_choice_and_effort_passes_each_apis_openapi_description() {
    let Some(schemas) = Schemas::load() else {
        return;
    };
    let choices = [
        ToolChoice::Auto,
        ToolChoice::Any,
        ToolChoice::None,
        ToolChoice::tool("write"),
    ];
    for kind in KINDS {
        for choice in &choices {
            for parallel in [None, Some(true), Some(false)] {
                let mut options = RequestOptions::new().with_tool_choice(choice.clone());
                options.parallel_tool_calls = parallel;
                let what = format!("tool choice {choice}, parallel {parallel:?}");
                schemas.assert_valid(kind, &body(kind, &options), &what);
            }
        }
        if kind != ProviderKind::Anthropic {
            for effort in ReasoningEffort::ALL {
                let options = RequestOptions::new().with_reasoning_effort(effort);
                schemas.assert_valid(kind, &body(kind, &options), effort.as_str());
            }
        }
    }
}

/// A random option set: each option present or not, values sometimes outside every range.
fn random_options(rng: &mut fastrand::Rng) -> RequestOptions {
    let mut o = RequestOptions::new();
    let number = |rng: &mut fastrand::Rng, max: f64| {
        if rng.u8(..10) == 0 {
            rng.f64() * 6.0 - 2.0
        } else {
            (rng.f64() * max * 100.0).round() / 100.0
        }
    };
    if rng.bool() {
        o.temperature = Some(number(rng, 2.0));
    }
    if rng.bool() {
        o.top_p = Some(number(rng, 1.0));
    }
    for _ in 0..rng.usize(..6).saturating_sub(2) {
        let stop: String = (0..rng.usize(..4)).map(|_| rng.alphanumeric()).collect();
        o.stop_sequences.push(stop);
    }
    o.tool_choice = match rng.u8(..6) {
        0 => Some(ToolChoice::Auto),
        1 => Some(ToolChoice::Any),
        2 => Some(ToolChoice::None),
        3 => Some(ToolChoice::tool(if rng.bool() { "read" } else { "write" })),
        _ => None,
    };
    o.parallel_tool_calls = [None, Some(true), Some(false)][rng.usize(..3)];
    if rng.u8(..3) == 0 {
        o.reasoning_effort = Some(ReasoningEffort::ALL[rng.usize(..ReasoningEffort::ALL.len())]);
    }
    if rng.u8(..3) == 0 {
        o.thinking_budget = Some(rng.u32(512..10_000));
    }
    if rng.u8(..3) == 0 {
        let len = rng.usize(1..80);
        o.user_id = Some((0..len).map(|_| rng.alphanumeric()).collect());
    }
    if rng.u8(..4) == 0 {
        o.extra_body.insert("service_tier".into(), json!("auto"));
    }
    o
}

#[test]
fn every_random_option_set_rebound_accepts_passes_the_apis_openapi_description() {
    let Some(schemas) = Schemas::load() else {
        return;
    };
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut accepted = [0usize; 3];
    for i in 0..RANDOM_SETS {
        let options = random_options(&mut rng);
        for (k, kind) in KINDS.into_iter().enumerate() {
            if options.check(kind, MAX_TOKENS).is_err() {
                continue;
            }
            accepted[k] += 1;
            let what = format!("random set {i} (seed {SEED:#x}): {options:?}");
            schemas.assert_valid(kind, &body(kind, &options), &what);
        }
    }
    // Enough of them reach the schema for the check to mean something.
    for (k, kind) in KINDS.into_iter().enumerate() {
        assert!(
            accepted[k] > RANDOM_SETS / 10,
            "{kind}: only {} accepted",
            accepted[k]
        );
    }
}

#[test]
fn the_schemas_refuse_bodies_the_apis_refuse() {
    let Some(schemas) = Schemas::load() else {
        return;
    };
    let anthropic = ProviderKind::Anthropic;
    let chat = ProviderKind::OpenAi;
    let responses = ProviderKind::OpenAiResponses;
    let with = |kind, key: &str, value: Value| {
        let mut b = body(kind, &RequestOptions::new());
        b[key] = value;
        b
    };
    let cases = [
        (
            anthropic,
            "tool_choice",
            json!("required"),
            "OpenAI's tool choice",
        ),
        (
            anthropic,
            "tool_choice",
            json!({"type": "function", "name": "read"}),
            "a function choice",
        ),
        (
            anthropic,
            "temperature",
            json!(1.5),
            "a temperature above 1",
        ),
        (
            anthropic,
            "reasoning_effort",
            json!("high"),
            "OpenAI's reasoning effort",
        ),
        (
            anthropic,
            "thinking",
            json!({"type": "enabled", "budget_tokens": 512}),
            "a small budget",
        ),
        (
            anthropic,
            "metadata",
            json!({"user_id": "x".repeat(257)}),
            "a long user id",
        ),
        (
            chat,
            "tool_choice",
            json!({"type": "any"}),
            "Anthropic's tool choice",
        ),
        (
            chat,
            "stop",
            json!(["a", "b", "c", "d", "e"]),
            "five stop sequences",
        ),
        (
            chat,
            "stop_sequences",
            json!(["a"]),
            "Anthropic's stop field",
        ),
        (chat, "temperature", json!(2.5), "a temperature above 2"),
        (
            chat,
            "reasoning_effort",
            json!("extreme"),
            "an unknown effort",
        ),
        (
            chat,
            "thinking",
            json!({"type": "enabled", "budget_tokens": 2048}),
            "Anthropic's thinking",
        ),
        (
            chat,
            "safety_identifier",
            json!("x".repeat(65)),
            "a long safety identifier",
        ),
        (
            responses,
            "stop",
            json!(["a"]),
            "a stop field the API lacks",
        ),
        (
            responses,
            "tool_choice",
            json!({"type": "function", "function": {"name": "read"}}),
            "Chat's named choice",
        ),
        (
            responses,
            "reasoning_effort",
            json!("high"),
            "Chat's effort field",
        ),
        (
            responses,
            "parallel_tool_calls",
            json!("no"),
            "a string flag",
        ),
    ];
    for (kind, key, value, what) in cases {
        schemas.assert_refused(kind, &with(kind, key, value), what);
    }
}
