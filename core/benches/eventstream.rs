//! AWS event-stream framing throughput (MB/s) of `rebound_core::wire::eventstream`: frames
//! found, both CRC-32s checked and every header parsed, over a Bedrock-shaped body.
//!
//! Input (about 4 MiB, fed in 16 KiB reads like a network body): `ConverseStream` events as
//! Bedrock frames them (`:event-type`, `:content-type`, `:message-type` headers; a JSON
//! payload): text deltas of 20 to 200 bytes, and now and then a tool call's input delta of a
//! few KiB.
//!
//! Run: `cargo bench -p rebound-core --features server --bench eventstream -j2 -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, Criterion, Throughput};
use rebound_core::wire::eventstream::{encode_frame, FrameDecoder, HeaderValue};
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

fn bench(c: &mut Criterion) {
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
