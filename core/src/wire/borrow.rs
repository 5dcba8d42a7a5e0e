//! A JSON string that borrows from the input when it has no escapes, for parsing the hot
//! stream events (text and argument deltas) without an allocation per field.

use serde::Deserialize;
use std::borrow::Cow;

/// A string field, borrowed when possible.
///
/// (`Option<Cow<str>>` alone always allocates; the newtype lets `#[serde(borrow)]` apply.)
#[derive(Debug, Deserialize)]
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
    fn optional_strings_borrow_unless_escaped() {
        let plain: Holder<'_> = serde_json::from_str(r#"{"s":"plain"}"#).unwrap();
        assert!(matches!(plain.s, Some(Str(Cow::Borrowed("plain")))));
        let escaped: Holder<'_> = serde_json::from_str(r#"{"s":"a\nb"}"#).unwrap();
        assert_eq!(or_empty(&escaped.s), "a\nb");
        let missing: Holder<'_> = serde_json::from_str("{}").unwrap();
        assert_eq!(or_empty(&missing.s), "");
    }
}
