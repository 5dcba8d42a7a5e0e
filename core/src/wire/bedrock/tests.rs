//! Tests of the Bedrock Converse format: captured event streams, the encoder round trip in
//! any split, in-stream exceptions classified as their HTTP twins, cut and corrupt streams,
//! and request and response bodies held to botocore's service model.

use super::encode;
use super::request::{self, parse_path, path, IMAGE_OMITTED};
use super::stream::{parse_response, Decoder};
use crate::classify::classify_http;
use crate::conversation::{
    ContentBlock, Conversation, MediaSource, Message, Role, TargetIdentity, ToolResultPart,
};
use crate::failure::{FailureKind, ProviderFailure, TransportFault};
use crate::headers::Headers;
use crate::response::{AssistantResponse, InputProblemKind, StopReason, ToolInputProblem, Usage};
use crate::tool::ToolSpec;
use crate::wire::eventstream::{encode_frame, HeaderValue};
use crate::wire::{RequestParams, StreamDelta};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;

const BOTOCORE_LOG: &str =
    include_str!("../../../fixtures/streams/bedrock/text_prefix_botocore_log.jsonl");
const JS_SDK: &str = include_str!("../../../fixtures/streams/bedrock/text_prefix_js_sdk.jsonl");
const SERVICE_MODEL: &str =
    include_str!("../../../fixtures/streams/bedrock/service-2.excerpt.json");

/// The message limit the dispatch gives a stream by default (64 MiB).
const LIMIT: usize = 64 << 20;

// ---- helpers ----

/// The event-stream messages of a fixture: one JSON object a line, its `headers` (name and
/// string value, in order) and its `payload` text, framed as the service frames them.
fn frames_of(jsonl: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in jsonl.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("fixture line is JSON");
        let headers: Vec<(String, String)> = v["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| {
                (
                    h[0].as_str().expect("name").to_owned(),
                    h[1].as_str().expect("value").to_owned(),
                )
            })
            .collect();
        let headers: Vec<(&str, HeaderValue<'_>)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), HeaderValue::String(v)))
            .collect();
        out.extend(encode_frame(
            &headers,
            v["payload"].as_str().expect("payload").as_bytes(),
        ));
    }
    out
}

/// An event message with `payload`, headers as the service sends them.
fn event(ty: &str, payload: &str) -> Vec<u8> {
    encode_frame(
        &[
            (":event-type", HeaderValue::String(ty)),
            (":content-type", HeaderValue::String("application/json")),
            (":message-type", HeaderValue::String("event")),
        ],
        payload.as_bytes(),
    )
}

fn feed_all(chunks: &[&[u8]]) -> (Vec<StreamDelta>, Result<AssistantResponse, ProviderFailure>) {
    let mut d = Decoder::new(LIMIT);
    let mut deltas = Vec::new();
    for chunk in chunks {
        if let Err(f) = d.feed_with(chunk, |delta| deltas.push(delta.into_owned())) {
            return (deltas, Err(f));
        }
    }
    (deltas, d.finish())
}

fn decode(bytes: &[u8]) -> Result<AssistantResponse, ProviderFailure> {
    feed_all(&[bytes]).1
}

fn texts(deltas: &[StreamDelta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn fault(result: Result<AssistantResponse, ProviderFailure>) -> Option<TransportFault> {
    result.expect_err("a failure").transport
}

/// `messageStop` and `metadata` as the service writes them (keys in alphabetical order).
fn ending(stop: &str) -> Vec<u8> {
    [
        event(
            "messageStop",
            &format!(r#"{{"p":"abcdefgh","stopReason":"{stop}"}}"#),
        ),
        event(
            "metadata",
            r#"{"metrics":{"latencyMs":512},"p":"abc","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}"#,
        ),
    ]
    .concat()
}

// ---- captured streams ----

#[test]
fn botocore_logged_prefix_shows_its_text_and_reads_as_a_cut_stream() {
    // boto/boto3#4584: the headers and payloads botocore logged of a live stream, which the
    // log quotes up to its second delta.
    let bytes = frames_of(BOTOCORE_LOG);
    let (deltas, result) = feed_all(&[&bytes]);
    assert_eq!(
        deltas,
        [
            StreamDelta::Text {
                index: 0,
                text: "I".into()
            },
            StreamDelta::Text {
                index: 0,
                text: " see".into()
            },
        ]
    );
    assert_eq!(fault(result), Some(TransportFault::StreamCut));
}

#[test]
fn js_sdk_captured_deltas_with_padding_assemble_once_the_message_stops() {
    // aws/aws-sdk-js-v3#6919: the chunks of a live stream, each with its padding `p`.
    let mut bytes = frames_of(JS_SDK);
    let (deltas, cut) = feed_all(&[&bytes]);
    assert_eq!(texts(&deltas), "I'm doing well, thanks for asking! As");
    assert_eq!(fault(cut), Some(TransportFault::StreamCut));
    bytes.extend(ending("end_turn"));
    let r = decode(&bytes).expect("complete");
    assert_eq!(
        r.message,
        Message::assistant_text("I'm doing well, thanks for asking! As")
    );
    assert_eq!(r.stop_reason, StopReason::EndTurn);
    assert_eq!(r.usage, Usage::new(12, 9));
    assert_eq!(r.id(), None, "Bedrock streams carry no message id");
}

// ---- the encoder round trip ----

fn tools_response() -> AssistantResponse {
    AssistantResponse::tool_use(Message::assistant(vec![
        ContentBlock::thinking(
            "Look at the file first: it may be long.",
            "EqQBCkYIARgCKkDsig",
        ),
        ContentBlock::text("Reading the file. ☕ Ünïcode spans pieces."),
        ContentBlock::tool_use(
            "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
            "read",
            json!({"path": "src/lib.rs", "lines": [1, 200]}),
        ),
        ContentBlock::tool_use("tooluse_2", "ls", json!({})),
    ]))
    .with_usage(
        Usage::new(1200, 85)
            .with_cache_read_input_tokens(1024)
            .with_cache_creation_input_tokens(16),
    )
}

fn responses() -> Vec<AssistantResponse> {
    let truncated = AssistantResponse::new(
        Message::assistant(vec![
            ContentBlock::text("Writing."),
            ContentBlock::tool_use("tooluse_w", "write", json!({})),
        ]),
        StopReason::MaxTokens,
    );
    let raw = r#"{"path": "a.rs", "content": "fn main() {"#;
    let detail = crate::wire::tool_input_problem(raw, true, false)
        .expect("a problem")
        .1;
    let truncated = truncated.with_input_problems(vec![ToolInputProblem {
        tool_use_id: "tooluse_w".into(),
        kind: InputProblemKind::Truncated,
        raw: raw.into(),
        detail,
    }]);
    vec![
        AssistantResponse::end_turn(Message::assistant_text("Hello there!"))
            .with_usage(Usage::new(11, 6)),
        tools_response(),
        AssistantResponse::end_turn(Message::assistant(vec![
            ContentBlock::redacted_thinking("RXJyb3I6IHJlZGFjdGVkIHRoaW5raW5nIGJsb2I="),
            ContentBlock::text("Done."),
        ])),
        AssistantResponse::new(
            Message::assistant_text("I can't help with that."),
            StopReason::ContentFilter,
        ),
        AssistantResponse::new(Message::assistant_text("one two"), StopReason::StopSequence),
        AssistantResponse::new(
            Message::assistant_text("cut"),
            StopReason::Other("model_context_window_exceeded".into()),
        ),
        truncated,
    ]
}

#[test]
fn every_encoded_stream_decodes_to_its_response_in_any_split() {
    for sent in responses() {
        let frames = encode::stream(&sent, "anthropic.claude-test", "ignored");
        let bytes = frames.concat();
        // One message per chunk, as the server writes them.
        let chunks: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        assert_eq!(feed_all(&chunks).1.as_ref(), Ok(&sent));
        for size in [1, 2, 3, 5, 7, 13, 64, 1000] {
            let chunks: Vec<&[u8]> = bytes.chunks(size).collect();
            assert_eq!(feed_all(&chunks).1, Ok(sent.clone()), "pieces of {size}");
        }
    }
}

#[test]
fn deltas_show_text_thinking_and_tool_calls_by_block_index() {
    let bytes = encode::stream(&tools_response(), "m", "id").concat();
    let (deltas, _) = feed_all(&[&bytes]);
    assert!(deltas.contains(&StreamDelta::ToolCallStart {
        index: 2,
        id: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q".into(),
        name: "read".into(),
    }));
    let thinking: String = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Thinking { index: 0, thinking } => Some(thinking.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "Look at the file first: it may be long.");
    let json: String = deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::ToolInputJson {
                index: 2,
                partial_json,
            } => Some(partial_json.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).expect("JSON"),
        json!({"path": "src/lib.rs", "lines": [1, 200]})
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        rng_seed: proptest::test_runner::RngSeed::Fixed(41),
        ..ProptestConfig::default()
    })]

    /// Cut anywhere, in any number of pieces, a stream decodes to what was sent.
    #[test]
    fn a_stream_split_at_any_points_decodes_the_same(
        which in 0usize..7,
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let sent = responses().swap_remove(which);
        let bytes = encode::stream(&sent, "m", "id").concat();
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        at.sort_unstable();
        let mut chunks = Vec::new();
        let mut from = 0;
        for to in at {
            chunks.push(&bytes[from..to]);
            from = to;
        }
        chunks.push(&bytes[from..]);
        prop_assert_eq!(feed_all(&chunks).1, Ok(sent));
    }

    /// Whatever bytes arrive, and however a valid stream is damaged, decoding ends in a
    /// response or a failure, never a panic.
    #[test]
    fn damaged_streams_never_panic(
        which in 0usize..7,
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let sent = responses().swap_remove(which);
        let mut bytes = encode::stream(&sent, "m", "id").concat();
        let i = at.index(bytes.len());
        bytes[i] ^= byte | 1;
        let _ = decode(&bytes);
        let _ = decode(&noise);
        bytes.truncate(i);
        let _ = decode(&bytes);
    }
}

