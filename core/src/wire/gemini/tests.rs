//! Tests of the Gemini format: captured streams, every finish reason, in-stream errors,
//! thought signatures and minted call ids, request bodies both ways, schemas.

use super::schema;
use crate::classify::classify_http;
use crate::conversation::{
    ContentBlock, Conversation, Message, Role, TargetIdentity, ToolResultPart,
};
use crate::failure::{FailureAction, FailureKind, ProviderKind, TransportFault};
use crate::headers::Headers;
use crate::response::{AssistantResponse, InputProblemKind, StopReason, Usage};
use crate::tool::ToolSpec;
use crate::wire::tests::{decode, decode_with_deltas, GEMINI_CALL, GEMINI_TEXT};
use crate::wire::{
    encode_error_body, encode_response_json, encode_stream, encode_stream_error_event,
    gemini_request_target, parse_request, parse_response, request_body, request_path,
    RequestOptions, RequestParams, StreamDecoder, StreamDelta, ToolChoice,
};
use serde_json::{json, Value};

const G: ProviderKind = ProviderKind::Gemini;

fn sse(chunks: &[Value]) -> Vec<u8> {
    chunks
        .iter()
        .flat_map(|c| format!("data: {c}\r\n\r\n").into_bytes())
        .collect()
}

fn chunk(parts: Value, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = f.into();
    }
    json!({"candidates": [candidate], "responseId": "resp1", "modelVersion": "gemini-2.5-flash"})
}

fn signature(s: &str) -> ContentBlock {
    ContentBlock::reasoning(json!({"thoughtSignature": s}))
}

// ---- captured streams ----

#[test]
fn text_capture_assembles_text_usage_and_identity() {
    let (deltas, r) = decode_with_deltas(G, GEMINI_TEXT);
    assert_eq!(
        r.message,
        Message::assistant_text("今日の東京の天気は曇りで、気温は22度です。\n")
    );
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (138, 15));
    assert_eq!(r.id(), Some("45I2aaWZBumm2roPm8HR0Ao"));
    assert_eq!(r.model(), Some("gemini-2.5-flash"));
    assert_eq!(deltas.len(), 2);
}

#[test]
fn signed_call_capture_keeps_the_signature_before_its_call_and_mints_a_stable_id() {
    let r = decode(G, GEMINI_CALL).unwrap();
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    let [ContentBlock::Reasoning { item, .. }, ContentBlock::ToolUse { id, name, input }] =
        r.message.content.as_slice()
    else {
        panic!("{:?}", r.message.content);
    };
    assert!(item["thoughtSignature"]
        .as_str()
        .is_some_and(|s| s.starts_with("CikBcsjaf")));
    assert_eq!(id, "gc_qpc2afWVFJK4vr0Pq6WiyAU_0");
    assert_eq!(name, "getWeather");
    assert_eq!(**input, json!({"location": "Tokyo"}));
    // Thoughts are billed as output.
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (83, 118));
    assert_eq!(
        decode(G, GEMINI_CALL).unwrap(),
        r,
        "the same bytes, the same ids"
    );
}

#[test]
fn a_call_with_its_own_id_keeps_it() {
    let bytes = sse(&[chunk(
        json!([{"functionCall": {"id": "call-7", "name": "read", "args": {}}}]),
        Some("STOP"),
    )]);
    let r = decode(G, &bytes).unwrap();
    assert_eq!(
        r.message.tool_uses().next().map(|(id, ..)| id),
        Some("call-7")
    );
}

