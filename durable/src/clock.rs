//! The durable run's clock: the machine's time, rebuilt the same on every replay.
//!
//! A run's time starts at a journaled wall-clock reading (when its first journaled step began)
//! and moves only with journaled facts: the wall-clock time each journaled step finished at,
//! and the delay of each durable timer.
//! Replaying the journal therefore gives the machine the very `now` values it saw the first
//! time, and so the very same decisions.

use rebound_core::{BudgetNote, Millis, PermitAsk, PermitDecision};

/// The wall clock, in Unix milliseconds: read only inside journaled steps.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The machine's time in a durable run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunClock {
    /// Unix milliseconds when the run started (journaled by its first step); `None` until
    /// then: the machine's time is 0 until a journaled step moves it.
    started_unix_ms: Option<u64>,
    now: Millis,
}

impl RunClock {
    /// A clock at 0 whose origin is not known yet: the run's first journaled step gives it
    /// ([`RunClock::in_step`], [`RunClock::start_at`]).
    pub(crate) fn unstarted() -> Self {
        RunClock {
            started_unix_ms: None,
            now: Millis(0),
        }
    }

    /// A clock at 0, counting from `started_unix_ms`.
    #[cfg(test)]
    pub(crate) fn new(started_unix_ms: u64) -> Self {
        RunClock {
            started_unix_ms: Some(started_unix_ms),
            now: Millis(0),
        }
    }

    /// The clock as a step that begins now (at `unix_ms`) reads it: when the run has no
    /// origin yet, this step is its first and starts it, and the origin is returned to be
    /// journaled with the step.
    pub(crate) fn in_step(self, unix_ms: u64) -> (RunClock, Option<u64>) {
        match self.started_unix_ms {
            Some(_) => (self, None),
            None => (
                RunClock {
                    started_unix_ms: Some(unix_ms),
                    ..self
                },
                Some(unix_ms),
            ),
        }
    }

    /// Whether no step journaled the run's origin yet.
    pub(crate) fn is_unstarted(&self) -> bool {
        self.started_unix_ms.is_none()
    }

    /// The run started at `unix_ms` (its first step's journaled origin), unless an origin is
    /// known already.
    pub(crate) fn start_at(&mut self, unix_ms: u64) {
        if self.started_unix_ms.is_none() {
            self.started_unix_ms = Some(unix_ms);
        }
    }

    /// The machine's time now.
    pub(crate) fn now(&self) -> Millis {
        self.now
    }

    /// A journaled step finished at `unix_ms`. Never goes back: a step journaled by a
    /// process whose clock is behind (a restart on another host) keeps the time where it is.
    pub(crate) fn finished_at(&mut self, unix_ms: u64) {
        let at = Millis(unix_ms.saturating_sub(self.origin(unix_ms)));
        self.now = self.now.max(at);
    }

    /// The origin, or (none known yet: no step journaled one) `unix_ms` itself, which
    /// keeps the time where it is.
    fn origin(&self, unix_ms: u64) -> u64 {
        self.started_unix_ms.unwrap_or(unix_ms)
    }

    /// A durable timer of `delay_ms` fired: the time it was set for.
    pub(crate) fn slept(&mut self, delay_ms: u64) {
        self.now = self.now.plus(delay_ms);
    }

    /// The machine's time of a wall-clock reading taken now (inside a step).
    pub(crate) fn machine_time_of(&self, unix_ms: u64) -> Millis {
        Millis(unix_ms.saturating_sub(self.origin(unix_ms))).max(self.now)
    }
}

/// The distance from the machine's clock to a retry budget's clock, taken at one moment:
/// asks and notes go to the budget in its time, and its answers come back in the machine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BudgetOffset(i128);

impl BudgetOffset {
    /// The offset when the machine reads `machine` and the budget `budget`, both now.
    pub(crate) fn between(machine: Millis, budget: Millis) -> Self {
        BudgetOffset(i128::from(budget.0) - i128::from(machine.0))
    }

