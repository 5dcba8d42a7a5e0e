//! Tests of the wire formats: captured fixtures, every malformed case, request bodies, the
//! encoders, and the split-anywhere round trip.

use super::*;
use crate::conversation::{ContentBlock, MediaSource, Message, Role, ToolResultPart};
use crate::failure::{FailureAction, FailureKind};
use crate::response::{InputProblemKind, StopReason, Usage};
use serde_json::json;
use std::sync::Arc;

const ANTHROPIC_BASIC: &[u8] =
    include_bytes!("../../fixtures/streams/anthropic/basic_response.sse");
const ANTHROPIC_TOOL_USE: &[u8] =
    include_bytes!("../../fixtures/streams/anthropic/tool_use_response.sse");
const ANTHROPIC_MAX_TOKENS_PARTIAL_JSON: &[u8] =
    include_bytes!("../../fixtures/streams/anthropic/incomplete_partial_json_response.sse");
const ANTHROPIC_ERROR_EVENT: &[u8] =
    include_bytes!("../../fixtures/streams/anthropic/error_event_documented.sse");
const OPENAI_TEXT: &[u8] = include_bytes!("../../fixtures/streams/openai/text_with_usage.sse");
const OPENAI_TOOLS: &[u8] = include_bytes!("../../fixtures/streams/openai/parallel_tool_calls.sse");
pub(super) const RESPONSES_TEXT: &[u8] =
    include_bytes!("../../fixtures/streams/responses/text_stream.sse");
pub(super) const RESPONSES_REASONING: &[u8] =
    include_bytes!("../../fixtures/streams/responses/reasoning_stream.sse");
pub(super) const GEMINI_TEXT: &[u8] =
    include_bytes!("../../fixtures/streams/gemini/text_stream.sse");
pub(super) const GEMINI_CALL: &[u8] =
    include_bytes!("../../fixtures/streams/gemini/function_call_signed.sse");

const FIXTURES: [(ProviderKind, &str, &[u8]); 9] = [
    (ProviderKind::Anthropic, "basic", ANTHROPIC_BASIC),
    (ProviderKind::Anthropic, "tool_use", ANTHROPIC_TOOL_USE),
    (
        ProviderKind::Anthropic,
        "partial json",
        ANTHROPIC_MAX_TOKENS_PARTIAL_JSON,
    ),
    (ProviderKind::OpenAi, "text", OPENAI_TEXT),
    (ProviderKind::OpenAi, "tools", OPENAI_TOOLS),
    (
        ProviderKind::OpenAiResponses,
        "responses text",
        RESPONSES_TEXT,
    ),
    (
        ProviderKind::OpenAiResponses,
        "responses reasoning",
        RESPONSES_REASONING,
    ),
    (ProviderKind::Gemini, "gemini text", GEMINI_TEXT),
    (ProviderKind::Gemini, "gemini signed call", GEMINI_CALL),
];

pub(super) fn decode(
    provider: ProviderKind,
    bytes: &[u8],
) -> Result<AssistantResponse, ProviderFailure> {
    let mut d = StreamDecoder::new(provider);
    d.feed(bytes)?;
    d.finish()
}

pub(super) fn decode_with_deltas(
    provider: ProviderKind,
    bytes: &[u8],
) -> (Vec<StreamDelta>, AssistantResponse) {
    let mut d = StreamDecoder::new(provider);
    let deltas = d.feed(bytes).unwrap();
    (deltas, d.finish().unwrap())
}

fn fault(result: Result<AssistantResponse, ProviderFailure>) -> Option<TransportFault> {
    result.unwrap_err().transport
}

// ---- captured streams ----

#[test]
fn anthropic_basic_capture_assembles_text_stop_reason_and_usage() {
    let r = decode(ProviderKind::Anthropic, ANTHROPIC_BASIC).unwrap();
    assert_eq!(r.message, Message::assistant_text("Hello there!"));
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 11,
            output_tokens: 6,
            ..Usage::default()
        }
    );
    assert!(r.input_problems().is_empty());
}

#[test]
fn anthropic_tool_use_capture_assembles_text_then_tool_call_from_json_fragments() {
    let (deltas, r) = decode_with_deltas(ProviderKind::Anthropic, ANTHROPIC_TOOL_USE);
    assert_eq!(
        r.message.content,
        vec![
            ContentBlock::text("I'll check the current weather in Paris for you."),
            ContentBlock::tool_use(
                "toolu_01NRLabsLyVHZPKxbKvkfSMn",
                "get_weather",
                json!({"location": "Paris"})
            ),
        ]
    );
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(r.usage.input_tokens, 377);
    assert_eq!(r.usage.output_tokens, 65);
    assert_eq!(r.usage.cache_read_input_tokens, Some(0));
    assert!(deltas.contains(&StreamDelta::ToolCallStart {
        index: 1,
        id: "toolu_01NRLabsLyVHZPKxbKvkfSMn".into(),
        name: "get_weather".into(),
    }));
    let json: String = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::ToolInputJson { partial_json, .. } => Some(partial_json.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(json, "{\"location\": \"Paris\"}");
}

#[test]
fn anthropic_max_tokens_capture_marks_unfinished_tool_json_as_truncated() {
    let r = decode(ProviderKind::Anthropic, ANTHROPIC_MAX_TOKENS_PARTIAL_JSON).unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.input_problems().len(), 1);
    let p = &r.input_problems()[0];
    assert_eq!(p.tool_use_id, "toolu_01EKqbqmZrGRXy18eN7m9kvY");
    assert_eq!(p.kind, InputProblemKind::Truncated);
    assert!(p.raw.ends_with("\"Filing taxes"), "{}", p.raw);
    let (_, _, input) = r.message.tool_uses().next().unwrap();
    assert_eq!(input, &json!({}));
}

#[test]
fn openai_text_capture_assembles_content_finish_reason_and_usage_chunk() {
    let r = decode(ProviderKind::OpenAi, OPENAI_TEXT).unwrap();
    let text = r.message.text();
    assert!(
        text.starts_with("I'm unable to provide real-time updates"),
        "{text}"
    );
    assert!(
        text.ends_with("local San Francisco news station."),
        "{text}"
    );
    assert_eq!(r.message.content.len(), 1);
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(r.usage.input_tokens, 14);
    assert_eq!(r.usage.output_tokens, 47);
}

