//! Tool-call ids in the form OpenAI (and OpenAI-compatible servers) accept.
//!
//! Chat Completions takes any characters in `tool_calls[].id` (the OpenAPI description has no
//! pattern) but at most 40 of them: a longer id is refused with "Invalid
//! 'messages[N].tool_calls[0].id': string too long. Expected a string with maximum length 40,
//! but got a string with length 46 instead." (code `string_above_max_length`; quoted in
//! agno-agi/agno#5382 and microsoft/autogen#6377). OpenAI-compatible servers mint longer ones:
//! vLLM's `chatcmpl-tool-` and 32 hex digits are 46 characters. One request must not carry an
//! id twice, and some servers number calls per message (`call_0` in every turn).
//!
//! So a request is encoded walking its messages in order ([`ToolIds`]), in the target's
//! [`ToolIdForm`]:
//!
//! - [`ToolIdForm::Standard`]: the first use of an id of at most 40 bytes that does not start
//!   with [`PREFIX`] is sent as it is; any other id, and any later use of an id, becomes
//!   [`PREFIX`] and a 128-bit FNV-1a hash in hex (35 characters) — of the id alone for a
//!   first use, of the id and its use number for a later one. Kept ids and hashed ids cannot
//!   meet (the prefix).
//! - [`ToolIdForm::NineAlphanumeric`] (Mistral's API and its chat templates: "Tool call id
//!   was call_0fypS1hVX but must be a-z, A-Z, 0-9, with a length of 9."; quoted in
//!   nearai/ironclaw#1241 and editor-code-assistant/eca#233): the first use of an id that
//!   already is nine letters and digits is sent as it is; any other becomes nine base-62
//!   digits of the same hash.
//!
//! Either way an id that would meet one already sent in the request is hashed again with a
//! salt until it does not, and a `tool` message's `tool_call_id` is the id its call was sent
//! with. The mapping is a pure function of the conversation, so retries and resumed sessions
//! send the same ids, and earlier ids do not change as the conversation grows. The
//! conversation keeps the ids the models minted; only requests carry these.

use crate::wire::ToolIdForm;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The longest id OpenAI accepts, in characters (counted here in bytes, which is stricter).
pub(crate) const MAX_LEN: usize = 40;

/// What every rewritten id starts with ([`ToolIdForm::Standard`]).
pub(crate) const PREFIX: &str = "rb_";

/// How long an id of [`ToolIdForm::NineAlphanumeric`] is.
const NINE: usize = 9;

/// The id sent for the use number `repeat` (0 for the first) of `id`, hashed with `salt`
/// when an earlier try met an id already sent.
fn encode(id: &str, repeat: usize, salt: usize, form: ToolIdForm) -> Cow<'_, str> {
    let first = repeat == 0 && salt == 0;
    match form {
        ToolIdForm::Standard => {
            if first && id.len() <= MAX_LEN && !id.starts_with(PREFIX) {
                return Cow::Borrowed(id);
            }
            let mut out = String::with_capacity(PREFIX.len() + 32);
            out.push_str(PREFIX);
            let _ = write!(out, "{:032x}", hash(id, repeat, salt));
            Cow::Owned(out)
        }
        ToolIdForm::NineAlphanumeric => {
            if first && id.len() == NINE && id.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Cow::Borrowed(id);
            }
            const DIGITS: &[u8; 62] =
                b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
            let mut h = hash(id, repeat, salt);
            let mut out = String::with_capacity(NINE);
            for _ in 0..NINE {
                out.push(char::from(DIGITS[(h % 62) as usize]));
                h /= 62;
            }
            Cow::Owned(out)
        }
    }
}

/// FNV-1a of `id` alone (a first use), or of `id`, a 0xFF byte (never in UTF-8) and the use
/// and salt numbers: inputs that cannot meet.
fn hash(id: &str, repeat: usize, salt: usize) -> u128 {
    if repeat == 0 && salt == 0 {
        return fnv1a_128(id.as_bytes());
    }
    let mut bytes = id.as_bytes().to_vec();
    bytes.push(0xFF);
    bytes.extend_from_slice(format!("{repeat}/{salt}").as_bytes());
    fnv1a_128(&bytes)
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

/// The ids of one request, assigned as its messages are encoded in order.
#[derive(Debug)]
pub(crate) struct ToolIds<'a> {
    form: ToolIdForm,
    /// Uses so far of each original id.
    uses: BTreeMap<&'a str, usize>,
    /// The id sent for the latest use of each original id: what its result answers.
    sent: BTreeMap<&'a str, String>,
    /// Every id sent so far in this request.
    taken: BTreeSet<String>,
}

impl<'a> ToolIds<'a> {
    /// The ids of a request to a target that takes `form`.
    pub(crate) fn new(form: ToolIdForm) -> Self {
        ToolIds {
            form,
            uses: BTreeMap::new(),
            sent: BTreeMap::new(),
            taken: BTreeSet::new(),
        }
    }

    /// The id to send for a tool call with `id`.
    pub(crate) fn tool_use(&mut self, id: &'a str) -> String {
        let uses = self.uses.entry(id).or_insert(0);
        let repeat = *uses;
        *uses += 1;
        let mut salt = 0;
        let sent = loop {
            let candidate = encode(id, repeat, salt, self.form).into_owned();
            if !self.taken.contains(&candidate) {
                break candidate;
            }
            salt += 1;
        };
        self.taken.insert(sent.clone());
        self.sent.insert(id, sent.clone());
        sent
    }

    /// The id to send for a result answering `id`: the one its call was sent with.
    pub(crate) fn tool_result(&self, id: &str) -> String {
        self.sent
            .get(id)
            .cloned()
            .unwrap_or_else(|| encode(id, 0, 0, self.form).into_owned())
    }
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
    fn long_ids_become_35_characters_and_short_ones_stay() {
        let mut ids = ToolIds::new(ToolIdForm::Standard);
        let id = ids.tool_use("chatcmpl-tool-8d6f0a3c2b1e4f5a9c7d6e5f4a3b2c1d");
        assert_eq!(id.len(), 35);
        assert!(id.starts_with(PREFIX));
        assert_eq!(ids.tool_use("call_abc"), "call_abc");
    }

    #[test]
    fn a_second_use_of_an_id_gets_its_own_and_its_result_follows_it() {
        let mut ids = ToolIds::new(ToolIdForm::Standard);
        assert_eq!(ids.tool_use("call_0"), "call_0");
        assert_eq!(ids.tool_result("call_0"), "call_0");
        let again = ids.tool_use("call_0");
        assert_ne!(again, "call_0");
        assert!(again.starts_with(PREFIX) && again.len() == 35, "{again}");
        assert_eq!(ids.tool_result("call_0"), again);
    }

    #[test]
    fn nine_alphanumeric_ids_are_nine_letters_and_digits_and_unique() {
        let mut ids = ToolIds::new(ToolIdForm::NineAlphanumeric);
        assert_eq!(ids.tool_use("D681PevKs"), "D681PevKs");
        let mut seen = BTreeSet::new();
        for id in [
            "call_0fypS1hVX",
            "call_0",
            "call_0",
            "toolu_01",
            "",
            "D681PevKs",
        ] {
            let sent = ids.tool_use(id);
            assert_eq!(sent.len(), 9, "{sent}");
            assert!(sent.bytes().all(|b| b.is_ascii_alphanumeric()), "{sent}");
            assert!(seen.insert(sent.clone()), "{sent} twice");
        }
    }
}