// ---- completion, cuts, corruption ----

#[test]
fn the_stream_completes_with_metadata_after_message_stop() {
    let frames = encode::stream(&tools_response(), "m", "id");
    let mut d = Decoder::new(LIMIT);
    let (last, rest) = frames.split_last().expect("frames");
    for f in rest {
        d.feed_with(f, |_| {}).expect("valid");
        assert!(!d.is_complete(), "not before metadata");
    }
    d.feed_with(last, |_| {}).expect("valid");
    assert!(d.is_complete());
    // Anything after the end is ignored, even bytes that are no event stream.
    d.feed_with(b"\xde\xad\xbe\xef garbage that is no frame", |_| {})
        .expect("ignored");
    assert_eq!(d.finish(), Ok(tools_response()));
}

#[test]
fn trailing_garbage_in_the_completing_chunk_does_not_fail_the_message() {
    let mut bytes = encode::stream(&tools_response(), "m", "id").concat();
    let mut garbage = vec![0xFFu8; 40];
    bytes.append(&mut garbage);
    assert_eq!(decode(&bytes), Ok(tools_response()));
}

#[test]
fn message_stop_without_metadata_is_accepted_at_a_clean_end_without_usage() {
    let sent = tools_response();
    let mut frames = encode::stream(&sent, "m", "id");
    frames.pop(); // metadata
    let r = decode(&frames.concat()).expect("accepted");
    assert_eq!(r.message, sent.message);
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(r.usage, Usage::default());
    // But a metadata message cut halfway is a cut body, as an SSE event cut mid-line is.
    let full = encode::stream(&sent, "m", "id").concat();
    assert_eq!(
        fault(decode(&full[..full.len() - 10])),
        Some(TransportFault::StreamCut)
    );
}

#[test]
fn a_stream_without_message_stop_is_a_cut_stream() {
    let frames = encode::stream(&tools_response(), "m", "id");
    let before_stop = &frames[..frames.len() - 2];
    let failure = decode(&before_stop.concat()).expect_err("cut");
    assert_eq!(failure.transport, Some(TransportFault::StreamCut));
    assert_eq!(failure.kind, FailureKind::StreamMalformed);
    // Cut inside a message, at every byte of the first few.
    let bytes = frames.concat();
    for end in 1..200 {
        assert_eq!(
            fault(decode(&bytes[..end])),
            Some(TransportFault::StreamCut),
            "{end}"
        );
    }
    // An empty body.
    assert_eq!(fault(decode(b"")), Some(TransportFault::StreamCut));
}

#[test]
fn a_corrupt_checksum_is_a_malformed_stream_that_stays() {
    let frames = encode::stream(&tools_response(), "m", "id");
    let mut bytes = frames.concat();
    // The last byte of the second message: its message CRC.
    let at = frames[0].len() + frames[1].len() - 1;
    bytes[at] ^= 0x01;
    let mut d = Decoder::new(LIMIT);
    let failure = d.feed_with(&bytes, |_| {}).expect_err("corrupt");
    assert_eq!(failure.transport, Some(TransportFault::MalformedStream));
    assert!(failure.message.contains("checksum"), "{}", failure.message);
    assert_eq!(d.feed_with(b"", |_| {}), Err(failure.clone()), "it stays");
    assert_eq!(d.finish(), Err(failure));
    // A corrupt prelude too.
    let mut bytes = frames.concat();
    bytes[frames[0].len() + 9] ^= 0x80;
    assert_eq!(fault(decode(&bytes)), Some(TransportFault::MalformedStream));
}