#[test]
fn openai_parallel_tool_calls_capture_keys_fragments_by_index() {
    let r = decode(ProviderKind::OpenAi, OPENAI_TOOLS).unwrap();
    assert_eq!(
        r.message.content,
        vec![
            ContentBlock::tool_use(
                "call_lQnnsesjFMWMQ5IeWPHzR4th",
                "GetWeatherArgs",
                json!({"city": "Edinburgh", "country": "UK", "units": "c"})
            ),
            ContentBlock::tool_use(
                "call_2xjOUgaCdiwAcl9ZBL9LyMUU",
                "get_stock_price",
                json!({"ticker": "AAPL", "exchange": "NASDAQ"})
            ),
        ]
    );
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (149, 60));
}

#[test]
fn captures_decode_the_same_when_fed_one_byte_at_a_time() {
    for (provider, name, bytes) in FIXTURES {
        let whole = decode(provider, bytes).unwrap();
        let mut d = StreamDecoder::new(provider);
        for b in bytes {
            d.feed(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!(d.finish().unwrap(), whole, "{name}");
    }
}

#[test]
fn captures_decode_the_same_with_crlf_line_endings() {
    for (provider, name, bytes) in FIXTURES {
        let text = std::str::from_utf8(bytes).unwrap();
        let crlf = text.replace('\n', "\r\n");
        assert_eq!(
            decode(provider, crlf.as_bytes()).unwrap(),
            decode(provider, bytes).unwrap(),
            "{name}"
        );
    }
}

// ---- malformed streams: one test per case ----

#[test]
fn anthropic_stream_ending_before_message_stop_is_a_stream_cut() {
    let text = std::str::from_utf8(ANTHROPIC_BASIC).unwrap();
    let cut = &text[..text.find("event: message_stop").unwrap()];
    let mut d = StreamDecoder::new(ProviderKind::Anthropic);
    d.feed(cut.as_bytes()).unwrap();
    assert!(!d.is_complete());
    let f = d.finish().unwrap_err();
    assert_eq!(f.transport, Some(TransportFault::StreamCut));
    assert_eq!(f.kind, FailureKind::StreamMalformed);
    assert_eq!(f.action(), FailureAction::Retry);
}

#[test]
fn stream_cut_inside_an_event_is_a_stream_cut_at_every_byte() {
    for (provider, name, bytes) in FIXTURES {
        // Every proper prefix that ends before the terminal event must be a cut, never a
        // response and never a panic. (Skip prefixes ending after the OpenAI finish_reason,
        // which are accepted on purpose.)
        let last_needed = match provider {
            ProviderKind::Anthropic => bytes.len() - 2,
            ProviderKind::OpenAi => {
                let text = std::str::from_utf8(bytes).unwrap();
                text.find("\"finish_reason\":\"").unwrap()
            }
            // Up to the closing brace of the terminal event's data.
            ProviderKind::OpenAiResponses => {
                let text = std::str::from_utf8(bytes).unwrap();
                let terminal = "\"type\":\"response.completed\"";
                text.find(terminal).unwrap() + terminal.len()
            }
            // Up to the closing brace of the chunk naming the finish reason (the last).
            ProviderKind::Gemini => std::str::from_utf8(bytes).unwrap().rfind('}').unwrap(),
            other => panic!("no SSE fixture of {other:?}"),
        };
        for len in 0..last_needed {
            let f = decode(provider, &bytes[..len]).unwrap_err();
            assert_eq!(
                f.transport,
                Some(TransportFault::StreamCut),
                "{name} cut at {len}: {f}"
            );
        }
    }
}

#[test]
fn openai_stream_ending_before_finish_reason_is_a_stream_cut() {
    let text = std::str::from_utf8(OPENAI_TEXT).unwrap();
    let cut = &text[..text.find("\"finish_reason\":\"stop\"").unwrap()];
    let cut = &cut[..cut.rfind("\n\n").unwrap() + 2];
    assert_eq!(
        fault(decode(ProviderKind::OpenAi, cut.as_bytes())),
        Some(TransportFault::StreamCut)
    );
}

#[test]
fn openai_stream_ending_after_finish_reason_without_done_is_accepted() {
    let text = std::str::from_utf8(OPENAI_TEXT).unwrap();
    let cut = &text[..text.find("data: [DONE]").unwrap()];
    let r = decode(ProviderKind::OpenAi, cut.as_bytes()).unwrap();
    assert_eq!(r.stop_reason, StopReason::EndTurn);
}

#[test]
fn invalid_json_in_data_is_a_malformed_stream() {
    for (provider, bytes) in [
        (
            ProviderKind::Anthropic,
            &b"event: message_start\ndata: {\"type\":\"message_start\",\n\n"[..],
        ),
        (ProviderKind::OpenAi, b"data: {\"choices\":[{]}\n\n"),
    ] {
        let mut d = StreamDecoder::new(provider);
        let f = d.feed(bytes).unwrap_err();
        assert_eq!(
            f.transport,
            Some(TransportFault::MalformedStream),
            "{provider}"
        );
        assert_eq!(f.action(), FailureAction::Retry);
        // The decoder stays failed, and finish reports the same failure.
        assert_eq!(d.feed(b"data: [DONE]\n\n").unwrap_err(), f);
        assert_eq!(d.finish().unwrap_err(), f);
    }
}

#[test]
fn over_limit_line_is_a_malformed_stream_not_an_allocation() {
    let limits = StreamLimits {
        sse: SseLimits {
            max_line_bytes: 256,
            max_event_bytes: 1024,
        },
        ..StreamLimits::default()
    };
    let mut d = StreamDecoder::with_limits(ProviderKind::OpenAi, limits);
    d.feed(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"")
        .unwrap();
    let endless = vec![b'a'; 300];
    let f = d.feed(&endless).unwrap_err();
    assert_eq!(f.transport, Some(TransportFault::MalformedStream));
    assert!(f.message.contains("longer than 256 bytes"), "{}", f.message);
}

#[test]
fn over_limit_message_is_a_malformed_stream() {
    let limits = StreamLimits {
        max_message_bytes: 100,
        ..StreamLimits::default()
    };
    let long = AssistantResponse::end_turn(Message::assistant_text("x".repeat(500)));
    let mut d = StreamDecoder::with_limits(ProviderKind::Anthropic, limits);
    let mut result = Ok(Vec::new());
    for chunk in encode_stream(ProviderKind::Anthropic, &long, "m", "id") {
        result = d.feed(&chunk);
        if result.is_err() {
            break;
        }
    }
    let f = result.unwrap_err();
    assert_eq!(f.transport, Some(TransportFault::MalformedStream));
}

#[test]
fn flood_of_empty_blocks_hits_the_message_limit() {
    let limits = StreamLimits {
        max_message_bytes: 10_000,
        ..StreamLimits::default()
    };
    let mut d = StreamDecoder::with_limits(ProviderKind::Anthropic, limits);
    let mut result = Ok(Vec::new());
    for i in 0..1000 {
        let kind = if i % 2 == 0 {
            "text"
        } else {
            "server_tool_use"
        };
        let event = format!(
            "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{i},\"content_block\":{{\"type\":\"{kind}\",\"text\":\"\"}}}}\n\n"
        );
        result = d.feed(event.as_bytes());
        if result.is_err() {
            break;
        }
    }
    assert_eq!(
        result.unwrap_err().transport,
        Some(TransportFault::MalformedStream)
    );
}

#[test]
fn anthropic_error_event_mid_stream_is_classified_and_ends_the_stream() {
    let text = std::str::from_utf8(ANTHROPIC_BASIC).unwrap();
    let head = &text[..text.find("event: content_block_stop").unwrap()];
    let mut bytes = head.as_bytes().to_vec();
    bytes.extend(encode_stream_error_event(
        ProviderKind::Anthropic,
        "overloaded_error",
        "Overloaded",
    ));
    let mut d = StreamDecoder::new(ProviderKind::Anthropic);
    let f = d.feed(&bytes).unwrap_err();
    // Classified from the error body (not a transport fault), and retryable.
    assert_eq!(f.transport, None);
    assert!(f.message.contains("Overloaded"), "{f}");
    assert_eq!(f.action(), FailureAction::Retry);
    assert_eq!(d.finish().unwrap_err(), f);
}

#[test]
fn anthropic_documented_overloaded_error_event_fails_a_started_stream() {
    let text = std::str::from_utf8(ANTHROPIC_TOOL_USE).unwrap();
    let head = &text[..text
        .find("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1")
        .unwrap()];
    let mut d = StreamDecoder::new(ProviderKind::Anthropic);
    let deltas = d.feed(head.as_bytes()).unwrap();
    assert!(!deltas.is_empty(), "text was already shown");
    let f = d.feed(ANTHROPIC_ERROR_EVENT).unwrap_err();
    assert_eq!(f.transport, None);
    assert!(f.message.contains("Overloaded"), "{f}");
    assert_eq!(f.action(), FailureAction::Retry);
    // The encoder writes the same event (modulo JSON spacing).
    let ours = encode_stream_error_event(ProviderKind::Anthropic, "overloaded_error", "Overloaded");
    let parse = |b: &[u8]| SseDecoder::new().decode(b).unwrap();
    let (theirs, ours) = (parse(ANTHROPIC_ERROR_EVENT), parse(&ours));
    assert_eq!(theirs[0].event, ours[0].event);
    assert_eq!(
        serde_json::from_str::<Value>(&theirs[0].data).unwrap(),
        serde_json::from_str::<Value>(&ours[0].data).unwrap()
    );
}

#[test]
fn openai_error_object_in_a_data_line_is_classified() {
    let mut bytes = OPENAI_TEXT[..600].to_vec();
    let cut = bytes.windows(2).rposition(|w| w == b"\n\n").unwrap() + 2;
    bytes.truncate(cut);
    bytes.extend(encode_stream_error_event(
        ProviderKind::OpenAi,
        "server_error",
        "The server had an error while processing your request.",
    ));
    let f = decode(ProviderKind::OpenAi, &bytes).unwrap_err();
    assert_eq!(f.transport, None);
    assert!(f.message.contains("The server had an error"), "{f}");
}

#[test]
fn empty_message_is_an_empty_response() {
    let anthropic = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let openai = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    for (provider, bytes) in [
        (ProviderKind::Anthropic, &anthropic[..]),
        (ProviderKind::OpenAi, &openai[..]),
    ] {
        let f = decode(provider, bytes).unwrap_err();
        assert_eq!(
            f.transport,
            Some(TransportFault::EmptyMessage),
            "{provider}"
        );
        assert_eq!(f.kind, FailureKind::EmptyResponse);
    }
}

#[test]
fn openai_length_stop_with_unfinished_tool_json_marks_the_call_truncated() {
    let bytes = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"write\",\"arguments\":\"\"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\": \\\"a.rs\\\", \\\"text\\\": \\\"fn ma\"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
    let r = decode(ProviderKind::OpenAi, bytes).unwrap();
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.input_problems().len(), 1);
    assert_eq!(r.input_problems()[0].kind, InputProblemKind::Truncated);
    assert_eq!(r.input_problems()[0].tool_use_id, "call_1");
    assert_eq!(r.message.tool_uses().next().unwrap().2, &json!({}));
}

#[test]
fn tool_input_that_is_invalid_or_not_an_object_is_reported_not_panicked() {
    for (args, kind) in [
        ("{\"a\": tru}", InputProblemKind::InvalidJson),
        ("{\"a\": 1", InputProblemKind::InvalidJson),
        ("[1, 2]", InputProblemKind::NotAnObject),
        ("\"text\"", InputProblemKind::NotAnObject),
        // 65 levels: valid JSON, deeper than a tool input may nest (64 would pass).
        (
            &format!("{}{{}}{}", "{\"a\":".repeat(64), "}".repeat(64)),
            InputProblemKind::TooDeep,
        ),
    ] {
        let call = json!({"index": 0, "id": "c", "function": {"name": "t", "arguments": args}});
        let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]});
        let bytes = format!(
            "data: {chunk}\n\ndata: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\ndata: [DONE]\n\n"
        );
        let r = decode(ProviderKind::OpenAi, bytes.as_bytes()).unwrap();
        assert_eq!(r.input_problems().len(), 1, "{args}");
        assert_eq!(r.input_problems()[0].kind, kind, "{args}");
        assert_eq!(r.input_problems()[0].raw, args);
    }
}

