//! The default, deterministic compactor: shrink a conversation that overflowed the context
//! window while keeping the latest exchange intact and every tool use paired with its result.

use crate::conversation::{ContentBlock, Conversation, Message, Role, ToolResultPart};
use serde::{Deserialize, Serialize};

/// How the default compactor shrinks a conversation.
///
/// Two stages, each applied only if the one before did not at least halve the conversation's
/// [`approx_bytes`](Conversation::approx_bytes):
///
/// 1. **Elide payloads** in every message before the kept tail: tool-result text longer than
///    `elide_over_bytes` and text blocks longer than `elide_over_bytes` are cut to a short head
///    plus a note; images become a note; thinking blocks are dropped. Tool results in the tail
///    longer than `max_tail_result_bytes` are cut the same way.
/// 2. **Drop old turns**: every message between the first user message and the kept tail is
///    removed, and a note saying how many were removed is added to the first user message.
///
/// The kept tail starts at an assistant message, so the first user message is followed by an
/// assistant message and every `tool_use` in the tail is answered inside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionPolicy {
    /// At least this many of the newest messages are kept verbatim.
    pub keep_recent_messages: usize,
    /// Older text and tool-result payloads longer than this are elided.
    pub elide_over_bytes: usize,
    /// How much of an elided text's head is kept.
    pub keep_head_bytes: usize,
    /// Tool results in the kept tail longer than this are cut too.
    pub max_tail_result_bytes: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            keep_recent_messages: 4,
            elide_over_bytes: 1_024,
            keep_head_bytes: 256,
            max_tail_result_bytes: 32 * 1_024,
        }
    }
}

/// Why the default compactor gave up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompactionError {
    /// Nothing could be elided or dropped.
    #[error("compaction could not shrink the conversation ({bytes} bytes in {messages} messages)")]
    CannotShrink {
        /// Approximate size of the conversation.
        bytes: usize,
        /// Number of messages.
        messages: usize,
    },
}

/// Compacts `conversation` with `policy`; see [`CompactionPolicy`] for what it does.
///
/// ```
/// use rebound_core::{compact, CompactionPolicy, Conversation, Message};
///
/// let mut c = Conversation::new();
/// c.push(Message::user_text("fix the bug"));
/// for i in 0..10 {
///     c.push(Message::assistant_text("x".repeat(5_000)));
///     c.push(Message::user_text(format!("go on {i}")));
/// }
/// let small = compact(&c, &CompactionPolicy::default()).unwrap();
/// assert!(small.approx_bytes() * 2 <= c.approx_bytes());
/// assert_eq!(small.messages()[0].role, rebound_core::Role::User);
/// ```
pub fn compact(
    conversation: &Conversation,
    policy: &CompactionPolicy,
) -> Result<Conversation, CompactionError> {
    let messages = conversation.messages();
    let before = conversation.approx_bytes();
    let tail = tail_start(messages, policy.keep_recent_messages);

    let mut out: Vec<Message> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if i < tail && i > 0 {
                elide_message(m, policy)
            } else if i == 0 {
                elide_message(
                    m,
                    &CompactionPolicy {
                        // The task statement is kept; only huge payloads in it are cut.
                        elide_over_bytes: policy.max_tail_result_bytes,
                        ..policy.clone()
                    },
                )
            } else {
                cut_tail_results(m, policy)
            }
        })
        .collect();
    let mut compacted = Conversation::from(out.clone());
    if compacted.approx_bytes() * 2 > before && tail > 1 {
        let removed = tail - 1;
        out.drain(1..tail);
        if let Some(first) = out.first_mut() {
            first.content.push(ContentBlock::text(format!(
                "[{removed} earlier messages were removed to fit the context window]"
            )));
        }
        compacted = Conversation::from(out);
    }
    if compacted.approx_bytes() >= before {
        return Err(CompactionError::CannotShrink {
            bytes: before,
            messages: messages.len(),
        });
    }
    Ok(compacted)
}

/// Index of the first message of the kept tail: the latest assistant message that leaves at
/// least `keep` messages after it (inclusive), never 0. Without one, the tail is everything.
fn tail_start(messages: &[Message], keep: usize) -> usize {
    let latest_allowed = messages.len().saturating_sub(keep.max(1));
    (1..=latest_allowed)
        .rev()
        .find(|&i| messages[i].role == Role::Assistant)
        .unwrap_or(messages.len().min(1))
}

fn elide_text(text: &str, keep_head: usize) -> String {
    let mut cut = keep_head.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!(
        "{}\n[… {} bytes elided to fit the context window]",
        &text[..cut],
        text.len() - cut
    )
}

