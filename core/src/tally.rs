//! The run tally: what happened during one run, counted the same way by every driver.
//!
//! The tally is fed each event handed to the machine and each command the machine emits
//! ([`RunTally::event`], [`RunTally::command`]), and nothing else: every count, stream resets
//! included, is derived from those. [`Run`](crate::run::Run), the driver core every shell
//! uses, keeps one, so the runner's, the simulator's and the durable service's totals agree
//! by construction.
//!
//! ```
//! use rebound_core::{AgentMachine, ContentBlock, Event, MachineConfig, Millis, RunTally};
//!
//! let mut machine = AgentMachine::new(MachineConfig::default(), 7);
//! let mut tally = RunTally::default();
//! let event = Event::UserMessage { content: vec![ContentBlock::text("hi")] };
//! tally.event(Millis(0), &event);
//! for command in machine.step(Millis(0), event) {
//!     tally.command(&command);
//! }
//! assert_eq!(tally.requests, 1);
//! assert_eq!(tally.retries, 0);
//! ```

use crate::machine::{Command, Event, RequestId, RequestPurpose};
use crate::response::Usage;
use crate::time::Millis;
use serde::{Deserialize, Serialize};

/// Counts of what happened during a run, for summaries and statistics.
///
/// Every count is saturating: a run long enough to overflow one stays at the maximum.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct RunTally {
    /// Provider requests sent (every attempt, summaries for compaction included).
    pub requests: u32,
    /// Retries sent: requests announced by a [`Command::NotifyRetry`] (except the one
    /// before a compaction's retry, counted in [`compactions`](Self::compactions)), counted
    /// when the request is sent. A retry announced and never sent (the run was canceled or
    /// failed during its backoff) is not one.
    pub retries: u32,
    /// The announced delays of those retries, summed, in ms.
    pub retry_wait_ms: u64,
    /// Tool calls in appended assistant messages.
    pub tool_calls: u32,
    /// Appended tool results that were errors.
    pub tool_errors: u32,
    /// Compactions applied (the conversation replaced).
    pub compactions: u32,
    /// Moves to another target of the fallback chain.
    pub fallbacks: u32,
    /// Answers that began (a [`Event::ProviderResponding`] for the request awaited) and then
    /// failed ([`Event::ProviderFailed`] for it): streams whose partial text was shown and
    /// then discarded.
    pub stream_resets: u32,
    /// Input tokens reported, summed over answered requests (as each provider counts them:
    /// OpenAI's include cached tokens, Anthropic's do not).
    pub input_tokens: u64,
    /// Output tokens reported, summed.
    pub output_tokens: u64,
    /// Prompt-cache reads reported, summed.
    pub cache_read_tokens: u64,
    /// Prompt-cache writes reported, summed (Anthropic).
    pub cache_creation_tokens: u64,
    /// Usage of each answered request, in order.
    pub usage: Vec<RequestUsage>,
    /// Time from the first event to the last, in ms, on the clock the driver passes in (the
    /// tokio runner sets it to the run's wall time when the run ends, saving included).
    pub elapsed_ms: u64,
    /// The request awaiting its answer, to attribute its usage.
    #[serde(skip)]
    pending: Option<PendingRequest>,
    /// The delay of the retry announced and not sent yet.
    #[serde(skip)]
    announced: Option<u64>,
    /// When the first event was handled.
    #[serde(skip)]
    started: Option<Millis>,
}

/// What one answered provider request used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RequestUsage {
    /// The target it went to.
    pub target: usize,
    /// Its attempt number.
    pub attempt: u32,
    /// What it was for (a turn, or a summary for compaction).
    pub purpose: RequestPurpose,
    /// The usage the provider reported.
    pub usage: Usage,
}

/// The last request sent, until its answer arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PendingRequest {
    request: RequestId,
    target: usize,
    attempt: u32,
    purpose: RequestPurpose,
    /// Its answer began.
    responding: bool,
    /// It failed: a later answer to it is stale.
    failed: bool,
}

