//! Small pieces shared by the encoders: JSON string quoting in a fixed key order, and the
//! splitting of text into stream-sized deltas.

use crate::response::Usage;
use serde_json::Value;

/// The longest delta the encoders emit, in bytes (real streams send a few words at a time).
#[cfg(feature = "server")]
pub(crate) const PIECE_BYTES: usize = 24;

/// `s` as a JSON string literal.
#[cfg(feature = "server")]
pub(crate) fn quote(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Splits `s` into pieces of at most [`PIECE_BYTES`] bytes (more only for a single wider
/// character), never inside a UTF-8 sequence. An empty string gives no pieces.
#[cfg(feature = "server")]
pub(crate) fn pieces(s: &str) -> impl Iterator<Item = &str> {
    let mut rest = s;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = PIECE_BYTES.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// Reads a token count that may be missing or null.
pub(crate) fn count(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// Copies the Anthropic-named counts present in `v` into `usage`.
pub(crate) fn read_anthropic_usage(v: &Value, usage: &mut Usage) {
    if let Some(n) = count(v, "input_tokens") {
        usage.input_tokens = n;
    }
    if let Some(n) = count(v, "output_tokens") {
        usage.output_tokens = n;
    }
    if let Some(n) = count(v, "cache_creation_input_tokens") {
        usage.cache_creation_input_tokens = Some(n);
    }
    if let Some(n) = count(v, "cache_read_input_tokens") {
        usage.cache_read_input_tokens = Some(n);
    }
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;

    #[test]
    fn pieces_never_split_a_character_and_cover_the_text() {
        let s = "aé😀".repeat(20);
        let parts: Vec<&str> = pieces(&s).collect();
        assert!(parts
            .iter()
            .all(|p| p.len() <= PIECE_BYTES && !p.is_empty()));
        assert_eq!(parts.concat(), s);
        assert_eq!(pieces("").count(), 0);
    }
}
