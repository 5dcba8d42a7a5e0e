//! Tool-call ids in the form OpenAI accepts.
//!
//! Chat Completions takes any characters in `tool_calls[].id` (the OpenAPI description has no
//! pattern) but at most 40 of them: a longer id is refused with "Invalid
//! 'messages[N].tool_calls[0].id': string too long. Expected a string with maximum length 40,
//! but got a string with length 46 instead." (code `string_above_max_length`; quoted in
//! agno-agi/agno#5382 and microsoft/autogen#6377). OpenAI-compatible servers mint longer ones:
//! vLLM's `chatcmpl-tool-` and 32 hex digits are 46 characters.
//!
//! An id of at most 40 bytes that does not start with [`PREFIX`] is sent as it is; any other
//! becomes [`PREFIX`] and the 128-bit FNV-1a hash of the id in hex (35 characters). The same
//! function encodes a call's id and its `tool` message's `tool_call_id`, and it depends on the
//! id alone, so retries and resumed sessions send the same ids. Kept ids and hashed ids
//! cannot meet (the prefix); two hashed ids meet only if their 128-bit hashes collide.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The longest id OpenAI accepts, in characters (counted here in bytes, which is stricter).
pub(crate) const MAX_LEN: usize = 40;

/// What every rewritten id starts with.
pub(crate) const PREFIX: &str = "rb_";

/// The id sent for `id`.
pub(crate) fn encode(id: &str) -> Cow<'_, str> {
    if id.len() <= MAX_LEN && !id.starts_with(PREFIX) {
        return Cow::Borrowed(id);
    }
    let mut out = String::with_capacity(PREFIX.len() + 32);
    out.push_str(PREFIX);
    let _ = write!(out, "{:032x}", fnv1a_128(id.as_bytes()));
    Cow::Owned(out)
}

/// FNV-1a, 128 bits (offset basis and prime from the FNV specification,
/// draft-eastlake-fnv): stable across platforms and versions, unlike std's hashers.
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes.iter().fold(OFFSET, |hash, &b| {
        (hash ^ u128::from(b)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_values() {
        // The empty string hashes to the offset basis; "a" from the FNV test suite.
        assert_eq!(fnv1a_128(b""), 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d);
        assert_eq!(fnv1a_128(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
    }

    #[test]
    fn long_ids_become_35_characters() {
        let id = encode("chatcmpl-tool-8d6f0a3c2b1e4f5a9c7d6e5f4a3b2c1d");
        assert_eq!(id.len(), 35);
        assert!(id.starts_with(PREFIX));
        assert_eq!(encode("call_abc"), "call_abc");
    }
}
