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
//! Two ways to take events: [`SseDecoder::feed`] appends owned [`SseEvent`]s, their data as
//! text; [`SseDecoder::feed_with`] lends each event as an [`SseEventRef`] whose data are the
//! stream's bytes, not yet checked for UTF-8, so that the text is checked once, where it is
//! parsed (the framing itself never looks at the text: issue 21). An event whose one `data:`
//! line and blank line arrived whole in a read is lent straight from that read, not copied.
//!
//! One deliberate deviation: at end of input the WHATWG rules discard an event that was not
//! ended by a blank line. [`SseDecoder::finish`] returns it instead (as the official Python
//! SDK's decoder does), so a stream whose last `data:` line lacks its final newline is not
//! lost; callers decide whether to trust it.

use std::fmt;

/// Size limits that keep a hostile or broken stream from using unbounded memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

impl SseLimits {
    /// Sets [`max_line_bytes`](Self::max_line_bytes).
    #[must_use]
    pub fn with_max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }

    /// Sets [`max_event_bytes`](Self::max_event_bytes).
    #[must_use]
    pub fn with_max_event_bytes(mut self, bytes: usize) -> Self {
        self.max_event_bytes = bytes;
        self
    }
}

/// A stream that broke a size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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

    /// The event lent as an [`SseEventRef`] (its data as the bytes of its text).
    #[must_use]
    pub fn as_event_ref(&self) -> SseEventRef<'_> {
        SseEventRef {
            event: self.event.as_deref(),
            data: self.data.as_bytes(),
            id: self.id.as_deref(),
            retry: self.retry,
        }
    }
}

/// One dispatched event, lent by [`SseDecoder::feed_with`]: the same fields as [`SseEvent`],
/// borrowed, and the data as the stream sent them — bytes that may not be valid UTF-8.
///
/// ```
/// use rebound_core::wire::sse::{SseDecoder, SseError};
///
/// let mut decoder = SseDecoder::new();
/// let mut names = Vec::new();
/// decoder
///     .feed_with(b"event: delta\ndata: {\"text\":\"h\xc3\xa9\"}\n\n", |event| {
///         assert_eq!(event.data, "{\"text\":\"h\u{e9}\"}".as_bytes());
///         names.push(event.name().to_owned());
///         Ok::<(), SseError>(())
///     })
///     .unwrap();
/// assert_eq!(names, ["delta"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    /// The `event:` field, when the event had one (invalid UTF-8 replaced with U+FFFD).
    pub event: Option<&'a str>,
    /// The `data:` lines joined with `\n`, as received (not checked for UTF-8).
    pub data: &'a [u8],
    /// The last event id at dispatch time, when one was set.
    pub id: Option<&'a str>,
    /// A `retry:` value (ms) given within this event's lines.
    pub retry: Option<u64>,
}

impl SseEventRef<'_> {
    /// The event's type: its `event:` field, or `message` when it had none.
    #[must_use]
    pub fn name(&self) -> &str {
        self.event.unwrap_or("message")
    }

    /// The event as an owned [`SseEvent`], invalid UTF-8 in its data replaced with U+FFFD.
    #[must_use]
    pub fn to_event(&self) -> SseEvent {
        SseEvent {
            event: self.event.map(str::to_owned),
            data: String::from_utf8_lossy(self.data).into_owned(),
            id: self.id.map(str::to_owned),
            retry: self.retry,
        }
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
    /// The `event:` name of the current event when `named`, else the last one seen: streams
    /// repeat a few names, and a name equal to the last one is taken without reading it again.
    event_type: String,
    /// Whether the current event has a (non-empty) name, in `event_type`.
    named: bool,
    /// The data lines of the current event as received, each followed by `\n`.
    data: Vec<u8>,
    /// The size of `data` as text (invalid UTF-8 replaced), once an event came near the
    /// limit; see [`SseDecoder::admit_data`].
    data_text_len: Option<usize>,
    last_event_id: String,
    retry: Option<u64>,
    reconnection_ms: Option<u64>,
    failed: Option<SseError>,
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

/// The line endings (`\n` and `\r`) of one read, handed out in order: `memchr2`, with its
/// AVX2 searcher built once per read where the CPU has it (the plain call chooses it again
/// for every line, through a function pointer: 7 % of the framing's instructions, issue 21).
struct LineEnds<'b> {
    bytes: &'b [u8],
    #[cfg(target_arch = "x86_64")]
    avx2: Option<memchr::arch::x86_64::avx2::memchr::Two>,
}

