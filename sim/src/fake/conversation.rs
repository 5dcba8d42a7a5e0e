//! Which conversation a request belongs to, and where each conversation stands in the
//! scenario: its own [`ScriptCursor`] and the start of its clock.

use super::{ScenarioClock, ScriptScope, CONVERSATION_HEADER};
use crate::scenario::ScriptCursor;
use hyper::HeaderMap;
use rebound_core::compaction::summarized;
use rebound_core::{ContentBlock, Conversation};
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// What names a conversation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Key {
    /// [`ScriptScope::Shared`]: every request.
    Shared,
    /// The client's `x-rebound-conversation` header.
    Header(String),
    /// The hash of the text the conversation opens with (its first message's first text).
    Opening(u64),
}

/// Where a request stands: its conversation's key, and the hash of all its messages (a
/// request that repeats its conversation's first one, after an answer, starts it over).
#[derive(Debug, Clone)]
pub(super) struct Named {
    pub(super) key: Key,
    messages: u64,
}

impl Named {
    /// The conversation of a request with `headers` and `conversation`, under `scope`.
    pub(super) fn of(scope: ScriptScope, headers: &HeaderMap, conversation: &Conversation) -> Self {
        let key = match scope {
            // One script, never started over: nothing to tell apart.
            ScriptScope::Shared => {
                return Named {
                    key: Key::Shared,
                    messages: 0,
                }
            }
            ScriptScope::PerConversation => match header(headers) {
                Some(id) => Key::Header(id),
                None => Key::Opening(hash(opening_text(conversation))),
            },
        };
        Named {
            key,
            messages: serde_json::to_vec(conversation).map_or(0, |bytes| hash(&bytes)),
        }
    }
}

/// The value of the conversation header, when the client sent a non-blank one.
fn header(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(CONVERSATION_HEADER)?;
    let id = String::from_utf8_lossy(value.as_bytes()).trim().to_owned();
    (!id.is_empty()).then_some(id)
}

/// The text a conversation opens with: the first text block of its first message (rebound's
/// elision adds a note block after it and keeps it; a system prompt, which may change from
/// request to request, is not part of it).
fn opening_text(conversation: &Conversation) -> &str {
    conversation
        .messages()
        .first()
        .and_then(|m| {
            m.content.iter().find_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
        })
        .unwrap_or_default()
}

fn hash<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// One conversation's play of the scenario.
#[derive(Debug, Clone)]
pub(super) struct Play {
    pub(super) cursor: ScriptCursor,
    /// Bumped whenever the cursor moves; a deferred commit only applies on top of the state
    /// it was planned from.
    pub(super) generation: u64,
    /// When its first request arrived, in ms since the server started.
    started_ms: u64,
    /// The hash of its first request's messages.
    opening: u64,
    /// Whether it was answered (a turn or a summary): from then on its first request again
    /// is another conversation.
    pub(super) answered: bool,
}

/// Every conversation's play, in order of first request.
#[derive(Debug)]
pub(super) struct Plays {
    seed: u64,
    clock: ScenarioClock,
    plays: Vec<Play>,
    by_key: BTreeMap<Key, usize>,
}

impl Plays {
    pub(super) fn new(seed: u64, clock: ScenarioClock) -> Self {
        Plays {
            seed,
            clock,
            plays: Vec::new(),
            by_key: BTreeMap::new(),
        }
    }

    /// The index of the conversation of a request named `named` arriving at `at_ms`,
    /// started (with the next seed) when it is new, or when it repeats the first request of
    /// a conversation that was answered.
    pub(super) fn find(&mut self, named: &Named, at_ms: u64) -> usize {
        if let Some(&i) = self.by_key.get(&named.key) {
            let play = &self.plays[i];
            if named.key == Key::Shared || !(play.answered && play.opening == named.messages) {
                return i;
            }
        }
        let index = self.plays.len();
        let seed = self
            .seed
            .wrapping_add(u64::try_from(index).unwrap_or(u64::MAX));
        self.plays.push(Play {
            cursor: ScriptCursor::new(seed),
            generation: 0,
            started_ms: at_ms,
            opening: named.messages,
            answered: false,
        });
        self.by_key.insert(named.key.clone(), index);
        index
    }

    pub(super) fn get_mut(&mut self, index: usize) -> &mut Play {
        &mut self.plays[index]
    }

    /// The scenario's clock of conversation `index` at `at_ms` (ms since the server
    /// started).
    pub(super) fn now(&self, index: usize, at_ms: u64) -> u64 {
        match self.clock {
            ScenarioClock::FirstRequest => at_ms.saturating_sub(self.plays[index].started_ms),
            ScenarioClock::ServerStart => at_ms,
        }
    }

    /// Conversation `index` was answered a summary request with `summary`: a request that
    /// opens with the conversation rebound compacts with it (its first message replaced by
    /// the summary) continues the same conversation.
    pub(super) fn summarized_to(&mut self, named: &Named, index: usize, summary: &str) {
        if !matches!(named.key, Key::Opening(_)) {
            return;
        }
        let compacted = summarized(&Conversation::new(), 0, summary);
        self.by_key
            .insert(Key::Opening(hash(opening_text(&compacted))), index);
    }
}
