//! A request's stream deadlines, and their enforcement: the one place that says when a
//! response that went quiet, or sent only keep-alives, has failed.

use crate::failure::{ProviderFailure, TransportFault};
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// How long a provider's response may take before the attempt fails as an idle timeout
/// ([`TransportFault::IdleTimeout`], retried like any
/// transport fault). The machine decides them; the driver that reads the response enforces
/// them: each [`Command::SendRequest`](crate::Command::SendRequest) carries them, the tokio
/// runner's HTTP providers read the clock against them, and the simulator fails a stall
/// that outlasts them.
///
/// ```
/// use rebound_core::{MachineConfig, StreamDeadlines};
/// let mut config = MachineConfig::default();
/// config.stream = StreamDeadlines::new(30_000, 300_000);
/// assert_eq!(config.stream.silence_limit_ms(), 30_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", default, deny_unknown_fields)]
#[non_exhaustive]
pub struct StreamDeadlines {
    /// How long a response may stay silent (no byte before the headers, or between stream
    /// chunks), in ms. 90 s by default: longer than the longest pause between the
    /// keep-alive pings Anthropic and OpenAI send while a model thinks.
    pub idle_ms: u64,
    /// How long a response may go without *content*, in ms: a stream that sends only
    /// keep-alives (pings, comments, empty deltas) for this long, or a non-streamed or
    /// error body still incomplete after it, fails. Bytes alone do not reset it, so a
    /// server dripping keep-alives cannot hold a request open forever. 10 minutes by default.
    pub progress_ms: u64,
}

crate::objects_only!(StreamDeadlines, "an object of stream deadlines");

impl StreamDeadlines {
    /// Deadlines of `idle_ms` without a byte and `progress_ms` without content (each at
    /// least 1 ms: a zero deadline would fail every request before it was sent).
    #[must_use]
    pub fn new(idle_ms: u64, progress_ms: u64) -> Self {
        StreamDeadlines {
            idle_ms: idle_ms.max(1),
            progress_ms: progress_ms.max(1),
        }
    }

    /// The longest a response may stay silent: a silence this long fails the attempt
    /// whichever deadline ends it (silence has no content either). What
    /// [`StreamWatch`] says of a response that sends nothing.
    #[must_use]
    pub fn silence_limit_ms(&self) -> u64 {
        StreamWatch::stream(*self, Millis::ZERO).deadline().0
    }

    /// Whether these are the defaults (so a trace line need not repeat them).
    #[must_use]
    pub fn is_default(&self) -> bool {
        *self == StreamDeadlines::default()
    }
}

impl Default for StreamDeadlines {
    fn default() -> Self {
        StreamDeadlines {
            idle_ms: 90_000,
            progress_ms: 600_000,
        }
    }
}

/// Watches one response against its [`StreamDeadlines`] on the clock the shell passes in:
/// the HTTP providers read a monotonic clock, the simulator its virtual one.
///
/// The response fails when no byte came for `idle_ms`, or no *progress* for `progress_ms`:
/// on a stream, progress is content ([`StreamDelta::is_progress`](crate::wire::StreamDelta::is_progress)),
/// so keep-alives alone cannot hold a request open; on a body read whole (an error body, a
/// non-streamed answer), only its end is progress.
///
/// ```
/// use rebound_core::run::{Stall, StreamWatch};
/// use rebound_core::{Millis, StreamDeadlines};
///
/// let mut watch = StreamWatch::stream(StreamDeadlines::new(1_000, 5_000), Millis(0));
/// assert_eq!(watch.deadline(), Millis(1_000));
/// assert_eq!(watch.arrived(Millis(900), true), Ok(()));   // content
/// assert_eq!(watch.arrived(Millis(1_800), false), Ok(())); // a keep-alive: bytes, no content
/// assert_eq!(watch.expired(Millis(2_500)), None);
/// assert_eq!(watch.expired(Millis(2_800)), Some(Stall::Idle));
/// // Keep-alives every second do not reset the progress deadline (5 s after the content).
/// assert_eq!(watch.arrived(Millis(5_900), false), Err(Stall::NoProgress));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamWatch {
    deadlines: StreamDeadlines,
    /// Whether content counts as progress (a stream) or only the end does (a whole body).
    streaming: bool,
    last_byte: Millis,
    last_progress: Millis,
}

/// Why a response failed its deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stall {
    /// No byte for `idle_ms`.
    Idle,
    /// A stream sent no content for `progress_ms` (only keep-alives).
    NoProgress,
    /// A body read whole was not complete within `progress_ms`.
    Incomplete,
}

impl Stall {
    /// What the failure says.
    #[must_use]
    pub fn detail(self) -> &'static str {
        match self {
            Stall::Idle => "no bytes received in time",
            Stall::NoProgress => "no content received in time (only keep-alives)",
            Stall::Incomplete => "the body was not complete in time",
        }
    }

    /// The attempt's failure: an idle timeout, retried like any transport fault.
    #[must_use]
    pub fn failure(self) -> ProviderFailure {
        ProviderFailure::transport(TransportFault::IdleTimeout, Some(self.detail()))
    }
}

