//! Random fault models: failures per attempt and outage windows, drawn from a seed.

use super::Fault;
use serde::{Deserialize, Serialize};

/// A random fault model: failures per attempt and outage windows, drawn from a seed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RandomFaults {
    /// Probability that an attempt outside every outage fails (0 to 1).
    pub failure_rate: f64,
    /// The faults drawn when an attempt fails, weighted (empty: always 529).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mix: Vec<WeightedFault>,
    /// Windows of virtual time in which every attempt fails.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outages: Vec<Outage>,
}

/// A fault and its weight in a [`RandomFaults`] mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedFault {
    /// Relative weight.
    pub weight: u32,
    /// The fault.
    pub fault: Fault,
}

/// Attempts sent in `[from_ms, until_ms)` fail with `fault` — every one of them, or each with
/// probability `rate` (a brownout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outage {
    /// Start of the window, in virtual ms.
    pub from_ms: u64,
    /// End of the window (exclusive), in virtual ms.
    pub until_ms: u64,
    /// Probability that an attempt in the window fails (default 1: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// The fault attempts in the window get.
    pub fault: Fault,
    /// Only attempts sent to this target of the fallback chain (0 = the primary) are hit;
    /// `None` hits every target. Models one provider or model being down while another
    /// is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<usize>,
}

impl Outage {
    /// A window in which every attempt fails with `fault`.
    #[must_use]
    pub fn total(from_ms: u64, until_ms: u64, fault: Fault) -> Self {
        Outage {
            from_ms,
            until_ms,
            rate: None,
            fault,
            target: None,
        }
    }
}
