//! Tests of the Responses format: the captured and documented fixtures, in-stream failures
//! mapped to their HTTP twins, request bodies both ways.

use crate::classify::classify_http;
use crate::conversation::{ContentBlock, Conversation, MediaSource, Message, Role, ToolResultPart};
use crate::failure::{FailureAction, FailureKind, ProviderKind, TransportFault};
use crate::headers::Headers;
use crate::response::{AssistantResponse, InputProblemKind, StopReason, Usage};
use crate::tool::ToolSpec;
use crate::wire::tests::{decode, decode_with_deltas, RESPONSES_REASONING, RESPONSES_TEXT};
use crate::wire::{
    encode_error_body, encode_stream, encode_stream_error_event, parse_request, parse_response,
    request_body, RequestParams, StreamDecoder, StreamDelta, ToolIdForm,
};
use serde_json::{json, Value};

const R: ProviderKind = ProviderKind::OpenAiResponses;

const FAILED_DOCUMENTED: &[u8] =
    include_bytes!("../../../fixtures/streams/responses/failed_documented.sse");
const INCOMPLETE_DOCUMENTED: &[u8] =
    include_bytes!("../../../fixtures/streams/responses/incomplete_documented.sse");
const ERROR_DOCUMENTED: &[u8] =
    include_bytes!("../../../fixtures/streams/responses/error_documented.sse");
const OUTPUT_TEXT_RESPONSE: &[u8] =
    include_bytes!("../../../fixtures/streams/responses/output_text_response.json");
const FUNCTION_CALL_RESPONSE: &[u8] =
    include_bytes!("../../../fixtures/streams/responses/function_call_response.json");

// ---- captured and documented streams and bodies ----

#[test]
fn text_capture_assembles_text_usage_and_ignores_the_trailing_done() {
    let (deltas, r) = decode_with_deltas(R, RESPONSES_TEXT);
    assert_eq!(r.message, Message::assistant_text("Hello world"));
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 10,
            output_tokens: 2,
            cache_creation_input_tokens: None,
            cache_read_input_tokens: Some(0),
        }
    );
    assert_eq!(
        deltas,
        [
            StreamDelta::Text {
                index: 0,
                text: "Hello ".into()
            },
            StreamDelta::Text {
                index: 0,
                text: "world".into()
            },
        ]
    );
}

#[test]
fn reasoning_capture_keeps_the_final_reasoning_item_verbatim_before_the_text() {
    let (deltas, r) = decode_with_deltas(R, RESPONSES_REASONING);
    let item = json!({"id":"r1","type":"reasoning","summary":[],"status":"completed",
                      "content":[{"type":"reasoning_text","text":"Chain: Step 1. Step 2."}]});
    assert_eq!(
        r.message.content,
        [
            ContentBlock::reasoning(item),
            ContentBlock::text("The answer is 42")
        ]
    );
    // The reasoning text reached the UI as thinking while it streamed.
    assert_eq!(
        deltas[0],
        StreamDelta::Thinking {
            index: 0,
            thinking: "Chain: Step 1. ".into()
        }
    );
    assert_eq!(r.usage.output_tokens, 6);
}

#[test]
fn documented_response_failed_event_is_a_retryable_server_error() {
    let f = decode(R, FAILED_DOCUMENTED).unwrap_err();
    assert_eq!(f.kind, FailureKind::ServerError);
    assert_eq!(f.error_type.as_deref(), Some("server_error"));
    assert_eq!(&*f.message, "The model failed to generate a response.");
    assert_eq!(f.action(), FailureAction::Retry);
}

#[test]
fn documented_error_event_is_classified_by_its_code() {
    let f = decode(R, ERROR_DOCUMENTED).unwrap_err();
    assert_eq!(f.error_type.as_deref(), Some("ERR_SOMETHING"));
    assert_eq!(&*f.message, "Something went wrong");
    // An unknown code inside a 200 stream: a server-side failure, retried.
    assert_eq!(f.kind, FailureKind::ServerError);
}

#[test]
fn documented_incomplete_event_with_no_output_is_an_empty_response() {
    let f = decode(R, INCOMPLETE_DOCUMENTED).unwrap_err();
    assert_eq!(f.transport, Some(TransportFault::EmptyMessage));
    assert_eq!(f.action(), FailureAction::Retry);
}

#[test]
fn captured_non_streaming_text_response_is_parsed() {
    let r = parse_response(R, OUTPUT_TEXT_RESPONSE).unwrap();
    assert!(r
        .message
        .text()
        .starts_with("I can't provide real-time updates"));
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (14, 50));
}

