//! Tool-use ids in the form Anthropic accepts.
//!
//! The Messages API requires `tool_use.id` and `tool_result.tool_use_id` to match
//! `^[a-zA-Z0-9_-]+$` (`ToolUseBlockParam.id` and `ToolResultBlockParam.tool_use_id` in the
//! API reference, <https://platform.claude.com/docs/en/api/messages>; no length limit is
//! documented) and refuses a request that uses one `tool_use` id twice, in any two messages
//! ("messages.N.content.M: `tool_use` ids must be unique"). Ids minted elsewhere break both:
//! Kimi-style `functions.read:0` has a dot and a colon, and some OpenAI-compatible servers
//! mint `call_0` again in every turn.
//!
//! So a request is encoded walking its messages in order ([`ToolIds`]): the first use of an
//! id Anthropic accepts is sent as it is (so Anthropic's own ids, and conversations that never
//! left it, are sent byte for byte as before); any other id, and any later use of an id, is
//! escaped behind [`PREFIX`]. The conversation keeps the original ids; only requests carry
//! these. The mapping is a pure function of the conversation, so retries and resumed sessions
//! send the same ids, and earlier ids do not change as the conversation grows.
//!
//! It is injective: ids kept as they are never start with [`PREFIX`]; after it, every byte
//! outside `[a-zA-Z0-9-]` becomes `_` and two lowercase hex digits, `_` itself becomes `__`,
//! and a later use appends `_x` and its number, which no escape produces (`x` is not a hex
//! digit).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What every rewritten id starts with.
pub(crate) const PREFIX: &str = "rb_";

/// Whether Anthropic accepts `id` as it is.
fn accepted(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The id sent for the use number `repeat` (0 for the first) of `id` in one request.
pub(crate) fn encode(id: &str, repeat: usize) -> Cow<'_, str> {
    if repeat == 0 && accepted(id) && !id.starts_with(PREFIX) {
        return Cow::Borrowed(id);
    }
    let mut out = String::with_capacity(PREFIX.len() + id.len() * 3 + 4);
    out.push_str(PREFIX);
    for b in id.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' => out.push(char::from(b)),
            b'_' => out.push_str("__"),
            _ => {
                let _ = write!(out, "_{b:02x}");
            }
        }
    }
    if repeat > 0 {
        let _ = write!(out, "_x{repeat}");
    }
    Cow::Owned(out)
}

/// The ids of one request, assigned as its messages are encoded in order.
#[derive(Debug, Default)]
pub(crate) struct ToolIds<'a> {
    /// Uses so far of each original id.
    uses: BTreeMap<&'a str, usize>,
    /// The id sent for the latest use of each original id: what its result answers.
    sent: BTreeMap<&'a str, String>,
}

impl<'a> ToolIds<'a> {
    /// The id to send for a `tool_use` block with `id`.
    pub(crate) fn tool_use(&mut self, id: &'a str) -> String {
        let uses = self.uses.entry(id).or_insert(0);
        let sent = encode(id, *uses).into_owned();
        *uses += 1;
        self.sent.insert(id, sent.clone());
        sent
    }

    /// The id to send for a `tool_result` answering `id`: the one its call was sent with.
    pub(crate) fn tool_result(&self, id: &str) -> String {
        self.sent
            .get(id)
            .cloned()
            .unwrap_or_else(|| encode(id, 0).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_readable() {
        assert_eq!(encode("toolu_01", 0), "toolu_01");
        assert_eq!(encode("functions.read:0", 0), "rb_functions_2eread_3a0");
        assert_eq!(encode("call_0", 1), "rb_call__0_x1");
        assert_eq!(encode("rb_1", 0), "rb_rb__1");
        assert_eq!(encode("", 0), "rb_");
    }
}
