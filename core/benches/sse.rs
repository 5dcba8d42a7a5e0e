//! SSE decode + assemble throughput (MB/s) of `rebound_core::wire`, beside the
//! `eventsource-stream` crate decoding the same bytes.
//!
//! Benches per input: `rebound_decode_assemble` (the deltas lent, `StreamDecoder::feed_with`),
//! `rebound_decode_assemble_owned` (each delta copied into an owned `StreamDelta`,
//! `feed_into`), `rebound_sse_only` (the framing alone) and `eventsource_stream_sse_only`.
//!
//! Inputs (a few MB each, fed in 16 KiB reads like a network body):
//! - `anthropic_encoded`: one long Anthropic response (text, thinking, tool calls with large
//!   JSON inputs) rendered by `wire::encode_stream`;
//! - `openai_capture_repeated`: the captured gpt-4o stream from the fixtures, its content
//!   chunks repeated until the body is a few MB;
//! - `responses_encoded`: the same long response rendered as an OpenAI Responses stream (its
//!   thinking left out; each item whole again in `output_item.done` and `response.completed`,
//!   as the API sends them);
//! - `responses_capture_repeated`: the openai-node Responses capture from the fixtures, its
//!   `output_text.delta` events repeated until the body is a few MB.
//!
//! Run: `cargo bench -p rebound-core --features server --bench sse -j2 -- --warm-up-time 1 --measurement-time 3`
//!
//! Profile one pass instead (instruction counts do not depend on the machine's load): build
//! with `cargo bench -p rebound-core --features server --bench sse --no-run`, then run the
//! binary it names with `REBOUND_SSE_PROFILE=<what>:<input>` (`what` is `decode`, `owned` or
//! `sse`, `input` one of the names above) under `valgrind --tool=callgrind
//! --toggle-collect='*profile_pass*'`, which counts the decoding only, not the building of
//! the input.

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use rebound_core::wire::sse::{SseDecoder, SseError};
use rebound_core::wire::{encode_stream, StreamDecoder, StreamDelta, StreamLimits};
use rebound_core::{AssistantResponse, ContentBlock, Message, ProviderKind, Usage};
use serde_json::json;
use std::hint::black_box;

const READ: usize = 16 * 1024;
const TARGET_BYTES: usize = 4 << 20;

/// One long response: text, thinking, tool calls with large JSON inputs.
fn long_response() -> AssistantResponse {
    let words = [
        "retry ", "backoff ", "jitter ", "stream ", "déjà ", "vu ", "中文 ", "😀 ", "\n",
    ];
    let mut text = String::new();
    let mut i = 0usize;
    while text.len() < TARGET_BYTES / 2 {
        text.push_str(words[i % words.len()]);
        i = i.wrapping_mul(31).wrapping_add(7) % 1009;
    }
    let mut content = vec![
        ContentBlock::Thinking {
            thinking: text[..TARGET_BYTES / 8].to_owned(),
            signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into(),
            owner: None,
        },
        ContentBlock::text(text),
    ];
    for n in 0..8 {
        let lines: Vec<String> = (0..2000)
            .map(|l| format!("line {l} of file {n}: fn main() {{}}"))
            .collect();
        content.push(ContentBlock::tool_use(
            format!("toolu_{n}"),
            "write_file",
            json!({"path": format!("src/file_{n}.rs"), "lines": lines}),
        ));
    }
    AssistantResponse::tool_use(Message::assistant(content)).with_usage(Usage::new(1000, 900_000))
}

fn anthropic_encoded() -> Vec<u8> {
    encode_stream(
        ProviderKind::Anthropic,
        &long_response(),
        "claude-bench",
        "msg_bench",
    )
    .concat()
}

fn responses_encoded() -> Vec<u8> {
    encode_stream(
        ProviderKind::OpenAiResponses,
        &long_response(),
        "gpt-bench",
        "resp_bench",
    )
    .concat()
}

fn gemini_encoded() -> Vec<u8> {
    encode_stream(
        ProviderKind::Gemini,
        &long_response(),
        "gemini-bench",
        "resp-bench",
    )
    .concat()
}

/// The captured Gemini text stream with its first chunk repeated up to the target size (each
/// chunk is a whole response with usage and identity, as the API sends them).
fn gemini_capture_repeated() -> Vec<u8> {
    let capture = include_str!("../fixtures/streams/gemini/text_stream.sse");
    let events: Vec<&str> = capture.split_inclusive("\n\n").collect();
    let mut out = String::new();
    while out.len() < TARGET_BYTES {
        out.push_str(events[0]);
    }
    out.push_str(&events[1..].concat());
    out.into_bytes()
}

fn responses_capture_repeated() -> Vec<u8> {
    let capture = include_str!("../fixtures/streams/responses/text_stream.sse");
    let events: Vec<&str> = capture.split_inclusive("\n\n").collect();
    let deltas: String = events
        .iter()
        .filter(|e| e.contains("\"type\":\"response.output_text.delta\""))
        .copied()
        .collect();
    let first = events
        .iter()
        .position(|e| e.contains("response.output_text.delta"))
        .expect("the capture has deltas");
    let mut out = events[..first].concat();
    while out.len() < TARGET_BYTES {
        out.push_str(&deltas);
    }
    out.push_str(&events[first..].concat());
    out.into_bytes()
}

