//! Time as the machine sees it: milliseconds on the driver's monotonic clock, always passed in.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in time, in milliseconds on a monotonic clock the driver chooses.
///
/// The machine never reads a clock: every `handle` call carries the current `Millis`, and a
/// deadline the machine wants is expressed as a delay in a [`Command::Sleep`](crate::Command).
/// The origin is the driver's choice (the run's start, the process's, a virtual clock's) and
/// the clock must never go backwards; with a shared retry budget it must be the budget's
/// clock, so that permit times agree across the machines sharing it (see
/// [`AgentMachine`](crate::AgentMachine#time)). The tokio runner uses its budget's clock (or
/// a monotonic clock started with the run), the simulator its virtual clock.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// The clock's origin (where a driver that counts from the run's start begins).
    pub const ZERO: Millis = Millis(0);

    /// This time plus `ms` milliseconds, saturating instead of overflowing.
    #[must_use]
    pub fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// Milliseconds from `earlier` to `self`, zero if `earlier` is later.
    #[must_use]
    pub fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_overflowing() {
        assert_eq!(Millis(u64::MAX).plus(5), Millis(u64::MAX));
        assert_eq!(Millis(3).since(Millis(10)), 0);
        assert_eq!(Millis(10).since(Millis(3)), 7);
    }
}