#[test]
fn documented_function_call_response_becomes_a_tool_call_with_its_call_id() {
    let r = parse_response(R, FUNCTION_CALL_RESPONSE).unwrap();
    assert_eq!(
        r.message.content,
        [ContentBlock::tool_use(
            "call_unLAR8MvFNptuiZK6K6HCy5k",
            "get_current_weather",
            json!({"location": "Boston, MA", "unit": "celsius"})
        )]
    );
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(r.usage.input_tokens, 291);
}

// ---- failures inside a 200 stream, mapped like their HTTP twins ----

/// The text capture cut after its first delta, then `tail`.
fn started_then(tail: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(RESPONSES_TEXT).unwrap();
    let at = text.find("\"delta\":\"world\"").unwrap();
    let at = text[..at].rfind("\n\n").unwrap() + 2;
    [&RESPONSES_TEXT[..at], tail].concat()
}

#[test]
fn in_stream_failures_earn_the_decisions_of_their_http_twins() {
    let twins: [(&str, u16); 4] = [
        ("rate_limit_exceeded", 429),
        ("server_error", 500),
        ("context_length_exceeded", 400),
        ("insufficient_quota", 429),
    ];
    for (code, status) in twins {
        let event = encode_stream_error_event(R, code, "failed in the stream");
        let f = decode(R, &started_then(&event)).unwrap_err();
        let http = classify_http(
            R,
            status,
            &Headers::new(),
            &encode_error_body(R, status, Some(code), "failed over http"),
            None,
        );
        assert_eq!(f.kind, http.kind, "{code}");
        assert_eq!(f.action(), http.action(), "{code}");
        assert_eq!(f.error_type.as_deref(), Some(code));
        assert_eq!(f.status, None, "{code}: no HTTP status inside a 200 stream");
    }
    let overflow = encode_stream_error_event(R, "context_length_exceeded", "too long");
    assert_eq!(
        decode(R, &started_then(&overflow)).unwrap_err().action(),
        FailureAction::Compact
    );
}

#[test]
fn error_event_inside_the_stream_is_classified_by_its_code() {
    let event = super::encode::error_event("rate_limit_exceeded", "Rate limit reached");
    let f = decode(R, &started_then(&event)).unwrap_err();
    assert_eq!(f.kind, FailureKind::RateLimited);
}

#[test]
fn failure_in_the_stream_sticks_and_is_the_outcome() {
    let mut d = StreamDecoder::new(R);
    let event = encode_stream_error_event(R, "server_error", "boom");
    let f = d.feed(&started_then(&event)).unwrap_err();
    assert_eq!(d.feed(b"data: {}\n\n").unwrap_err(), f);
    assert_eq!(d.finish().unwrap_err(), f);
}

#[test]
fn incomplete_at_max_output_tokens_is_a_max_tokens_stop_with_truncated_calls() {
    let response = AssistantResponse::new(
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_use("call_1", "write", json!({}))],
        },
        StopReason::MaxTokens,
    )
    .with_input_problems(vec![crate::response::ToolInputProblem {
        tool_use_id: "call_1".into(),
        kind: InputProblemKind::Truncated,
        raw: "{\"path\": \"a.rs\", \"content\": \"fn ma".into(),
        detail: String::new(),
    }]);
    let bytes = encode_stream(R, &response, "gpt-test", "resp_1").concat();
    assert!(String::from_utf8_lossy(&bytes).contains("\"reason\":\"max_output_tokens\""));
    let r = decode(R, &bytes).unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.input_problems()[0].kind, InputProblemKind::Truncated);
}

#[test]
fn stream_without_a_terminal_event_is_a_cut_even_after_done() {
    let text = std::str::from_utf8(RESPONSES_TEXT).unwrap();
    let cut = &text[..text.find("data: {\"response\":{\"id\":\"resp_test_1\",\"object\":\"response\",\"created_at\":1723031665,\"model\":\"gpt-4o-2024-08-06\",\"output\":[{").unwrap()];
    let with_done = format!("{cut}data: [DONE]\n\n");
    for body in [cut.to_owned(), with_done] {
        let f = decode(R, body.as_bytes()).unwrap_err();
        assert_eq!(f.transport, Some(TransportFault::StreamCut));
    }
}