fn openai_capture_repeated() -> Vec<u8> {
    let capture = include_str!("../fixtures/streams/openai/text_with_usage.sse");
    let events: Vec<&str> = capture.split_inclusive("\n\n").collect();
    let (head, rest) = events.split_at(1);
    let (body, tail) = rest.split_at(rest.len() - 3);
    let mut out = head.concat();
    let body = body.concat();
    while out.len() < TARGET_BYTES {
        out.push_str(&body);
    }
    out.push_str(&tail.concat());
    out.into_bytes()
}

/// Decode + assemble, the deltas lent (`StreamDecoder::feed_with`).
#[inline(never)]
fn rebound_decode_assemble(provider: ProviderKind, bytes: &[u8]) -> usize {
    let mut d = StreamDecoder::new(provider);
    let mut shown = 0;
    for chunk in bytes.chunks(READ) {
        d.feed_with(chunk, |delta| {
            if let StreamDelta::Text { text, .. } = delta {
                shown += text.len();
            }
        })
        .expect("valid stream");
    }
    let r = d.finish().expect("complete response");
    r.message.content.len() + shown
}

/// Decode + assemble, the deltas owned (`StreamDecoder::feed_into`, as before lending).
#[inline(never)]
fn rebound_decode_assemble_owned(provider: ProviderKind, bytes: &[u8]) -> usize {
    let mut d = StreamDecoder::new(provider);
    let mut deltas = Vec::new();
    for chunk in bytes.chunks(READ) {
        d.feed_into(chunk, &mut deltas).expect("valid stream");
        deltas.clear();
    }
    let r = d.finish().expect("complete response");
    r.message.content.len()
}

#[inline(never)]
fn rebound_sse_only(provider: ProviderKind, bytes: &[u8]) -> usize {
    let mut d = SseDecoder::with_limits(StreamLimits::for_provider(provider).sse);
    let mut n = 0;
    for chunk in bytes.chunks(READ) {
        d.feed_with(chunk, |e| {
            n += e.data.len();
            Ok::<(), SseError>(())
        })
        .expect("within limits");
    }
    n
}

fn eventsource_stream_sse_only(bytes: &[u8]) -> usize {
    let stream = futures::stream::iter(bytes.chunks(READ).map(Ok::<_, std::convert::Infallible>))
        .eventsource();
    futures::executor::block_on(stream.fold(0usize, |n, e| async move {
        n + e.map(|e| e.data.len()).unwrap_or(0)
    }))
}

fn inputs() -> [(&'static str, ProviderKind, Vec<u8>); 6] {
    [
        (
            "anthropic_encoded",
            ProviderKind::Anthropic,
            anthropic_encoded(),
        ),
        (
            "openai_capture_repeated",
            ProviderKind::OpenAi,
            openai_capture_repeated(),
        ),
        (
            "responses_encoded",
            ProviderKind::OpenAiResponses,
            responses_encoded(),
        ),
        (
            "responses_capture_repeated",
            ProviderKind::OpenAiResponses,
            responses_capture_repeated(),
        ),
        ("gemini_encoded", ProviderKind::Gemini, gemini_encoded()),
        (
            "gemini_capture_repeated",
            ProviderKind::Gemini,
            gemini_capture_repeated(),
        ),
    ]
}

/// One pass of `what` (`decode` or `sse`) over the input named `input`, for a profiler.
#[inline(never)]
fn profile_pass(what: &str, provider: ProviderKind, bytes: &[u8]) -> usize {
    match what {
        "decode" => rebound_decode_assemble(provider, bytes),
        "owned" => rebound_decode_assemble_owned(provider, bytes),
        "sse" => rebound_sse_only(provider, bytes),
        other => panic!("unknown profile target {other:?}: decode, owned or sse"),
    }
}

fn profile(spec: &str) {
    let (what, name) = spec
        .split_once(':')
        .expect("REBOUND_SSE_PROFILE is <decode|owned|sse>:<input>");
    let (_, provider, bytes) = inputs()
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .unwrap_or_else(|| panic!("unknown input {name:?}"));
    let n = profile_pass(what, provider, black_box(&bytes));
    println!("{what} {name}: {} bytes, result {n}", bytes.len());
}

fn bench(c: &mut Criterion) {
    let inputs = inputs();
    let mut group = c.benchmark_group("sse");
    for (name, provider, bytes) in &inputs {
        // Both decoders must see the same events before their speed is compared.
        assert_eq!(
            rebound_sse_only(*provider, bytes),
            eventsource_stream_sse_only(bytes),
            "{name}"
        );
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("rebound_decode_assemble", name),
            bytes,
            |b, bytes| {
                b.iter(|| black_box(rebound_decode_assemble(*provider, black_box(bytes))));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("rebound_decode_assemble_owned", name),
            bytes,
            |b, bytes| {
                b.iter(|| black_box(rebound_decode_assemble_owned(*provider, black_box(bytes))));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("rebound_sse_only", name),
            bytes,
            |b, bytes| {
                b.iter(|| black_box(rebound_sse_only(*provider, black_box(bytes))));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("eventsource_stream_sse_only", name),
            bytes,
            |b, bytes| b.iter(|| black_box(eventsource_stream_sse_only(black_box(bytes)))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);

fn main() {
    if let Ok(spec) = std::env::var("REBOUND_SSE_PROFILE") {
        profile(&spec);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
