//! # rebound-effects
//!
//! The effects side of rebound: the tokio runner, HTTP providers, tools, sessions, the fake
//! provider server, and the library behind the `rebound` CLI.

#![warn(missing_docs)]

pub mod budget;
pub mod cli;
pub mod config;
pub mod fake;
pub mod private_file;
pub mod provider;
pub mod receiver;
pub mod runner;
pub mod session;
pub mod tools;
