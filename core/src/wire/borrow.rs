//! Event data read as JSON with as little copying and checking as possible: a JSON string
//! that borrows from the input when it has no escapes (the hot text and argument deltas parse
//! without an allocation per field), and data parsed from the stream's bytes, so that their
//! UTF-8 is checked once, by the JSON parser, rather than by the SSE framing and again.

use serde::Deserialize;
use std::borrow::Cow;

/// Event data as text, invalid UTF-8 replaced with U+FFFD (as the SSE rules decode it): for
/// the rare paths that need text, such as error bodies.
pub(crate) fn text(data: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// `data` without the leading and trailing whitespace `str::trim` removes from its text.
///
/// ASCII ends are trimmed from the bytes (the whitespace of `char::is_whitespace`: tab, line
/// feed, vertical tab, form feed, carriage return, space); only data whose ends are not
/// ASCII is read as text, to find Unicode whitespace. Data that are not UTF-8 come back with
/// their ASCII ends trimmed, and fail to parse in [`parse_json`], whose fallback then trims
/// their text.
pub(crate) fn trim(data: &[u8]) -> &[u8] {
    let space = |b: &u8| matches!(b, b'\t'..=b'\r' | b' ');
    let start = data.iter().position(|b| !space(b)).unwrap_or(data.len());
    let end = data
        .iter()
        .rposition(|b| !space(b))
        .map_or(start, |i| i + 1);
    let data = &data[start..end];
    match (data.first(), data.last()) {
        (Some(first), Some(last)) if !first.is_ascii() || !last.is_ascii() => {
            std::str::from_utf8(data).map_or(data, |text| text.trim().as_bytes())
        }
        _ => data,
    }
}

/// Parses event data as JSON, straight from the bytes: serde_json checks the UTF-8 of each
/// string as it reads it, so valid data (every real stream) are checked once.
///
/// Data that fail to parse and are not UTF-8 are parsed again exactly as before the bytes were
/// kept (issue 21): as text, invalid UTF-8 replaced with U+FFFD (into `lossy`), shaped by
/// `as_read` (`str::trim`, or nothing). So the outcome is the same as parsing
/// `as_read(&text(data))`, whatever the bytes.
pub(crate) fn parse_json<'a, T: Deserialize<'a>>(
    data: &'a [u8],
    lossy: &'a mut String,
    as_read: fn(&str) -> &str,
) -> serde_json::Result<T> {
    match serde_json::from_slice(data) {
        Err(_) if std::str::from_utf8(data).is_err() => {
            *lossy = String::from_utf8_lossy(data).into_owned();
            let lossy: &'a String = lossy;
            serde_json::from_str(as_read(lossy))
        }
        parsed => parsed,
    }
}

/// The text as is, for [`parse_json`] on data that were not trimmed.
pub(crate) fn as_is(text: &str) -> &str {
    text
}

/// A string field, borrowed when possible.
///
/// (`Option<Cow<str>>` alone always allocates; the newtype lets `#[serde(borrow)]` apply.)
#[derive(Debug, PartialEq, Deserialize)]
#[serde(transparent)]
pub(crate) struct Str<'a>(#[serde(borrow)] pub(crate) Cow<'a, str>);

impl Str<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The `&str` inside an optional field, empty when absent.
pub(crate) fn or_empty<'s>(s: &'s Option<Str<'_>>) -> &'s str {
    s.as_ref().map_or("", Str::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder<'a> {
        #[serde(default, borrow)]
        s: Option<Str<'a>>,
    }

    #[test]
    fn trim_cuts_what_str_trim_cuts() {
        for text in [
            "",
            " ",
            "\t[DONE]\x0b\x0c\r\n",
            "\u{a0}{}\u{2028}",
            "\u{a0}",
            "é ",
            " {\"a\":1}",
            "\u{85}x\u{3000}",
        ] {
            assert_eq!(trim(text.as_bytes()), text.trim().as_bytes(), "{text:?}");
        }
        // Not UTF-8: only the ASCII ends.
        assert_eq!(trim(b" \xff{} "), b"\xff{}");
    }

    #[test]
    fn invalid_utf8_parses_as_its_replaced_text() {
        let mut lossy = String::new();
        let v: serde_json::Value = parse_json(b"{\"a\":\"\xff\"}", &mut lossy, as_is).unwrap();
        assert_eq!(v["a"], "\u{fffd}");
        let mut lossy = String::new();
        // NBSP after the value: trailing characters unless trimmed as text.
        let data = b"{\"a\":\"\xff\"}\xc2\xa0";
        assert!(parse_json::<serde_json::Value>(data, &mut lossy, as_is).is_err());
        let mut lossy = String::new();
        assert!(parse_json::<serde_json::Value>(trim(data), &mut lossy, str::trim).is_ok());
    }

    #[test]
    fn optional_strings_borrow_unless_escaped() {
        let plain: Holder<'_> = serde_json::from_str(r#"{"s":"plain"}"#).unwrap();
        assert!(matches!(plain.s, Some(Str(Cow::Borrowed("plain")))));
        let escaped: Holder<'_> = serde_json::from_str(r#"{"s":"a\nb"}"#).unwrap();
        assert_eq!(or_empty(&escaped.s), "a\nb");
        let missing: Holder<'_> = serde_json::from_str("{}").unwrap();
        assert_eq!(or_empty(&missing.s), "");
    }
}
