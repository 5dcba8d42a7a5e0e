//! Virtual time as the machine sees it: milliseconds since the run started, always passed in.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in time, in milliseconds since the driver started the run.
///
/// The machine never reads a clock: every `handle` call carries the current `Millis`, and a
/// deadline the machine wants is expressed as a delay in a [`Command::Sleep`](crate::Command).
/// The tokio runner derives it from a monotonic clock, the simulator from its virtual clock.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// The start of a run.
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