impl RunTally {
    /// Counts an event handed to the machine at `now` (usage of an answered request, a
    /// stream that began and failed, the run's elapsed time).
    pub fn event(&mut self, now: Millis, event: &Event) {
        let started = *self.started.get_or_insert(now);
        self.elapsed_ms = now.0.saturating_sub(started.0);
        // Answers to another request than the one awaited are stale: the machine ignores them.
        match event {
            Event::ProviderSucceeded { request, response } => {
                let Some(pending) = self.pending.filter(|p| p.request == *request && !p.failed)
                else {
                    return;
                };
                self.pending = None;
                self.add_usage(RequestUsage {
                    target: pending.target,
                    attempt: pending.attempt,
                    purpose: pending.purpose,
                    usage: response.usage,
                });
            }
            Event::ProviderResponding { request } => {
                if let Some(pending) = self.awaited(*request) {
                    pending.responding = true;
                }
            }
            Event::ProviderFailed { request, .. } => {
                if let Some(pending) = self.awaited(*request) {
                    pending.failed = true;
                    if std::mem::take(&mut pending.responding) {
                        self.stream_resets = self.stream_resets.saturating_add(1);
                    }
                }
            }
            _ => {}
        }
    }

    /// The last request sent, while it awaits its answer.
    fn awaited(&mut self, request: RequestId) -> Option<&mut PendingRequest> {
        self.pending
            .as_mut()
            .filter(|p| p.request == request && !p.failed)
    }

    /// Counts a command the machine emitted.
    pub fn command(&mut self, command: &Command) {
        match command {
            Command::SendRequest {
                request,
                target,
                attempt,
                purpose,
                ..
            } => {
                self.requests = self.requests.saturating_add(1);
                if let Some(delay_ms) = self.announced.take() {
                    self.retries = self.retries.saturating_add(1);
                    self.retry_wait_ms = self.retry_wait_ms.saturating_add(delay_ms);
                }
                self.pending = Some(PendingRequest {
                    request: *request,
                    target: *target,
                    attempt: *attempt,
                    purpose: *purpose,
                    responding: false,
                    failed: false,
                });
            }
            Command::NotifyRetry { info } if !info.is_compaction() => {
                self.announced = Some(info.delay_ms);
            }
            Command::NotifyFallback { .. } => {
                // The request goes to the next target as its first attempt there: whatever
                // retry was announced before was not sent.
                self.announced = None;
                self.fallbacks = self.fallbacks.saturating_add(1);
            }
            Command::ReplaceConversation { .. } => {
                self.compactions = self.compactions.saturating_add(1);
            }
            Command::AppendMessage { message } => {
                let calls = message.tool_uses().count();
                let errors = message.tool_results().filter(|r| r.is_error).count();
                self.tool_calls = self.tool_calls.saturating_add(count(calls));
                self.tool_errors = self.tool_errors.saturating_add(count(errors));
            }
            Command::NotifyRetry { .. }
            | Command::Sleep { .. }
            | Command::RunTools { .. }
            | Command::Compact { .. }
            | Command::AcquirePermit { .. }
            | Command::NoteBudget { .. }
            | Command::Finish { .. }
            | Command::Fail { .. } => {}
        }
    }

    /// The attempt number of the last request sent, while no success has answered it:
    /// after a run that failed on a provider failure, the attempts made at the request that
    /// failed, on its last target (a fallback starts counting again at 1). `None` when every
    /// request sent was answered.
    #[must_use]
    pub fn unanswered_attempts(&self) -> Option<u32> {
        self.pending.map(|p| p.attempt)
    }