impl<'b> LineEnds<'b> {
    fn new(bytes: &'b [u8]) -> Self {
        LineEnds {
            bytes,
            #[cfg(target_arch = "x86_64")]
            avx2: memchr::arch::x86_64::avx2::memchr::Two::new(b'\n', b'\r'),
        }
    }

    /// The first line ending at or after `from` (`from <= bytes.len()`).
    #[inline]
    fn next(&self, from: usize) -> Option<usize> {
        let rest = &self.bytes[from..];
        #[cfg(target_arch = "x86_64")]
        if let Some(avx2) = &self.avx2 {
            return avx2.find(rest).map(|at| from + at);
        }
        memchr::memchr2(b'\n', b'\r', rest).map(|at| from + at)
    }
}

/// Where the line after the line ending at `bytes[end]` (`\r`, `\n` or `\r\n`) starts; a
/// `\r` that ends `bytes` counts alone (see [`SseDecoder::after_line_end`]).
#[inline]
fn line_after(bytes: &[u8], end: usize) -> usize {
    match bytes.get(end..end + 2) {
        Some(b"\r\n") => end + 2,
        _ => end + 1,
    }
}

/// `a == b` for two slices of the same length, compared eight bytes at a time in line: event
/// names are short, and a call to `memcmp` for one cost more than the comparison (issue 21).
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let Some(last) = a.len().checked_sub(8) else {
        return a.iter().zip(b).all(|(x, y)| x == y);
    };
    let mut at = 0;
    while at < last {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    // The last eight bytes, overlapping words already compared.
    word(a, last) == word(b, last)
}