#[test]
fn events_that_are_not_what_they_say_are_malformed() {
    let start = event("messageStart", r#"{"role":"assistant"}"#);
    for bad in [
        event("contentBlockDelta", "not json"),
        event("contentBlockDelta", r#"{"delta":{"text":"no index"}}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":"0","delta":{"text":"x"}}"#,
        ),
        // A tool call's fragment before its start: no id, no name.
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{}"}}}"#,
        ),
        encode_frame(
            &[(":message-type", HeaderValue::String("event"))],
            br#"{"role":"assistant"}"#,
        ),
        encode_frame(&[(":message-type", HeaderValue::String("gossip"))], b"{}"),
    ] {
        let bytes = [start.clone(), bad].concat();
        assert_eq!(fault(decode(&bytes)), Some(TransportFault::MalformedStream));
    }
    // A text delta to a tool call's block.
    let bytes = [
        start.clone(),
        event(
            "contentBlockStart",
            r#"{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"t","name":"ls"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"x"}}"#,
        ),
    ]
    .concat();
    assert_eq!(fault(decode(&bytes)), Some(TransportFault::MalformedStream));
}

#[test]
fn unknown_events_and_blocks_the_service_runs_are_skipped() {
    let bytes = [
        event("messageStart", r#"{"role":"assistant"}"#),
        event("someFutureEvent", "{ whatever this is"),
        event(
            "contentBlockStart",
            r#"{"contentBlockIndex":0,"start":{"toolUse":{"toolUseId":"srv_1","name":"web_search","type":"server_tool_use"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"toolUse":{"input":"{\"q\":1}"}}}"#,
        ),
        event("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        event(
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolResult":{"toolUseId":"srv_1"}}}"#,
        ),
        event("contentBlockStop", r#"{"contentBlockIndex":1}"#),
        event("contentBlockDelta", r#"{"contentBlockIndex":2,"delta":{"text":"Found it."}}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":2,"delta":{"citation":{"title":"x"}}}"#,
        ),
        event("contentBlockStop", r#"{"contentBlockIndex":2}"#),
        // An empty text block: a stop without a delta.
        event("contentBlockStop", r#"{"contentBlockIndex":3}"#),
        ending("end_turn"),
    ]
    .concat();
    let r = decode(&bytes).expect("decodes");
    assert_eq!(r.message, Message::assistant_text("Found it."));
}

#[test]
fn reasoning_signatures_and_redacted_content_in_pieces_are_joined() {
    let bytes = [
        event("messageStart", r#"{"role":"assistant"}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"think"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"sig-1"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"/2"}}}"#,
        ),
        event("contentBlockStop", r#"{"contentBlockIndex":0}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"reasoningContent":{"redactedContent":"c2Vh"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"reasoningContent":{"redactedContent":"bGVk"}}}"#,
        ),
        event("contentBlockStop", r#"{"contentBlockIndex":1}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":2,"delta":{"text":"ok"}}"#,
        ),
        ending("end_turn"),
    ]
    .concat();
    let r = decode(&bytes).expect("decodes");
    assert_eq!(
        r.message.content,
        [
            ContentBlock::thinking("think", "sig-1/2"),
            ContentBlock::redacted_thinking("c2VhbGVk"),
            ContentBlock::text("ok"),
        ]
    );
}

#[test]
fn stop_reasons_read_in_rebound_terms() {
    for (wire, expected) in [
        ("end_turn", StopReason::EndTurn),
        ("tool_use", StopReason::ToolUse),
        ("max_tokens", StopReason::MaxTokens),
        ("stop_sequence", StopReason::StopSequence),
        ("guardrail_intervened", StopReason::ContentFilter),
        ("content_filtered", StopReason::ContentFilter),
        (
            "malformed_tool_use",
            StopReason::Other("malformed_tool_use".into()),
        ),
    ] {
        let bytes = [
            event(
                "contentBlockDelta",
                r#"{"contentBlockIndex":0,"delta":{"text":"x"}}"#,
            ),
            ending(wire),
        ]
        .concat();
        assert_eq!(decode(&bytes).expect(wire).stop_reason, expected, "{wire}");
    }
}

#[test]
fn a_message_larger_than_the_limit_fails() {
    let sent = AssistantResponse::end_turn(Message::assistant_text("x".repeat(4000)));
    let bytes = encode::stream(&sent, "m", "id").concat();
    let mut d = Decoder::new(1000);
    let failure = d.feed_with(&bytes, |_| {}).expect_err("too large");
    assert_eq!(failure.transport, Some(TransportFault::MalformedStream));
}

// ---- failures inside the stream ----

fn started_then(exception: &[u8]) -> Vec<u8> {
    [
        event("messageStart", r#"{"role":"assistant"}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"text":"Hel"}}"#,
        ),
        exception.to_vec(),
    ]
    .concat()
}

#[test]
fn every_in_stream_exception_is_classified_as_its_type() {
    for (ty, message, kind) in [
        (
            "throttlingException",
            "Too many requests, please wait before trying again.",
            FailureKind::RateLimited,
        ),
        (
            "modelStreamErrorException",
            "The model stream failed.",
            FailureKind::ServerError,
        ),
        (
            "internalServerException",
            "The server encountered an internal error.",
            FailureKind::ServerError,
        ),
        (
            "serviceUnavailableException",
            "The service is unavailable. Try again later.",
            FailureKind::Unavailable,
        ),
        (
            "validationException",
            "The model returned the following errors: bad input",
            FailureKind::BadRequest,
        ),
        (
            // The wording the classifier knows (classify/markers.rs).
            "validationException",
            "Input is too long for requested model.",
            FailureKind::ContextOverflow,
        ),
        (
            // A real in-stream validationException (nulib/dc-api-v2#296, quoted by botocore
            // as "An error occurred (validationException) when calling the
            // InvokeModelWithResponseStream operation: …").
            "validationException",
            "messages.4: Did not find 1 `tool_result` block(s) at the beginning of this \
             message. Messages following `tool_use` blocks must begin with a matching number \
             of `tool_result` blocks.",
            FailureKind::BadRequest,
        ),
        (
            "modelTimeoutException",
            "Model has timed out in processing the request.",
            FailureKind::ServerError,
        ),
    ] {
        let bytes = started_then(&encode::stream_error_event(ty, message));
        let (deltas, result) = feed_all(&[&bytes]);
        assert_eq!(texts(&deltas), "Hel", "{ty}: the text before it was shown");
        let f = result.expect_err(ty);
        assert_eq!(f.kind, kind, "{ty}: {message}");
        assert_eq!(f.error_type.as_deref(), Some(ty));
        assert_eq!(
            &*f.message,
            message.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        assert_eq!(f.status, None);
    }
}

#[test]
fn exception_types_given_by_their_http_name_are_sent_as_stream_members() {
    let bytes = started_then(&encode::stream_error_event(
        "ThrottlingException",
        "slow down",
    ));
    let f = decode(&bytes).expect_err("throttled");
    assert_eq!(f.kind, FailureKind::RateLimited);
    assert_eq!(f.error_type.as_deref(), Some("throttlingException"));
}

#[test]
fn an_error_message_is_classified_by_its_code() {
    let error = encode_frame(
        &[
            (":error-code", HeaderValue::String("InternalFailure")),
            (
                ":error-message",
                HeaderValue::String("An internal error occurred."),
            ),
            (":message-type", HeaderValue::String("error")),
        ],
        b"",
    );
    let f = decode(&started_then(&error)).expect_err("error");
    assert_eq!(f.kind, FailureKind::ServerError);
    assert_eq!(f.error_type.as_deref(), Some("InternalFailure"));
    assert_eq!(&*f.message, "An internal error occurred.");
    let error = encode_frame(
        &[
            (":error-code", HeaderValue::String("ThrottlingException")),
            (":error-message", HeaderValue::String("Rate exceeded")),
            (":message-type", HeaderValue::String("error")),
        ],
        b"",
    );
    assert_eq!(
        decode(&started_then(&error)).expect_err("throttled").kind,
        FailureKind::RateLimited
    );
}

#[test]
fn an_exception_whose_payload_is_not_json_still_has_its_type() {
    let frame = encode_frame(
        &[
            (
                ":exception-type",
                HeaderValue::String("serviceUnavailableException"),
            ),
            (":message-type", HeaderValue::String("exception")),
        ],
        b"<html>503</html>",
    );
    let f = decode(&started_then(&frame)).expect_err("unavailable");
    assert_eq!(f.kind, FailureKind::Unavailable);
}

// ---- HTTP errors and non-streaming bodies ----

#[test]
fn error_bodies_carry_their_type_in_the_header_as_aws_does() {
    for (status, ty, message, kind) in [
        (
            429,
            None,
            "Too many tokens, please wait before trying again.",
            FailureKind::RateLimited,
        ),
        (
            400,
            None,
            "Input is too long for requested model.",
            FailureKind::ContextOverflow,
        ),
        (
            400,
            Some("ThrottlingException"),
            "Rate exceeded",
            FailureKind::RateLimited,
        ),
        (
            403,
            None,
            "You don't have access to the model with the specified model ID.",
            FailureKind::AuthFailed,
        ),
        (
            404,
            None,
            "The provided model identifier is invalid.",
            FailureKind::ModelNotFound,
        ),
        (
            503,
            None,
            "Bedrock is unable to process your request.",
            FailureKind::Unavailable,
        ),
        (
            500,
            None,
            "The server encountered an internal error.",
            FailureKind::ServerError,
        ),
        (
            429,
            Some("ModelNotReadyException"),
            "Model is not ready",
            FailureKind::Unavailable,
        ),
    ] {
        let body = encode::error_body(status, ty, message);
        assert_eq!(
            serde_json::from_slice::<Value>(&body).expect("JSON"),
            json!({ "message": message })
        );
        let header = encode::error_type_header(status, ty);
        let headers = Headers::new()
            .with("x-amzn-errortype", header.clone())
            .with("x-amzn-requestid", "3c5b6e9a-1111-2222-3333-444455556666");
        let f = classify_http(
            crate::ProviderKind::Anthropic,
            status,
            &headers,
            &body,
            None,
        );
        assert_eq!(f.kind, kind, "{status} {header}");
        assert_eq!(
            f.error_type.as_deref(),
            header.split(':').next(),
            "the header's type, without its namespace"
        );
        assert_eq!(
            f.request_id.as_deref(),
            Some("3c5b6e9a-1111-2222-3333-444455556666")
        );
    }
    assert_eq!(
        encode::error_type_header(429, None),
        "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"
    );
}

#[test]
fn converse_bodies_round_trip_and_errors_in_them_are_classified() {
    for sent in responses() {
        if !sent.input_problems().is_empty() {
            continue; // a Converse body holds the parsed input, not the raw text
        }
        let body = encode::response_json(&sent, "m", "id");
        let bytes = body.to_string().into_bytes();
        assert_eq!(parse_response(&body, &bytes), Ok(sent));
    }
    let body = json!({"message": "Too many requests, please wait before trying again."});
    let f = parse_response(&body, body.to_string().as_bytes()).expect_err("error");
    assert_eq!(
        f.kind,
        FailureKind::ServerError,
        "no status, no type: a server error"
    );
    let body =
        json!({"__type": "com.amazon.coral.availability#ThrottlingException", "message": "x"});
    let f = parse_response(&body, body.to_string().as_bytes()).expect_err("error");
    assert_eq!(f.kind, FailureKind::RateLimited);
    let body = json!({"id": "x"});
    assert_eq!(
        parse_response(&body, b"{}")
            .expect_err("no output")
            .transport,
        Some(TransportFault::MalformedStream)
    );
    let body = json!({"output": {"message": {"role": "assistant", "content": []}}, "stopReason": "end_turn"});
    assert_eq!(
        parse_response(&body, b"{}").expect_err("empty").transport,
        Some(TransportFault::EmptyMessage)
    );
}

#[test]
fn a_converse_body_of_the_documented_shape_decodes() {
    // The shape of the Converse response in the API reference (fields in the service's
    // alphabetical order), a tool call with its parsed input.
    let body = br#"{"metrics":{"latencyMs":1021},"output":{"message":{"content":[{"text":"Let me check."},{"toolUse":{"input":{"sign":"WZPZ"},"name":"top_song","toolUseId":"tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"}}],"role":"assistant"}},"stopReason":"tool_use","usage":{"cacheReadInputTokens":0,"cacheWriteInputTokens":0,"inputTokens":375,"outputTokens":55,"totalTokens":430}}"#;
    let v: Value = serde_json::from_slice(body).expect("JSON");
    let r = parse_response(&v, body).expect("decodes");
    assert_eq!(
        r.message.content,
        [
            ContentBlock::text("Let me check."),
            ContentBlock::tool_use(
                "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
                "top_song",
                json!({"sign": "WZPZ"})
            ),
        ]
    );
    assert_eq!(r.stop_reason, StopReason::ToolUse);
    assert_eq!(
        r.usage,
        Usage::new(375, 55)
            .with_cache_read_input_tokens(0)
            .with_cache_creation_input_tokens(0)
    );
}

// ---- request bodies ----

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read".into(),
            description: "Read a file".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        },
        ToolSpec {
            name: "ls".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        },
    ]
}

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

/// A conversation begun elsewhere: a Kimi-style id, thinking signed by two owners, a
/// Responses reasoning item, blank text, an image by URL, an error result with an image, and
/// two user messages in a row.
fn mixed() -> Conversation {
    let ours = Some(TargetIdentity::new("bedrock:us-east-1:abc"));
    let theirs = Some(TargetIdentity::new("anthropic:xyz"));
    Conversation::from(vec![
        Message::user(vec![
            ContentBlock::text("What is in a.rs?"),
            ContentBlock::Image {
                source: MediaSource::Base64 {
                    media_type: "image/png".into(),
                    data: PNG.into(),
                },
            },
            ContentBlock::Image {
                source: MediaSource::Url {
                    url: "https://example.com/x.png".into(),
                },
            },
        ]),
        Message::assistant(vec![
            ContentBlock::Thinking {
                thinking: "ours".into(),
                signature: "sig-ours".into(),
                owner: ours.clone(),
            },
            ContentBlock::Thinking {
                thinking: "theirs".into(),
                signature: "sig-theirs".into(),
                owner: theirs,
            },
            ContentBlock::Thinking {
                thinking: "unsigned".into(),
                signature: String::new(),
                owner: None,
            },
            ContentBlock::RedactedThinking {
                data: "cmVkYWN0ZWQ=".into(),
                owner: ours,
            },
            ContentBlock::reasoning(
                json!({"type": "reasoning", "encrypted_content": "gAAAAB-opaque"}),
            ),
            ContentBlock::text("\n\n"),
            ContentBlock::text("Reading."),
            ContentBlock::tool_use("functions.read:0", "read", json!({"path": "a.rs"})),
        ]),
        Message::user(vec![ContentBlock::tool_result(
            "functions.read:0",
            vec![
                ToolResultPart::text(crate::tool_error_text("read", "file not found: a.rs")),
                ToolResultPart::text("  "),
                ToolResultPart::Image {
                    source: MediaSource::Base64 {
                        media_type: "image/jpeg".into(),
                        data: "/9j/4AAQ".into(),
                    },
                },
            ],
            true,
        )]),
        Message::user_text("Try b.rs."),
        Message::assistant(vec![ContentBlock::tool_use("call_0", "ls", json!({}))]),
        Message::user(vec![ContentBlock::tool_result(
            "call_0",
            vec![ToolResultPart::text("a.rs b.rs")],
            false,
        )]),
    ])
}

fn params<'a>(tools: &'a [ToolSpec], to: &'a TargetIdentity) -> RequestParams<'a> {
    RequestParams::new("anthropic.claude-sonnet-4-6", 2048)
        .with_system("Be brief.")
        .with_tools(tools)
        .with_identity(to)
}

#[test]
fn request_body_has_the_converse_shape() {
    let tools = tools();
    let ours = TargetIdentity::new("bedrock:us-east-1:abc");
    let body = request::body(&mixed(), &params(&tools, &ours)).expect("body");
    assert_eq!(body["system"], json!([{"text": "Be brief."}]));
    assert_eq!(body["inferenceConfig"], json!({"maxTokens": 2048}));
    assert_eq!(
        body["toolConfig"]["tools"],
        json!([
            {"toolSpec": {"name": "read", "description": "Read a file",
                          "inputSchema": {"json": tools[0].input_schema}}},
            {"toolSpec": {"name": "ls", "inputSchema": {"json": {"type": "object"}}}},
        ])
    );
    for absent in ["model", "modelId", "stream", "max_tokens"] {
        assert!(body.get(absent).is_none(), "{absent}: the URL says it");
    }
    let messages = body["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "assistant", "user"],
        "alternating"
    );
    assert_eq!(
        messages[0]["content"],
        json!([
            {"text": "What is in a.rs?"},
            {"image": {"format": "png", "source": {"bytes": PNG}}},
            {"text": IMAGE_OMITTED},
        ])
    );
    let sent_id = "rb_3be9d502e7553b89132691a23dd3c576";
    assert_eq!(
        messages[1]["content"],
        json!([
            {"reasoningContent": {"reasoningText": {"text": "ours", "signature": "sig-ours"}}},
            {"reasoningContent": {"redactedContent": "cmVkYWN0ZWQ="}},
            {"text": "Reading."},
            {"toolUse": {"toolUseId": sent_id, "name": "read", "input": {"path": "a.rs"}}},
        ]),
        "their thinking, unsigned thinking, the reasoning item and blank text are left out"
    );
    let result = &messages[2]["content"][0]["toolResult"];
    assert_eq!(result["toolUseId"], sent_id);
    assert_eq!(result["status"], "error");
    assert_eq!(
        result["content"][1],
        json!({"image": {"format": "jpeg", "source": {"bytes": "/9j/4AAQ"}}})
    );
    assert_eq!(
        result["content"].as_array().map(Vec::len),
        Some(2),
        "blank text left out"
    );
    assert_eq!(
        messages[2]["content"][1],
        json!({"text": "Try b.rs."}),
        "merged"
    );
    assert_eq!(messages[3]["content"][0]["toolUse"]["toolUseId"], "call_0");
    let ok = &messages[4]["content"][0]["toolResult"];
    assert_eq!(ok["toolUseId"], "call_0");
    assert!(ok.get("status").is_none(), "a success is not marked");
    assert!(!body.to_string().contains("owner"));
}

#[test]
fn signed_reasoning_goes_only_to_its_owner() {
    let tools = tools();
    let other = TargetIdentity::new("bedrock:eu-west-1:def");
    let body = request::body(&mixed(), &params(&tools, &other))
        .expect("body")
        .to_string();
    assert!(!body.contains("sig-ours") && !body.contains("cmVkYWN0ZWQ="));
    assert!(!body.contains("sig-theirs"));
    assert!(body.contains("Reading."));
    // No identity known: no owned reasoning at all.
    let body = request::body(&mixed(), &RequestParams::new("m", 64))
        .expect("body")
        .to_string();
    assert!(!body.contains("reasoningContent"));
}

#[test]
fn a_conversation_of_nothing_bedrock_takes_is_refused() {
    let c = Conversation::from(vec![Message::user_text("  "), Message::assistant_text("")]);
    assert_eq!(
        request::body(&c, &RequestParams::new("m", 64)),
        Err(crate::wire::WireError::EmptyConversation)
    );
}

/// Whether `id` is a `ToolUseId` as requests send them: 1 to 64 of `[a-zA-Z0-9_-]`.
fn bedrock_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(64),
        ..ProptestConfig::default()
    })]

    /// Whatever ids the models minted (any characters, any length, repeated), every id
    /// sent is a ToolUseId, no call id is sent twice, each result carries its call's id, and
    /// the same conversation always gets the same ids.
    #[test]
    fn tool_ids_are_bedrock_ids_unique_and_paired(
        ids in proptest::collection::vec(
            prop_oneof![
                "[a-zA-Z0-9_-]{1,20}",
                ".{0,80}",
                Just("call_0".to_owned()),
                Just("rb_0123456789abcdef0123456789abcdef".to_owned()),
            ],
            1..8,
        ),
    ) {
        let mut messages = vec![Message::user_text("go")];
        for id in &ids {
            messages.push(Message::assistant(vec![ContentBlock::tool_use(id.clone(), "ls", json!({}))]));
            messages.push(Message::user(vec![ContentBlock::tool_result(id.clone(), vec![ToolResultPart::text("ok")], false)]));
        }
        let conversation = Conversation::from(messages);
        let body = request::body(&conversation, &RequestParams::new("m", 64)).expect("body");
        let again = request::body(&conversation, &RequestParams::new("m", 64)).expect("body");
        prop_assert_eq!(&body, &again);
        let messages = body["messages"].as_array().expect("messages");
        let mut seen = BTreeSet::new();
        for pair in messages[1..].chunks(2) {
            let call = pair[0]["content"][0]["toolUse"]["toolUseId"].as_str().expect("call id");
            let result = pair[1]["content"][0]["toolResult"]["toolUseId"].as_str().expect("result id");
            prop_assert!(bedrock_id(call), "{}", call);
            prop_assert_eq!(call, result);
            prop_assert!(seen.insert(call.to_owned()), "{} twice", call);
        }
    }
}

