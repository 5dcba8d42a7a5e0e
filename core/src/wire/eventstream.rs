//! AWS event-stream framing (`application/vnd.amazon.eventstream`): how Bedrock's
//! `ConverseStream` (and every AWS streaming API) frames its events on the wire.
//!
//! A message is a 12-byte prelude (total length, headers length, both big-endian `u32`, and
//! the CRC-32 of those 8 bytes), the headers, the payload, and the CRC-32 of everything
//! before it. Each header is a name (a length byte and UTF-8), a type byte and a value of
//! that type. [`FrameDecoder`] takes the bytes in any split, checks both checksums and every
//! length against the message's bounds, and lends each complete [`Frame`]; a message that
//! fails a check is a [`FrameError`], never a panic, and every later call repeats it (a
//! stream whose framing broke cannot be trusted past that point).
//!
//! ```
//! use rebound_core::wire::eventstream::{FrameDecoder, HeaderValue};
//!
//! // A message of aws-c-event-stream's tests: one `content-type` header, a JSON payload.
//! let message: &[u8] = &[
//!     0x00, 0x00, 0x00, 0x3D, 0x00, 0x00, 0x00, 0x20, 0x07, 0xFD, 0x83, 0x96, 0x0C, b'c',
//!     b'o', b'n', b't', b'e', b'n', b't', b'-', b't', b'y', b'p', b'e', 0x07, 0x00, 0x10,
//!     b'a', b'p', b'p', b'l', b'i', b'c', b'a', b't', b'i', b'o', b'n', b'/', b'j', b's',
//!     b'o', b'n', b'{', b'\'', b'f', b'o', b'o', b'\'', b':', b'\'', b'b', b'a', b'r',
//!     b'\'', b'}', 0x8D, 0x9C, 0x08, 0xB1,
//! ];
//! let mut decoder = FrameDecoder::new();
//! let mut payloads = Vec::new();
//! for piece in message.chunks(5) {
//!     decoder.feed_with(piece, |frame| {
//!         assert_eq!(frame.header("content-type"), Some(HeaderValue::String("application/json")));
//!         payloads.push(frame.payload().to_vec());
//!     })?;
//! }
//! assert_eq!(payloads, [b"{'foo':'bar'}".to_vec()]);
//! assert!(decoder.is_between_frames());
//! # Ok::<(), rebound_core::wire::eventstream::FrameError>(())
//! ```

/// Bytes of the prelude: total length, headers length, prelude CRC.
const PRELUDE_BYTES: usize = 12;
/// Bytes of the message CRC that ends every message.
const MESSAGE_CRC_BYTES: usize = 4;
/// The smallest message: a prelude and a message CRC, no headers, no payload.
const MIN_MESSAGE_BYTES: usize = PRELUDE_BYTES + MESSAGE_CRC_BYTES;

/// The largest message taken, in bytes: AWS's limit for an event-stream message (16 MiB).
/// A prelude announcing more is a [`FrameError::Length`]: the bytes are not buffered.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The largest headers section taken, in bytes: AWS's limit (128 KiB).
pub const MAX_HEADERS_BYTES: usize = 128 * 1024;

/// A header's value, borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderValue<'a> {
    /// Type 0 (true) or 1 (false).
    Bool(bool),
    /// Type 2: a signed byte.
    Byte(i8),
    /// Type 3.
    Int16(i16),
    /// Type 4.
    Int32(i32),
    /// Type 5.
    Int64(i64),
    /// Type 6: bytes.
    Bytes(&'a [u8]),
    /// Type 7: UTF-8 text, as `:event-type` and `:message-type` are.
    String(&'a str),
    /// Type 8: milliseconds since the Unix epoch.
    Timestamp(i64),
    /// Type 9: 16 bytes.
    Uuid([u8; 16]),
}

impl<'a> HeaderValue<'a> {
    /// The text of a string header.
    #[must_use]
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            HeaderValue::String(s) => Some(s),
            _ => None,
        }
    }
}

