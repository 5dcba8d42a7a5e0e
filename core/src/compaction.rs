//! Compaction: shrinking a conversation that overflowed (or nearly filled) the context window
//! while keeping the latest exchange intact and every tool use paired with its result.
//!
//! Two methods, chosen by [`MachineConfig::compact_with`](crate::MachineConfig):
//!
//! - **Summary** ([`CompactionMethod::Summary`]): the machine asks the current target for a
//!   summary of the older turns ([`summary_request`], ending with [`SUMMARY_PROMPT`]) as a
//!   provider request of its own, then replaces those turns by one user message holding the
//!   summary ([`summarized`]). The summary request is shrunk first so that it fits where the
//!   conversation did not: payloads elided, then the oldest turns dropped until it fits, and
//!   dropped further each time it still overflows — as Codex does
//!   (`codex-rs/core/src/compact.rs`: on `ContextWindowExceeded` while compacting it removes
//!   the oldest history item and tries again, then says how many items it trimmed). Claude
//!   Code documents the same shape: `/compact` and auto-compact near the window's end replace
//!   the history by a model-written summary, and the conversation continues from it.
//! - **Elision** ([`compact`]): deterministic, no request; also what runs when the summary
//!   cannot be had.

use crate::conversation::{ContentBlock, Conversation, Message, Role, ToolResultPart};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// The instruction that ends a summary request, after the older turns it summarises.
///
/// Modelled on Codex's `templates/compact/prompt.md` (a hand-off summary for the model that
/// resumes the task) and on what Claude Code's `/compact` summary keeps (the request and
/// intent, files and code, errors and fixes, pending work).
pub const SUMMARY_PROMPT: &str = "[rebound: context compaction] The conversation above is \
getting too long for the context window. Write a summary of it that lets you continue the \
work without it. Do not call any tools; answer with the summary only, as plain text.

Include:
- The task: what the user asked for, in their words where it matters, and any constraints or \
preferences they stated.
- What was done so far, and the decisions made (with their reasons).
- The files, functions, commands and data that matter, with exact names and paths.
- Errors met and how they were fixed, or that they are still open.
- What remains to be done, as clear next steps.

Be concise and structured.";

/// The first line of the user message that replaces summarised turns.
pub const SUMMARY_PREFIX: &str = "[rebound: context compaction] Earlier turns of this \
conversation were replaced by this summary, written by the model from them. Continue the \
work from it and from the messages that follow.";

/// Estimated tokens for `bytes` of conversation: 4 bytes a token, rounded up (the estimate
/// Codex's `approx_token_count` uses). Only for reports and fitting; real counts come from
/// the provider's usage.
#[must_use]
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// How a conversation is (or was) compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionMethod {
    /// A summary written by the model in use replaces the older turns; on failure, elision.
    Summary,
    /// Deterministic elision of old payloads and turns ([`compact`]).
    #[default]
    Elide,
}

impl fmt::Display for CompactionMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CompactionMethod::Summary => "summary",
            CompactionMethod::Elide => "elide",
        })
    }
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CompactionReason {
    /// The provider refused the request as too long for its context window.
    Overflow,
    /// The last request's input tokens passed the threshold of the context window.
    Threshold,
}

impl fmt::Display for CompactionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CompactionReason::Overflow => "overflow",
            CompactionReason::Threshold => "threshold",
        })
    }
}

/// What a compaction did: told to the UI and written into traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CompactionReport {
    /// Messages before.
    pub before_messages: usize,
    /// Messages after. Elision may keep every message and shrink their payloads: then only
    /// the bytes and tokens go down.
    pub after_messages: usize,
    /// [`Conversation::approx_bytes`] before.
    pub before_bytes: usize,
    /// [`Conversation::approx_bytes`] after.
    pub after_bytes: usize,
    /// Estimated tokens before ([`estimate_tokens`]).
    pub before_tokens: u64,
    /// Estimated tokens after.
    pub after_tokens: u64,
    /// Why it ran.
    pub reason: CompactionReason,
    /// How it was done.
    pub method: CompactionMethod,
    /// When a summary was wanted but elision ran instead: why the summary failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_error: Option<String>,
}