#[test]
fn broken_event_of_a_read_type_fails_but_of_another_type_is_skipped() {
    let broken = b"data: {\"type\":\"response.output_text.delta\",\"delta\":7}\n\n";
    let f = decode(R, &started_then(broken)).unwrap_err();
    assert_eq!(f.transport, Some(TransportFault::MalformedStream));
    let other = b"data: {\"type\":\"response.audio.delta\",\"delta\":{\"x\":1}}\n\n";
    let text = std::str::from_utf8(RESPONSES_TEXT).unwrap();
    let at = text.find("data: {\"response\":{\"id\":\"resp_test_1\",\"object\":\"response\",\"created_at\":1723031665,\"model\":\"gpt-4o-2024-08-06\",\"output\":[{").unwrap();
    let body = [&RESPONSES_TEXT[..at], other, &RESPONSES_TEXT[at..]].concat();
    assert_eq!(decode(R, &body).unwrap().message.text(), "Hello world");
}

#[test]
fn whole_items_alone_assemble_without_deltas() {
    // Only `output_item.done` events, as some gateways and test servers send.
    let body = concat!(
        "event: response.output_item.done\n",
        "data: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hi\"}]}}\n\n",
        "event: response.output_item.done\n",
        "data: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"call_id\":\"call_7\",\"name\":\"ls\",\"arguments\":\"{}\"}}\n\n",
        "event: response.completed\n",
        "data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"output\":[]}}\n\n",
    );
    let (deltas, r) = decode_with_deltas(R, body.as_bytes());
    assert_eq!(
        r.message.content,
        [
            ContentBlock::text("hi"),
            ContentBlock::tool_use("call_7", "ls", json!({}))
        ]
    );
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(deltas.len(), 2, "the UI still sees the text and the call");
}

// ---- request bodies ----

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read".into(),
        description: "Read a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
}

fn reasoning() -> Value {
    json!({"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text",
           "text": "Look first."}], "encrypted_content": "gAAAAB-opaque"})
}

/// A conversation begun elsewhere: Anthropic thinking, a Responses reasoning item, a tool
/// call answered with an error, images.
fn mixed() -> Conversation {
    Conversation::from(vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("What is in a.rs?"),
                ContentBlock::Image {
                    source: MediaSource::Url {
                        url: "https://example.com/x.png".into(),
                    },
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Anthropic's".into(),
                    signature: "sig".into(),
                    owner: None,
                },
                ContentBlock::reasoning(reasoning()),
                ContentBlock::text("Reading."),
                ContentBlock::tool_use("toolu_01A", "read", json!({"path": "a.rs"})),
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result(
                    "toolu_01A",
                    vec![ToolResultPart::text(crate::tool_error_text(
                        "read",
                        "file not found: a.rs",
                    ))],
                    true,
                ),
                ContentBlock::text("Try b.rs."),
            ],
        },
    ])
}

fn params(tools: &[ToolSpec]) -> RequestParams<'_> {
    RequestParams {
        model: "gpt-5",
        system: Some("Be brief."),
        tools,
        max_tokens: 2048,
        stream: true,
        options: None,
        tool_ids: ToolIdForm::Standard,
        identity: None,
    }
}

#[test]
fn request_body_is_stateless_with_items_in_order_and_reasoning_verbatim() {
    let tools = tools();
    let body = request_body(R, &mixed(), &params(&tools)).unwrap();
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["instructions"], "Be brief.");
    assert_eq!(body["max_output_tokens"], 2048);
    assert_eq!(body["stream"], true);
    assert!(body.get("previous_response_id").is_none());
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "name": "read", "description": "Read a file",
               "parameters": tools[0].input_schema, "strict": false})
    );
    let input = body["input"].as_array().unwrap();
    let types: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "message",
            "reasoning",
            "message",
            "function_call",
            "function_call_output",
            "message"
        ]
    );
    assert_eq!(input[0]["content"][1]["type"], "input_image");
    assert_eq!(input[1], reasoning(), "passed back exactly as received");
    assert_eq!(
        input[2],
        json!({"type": "message", "role": "assistant", "content": "Reading."})
    );
    assert_eq!(input[3]["call_id"], "toolu_01A");
    assert_eq!(input[3]["arguments"], "{\"path\":\"a.rs\"}");
    assert_eq!(input[4]["call_id"], "toolu_01A");
    assert!(input[4]["output"]
        .as_str()
        .unwrap()
        .starts_with("Tool execution failed for `read`: file not found: a.rs"));
    assert!(
        !body.to_string().contains("Anthropic's"),
        "thinking is left out"
    );
}

#[test]
fn other_providers_leave_out_reasoning_items() {
    let tools = tools();
    for provider in [ProviderKind::Anthropic, ProviderKind::OpenAi] {
        let body = request_body(provider, &mixed(), &params(&tools)).unwrap();
        assert!(!body.to_string().contains("gAAAAB-opaque"), "{provider}");
    }
}

