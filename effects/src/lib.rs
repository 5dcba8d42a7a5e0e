//! # rebound-effects
//!
//! The effects side of rebound: the tokio runner, HTTP providers, tools, sessions, the fake
//! provider server, and the library behind the `rebound` CLI.

#![warn(missing_docs)]

pub mod budget;
mod cli;
pub mod config;
pub mod fake;
pub mod private_file;
pub mod provider;
pub mod receiver;
pub mod runner;
pub mod session;
pub mod tools;

/// The `rebound` binary: parses the process's arguments, runs the command and returns the
/// exit code (0 finished, 1 the run failed, 2 usage or configuration error, 130 canceled).
///
/// Not API: public only for `src/main.rs`. The command line is documented by
/// `rebound --help` and the README; embedders use [`runner`] and the other modules.
#[doc(hidden)]
#[must_use]
pub fn cli_main() -> i32 {
    cli::main()
}
