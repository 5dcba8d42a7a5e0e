#![doc = include_str!("../README.md")]
// The README's code blocks are doc tests (the crate's front page on docs.rs and crates.io
// cannot rot), and no doc test may warn: an example that warns teaches the warning.
#![doc(test(attr(deny(warnings))))]
// On docs.rs (`--cfg docsrs`, Cargo.toml): each item behind a feature names the feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod budget;
pub mod config;
mod entropy;
pub mod persist;
pub mod private_file;
pub mod provider;
pub mod receiver;
pub mod runner;
pub mod session;
pub mod telemetry;
pub mod tools;

/// The HTTP client [`HttpProvider::with_client`](provider::HttpProvider::with_client) takes,
/// re-exported so that a client you build is of the version rebound was built with.
pub use reqwest;
