//! Fuzz entry points for rebound: one function per target, each taking arbitrary bytes.
//!
//! They are shared by two callers:
//!
//! - the cargo-fuzz binaries in `fuzz/fuzz_targets/` (nightly, libFuzzer; see `fuzz/README.md`);
//! - the ordinary test `effects/tests/it/hostile_fuzz_corpus.rs`, which includes this file with
//!   `#[path]` and runs every entry point over the committed seed corpus `fuzz/corpus/<target>/`
//!   on stable, so `cargo test --workspace` replays everything the fuzzers ever kept.
//!
//! Each entry point only returns or panics. A panic is a bug: either in the code under test
//! (it panicked on outside input) or a broken property asserted here (a parse that does not
//! survive its own round trip, a decoder whose result depends on how the bytes were split,
//! a message that is not bounded). Only public APIs are used, as a hostile server, file or
//! model would reach them.

#![allow(clippy::missing_panics_doc)]

use rebound_core::classify::{classify_error_body, classify_http, delay_hints};
use rebound_core::wire::sse::{SseDecoder, SseLimits};
use rebound_core::wire::{parse_request, parse_response, StreamDecoder, StreamLimits};
use rebound_core::{
    BatchOutcome, Headers, ProviderFailure, ProviderKind, ToolCall, ToolFailure, ToolOutput,
    ToolSpec,
};
use rebound_effects::session::{
    decode_session, decode_session_file, encode_session, message_line, SessionForm, SessionHeader,
};
use rebound_effects::tools::{FnTool, ToolSet};
use rebound_sim::{replay, simulate, Scenario, SimConfig, Trace};

/// The names of all targets, as used for `fuzz/corpus/<name>/` and the fuzz binaries.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("sse", sse),
    ("stream_anthropic", stream_anthropic),
    ("stream_openai", stream_openai),
    ("stream_responses", stream_responses),
    ("stream_gemini", stream_gemini),
    ("stream_bedrock", stream_bedrock),
    ("classify", classify),
    ("wire_bodies", wire_bodies),
    ("session", session),
    ("trace", trace),
    ("scenario", scenario),
    ("tool_input", tool_input),
];

