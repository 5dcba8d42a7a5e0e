//! An incremental decoder for `text/event-stream` (server-sent events), per the WHATWG rules.
//!
//! Bytes go in as they arrive, split anywhere — inside a line, inside a UTF-8 sequence,
//! between `\r` and `\n` — and complete events come out:
//!
//! ```
//! use rebound_core::wire::sse::SseDecoder;
//!
//! let mut decoder = SseDecoder::new();
//! let mut events = Vec::new();
//! decoder.feed(b"event: ping\r\nda", &mut events).unwrap();
//! assert!(events.is_empty());
//! decoder.feed(b"ta: {}\r", &mut events).unwrap();
//! decoder.feed(b"\n\r\n: a comment\n", &mut events).unwrap();
//! assert_eq!(events.len(), 1);
//! assert_eq!(events[0].event.as_deref(), Some("ping"));
//! assert_eq!(events[0].data, "{}");
//! ```
//!
//! What it does, field by field: `event:` names the event, `data:` lines are joined with
//! `\n`, `id:` sets the last event id (kept across events, ignored when it contains NUL),
//! `retry:` (ASCII digits only) sets the reconnection time, lines starting with `:` are
//! comments, unknown fields are ignored, one space after the colon is dropped, lines end with
//! CRLF, LF or CR, a leading UTF-8 byte order mark is skipped, and invalid UTF-8 is replaced
//! with U+FFFD. An event whose data buffer is empty is not dispatched.
//!
//! Memory is bounded: a line longer than [`SseLimits::max_line_bytes`] or an event larger
//! than [`SseLimits::max_event_bytes`] is an [`SseError`], not an allocation spree. After an
//! error the decoder stays failed.
//!
//! One deliberate deviation: at end of input the WHATWG rules discard an event that was not
//! ended by a blank line. [`SseDecoder::finish`] returns it instead (as the official Python
//! SDK's decoder does), so a stream whose last `data:` line lacks its final newline is not
//! lost; callers decide whether to trust it.

use std::fmt;

/// Size limits that keep a hostile or broken stream from using unbounded memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// The longest line accepted, in bytes, without its line ending.
    pub max_line_bytes: usize,
    /// The largest event accepted: its `event` name plus `data` lines, in bytes.
    pub max_event_bytes: usize,
}

impl Default for SseLimits {
    /// 1 MiB per line, 4 MiB per event: far above what Anthropic or OpenAI send.
    fn default() -> Self {
        SseLimits {
            max_line_bytes: 1 << 20,
            max_event_bytes: 4 << 20,
        }
    }
}

/// A stream that broke a size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line grew past [`SseLimits::max_line_bytes`].
    #[error("server-sent event line longer than {limit} bytes")]
    LineTooLong {
        /// The limit that was exceeded.
        limit: usize,
    },
    /// An event grew past [`SseLimits::max_event_bytes`].
    #[error("server-sent event larger than {limit} bytes")]
    EventTooLarge {
        /// The limit that was exceeded.
        limit: usize,
    },
}

/// One dispatched server-sent event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the event had one (WHATWG calls a nameless event `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event id at dispatch time, when one was set (it persists across events).
    pub id: Option<String>,
    /// A `retry:` value (ms) given within this event's lines.
    pub retry: Option<u64>,
}

impl SseEvent {
    /// The event's type: its `event:` field, or `message` when it had none.
    #[must_use]
    pub fn name(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// The incremental decoder; see the [module docs](self).
#[derive(Clone)]
pub struct SseDecoder {
    limits: SseLimits,
    /// Bytes of the current, unterminated line.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a leading `\n` in the next one belongs to it.
    after_cr: bool,
    /// No line has been completed yet (a BOM may still have to be skipped).
    at_start: bool,
    event_type: String,
    data: String,
    last_event_id: String,
    retry: Option<u64>,
    reconnection_ms: Option<u64>,
    failed: Option<SseError>,
    /// The event lent to callers; its buffers are swapped back and reused.
    scratch: SseEvent,
    /// A cleared event-name buffer kept for reuse.
    spare_name: Option<String>,
}

impl fmt::Debug for SseDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseDecoder")
            .field("limits", &self.limits)
            .field("buffered_line_bytes", &self.line.len())
            .field("buffered_data_bytes", &self.data.len())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// `value` as text, invalid UTF-8 replaced with U+FFFD. Valid text (nearly every stream)
/// takes `str::from_utf8`'s fast path; `String::from_utf8_lossy` walks the bytes in chunks
/// and cost a third of the framing time.
fn utf8_lossy(value: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(value) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(value),
    }
}

impl SseDecoder {
    /// A decoder with [`SseLimits::default`].
    #[must_use]
    pub fn new() -> Self {
        Self::with_limits(SseLimits::default())
    }