#[test]
fn delta_for_a_block_that_never_started_is_a_malformed_stream() {
    let bytes = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
    let mut d = StreamDecoder::new(ProviderKind::Anthropic);
    assert_eq!(
        d.feed(bytes).unwrap_err().transport,
        Some(TransportFault::MalformedStream)
    );
}

#[test]
fn unknown_anthropic_blocks_and_events_are_skipped() {
    let bytes = b"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"server_tool_use\",\"id\":\"s\",\"name\":\"web_search\",\"input\":{}}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: future_event\ndata: {\"type\":\"future_event\"}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let r = decode(ProviderKind::Anthropic, bytes).unwrap();
    assert_eq!(r.message, Message::assistant_text("ok"));
}

#[test]
fn bytes_after_the_terminal_event_are_ignored() {
    let mut bytes = ANTHROPIC_BASIC.to_vec();
    bytes.extend_from_slice(b"\n\ndata: garbage that is not json\n\n");
    let mut d = StreamDecoder::new(ProviderKind::Anthropic);
    d.feed(&bytes).unwrap();
    assert!(d.is_complete());
    assert_eq!(d.finish().unwrap().message.text(), "Hello there!");
}

#[test]
fn thinking_and_signature_deltas_assemble_a_thinking_block() {
    let response = AssistantResponse::new(
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Let me think about 27 * 453 step by step.".into(),
                    signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into(),
                    owner: None,
                },
                ContentBlock::text("12231"),
            ],
        },
        StopReason::EndTurn,
    )
    .with_id("id")
    .with_model("m");
    let bytes = encode_stream(ProviderKind::Anthropic, &response, "m", "id").concat();
    let (deltas, r) = decode_with_deltas(ProviderKind::Anthropic, &bytes);
    assert_eq!(r, response);
    assert!(matches!(&deltas[0], StreamDelta::Thinking { index: 0, .. }));
}