#[test]
fn thought_parts_stream_as_thinking_and_are_never_sent_back() {
    let bytes = sse(&[
        chunk(json!([{"text": "Let me think", "thought": true}]), None),
        chunk(json!([{"text": " more.", "thought": true}]), None),
        chunk(
            json!([{"text": "Answer", "thoughtSignature": "sig-a"}]),
            Some("STOP"),
        ),
    ]);
    let (deltas, r) = decode_with_deltas(G, &bytes);
    assert_eq!(
        r.message.content,
        [
            ContentBlock::thinking("Let me think more.", ""),
            signature("sig-a"),
            ContentBlock::text("Answer"),
        ]
    );
    assert!(matches!(deltas[0], StreamDelta::Thinking { .. }));
    let conversation = Conversation::from(vec![
        Message::user_text("q"),
        r.message,
        Message::user_text("and?"),
    ]);
    let body = request_body(
        G,
        &conversation,
        &RequestParams::new("gemini-2.5-flash", 64),
    )
    .unwrap();
    assert_eq!(
        body["contents"][1]["parts"],
        json!([{"text": "Answer", "thoughtSignature": "sig-a"}])
    );
}

#[test]
fn a_signature_ending_streamed_text_stays_after_it_and_goes_back_on_an_empty_part() {
    let bytes = sse(&[
        chunk(json!([{"text": "Hello "}]), None),
        chunk(json!([{"text": "world"}]), None),
        chunk(
            json!([{"text": "", "thoughtSignature": "sig-end"}]),
            Some("STOP"),
        ),
    ]);
    let r = decode(G, &bytes).unwrap();
    assert_eq!(
        r.message.content,
        [ContentBlock::text("Hello world"), signature("sig-end")]
    );
    let conversation = Conversation::from(vec![
        Message::user_text("q"),
        r.message,
        Message::user_text("and?"),
    ]);
    let body = request_body(G, &conversation, &RequestParams::new("m", 64)).unwrap();
    assert_eq!(
        body["contents"][1]["parts"],
        json!([{"text": "Hello world"}, {"text": "", "thoughtSignature": "sig-end"}])
    );
}

// ---- finish reasons and failures ----

#[test]
fn every_blocking_finish_reason_without_content_is_content_blocked_and_not_retried() {
    for reason in [
        "SAFETY",
        "RECITATION",
        "PROHIBITED_CONTENT",
        "BLOCKLIST",
        "SPII",
        "IMAGE_SAFETY",
        "MODEL_ARMOR",
    ] {
        let bytes = sse(&[chunk(json!([]), Some(reason))]);
        let f = decode(G, &bytes).unwrap_err();
        assert_eq!(f.kind, FailureKind::ContentBlocked, "{reason}");
        assert_eq!(f.error_type.as_deref(), Some(reason));
        assert_eq!(f.action(), FailureAction::Fail);
    }
}

#[test]
fn a_blocking_finish_reason_after_some_text_is_that_text_stopped_by_the_filter() {
    let bytes = sse(&[
        chunk(json!([{"text": "Once upon"}]), None),
        chunk(json!([]), Some("RECITATION")),
    ]);
    let r = decode(G, &bytes).unwrap();
    assert_eq!(r.message, Message::assistant_text("Once upon"));
    assert_eq!(r.stop_reason, StopReason::ContentFilter);
}

#[test]
fn a_blocked_prompt_is_content_blocked() {
    let body = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                      "usageMetadata": {"promptTokenCount": 638, "totalTokenCount": 638}});
    let f = decode(G, &sse(std::slice::from_ref(&body))).unwrap_err();
    assert_eq!(f.kind, FailureKind::ContentBlocked);
    assert_eq!(f.error_type.as_deref(), Some("PROHIBITED_CONTENT"));
    let f = parse_response(G, body.to_string().as_bytes()).unwrap_err();
    assert_eq!(f.kind, FailureKind::ContentBlocked);
}

#[test]
fn unusable_output_is_retried_as_a_malformed_stream() {
    for reason in [
        "MALFORMED_FUNCTION_CALL",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MALFORMED_RESPONSE",
    ] {
        let mut c = chunk(json!([]), Some(reason));
        c["candidates"][0]["finishMessage"] =
            "Malformed function call: get_mod_details(mod_id=railways".into();
        let f = decode(G, &sse(&[c])).unwrap_err();
        assert_eq!(f.kind, FailureKind::StreamMalformed, "{reason}");
        assert_eq!(f.error_type.as_deref(), Some(reason));
        assert_eq!(f.action(), FailureAction::Retry);
    }
}

