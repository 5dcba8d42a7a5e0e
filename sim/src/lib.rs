#![doc = include_str!("../README.md")]
// The README's code blocks are doc tests (the crate's front page on docs.rs and crates.io
// cannot rot), and no doc test may warn: an example that warns teaches the warning.
#![doc(test(attr(deny(warnings))))]
#![forbid(unsafe_code)]
// On docs.rs (`--cfg docsrs`, Cargo.toml): each item behind a feature names the feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod driver;
#[cfg(feature = "server")]
pub mod fake;
mod record;
pub mod redis_store;
pub mod scenario;
pub mod scripted;
pub mod stats;
pub mod trace;

pub use driver::{
    simulate, simulate_fleet, simulate_fleet_in_redis, simulate_fleet_with, FleetAgent, SimConfig,
    SimError, SimOutcome, SimStep,
};
pub use scenario::{Scenario, ScenarioError};
pub use scripted::ScriptedTools;
pub use stats::{run_many, RunSummary, Stats};
pub use trace::{replay, Divergence, ReplayError, ReplayReport, Trace, TraceError, TraceWriter};
