//! rebound-cli's integration tests, one module per file, in one test binary: Cargo links each
//! `tests/*.rs` as a binary of its own against the whole dependency graph (every feature of
//! the libraries, the OpenTelemetry SDK, Restate's SDK...), so one binary links once and runs
//! every test in one parallel pool, where the tests that wait on the `rebound` processes they
//! start overlap. `cargo test -p rebound-cli --test it redis_fleet` runs one module.
//!
//! The helpers the modules share are declared here, once (`restate` starts a Restate server
//! for `durable` and `telemetry`): `table` keeps docs/robustness.md
//! under one lock for the whole binary (with `REBOUND_UPDATE_ROBUSTNESS` two modules may rewrite
//! it at the same time).

#[path = "../../../durable/tests/support/restate.rs"]
mod restate;
#[path = "../../../effects/tests/hostile_support/server.rs"]
mod server;
#[path = "../../../effects/tests/hostile_support/table.rs"]
mod table;

mod cli;
mod crash_safety;
mod durable;
mod hostile_session;
mod mcp_source;
#[cfg(unix)]
mod private_files;
mod redis_fleet;
mod secrets;
mod serve;
mod telemetry;