/// One complete, checked message, borrowed from the decoder or from the bytes fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The headers section, already checked to parse whole.
    headers: &'a [u8],
    payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The payload (for Bedrock, one event's JSON).
    #[must_use]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The headers, in the order they came.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, HeaderValue<'a>)> {
        let mut rest = self.headers;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            // Checked when the frame was decoded: parses whole.
            let (name, value, used) = parse_header(rest).ok()?;
            rest = &rest[used..];
            Some((name, value))
        })
    }

    /// The value of the first header named `name`.
    ///
    /// Names are compared as bytes and only the match is decoded: a lookup costs a walk over
    /// the lengths of the headers before it, not a UTF-8 check of each.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<HeaderValue<'a>> {
        let mut rest = self.headers;
        while let Some(&len) = rest.first() {
            let len = usize::from(len);
            let raw = rest.get(1..1 + len)?;
            if raw == name.as_bytes() {
                // Checked when the frame was decoded: parses whole.
                return parse_header(rest).ok().map(|(_, value, _)| value);
            }
            let at = 1 + len;
            let value_len = match *rest.get(at)? {
                0 | 1 => 0,
                2 => 1,
                3 => 2,
                4 => 4,
                5 | 8 => 8,
                6 | 7 => {
                    let n = rest.get(at + 1..at + 3)?;
                    2 + usize::from(u16::from_be_bytes([n[0], n[1]]))
                }
                9 => 16,
                _ => return None,
            };
            rest = rest.get(at + 1 + value_len..)?;
        }
        None
    }

    /// The text of the string header named `name` (`:message-type`, `:event-type`,
    /// `:exception-type`, `:error-code`, `:error-message`, `:content-type`).
    #[must_use]
    pub fn string(&self, name: &str) -> Option<&'a str> {
        self.header(name).and_then(|v| v.as_str())
    }
}

/// Why bytes are no valid event stream. Every message names where it failed: the byte
/// offset of the message in the stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The prelude announces a message shorter than a prelude and a checksum, or longer
    /// than [`MAX_MESSAGE_BYTES`], or headers that do not fit in it or exceed
    /// [`MAX_HEADERS_BYTES`].
    #[error(
        "event-stream message at byte {offset}: impossible lengths (total {total} bytes, \
         headers {headers} bytes)"
    )]
    Length {
        /// Where the message starts in the stream.
        offset: u64,
        /// The total length announced.
        total: u32,
        /// The headers length announced.
        headers: u32,
    },
    /// The prelude's checksum does not match its 8 bytes.
    #[error(
        "event-stream message at byte {offset}: prelude checksum {found:#010x}, expected \
         {expected:#010x}"
    )]
    PreludeChecksum {
        /// Where the message starts in the stream.
        offset: u64,
        /// The checksum of the bytes.
        expected: u32,
        /// The checksum the message carries.
        found: u32,
    },
    /// The message's checksum does not match its bytes.
    #[error(
        "event-stream message at byte {offset}: message checksum {found:#010x}, expected \
         {expected:#010x}"
    )]
    MessageChecksum {
        /// Where the message starts in the stream.
        offset: u64,
        /// The checksum of the bytes.
        expected: u32,
        /// The checksum the message carries.
        found: u32,
    },
    /// A header that does not parse: a name of length 0 or not UTF-8, an unknown value
    /// type, a value cut by the end of the headers section, a string value not UTF-8.
    #[error("event-stream message at byte {offset}: bad header: {detail}")]
    Header {
        /// Where the message starts in the stream.
        offset: u64,
        /// What is wrong.
        detail: &'static str,
    },
}

/// An incremental event-stream decoder: feed it the body's bytes as they arrive.
///
/// Complete messages in the bytes fed are lent without a copy; only a message split across
/// two feeds is buffered (at most one message, so at most [`MAX_MESSAGE_BYTES`]).
#[derive(Debug, Default)]
pub struct FrameDecoder {
    /// The start of a message the bytes fed so far did not complete.
    partial: Vec<u8>,
    /// Bytes of the stream taken as whole messages so far (where the next one starts).
    consumed: u64,
    /// The first error: every later feed returns it again.
    failed: Option<FrameError>,
}