    /// A decoder with the given limits.
    #[must_use]
    pub fn with_limits(limits: SseLimits) -> Self {
        SseDecoder {
            limits,
            line: Vec::new(),
            after_cr: false,
            at_start: true,
            event_type: String::new(),
            data: String::new(),
            last_event_id: String::new(),
            retry: None,
            reconnection_ms: None,
            failed: None,
            scratch: SseEvent::default(),
            spare_name: None,
        }
    }

    /// The limits this decoder enforces.
    #[must_use]
    pub fn limits(&self) -> SseLimits {
        self.limits
    }

    /// The last event id seen (`id:`), empty when none.
    #[must_use]
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// The reconnection time the server asked for with `retry:`, in ms.
    #[must_use]
    pub fn reconnection_time_ms(&self) -> Option<u64> {
        self.reconnection_ms
    }

    /// Feeds the next bytes of the stream, appending every event they complete to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.feed_with(bytes, |event: &SseEvent| {
            out.push(event.clone());
            Ok::<(), SseError>(())
        })
    }

    /// Feeds the next bytes of the stream, calling `on_event` with every event they complete.
    ///
    /// The event is lent, not given: its buffers are reused for the next one, so decoding
    /// allocates nothing per event. A limit error is converted into `E` and leaves the decoder
    /// failed; an error from `on_event` is returned as is and the rest of `bytes` is not
    /// decoded.
    pub fn feed_with<E, F>(&mut self, mut bytes: &[u8], mut on_event: F) -> Result<(), E>
    where
        E: From<SseError>,
        F: FnMut(&SseEvent) -> Result<(), E>,
    {
        if let Some(e) = self.failed {
            return Err(e.into());
        }
        if self.after_cr {
            self.after_cr = false;
            if let [b'\n', rest @ ..] = bytes {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) else {
                if self.line.len() + bytes.len() > self.limits.max_line_bytes {
                    let e = self.fail(SseError::LineTooLong {
                        limit: self.limits.max_line_bytes,
                    });
                    return Err(e.into());
                }
                self.line.extend_from_slice(bytes);
                break;
            };
            let ending = bytes[end];
            let mut rest = &bytes[end + 1..];
            if ending == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let dispatched = if self.line.is_empty() {
                self.take_line(&bytes[..end])
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&bytes[..end]);
                let r = self.take_line(&line);
                line.clear();
                self.line = line;
                r
            };
            bytes = rest;
            match dispatched {
                Err(e) => return Err(self.fail(e).into()),
                Ok(false) => {}
                Ok(true) => {
                    let result = on_event(&self.scratch);
                    self.recycle();
                    result?;
                }
            }
        }
        Ok(())
    }

    /// Convenience form of [`SseDecoder::feed`] that returns the completed events.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        self.feed(bytes, &mut out)?;
        Ok(out)
    }

    /// Ends the stream: processes an unterminated last line and returns the event still being
    /// built, if it has data (see the module docs for why it is not silently discarded).
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        self.after_cr = false;
        if !self.line.is_empty() {
            // A non-empty line never dispatches.
            let line = std::mem::take(&mut self.line);
            if let Err(e) = self.take_line(&line) {
                return Err(self.fail(e));
            }
        }
        if self.dispatch() {
            let event = self.scratch.clone();
            self.recycle();
            Ok(Some(event))
        } else {
            Ok(None)
        }
    }

    /// Whether bytes of an unfinished line or event are buffered.
    #[must_use]
    pub fn has_pending(&self) -> bool {
        !self.line.is_empty() || !self.data.is_empty() || !self.event_type.is_empty()
    }

    fn fail(&mut self, e: SseError) -> SseError {
        self.failed = Some(e);
        e
    }

    /// Processes one complete line; `Ok(true)` when it dispatched an event into `scratch`.
    fn take_line(&mut self, mut line: &[u8]) -> Result<bool, SseError> {
        if self.at_start {
            self.at_start = false;
            if let Some(rest) = line.strip_prefix(BOM) {
                line = rest;
            }
        }
        if line.len() > self.limits.max_line_bytes {
            return Err(SseError::LineTooLong {
                limit: self.limits.max_line_bytes,
            });
        }
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line[0] == b':' {
            return Ok(false);
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                let value = utf8_lossy(value);
                if self.event_type.len() + self.data.len() + value.len() + 1
                    > self.limits.max_event_bytes
                {
                    return Err(SseError::EventTooLarge {
                        limit: self.limits.max_event_bytes,
                    });
                }
                self.data.push_str(&value);
                self.data.push('\n');
            }
            b"event" => {
                let value = utf8_lossy(value);
                if value.len() + self.data.len() > self.limits.max_event_bytes {
                    return Err(SseError::EventTooLarge {
                        limit: self.limits.max_event_bytes,
                    });
                }
                self.event_type.clear();
                self.event_type.push_str(&value);
            }
            b"id" if !value.contains(&0) => {
                self.last_event_id.clear();
                self.last_event_id.push_str(&String::from_utf8_lossy(value));
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits only, so the text is ASCII; an overflowing value is ignored.
                if let Ok(ms) = String::from_utf8_lossy(value).parse::<u64>() {
                    self.retry = Some(ms);
                    self.reconnection_ms = Some(ms);
                }
            }
            _ => {}
        }
        Ok(false)
    }

    /// Ends the current event: moves it into `scratch` and returns true, or resets and
    /// returns false when its data buffer is empty.
    fn dispatch(&mut self) -> bool {
        let retry = self.retry.take();
        if self.data.is_empty() {
            self.event_type.clear();
            return false;
        }
        if self.data.ends_with('\n') {
            self.data.pop();
        }
        std::mem::swap(&mut self.scratch.data, &mut self.data);
        self.scratch.event = if self.event_type.is_empty() {
            None
        } else {
            let mut name = self.spare_name.take().unwrap_or_default();
            std::mem::swap(&mut name, &mut self.event_type);
            Some(name)
        };
        self.scratch.id = if self.last_event_id.is_empty() {
            None
        } else {
            let mut id = self.scratch.id.take().unwrap_or_default();
            id.clear();
            id.push_str(&self.last_event_id);
            Some(id)
        };
        self.scratch.retry = retry;
        true
    }

    /// Takes the dispatched event's buffers back for the next event.
    fn recycle(&mut self) {
        std::mem::swap(&mut self.scratch.data, &mut self.data);
        self.data.clear();
        if let Some(mut name) = self.scratch.event.take() {
            name.clear();
            self.spare_name = Some(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, &mut out).unwrap();
        }
        out
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters_and_split_sequences_are_joined() {
        let events = decode_all(&[b"event: p\xffng\ndata: a\xffb\xe4\xb8\n\n"]);
        assert_eq!(events[0].name(), "p\u{fffd}ng");
        assert_eq!(data(&events), ["a\u{fffd}b\u{fffd}"]);
        // A character split between two reads is whole once its line is.
        let events = decode_all(&[b"data: \xe4\xb8", b"\xad\xe6\x96\x87\n\n"]);
        assert_eq!(data(&events), ["中文"]);
    }

    #[test]
    fn lf_crlf_and_cr_line_endings_all_end_lines() {
        for stream in [
            &b"data: a\n\ndata: b\n\n"[..],
            b"data: a\r\n\r\ndata: b\r\n\r\n",
            b"data: a\r\rdata: b\r\r",
            b"data: a\r\n\ndata: b\r\r\n",
        ] {
            assert_eq!(data(&decode_all(&[stream])), ["a", "b"], "{stream:?}");
        }
    }

    #[test]
    fn cr_and_lf_split_across_chunks_count_as_one_line_ending() {
        let events = decode_all(&[b"data: a\r", b"\n", b"\r", b"\n"]);
        assert_eq!(data(&events), ["a"]);
        // A lone CR followed later by a real blank line must not produce two blank lines.
        let events = decode_all(&[b"data: a\r", b"\ndata: b\n\n"]);
        assert_eq!(data(&events), ["a\nb"]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines() {
        let events = decode_all(&[b"data: one\ndata:two\ndata\ndata:  three\n\n"]);
        assert_eq!(data(&events), ["one\ntwo\n\n three"]);
    }

    #[test]
    fn utf8_split_inside_a_sequence_is_reassembled() {
        let s = "data: h\u{e9}llo \u{1F600}\n\n".as_bytes();
        for cut in 0..s.len() {
            let events = decode_all(&[&s[..cut], &s[cut..]]);
            assert_eq!(data(&events), ["h\u{e9}llo \u{1F600}"], "cut at {cut}");
        }
    }

    #[test]
    fn comments_unknown_fields_and_empty_events_are_ignored() {
        let events = decode_all(&[b": keep-alive\nfoo: bar\n\nevent: x\n\ndata: y\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(
            events[0].event, None,
            "event type resets after an empty event"
        );
        assert_eq!(events[0].data, "y");
    }

    #[test]
    fn empty_data_line_dispatches_an_event_with_empty_data() {
        let events = decode_all(&[b"data:\n\n"]);
        assert_eq!(data(&events), [""]);
    }

    #[test]
    fn id_persists_and_id_with_nul_is_ignored() {
        let events =
            decode_all(&[b"id: 7\ndata: a\n\ndata: b\n\nid: x\0y\ndata: c\n\nid\ndata: d\n\n"]);
        let ids: Vec<_> = events.iter().map(|e| e.id.as_deref()).collect();
        assert_eq!(ids, [Some("7"), Some("7"), Some("7"), None]);
    }

    #[test]
    fn retry_takes_only_ascii_digits() {
        let mut d = SseDecoder::new();
        let events = d
            .decode(
                b"retry: 1500\ndata: a\n\nretry: 2x\ndata: b\n\nretry: 99999999999999999999999\n\n",
            )
            .unwrap();
        assert_eq!(events[0].retry, Some(1500));
        assert_eq!(events[1].retry, None);
        assert_eq!(d.reconnection_time_ms(), Some(1500));
    }

    #[test]
    fn leading_bom_is_skipped_even_when_split() {
        let events = decode_all(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]);
        assert_eq!(data(&events), ["a"]);
        // Only at the very start.
        let events = decode_all(&[b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"]);
        assert_eq!(data(&events), ["a"]);
    }

    #[test]
    fn field_without_colon_has_empty_value() {
        let events = decode_all(&[b"event\ndata\n\n"]);
        assert_eq!(events[0].event, None);
        assert_eq!(events[0].data, "");
    }

    #[test]
    fn over_limit_line_is_a_typed_error_even_when_split() {
        let limits = SseLimits {
            max_line_bytes: 16,
            max_event_bytes: 1024,
        };
        let mut d = SseDecoder::with_limits(limits);
        let mut out = Vec::new();
        d.feed(b"data: 0123456", &mut out).unwrap();
        assert_eq!(
            d.feed(b"789abcdef", &mut out),
            Err(SseError::LineTooLong { limit: 16 })
        );
        assert_eq!(
            d.feed(b"\n\n", &mut out),
            Err(SseError::LineTooLong { limit: 16 }),
            "the decoder stays failed"
        );
        let mut d = SseDecoder::with_limits(limits);
        assert_eq!(
            d.decode(b"data: 0123456789abcdef\n"),
            Err(SseError::LineTooLong { limit: 16 })
        );
    }

    #[test]
    fn over_limit_event_is_a_typed_error() {
        let mut d = SseDecoder::with_limits(SseLimits {
            max_line_bytes: 64,
            max_event_bytes: 20,
        });
        assert_eq!(
            d.decode(b"data: 0123456789\ndata: 0123456789\n\n"),
            Err(SseError::EventTooLarge { limit: 20 })
        );
    }

    #[test]
    fn finish_returns_an_event_missing_its_blank_line() {
        let mut d = SseDecoder::new();
        assert!(d
            .decode(b"event: message_stop\ndata: {}")
            .unwrap()
            .is_empty());
        let last = d.finish().unwrap().unwrap();
        assert_eq!(last.event.as_deref(), Some("message_stop"));
        assert_eq!(last.data, "{}");
        let mut d = SseDecoder::new();
        d.decode(b"data: a\n\n").unwrap();
        assert_eq!(d.finish().unwrap(), None);
    }
}