#[test]
fn ids_bedrock_anthropic_and_openai_minted_are_sent_as_they_are() {
    for id in [
        "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
        "toolu_01A09q90qw90lq917835lq9",
        "call_abc123",
    ] {
        let c = Conversation::from(vec![
            Message::user_text("go"),
            Message::assistant(vec![ContentBlock::tool_use(id, "ls", json!({}))]),
            Message::user(vec![ContentBlock::tool_result(
                id,
                vec![ToolResultPart::text("ok")],
                false,
            )]),
        ]);
        let body = request::body(&c, &RequestParams::new("m", 64)).expect("body");
        assert_eq!(
            body["messages"][1]["content"][0]["toolUse"]["toolUseId"],
            id
        );
    }
}

#[test]
fn parse_reads_back_what_body_wrote() {
    let tools = tools();
    let ours = TargetIdentity::new("bedrock:us-east-1:abc");
    let body = request::body(&mixed(), &params(&tools, &ours)).expect("body");
    let parsed = request::parse(&body).expect("parses");
    assert_eq!(parsed.model, "", "the model is in the URL");
    assert!(!parsed.stream);
    assert_eq!(parsed.system.as_deref(), Some("Be brief."));
    assert_eq!(parsed.tools, tools);
    assert_eq!(parsed.max_tokens, Some(2048));
    let messages = parsed.conversation.messages();
    assert_eq!(messages.len(), 5);
    assert_eq!(messages[1].role, Role::Assistant);
    assert_eq!(
        messages[1].content[0],
        ContentBlock::thinking("ours", "sig-ours")
    );
    assert_eq!(
        messages[1].content[1],
        ContentBlock::redacted_thinking("cmVkYWN0ZWQ=")
    );
    let (id, name, input) = messages[1].tool_uses().next().expect("a call");
    assert_eq!(
        (id, name, input),
        (
            "rb_3be9d502e7553b89132691a23dd3c576",
            "read",
            &json!({"path": "a.rs"})
        )
    );
    let result = messages[2].tool_results().next().expect("a result");
    assert!(result.is_error);
    assert_eq!(result.tool_use_id, id);
    assert!(
        !messages[4]
            .tool_results()
            .next()
            .expect("a result")
            .is_error
    );
    assert_eq!(
        messages[2].content.last(),
        Some(&ContentBlock::text("Try b.rs."))
    );
}