impl CompactionReport {
    /// A report of `before` becoming `after`.
    #[must_use]
    pub fn new(
        before: &Conversation,
        after: &Conversation,
        reason: CompactionReason,
        method: CompactionMethod,
    ) -> Self {
        let (before_bytes, after_bytes) = (before.approx_bytes(), after.approx_bytes());
        CompactionReport {
            before_messages: before.len(),
            after_messages: after.len(),
            before_bytes,
            after_bytes,
            before_tokens: estimate_tokens(before_bytes),
            after_tokens: estimate_tokens(after_bytes),
            reason,
            method,
            summary_error: None,
        }
    }
}

impl fmt::Display for CompactionReport {
    /// The CLI's line, e.g. `compacted the conversation (overflow, summary): 41 → 5 messages,
    /// 180.2 kB → 9.1 kB (~45050 → ~2275 tokens)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compacted the conversation ({}, {}): {} → {} messages, {:.1} kB → {:.1} kB \
             (~{} → ~{} tokens)",
            self.reason,
            self.method,
            self.before_messages,
            self.after_messages,
            self.before_bytes as f64 / 1000.0,
            self.after_bytes as f64 / 1000.0,
            self.before_tokens,
            self.after_tokens
        )?;
        if let Some(e) = &self.summary_error {
            write!(
                f,
                "; the summary failed ({e}), so old payloads were elided instead"
            )?;
        }
        Ok(())
    }
}

/// A request asking the model for a summary of a conversation's older turns.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryRequest {
    /// What to send: the older turns, shrunk, ending with [`SUMMARY_PROMPT`].
    pub conversation: Conversation,
    /// Index of the first message kept verbatim after the summary (an assistant message).
    pub keep_from: usize,
    /// Older messages left out of the request so it fits.
    pub dropped: usize,
}

/// The summary request for `conversation`, or `None` when there are no older turns to
/// summarise (everything is the latest exchange).
///
/// The turns before the kept tail (see [`CompactionPolicy::keep_recent_messages`]) have
/// their payloads elided as [`compact`] does; then, while the request is larger than
/// `fit_bytes` ([`Conversation::approx_bytes`]), the oldest exchanges after the first user
/// message are dropped. The last message is a user message ending with [`SUMMARY_PROMPT`];
/// tool uses stay paired with their results.
///
/// ```
/// use rebound_core::compaction::{is_summary_request, summary_request, summarized};
/// use rebound_core::{CompactionPolicy, Conversation, Message, Role};
///
/// let mut c = Conversation::new();
/// c.push(Message::user_text("fix the bug"));
/// for i in 0..10 {
///     c.push(Message::assistant_text(format!("step {i}: {}", "x".repeat(3_000))));
///     c.push(Message::user_text(format!("go on {i}")));
/// }
/// let request = summary_request(&c, &CompactionPolicy::default(), Some(4_000)).unwrap();
/// assert!(is_summary_request(&request.conversation));
/// assert!(request.conversation.approx_bytes() <= 4_000 + 2_000); // the prompt is extra
/// let after = summarized(&c, request.keep_from, "We are fixing the bug; steps 0-7 done.");
/// assert_eq!(after.messages()[0].role, Role::User);
/// assert_eq!(after.messages()[1..], c.messages()[request.keep_from..]);
/// ```
#[must_use]
pub fn summary_request(
    conversation: &Conversation,
    policy: &CompactionPolicy,
    fit_bytes: Option<usize>,
) -> Option<SummaryRequest> {
    let messages = conversation.messages();
    let keep_from = tail_start(messages, policy.keep_recent_messages);
    if keep_from <= 1 || keep_from >= messages.len() {
        return None;
    }
    let mut older: Vec<Message> = messages[..keep_from]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if i == 0 {
                elide_message(
                    m,
                    &CompactionPolicy {
                        elide_over_bytes: policy.max_tail_result_bytes,
                        ..policy.clone()
                    },
                )
            } else {
                elide_message(m, policy)
            }
        })
        .collect();
    let mut dropped = 0;
    if let Some(fit) = fit_bytes {
        // Drop whole exchanges from the front (after the task statement): the message after
        // the first one left is then an assistant message, and pairs stay together.
        while older.iter().map(Message::approx_bytes).sum::<usize>() > fit {
            let Some(next_assistant) = (2..older.len()).find(|&i| older[i].role == Role::Assistant)
            else {
                break;
            };
            dropped += next_assistant - 1;
            older.drain(1..next_assistant);
        }
    }
    if dropped > 0 {
        older[0].content.push(ContentBlock::text(format!(
            "[{dropped} earlier messages were left out of this summary request to fit the \
             context window]"
        )));
    }
    // `keep_from` is an assistant message, so the older part ends with a user message.
    if let Some(last) = older.last_mut() {
        last.content.push(ContentBlock::text(SUMMARY_PROMPT));
    }
    Some(SummaryRequest {
        conversation: Conversation::from(older),
        keep_from,
        dropped,
    })
}