fn elide_message(m: &Message, policy: &CompactionPolicy) -> Message {
    let limit = policy.elide_over_bytes;
    let content = m
        .content
        .iter()
        .filter(|b| !matches!(b, ContentBlock::Thinking { .. }))
        .map(|b| match b {
            ContentBlock::Text { text } if text.len() > limit => {
                ContentBlock::text(elide_text(text, policy.keep_head_bytes))
            }
            ContentBlock::Image { .. } => {
                ContentBlock::text("[image elided to fit the context window]")
            }
            ContentBlock::ToolResult(r) => {
                let mut r = r.clone();
                r.parts = elide_parts(&r.parts, limit, policy.keep_head_bytes);
                ContentBlock::ToolResult(r)
            }
            other => other.clone(),
        })
        .collect();
    Message {
        role: m.role,
        content,
    }
}

fn cut_tail_results(m: &Message, policy: &CompactionPolicy) -> Message {
    let content = m
        .content
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult(r) => {
                let mut r = r.clone();
                r.parts = r
                    .parts
                    .iter()
                    .map(|p| match p {
                        ToolResultPart::Text { text }
                            if text.len() > policy.max_tail_result_bytes =>
                        {
                            ToolResultPart::text(elide_text(text, policy.max_tail_result_bytes / 2))
                        }
                        other => other.clone(),
                    })
                    .collect();
                ContentBlock::ToolResult(r)
            }
            other => other.clone(),
        })
        .collect();
    Message {
        role: m.role,
        content,
    }
}

fn elide_parts(parts: &[ToolResultPart], limit: usize, keep_head: usize) -> Vec<ToolResultPart> {
    parts
        .iter()
        .map(|p| match p {
            ToolResultPart::Text { text } if text.len() > limit => {
                ToolResultPart::text(elide_text(text, keep_head))
            }
            ToolResultPart::Image { .. } => {
                ToolResultPart::text("[image elided to fit the context window]")
            }
            other => other.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool_turn(i: usize, output: &str) -> [Message; 2] {
        [
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::tool_use(
                    format!("t{i}"),
                    "read",
                    json!({"i": i}),
                )],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::tool_result(
                    format!("t{i}"),
                    vec![ToolResultPart::text(output)],
                    false,
                )],
            },
        ]
    }

    fn long_session(turns: usize, output_bytes: usize) -> Conversation {
        let mut c = Conversation::new();
        c.push(Message::user_text("refactor the parser"));
        for i in 0..turns {
            for m in tool_turn(i, &"y".repeat(output_bytes)) {
                c.push(m);
            }
        }
        c
    }

    #[test]
    fn old_tool_outputs_are_elided_and_the_latest_exchange_kept() {
        let c = long_session(10, 10_000);
        let small = compact(&c, &CompactionPolicy::default()).unwrap();
        assert!(small.approx_bytes() * 2 <= c.approx_bytes());
        assert_eq!(small.check_tool_pairing(false), Ok(()));
        let n = small.len();
        assert_eq!(small.messages()[n - 4..], c.messages()[c.len() - 4..]);
        assert_eq!(small.messages()[0].text(), "refactor the parser");
    }

    #[test]
    fn many_small_turns_are_dropped_with_a_note() {
        let c = long_session(200, 10);
        let small = compact(&c, &CompactionPolicy::default()).unwrap();
        assert!(small.len() < 10, "{}", small.len());
        assert!(small.messages()[0]
            .text()
            .contains("earlier messages were removed"));
        assert_eq!(small.messages()[1].role, Role::Assistant);
        assert_eq!(small.check_tool_pairing(false), Ok(()));
    }

    #[test]
    fn a_conversation_that_cannot_shrink_is_an_error() {
        let mut c = Conversation::new();
        c.push(Message::user_text("hi"));
        assert!(matches!(
            compact(&c, &CompactionPolicy::default()),
            Err(CompactionError::CannotShrink { messages: 1, .. })
        ));
    }

    #[test]
    fn eliding_respects_utf8_boundaries() {
        let mut c = Conversation::new();
        c.push(Message::user_text("start"));
        c.push(Message::assistant_text("é".repeat(3_000)));
        c.push(Message::user_text("next"));
        c.push(Message::assistant_text("ok"));
        c.push(Message::user_text("more"));
        c.push(Message::assistant_text("fine"));
        let policy = CompactionPolicy {
            keep_recent_messages: 2,
            keep_head_bytes: 7,
            ..CompactionPolicy::default()
        };
        let small = compact(&c, &policy).unwrap();
        assert!(small.messages()[1].text().starts_with("ééé\n[…"));
    }
}