impl FrameDecoder {
    /// A decoder at the start of a stream.
    #[must_use]
    pub fn new() -> Self {
        FrameDecoder::default()
    }

    /// Takes the next bytes of the stream, calling `on_frame` with each message they
    /// complete, in order.
    ///
    /// # Errors
    ///
    /// [`FrameError`] for a message that fails a check; the messages before it were lent.
    /// Every later call returns the same error.
    pub fn feed_with(
        &mut self,
        bytes: &[u8],
        mut on_frame: impl FnMut(Frame<'_>),
    ) -> Result<(), FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = self.take(bytes, &mut on_frame);
        if let Err(e) = &result {
            self.failed = Some(e.clone());
            self.partial = Vec::new();
        }
        result
    }

    fn take(
        &mut self,
        mut bytes: &[u8],
        on_frame: &mut impl FnMut(Frame<'_>),
    ) -> Result<(), FrameError> {
        if !self.partial.is_empty() {
            // Complete the buffered message first: its prelude (if still short), then
            // exactly the rest of it.
            if self.partial.len() < PRELUDE_BYTES {
                let take = (PRELUDE_BYTES - self.partial.len()).min(bytes.len());
                self.partial.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.partial.len() < PRELUDE_BYTES {
                    return Ok(());
                }
            }
            let total = check_prelude(&self.partial, self.consumed)?;
            let take = (total - self.partial.len()).min(bytes.len());
            self.partial.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.partial.len() < total {
                return Ok(());
            }
            on_frame(check_message(&self.partial, self.consumed)?);
            self.consumed += total as u64;
            self.partial.clear();
        }
        // Whole messages straight from the bytes fed.
        while bytes.len() >= PRELUDE_BYTES {
            let total = check_prelude(bytes, self.consumed)?;
            if bytes.len() < total {
                break;
            }
            on_frame(check_message(&bytes[..total], self.consumed)?);
            self.consumed += total as u64;
            bytes = &bytes[total..];
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    /// Whether the bytes fed so far end exactly at a message's end (no message is half
    /// received): a stream that ends otherwise was cut.
    #[must_use]
    pub fn is_between_frames(&self) -> bool {
        self.partial.is_empty() && self.failed.is_none()
    }

    /// Bytes of the stream taken as whole messages so far.
    #[must_use]
    pub fn consumed(&self) -> u64 {
        self.consumed
    }
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// Checks a prelude (at least [`PRELUDE_BYTES`] of `bytes`); the message's total length.
fn check_prelude(bytes: &[u8], offset: u64) -> Result<usize, FrameError> {
    let total = be_u32(&bytes[0..4]);
    let headers = be_u32(&bytes[4..8]);
    let found = be_u32(&bytes[8..12]);
    let expected = crc32fast::hash(&bytes[0..8]);
    if expected != found {
        return Err(FrameError::PreludeChecksum {
            offset,
            expected,
            found,
        });
    }
    let total_len = total as usize;
    let headers_len = headers as usize;
    if !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(&total_len)
        || headers_len > MAX_HEADERS_BYTES
        || headers_len > total_len - MIN_MESSAGE_BYTES
    {
        return Err(FrameError::Length {
            offset,
            total,
            headers,
        });
    }
    Ok(total_len)
}

/// Checks a whole message (its prelude already checked) and lends it.
fn check_message(message: &[u8], offset: u64) -> Result<Frame<'_>, FrameError> {
    let body_end = message.len() - MESSAGE_CRC_BYTES;
    let found = be_u32(&message[body_end..]);
    let expected = crc32fast::hash(&message[..body_end]);
    if expected != found {
        return Err(FrameError::MessageChecksum {
            offset,
            expected,
            found,
        });
    }
    let headers_len = be_u32(&message[4..8]) as usize;
    let headers = &message[PRELUDE_BYTES..PRELUDE_BYTES + headers_len];
    let mut rest = headers;
    while !rest.is_empty() {
        let (_, _, used) =
            parse_header(rest).map_err(|detail| FrameError::Header { offset, detail })?;
        rest = &rest[used..];
    }
    Ok(Frame {
        headers,
        payload: &message[PRELUDE_BYTES + headers_len..body_end],
    })
}

/// One header at the start of `bytes`: its name, value and length in bytes.
fn parse_header(bytes: &[u8]) -> Result<(&str, HeaderValue<'_>, usize), &'static str> {
    let name_len = usize::from(*bytes.first().ok_or("empty")?);
    if name_len == 0 {
        return Err("a header name of length 0");
    }
    let name = bytes
        .get(1..1 + name_len)
        .ok_or("a name cut by the end of the headers")?;
    let name = std::str::from_utf8(name).map_err(|_| "a name that is not UTF-8")?;
    let kind = *bytes
        .get(1 + name_len)
        .ok_or("a header without a value type")?;
    let at = 2 + name_len;
    let fixed = |n: usize| -> Result<&[u8], &'static str> {
        bytes
            .get(at..at + n)
            .ok_or("a value cut by the end of the headers")
    };
    let (value, len) = match kind {
        0 => (HeaderValue::Bool(true), 0),
        1 => (HeaderValue::Bool(false), 0),
        2 => (HeaderValue::Byte(i8::from_be_bytes([fixed(1)?[0]])), 1),
        3 => {
            let b = fixed(2)?;
            (HeaderValue::Int16(i16::from_be_bytes([b[0], b[1]])), 2)
        }
        4 => {
            let b = fixed(4)?;
            (
                HeaderValue::Int32(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                4,
            )
        }
        5 | 8 => {
            let mut v = [0u8; 8];
            v.copy_from_slice(fixed(8)?);
            let v = i64::from_be_bytes(v);
            let value = if kind == 5 {
                HeaderValue::Int64(v)
            } else {
                HeaderValue::Timestamp(v)
            };
            (value, 8)
        }
        6 | 7 => {
            let n = fixed(2)?;
            let n = usize::from(u16::from_be_bytes([n[0], n[1]]));
            let v = bytes
                .get(at + 2..at + 2 + n)
                .ok_or("a value cut by the end of the headers")?;
            let value = if kind == 6 {
                HeaderValue::Bytes(v)
            } else {
                HeaderValue::String(std::str::from_utf8(v).map_err(|_| "a string not UTF-8")?)
            };
            (value, 2 + n)
        }
        9 => {
            let mut v = [0u8; 16];
            v.copy_from_slice(fixed(16)?);
            (HeaderValue::Uuid(v), 16)
        }
        _ => return Err("an unknown value type"),
    };
    Ok((name, value, at + len))
}

/// A message with `headers` and `payload`, framed and checksummed: what an AWS service
/// sends (for the fake provider server and tests).
///
/// # Panics
///
/// When a header name is empty or longer than 255 bytes, a string or byte value longer than
/// 65,535 bytes, or the message longer than [`MAX_MESSAGE_BYTES`]: the encoder's callers
/// pass names and values they chose.
#[cfg(feature = "server")]
#[must_use]
pub fn encode_frame(headers: &[(&str, HeaderValue<'_>)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        let name_len = u8::try_from(name.len()).expect("a header name of at most 255 bytes");
        assert!(name_len > 0, "a header name is not empty");
        head.push(name_len);
        head.extend_from_slice(name.as_bytes());
        let mut short = |kind: u8, bytes: &[u8]| {
            head.push(kind);
            let n = u16::try_from(bytes.len()).expect("a header value of at most 65,535 bytes");
            head.extend_from_slice(&n.to_be_bytes());
            head.extend_from_slice(bytes);
        };
        match *value {
            HeaderValue::Bytes(b) => short(6, b),
            HeaderValue::String(s) => short(7, s.as_bytes()),
            HeaderValue::Bool(b) => head.push(if b { 0 } else { 1 }),
            HeaderValue::Byte(v) => {
                head.push(2);
                head.extend_from_slice(&v.to_be_bytes());
            }
            HeaderValue::Int16(v) => {
                head.push(3);
                head.extend_from_slice(&v.to_be_bytes());
            }
            HeaderValue::Int32(v) => {
                head.push(4);
                head.extend_from_slice(&v.to_be_bytes());
            }
            HeaderValue::Int64(v) => {
                head.push(5);
                head.extend_from_slice(&v.to_be_bytes());
            }
            HeaderValue::Timestamp(v) => {
                head.push(8);
                head.extend_from_slice(&v.to_be_bytes());
            }
            HeaderValue::Uuid(v) => {
                head.push(9);
                head.extend_from_slice(&v);
            }
        }
    }
    let total = MIN_MESSAGE_BYTES + head.len() + payload.len();
    assert!(total <= MAX_MESSAGE_BYTES, "a message of at most 16 MiB");
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(head.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// aws-c-event-stream's `tests/message_deserializer_test.c`, as smithy-rs's
    /// `aws-smithy-eventstream/src/frame.rs` quotes it: no headers, payload `{'foo':'bar'}`.
    const NO_HEADERS: &[u8] = &[
        0x00, 0x00, 0x00, 0x1D, 0x00, 0x00, 0x00, 0x00, 0xfd, 0x52, 0x8c, 0x5a, 0x7b, 0x27, 0x66,
        0x6f, 0x6f, 0x27, 0x3a, 0x27, 0x62, 0x61, 0x72, 0x27, 0x7d, 0xc3, 0x65, 0x39, 0x36,
    ];

    fn frames(decoder: &mut FrameDecoder, bytes: &[u8]) -> Result<Vec<Vec<u8>>, FrameError> {
        let mut out = Vec::new();
        decoder.feed_with(bytes, |f| out.push(f.payload().to_vec()))?;
        Ok(out)
    }

    #[test]
    fn a_message_without_headers_decodes_in_any_split() {
        let stream: Vec<u8> = [NO_HEADERS, NO_HEADERS, NO_HEADERS].concat();
        for size in 1..=stream.len() {
            let mut d = FrameDecoder::new();
            let mut got = Vec::new();
            for piece in stream.chunks(size) {
                got.extend(frames(&mut d, piece).expect("valid"));
            }
            assert_eq!(got, vec![b"{'foo':'bar'}".to_vec(); 3], "pieces of {size}");
            assert!(d.is_between_frames());
            assert_eq!(d.consumed(), stream.len() as u64);
        }
    }

    #[test]
    fn a_cut_stream_is_not_between_frames() {
        let mut d = FrameDecoder::new();
        assert!(frames(&mut d, &NO_HEADERS[..20]).expect("valid").is_empty());
        assert!(!d.is_between_frames());
    }

    #[test]
    fn corrupt_checksums_are_errors_that_stay() {
        let mut bad = NO_HEADERS.to_vec();
        bad[8] ^= 1;
        let mut d = FrameDecoder::new();
        assert!(matches!(
            frames(&mut d, &bad),
            Err(FrameError::PreludeChecksum { offset: 0, .. })
        ));
        assert!(matches!(
            frames(&mut d, NO_HEADERS),
            Err(FrameError::PreludeChecksum { .. })
        ));

        let mut bad = [NO_HEADERS, NO_HEADERS].concat();
        let last = bad.len() - 1;
        bad[last] ^= 0x80;
        let mut d = FrameDecoder::new();
        let mut lent = 0;
        let result = d.feed_with(&bad, |_| lent += 1);
        assert_eq!(lent, 1, "the message before the bad one is lent");
        assert!(matches!(
            result,
            Err(FrameError::MessageChecksum { offset: 29, .. })
        ));
    }

    #[test]
    fn impossible_lengths_are_refused_before_anything_is_buffered() {
        let prelude = |total: u32, headers: u32| {
            let mut p = Vec::new();
            p.extend_from_slice(&total.to_be_bytes());
            p.extend_from_slice(&headers.to_be_bytes());
            let crc = crc32fast::hash(&p);
            p.extend_from_slice(&crc.to_be_bytes());
            p
        };
        for (total, headers) in [(0, 0), (15, 0), (u32::MAX, 0), (100, 90), (1 << 25, 0)] {
            let mut d = FrameDecoder::new();
            assert!(
                matches!(
                    frames(&mut d, &prelude(total, headers)),
                    Err(FrameError::Length { .. })
                ),
                "{total} {headers}"
            );
        }
    }
}