/// Whether `conversation` is a summary request made by [`summary_request`]: its last
/// message ends with [`SUMMARY_PROMPT`]. Fake providers use it to answer with a summary.
#[must_use]
pub fn is_summary_request(conversation: &Conversation) -> bool {
    conversation.last().is_some_and(|m| {
        m.role == Role::User
            && matches!(m.content.last(), Some(ContentBlock::Text { text }) if text == SUMMARY_PROMPT)
    })
}

/// `conversation` with the messages before `keep_from` replaced by one user message holding
/// [`SUMMARY_PREFIX`] and `summary`. The summary is not an assistant turn: it is context
/// given to the model, and the kept tail (from an assistant message on) follows it.
#[must_use]
pub fn summarized(conversation: &Conversation, keep_from: usize, summary: &str) -> Conversation {
    let mut out = vec![Arc::new(Message {
        role: Role::User,
        content: vec![ContentBlock::text(format!(
            "{SUMMARY_PREFIX}\n\n{}",
            summary.trim()
        ))],
    })];
    // The kept tail is shared with `conversation`, not copied.
    out.extend_from_slice(&conversation.messages()[keep_from.min(conversation.len())..]);
    Conversation::from(out)
}

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
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
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

crate::objects_only!(CompactionPolicy, "an object of compaction settings");

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

impl CompactionPolicy {
    /// Sets [`keep_recent_messages`](Self::keep_recent_messages).
    #[must_use]
    pub fn with_keep_recent_messages(mut self, messages: usize) -> Self {
        self.keep_recent_messages = messages;
        self
    }

    /// Sets [`elide_over_bytes`](Self::elide_over_bytes).
    #[must_use]
    pub fn with_elide_over_bytes(mut self, bytes: usize) -> Self {
        self.elide_over_bytes = bytes;
        self
    }

    /// Sets [`keep_head_bytes`](Self::keep_head_bytes).
    #[must_use]
    pub fn with_keep_head_bytes(mut self, bytes: usize) -> Self {
        self.keep_head_bytes = bytes;
        self
    }

    /// Sets [`max_tail_result_bytes`](Self::max_tail_result_bytes).
    #[must_use]
    pub fn with_max_tail_result_bytes(mut self, bytes: usize) -> Self {
        self.max_tail_result_bytes = bytes;
        self
    }
}

/// Why a compaction failed: what a driver answers a [`Command::Compact`](crate::Command) with
/// in [`Event::CompactionFinished`](crate::Event) when there is no compacted conversation.
///
/// In a trace it is written as its message, a string; reading one back gives the same
/// variant for the messages core writes, else [`CompactionError::Compactor`].
///
/// ```
/// use rebound_core::{compact, CompactionError, CompactionPolicy, Conversation, Message};
///
/// let mut c = Conversation::new();
/// c.push(Message::user_text("hi"));
/// let error = compact(&c, &CompactionPolicy::default()).unwrap_err();
/// assert!(matches!(error, CompactionError::CannotShrink { messages: 1, .. }));
///
/// // Another compactor's failure, as an embedder's driver reports it.
/// let theirs = CompactionError::compactor("the summarizer timed out");
/// assert_eq!(theirs.to_string(), "the summarizer timed out");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompactionError {
    /// Core's compactor ([`compact`]) found nothing to elide or drop.
    #[error("compaction could not shrink the conversation ({bytes} bytes in {messages} messages)")]
    CannotShrink {
        /// Approximate size of the conversation.
        bytes: usize,
        /// Number of messages.
        messages: usize,
    },
    /// Another compactor failed (an embedder's, or a simulated failure), or a failure was read
    /// back from a trace: its message, as a person reads it. It must hold no secret: it ends
    /// up in the run's error and in traces.
    #[error("{message}")]
    Compactor {
        /// What went wrong.
        message: String,
    },
}