#[test]
fn parse_request_reads_back_what_request_body_wrote() {
    let tools = tools();
    let body = request_body(R, &mixed(), &params(&tools)).unwrap();
    let parsed = parse_request(R, body.to_string().as_bytes()).unwrap();
    let mut expected = mixed().into_messages();
    // Thinking is not sent. The error flag has no field: it comes back from the text, in
    // core's words.
    expected[1].content.remove(0);
    assert_eq!(parsed.conversation, Conversation::from(expected));
    assert_eq!(parsed.system.as_deref(), Some("Be brief."));
    assert_eq!(parsed.tools, tools);
    assert_eq!(parsed.max_tokens, Some(2048));
    assert!(parsed.stream);
}

#[test]
fn parse_request_accepts_string_input_and_easy_messages() {
    let parsed =
        parse_request(R, br#"{"model":"gpt-5","input":"hi","instructions":"sys"}"#).unwrap();
    assert_eq!(
        parsed.conversation,
        Conversation::from(vec![Message::user_text("hi")])
    );
    let parsed = parse_request(
        R,
        br#"{"model":"gpt-5","input":[{"role":"developer","content":"dev"},{"role":"user","content":"hi"}]}"#,
    )
    .unwrap();
    assert_eq!(parsed.system.as_deref(), Some("dev"));
    assert_eq!(parsed.conversation.len(), 1);
}

#[test]
fn tool_results_with_images_send_output_parts() {
    let mut c = mixed().into_messages();
    if let ContentBlock::ToolResult(r) = &mut c[2].content[0] {
        r.parts.push(ToolResultPart::Image {
            source: MediaSource::Base64 {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into(),
            },
        });
    }
    let body = request_body(R, &Conversation::from(c), &params(&[])).unwrap();
    let output = &body["input"][4]["output"];
    assert_eq!(output[0]["type"], "input_text");
    assert_eq!(output[1]["image_url"], "data:image/png;base64,iVBORw0KGgo=");
}

#[test]
fn an_answer_longer_than_the_sse_line_limit_decodes_though_its_last_event_repeats_it() {
    // `response.completed` carries the whole output on one `data:` line: 2 MiB of text
    // makes a line twice the 1 MiB that bounds the other formats' lines.
    let text = "word ".repeat(2 << 20 >> 2);
    let sent = AssistantResponse::end_turn(Message::assistant_text(text));
    let bytes = encode_stream(R, &sent, "gpt-test", "resp_long").concat();
    assert_eq!(decode(R, &bytes).unwrap().message, sent.message);
}

#[test]
fn an_in_stream_rate_limit_carries_the_delay_its_message_names() {
    // OpenAI's wording (BuilderIO/micro-agent#86); in a stream there is no retry-after header.
    let message = "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): \
                   Limit 30000, Used 29937, Requested 385. Please try again in 644ms.";
    let event = encode_stream_error_event(R, "rate_limit_exceeded", message);
    let f = decode(R, &started_then(&event)).unwrap_err();
    assert_eq!(f.kind, FailureKind::RateLimited);
    assert_eq!(f.retry_after_ms, Some(644));
    let event = encode_stream_error_event(R, "rate_limit_exceeded", "Please try again in 1.898s.");
    assert_eq!(
        decode(R, &started_then(&event)).unwrap_err().retry_after_ms,
        Some(1898)
    );
    // No delay named, or not a rate limit: no hint.
    let event = encode_stream_error_event(R, "rate_limit_exceeded", "Please try again later.");
    assert_eq!(
        decode(R, &started_then(&event)).unwrap_err().retry_after_ms,
        None
    );
    let event = encode_stream_error_event(R, "server_error", "Please try again in 5s.");
    assert_eq!(
        decode(R, &started_then(&event)).unwrap_err().retry_after_ms,
        None
    );
}

// ----- reasoning goes back only to its owner ------------------------------------------------

/// A conversation whose reasoning belongs to `owner`: an item and signed thinking before the
/// answer, then the user's next message.
fn owned_by(owner: Option<&str>, signature: &str) -> Conversation {
    let owner = owner.map(crate::TargetIdentity::new);
    Conversation::from(vec![
        Message::user_text("hi"),
        Message::assistant(vec![
            ContentBlock::Thinking {
                thinking: "thought".into(),
                signature: signature.into(),
                owner: owner.clone(),
            },
            ContentBlock::Reasoning {
                item: reasoning(),
                owner,
            },
            ContentBlock::text("hello"),
        ]),
        Message::user_text("and?"),
    ])
}

fn carries_reasoning(provider: ProviderKind, body: &Value) -> bool {
    match provider {
        ProviderKind::Anthropic => body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["content"].as_array().into_iter().flatten())
            .any(|b| b["type"] == "thinking"),
        _ => body["input"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["type"] == "reasoning"),
    }
}