#[test]
fn a_missing_thought_signature_is_a_bad_request() {
    let f = decode(
        G,
        &sse(&[chunk(json!([]), Some("MISSING_THOUGHT_SIGNATURE"))]),
    )
    .unwrap_err();
    assert_eq!(f.kind, FailureKind::BadRequest);
}

#[test]
fn max_tokens_and_other_reasons_are_stop_reasons() {
    let r = decode(
        G,
        &sse(&[chunk(json!([{"text": "cut"}]), Some("MAX_TOKENS"))]),
    )
    .unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    let r = decode(G, &sse(&[chunk(json!([{"text": "hm"}]), Some("LANGUAGE"))])).unwrap();
    assert_eq!(r.stop_reason, StopReason::Other("LANGUAGE".into()));
}

#[test]
fn reasons_that_are_not_names_are_other() {
    let odd = "SAFETY\nplus a payload ".repeat(50);
    let r = decode(G, &sse(&[chunk(json!([{"text": "x"}]), Some(&odd))])).unwrap();
    assert_eq!(r.stop_reason, StopReason::Other("OTHER".into()));
    let body = json!({"promptFeedback": {"blockReason": odd}});
    let f = decode(G, &sse(&[body])).unwrap_err();
    assert_eq!(f.error_type.as_deref(), Some("OTHER"));
    assert!(!f.message.contains('\n'));
}

#[test]
fn a_stream_without_a_finish_reason_is_cut() {
    let bytes = sse(&[chunk(json!([{"text": "Hel"}]), None)]);
    let f = decode(G, &bytes).unwrap_err();
    assert_eq!(f.transport, Some(TransportFault::StreamCut));
}

#[test]
fn an_error_chunk_mid_stream_is_classified_like_its_http_twin() {
    let mut bytes = sse(&[chunk(json!([{"text": "Hel"}]), None)]);
    bytes.extend(encode_stream_error_event(
        G,
        "UNAVAILABLE",
        "The model is overloaded. Please try again later.",
    ));
    let f = decode(G, &bytes).unwrap_err();
    assert_eq!(f.kind, FailureKind::Unavailable);
    assert_eq!(f.error_type.as_deref(), Some("UNAVAILABLE"));
    let body = encode_error_body(
        G,
        503,
        None,
        "The model is overloaded. Please try again later.",
    );
    let http = classify_http(G, 503, &Headers::new(), &body, None);
    assert_eq!((http.kind, http.error_type), (f.kind, f.error_type));
}

#[test]
fn the_overflow_message_compacts() {
    let message = crate::wire::context_overflow_message(G, 1_200_000, 1_048_576);
    let body = encode_error_body(G, 400, None, &message);
    let f = classify_http(G, 400, &Headers::new(), &body, None);
    assert_eq!(f.kind, FailureKind::ContextOverflow);
    assert_eq!(f.error_type.as_deref(), Some("INVALID_ARGUMENT"));
}

#[test]
fn args_that_are_not_an_object_are_an_input_problem() {
    let bytes = sse(&[chunk(
        json!([{"functionCall": {"name": "read", "args": [1, 2]}}]),
        Some("STOP"),
    )]);
    let r = decode(G, &bytes).unwrap();
    assert_eq!(r.input_problems()[0].kind, InputProblemKind::NotAnObject);
}

#[test]
fn garbage_and_non_object_chunks_are_malformed_not_panics() {
    for data in ["not json", "[1,2]", "\"text\"", "{\"candidates\": 7}"] {
        let bytes = format!("data: {data}\n\n");
        let mut d = StreamDecoder::new(G);
        let _ = d.feed(bytes.as_bytes());
        let _ = d.finish();
    }
    let f = decode(G, b"data: [1]\n\n").unwrap_err();
    assert_eq!(f.transport, Some(TransportFault::MalformedStream));
}

