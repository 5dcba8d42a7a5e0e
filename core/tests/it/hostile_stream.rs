//! Regressions found by fuzzing the stream decoders (`fuzz/`, targets `stream_anthropic` and
//! `stream_openai`): the outcome must not depend on how the network split the body.

use rebound_core::wire::sse::SseLimits;
use rebound_core::wire::{encode_stream, StreamDecoder, StreamLimits};
use rebound_core::{AssistantResponse, Message, ProviderKind};

fn small_limits() -> StreamLimits {
    StreamLimits::default().with_sse(
        SseLimits::default()
            .with_max_line_bytes(600)
            .with_max_event_bytes(1_200),
    )
}

/// Feeds `chunks` until the decoder completes or fails, then finishes.
fn decode(
    kind: ProviderKind,
    chunks: &[&[u8]],
) -> Result<AssistantResponse, rebound_core::ProviderFailure> {
    let mut decoder = StreamDecoder::with_limits(kind, small_limits());
    for chunk in chunks {
        if decoder.feed(chunk).is_err() || decoder.is_complete() {
            break;
        }
    }
    decoder.finish()
}

#[test]
fn an_overlong_line_after_the_terminal_event_in_the_same_chunk_is_ignored() {
    for kind in [ProviderKind::Anthropic, ProviderKind::OpenAi] {
        let sent = AssistantResponse::end_turn(Message::assistant_text("hi"));
        let stream: Vec<u8> = encode_stream(kind, &sent, "m", "msg_1").concat();
        let trailing = format!("data: {}\n\n", "x".repeat(2_000));
        let mut together = stream.clone();
        together.extend(trailing.as_bytes());

        let split = decode(kind, &[&stream, trailing.as_bytes()]);
        let whole = decode(kind, &[&together]);
        assert_eq!(split, whole, "{kind}: the outcome depends on the split");
        let sent = sent.clone().with_id("msg_1").with_model("m");
        assert_eq!(whole.expect("a complete message"), sent, "{kind}");
    }
}