#[test]
fn reasoning_goes_only_to_the_target_that_produced_it() {
    let ours = crate::TargetIdentity::new("ours");
    let theirs = crate::TargetIdentity::new("theirs");
    for provider in [R, ProviderKind::Anthropic] {
        let conversation = owned_by(Some("ours"), "sig");
        let to = |who| RequestParams::new("m", 64).with_identity(who);
        let body = request_body(provider, &conversation, &to(&ours)).unwrap();
        assert!(
            carries_reasoning(provider, &body),
            "{provider}: to its owner"
        );
        let body = request_body(provider, &conversation, &to(&theirs)).unwrap();
        assert!(
            !carries_reasoning(provider, &body),
            "{provider}: to another"
        );
        assert!(!body.to_string().contains("gAAAAB-opaque"), "{provider}");
        // The rest of the message goes anyway.
        assert!(body.to_string().contains("hello"), "{provider}");
        // A driver that does not say who it sends to sends no owned reasoning.
        let body = request_body(provider, &conversation, &RequestParams::new("m", 64)).unwrap();
        assert!(
            !carries_reasoning(provider, &body),
            "{provider}: to nobody known"
        );
        // Reasoning of an unknown owner (an old session) is sent as before.
        let body = request_body(provider, &owned_by(None, "sig"), &to(&theirs)).unwrap();
        assert!(
            carries_reasoning(provider, &body),
            "{provider}: unknown owner"
        );
    }
}

#[test]
fn the_owner_is_never_written_into_a_request() {
    let ours = crate::TargetIdentity::new("owner-identity-7f3a");
    let params = RequestParams::new("m", 64).with_identity(&ours);
    for provider in ProviderKind::ALL {
        let body = request_body(
            *provider,
            &owned_by(Some("owner-identity-7f3a"), "sig"),
            &params,
        )
        .unwrap();
        assert!(!body.to_string().contains("owner"), "{provider}: {body}");
    }
    // Anthropic's thinking block is exactly the API's shape.
    let body = request_body(
        ProviderKind::Anthropic,
        &owned_by(Some("owner-identity-7f3a"), "sig"),
        &params,
    )
    .unwrap();
    assert_eq!(
        body["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "thought", "signature": "sig"})
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(38),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// For any owners of any reasoning blocks and any identity asked for, a Responses or
    /// Anthropic request carries exactly the reasoning whose owner is that identity or
    /// unknown, and the conversation is left as it was.
    #[test]
    fn a_request_carries_exactly_the_reasoning_its_target_may_read(
        owners in proptest::collection::vec(proptest::option::of(0u8..3), 1..6),
        to in proptest::option::of(0u8..3),
    ) {
        let name = |n: u8| crate::TargetIdentity::new(format!("target-{n}"));
        let mut content = Vec::new();
        for (i, owner) in owners.iter().enumerate() {
            content.push(ContentBlock::Reasoning {
                item: json!({"type": "reasoning", "id": format!("rs_{i}"), "encrypted_content": format!("enc-{i}")}),
                owner: owner.map(name),
            });
            content.push(ContentBlock::Thinking {
                thinking: format!("t{i}"),
                signature: format!("sig-{i}"),
                owner: owner.map(name),
            });
        }
        content.push(ContentBlock::text("answer"));
        let conversation = Conversation::from(vec![
            Message::user_text("hi"),
            Message::assistant(content),
            Message::user_text("more"),
        ]);
        let before = conversation.clone();
        let identity = to.map(name);
        let mut params = RequestParams::new("m", 64);
        params.identity = identity.as_ref();
        let expected: Vec<usize> = owners
            .iter()
            .enumerate()
            .filter(|(_, o)| o.is_none() || o.map(name) == identity)
            .map(|(i, _)| i)
            .collect();
        let body = request_body(R, &conversation, &params).unwrap().to_string();
        let body_a = request_body(ProviderKind::Anthropic, &conversation, &params)
            .unwrap()
            .to_string();
        for i in 0..owners.len() {
            let wanted = expected.contains(&i);
            proptest::prop_assert_eq!(body.contains(&format!("\"enc-{i}\"")), wanted);
            proptest::prop_assert_eq!(body_a.contains(&format!("\"sig-{i}\"")), wanted);
        }
        proptest::prop_assert_eq!(conversation, before);
    }
}
