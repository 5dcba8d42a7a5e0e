//! # rebound-study
//!
//! The outage study: rebound's [`AgentMachine`](rebound_core::AgentMachine), driven by
//! [`rebound_sim`]'s virtual-clock simulator, against models of the retry policies and retry
//! budgets of other agent stacks, on the same seeded outages.
//!
//! - [`compare`]: the outage models, the peers and the deployed budgets modelled from their
//!   sources, the comparison table with its bar ([`compare::run_experiment`]), the timelines
//!   behind the charts, and the outage-length sweep ([`compare::run_length_sweep`]).
//! - `charts` (feature `charts`, on by default): SVG charts of the comparison and of many
//!   runs of one scenario ([`rebound_sim::run_many`]).
//!
//! ```
//! use rebound_study::compare::{run_experiment, ExperimentConfig};
//!
//! let config = ExperimentConfig::default().with_agents(20);
//! let report = run_experiment(&config).unwrap();
//! assert_eq!(report.rows.len(), config.models.len() * config.policies.len());
//! ```

#![forbid(unsafe_code)]
// On docs.rs (`--cfg docsrs`, Cargo.toml): each item behind a feature names the feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

#[cfg(feature = "charts")]
pub mod charts;
pub mod compare;