#[test]
fn redacted_thinking_arrives_whole_in_its_block_start_and_round_trips() {
    // The shape of the Messages API: the block's start carries all of its data, and no
    // delta follows (docs.claude.com, extended thinking, "Thinking redaction").
    let bytes = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"EmwKAhgBEgy3va3pzix\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Done.\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let (deltas, r) = decode_with_deltas(ProviderKind::Anthropic, bytes);
    assert_eq!(
        r.message.content,
        vec![
            ContentBlock::redacted_thinking("EmwKAhgBEgy3va3pzix"),
            ContentBlock::text("Done."),
        ]
    );
    // Nothing of it is shown as thinking.
    assert!(deltas
        .iter()
        .all(|d| !matches!(d, StreamDelta::Thinking { .. })));
    // The encoders give what the API gives, streamed and whole.
    let encoded = encode_stream(ProviderKind::Anthropic, &r, "m", "msg_1").concat();
    assert_eq!(decode(ProviderKind::Anthropic, &encoded).unwrap(), r);
    let body = encode_response_json(ProviderKind::Anthropic, &r, "m", "msg_1").to_string();
    assert!(body.contains(r#"{"data":"EmwKAhgBEgy3va3pzix","type":"redacted_thinking"}"#));
    assert_eq!(
        parse_response(ProviderKind::Anthropic, body.as_bytes()).unwrap(),
        r
    );
}

#[test]
fn a_redacted_thinking_block_without_data_is_skipped_not_kept_empty() {
    let bytes = b"data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"redacted_thinking\"}}\n\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"ok\"}}\n\n\
data: {\"type\":\"content_block_stop\",\"index\":1}\n\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
data: {\"type\":\"message_stop\"}\n\n";
    let r = decode(ProviderKind::Anthropic, bytes).unwrap();
    assert_eq!(r.message.content, vec![ContentBlock::text("ok")]);
}

/// A tool loop: the user asks, the assistant thinks (`thinking` blocks) and calls a tool, the
/// result comes back.
fn tool_loop(thinking: Vec<ContentBlock>) -> Conversation {
    let mut assistant = thinking;
    assistant.push(ContentBlock::tool_use(
        "toolu_1",
        "read",
        json!({"path": "a"}),
    ));
    Conversation::from(vec![
        Message::user_text("read a"),
        Message::assistant(assistant),
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "toolu_1",
                vec![ToolResultPart::text("contents of a")],
                false,
            )],
        },
    ])
}

fn owned(mut block: ContentBlock, by: &TargetIdentity) -> ContentBlock {
    match &mut block {
        ContentBlock::Thinking { owner, .. } | ContentBlock::RedactedThinking { owner, .. } => {
            *owner = Some(by.clone());
        }
        _ => {}
    }
    block
}

#[test]
fn redacted_thinking_goes_back_verbatim_only_to_its_owner() {
    let ours = TargetIdentity::new("anthropic:1");
    let theirs = TargetIdentity::new("anthropic:2");
    let conv = tool_loop(vec![owned(
        ContentBlock::redacted_thinking("EmwKAhgB"),
        &ours,
    )]);
    let base = params(&[]);
    let to_ours = request_body(ProviderKind::Anthropic, &conv, &base.with_identity(&ours)).unwrap();
    assert_eq!(
        to_ours["messages"][1]["content"][0],
        json!({"type": "redacted_thinking", "data": "EmwKAhgB"})
    );
    let to_theirs =
        request_body(ProviderKind::Anthropic, &conv, &base.with_identity(&theirs)).unwrap();
    assert_eq!(to_theirs["messages"][1]["content"][0]["type"], "tool_use");
    for provider in [ProviderKind::OpenAi, ProviderKind::OpenAiResponses] {
        let body = request_body(provider, &conv, &base.with_identity(&ours))
            .unwrap()
            .to_string();
        assert!(!body.contains("EmwKAhgB"), "{provider}: {body}");
    }
}

#[test]
fn a_tool_loop_whose_thinking_cannot_go_back_goes_without_thinking() {
    let ours = TargetIdentity::new("anthropic:1");
    let theirs = TargetIdentity::new("anthropic:2");
    let options = RequestOptions::default().with_thinking_budget(2048);
    let base = RequestParams::new("claude-sonnet-4-5", 4096).with_options(&options);
    let thinking = |conv: &Conversation, to: &TargetIdentity| {
        request_body(ProviderKind::Anthropic, conv, &base.with_identity(to))
            .unwrap()
            .get("thinking")
            .cloned()
    };
    let enabled = Some(json!({"type": "enabled", "budget_tokens": 2048}));
    // The turn's own thinking goes back, signed or redacted: thinking stays on.
    let signed = tool_loop(vec![owned(ContentBlock::thinking("hmm", "sig"), &ours)]);
    let redacted = tool_loop(vec![owned(ContentBlock::redacted_thinking("EmwK"), &ours)]);
    assert_eq!(thinking(&signed, &ours), enabled);
    assert_eq!(thinking(&redacted, &ours), enabled);
    // Another target's thinking is left out, and a turn without any (another provider
    // answered it) has none to start with: the API would refuse thinking, so it is off.
    assert_eq!(thinking(&signed, &theirs), None);
    assert_eq!(thinking(&redacted, &theirs), None);
    assert_eq!(thinking(&tool_loop(Vec::new()), &ours), None);
    // Once the loop is over (the user's own words come last), thinking is back.
    let mut over = tool_loop(Vec::new()).messages().to_vec();
    over.push(Arc::new(Message::assistant_text("a says hello")));
    over.push(Arc::new(Message::user_text("thanks")));
    assert_eq!(thinking(&Conversation::from(over), &ours), enabled);
    // Without a thinking budget nothing changes.
    let plain = request_body(
        ProviderKind::Anthropic,
        &signed,
        &RequestParams::new("claude-sonnet-4-5", 4096).with_identity(&theirs),
    )
    .unwrap();
    assert!(plain.get("thinking").is_none());
}