// ---- encoders: what the fake server sends decodes back ----

fn with_everything() -> AssistantResponse {
    AssistantResponse::new(
        Message::assistant(vec![
            ContentBlock::thinking("Considering the files.", ""),
            ContentBlock::text("Reading both files now."),
            signature("sig-1"),
            ContentBlock::tool_use("gc_m1_0", "read", json!({"path": "a.rs"})),
            ContentBlock::tool_use("gc_m1_1", "read", json!({"path": "b.rs"})),
        ]),
        StopReason::ToolUse,
    )
    .with_usage(Usage {
        input_tokens: 120,
        output_tokens: 30,
        cache_creation_input_tokens: None,
        cache_read_input_tokens: Some(100),
    })
}

#[test]
fn encoded_streams_decode_to_what_was_sent_in_any_split() {
    let sent = with_everything();
    let bytes: Vec<u8> = encode_stream(G, &sent, "gemini-2.5-pro", "m1").concat();
    let expected = sent.clone().with_id("m1").with_model("gemini-2.5-pro");
    for cut in 0..bytes.len() {
        let mut d = StreamDecoder::new(G);
        d.feed(&bytes[..cut]).unwrap();
        d.feed(&bytes[cut..]).unwrap();
        assert!(d.is_complete());
        assert_eq!(d.finish().unwrap(), expected, "split at {cut}");
    }
    let body = encode_response_json(G, &sent, "gemini-2.5-pro", "m1").to_string();
    assert_eq!(parse_response(G, body.as_bytes()).unwrap(), expected);
}

#[test]
fn an_encoded_problem_call_decodes_to_a_problem() {
    let mut sent = with_everything();
    sent = sent.with_input_problems(vec![crate::response::ToolInputProblem {
        tool_use_id: "gc_m1_1".into(),
        kind: InputProblemKind::NotAnObject,
        raw: "[1]".into(),
        detail: String::new(),
    }]);
    let bytes: Vec<u8> = encode_stream(G, &sent, "m", "m1").concat();
    let r = decode(G, &bytes).unwrap();
    assert_eq!(r.input_problems()[0].tool_use_id, "gc_m1_1");
    assert_eq!(r.input_problems()[0].kind, InputProblemKind::NotAnObject);
}

// ---- requests ----

fn tool_loop(call_owner: Option<&TargetIdentity>) -> Conversation {
    let mut sig = signature("sig-gemini");
    if let (ContentBlock::Reasoning { owner, .. }, Some(by)) = (&mut sig, call_owner) {
        *owner = Some(by.clone());
    }
    Conversation::from(vec![
        Message::user_text("read a and b"),
        Message::assistant(vec![
            sig,
            ContentBlock::tool_use("toolu_1", "read", json!({"path": "a"})),
            ContentBlock::tool_use("toolu_2", "read", json!({"path": "b"})),
        ]),
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result("toolu_1", vec![ToolResultPart::text("A")], false),
                ContentBlock::tool_result(
                    "toolu_2",
                    vec![ToolResultPart::text("no such file")],
                    true,
                ),
            ],
        },
    ])
}

#[test]
fn calls_and_answers_go_by_name_and_order_with_the_error_flag_and_no_ids() {
    let me = TargetIdentity::new("gemini:me");
    let params = RequestParams::new("gemini-2.5-flash", 1024).with_identity(&me);
    let body = request_body(G, &tool_loop(Some(&me)), &params).unwrap();
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "read a and b"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "read", "args": {"path": "a"}}, "thoughtSignature": "sig-gemini"},
                {"functionCall": {"name": "read", "args": {"path": "b"}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "read", "response": {"output": "A"}}},
                {"functionResponse": {"name": "read", "response": {"error": "no such file"}}},
            ]},
        ])
    );
    assert_eq!(body["generationConfig"], json!({"maxOutputTokens": 1024}));
    assert!(body.get("model").is_none() && body.get("stream").is_none());
}