#[test]
fn paths_carry_the_model_percent_encoded_and_read_back() {
    assert_eq!(
        path("anthropic.claude-3-5-sonnet-20240620-v1:0", true),
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
    );
    let arn =
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-sonnet-4-6";
    let p = path(arn, false);
    assert_eq!(
        p,
        "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-sonnet-4-6/converse"
    );
    assert_eq!(parse_path(&p), Some((arn.to_owned(), false)));
    assert_eq!(
        parse_path("/model/us.amazon.nova-pro-v1:0/converse-stream"),
        Some(("us.amazon.nova-pro-v1:0".to_owned(), true))
    );
    for bad in [
        "/model//converse",
        "/v1/messages",
        "/model/x%4/converse",
        "/model/x%+4/converse",
        "/model/%FF/converse",
    ] {
        assert_eq!(parse_path(bad), None, "{bad}");
    }
}

// ---- botocore's service model ----

/// Where `v` breaks the service model's shape `name` (with documents, any value; blobs,
/// base64 text; patterns of one character class checked, others not).
fn violations(shapes: &Value, name: &str, v: &Value, at: &str, out: &mut Vec<String>) {
    let shape = &shapes[name];
    if shape.get("document") == Some(&Value::Bool(true)) {
        return;
    }
    let ty = shape["type"].as_str().unwrap_or_default();
    match (ty, v) {
        ("structure", Value::Object(map)) => {
            let members = shape["members"].as_object().expect("members");
            for (key, value) in map {
                match members.get(key) {
                    Some(m) => violations(
                        shapes,
                        m["shape"].as_str().expect("shape"),
                        value,
                        &format!("{at}.{key}"),
                        out,
                    ),
                    None => out.push(format!("{at}: no member `{key}` in {name}")),
                }
            }
            for required in shape["required"].as_array().into_iter().flatten() {
                let required = required.as_str().expect("name");
                if !map.contains_key(required) && required != "modelId" {
                    out.push(format!("{at}: {name} requires `{required}`"));
                }
            }
            if shape.get("union") == Some(&Value::Bool(true)) && map.len() != 1 {
                out.push(format!("{at}: the union {name} takes exactly one member"));
            }
        }
        ("list", Value::Array(items)) => {
            if let Some(min) = shape["min"].as_u64() {
                if (items.len() as u64) < min {
                    out.push(format!("{at}: fewer than {min} items"));
                }
            }
            let member = shape["member"]["shape"].as_str().expect("member");
            for (i, item) in items.iter().enumerate() {
                violations(shapes, member, item, &format!("{at}[{i}]"), out);
            }
        }
        ("string", Value::String(s)) => {
            let len = s.chars().count() as u64;
            if shape["min"].as_u64().is_some_and(|min| len < min)
                || shape["max"].as_u64().is_some_and(|max| len > max)
            {
                out.push(format!("{at}: `{s}` of a length {name} refuses"));
            }
            if let Some(values) = shape["enum"].as_array() {
                if !values.iter().any(|e| e == v) {
                    out.push(format!("{at}: `{s}` is not one of {name}'s values"));
                }
            }
            if let Some(pattern) = shape["pattern"].as_str() {
                if !matches_class(pattern, s) {
                    out.push(format!("{at}: `{s}` does not match {name}'s `{pattern}`"));
                }
            }
        }
        ("blob", Value::String(s)) => {
            let base64 = s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
            if !base64 || s.len() % 4 != 0 {
                out.push(format!("{at}: a blob is base64 text"));
            }
        }
        ("integer" | "long", Value::Number(n)) => {
            let n = n.as_i64().unwrap_or(i64::MAX);
            if shape["min"].as_i64().is_some_and(|min| n < min) {
                out.push(format!("{at}: {n} below {name}'s minimum"));
            }
        }
        ("boolean", Value::Bool(_)) | ("float" | "double", Value::Number(_)) => {}
        _ => out.push(format!("{at}: {v} is not a {ty} ({name})")),
    }
}