    fn add_usage(&mut self, request: RequestUsage) {
        let u = &request.usage;
        self.input_tokens = self.input_tokens.saturating_add(u.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(u.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(u.cache_read_input_tokens.unwrap_or(0));
        self.cache_creation_tokens = self
            .cache_creation_tokens
            .saturating_add(u.cache_creation_input_tokens.unwrap_or(0));
        self.usage.push(request);
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailureKind;
    use crate::machine::ProviderRetryInfo;
    use crate::response::AssistantResponse;
    use crate::{Conversation, Message};
    use std::sync::Arc;

    fn retry(kind: FailureKind, delay_ms: u64) -> Command {
        Command::NotifyRetry {
            info: ProviderRetryInfo {
                attempt: 2,
                max_attempts: 4,
                delay_ms,
                kind,
                status: None,
                retry_after_ms: None,
                message: Arc::from("x"),
                target: 0,
            },
        }
    }

    fn send(request: u64, attempt: u32) -> Command {
        Command::SendRequest {
            request: RequestId(request),
            target: 1,
            attempt,
            conversation: crate::machine::Snapshot(Arc::new(Conversation::default())),
            purpose: RequestPurpose::Turn,
            deadlines: crate::StreamDeadlines::default(),
        }
    }

    fn answer(request: u64, output_tokens: u64) -> Event {
        let mut response = AssistantResponse::end_turn(Message::assistant_text("hi"));
        response.usage.output_tokens = output_tokens;
        Event::ProviderSucceeded {
            request: RequestId(request),
            response,
        }
    }

    #[test]
    fn a_compactions_retry_is_not_counted_as_a_retry() {
        let mut tally = RunTally::default();
        tally.command(&send(1, 1));
        tally.command(&retry(FailureKind::Unavailable, 500));
        tally.command(&send(2, 2));
        tally.command(&retry(FailureKind::ContextOverflow, 0));
        tally.command(&send(3, 2));
        tally.command(&retry(FailureKind::RateLimited, 0));
        tally.command(&send(4, 3));
        assert_eq!(tally.retries, 2);
        assert_eq!(tally.retry_wait_ms, 500);
    }

    /// The event that answers a step's commands.
    type Answer = dyn Fn(&[Command]) -> Event;

    /// Drives a machine through `events` (its first request answered by the first one, and
    /// so on), counting everything.
    fn tally_of(config: crate::MachineConfig, events: &[&Answer]) -> RunTally {
        let mut machine = crate::AgentMachine::new(config, 1);
        let mut tally = RunTally::default();
        let mut event = Event::user_text("hi");
        for (i, next) in events.iter().enumerate() {
            let now = Millis(u64::try_from(i).unwrap() * 100);
            tally.event(now, &event);
            let commands = machine.step(now, event);
            for command in &commands {
                tally.command(command);
            }
            event = next(&commands);
        }
        tally.event(Millis(10_000), &event);
        for command in machine.step(Millis(10_000), event) {
            tally.command(&command);
        }
        assert!(machine.is_terminal(), "{:?}", machine.outcome());
        tally
    }

    fn last_request(commands: &[Command]) -> RequestId {
        commands
            .iter()
            .find_map(|c| match c {
                Command::SendRequest { request, .. } => Some(*request),
                _ => None,
            })
            .expect("a request")
    }

    fn overloaded(commands: &[Command]) -> Event {
        Event::ProviderFailed {
            request: last_request(commands),
            failure: crate::ProviderFailure::new(FailureKind::Unavailable, "overloaded")
                .with_status(529),
        }
    }

    fn timer(commands: &[Command]) -> Event {
        let timer = commands
            .iter()
            .find_map(|c| match c {
                Command::Sleep { timer, .. } => Some(*timer),
                _ => None,
            })
            .expect("a sleep");
        Event::TimerFired { timer }
    }

    #[test]
    fn a_retry_counts_when_it_is_sent_not_when_it_is_announced() {
        let config = crate::MachineConfig::default()
            .with_retry(crate::RetryConfig::default().with_jitter(false));
        // Canceled during the backoff: announced, never sent.
        let canceled = tally_of(config.clone(), &[&overloaded, &|_| Event::Cancel]);
        assert_eq!((canceled.requests, canceled.retries), (1, 0));
        assert_eq!(canceled.retry_wait_ms, 0);
        // The backoff ran out and the retry went: one.
        let sent = tally_of(config.clone(), &[&overloaded, &timer, &|_| Event::Cancel]);
        assert_eq!((sent.requests, sent.retries), (2, 1));
        assert_eq!(sent.retry_wait_ms, 500);
        // Every attempt spent: three retries sent, the fourth failure announces none.
        let spent = tally_of(
            config,
            &[
                &overloaded,
                &timer,
                &overloaded,
                &timer,
                &overloaded,
                &timer,
                &overloaded,
            ],
        );
        assert_eq!((spent.requests, spent.retries), (4, 3));
        assert_eq!(spent.retry_wait_ms, 500 + 1_000 + 2_000);
        assert_eq!(spent.unanswered_attempts(), Some(4));
        assert_eq!(canceled.unanswered_attempts(), Some(1));
    }

    #[test]
    fn a_stream_reset_is_an_answer_that_began_and_failed() {
        let failed = |request| Event::ProviderFailed {
            request: RequestId(request),
            failure: crate::ProviderFailure::new(FailureKind::Unavailable, "cut"),
        };
        let responding = |request| Event::ProviderResponding {
            request: RequestId(request),
        };
        let mut tally = RunTally::default();
        tally.command(&send(1, 1));
        tally.event(Millis(1), &failed(1)); // failed before any byte: no reset
        tally.command(&send(2, 2));
        tally.event(Millis(2), &responding(1)); // stale: request 1 is over
        tally.event(Millis(3), &failed(2));
        assert_eq!(tally.stream_resets, 0);
        tally.command(&send(3, 3));
        tally.event(Millis(4), &responding(3));
        tally.event(Millis(5), &failed(3));
        tally.event(Millis(6), &failed(3)); // a duplicate counts once
        assert_eq!(tally.stream_resets, 1);
        tally.command(&send(4, 4));
        tally.event(Millis(7), &responding(4));
        tally.event(Millis(8), &answer(4, 1)); // began and succeeded: no reset
        assert_eq!(tally.stream_resets, 1);
        // An answer after the failure of its request is stale: no usage counted.
        tally.command(&send(5, 1));
        tally.event(Millis(9), &failed(5));
        tally.event(Millis(10), &answer(5, 50));
        assert_eq!(tally.output_tokens, 1);
        assert_eq!(tally.unanswered_attempts(), Some(1));
    }

    #[test]
    fn a_retry_announced_before_a_fallback_is_not_counted() {
        let mut tally = RunTally::default();
        tally.command(&send(1, 1));
        tally.command(&retry(FailureKind::Unavailable, 500));
        tally.command(&Command::NotifyFallback {
            info: crate::machine::FallbackInfo {
                from: 0,
                to: 1,
                from_label: "a".into(),
                to_label: "b".into(),
                kind: FailureKind::Unavailable,
                message: Arc::from("x"),
            },
        });
        tally.command(&send(2, 1));
        assert_eq!((tally.requests, tally.retries, tally.fallbacks), (2, 0, 1));
        assert_eq!(tally.retry_wait_ms, 0);
    }

    #[test]
    fn usage_goes_to_the_request_that_was_answered_and_stale_answers_count_nothing() {
        let mut tally = RunTally::default();
        tally.event(Millis(10), &Event::Resume);
        tally.command(&send(1, 1));
        tally.command(&send(2, 2));
        tally.event(Millis(20), &answer(1, 99)); // stale: request 2 is the one awaited
        tally.event(Millis(35), &answer(2, 7));
        tally.event(Millis(40), &answer(2, 7)); // a duplicate
        assert_eq!(tally.requests, 2);
        assert_eq!(tally.output_tokens, 7);
        assert_eq!(tally.usage.len(), 1);
        assert_eq!((tally.usage[0].target, tally.usage[0].attempt), (1, 2));
        assert_eq!(tally.elapsed_ms, 30);
        assert_eq!(
            tally.unanswered_attempts(),
            None,
            "the last request was answered"
        );
    }
}