/// One line of the stream, read: a field and its value, one space after the colon dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line<'l> {
    /// The blank line that ends an event.
    Blank,
    /// `data:`
    Data(&'l [u8]),
    /// `event:`
    Event(&'l [u8]),
    /// `id:`
    Id(&'l [u8]),
    /// `retry:`
    Retry(&'l [u8]),
    /// A comment or an unknown field.
    Ignored,
}

impl<'l> Line<'l> {
    fn parse(line: &'l [u8]) -> Self {
        if line.is_empty() {
            return Line::Blank;
        }
        let value = |value: &'l [u8]| value.strip_prefix(b" ").unwrap_or(value);
        // Nearly every line is a `data:` line: it is recognized without a search.
        if let Some(data) = line.strip_prefix(b"data:") {
            return Line::Data(value(data));
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => (&line[..colon], value(&line[colon + 1..])),
            None => (line, &[][..]),
        };
        match field {
            b"data" => Line::Data(value),
            b"event" => Line::Event(value),
            b"id" => Line::Id(value),
            b"retry" => Line::Retry(value),
            _ => Line::Ignored,
        }
    }
}

/// `value` as text, invalid UTF-8 replaced with U+FFFD. Valid text (nearly every stream)
/// takes `str::from_utf8`'s fast path; `String::from_utf8_lossy` walks the bytes in chunks
/// and cost a third of the framing time.
fn utf8_lossy(value: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(value) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(value),
    }
}

/// The length of `value` as text, invalid UTF-8 replaced with U+FFFD (3 bytes for each
/// invalid sequence of 1 to 3 bytes): never less than `value.len()`, never more than three
/// times it.
fn text_len(value: &[u8]) -> usize {
    match std::str::from_utf8(value) {
        Ok(_) => value.len(),
        Err(_) => String::from_utf8_lossy(value).len(),
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
            named: false,
            data: Vec::new(),
            data_text_len: None,
            last_event_id: String::new(),
            retry: None,
            reconnection_ms: None,
            failed: None,
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
        self.feed_with(bytes, |event: &SseEventRef<'_>| {
            out.push(event.to_event());
            Ok::<(), SseError>(())
        })
    }

    /// Feeds the next bytes of the stream, calling `on_event` with every event they complete.
    ///
    /// The event is lent, not given: it borrows the decoder's buffers, which are reused for
    /// the next one, or `bytes` themselves, so decoding allocates nothing per event; its data
    /// are bytes, not yet checked for UTF-8 (see [`SseEventRef`]). A limit error is converted
    /// into `E` and leaves the decoder failed; an error from `on_event` is returned as is and
    /// the rest of `bytes` is not decoded.
    pub fn feed_with<E, F>(&mut self, mut bytes: &[u8], mut on_event: F) -> Result<(), E>
    where
        E: From<SseError>,
        F: FnMut(&SseEventRef<'_>) -> Result<(), E>,
    {
        if let Some(e) = self.failed {
            return Err(e.into());
        }
        // A `\r` that ended the last read and a `\n` that starts this one are one line
        // ending; an empty read in between changes nothing.
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if let [b'\n', rest @ ..] = bytes {
                bytes = rest;
            }
        }
        let ends = LineEnds::new(bytes);
        let mut at = 0;
        while at < bytes.len() {
            if self.between_events() {
                at = self.lend_events(bytes, at, &ends, &mut on_event)?;
                if at == bytes.len() {
                    break;
                }
            }
            let Some(end) = ends.next(at) else {
                let rest = &bytes[at..];
                if self.line.len() + rest.len() > self.limits.max_line_bytes {
                    let e = self.fail(SseError::LineTooLong {
                        limit: self.limits.max_line_bytes,
                    });
                    return Err(e.into());
                }
                self.line.extend_from_slice(rest);
                break;
            };
            let line = &bytes[at..end];
            at = self.after_line_end(bytes, end);
            let taken = if self.line.is_empty() {
                self.take_line(line).and_then(|taken| self.apply(taken))
            } else {
                // Only the first line of a read can continue a buffered one.
                let mut buffered = std::mem::take(&mut self.line);
                buffered.extend_from_slice(line);
                let r = self
                    .take_line(&buffered)
                    .and_then(|taken| self.apply(taken));
                buffered.clear();
                self.line = buffered;
                r
            };
            match taken {
                Err(e) => return Err(self.fail(e).into()),
                Ok(false) => {}
                Ok(true) => {
                    let result = on_event(&self.event_ref(&self.data));
                    self.reset_event();
                    result?;
                }
            }
        }
        Ok(())
    }

    /// Whether the decoder is between two events, after the first line of the stream: no line
    /// pending, no data buffered, no event near the limit. Where [`SseDecoder::lend_events`]
    /// may go.
    #[inline]
    fn between_events(&self) -> bool {
        self.line.is_empty()
            && !self.at_start
            && self.data.is_empty()
            && self.data_text_len.is_none()
    }

    /// Dispatches the events at `bytes[at..]` that take the common shape, their data lent from
    /// `bytes`: the name already in `event_type` (`event: ` and that name: streams name nearly
    /// every event with one of a few names) or none, one `data:` line, the blank line, all
    /// whole in `bytes` and within the limits, far enough from the event limit that
    /// [`SseDecoder::admit_data`] would not count the text. Returns where it stopped: a line of
    /// another kind, or one not yet whole, read line by line. Called when
    /// [`SseDecoder::between_events`]; leaves the decoder in the state reading the same lines
    /// one at a time would have left (which the proptest checks).
    #[inline(always)]
    fn lend_events<E, F>(
        &mut self,
        bytes: &[u8],
        mut at: usize,
        ends: &LineEnds<'_>,
        on_event: &mut F,
    ) -> Result<usize, E>
    where
        F: FnMut(&SseEventRef<'_>) -> Result<(), E>,
    {
        let SseDecoder {
            limits,
            event_type,
            named,
            last_event_id,
            retry,
            after_cr,
            ..
        } = self;
        let name = event_type.as_bytes();
        let event_line = b"event: ".len() + name.len();
        let name_fits = event_line <= limits.max_line_bytes;
        loop {
            if name_fits && bytes[at..].starts_with(b"event: ") {
                // The same name again: as `set_event_type`, which found it within the event
                // limit when it came first (data were buffered then, none are now).
                let end = at + event_line;
                let next = match bytes.get(end..end + 2) {
                    Some([b'\n', _]) => end + 1,
                    Some(b"\r\n") => end + 2,
                    Some([b'\r', _]) => end + 1,
                    // The end of the read, even after a `\r`: line by line.
                    _ => return Ok(at),
                };
                if !same_bytes(&bytes[at + b"event: ".len()..end], name) {
                    return Ok(at);
                }
                *named = !name.is_empty();
                at = next;
            }
            if !bytes[at..].starts_with(b"data:") {
                return Ok(at);
            }
            let Some(end) = ends.next(at) else {
                return Ok(at);
            };
            if end - at > limits.max_line_bytes {
                return Ok(at);
            }
            let value = &bytes[at + b"data:".len()..end];
            let value = value.strip_prefix(b" ").unwrap_or(value);
            // Far from the limit, as `near_limit` counts it, with no data buffered.
            let name_len = if *named { name.len() } else { 0 };
            let worst = (value.len() + 1).saturating_mul(3);
            if name_len.saturating_add(worst) > limits.max_event_bytes {
                return Ok(at);
            }
            let blank = line_after(bytes, end);
            let next = match bytes.get(blank..) {
                Some([b'\n', ..]) => blank + 1,
                Some([b'\r', b'\n', ..]) => blank + 2,
                Some([b'\r']) => {
                    *after_cr = true;
                    blank + 1
                }
                Some([b'\r', ..]) => blank + 1,
                _ => return Ok(at),
            };
            let event = SseEventRef {
                event: named.then_some(event_type.as_str()),
                data: value,
                id: (!last_event_id.is_empty()).then_some(last_event_id.as_str()),
                retry: *retry,
            };
            // As `reset_event`.
            *named = false;
            *retry = None;
            at = next;
            on_event(&event)?;
            if at == bytes.len() {
                return Ok(at);
            }
        }
    }

    /// Where the line after the line ending at `bytes[end]` (`\r`, `\n` or `\r\n`) starts,
    /// noting a `\r` that ends the read (a `\n` at the start of the next read belongs to it).
    #[inline]
    fn after_line_end(&mut self, bytes: &[u8], end: usize) -> usize {
        if bytes[end] == b'\r' && end + 1 == bytes.len() {
            self.after_cr = true;
        }
        line_after(bytes, end)
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
            if let Err(e) = self.take_line(&line).and_then(|taken| self.apply(taken)) {
                return Err(self.fail(e));
            }
        }
        if self.dispatch() {
            let event = self.event_ref(&self.data).to_event();
            self.reset_event();
            Ok(Some(event))
        } else {
            Ok(None)
        }
    }

    /// Whether bytes of an unfinished line or event are buffered.
    #[must_use]
    pub fn has_pending(&self) -> bool {
        !self.line.is_empty() || !self.data.is_empty() || self.named
    }

    fn fail(&mut self, e: SseError) -> SseError {
        self.failed = Some(e);
        e
    }

    /// Reads one complete line (after a byte order mark at the very start of the stream,
    /// which counts against the line limit: a line still arriving is measured with it).
    fn take_line<'l>(&mut self, mut line: &'l [u8]) -> Result<Line<'l>, SseError> {
        if line.len() > self.limits.max_line_bytes {
            return Err(SseError::LineTooLong {
                limit: self.limits.max_line_bytes,
            });
        }
        if self.at_start {
            self.at_start = false;
            if let Some(rest) = line.strip_prefix(BOM) {
                line = rest;
            }
        }
        Ok(Line::parse(line))
    }

    /// Acts on one line; `Ok(true)` when it ended an event ready to dispatch.
    fn apply(&mut self, line: Line<'_>) -> Result<bool, SseError> {
        match line {
            Line::Blank => return Ok(self.dispatch()),
            Line::Data(value) => self.admit_data(value)?,
            Line::Event(value) => self.set_event_type(value)?,
            Line::Id(value) if !value.contains(&0) => {
                self.last_event_id.clear();
                self.last_event_id.push_str(&String::from_utf8_lossy(value));
            }
            Line::Retry(value) if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Digits only, so the text is ASCII; an overflowing value is ignored.
                if let Ok(ms) = String::from_utf8_lossy(value).parse::<u64>() {
                    self.retry = Some(ms);
                    self.reconnection_ms = Some(ms);
                }
            }
            Line::Id(_) | Line::Retry(_) | Line::Ignored => {}
        }
        Ok(false)
    }

    /// Names the current event, within [`SseLimits::max_event_bytes`].
    fn set_event_type(&mut self, value: &[u8]) -> Result<(), SseError> {
        if value != self.event_type.as_bytes() {
            let value = utf8_lossy(value);
            self.event_type.clear();
            self.event_type.push_str(&value);
        }
        let name = self.event_type.len();
        let data = if self.near_limit(name, 0) {
            self.data_text_len()
        } else {
            self.data.len()
        };
        if name + data > self.limits.max_event_bytes {
            return Err(self.too_large());
        }
        self.named = name > 0;
        Ok(())
    }

    fn too_large(&self) -> SseError {
        SseError::EventTooLarge {
            limit: self.limits.max_event_bytes,
        }
    }

    /// The size of the buffered data as text: computed once per event, the first time an
    /// event comes near the limit, then kept up to date line by line.
    fn data_text_len(&mut self) -> usize {
        *self
            .data_text_len
            .get_or_insert_with(|| text_len(&self.data))
    }

    /// Whether `name_len` bytes plus the buffered data plus `more` bytes might pass the limit
    /// as text (which is never more than three times as long as its bytes).
    fn near_limit(&self, name_len: usize, more: usize) -> bool {
        let worst = (self.data.len() + more).saturating_mul(3);
        self.data_text_len.is_some() || name_len.saturating_add(worst) > self.limits.max_event_bytes
    }

    /// Appends a `data:` line's value to the event, within [`SseLimits::max_event_bytes`].
    ///
    /// The limit counts the event as text, invalid UTF-8 replaced with U+FFFD, so that an
    /// owned [`SseEvent`] never exceeds it. The data stay bytes: their size as text is
    /// computed only for an event that comes within a factor of three of the limit (text is
    /// never shorter than its bytes, nor more than three times longer), and from then on one
    /// line at a time.
    fn admit_data(&mut self, value: &[u8]) -> Result<(), SseError> {
        let limit = self.limits.max_event_bytes;
        let name = if self.named { self.event_type.len() } else { 0 };
        if name + self.data.len() + value.len() + 1 > limit {
            return Err(self.too_large());
        }
        if self.near_limit(name, value.len() + 1) {
            let text = self.data_text_len() + text_len(value) + 1;
            if name + text > limit {
                return Err(self.too_large());
            }
            self.data_text_len = Some(text);
        }
        self.data.extend_from_slice(value);
        self.data.push(b'\n');
        Ok(())
    }

    /// Ends the current event: returns true when it has data (its last `\n` removed, ready
    /// for [`SseDecoder::event_ref`]), or resets it and returns false when it has none.
    fn dispatch(&mut self) -> bool {
        if self.data.is_empty() {
            self.named = false;
            self.retry = None;
            return false;
        }
        self.data.pop();
        true
    }

    /// The event being dispatched, with `data`: the buffer's, or a lent line.
    fn event_ref<'a>(&'a self, data: &'a [u8]) -> SseEventRef<'a> {
        SseEventRef {
            event: self.named.then_some(self.event_type.as_str()),
            data,
            id: (!self.last_event_id.is_empty()).then_some(self.last_event_id.as_str()),
            retry: self.retry,
        }
    }

    /// Clears the dispatched event's buffers for the next event.
    fn reset_event(&mut self) {
        self.data.clear();
        self.data_text_len = None;
        self.named = false;
        self.retry = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        // Even with an empty read between them (found by the cut property below).
        let events = decode_all(&[b"data: a\r", b"", b"\nid: 7\n\n"]);
        assert_eq!(data(&events), ["a"]);
        assert_eq!(events[0].id.as_deref(), Some("7"));
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

    /// Every event (owned) and the first error, feeding `stream` cut at `cuts`.
    fn decode_cut(
        limits: SseLimits,
        stream: &[u8],
        cuts: &[usize],
    ) -> (Vec<SseEvent>, Option<SseError>) {
        let mut d = SseDecoder::with_limits(limits);
        let mut events = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain([&stream.len()]) {
            let cut = cut.clamp(start, stream.len());
            if let Err(e) = d.feed(&stream[start..cut], &mut events) {
                return (events, Some(e));
            }
            start = cut;
        }
        match d.finish() {
            Ok(last) => events.extend(last),
            Err(e) => return (events, Some(e)),
        }
        (events, None)
    }

    #[test]
    fn a_lent_data_line_is_kept_when_the_event_goes_on_or_the_read_ends() {
        // Lent, then another data line, an event name and an id in the same read.
        let events = decode_all(&[b"data: a\ndata: b\nevent: e\nid: 1\n\n"]);
        assert_eq!(data(&events), ["a\nb"]);
        assert_eq!(events[0].name(), "e");
        // Lent, then the read ends before the blank line (or inside it, after a CR).
        let events = decode_all(&[b"data: a\n", b"\ndata: b\r", b"\n\r\n"]);
        assert_eq!(data(&events), ["a", "b"]);
        // A line near the event limit is not lent: its size as text (9 bytes) is counted.
        let mut d = SseDecoder::with_limits(SseLimits {
            max_line_bytes: 64,
            max_event_bytes: 8,
        });
        assert_eq!(
            d.decode(b"data: \xff\xff\xff\n\n"),
            Err(SseError::EventTooLarge { limit: 8 })
        );
    }

    #[test]
    fn events_read_whole_equal_events_read_a_byte_at_a_time_for_every_line_ending() {
        for ending in ["\n", "\r\n", "\r"] {
            let stream = [
                "event: delta",
                "data: 1",
                "",
                "event: delta",
                "data: 2",
                "",
                "data: 3",
                "",
                "event: other",
                "data: 4",
                "",
                "event: other",
                "id: 9",
                "data: 5",
                "",
                "event: other",
                "data: 6",
                "data: 7",
                "",
                "event: delta",
                "data:8",
                "",
            ]
            .join(ending)
                + ending;
            let whole = decode_cut(SseLimits::default(), stream.as_bytes(), &[]);
            let byte_at_a_time: Vec<usize> = (0..stream.len()).collect();
            let bytes = decode_cut(SseLimits::default(), stream.as_bytes(), &byte_at_a_time);
            assert_eq!(whole, bytes, "{ending:?}");
            let data: Vec<&str> = whole.0.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["1", "2", "3", "4", "5", "6\n7", "8"], "{ending:?}");
            let names: Vec<&str> = whole.0.iter().map(SseEvent::name).collect();
            let expected = [
                "delta", "delta", "message", "other", "other", "other", "delta",
            ];
            assert_eq!(names, expected, "{ending:?}");
        }
    }

    proptest! {
        /// `LineEnds` finds the same line endings as a byte-by-byte search, sparse or dense.
        #[test]
        fn line_ends_are_found_in_order(
            text in proptest::collection::vec(any::<u8>(), 0..9000),
            marks in proptest::collection::vec((any::<usize>(), any::<bool>()), 0..300),
            skips in proptest::collection::vec(0usize..200, 1..16),
        ) {
            let mut bytes: Vec<u8> = text
                .iter()
                .map(|&b| if b == b'\n' || b == b'\r' { b'x' } else { b })
                .collect();
            if !bytes.is_empty() {
                let len = bytes.len();
                for (at, lf) in marks {
                    bytes[at % len] = if lf { b'\n' } else { b'\r' };
                }
            }
            let naive = |from: usize| bytes[from..].iter().position(|&b| b == b'\n' || b == b'\r');
            let ends = LineEnds::new(&bytes);
            let mut from = 0;
            for skip in skips.iter().cycle() {
                if from >= bytes.len() {
                    break;
                }
                let found = ends.next(from);
                prop_assert_eq!(found, naive(from).map(|at| from + at), "from {}", from);
                match found {
                    Some(end) => from = end + 1 + skip,
                    None => break,
                }
            }
        }
    }

    fn piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"data: {\"a\":1}".to_vec()),
            Just(b"data:x".to_vec()),
            Just(b"data".to_vec()),
            Just(b"event: delta".to_vec()),
            Just(b"event:".to_vec()),
            Just(b"id: 7".to_vec()),
            Just(b"retry: 15".to_vec()),
            Just(b": comment".to_vec()),
            Just(b"other: field".to_vec()),
            Just(BOM.to_vec()),
            Just(b"\xe4\xb8\xad\xff".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\n\n".to_vec()),
            proptest::collection::vec(any::<u8>(), 0..12),
        ]
    }

    proptest! {
        #[test]
        fn events_and_errors_do_not_depend_on_where_the_reads_end(
            pieces in proptest::collection::vec(piece(), 0..40),
            cuts in proptest::collection::vec(0usize..400, 0..12),
            max_line_bytes in 4usize..48,
            max_event_bytes in 4usize..64,
            default_limits in any::<bool>(),
        ) {
            let stream = pieces.concat();
            let limits = if default_limits {
                SseLimits::default()
            } else {
                SseLimits { max_line_bytes, max_event_bytes }
            };
            let mut sorted = cuts.clone();
            sorted.sort_unstable();
            let whole = decode_cut(limits, &stream, &[]);
            let byte_at_a_time: Vec<usize> = (0..stream.len()).collect();
            prop_assert_eq!(&whole, &decode_cut(limits, &stream, &sorted));
            prop_assert_eq!(&whole, &decode_cut(limits, &stream, &byte_at_a_time));
        }
    }
}