#[test]
fn encoded_input_problems_decode_to_the_same_problems() {
    let raw_truncated = "{\"path\": \"a.rs\", \"text\": \"fn ma";
    let raw_invalid = "{\"path\": tru}";
    let detail = |raw: &str| serde_json::from_str::<Value>(raw).unwrap_err().to_string();
    let problem = |id: &str, kind, raw: &str| crate::response::ToolInputProblem {
        tool_use_id: id.into(),
        kind,
        raw: raw.into(),
        detail: detail(raw),
    };
    let response = AssistantResponse::new(
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::tool_use("call_a", "write", json!({})),
                ContentBlock::tool_use("call_b", "write", json!({})),
            ],
        },
        StopReason::MaxTokens,
    )
    .with_input_problems(vec![
        problem("call_a", InputProblemKind::InvalidJson, raw_invalid),
        problem("call_b", InputProblemKind::Truncated, raw_truncated),
    ])
    .with_id("id")
    .with_model("m");
    for provider in [ProviderKind::Anthropic, ProviderKind::OpenAi] {
        let bytes = encode_stream(provider, &response, "m", "id").concat();
        assert_eq!(decode(provider, &bytes).unwrap(), response, "{provider}");
    }
}

#[test]
fn openai_encoding_leaves_out_thinking_which_chat_cannot_carry() {
    let mut response = AssistantResponse::end_turn(Message::assistant_text("42"));
    response.message.content.insert(
        0,
        ContentBlock::Thinking {
            thinking: "hmm".into(),
            signature: "sig".into(),
            owner: None,
        },
    );
    let bytes = encode_stream(ProviderKind::OpenAi, &response, "m", "id").concat();
    let decoded = decode(ProviderKind::OpenAi, &bytes).unwrap();
    assert_eq!(decoded.message, Message::assistant_text("42"));
}

#[test]
fn openai_refusal_round_trips_through_the_refusal_field() {
    let mut response =
        AssistantResponse::end_turn(Message::assistant_text("I can't help with that."));
    response.stop_reason = StopReason::Refusal;
    let chunks = encode_stream(ProviderKind::OpenAi, &response, "m", "id");
    assert!(String::from_utf8_lossy(&chunks[1]).contains("\"refusal\":\"I can't"));
    let response = response.with_id("id").with_model("m");
    assert_eq!(
        decode(ProviderKind::OpenAi, &chunks.concat()).unwrap(),
        response
    );
    let body = encode_response_json(ProviderKind::OpenAi, &response, "m", "id").to_string();
    assert_eq!(
        parse_response(ProviderKind::OpenAi, body.as_bytes()).unwrap(),
        response
    );
}

#[test]
fn openai_compatible_reasoning_content_becomes_unsigned_thinking_before_the_text() {
    let bytes = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"Let me see.\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"4\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let (deltas, r) = decode_with_deltas(ProviderKind::OpenAi, bytes);
    assert_eq!(
        deltas,
        [
            StreamDelta::Thinking {
                index: 0,
                thinking: "Let me see.".into()
            },
            StreamDelta::Text {
                index: 1,
                text: "4".into()
            },
        ]
    );
    assert_eq!(
        r.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "Let me see.".into(),
                signature: String::new(),
                owner: None,
            },
            ContentBlock::text("4"),
        ]
    );
    // Never sent back, to either provider.
    let conv = Conversation::from(vec![
        Message::user_text("2+2?"),
        r.message,
        Message::user_text("ok"),
    ]);
    for provider in [ProviderKind::Anthropic, ProviderKind::OpenAi] {
        let body = request_body(provider, &conv, &params(&[]))
            .unwrap()
            .to_string();
        assert!(!body.contains("Let me see."), "{provider}: {body}");
    }
}

// ---- non-streaming bodies ----

#[test]
fn non_streaming_bodies_round_trip_through_encode_and_parse() {
    let response = AssistantResponse::new(
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("Reading it."),
                ContentBlock::tool_use("call_9", "read", json!({"path": "src/main.rs"})),
            ],
        },
        StopReason::ToolUse,
    )
    .with_usage(Usage {
        input_tokens: 120,
        output_tokens: 30,
        cache_creation_input_tokens: None,
        cache_read_input_tokens: Some(100),
    })
    .with_id("msg_1")
    .with_model("model-x");
    for provider in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        let body = encode_response_json(provider, &response, "model-x", "msg_1").to_string();
        assert_eq!(
            parse_response(provider, body.as_bytes()).unwrap(),
            response,
            "{provider}"
        );
    }
}

#[test]
fn non_streaming_error_and_garbage_bodies_are_failures() {
    for provider in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        let error = encode_error_body(provider, 500, None, "boom");
        let f = parse_response(provider, &error).unwrap_err();
        assert_eq!(f.transport, None, "{provider}");
        assert!(f.message.contains("boom"));
        let f = parse_response(provider, b"<html>502 Bad Gateway</html>").unwrap_err();
        assert_eq!(f.transport, Some(TransportFault::MalformedStream));
        let f = parse_response(provider, b"{}").unwrap_err();
        assert_eq!(f.transport, Some(TransportFault::MalformedStream));
    }
}

// ---- request bodies ----

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Current weather for a city".into(),
        input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }
}

fn png() -> MediaSource {
    MediaSource::Base64 {
        media_type: "image/png".into(),
        data: "iVBORw0KGgo=".into(),
    }
}

/// A conversation with text, an image, a tool call, a failed result and a follow-up.
fn exchange() -> Conversation {
    Conversation::from(vec![
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("What is the weather in Paris? Also, what is this?"),
                ContentBlock::Image { source: png() },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("Let me check."),
                ContentBlock::tool_use("toolu_1", "get_weather", json!({"city": "Paris"})),
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result(
                    "toolu_1",
                    vec![ToolResultPart::text(crate::tool_error_text(
                        "get_weather",
                        "service unavailable",
                    ))],
                    true,
                ),
                ContentBlock::text("Try again later then."),
            ],
        },
    ])
}

fn params<'a>(tools: &'a [ToolSpec]) -> RequestParams<'a> {
    RequestParams {
        model: "test-model",
        system: Some("You are terse."),
        tools,
        max_tokens: 1024,
        stream: true,
        options: None,
        tool_ids: ToolIdForm::Standard,
        identity: None,
    }
}

