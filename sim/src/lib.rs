//! # rebound-sim
//!
//! Virtual-clock driver, scripted providers and tools, fault scenarios, and trace record and
//! replay for [`rebound_core`]'s agent machine.
//!
//! - [`scenario`]: fault scenarios as data (JSON), with named built-ins, and the
//!   [`ScriptCursor`](scenario::ScriptCursor) that plays them request by request.
//! - [`driver`]: a discrete-event loop on a virtual clock that runs one machine
//!   ([`simulate`]) or many sharing one retry budget ([`simulate_fleet`]), in one process
//!   or, on a virtual Redis ([`redis_store`]), in Redis ([`simulate_fleet_in_redis`]).
//! - [`trace`]: JSON Lines traces, written while simulating (or by any driver) and
//!   replayed ([`replay`]) into a fresh machine, reporting the first divergence.
//! - [`stats`]: many seeded runs summarized ([`run_many`]).
//! - `fake` (feature `server`): a fault-injecting fake provider server that plays a
//!   scenario over HTTP in the real wire formats, for testing any agent.
//!
//! The outage study built on it (rebound against the retry policies of other agent stacks,
//! and its charts) is the `rebound-study` crate.
//!
//! ```
//! use rebound_sim::{run_many, simulate, Scenario, SimConfig};
//!
//! let demo = Scenario::builtin("demo").unwrap();
//! let outcome = simulate(&demo, &SimConfig::default(), 1).unwrap();
//! assert!(outcome.succeeded());
//! for (t, info) in outcome.retry_notifications() {
//!     println!("{t}: {info}");
//! }
//! println!("{}", run_many(&demo, &SimConfig::default(), 0, 100));
//! ```

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