/// Splits `bytes` into chunks of 1 to 17 bytes chosen by `seed`, as a network might.
fn chunks(seed: u8, bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = bytes;
    let mut state = u32::from(seed) | 1;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let n = (1 + (state >> 16) as usize % 17).min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// Small limits (so the fuzzer reaches them) or the defaults, by one bit of `knob`.
fn sse_limits(knob: u8) -> SseLimits {
    if knob & 0x80 == 0 {
        SseLimits::default()
    } else {
        SseLimits::default()
            .with_max_line_bytes(16 + usize::from(knob & 0x0f) * 16)
            .with_max_event_bytes(64 + usize::from((knob >> 4) & 0x07) * 64)
    }
}

/// The SSE decoder: whatever the split, the same events and the same error; events respect
/// the limits.
pub fn sse(data: &[u8]) {
    let Some((&knob, body)) = data.split_first() else {
        return;
    };
    let limits = sse_limits(knob);
    let run = |pieces: Vec<&[u8]>| {
        let mut decoder = SseDecoder::with_limits(limits);
        let mut events = Vec::new();
        let mut error = None;
        for piece in pieces {
            if let Err(e) = decoder.feed(piece, &mut events) {
                error = Some(e);
                break;
            }
        }
        let last = match error {
            Some(e) => {
                assert_eq!(decoder.feed(b"data: x\n\n", &mut Vec::new()), Err(e));
                Err(e)
            }
            None => decoder.finish(),
        };
        (events, error, last)
    };
    let whole = run(vec![body]);
    let split = run(chunks(knob, body));
    assert_eq!(
        whole, split,
        "the events depend on how the stream was split"
    );
    for event in &whole.0 {
        let size = event.data.len() + event.event.as_deref().map_or(0, str::len);
        assert!(size <= limits.max_event_bytes, "event of {size} bytes");
    }
}

fn stream(kind: ProviderKind, data: &[u8]) {
    let Some((&knob, body)) = data.split_first() else {
        return;
    };
    let limits = StreamLimits::default()
        .with_sse(sse_limits(knob))
        .with_max_message_bytes(if knob & 0x80 == 0 {
            StreamLimits::default().max_message_bytes
        } else {
            256
        });
    let run = |pieces: Vec<&[u8]>| {
        let mut decoder = StreamDecoder::with_limits(kind, limits);
        let mut deltas = Vec::new();
        for piece in pieces {
            // `feed_into` keeps the deltas decoded before a failure in the same call, so the
            // comparison below does not depend on where the chunk boundaries fell.
            match decoder.feed_into(piece, &mut deltas) {
                Ok(()) => {}
                Err(f) => {
                    // Failed decoders stay failed, with the same failure.
                    assert_eq!(decoder.feed(b"\n\n").err(), Some(f));
                    break;
                }
            }
            if decoder.is_complete() {
                break;
            }
        }
        (deltas, decoder.finish())
    };
    let whole = run(vec![body]);
    let split = run(chunks(knob, body));
    assert_eq!(
        whole, split,
        "the outcome depends on how the stream was split"
    );
    if let Err(failure) = &whole.1 {
        check_failure(failure);
    }
}

/// The Anthropic stream decoder and assembler (see [`sse`] for the properties).
pub fn stream_anthropic(data: &[u8]) {
    stream(ProviderKind::Anthropic, data);
}

/// The OpenAI Chat Completions stream decoder and assembler.
pub fn stream_openai(data: &[u8]) {
    stream(ProviderKind::OpenAi, data);
}

/// The OpenAI Responses stream decoder and assembler (typed events, whole items settling
/// the blocks their deltas built, in-stream `response.failed`).
pub fn stream_responses(data: &[u8]) {
    stream(ProviderKind::OpenAiResponses, data);
}

/// The Gemini stream decoder and assembler (whole responses per event, thought
/// signatures, minted call ids, finish reasons, in-stream `error` chunks).
pub fn stream_gemini(data: &[u8]) {
    stream(ProviderKind::Gemini, data);
}

/// The Bedrock ConverseStream decoder (AWS event-stream framing with CRC checks, then
/// assembly; in-stream exceptions).
pub fn stream_bedrock(data: &[u8]) {
    stream(ProviderKind::Bedrock, data);
}

/// What every classified failure must be: one line, bounded. (Delay hints have no bound of
/// their own: a huge well-formed one is kept, saturated, for the retry policy's cap.)
fn check_failure(f: &ProviderFailure) {
    assert!(!f.message.contains(['\n', '\r']), "multi-line message");
    assert!(f.message.chars().count() <= 2_600, "unbounded message");
    for s in [&f.error_type, &f.request_id].into_iter().flatten() {
        assert!(s.chars().count() <= 201, "unbounded field {s:?}");
        assert!(!s.contains(['\n', '\r']), "multi-line field {s:?}");
    }
}

/// Error classification: bytes 0–1 the status, byte 2 flags (bit 0 OpenAI, bit 1 wall time
/// known, bit 2 with bit 0 the Responses API, bit 3 Gemini, bit 4 Bedrock), bytes 3–10 the
/// wall time, then
/// header lines (`name: value`), a NUL, the body.
pub fn classify(data: &[u8]) {
    if data.len() < 11 {
        return;
    }
    let status = u16::from_be_bytes([data[0], data[1]]);
    let flags = data[2];
    let mut now = [0u8; 8];
    now.copy_from_slice(&data[3..11]);
    let now = (flags & 2 != 0).then(|| u64::from_be_bytes(now));
    let rest = &data[11..];
    let (head, body) = match rest.iter().position(|&b| b == 0) {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (rest, &[][..]),
    };
    let headers: Headers = String::from_utf8_lossy(head)
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.to_owned(), value.to_owned()))
        })
        .collect();
    let kind = match (flags & 1, flags & 4) {
        _ if flags & 16 != 0 => ProviderKind::Bedrock,
        _ if flags & 8 != 0 => ProviderKind::Gemini,
        (0, _) => ProviderKind::Anthropic,
        (_, 0) => ProviderKind::OpenAi,
        _ => ProviderKind::OpenAiResponses,
    };
    let f = classify_http(kind, status, &headers, body, now);
    check_failure(&f);
    assert_eq!(f.status, Some(status));
    // Classification is a pure function.
    assert_eq!(f, classify_http(kind, status, &headers, body, now));
    let hints = delay_hints(&headers, now);
    assert_eq!(hints.retry_after_ms, f.retry_after_ms);
    assert_eq!(hints.rate_limit_reset_ms, f.rate_limit_reset_ms);
    check_failure(&classify_error_body(kind, None, body));
}

/// Non-streaming bodies: `parse_response` and `parse_request` of every wire format.
pub fn wire_bodies(data: &[u8]) {
    for &kind in ProviderKind::ALL {
        if let Err(f) = parse_response(kind, data) {
            check_failure(&f);
        }
        let _ = parse_request(kind, data);
    }
}