#[test]
fn anthropic_request_body_has_stream_system_tools_media_and_is_error() {
    let tools = [weather_tool()];
    let body = request_body(ProviderKind::Anthropic, &exchange(), &params(&tools)).unwrap();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["max_tokens"], 1024);
    assert_eq!(body["stream"], true);
    assert_eq!(body["system"], "You are terse.");
    assert_eq!(
        body["tools"][0],
        json!({"name": "get_weather", "description": "Current weather for a city",
               "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}})
    );
    assert_eq!(body["messages"][0]["content"][1]["type"], "image");
    assert_eq!(
        body["messages"][0]["content"][1]["source"]["type"],
        "base64"
    );
    let result = &body["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert_eq!(result["is_error"], true);
    assert_eq!(body["messages"][2]["content"][1]["type"], "text");
}

#[test]
fn anthropic_request_body_leaves_out_empty_text_and_unsigned_thinking() {
    let conv = Conversation::from(vec![
        Message::user_text("hi"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "from another provider".into(),
                    signature: String::new(),
                    owner: None,
                },
                ContentBlock::text(""),
                ContentBlock::text("hello"),
            ],
        },
        Message::user_text("again"),
    ]);
    let body = request_body(ProviderKind::Anthropic, &conv, &params(&[])).unwrap();
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "text", "text": "hello"}])
    );
    assert!(body.get("tools").is_none());
}

#[test]
fn openai_request_body_maps_tool_results_to_tool_messages_and_images_to_data_urls() {
    let tools = [weather_tool()];
    let body = request_body(ProviderKind::OpenAi, &exchange(), &params(&tools)).unwrap();
    assert_eq!(
        request_path(ProviderKind::OpenAi, "gpt-4o", true),
        "/chat/completions"
    );
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["max_completion_tokens"], 1024);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m[0], json!({"role": "system", "content": "You are terse."}));
    assert_eq!(m[1]["content"][1]["type"], "image_url");
    assert_eq!(
        m[1]["content"][1]["image_url"]["url"],
        "data:image/png;base64,iVBORw0KGgo="
    );
    assert_eq!(m[2]["content"], "Let me check.");
    assert_eq!(m[2]["tool_calls"][0]["id"], "toolu_1");
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(m[3]["role"], "tool");
    assert_eq!(m[3]["tool_call_id"], "toolu_1");
    // No error flag in Chat: the error text itself is the content.
    assert!(m[3]["content"]
        .as_str()
        .unwrap()
        .starts_with("Tool execution failed for `get_weather`: service unavailable"));
    assert_eq!(
        m[4],
        json!({"role": "user", "content": "Try again later then."})
    );
    assert_eq!(m.len(), 5);
}

#[test]
fn openai_tool_message_replaces_images_with_a_note() {
    let conv = Conversation::from(vec![
        Message::user_text("screenshot please"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_use("c1", "screenshot", json!({}))],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "c1",
                vec![
                    ToolResultPart::text("captured"),
                    ToolResultPart::Image { source: png() },
                ],
                false,
            )],
        },
    ]);
    let body = request_body(ProviderKind::OpenAi, &conv, &params(&[])).unwrap();
    assert_eq!(
        body["messages"][3]["content"],
        format!("captured\n{}", openai::request::TOOL_IMAGE_NOTE)
    );
    assert_eq!(body["messages"][2]["content"], Value::Null);
}

#[test]
fn request_builder_refuses_unanswered_tool_use() {
    let open_tail = Conversation::from(vec![
        Message::user_text("weather?"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_use("toolu_1", "get_weather", json!({}))],
        },
    ]);
    let mut unanswered = open_tail.clone();
    unanswered.push(Message::user_text("never mind"));
    for provider in [ProviderKind::Anthropic, ProviderKind::OpenAi] {
        for conv in [&open_tail, &unanswered] {
            let err = request_body(provider, conv, &params(&[])).unwrap_err();
            assert!(
                matches!(err, WireError::Pairing(PairingError::MissingResult { ref tool_use_id, .. }) if tool_use_id == "toolu_1"),
                "{provider}: {err}"
            );
        }
        assert_eq!(
            request_body(provider, &Conversation::new(), &params(&[])).unwrap_err(),
            WireError::EmptyConversation
        );
    }
}

#[test]
fn parse_request_reads_back_what_request_body_wrote() {
    let tools = [weather_tool()];
    let p = params(&tools);
    let body = request_body(ProviderKind::Anthropic, &exchange(), &p).unwrap();
    let parsed = parse_request(ProviderKind::Anthropic, body.to_string().as_bytes()).unwrap();
    assert_eq!(parsed.conversation, exchange());
    assert_eq!(parsed.model, "test-model");
    assert_eq!(parsed.system.as_deref(), Some("You are terse."));
    assert_eq!(parsed.tools, tools);
    assert_eq!(parsed.max_tokens, Some(1024));
    assert!(parsed.stream);

    // Chat has no error flag on a tool result: the error comes back from its text, in
    // core's words.
    let body = request_body(ProviderKind::OpenAi, &exchange(), &p).unwrap();
    let parsed = parse_request(ProviderKind::OpenAi, body.to_string().as_bytes()).unwrap();
    assert_eq!(parsed.conversation, exchange());
    assert_eq!(parsed.system.as_deref(), Some("You are terse."));
    assert_eq!(parsed.tools, tools);
    assert_eq!(parsed.max_tokens, Some(1024));
    assert!(parsed.stream);
}

#[test]
fn parse_request_rejects_garbage_with_typed_errors() {
    for provider in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        assert!(matches!(
            parse_request(provider, b"{not json"),
            Err(WireError::InvalidJson { .. })
        ));
        assert!(matches!(
            parse_request(provider, b"{\"messages\": []}"),
            Err(WireError::InvalidRequest { .. })
        ));
        assert!(matches!(
            parse_request(provider, b"{\"model\": \"m\", \"messages\": 3}"),
            Err(WireError::InvalidRequest { .. })
        ));
    }
}

// ---- error bodies ----

#[test]
fn anthropic_error_bodies_use_the_type_for_each_status() {
    for (status, ty) in [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (529, "overloaded_error"),
    ] {
        let body: Value = serde_json::from_slice(&encode_error_body(
            ProviderKind::Anthropic,
            status,
            None,
            "m",
        ))
        .unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], ty, "{status}");
        assert_eq!(body["error"]["message"], "m");
    }
}