    fn to_budget(self, t: Millis) -> Millis {
        shift(t, self.0)
    }

    fn to_machine(self, t: Millis) -> Millis {
        shift(t, -self.0)
    }

    /// `ask` in the budget's time.
    pub(crate) fn ask(self, ask: PermitAsk) -> PermitAsk {
        PermitAsk {
            deadline: self.to_budget(ask.deadline),
            since: self.to_budget(ask.since),
            ..ask
        }
    }

    /// The budget's `decision` in the machine's time.
    pub(crate) fn decision(self, decision: PermitDecision) -> PermitDecision {
        match decision {
            PermitDecision::WaitUntil(t) => PermitDecision::WaitUntil(self.to_machine(t)),
            other => other,
        }
    }

    /// `note` in the budget's time.
    pub(crate) fn note(self, note: BudgetNote) -> BudgetNote {
        match note {
            BudgetNote::RateLimited { target, until } => BudgetNote::RateLimited {
                target,
                until: self.to_budget(until),
            },
            other => other,
        }
    }
}

fn shift(t: Millis, by: i128) -> Millis {
    let shifted = (i128::from(t.0) + by).clamp(0, i128::from(u64::MAX));
    Millis(u64::try_from(shifted).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::PermitKind;

    #[test]
    fn the_clock_moves_with_steps_and_timers_and_never_back() {
        let mut clock = RunClock::new(1_000_000);
        clock.finished_at(1_000_250);
        assert_eq!(clock.now(), Millis(250));
        clock.slept(30_000);
        assert_eq!(clock.now(), Millis(30_250));
        // A step journaled by a host whose clock is 10 s behind.
        clock.finished_at(1_020_000);
        assert_eq!(clock.now(), Millis(30_250));
        // One before the run's start (a clock stepped back) reads as the start.
        assert_eq!(RunClock::new(5_000).machine_time_of(4_000), Millis(0));
    }

    #[test]
    fn the_first_step_starts_the_clock_and_only_the_first() {
        let clock = RunClock::unstarted();
        assert_eq!(clock.now(), Millis(0));
        // The first step begins at 1_000_000: it carries the origin, and reads time 0.
        let (inside, origin) = clock.in_step(1_000_000);
        assert_eq!(origin, Some(1_000_000));
        assert_eq!(inside.machine_time_of(1_000_040), Millis(40));
        let mut clock = clock;
        clock.start_at(1_000_000);
        clock.finished_at(1_000_250);
        assert_eq!(clock.now(), Millis(250));
        // Later steps carry none, and a second origin changes nothing.
        assert_eq!(clock.in_step(1_000_300).1, None);
        clock.start_at(2_000_000);
        clock.finished_at(1_000_500);
        assert_eq!(clock.now(), Millis(500));
    }

    #[test]
    fn asks_and_answers_cross_between_the_clocks() {
        let ask = PermitAsk {
            kind: PermitKind::Charged,
            target: 0,
            deadline: Millis(20_000),
            since: Millis(1_000),
        };
        // The budget's clock is 7 s ahead.
        let ahead = BudgetOffset::between(Millis(5_000), Millis(12_000));
        let sent = ahead.ask(ask);
        assert_eq!((sent.since, sent.deadline), (Millis(8_000), Millis(27_000)));
        assert_eq!(
            ahead.decision(PermitDecision::WaitUntil(Millis(15_000))),
            PermitDecision::WaitUntil(Millis(8_000))
        );
        assert_eq!(
            ahead.decision(PermitDecision::Granted),
            PermitDecision::Granted
        );
        // Behind: times before the budget's origin read as its origin.
        let behind = BudgetOffset::between(Millis(5_000), Millis(1_000));
        assert_eq!(behind.ask(ask).since, Millis(0));
        assert_eq!(
            behind.note(BudgetNote::RateLimited {
                target: 1,
                until: Millis(9_000)
            }),
            BudgetNote::RateLimited {
                target: 1,
                until: Millis(5_000)
            }
        );
    }
}