/// `s` against a pattern of one character class repeated (`[a-zA-Z0-9_.:-]+`,
/// `[\s\S]*`), anchored or not; other patterns are not checked.
fn matches_class(pattern: &str, s: &str) -> bool {
    let p = pattern.trim_start_matches('^').trim_end_matches('$');
    let (class, min) = if let Some(c) = p.strip_suffix('+') {
        (c, 1)
    } else if let Some(c) = p.strip_suffix('*') {
        (c, 0)
    } else {
        return true;
    };
    let Some(class) = class.strip_prefix('[').and_then(|c| c.strip_suffix(']')) else {
        return true;
    };
    if class == r"\s\S" {
        return true;
    }
    let chars: Vec<char> = class.chars().collect();
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if i + 2 < chars.len() && chars[i + 1] == '-' {
            ranges.push((chars[i], chars[i + 2]));
            i += 3;
        } else {
            ranges.push((chars[i], chars[i]));
            i += 1;
        }
    }
    s.chars().count() >= min
        && s.chars()
            .all(|c| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi))
}

fn service_model() -> Value {
    serde_json::from_str(SERVICE_MODEL).expect("the excerpt is JSON")
}

#[test]
fn the_checked_in_service_model_says_what_the_module_assumes() {
    let model = service_model();
    let shapes = &model["shapes"];
    assert_eq!(
        model["operations"]["ConverseStream"]["http"]["requestUri"],
        "/model/{modelId}/converse-stream"
    );
    assert_eq!(
        model["operations"]["Converse"]["http"]["requestUri"],
        "/model/{modelId}/converse"
    );
    // ToolUseId: 1 to 64 characters; the pattern, widened in 2026, still takes the narrower
    // set requests keep to.
    let id = &shapes["ToolUseId"];
    assert_eq!(
        (id["min"].as_u64(), id["max"].as_u64()),
        (Some(1), Some(64))
    );
    let pattern = id["pattern"].as_str().expect("pattern");
    assert!(matches_class(pattern, "rb_0123456789abcdef-_XYZ"));
    assert!(!matches_class(pattern, "has space"));
    assert_eq!(shapes["ToolName"]["pattern"], "[a-zA-Z0-9_-]+");
    // The stream's events and exceptions, by the member names the decoder reads.
    let members: BTreeSet<&str> = shapes["ConverseStreamOutput"]["members"]
        .as_object()
        .expect("members")
        .keys()
        .map(String::as_str)
        .collect();
    for name in [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
        "internalServerException",
        "modelStreamErrorException",
        "validationException",
        "throttlingException",
        "serviceUnavailableException",
    ] {
        assert!(members.contains(name), "{name}");
    }
    let stops: Vec<&str> = shapes["StopReason"]["enum"]
        .as_array()
        .expect("enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for stop in [
        "end_turn",
        "tool_use",
        "max_tokens",
        "stop_sequence",
        "guardrail_intervened",
        "content_filtered",
    ] {
        assert!(stops.contains(&stop), "{stop}");
    }
}