#[test]
fn openai_error_bodies_carry_type_param_and_code() {
    let msg = context_overflow_message(ProviderKind::OpenAi, 130_000, 128_000);
    assert_eq!(
        msg,
        "This model's maximum context length is 128000 tokens. However, your messages \
         resulted in 130000 tokens. Please reduce the length of the messages."
    );
    let body: Value = serde_json::from_slice(&encode_error_body(
        ProviderKind::OpenAi,
        400,
        Some("context_length_exceeded"),
        &msg,
    ))
    .unwrap();
    assert_eq!(
        body,
        json!({"error": {"message": msg, "type": "invalid_request_error",
                         "param": "messages", "code": "context_length_exceeded"}})
    );
    let body: Value = serde_json::from_slice(&encode_error_body(
        ProviderKind::OpenAi,
        429,
        None,
        "slow down",
    ))
    .unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    let body: Value = serde_json::from_slice(&encode_error_body(
        ProviderKind::OpenAi,
        429,
        Some("insufficient_quota"),
        "You exceeded your current quota",
    ))
    .unwrap();
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert_eq!(body["error"]["code"], "insufficient_quota");
}

// ---- the round trip ----

mod round_trip {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            // Quarters are exact in binary, so they survive text and back unchanged.
            (-4000i32..4000).prop_map(|n| Value::from(f64::from(n) / 4.0)),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn tool_input() -> impl Strategy<Value = Value> {
        prop::collection::btree_map(any::<String>(), json_value(), 0..4)
            .prop_map(|m: BTreeMap<String, Value>| Value::Object(m.into_iter().collect()))
    }

    /// Text that is never blank (blank text is dropped or makes the message empty).
    fn text() -> impl Strategy<Value = String> {
        ("[a-zA-Z0-9\u{e9}\u{4e2d}\u{1F600}]", any::<String>()).prop_map(|(c, s)| c + &s)
    }

    fn tool_use(n: usize) -> impl Strategy<Value = ContentBlock> {
        ("[a-z_]{1,12}", "[A-Za-z0-9]{0,16}", tool_input()).prop_map(move |(name, id, input)| {
            ContentBlock::tool_use(format!("toolu_{n}_{id}"), name, input)
        })
    }

    fn usage(cache_creation: bool) -> impl Strategy<Value = Usage> {
        (
            0u64..1_000_000,
            0u64..1_000_000,
            proptest::option::of(0u64..100_000),
            proptest::option::of(0u64..100_000),
        )
            .prop_map(move |(i, o, cc, cr)| Usage {
                input_tokens: i,
                output_tokens: o,
                cache_creation_input_tokens: if cache_creation { cc } else { None },
                cache_read_input_tokens: cr,
            })
    }