/// Session files, in both forms (transcripts and the older whole files): a file that loads
/// writes as a transcript that loads back to the same conversation and re-encodes
/// byte-identically; in a transcript, a line appended where the decoder says is loaded, and
/// half of it (a torn append) is ignored.
pub fn session(data: &[u8]) {
    let Ok(decoded) = decode_session_file(data) else {
        return;
    };
    let conversation = &decoded.conversation;
    assert_eq!(
        decode_session(data).as_ref(),
        Ok(conversation),
        "two decoders disagree"
    );
    let header = SessionHeader {
        created: "2026-01-01T00:00:00Z".to_owned(),
        ..SessionHeader::now()
    };
    let saved = encode_session(&header, conversation);
    let reloaded = decode_session(&saved).unwrap_or_else(|e| {
        panic!("a saved session does not load: {e}");
    });
    assert_eq!(
        &reloaded, conversation,
        "saving a loaded session changed it"
    );
    assert_eq!(
        encode_session(&header, &reloaded),
        saved,
        "saving a loaded session changed its bytes"
    );

    let SessionForm::Transcript(_) = decoded.form else {
        assert_eq!(decoded.complete_len, data.len());
        return;
    };
    assert!(decoded.complete_len <= data.len());
    // What the store writes on the next append: the complete lines, a newline if the last
    // one lost it, the new line.
    let mut appended = data[..decoded.complete_len].to_vec();
    if appended.last() != Some(&b'\n') {
        appended.push(b'\n');
    }
    let kept = appended.len();
    let message = rebound_core::Message::user_text("appended by the fuzzer");
    let line = message_line(&message);
    appended.extend_from_slice(&line);
    let after = decode_session_file(&appended)
        .unwrap_or_else(|e| panic!("a transcript does not load after an append: {e}"));
    let mut expected = conversation.clone();
    expected.push(message);
    assert_eq!(
        after.conversation, expected,
        "the appended message is not loaded"
    );
    assert_eq!(after.complete_len, appended.len());
    // The same append, torn by a crash halfway: ignored.
    appended.truncate(kept + line.len() / 2);
    let torn = decode_session_file(&appended)
        .unwrap_or_else(|e| panic!("a torn append makes the transcript fail: {e}"));
    assert_eq!(
        &torn.conversation, conversation,
        "a torn line changed the conversation"
    );
    assert_eq!(torn.complete_len, kept);
}

/// Trace files: a trace that parses survives writing and parsing, and replays (a divergence
/// is fine, a panic is not).
pub fn trace(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(trace) = Trace::parse(text) else {
        return;
    };
    let written = trace.to_jsonl();
    let reread = Trace::parse(&written).unwrap_or_else(|e| panic!("a written trace fails: {e}"));
    assert_eq!(
        reread.to_jsonl(),
        written,
        "writing a read trace changed it"
    );
    if trace.steps.len() <= 500 {
        let _ = replay(&trace);
    }
}

/// Scenario files: a scenario that loads survives `to_json`, and simulates (bounded steps)
/// without a panic.
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(scenario) = Scenario::from_json(text) else {
        return;
    };
    let json = scenario.to_json();
    let again = Scenario::from_json(&json).unwrap_or_else(|e| panic!("to_json fails: {e}"));
    assert_eq!(
        again.to_json(),
        json,
        "to_json of a loaded scenario changed"
    );
    let config = SimConfig::default().with_max_steps(2_000);
    let _ = simulate(&scenario, &config, 1);
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime builds");
}

/// Tool-input validation: the bytes before the first NUL are a tool's input schema, the rest
/// the model's input. A bad schema is a typed build error; every call is answered, in order,
/// with a bounded message; the tool only ever sees input that passed its schema.
pub fn tool_input(data: &[u8]) {
    let (schema, input) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b"{}"[..]),
    };
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(schema) else {
        return;
    };
    let input = serde_json::from_slice::<serde_json::Value>(input)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(input).into()));
    let spec = ToolSpec {
        name: "probe".into(),
        description: "fuzzed".into(),
        input_schema: schema,
    };
    let Ok(set) = ToolSet::builder()
        .tool(FnTool::new(spec, |_input, _ctx| async move {
            Ok(ToolOutput::text("ran"))
        }))
        .build()
    else {
        return;
    };
    let calls = vec![
        ToolCall {
            id: "a".into(),
            name: "probe".into(),
            input: input.clone().into(),
        },
        ToolCall {
            id: "a".into(),
            name: "read".into(),
            input: input.into(),
        },
    ];
    let cancel = tokio_util::sync::CancellationToken::new();
    let outcome = RUNTIME.with(|rt| rt.block_on(set.run_batch(calls, &cancel)));
    let BatchOutcome::PerCall(outcomes) = outcome else {
        panic!("a validation problem failed the whole batch");
    };
    assert_eq!(outcomes.len(), 2, "every call is answered");
    for outcome in &outcomes {
        assert_eq!(outcome.tool_use_id, "a");
        if let Err(ToolFailure::Model { message }) = &outcome.result {
            assert!(message.len() <= 2_000, "message of {} bytes", message.len());
        }
    }
    assert!(
        matches!(outcomes[1].result, Err(ToolFailure::Model { .. })),
        "an unknown tool is an error result"
    );
}