#[test]
fn request_bodies_conform_to_the_service_model() {
    let model = service_model();
    let tools = tools();
    let ours = TargetIdentity::new("bedrock:us-east-1:abc");
    let body = request::body(&mixed(), &params(&tools, &ours)).expect("body");
    let mut out = Vec::new();
    violations(
        &model["shapes"],
        "ConverseStreamRequest",
        &body,
        "$",
        &mut out,
    );
    assert_eq!(out, Vec::<String>::new());
    // The checker is not vacuous.
    let mut bad = body.clone();
    bad["messages"][0]["content"][0] = json!({"text": "a", "image": {}});
    bad["inferenceConfig"]["max_tokens"] = json!(1);
    bad["messages"][1]["content"][3]["toolUse"]["toolUseId"] = json!("a.b c");
    violations(
        &model["shapes"],
        "ConverseStreamRequest",
        &bad,
        "$",
        &mut out,
    );
    for wanted in [
        "exactly one member",
        "no member `max_tokens`",
        "`a.b c` does not match",
    ] {
        assert!(out.iter().any(|o| o.contains(wanted)), "{wanted}: {out:#?}");
    }
}

#[test]
fn encoded_events_and_bodies_conform_to_the_service_model() {
    let model = service_model();
    let shapes = &model["shapes"];
    let mut out = Vec::new();
    for sent in responses() {
        for frame in encode::stream(&sent, "m", "id") {
            let mut d = crate::wire::eventstream::FrameDecoder::new();
            d.feed_with(&frame, |f| {
                let ty = f.string(":event-type").expect("an event");
                let shape = shapes["ConverseStreamOutput"]["members"][ty]["shape"]
                    .as_str()
                    .expect("an event of the model");
                let mut payload: Value = serde_json::from_slice(f.payload()).expect("JSON");
                // The padding is not in the model (aws/aws-sdk-js-v3#6919).
                assert!(payload
                    .as_object_mut()
                    .and_then(|p| p.remove("p"))
                    .is_some());
                violations(shapes, shape, &payload, ty, &mut out);
            })
            .expect("a frame");
        }
        let body = encode::response_json(&sent, "m", "id");
        violations(shapes, "ConverseResponse", &body, "$", &mut out);
    }
    let exception = encode::stream_error_event("throttlingException", "slow down");
    let mut d = crate::wire::eventstream::FrameDecoder::new();
    d.feed_with(&exception, |f| {
        let ty = f.string(":exception-type").expect("a type");
        let shape = shapes["ConverseStreamOutput"]["members"][ty]["shape"]
            .as_str()
            .expect("an exception of the model");
        let payload: Value = serde_json::from_slice(f.payload()).expect("JSON");
        violations(shapes, shape, &payload, ty, &mut out);
    })
    .expect("a frame");
    assert_eq!(out, Vec::<String>::new());
}

