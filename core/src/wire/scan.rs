//! A strict reader for compact JSON, for the few event shapes that make up nearly every event
//! of a stream (text and argument deltas), so that they are read without serde_json.
//!
//! It reads only what it can read exactly as serde_json would: no whitespace between tokens
//! (but see [`Scan::spaced`]), strings without `\u` escapes or control characters, unsigned
//! integers without a sign, fraction, exponent or leading zero. Anything else makes a read
//! return `None`, and the caller hands the event to serde_json instead; so a fast reader built
//! on [`Scan`] either agrees with serde_json or declines (each is held to that by a proptest).
//!
//! [`Scan::skip_value`] goes further for values that are skipped or kept as raw text (a
//! Gemini chunk's safety ratings, a function call's arguments): any value nested at most
//! [`MAX_SKIP_DEPTH`] levels, numbers of at most [`MAX_NUMBER_DIGITS`] digits and a two-digit
//! exponent, `\u` escapes of characters that are not surrogates: within those bounds nothing
//! serde_json would refuse (a number out of range, a lone surrogate, too deep a nesting) can
//! pass.
//!
//! Text is checked for UTF-8 only in the strings that are read: a string that is skipped may
//! hold invalid UTF-8, which serde_json would read as U+FFFD in a value that is ignored either
//! way, and invalid bytes anywhere else break the shape.

use crate::wire::borrow::Str;
use std::borrow::Cow;

/// The deepest nesting [`Scan::skip_value`] reads (serde_json refuses 128 levels, counted
/// from the outermost value; a skipped value is never more than a few levels down).
pub(crate) const MAX_SKIP_DEPTH: u32 = 64;

/// The most digits (integer and fraction) of a number [`Scan::skip_value`] reads: with an
/// exponent of at most two digits, its magnitude stays far from the ends of an `f64`, where
/// serde_json would refuse it as out of range.
pub(crate) const MAX_NUMBER_DIGITS: usize = 40;

/// A cursor over JSON text; see the [module docs](self).
///
/// `SPACED` readers allow JSON's whitespace (space, tab, line feed, carriage return) between
/// tokens, as serde_json does: for providers whose events are not compact (Gemini's have a
/// space after every colon). Compact readers decline it, at no cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scan<'a, const SPACED: bool = false> {
    rest: &'a [u8],
}

impl<'a> Scan<'a> {
    /// A reader of compact JSON.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Scan { rest: bytes }
    }
}

impl<'a> Scan<'a, true> {
    /// A reader that allows whitespace between tokens (not before the first nor after the
    /// last: event data are trimmed).
    pub(crate) fn spaced(bytes: &'a [u8]) -> Self {
        Scan { rest: bytes }
    }
}

impl<'a, const SPACED: bool> Scan<'a, SPACED> {
    /// Skips whitespace between tokens, when this reader allows it.
    #[inline]
    fn space(&mut self) {
        if SPACED {
            while let [b' ' | b'\t' | b'\n' | b'\r', rest @ ..] = self.rest {
                self.rest = rest;
            }
        }
    }

    /// What is left to read.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Whether everything was read.
    pub(crate) fn at_end(&self) -> bool {
        self.rest.is_empty()
    }

    /// Reads `literal` exactly.
    pub(crate) fn literal(&mut self, literal: &[u8]) -> Option<()> {
        self.rest = self.rest.strip_prefix(literal)?;
        Some(())
    }

    /// Reads `null`; `None` (nothing read) when the next value is not `null`.
    pub(crate) fn null(&mut self) -> Option<()> {
        self.literal(b"null")
    }

