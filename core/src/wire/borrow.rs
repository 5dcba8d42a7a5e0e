//! Event data read as JSON with as little copying and checking as possible: a JSON string
//! that borrows from the input when it has no escapes (the hot text and argument deltas parse
//! without an allocation per field), and data taken as the stream's bytes and checked for
//! UTF-8 once, when they are parsed, rather than by the SSE framing.

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
/// their ASCII ends trimmed; [`parse_json`] with `str::trim` then trims their text.
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

/// Parses event data as JSON, exactly as their text would be parsed: the data are checked for
/// UTF-8 once, here, as a whole (serde_json's `from_slice` checks every string, keys
/// included, one call each, which cost more on Chat chunks); data that are not UTF-8 are read
/// as the SSE rules have it, invalid sequences replaced with U+FFFD (into `lossy`). `as_read`
/// shapes the text first (`str::trim`, or nothing).
pub(crate) fn parse_json<'a, T: Deserialize<'a>>(
    data: &'a [u8],
    lossy: &'a mut String,
    as_read: fn(&str) -> &str,
) -> serde_json::Result<T> {
    let text = match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(_) => {
            *lossy = String::from_utf8_lossy(data).into_owned();
            let lossy: &'a String = lossy;
            lossy
        }
    };
    serde_json::from_str(as_read(text))
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
