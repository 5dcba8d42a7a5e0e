//! The durable run's clock: the machine's time, rebuilt the same on every replay.
//!
//! A run's time starts at a journaled wall-clock reading and moves only with journaled facts:
//! the wall-clock time each journaled step finished at, and the delay of each durable timer.
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
    /// Unix milliseconds when the run started (journaled).
    started_unix_ms: u64,
    now: Millis,
}

impl RunClock {
    /// A clock at 0, counting from `started_unix_ms`.
    pub(crate) fn new(started_unix_ms: u64) -> Self {
        RunClock {
            started_unix_ms,
            now: Millis(0),
        }
    }

    /// The machine's time now.
    pub(crate) fn now(&self) -> Millis {
        self.now
    }

    /// A journaled step finished at `unix_ms`. Never goes back: a step journaled by a
    /// process whose clock is behind (a restart on another host) keeps the time where it is.
    pub(crate) fn finished_at(&mut self, unix_ms: u64) {
        let at = Millis(unix_ms.saturating_sub(self.started_unix_ms));
        self.now = self.now.max(at);
    }

    /// A durable timer of `delay_ms` fired: the time it was set for.
    pub(crate) fn slept(&mut self, delay_ms: u64) {
        self.now = self.now.plus(delay_ms);
    }

    /// The machine's time of a wall-clock reading taken now (inside a step).
    pub(crate) fn machine_time_of(&self, unix_ms: u64) -> Millis {
        Millis(unix_ms.saturating_sub(self.started_unix_ms)).max(self.now)
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