#[test]
fn another_targets_signature_stays_home_and_the_call_gets_the_documented_stand_in() {
    let other = TargetIdentity::new("gemini:other-key");
    let me = TargetIdentity::new("gemini:me");
    let params = RequestParams::new("gemini-3-pro-preview", 1024).with_identity(&me);
    let body = request_body(G, &tool_loop(Some(&other)), &params).unwrap();
    let parts = &body["contents"][1]["parts"];
    assert_eq!(
        parts[0]["thoughtSignature"],
        "skip_thought_signature_validator"
    );
    assert!(parts[1].get("thoughtSignature").is_none());
    assert!(!body.to_string().contains("sig-gemini"));
}

#[test]
fn requests_read_back_whole() {
    let tools = [ToolSpec {
        name: "read".into(),
        description: "Reads a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}},
                             "required": ["path"]}),
    }];
    let me = TargetIdentity::new("gemini:me");
    let params = RequestParams::new("m", 512)
        .with_system("Be brief.")
        .with_tools(&tools)
        .with_identity(&me);
    let sent = tool_loop(Some(&me));
    let body = request_body(G, &sent, &params).unwrap();
    let parsed = parse_request(G, body.to_string().as_bytes()).unwrap();
    assert_eq!(parsed.system.as_deref(), Some("Be brief."));
    assert_eq!(parsed.max_tokens, Some(512));
    assert_eq!(parsed.tools[0].input_schema, tools[0].input_schema);
    let messages = parsed.conversation.messages();
    assert_eq!(messages.len(), 3);
    // Ids are the server's own (`gc_{message}_{part}`); results answer their calls.
    let calls: Vec<&str> = messages[1].tool_uses().map(|(id, ..)| id).collect();
    assert_eq!(calls, ["gc_1_0", "gc_1_1"]);
    let results: Vec<(&str, bool)> = messages[2]
        .tool_results()
        .map(|r| (r.tool_use_id.as_str(), r.is_error))
        .collect();
    assert_eq!(results, [("gc_1_0", false), ("gc_1_1", true)]);
    assert!(parsed.conversation.check_tool_pairing(false).is_ok());
    assert_eq!(messages[1].content[0], signature("sig-gemini"));
}

#[test]
fn a_response_that_answers_no_call_is_refused() {
    let body = json!({"contents": [
        {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {}}}]}
    ]});
    assert!(parse_request(G, body.to_string().as_bytes()).is_err());
}

#[test]
fn paths_name_the_model_and_the_stream() {
    assert_eq!(
        request_path(G, "models/gemini-2.5-flash", true),
        "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        request_path(G, "a/b c", false),
        "/models/a%2Fb%20c:generateContent"
    );
    assert_eq!(
        gemini_request_target(&format!("/v1beta{}", request_path(G, "a/b c", true))),
        Some(("a/b c".to_owned(), true))
    );
    assert_eq!(
        gemini_request_target("/v1beta/models/m:streamGenerateContent"),
        None,
        "a JSON-array stream is not served"
    );
    assert_eq!(gemini_request_target("/v1beta/models/m:countTokens"), None);
}

