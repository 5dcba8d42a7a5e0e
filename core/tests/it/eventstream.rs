//! AWS event-stream framing: what the encoder frames, the decoder reads back whole in any
//! split; a byte changed anywhere is an error, never a different message; and no bytes make
//! it panic.

use proptest::prelude::*;
use rebound_core::wire::eventstream::{encode_frame, FrameDecoder, FrameError, HeaderValue};

/// An owned header value, for proptest to generate.
#[derive(Debug, Clone)]
enum Value {
    Bool(bool),
    Byte(i8),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    Bytes(Vec<u8>),
    String(String),
    Timestamp(i64),
    Uuid([u8; 16]),
}

impl Value {
    fn lend(&self) -> HeaderValue<'_> {
        match self {
            Value::Bool(v) => HeaderValue::Bool(*v),
            Value::Byte(v) => HeaderValue::Byte(*v),
            Value::Int16(v) => HeaderValue::Int16(*v),
            Value::Int32(v) => HeaderValue::Int32(*v),
            Value::Int64(v) => HeaderValue::Int64(*v),
            Value::Bytes(v) => HeaderValue::Bytes(v),
            Value::String(v) => HeaderValue::String(v),
            Value::Timestamp(v) => HeaderValue::Timestamp(*v),
            Value::Uuid(v) => HeaderValue::Uuid(*v),
        }
    }
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i8>().prop_map(Value::Byte),
        any::<i16>().prop_map(Value::Int16),
        any::<i32>().prop_map(Value::Int32),
        any::<i64>().prop_map(Value::Int64),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::Bytes),
        "\\PC{0,20}".prop_map(Value::String),
        any::<i64>().prop_map(Value::Timestamp),
        any::<[u8; 16]>().prop_map(Value::Uuid),
    ]
}

type Message = (Vec<(String, Value)>, Vec<u8>);

fn message() -> impl Strategy<Value = Message> {
    (
        proptest::collection::vec(("[a-z:-]{1,12}", value()), 0..5),
        proptest::collection::vec(any::<u8>(), 0..200),
    )
}

fn encode(message: &Message) -> Vec<u8> {
    let headers: Vec<(&str, HeaderValue<'_>)> = message
        .0
        .iter()
        .map(|(n, v)| (n.as_str(), v.lend()))
        .collect();
    encode_frame(&headers, &message.1)
}

/// Every message in `stream` fed in pieces of `size`: each one's headers (debug form) and
/// payload, and the error, if any.
fn decode(stream: &[u8], size: usize) -> (Vec<(String, Vec<u8>)>, Option<FrameError>) {
    let mut decoder = FrameDecoder::new();
    let mut out = Vec::new();
    for piece in stream.chunks(size.max(1)) {
        let fed = decoder.feed_with(piece, |frame| {
            let headers: Vec<_> = frame.headers().collect();
            // A lookup by name finds what a walk over the headers finds first.
            for (name, _) in &headers {
                let first = headers.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
                assert_eq!(frame.header(name), first, "{name}");
            }
            assert_eq!(frame.header("no-such-header"), None);
            out.push((format!("{headers:?}"), frame.payload().to_vec()));
        });
        if let Err(e) = fed {
            return (out, Some(e));
        }
    }
    (out, None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn every_message_framed_reads_back_whole_in_any_split(
        messages in proptest::collection::vec(message(), 1..5),
        size in 1usize..64,
    ) {
        let stream: Vec<u8> = messages.iter().flat_map(encode).collect();
        let (got, error) = decode(&stream, size);
        prop_assert!(error.is_none(), "{error:?}");
        prop_assert_eq!(got.len(), messages.len());
        for ((headers, payload), sent) in got.iter().zip(&messages) {
            let lent: Vec<_> = sent.0.iter().map(|(n, v)| (n.as_str(), v.lend())).collect();
            prop_assert_eq!(headers, &format!("{lent:?}"));
            prop_assert_eq!(payload, &sent.1);
        }
    }

    #[test]
    fn a_byte_changed_anywhere_is_an_error_after_the_messages_before_it(
        messages in proptest::collection::vec(message(), 1..4),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        size in 1usize..64,
    ) {
        let framed: Vec<Vec<u8>> = messages.iter().map(encode).collect();
        let mut stream: Vec<u8> = framed.concat();
        let at = at.index(stream.len());
        stream[at] ^= flip;
        // The message holding the changed byte.
        let mut start = 0;
        let hit = framed.iter().position(|m| { start += m.len(); at < start }).unwrap_or(0);
        let (got, error) = decode(&stream, size);
        prop_assert!(error.is_some(), "a changed byte went unnoticed");
        prop_assert_eq!(got.len(), hit, "every message before the changed one is lent");
    }

    #[test]
    fn no_bytes_make_the_decoder_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        size in 1usize..64,
    ) {
        let _ = decode(&bytes, size);
    }
}