    /// A string, unescaped and borrowed when it has no escapes.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        let (text, rest) = string_after_quote(self.rest.strip_prefix(b"\"")?)?;
        self.rest = rest;
        Some(text)
    }

    /// A string or `null` (`Some(None)`).
    pub(crate) fn string_or_null(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null().is_some() {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// An unsigned integer of at most 19 digits (so it fits a `u64`).
    pub(crate) fn uint(&mut self) -> Option<u64> {
        let digits = self.rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 19 || (digits > 1 && self.rest[0] == b'0') {
            return None;
        }
        let (number, rest) = self.rest.split_at(digits);
        self.rest = rest;
        Some(
            number
                .iter()
                .fold(0, |n, digit| n * 10 + u64::from(digit - b'0')),
        )
    }

    /// An unsigned integer or `null` (`Some(None)`).
    pub(crate) fn uint_or_null(&mut self) -> Option<Option<u64>> {
        if self.null().is_some() {
            return Some(None);
        }
        self.uint().map(Some)
    }

    /// Skips a value that is ignored: a string, an unsigned integer, `null`, `true`, `false`,
    /// `[]` or `{}`. Other values (nested ones, other numbers) are not skipped: `None`.
    pub(crate) fn skip(&mut self) -> Option<()> {
        match self.rest.first()? {
            b'"' => {
                self.rest = skip_string_after_quote::<false>(&self.rest[1..])?;
                Some(())
            }
            b'0'..=b'9' => self.uint().map(drop),
            _ => [&b"null"[..], b"true", b"false", b"[]", b"{}"]
                .iter()
                .find_map(|literal| self.literal(literal)),
        }
    }

    /// Reads an object, calling `field` with each key (its raw bytes, which have no escapes)
    /// and the cursor before the key's value, which `field` must read.
    pub(crate) fn object(
        &mut self,
        mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        self.literal(b"{")?;
        self.space();
        if self.literal(b"}").is_some() {
            return Some(());
        }
        loop {
            let key = self.key()?;
            field(self, key)?;
            self.space();
            match self.rest.split_first()? {
                (b',', rest) => {
                    self.rest = rest;
                    self.space();
                }
                (b'}', rest) => {
                    self.rest = rest;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Reads an array, calling `element` with the cursor before each element.
    pub(crate) fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.literal(b"[")?;
        self.space();
        if self.literal(b"]").is_some() {
            return Some(());
        }
        loop {
            element(self)?;
            self.space();
            match self.rest.split_first()? {
                (b',', rest) => {
                    self.rest = rest;
                    self.space();
                }
                (b']', rest) => {
                    self.rest = rest;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A key and its colon: the key's bytes, when it has no escape or control character.
    ///
    /// Always inlined, as is [`skip_string_after_quote`]: called once per key, a call cost
    /// more than the search of a short key (callgrind: 6 % of a Gemini stream's decoding).
    #[inline(always)]
    fn key(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest.strip_prefix(b"\"")?;
        let (key, rest) = rest.split_at(string_stop(rest)?);
        if rest[0] != b'"' {
            return None;
        }
        self.rest = &rest[1..];
        self.colon()?;
        Some(key)
    }

    /// The colon after a key, and the whitespace around it.
    fn colon(&mut self) -> Option<()> {
        self.space();
        self.literal(b":")?;
        self.space();
        Some(())
    }

    /// Skips any JSON value within the bounds of the [module docs](self) (nesting, digits,
    /// escapes); `None` beyond them or for what is not JSON. Strings are not checked for
    /// UTF-8, as in [`Scan::skip`].
    pub(crate) fn skip_value(&mut self) -> Option<()> {
        // Bit `d` of `objects`: whether the container at depth `d + 1` is an object.
        let mut objects: u64 = 0;
        let mut depth: u32 = 0;
        loop {
            // At a value.
            let (&first, rest) = self.rest.split_first()?;
            match first {
                b'{' | b'[' => {
                    if depth == MAX_SKIP_DEPTH {
                        return None;
                    }
                    self.rest = rest;
                    self.space();
                    let object = first == b'{';
                    let close: &[u8] = if object { b"}" } else { b"]" };
                    if self.literal(close).is_none() {
                        objects = objects << 1 | u64::from(object);
                        depth += 1;
                        if object {
                            self.skipped_key()?;
                        }
                        continue;
                    }
                }
                b'"' => self.rest = skip_string_after_quote::<true>(rest)?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => {
                    [&b"null"[..], b"true", b"false"]
                        .iter()
                        .find_map(|literal| self.literal(literal))?;
                }
            }
            // After a value: the containers it ends.
            loop {
                if depth == 0 {
                    return Some(());
                }
                self.space();
                let object = objects & 1 == 1;
                match self.rest.split_first()? {
                    (b',', rest) => {
                        self.rest = rest;
                        self.space();
                        if object {
                            self.skipped_key()?;
                        }
                        break;
                    }
                    (b'}', rest) if object => self.rest = rest,
                    (b']', rest) if !object => self.rest = rest,
                    _ => return None,
                }
                objects >>= 1;
                depth -= 1;
            }
        }
    }

    /// Skips a value and gives its text: the raw JSON of a value kept as it is.
    pub(crate) fn raw_value(&mut self) -> Option<&'a [u8]> {
        let start = self.rest;
        self.skip_value()?;
        Some(&start[..start.len() - self.rest.len()])
    }

    /// A key of an object being skipped (escapes allowed) and its colon.
    fn skipped_key(&mut self) -> Option<()> {
        let rest = self.rest.strip_prefix(b"\"")?;
        self.rest = skip_string_after_quote::<true>(rest)?;
        self.colon()
    }

    /// Skips a number: JSON's grammar (`-`, no leading zero, a fraction and an exponent each
    /// with at least one digit), at most [`MAX_NUMBER_DIGITS`] digits before the exponent and
    /// two in it.
    fn number(&mut self) -> Option<()> {
        let digits = |bytes: &[u8]| bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        let mut at = usize::from(self.rest.first() == Some(&b'-'));
        let int = digits(&self.rest[at..]);
        if int == 0 || (int > 1 && self.rest[at] == b'0') {
            return None;
        }
        at += int;
        let mut total = int;
        if self.rest.get(at) == Some(&b'.') {
            let fraction = digits(&self.rest[at + 1..]);
            if fraction == 0 {
                return None;
            }
            at += 1 + fraction;
            total += fraction;
        }
        if total > MAX_NUMBER_DIGITS {
            return None;
        }
        if matches!(self.rest.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(self.rest.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            let exponent = digits(&self.rest[at..]);
            if exponent == 0 || exponent > 2 {
                return None;
            }
            at += exponent;
        }
        self.rest = &self.rest[at..];
        Some(())
    }
}

/// Records whether a field was seen, for readers that must decline a duplicate field (serde's
/// derived readers refuse one).
pub(crate) fn first_time(seen: &mut bool) -> Option<()> {
    if std::mem::replace(seen, true) {
        None
    } else {
        Some(())
    }
}

/// `null` (`Some(None)`) or what `read` reads.
pub(crate) fn or_null<'a, T, const SPACED: bool>(
    scan: &mut Scan<'a, SPACED>,
    read: impl FnOnce(&mut Scan<'a, SPACED>) -> Option<T>,
) -> Option<Option<T>> {
    if scan.null().is_some() {
        return Some(None);
    }
    read(scan).map(Some)
}

/// An array, each element read by `read`.
pub(crate) fn list<'a, T, const SPACED: bool>(
    scan: &mut Scan<'a, SPACED>,
    mut read: impl FnMut(&mut Scan<'a, SPACED>) -> Option<T>,
) -> Option<Vec<T>> {
    let mut items = Vec::new();
    scan.array(|scan| {
        items.push(read(scan)?);
        Some(())
    })?;
    Some(items)
}

/// A field's string or `null`, as an optional [`Str`]; `None` for a duplicate field.
pub(crate) fn fast_str<'a, const SPACED: bool>(
    scan: &mut Scan<'a, SPACED>,
    seen: &mut bool,
) -> Option<Option<Str<'a>>> {
    first_time(seen)?;
    Some(scan.string_or_null()?.map(Str))
}

/// A field's unsigned integer or `null`; `None` for a duplicate field.
pub(crate) fn fast_index<const SPACED: bool>(
    scan: &mut Scan<'_, SPACED>,
    seen: &mut bool,
) -> Option<Option<u64>> {
    first_time(seen)?;
    scan.uint_or_null()
}

/// The JSON string whose opening quote precedes `bytes`, unescaped, and the bytes after its
/// closing quote; `None` for what only serde_json reads exactly (`\u` escapes) or refuses
/// (a control character, an unknown escape, invalid UTF-8, no closing quote).
pub(crate) fn string_after_quote(bytes: &[u8]) -> Option<(Cow<'_, str>, &[u8])> {
    let mut unescaped: Option<Vec<u8>> = None;
    let mut rest = bytes;
    loop {
        let (run, tail) = rest.split_at(string_stop(rest)?);
        if tail[0] == b'"' {
            let text = match unescaped {
                None => Cow::Borrowed(std::str::from_utf8(run).ok()?),
                Some(mut out) => {
                    out.extend_from_slice(run);
                    Cow::Owned(String::from_utf8(out).ok()?)
                }
            };
            return Some((text, &tail[1..]));
        }
        // A backslash, or a control character, which `unescape` refuses.
        let byte = unescape(tail[0], *tail.get(1)?)?;
        // Unescaped text is never longer than what is left of the data: one allocation.
        let out = unescaped.get_or_insert_with(|| Vec::with_capacity(bytes.len()));
        out.extend_from_slice(run);
        out.push(byte);
        rest = &tail[2..];
    }
}

/// Like [`string_after_quote`], for a string that is not kept: its text is not checked for
/// UTF-8 (see the module docs) nor unescaped: the bytes after its closing quote. With
/// `UNICODE`, `\u` escapes of characters that are not surrogates are allowed too (each
/// stands for a character whatever follows it; serde_json refuses a lone surrogate).
#[inline(always)]
fn skip_string_after_quote<const UNICODE: bool>(bytes: &[u8]) -> Option<&[u8]> {
    let mut rest = bytes;
    loop {
        let tail = &rest[string_stop(rest)?..];
        if tail[0] == b'"' {
            return Some(&tail[1..]);
        }
        let letter = *tail.get(1)?;
        if UNICODE && tail[0] == b'\\' && letter == b'u' {
            let hex = tail.get(2..6)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let code = hex.iter().fold(0, |n, &b| {
                n * 16 + char::from(b).to_digit(16).unwrap_or_default()
            });
            if (0xd800..0xe000).contains(&code) {
                return None;
            }
            rest = &tail[6..];
            continue;
        }
        unescape(tail[0], letter)?;
        rest = &tail[2..];
    }
}

/// Where a run of plain string text in `bytes` stops: at the first quote, backslash or
/// control character (which a JSON string may not hold raw).
///
/// Strings in events are mostly short (keys, ids, a few words of text), where a `memchr2` call
/// costs more than it saves, and they must be checked for control characters anyway: so the
/// bytes are read eight at a time as a `u64`, flagging the three kinds of byte at once (the
/// classic "has zero byte" and "has byte less than" bit tricks; a flag can be spurious only
/// above a true one, so the lowest flag is exact).
fn string_stop(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    let zero_bytes = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let mut words = bytes.chunks_exact(8);
    let mut offset = 0;
    for word in &mut words {
        let mut eight = [0; 8];
        eight.copy_from_slice(word);
        let w = u64::from_le_bytes(eight);
        let flags = zero_bytes(w ^ (ONES * u64::from(b'"')))
            | zero_bytes(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS);
        if flags != 0 {
            return Some(offset + flags.trailing_zeros() as usize / 8);
        }
        offset += 8;
    }
    let stop = words
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    Some(offset + stop)
}

/// The byte that the escape `\` `letter` stands for; `None` for `\u` and unknown escapes, and
/// when `first` is not a backslash (a control character where an escape was looked for).
fn unescape(first: u8, letter: u8) -> Option<u8> {
    if first != b'\\' {
        return None;
    }
    Some(match letter {
        b @ (b'"' | b'\\' | b'/') => b,
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_unescape_and_decline_what_only_serde_reads() {
        let mut scan = Scan::new(br#""a\"b\n\/""#);
        assert_eq!(scan.string().as_deref(), Some("a\"b\n/"));
        assert!(scan.at_end());
        for declined in [
            &br#""\u00e9""#[..],
            b"\"a\x01\"",
            b"\"\xff\"",
            b"\"open",
            br#""\q""#,
        ] {
            assert_eq!(Scan::new(declined).string(), None, "{declined:?}");
        }
        // A skipped string is not checked for UTF-8, but still for its escapes.
        assert!(Scan::new(b"\"\xff\"").skip().is_some());
        assert!(Scan::new(br#""\u0041""#).skip().is_none());
    }

    proptest::proptest! {
        #[test]
        fn string_stop_finds_the_first_quote_backslash_or_control_character(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![proptest::prelude::any::<u8>(), 0x20u8..0x7f], 0..40),
        ) {
            let naive = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20);
            proptest::prop_assert_eq!(string_stop(&bytes), naive);
        }
    }

    #[test]
    fn skipped_values_are_any_json_within_the_bounds() {
        let read = |text: &str| {
            let mut scan = Scan::spaced(text.as_bytes());
            scan.raw_value().filter(|_| scan.at_end()).is_some()
        };
        for text in [
            r#"{"a": [1, -2.5e-3, {"b": null}], "c\u00e9": "\u20ac"}"#,
            "[ ]",
            "{ }",
            "-0",
            "9999999999999999999999999999999999999999",
            "1E+99",
            &format!("{}{}", "[".repeat(64), "]".repeat(64)),
        ] {
            assert!(read(text), "{text}");
        }
        for text in [
            &format!("{}{}", "[".repeat(65), "]".repeat(65))[..],
            "99999999999999999999999999999999999999999",
            "1e100",
            "01",
            "1.",
            ".5",
            "-",
            "1e",
            r#""\ud800""#,
            // A pair too: declining costs only the slower reading.
            r#""\ud83d\ude00""#,
            r#""\u00g1""#,
            r#""\u+0ff""#,
            "[1,]",
            r#"{"a" 1}"#,
            "[1 2]",
            "nul",
        ] {
            assert!(!read(text), "{text}");
        }
        // Compact readers skip no whitespace.
        assert!(Scan::new(b"[1, 2]").skip_value().is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            rng_seed: proptest::test_runner::RngSeed::Fixed(54),
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// What `skip_value` skips, serde_json reads; mangled values included.
        #[test]
        fn what_skip_value_skips_serde_json_reads(
            value in strategies::json_value(),
            pretty in proptest::prelude::any::<bool>(),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            insert in proptest::collection::vec(
                proptest::sample::select(b" \"\\u{}[],:-.+0eE9d8".to_vec()), 0..4),
        ) {
            let mut text = if pretty {
                serde_json::to_string_pretty(&value).unwrap_or_default()
            } else {
                value.to_string()
            }
            .into_bytes();
            let at = at.index(text.len() + 1);
            text.splice(at..at, insert);
            let mut scan = Scan::spaced(&text);
            if scan.skip_value().is_some() && scan.at_end() {
                // Skipped strings are not checked for UTF-8: the data are read as their
                // replaced text (`borrow::parse_json`).
                let text = String::from_utf8_lossy(&text);
                proptest::prop_assert!(
                    serde_json::from_str::<serde_json::Value>(&text).is_ok(),
                    "{}",
                    text
                );
            }
        }
    }

    #[test]
    fn integers_are_plain_unsigned_and_fit_u64() {
        assert_eq!(Scan::new(b"0").uint(), Some(0));
        assert_eq!(
            Scan::new(b"9999999999999999999").uint(),
            Some(9_999_999_999_999_999_999)
        );
        for declined in [&b"01"[..], b"-1", b"", b"10000000000000000000"] {
            assert_eq!(Scan::new(declined).uint(), None, "{declined:?}");
        }
        // What follows the digits is the caller's to read (`1.5` leaves `.5`, which no
        // object or array reader accepts).
        let mut scan = Scan::new(b"1.5");
        assert_eq!(scan.uint(), Some(1));
        assert!(!scan.at_end());
    }

    #[test]
    fn objects_and_arrays_read_compact_json_only() {
        let mut keys = Vec::new();
        let mut scan = Scan::new(br#"{"a":1,"b":[null,"x"],"c":{}}"#);
        let read = scan.object(|scan, key| {
            keys.push(String::from_utf8_lossy(key).into_owned());
            match key {
                b"b" => scan.array(Scan::skip),
                _ => scan.skip(),
            }
        });
        assert_eq!(read, Some(()));
        assert!(scan.at_end());
        assert_eq!(keys, ["a", "b", "c"]);
        for declined in [
            &br#"{ "a":1}"#[..],
            br#"{"a" :1}"#,
            br#"{"a":1,}"#,
            br#"{"\u0061":1}"#,
        ] {
            assert_eq!(Scan::new(declined).object(|scan, _| scan.skip()), None);
        }
    }
}

/// Strategies for the proptests that hold the fast readers to serde_json: JSON objects of the
/// shapes the providers send, with fields left out and an unknown `extra` field of any kind.
#[cfg(test)]
pub(crate) mod strategies {
    use proptest::prelude::*;
    use serde_json::{json, Value};

    pub(crate) fn text_or_null() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            "(?s).{0,12}".prop_map(Value::from),
            Just(json!("")),
        ]
    }

    /// Any JSON value, nested a few levels, its strings any text (escapes, non-ASCII), its
    /// numbers integers and floats that serde_json writes within a two-digit exponent.
    pub(crate) fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    pub(crate) fn field() -> impl Strategy<Value = Value> {
        prop_oneof![
            text_or_null(),
            (0u64..3).prop_map(Value::from),
            Just(json!(true)),
            Just(json!([])),
            Just(json!({})),
            Just(json!(-1)),
            Just(json!(1.5)),
            Just(json!({"a": [1]})),
        ]
    }

    /// An object with the given fields, some left out, plus an unknown one.
    pub(crate) fn object(
        fields: Vec<(&'static str, BoxedStrategy<Value>)>,
    ) -> BoxedStrategy<Value> {
        (
            fields
                .into_iter()
                .map(|(k, v)| proptest::option::of(v).prop_map(move |v| (k, v)))
                .collect::<Vec<_>>(),
            proptest::option::of(field()),
        )
            .prop_map(move |(fields, extra)| {
                let mut map = serde_json::Map::new();
                for (k, v) in fields {
                    if let Some(v) = v {
                        map.insert(k.to_owned(), v);
                    }
                }
                if let Some(extra) = extra {
                    map.insert("extra".to_owned(), extra);
                }
                Value::Object(map)
            })
            .boxed()
    }

    /// Whether every unknown field holds a value the fast reader skips.
    pub(crate) fn plain_extras(v: &Value) -> bool {
        match v {
            Value::Object(map) => map.iter().all(|(k, v)| {
                let skippable = match v {
                    Value::Number(n) => n.is_u64(),
                    Value::Array(a) => a.is_empty(),
                    Value::Object(o) => o.is_empty(),
                    _ => true,
                };
                (k != "extra" || skippable) && plain_extras(v)
            }),
            Value::Array(items) => items.iter().all(plain_extras),
            _ => true,
        }
    }
}