impl CompactionError {
    /// Another compactor's failure, with the message a person reads.
    #[must_use]
    pub fn compactor(message: impl Into<String>) -> Self {
        CompactionError::Compactor {
            message: message.into(),
        }
    }

    /// Reads back a message this type wrote: the variant whose message `text` is, else
    /// [`CompactionError::Compactor`].
    fn from_message(text: String) -> Self {
        let cannot_shrink = text
            .strip_prefix("compaction could not shrink the conversation (")
            .and_then(|rest| rest.strip_suffix(" messages)"))
            .and_then(|rest| rest.split_once(" bytes in "))
            .and_then(|(bytes, messages)| Some((bytes.parse().ok()?, messages.parse().ok()?)))
            .map(|(bytes, messages)| CompactionError::CannotShrink { bytes, messages })
            // Only when it writes the same text back (no `+1` or `01` for 1).
            .filter(|e| e.to_string() == text);
        cannot_shrink.unwrap_or(CompactionError::Compactor { message: text })
    }
}

impl Serialize for CompactionError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CompactionError {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(CompactionError::from_message)
    }
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
    let elided_bytes: usize = out.iter().map(Message::approx_bytes).sum();
    if elided_bytes * 2 > before && tail > 1 {
        let removed = tail - 1;
        out.drain(1..tail);
        if let Some(first) = out.first_mut() {
            first.content.push(ContentBlock::text(format!(
                "[{removed} earlier messages were removed to fit the context window]"
            )));
        }
    }
    let compacted = Conversation::from(out);
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
fn tail_start(messages: &[Arc<Message>], keep: usize) -> usize {
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
        .filter(|b| {
            !matches!(
                b,
                ContentBlock::Thinking { .. }
                    | ContentBlock::RedactedThinking { .. }
                    | ContentBlock::Reasoning { .. }
            )
        })
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
    fn a_compaction_error_is_written_as_its_message_and_read_back_as_the_same_variant() {
        for error in [
            CompactionError::CannotShrink {
                bytes: 1_234,
                messages: 5,
            },
            CompactionError::compactor("the summarizer timed out"),
            CompactionError::compactor(""),
        ] {
            let json = serde_json::to_value(&error).unwrap();
            assert_eq!(json, serde_json::Value::String(error.to_string()));
            assert_eq!(
                serde_json::from_value::<CompactionError>(json).unwrap(),
                error
            );
        }
    }

    #[test]
    fn a_message_that_only_looks_like_cannot_shrink_is_read_as_another_compactors() {
        for text in [
            "compaction could not shrink the conversation (01 bytes in 5 messages)",
            "compaction could not shrink the conversation (+1 bytes in 5 messages)",
            "compaction could not shrink the conversation (1 bytes in x messages)",
            "compaction could not shrink the conversation (",
        ] {
            let read: CompactionError = serde_json::from_value(text.into()).unwrap();
            assert_eq!(read, CompactionError::compactor(text));
            assert_eq!(serde_json::to_value(&read).unwrap(), text);
        }
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

    #[test]
    fn the_report_line_names_why_and_how_and_a_failed_summary() {
        let before = long_session(3, 2_000);
        let after = compact(&before, &CompactionPolicy::default()).unwrap();
        let mut report = CompactionReport::new(
            &before,
            &after,
            CompactionReason::Overflow,
            CompactionMethod::Summary,
        );
        let line = report.to_string();
        assert!(
            line.starts_with("compacted the conversation (overflow, summary): 7 → "),
            "{line}"
        );
        report.reason = CompactionReason::Threshold;
        report.method = CompactionMethod::Elide;
        report.summary_error = Some("the summarizer timed out".into());
        let line = report.to_string();
        assert!(
            line.starts_with("compacted the conversation (threshold, elide): "),
            "{line}"
        );
        assert!(
            line.ends_with(
                "; the summary failed (the summarizer timed out), so old payloads were elided \
                 instead"
            ),
            "{line}"
        );
    }

    #[test]
    fn the_builders_set_what_an_embedder_cannot_write_as_a_literal() {
        // The policy is `#[non_exhaustive]`: outside this crate the builders are the only way
        // to set it, so each must set its own field and no other.
        let built = CompactionPolicy::default()
            .with_keep_recent_messages(2)
            .with_elide_over_bytes(10)
            .with_keep_head_bytes(3)
            .with_max_tail_result_bytes(50);
        assert_eq!(
            built,
            CompactionPolicy {
                keep_recent_messages: 2,
                elide_over_bytes: 10,
                keep_head_bytes: 3,
                max_tail_result_bytes: 50,
            }
        );
        // And they act: an old 100-byte tool output is cut to a 3-byte head.
        let request = summary_request(&long_session(6, 100), &built, None).unwrap();
        let old_result = serde_json::to_string(&*request.conversation.messages()[2]).unwrap();
        assert!(
            old_result.contains("yyy\\n[… 97 bytes elided"),
            "{old_result}"
        );
    }

    /// A conversation of `turns` exchanges after the task statement, each assistant text of
    /// `bytes` bytes answered by a short user message.
    fn chat(task: &str, turns: usize, bytes: usize) -> Conversation {
        let mut c = Conversation::new();
        c.push(Message::user_text(task));
        for i in 0..turns {
            c.push(Message::assistant_text(format!("{i}{}", "x".repeat(bytes))));
            c.push(Message::user_text(format!("go on {i}")));
        }
        c
    }

    #[test]
    fn nothing_is_summarised_when_only_the_task_statement_is_older_than_the_tail() {
        let policy = CompactionPolicy::default().with_keep_recent_messages(1);
        // user, assistant, user: the tail starts at the assistant message, so the only older
        // message is the task itself, which a summary would only repeat.
        assert_eq!(summary_request(&chat("task", 1, 10), &policy, None), None);
        assert_eq!(summary_request(&chat("task", 0, 10), &policy, None), None);
        assert_eq!(summary_request(&Conversation::new(), &policy, None), None);
        let two = summary_request(&chat("task", 2, 10), &policy, None).expect("a request");
        assert_eq!(two.keep_from, 3);
    }

    #[test]
    fn the_task_statement_is_elided_only_past_the_tail_limit() {
        // The task statement says what the whole conversation is for: a summary request and
        // a compaction cut it only where they would cut a kept tool result
        // (`max_tail_result_bytes`), while the other older messages are cut at
        // `elide_over_bytes`.
        let task = format!("the task: {}", "t".repeat(4_000));
        let c = chat(&task, 4, 4_000);
        let policy = CompactionPolicy::default()
            .with_keep_recent_messages(2)
            .with_elide_over_bytes(1_000)
            .with_max_tail_result_bytes(8_000);
        let strict = policy.clone().with_max_tail_result_bytes(2_000);
        let summary = |p: &CompactionPolicy| summary_request(&c, p, None).unwrap().conversation;
        let compacted = |p: &CompactionPolicy| compact(&c, p).unwrap();
        for (how, shrink) in [
            (
                "summary request",
                &summary as &dyn Fn(&CompactionPolicy) -> Conversation,
            ),
            ("compaction", &compacted),
        ] {
            let sent = shrink(&policy);
            let sent = sent.messages();
            assert_eq!(sent[0].text(), task, "{how}: the task statement is whole");
            assert!(
                sent[1].text().len() < 1_000 && sent[1].text().contains("bytes elided"),
                "{how}: a later long message is elided: {}",
                sent[1].text().len()
            );
            assert!(
                shrink(&strict).messages()[0]
                    .text()
                    .contains("bytes elided"),
                "{how}: past the tail limit the task statement is cut too"
            );
        }
        assert_eq!(compacted(&policy).len(), c.len(), "elision alone halved it");
    }

    #[test]
    fn old_turns_are_dropped_only_when_elision_did_not_at_least_halve_the_conversation() {
        // task, one long old answer, then a kept tail whose last message pads the
        // conversation by `pad` bytes: elision shrinks only the old answer, so the padding
        // moves the elided size relative to the whole, byte by byte.
        let conversation = |pad: usize| {
            let mut c = Conversation::new();
            c.push(Message::user_text("the task"));
            c.push(Message::assistant_text("x".repeat(10_000)));
            c.push(Message::user_text("next"));
            c.push(Message::assistant_text("a"));
            c.push(Message::user_text("p".repeat(pad)));
            c
        };
        let policy = CompactionPolicy::default().with_keep_recent_messages(2);
        let (before, elided) = {
            let c = conversation(0);
            let small = compact(&c, &policy).unwrap();
            assert_eq!(small.len(), c.len(), "elision alone more than halved it");
            (c.approx_bytes(), small.approx_bytes())
        };
        // With this padding, elision leaves exactly half.
        let half = before - 2 * elided;
        let c = conversation(half);
        let small = compact(&c, &policy).unwrap();
        assert_eq!(small.approx_bytes() * 2, c.approx_bytes());
        assert_eq!(
            small.len(),
            c.len(),
            "exactly half is halved: nothing dropped"
        );
        let c = conversation(half + 1);
        let small = compact(&c, &policy).unwrap();
        assert_eq!(small.len(), 3, "one byte more: the old turns are dropped");
        assert!(small.messages()[0]
            .text()
            .contains("[2 earlier messages were removed"));
    }

    #[test]
    fn a_conversation_that_is_all_tail_is_cut_without_a_note_of_removed_messages() {
        // Only the task statement is older than the tail: there is nothing to drop, so a
        // compaction that shrinks the tail's big tool result (but not by half) says nothing
        // about removed messages.
        let mut c = Conversation::new();
        c.push(Message::user_text("the task"));
        c.push(Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("z".repeat(40_000)),
                ContentBlock::tool_use("t1", "read", json!({})),
            ],
        });
        c.push(Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "t1",
                vec![ToolResultPart::text("y".repeat(40_000))],
                false,
            )],
        });
        let small = compact(
            &c,
            &CompactionPolicy::default().with_keep_recent_messages(2),
        )
        .unwrap();
        assert!(small.approx_bytes() * 2 > c.approx_bytes(), "not halved");
        assert!(small.approx_bytes() < c.approx_bytes(), "but shrunk");
        assert_eq!(small.len(), 3);
        assert_eq!(small.messages()[0].text(), "the task");
    }

    #[test]
    fn only_a_user_message_ending_in_the_prompt_is_a_summary_request() {
        let c = chat("task", 3, 10);
        assert!(!is_summary_request(&c), "an ordinary conversation");
        assert!(!is_summary_request(&Conversation::new()));
        let request = summary_request(
            &c,
            &CompactionPolicy::default().with_keep_recent_messages(2),
            None,
        )
        .expect("a request");
        assert!(is_summary_request(&request.conversation));
        // The model quoting the prompt back is not a request for a summary.
        let mut quoted = c.clone();
        quoted.push(Message::assistant_text(SUMMARY_PROMPT));
        assert!(!is_summary_request(&quoted));
        // Nor is a user message that mentions it before saying something else.
        let mut mentioned = c;
        mentioned.push(Message {
            role: Role::User,
            content: vec![
                ContentBlock::text(SUMMARY_PROMPT),
                ContentBlock::text("and then?"),
            ],
        });
        assert!(!is_summary_request(&mentioned));
    }

    #[test]
    fn the_kept_tail_is_verbatim_however_long_its_text() {
        // Only tool results in the tail are cut (past `max_tail_result_bytes`); the tail's
        // first message, an assistant message with a long text, is kept as it was.
        let mut c = chat("task", 3, 5_000);
        c.push(Message::assistant_text("w".repeat(5_000)));
        c.push(Message::user_text("and now?"));
        let small = compact(
            &c,
            &CompactionPolicy::default().with_keep_recent_messages(2),
        )
        .unwrap();
        let n = small.len();
        assert_eq!(small.messages()[n - 2..], c.messages()[c.len() - 2..]);
    }

    /// `n` bytes of `c`.
    fn bytes(c: char, n: usize) -> String {
        c.to_string().repeat(n)
    }

    fn results(ids_and_texts: &[(&str, String)]) -> Message {
        Message {
            role: Role::User,
            content: ids_and_texts
                .iter()
                .map(|(id, text)| {
                    ContentBlock::tool_result(*id, vec![ToolResultPart::text(text.clone())], false)
                })
                .collect(),
        }
    }

    fn calls(ids: &[&str]) -> Message {
        Message {
            role: Role::Assistant,
            content: ids
                .iter()
                .map(|id| ContentBlock::tool_use(*id, "read", json!({})))
                .collect(),
        }
    }

    #[test]
    fn an_older_payload_of_exactly_the_limit_is_kept_and_one_byte_more_is_elided() {
        let policy = CompactionPolicy::default()
            .with_keep_recent_messages(2)
            .with_elide_over_bytes(100)
            .with_keep_head_bytes(10);
        let mut c = Conversation::new();
        c.push(Message::user_text("task"));
        c.push(Message::assistant_text(bytes('a', 100)));
        c.push(Message::user_text("next"));
        c.push(Message::assistant_text(bytes('b', 101)));
        c.push(Message::user_text("next"));
        c.push(calls(&["t1", "t2"]));
        c.push(results(&[("t1", bytes('r', 100)), ("t2", bytes('s', 101))]));
        c.push(Message::assistant_text("end"));
        c.push(Message::user_text("ok"));
        let request = summary_request(&c, &policy, None).expect("a request");
        let sent = request.conversation.messages();
        assert_eq!(
            sent[1].text(),
            bytes('a', 100),
            "a text of exactly the limit"
        );
        assert_eq!(
            sent[3].text(),
            format!(
                "{}\n[… 91 bytes elided to fit the context window]",
                bytes('b', 10)
            )
        );
        let results = serde_json::to_string(&*sent[6]).unwrap();
        assert!(
            results.contains(&bytes('r', 100)),
            "a result of exactly the limit: {results}"
        );
        assert!(
            results.contains(&format!(
                "{}\\n[… 91 bytes elided to fit the context window]",
                bytes('s', 10)
            )),
            "{results}"
        );
    }

    #[test]
    fn a_kept_tool_result_past_the_tail_limit_is_cut_to_half_of_it() {
        let policy = CompactionPolicy::default()
            .with_keep_recent_messages(2)
            .with_max_tail_result_bytes(200);
        let mut c = Conversation::new();
        c.push(Message::user_text("task"));
        c.push(Message::assistant_text(bytes('o', 5_000)));
        c.push(Message::user_text("next"));
        c.push(calls(&["t1", "t2"]));
        c.push(results(&[("t1", bytes('x', 200)), ("t2", bytes('y', 201))]));
        let small = compact(&c, &policy).unwrap();
        assert_eq!(small.len(), c.len(), "elision alone halved it");
        let tail = serde_json::to_string(&*small.messages()[4]).unwrap();
        assert!(
            tail.contains(&bytes('x', 200)),
            "exactly the limit is kept: {tail}"
        );
        assert!(
            tail.contains(&format!(
                "\"{}\\n[… 101 bytes elided to fit the context window]",
                bytes('y', 100)
            )),
            "{tail}"
        );
    }

    #[test]
    fn a_request_that_fits_exactly_drops_nothing_and_one_byte_less_drops_whole_exchanges() {
        let c = chat("task", 8, 300);
        let policy = CompactionPolicy::default().with_keep_recent_messages(2);
        let whole = summary_request(&c, &policy, None).expect("a request");
        assert_eq!(whole.dropped, 0);
        // The size the fit is measured on: the older messages, before the prompt is added.
        let sent = whole.conversation.messages();
        let last = sent.last().expect("messages");
        let without_prompt = Message {
            role: last.role,
            content: last.content[..last.content.len() - 1].to_vec(),
        };
        let older: usize = sent[..sent.len() - 1]
            .iter()
            .map(|m| m.approx_bytes())
            .sum::<usize>()
            + without_prompt.approx_bytes();

        let exact = summary_request(&c, &policy, Some(older)).expect("a request");
        assert_eq!(exact, whole, "a request of exactly `fit_bytes` fits");

        let less = summary_request(&c, &policy, Some(older - 1)).expect("a request");
        assert!(less.dropped > 0);
        let sent = less.conversation.messages();
        assert_eq!(sent[0].role, Role::User);
        assert!(sent[0].text().contains(&format!(
            "[{} earlier messages were left out of this summary request",
            less.dropped
        )));
        // Whole exchanges go: the roles still alternate, starting with the task statement.
        for (i, m) in sent.iter().enumerate() {
            let expected = if i % 2 == 0 {
                Role::User
            } else {
                Role::Assistant
            };
            assert_eq!(m.role, expected, "message {i}");
        }
        assert_eq!(less.dropped % 2, 0, "{}", less.dropped);
        assert_eq!(
            sent.len() + less.dropped,
            whole.conversation.len(),
            "only dropped messages are missing"
        );
    }
}