    /// Any Anthropic message: text, thinking and tool calls in any order.
    fn anthropic_response() -> impl Strategy<Value = AssistantResponse> {
        let block = prop_oneof![
            text().prop_map(ContentBlock::text),
            (any::<String>(), "[A-Za-z0-9+/=]{0,64}")
                .prop_map(|(thinking, signature)| { ContentBlock::thinking(thinking, signature) }),
            Just(()).prop_map(|()| ContentBlock::text("placeholder for a tool call")),
        ];
        let stop = prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::ToolUse),
            Just(StopReason::MaxTokens),
            Just(StopReason::StopSequence),
            Just(StopReason::Refusal),
            Just(StopReason::PauseTurn),
        ];
        (
            prop::collection::vec(block, 1..5),
            prop::collection::vec(tool_use(0), 0..3),
            stop,
            usage(true),
        )
            .prop_map(|(blocks, calls, stop_reason, usage)| {
                let mut calls = calls.into_iter().enumerate();
                let content = blocks
                    .into_iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { ref text }
                            if text == "placeholder for a tool call" =>
                        {
                            calls.next().map(|(i, c)| unique_id(c, i))
                        }
                        b => Some(b),
                    })
                    .collect();
                response(content, stop_reason, usage)
            })
            .prop_filter("message must not be empty", |r| !r.message.is_empty())
    }

    /// What Chat can carry: at most one text, then tool calls.
    fn openai_response() -> impl Strategy<Value = AssistantResponse> {
        let stop = prop_oneof![
            Just(StopReason::EndTurn),
            Just(StopReason::ToolUse),
            Just(StopReason::MaxTokens),
            Just(StopReason::ContentFilter),
        ];
        (
            proptest::option::of(text()),
            prop::collection::vec(tool_use(0), 0..4),
            stop,
            usage(false),
        )
            .prop_map(|(text, calls, stop_reason, usage)| {
                let mut content: Vec<ContentBlock> =
                    text.into_iter().map(ContentBlock::text).collect();
                content.extend(calls.into_iter().enumerate().map(|(i, c)| unique_id(c, i)));
                response(content, stop_reason, usage)
            })
            .prop_filter("message must not be empty", |r| !r.message.is_empty())
    }

    /// A Responses reasoning item as the API sends it back with `include:
    /// ["reasoning.encrypted_content"]`.
    fn reasoning_item() -> impl Strategy<Value = ContentBlock> {
        ("[a-f0-9]{8}", any::<String>(), "[A-Za-z0-9+/=_-]{0,64}").prop_map(
            |(id, summary, encrypted)| {
                let summary = if summary.is_empty() {
                    json!([])
                } else {
                    json!([{"type": "summary_text", "text": summary}])
                };
                ContentBlock::Reasoning {
                    item: json!({"id": format!("rs_{id}"), "type": "reasoning",
                                 "summary": summary, "encrypted_content": encrypted}),
                    owner: None,
                }
            },
        )
    }

    /// What Responses carries: reasoning items, texts and tool calls in any order; the stop
    /// reason a completed response implies, or an incomplete one's.
    fn responses_response() -> impl Strategy<Value = AssistantResponse> {
        let block = prop_oneof![
            text().prop_map(ContentBlock::text),
            reasoning_item(),
            tool_use(0),
        ];
        let incomplete = prop_oneof![
            Just(None),
            Just(Some(StopReason::MaxTokens)),
            Just(Some(StopReason::ContentFilter)),
        ];
        (prop::collection::vec(block, 1..6), incomplete, usage(false))
            .prop_map(|(blocks, incomplete, usage)| {
                let content: Vec<ContentBlock> = blocks
                    .into_iter()
                    .enumerate()
                    .map(|(i, b)| unique_id(b, i))
                    .collect();
                let has_calls = content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
                let stop = incomplete.unwrap_or(if has_calls {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                });
                response(content, stop, usage)
            })
            .prop_filter("message must not be empty", |r| !r.message.is_empty())
    }

    fn unique_id(block: ContentBlock, i: usize) -> ContentBlock {
        match block {
            ContentBlock::ToolUse { id, name, input } => ContentBlock::ToolUse {
                id: format!("{id}_{i}"),
                name,
                input,
            },
            b => b,
        }
    }

    fn response(
        content: Vec<ContentBlock>,
        stop_reason: StopReason,
        usage: Usage,
    ) -> AssistantResponse {
        AssistantResponse::new(
            Message {
                role: Role::Assistant,
                content,
            },
            stop_reason,
        )
        .with_usage(usage)
    }

    fn split_and_decode(
        provider: ProviderKind,
        bytes: &[u8],
        cuts: &[prop::sample::Index],
    ) -> Result<AssistantResponse, ProviderFailure> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        let mut d = StreamDecoder::new(provider);
        let mut from = 0;
        for to in at.into_iter().chain([bytes.len()]) {
            d.feed(&bytes[from..to])?;
            from = to;
        }
        d.finish()
    }

    proptest! {
        #[test]
        fn anthropic_any_response_survives_encode_split_anywhere_decode(
            r in anthropic_response(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let bytes = encode_stream(ProviderKind::Anthropic, &r, "claude-test", "msg_1").concat();
            let r = r.with_id("msg_1").with_model("claude-test");
            prop_assert_eq!(split_and_decode(ProviderKind::Anthropic, &bytes, &cuts), Ok(r));
        }

        #[test]
        fn openai_any_response_survives_encode_split_anywhere_decode(
            r in openai_response(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let bytes = encode_stream(ProviderKind::OpenAi, &r, "gpt-test", "chatcmpl-1").concat();
            let r = r.with_id("chatcmpl-1").with_model("gpt-test");
            prop_assert_eq!(split_and_decode(ProviderKind::OpenAi, &bytes, &cuts), Ok(r));
        }

        #[test]
        fn responses_any_response_survives_encode_split_anywhere_decode(
            r in responses_response(),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        ) {
            let bytes = encode_stream(ProviderKind::OpenAiResponses, &r, "gpt-test", "resp_1")
                .concat();
            let r = r.with_id("resp_1").with_model("gpt-test");
            prop_assert_eq!(
                split_and_decode(ProviderKind::OpenAiResponses, &bytes, &cuts),
                Ok(r.clone())
            );
            let body = encode_response_json(ProviderKind::OpenAiResponses, &r, "gpt-test", "resp_1")
                .to_string();
            prop_assert_eq!(parse_response(ProviderKind::OpenAiResponses, body.as_bytes()), Ok(r));
        }

        #[test]
        fn responses_any_prefix_of_an_encoded_stream_is_a_cut(
            r in responses_response(),
            cut in any::<prop::sample::Index>(),
        ) {
            let chunks = encode_stream(ProviderKind::OpenAiResponses, &r, "m", "id");
            let bytes = chunks.concat();
            let last = chunks.last().map_or(0, Vec::len);
            let len = cut.index(bytes.len() - last);
            let f = decode(ProviderKind::OpenAiResponses, &bytes[..len]).unwrap_err();
            prop_assert_eq!(f.transport, Some(TransportFault::StreamCut));
        }

        #[test]
        fn any_prefix_of_an_encoded_stream_is_a_cut_never_a_panic(
            r in anthropic_response(),
            cut in any::<prop::sample::Index>(),
        ) {
            let chunks = encode_stream(ProviderKind::Anthropic, &r, "m", "id");
            let bytes = chunks.concat();
            let last = chunks.last().map_or(0, Vec::len);
            let len = cut.index(bytes.len() - last);
            let f = decode(ProviderKind::Anthropic, &bytes[..len]).unwrap_err();
            prop_assert_eq!(f.transport, Some(TransportFault::StreamCut));
        }

        #[test]
        fn arbitrary_bytes_never_panic_the_decoders(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
        ) {
            for provider in [
                ProviderKind::Anthropic,
                ProviderKind::OpenAi,
                ProviderKind::OpenAiResponses,
            ] {
                let _ = decode(provider, &bytes);
                let _ = parse_response(provider, &bytes);
                let _ = parse_request(provider, &bytes);
            }
        }
    }
}

#[test]
fn the_tool_error_flag_survives_a_request_exactly_where_the_wire_carries_it() {
    let conversation = Conversation::from(vec![
        Message::user_text("read a"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_use(
                "call_1",
                "read",
                json!({"path": "a"}),
            )],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "call_1",
                vec![ToolResultPart::text("file not found: a")],
                true,
            )],
        },
    ]);
    for provider in [
        ProviderKind::Anthropic,
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
    ] {
        let body = request_body(provider, &conversation, &params(&[])).expect("a request");
        let parsed = parse_request(provider, body.to_string().as_bytes()).expect("parses back");
        let flagged = parsed
            .conversation
            .messages()
            .iter()
            .flat_map(|m| m.tool_results())
            .any(|r| r.is_error);
        assert_eq!(flagged, carries_tool_error_flag(provider), "{provider}");
    }
}

#[test]
fn the_response_id_and_model_are_read_from_every_wire_format_streamed_or_not() {
    let answer = AssistantResponse::end_turn(Message::assistant_text("hi"));
    for (provider, id) in [
        (ProviderKind::Anthropic, "msg_01XFDUDYJgAACzvnptvVoYEL"),
        (
            ProviderKind::OpenAi,
            "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        ),
        (
            ProviderKind::OpenAiResponses,
            "resp_67ccd2bed1ec8190b14f964abc054267",
        ),
    ] {
        let bytes = encode_stream(provider, &answer, "model-2025-01-01", id).concat();
        let streamed = decode(provider, &bytes).unwrap();
        assert_eq!(streamed.id(), Some(id), "{provider}");
        assert_eq!(streamed.model(), Some("model-2025-01-01"), "{provider}");
        let body = encode_response_json(provider, &answer, "model-2025-01-01", id).to_string();
        let parsed = parse_response(provider, body.as_bytes()).unwrap();
        assert_eq!(
            (parsed.id(), parsed.model()),
            (streamed.id(), streamed.model())
        );
    }
}

#[test]
fn an_odd_id_or_model_is_left_out_not_a_failure() {
    // A compatible server with a numeric id, no model, and a huge one: the answer stands.
    let long = "m".repeat(10_000);
    let bytes = format!(
        "data: {{\"id\":7,\"model\":\"{long}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"4\"}}}}]}}\n\n\
data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
    );
    let r = decode(ProviderKind::OpenAi, bytes.as_bytes()).unwrap();
    assert_eq!(r.message, Message::assistant_text("4"));
    assert_eq!((r.id(), r.model()), (None, None));
}