// ---- through the dispatch: what every shell calls ----

mod dispatch {
    use crate::conversation::{ContentBlock, Conversation, Message};
    use crate::failure::{FailureKind, ProviderKind, TransportFault};
    use crate::response::{AssistantResponse, StopReason, Usage};
    use crate::tool::ToolSpec;
    use crate::wire::{
        bedrock_request_target, carries_tool_error_flag, encode_error_body, encode_error_headers,
        encode_response_json, encode_stream, encode_stream_error_event, parse_request,
        parse_response, request_body, request_path, RequestOptions, RequestParams, StreamDecoder,
        ToolChoice,
    };
    use crate::{classify::classify_http, Headers};
    use serde_json::json;

    const B: ProviderKind = ProviderKind::Bedrock;

    fn answer() -> AssistantResponse {
        AssistantResponse::new(
            Message::assistant(vec![
                ContentBlock::text("Reading it."),
                ContentBlock::tool_use("tooluse_1", "read", json!({"path": "a.rs"})),
            ]),
            StopReason::ToolUse,
        )
        .with_usage(Usage::new(120, 30))
    }

    #[test]
    fn the_stream_decoder_reads_event_stream_frames_in_any_split() {
        let sent = answer();
        let bytes = encode_stream(B, &sent, "m", "id").concat();
        for cut in (0..bytes.len()).step_by(7) {
            let mut d = StreamDecoder::new(B);
            d.feed(&bytes[..cut]).unwrap();
            d.feed(&bytes[cut..]).unwrap();
            assert!(d.is_complete(), "split at {cut}");
            assert_eq!(d.finish().unwrap(), sent, "split at {cut}");
        }
        let body = encode_response_json(B, &sent, "m", "id").to_string();
        assert_eq!(parse_response(B, body.as_bytes()).unwrap(), sent);
    }

    #[test]
    fn a_cut_or_corrupt_stream_fails_through_the_dispatch_and_stays_failed() {
        let bytes = encode_stream(B, &answer(), "m", "id").concat();
        let mut d = StreamDecoder::new(B);
        d.feed(&bytes[..bytes.len() / 2]).unwrap();
        assert_eq!(
            d.finish().unwrap_err().transport,
            Some(TransportFault::StreamCut)
        );
        let mut broken = bytes.clone();
        broken[20] ^= 0xff;
        let mut d = StreamDecoder::new(B);
        let first = d.feed(&broken).unwrap_err();
        assert_eq!(d.feed(b"more").unwrap_err(), first);
        assert_eq!(d.finish().unwrap_err(), first);
    }

    #[test]
    fn an_in_stream_throttle_is_a_rate_limit_like_its_http_twin() {
        let mut bytes = encode_stream(B, &answer(), "m", "id")
            .into_iter()
            .take(2)
            .collect::<Vec<_>>()
            .concat();
        bytes.extend(encode_stream_error_event(
            B,
            "ThrottlingException",
            "Too many requests",
        ));
        let mut d = StreamDecoder::new(B);
        let f = d.feed(&bytes).unwrap_err();
        assert_eq!(f.kind, FailureKind::RateLimited);
        let headers: Headers = encode_error_headers(B, 429, Some("ThrottlingException"))
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v))
            .collect();
        let body = encode_error_body(B, 429, Some("ThrottlingException"), "Too many requests");
        let http = classify_http(B, 429, &headers, &body, None);
        assert_eq!(http.kind, f.kind);
        assert_eq!(http.error_type.as_deref(), Some("ThrottlingException"));
    }

    #[test]
    fn paths_options_and_requests_through_the_dispatch() {
        let model = "anthropic.claude-sonnet-4-6-v1:0";
        let path = request_path(B, model, true);
        assert_eq!(
            path,
            "/model/anthropic.claude-sonnet-4-6-v1%3A0/converse-stream"
        );
        assert_eq!(
            bedrock_request_target(&path),
            Some((model.to_owned(), true))
        );
        assert!(carries_tool_error_flag(B));
        let tools = [ToolSpec {
            name: "read".into(),
            description: "Reads".into(),
            input_schema: json!({"type": "object"}),
        }];
        let options = RequestOptions::new()
            .with_temperature(0.5)
            .with_stop_sequence("END")
            .with_tool_choice(ToolChoice::tool("read"));
        let conversation = Conversation::from(vec![Message::user_text("hi")]);
        let params = RequestParams::new(model, 4096)
            .with_tools(&tools)
            .with_options(&options);
        let body = request_body(B, &conversation, &params).unwrap();
        assert_eq!(
            body["inferenceConfig"],
            json!({"maxTokens": 4096, "temperature": 0.5, "stopSequences": ["END"]})
        );
        assert_eq!(
            body["toolConfig"]["toolChoice"],
            json!({"tool": {"name": "read"}})
        );
        assert!(body.get("additionalModelRequestFields").is_none());
        let thinking = RequestOptions::new().with_thinking_budget(2048);
        let body = request_body(B, &conversation, &params.with_options(&thinking)).unwrap();
        assert_eq!(
            body["additionalModelRequestFields"],
            json!({"thinking": {"type": "enabled", "budget_tokens": 2048}})
        );
        let parsed = parse_request(B, body.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.max_tokens, Some(4096));
        for refused in [
            RequestOptions::new().with_tool_choice(ToolChoice::None),
            RequestOptions::new().with_parallel_tool_calls(false),
            RequestOptions::new().with_user_id("u"),
            RequestOptions::new().with_temperature(1.5),
            RequestOptions::new()
                .with_thinking_budget(2048)
                .with_temperature(0.5),
            RequestOptions::new().with_reasoning_effort(crate::wire::ReasoningEffort::High),
            RequestOptions::new().with_extra_field("messages", json!([])),
            RequestOptions::new().with_extra_field("inferenceConfig", json!({"maxTokens": 1})),
        ] {
            assert!(refused.check(B, 4096).is_err(), "{refused:?}");
        }
    }
}
