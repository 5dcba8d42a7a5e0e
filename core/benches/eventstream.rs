//! AWS event-stream framing throughput (MB/s) of `rebound_core::wire::eventstream`: frames
//! found, both CRC-32s checked and every header parsed, over a Bedrock-shaped body.
//!
//! Input (about 4 MiB, fed in 16 KiB reads like a network body): `ConverseStream` events as
//! Bedrock frames them (`:event-type`, `:content-type`, `:message-type` headers; a JSON
//! payload): text deltas of 20 to 200 bytes, and now and then a tool call's input delta of a
//! few KiB.
//!
//! Also decode + assemble, the whole of what a Bedrock stream costs: `wire::StreamDecoder`
//! for `ProviderKind::Bedrock` (framing, each event's JSON, the UI deltas, the message
//! assembled) over what `wire::encode_stream` makes of a long answer (text in pieces, tool
//! calls whose inputs stream in fragments, as Bedrock sends them).
//!
//! Run: `cargo bench -p rebound-core --features server --bench eventstream -j2 -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, Criterion, Throughput};
use rebound_core::wire::eventstream::{encode_frame, FrameDecoder, HeaderValue};
use rebound_core::wire::{encode_stream, StreamDecoder, StreamDelta};
use rebound_core::{AssistantResponse, ContentBlock, Message, ProviderKind, Usage};
use serde_json::json;
use std::hint::black_box;

const READ: usize = 16 * 1024;
const TARGET_BYTES: usize = 4 << 20;

fn event(kind: &str, payload: &str) -> Vec<u8> {
    encode_frame(
        &[
            (":event-type", HeaderValue::String(kind)),
            (":content-type", HeaderValue::String("application/json")),
            (":message-type", HeaderValue::String("event")),
        ],
        payload.as_bytes(),
    )
}

fn bedrock_body() -> Vec<u8> {
    let mut body = event("messageStart", r#"{"p":"abcd","role":"assistant"}"#);
    let mut i = 0usize;
    while body.len() < TARGET_BYTES {
        let payload = if i % 50 == 49 {
            let input = "{\\\"path\\\": \\\"src/lib.rs\\\", \\\"line\\\": 42} ".repeat(100);
            format!(
                r#"{{"contentBlockIndex":1,"delta":{{"toolUse":{{"input":"{input}"}}}},"p":"abcdefgh"}}"#
            )
        } else {
            let text = "retry backoff jitter ".repeat(1 + i % 10);
            format!(r#"{{"contentBlockIndex":0,"delta":{{"text":"{text}"}},"p":"abcdefghij"}}"#)
        };
        body.extend(event("contentBlockDelta", &payload));
        i += 1;
    }
    body.extend(event(
        "messageStop",
        r#"{"p":"abcdefghijklm","stopReason":"end_turn"}"#,
    ));
    body
}

/// Frames in `body` fed in network-sized reads: the payload bytes seen.
fn frame_only(body: &[u8]) -> usize {
    let mut decoder = FrameDecoder::new();
    let mut payload = 0;
    for read in body.chunks(READ) {
        decoder
            .feed_with(read, |frame| {
                payload += frame.payload().len();
                black_box(frame.string(":event-type"));
            })
            .expect("a valid body");
    }
    assert!(decoder.is_between_frames());
    payload
}

/// A long answer as Bedrock would stream it: paragraphs of text and tool calls writing files.
fn bedrock_answer() -> Vec<u8> {
    let mut content = Vec::new();
    let mut n = 0;
    let paragraph = "Retries with backoff and jitter keep the agent alive through a brownout. ";
    while content.len() < 40 {
        content.push(ContentBlock::text(paragraph.repeat(40)));
        let lines: Vec<String> = (0..400)
            .map(|l| format!("line {l} of file {n}: fn main() {{}}"))
            .collect();
        content.push(ContentBlock::tool_use(
            format!("tooluse_{n}"),
            "write_file",
            json!({"path": format!("src/file_{n}.rs"), "lines": lines}),
        ));
        n += 1;
    }
    let response = AssistantResponse::tool_use(Message::assistant(content))
        .with_usage(Usage::new(1000, 900_000));
    encode_stream(ProviderKind::Bedrock, &response, "m", "id").concat()
}

/// Decode + assemble, the deltas lent: what the runner pays for a Bedrock stream.
fn decode_assemble(body: &[u8]) -> usize {
    let mut decoder = StreamDecoder::new(ProviderKind::Bedrock);
    let mut shown = 0;
    for read in body.chunks(READ) {
        decoder
            .feed_with(read, |delta| {
                if let StreamDelta::Text { text, .. } = delta {
                    shown += text.len();
                }
            })
            .expect("a valid stream");
    }
    decoder
        .finish()
        .expect("a whole answer")
        .message
        .content
        .len()
        + shown
}

fn bench(c: &mut Criterion) {
    let answer = bedrock_answer();
    let mut group = c.benchmark_group("bedrock");
    group.throughput(Throughput::Bytes(answer.len() as u64));
    group.bench_function("rebound_decode_assemble", |b| {
        b.iter(|| black_box(decode_assemble(black_box(&answer))));
    });
    group.finish();
    let body = bedrock_body();
    let mut group = c.benchmark_group("eventstream");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("rebound_frames_checked", |b| {
        b.iter(|| black_box(frame_only(black_box(&body))));
    });
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