#[test]
fn options_go_into_generation_config_and_tool_config() {
    let tools = [ToolSpec {
        name: "read".into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
    }];
    let options = RequestOptions::new()
        .with_temperature(0.3)
        .with_top_p(0.9)
        .with_stop_sequence("END")
        .with_tool_choice(ToolChoice::tool("read"))
        .with_reasoning_effort(crate::wire::ReasoningEffort::Low)
        .with_extra_body(
            [("generationConfig".to_owned(), json!({"topK": 40}))]
                .into_iter()
                .collect(),
        );
    let conversation = Conversation::from(vec![Message::user_text("hi")]);
    let params = RequestParams::new("m", 256)
        .with_tools(&tools)
        .with_options(&options);
    let body = request_body(G, &conversation, &params).unwrap();
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens": 256, "temperature": 0.3, "topP": 0.9, "stopSequences": ["END"],
               "thinkingConfig": {"thinkingLevel": "LOW", "includeThoughts": true}, "topK": 40})
    );
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["read"]}})
    );
    // The declaration of a function without arguments has no `parameters`.
    assert!(body["tools"][0]["functionDeclarations"][0]
        .get("parameters")
        .is_none());
}

#[test]
fn options_gemini_refuses_are_refused() {
    let refused = [
        RequestOptions::new().with_parallel_tool_calls(false),
        RequestOptions::new().with_user_id("u1"),
        RequestOptions::new().with_reasoning_effort(crate::wire::ReasoningEffort::XHigh),
        RequestOptions::new()
            .with_reasoning_effort(crate::wire::ReasoningEffort::Low)
            .with_thinking_budget(100),
        RequestOptions::new().with_thinking_budget(4096),
        (0..6).fold(RequestOptions::new(), |o, n| {
            o.with_stop_sequence(n.to_string())
        }),
        RequestOptions::new().with_extra_body(
            [("generationConfig".to_owned(), json!({"maxOutputTokens": 9}))]
                .into_iter()
                .collect(),
        ),
        RequestOptions::new()
            .with_extra_body([("contents".to_owned(), json!([]))].into_iter().collect()),
    ];
    for options in refused {
        assert!(options.check(G, 1024).is_err(), "{options:?}");
    }
    assert!(RequestOptions::new()
        .with_thinking_budget(512)
        .check(G, 1024)
        .is_ok());
}

// ---- schemas ----

#[test]
fn schemas_are_translated_to_the_subset_gemini_takes() {
    let input = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "properties": {
            "path": {"type": "string", "format": "uri", "description": "Where"},
            "mode": {"const": "fast"},
            "lines": {"type": ["integer", "null"], "minimum": 1},
            "when": {"type": "string", "format": "date-time"},
            "target": {"$ref": "#/$defs/Target"},
            "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "tags": {"type": "array"},
            "opts": {"type": "object", "properties": {}},
            "level": {"enum": [1, 2]},
        },
        "required": ["path", "ghost"],
        "$defs": {"Target": {"type": "object", "properties": {"host": {"type": "string"}}}}
    });
    let out = schema::parameters(&input).unwrap();
    assert_eq!(
        out,
        json!({
            "type": "OBJECT",
            "required": ["path"],
            "properties": {
                "path": {"type": "STRING", "description": "Where"},
                "mode": {"type": "STRING", "enum": ["fast"]},
                "lines": {"type": "INTEGER", "nullable": true, "minimum": 1},
                "when": {"type": "STRING", "format": "date-time"},
                "target": {"type": "OBJECT", "properties": {"host": {"type": "STRING"}}},
                "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
                "tags": {"type": "ARRAY", "items": {}},
                "opts": {"type": "OBJECT"},
                "level": {},
            }
        })
    );
}

#[test]
fn recursive_and_unknown_references_end_unconstrained() {
    let input = json!({
        "type": "object",
        "properties": {
            "tree": {"$ref": "#/$defs/Node"},
            "lost": {"$ref": "#/$defs/Missing", "description": "gone"},
        },
        "$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}}
    });
    let out = schema::parameters(&input).unwrap();
    assert_eq!(out["properties"]["lost"], json!({"description": "gone"}));
    let mut depth = 0;
    let mut node = &out["properties"]["tree"];
    while let Some(child) = node.get("properties").and_then(|p| p.get("child")) {
        node = child;
        depth += 1;
    }
    assert!(depth <= schema::MAX_DEPTH, "{depth}");
}