impl StreamWatch {
    /// Watches a stream whose request was sent (or whose last byte came) at `now`.
    #[must_use]
    pub fn stream(deadlines: StreamDeadlines, now: Millis) -> Self {
        StreamWatch {
            deadlines,
            streaming: true,
            last_byte: now,
            last_progress: now,
        }
    }

    /// Watches a body that is read whole, from `now`: it must end within `progress_ms`,
    /// with no gap of `idle_ms` between its bytes.
    #[must_use]
    pub fn body(deadlines: StreamDeadlines, now: Millis) -> Self {
        StreamWatch {
            streaming: false,
            ..Self::stream(deadlines, now)
        }
    }

    /// When the response fails unless more arrives: the earlier of its two deadlines.
    #[must_use]
    pub fn deadline(&self) -> Millis {
        self.idle_deadline().min(self.progress_deadline())
    }

    fn idle_deadline(&self) -> Millis {
        self.last_byte.plus(self.deadlines.idle_ms.max(1))
    }

    fn progress_deadline(&self) -> Millis {
        self.last_progress.plus(self.deadlines.progress_ms.max(1))
    }

    /// Which deadline has passed at `now`, if one has (progress first: it names the
    /// longer story).
    #[must_use]
    pub fn expired(&self, now: Millis) -> Option<Stall> {
        if now >= self.progress_deadline() {
            Some(self.no_progress())
        } else if now >= self.idle_deadline() {
            Some(Stall::Idle)
        } else {
            None
        }
    }

    /// Bytes arrived at `now` (the time the reader waits again: a reader that was busy
    /// with the last chunk must not take a server that kept sending for a silent one);
    /// `content`: whether they held content. Fails when they came too late to count.
    ///
    /// # Errors
    ///
    /// The stall, when the bytes came after a deadline, or when only keep-alives came
    /// since the progress deadline passed.
    pub fn arrived(&mut self, now: Millis, content: bool) -> Result<(), Stall> {
        if now >= self.progress_deadline() && !(content && self.streaming) {
            return Err(self.no_progress());
        }
        self.last_byte = self.last_byte.max(now);
        if content && self.streaming {
            self.last_progress = self.last_progress.max(now);
        }
        Ok(())
    }

    fn no_progress(&self) -> Stall {
        if self.streaming {
            Stall::NoProgress
        } else {
            Stall::Incomplete
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deadlines() -> StreamDeadlines {
        StreamDeadlines::new(1_000, 5_000)
    }

    #[test]
    fn silence_fails_at_the_earlier_deadline_whichever_it_is() {
        let watch = StreamWatch::stream(deadlines(), Millis(100));
        assert_eq!(watch.deadline(), Millis(1_100));
        assert_eq!(watch.expired(Millis(1_099)), None);
        assert_eq!(watch.expired(Millis(1_100)), Some(Stall::Idle));
        let tight = StreamWatch::stream(StreamDeadlines::new(9_000, 2_000), Millis(0));
        assert_eq!(tight.deadline(), Millis(2_000));
        assert_eq!(tight.expired(Millis(2_000)), Some(Stall::NoProgress));
    }

    #[test]
    fn content_resets_both_deadlines_and_keep_alives_only_the_idle_one() {
        let mut watch = StreamWatch::stream(deadlines(), Millis(0));
        for t in (900..4_900).step_by(900) {
            assert_eq!(watch.arrived(Millis(t), false), Ok(()));
        }
        assert_eq!(watch.deadline(), Millis(5_000));
        assert_eq!(watch.arrived(Millis(4_950), true), Ok(()));
        assert_eq!(watch.deadline(), Millis(5_950));
        assert_eq!(watch.arrived(Millis(9_950), false), Err(Stall::NoProgress));
        // Content that comes late still counts on a stream: the idle deadline is what a
        // reader's timer would have ended it with, and it did not fire.
        let mut late = StreamWatch::stream(deadlines(), Millis(0));
        assert_eq!(late.arrived(Millis(5_500), true), Ok(()));
    }

    #[test]
    fn a_body_read_whole_must_end_within_the_progress_deadline() {
        let mut watch = StreamWatch::body(deadlines(), Millis(0));
        for t in (900..4_900).step_by(900) {
            assert_eq!(watch.arrived(Millis(t), true), Ok(()));
        }
        assert_eq!(watch.expired(Millis(5_000)), Some(Stall::Incomplete));
        assert_eq!(watch.arrived(Millis(5_000), true), Err(Stall::Incomplete));
        assert_eq!(
            Stall::Incomplete.failure().transport,
            Some(TransportFault::IdleTimeout)
        );
        assert!(Stall::Idle
            .failure()
            .message
            .contains("no bytes received in time"));
    }
}
