//! What a durable run tells as it happens, and only then: its side channel (a
//! [`Receiver`]) and its telemetry (the runner's spans and metrics,
//! [`RunTelemetry`]).
//!
//! A run goes live at the first step that runs here rather than being read from the
//! journal. A new run's first step is its first (it journals the run's origin): the run is
//! then told from its start, the commands that led to that step included. A run resumed after
//! a crash goes live at the first step after those the journal replays: what was replayed was
//! told (or lost with its process) by the execution that ran it and is not told again. Its
//! telemetry then starts there: a resumed run exports an `invoke_agent` span from its
//! resumption to its end, holding the model calls, attempts and tool calls made from then on
//! (its request and retry counts, from the run's tally, count the whole run; its token counts
//! the model calls made live). The commands since the last replayed event (the request the
//! first live step sends) are told to it as it starts, so that step has its spans.

use rebound_core::wire::StreamDelta;
use rebound_core::{Command, Event, FinishReason, MachineConfig, RunError, RunTally};
use rebound_effects::receiver::Receiver;
use rebound_effects::telemetry::{RunTelemetry, Telemetry};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use tracing::Span;

/// What starts a run's telemetry.
struct Start {
    options: Telemetry,
    config: MachineConfig,
    labels: Vec<String>,
    seed: u64,
    executor_traces: bool,
}

struct State {
    receiver: Box<dyn Receiver>,
    start: Start,
    /// Started when the run went live.
    telemetry: Option<RunTelemetry>,
    /// The commands since the last event, while the run is not live yet, with the tally at
    /// each: those that led to the first live step.
    pending: Vec<(Command, RunTally)>,
}

/// A durable run's side channel and telemetry, shared by the run and the steps it journals
/// (a step goes live inside the engine's closure).
#[derive(Clone)]
pub(crate) struct Live(Arc<Mutex<State>>);

/// The side channel's calls a command makes (best effort: a UI that went away does not stop
/// the run).
fn show(receiver: &mut dyn Receiver, command: &Command) {
    match command {
        Command::AppendMessage { message } => {
            let _ = receiver.message(message);
            for result in message.tool_results() {
                let _ = receiver.tool_result(result);
            }
        }
        Command::ReplaceConversation { report, .. } => {
            let _ = receiver.compaction(report);
        }
        Command::NotifyRetry { info } => {
            let _ = receiver.provider_retry(info);
        }
        Command::NotifyFallback { info } => {
            let _ = receiver.fallback(info);
        }
        Command::RunTools { calls, .. } => {
            for call in calls {
                let _ = receiver.tool_start(call);
            }
        }
        _ => {}
    }
}

impl Live {
    /// A run with `config` and `seed` whose side channel is `receiver` and whose telemetry
    /// records as `options` says; `labels`: its providers' labels; `executor_traces`: the
    /// tool executor makes its calls' spans itself.
    pub(crate) fn new(
        receiver: Box<dyn Receiver>,
        options: Telemetry,
        config: MachineConfig,
        labels: Vec<String>,
        seed: u64,
        executor_traces: bool,
    ) -> Self {
        Live(Arc::new(Mutex::new(State {
            receiver,
            start: Start {
                options,
                config,
                labels,
                seed,
                executor_traces,
            },
            telemetry: None,
            pending: Vec::new(),
        })))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The run goes live (a step runs here), if it was not: its telemetry starts and takes
    /// the commands that led here; when `from_start` (the run's first step), the side
    /// channel is told that the run started and those commands too.
    pub(crate) fn go_live(&self, from_start: bool) {
        self.with_telemetry(from_start, |_| ());
    }

    fn with_telemetry<R>(&self, from_start: bool, then: impl FnOnce(&mut RunTelemetry) -> R) -> R {
        let mut state = self.lock();
        let State {
            receiver,
            start,
            telemetry,
            pending,
        } = &mut *state;
        let telemetry = telemetry.get_or_insert_with(|| {
            let mut telemetry = RunTelemetry::start(
                &start.options,
                &start.config,
                start.labels.iter().cloned(),
                start.seed,
                start.executor_traces,
            );
            if from_start {
                let _ = receiver.started(start.seed);
            }
            for (command, tally) in pending.drain(..) {
                if from_start {
                    show(receiver.as_mut(), &command);
                }
                telemetry.command(&command, &tally);
            }
            telemetry
        });
        then(telemetry)
    }

    /// The run is about to be handed `event`.
    pub(crate) fn event(&self, event: &Event) {
        let mut state = self.lock();
        match &mut state.telemetry {
            Some(telemetry) => telemetry.event(event),
            None => state.pending.clear(),
        }
    }

    /// The run emitted `command` (about to be executed), with its tally now.
    pub(crate) fn command(&self, command: &Command, tally: &RunTally) {
        let mut state = self.lock();
        let State {
            receiver,
            telemetry,
            pending,
            ..
        } = &mut *state;
        match telemetry {
            Some(telemetry) => {
                telemetry.command(command, tally);
                show(receiver.as_mut(), command);
            }
            None => pending.push((command.clone(), tally.clone())),
        }
    }

    /// The attempt being sent had shown streamed text, now discarded.
    pub(crate) fn stream_reset(&self, attempt: u32) {
        let mut state = self.lock();
        if let Some(telemetry) = &state.telemetry {
            telemetry.stream_reset();
            let _ = state.receiver.stream_reset(attempt);
        }
    }

    /// A streamed piece of the answer being sent (inside a live step).
    pub(crate) fn delta(&self, delta: &StreamDelta<&str>) {
        let _ = self.lock().receiver.delta(delta);
    }

    /// The span of the attempt being sent (inside a live step).
    pub(crate) fn attempt_span(&self) -> Span {
        self.with_telemetry(false, |t| t.attempt_span())
    }

    /// `batch` inside the run's span with its content capture (inside a live step).
    pub(crate) fn in_tool_batch<F: Future>(&self, batch: F) -> impl Future<Output = F::Output> {
        self.with_telemetry(false, |t| t.in_tool_batch(batch))
    }

    /// The tokens the shared budget holds now, when it can tell.
    pub(crate) fn budget_tokens(&self, tokens: Option<f64>) {
        if let Some(telemetry) = &self.lock().telemetry {
            telemetry.budget_tokens(tokens);
        }
    }

    /// The run ended with `result` and `stats`: the side channel is told, and the run's
    /// spans end (the run's own when the last clone of this is dropped), when it is live.
    pub(crate) fn finish(&self, result: &Result<(FinishReason, u32), RunError>, stats: &RunTally) {
        let mut state = self.lock();
        let State {
            receiver,
            telemetry,
            ..
        } = &mut *state;
        let Some(telemetry) = telemetry else {
            return;
        };
        telemetry.finish(result, stats);
        let _ = receiver.totals(stats);
        match result {
            Ok((reason, turns)) => {
                let _ = receiver.finished(reason, *turns);
            }
            Err(error) => receiver.error(error),
        }
    }
}
