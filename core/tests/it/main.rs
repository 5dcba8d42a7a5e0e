//! rebound-core's integration tests, one module per file, in one test binary: Cargo links
//! each `tests/*.rs` as a binary of its own against the whole dependency graph, so one binary
//! links once (a mutant of core rebuilds two test binaries, not twelve) and runs every test in
//! one parallel pool. `cargo test -p rebound-core --test it budget_recovery` runs one module.
//!
//! proptest keeps the shrunk failures of a module `it/x.rs` in `tests/proptest-regressions/x.txt`
//! (the place it derives for a module of a test crate) and replays them first.

mod budget_properties;
mod budget_recovery;
mod classify_fixtures;
mod classify_never_panics;
mod config_readers;
mod error_body_shapes;
#[cfg(feature = "server")]
mod eventstream;
mod hint_dates;
#[cfg(feature = "server")]
mod hostile_stream;
mod one_awaited_command;
mod request_conformance;
mod request_options;
mod secrets;
mod server_hints;
mod shared_budget_client;

/// Without the `server` feature (the stream encoders) `hostile_stream` is not built: said in
/// the test list rather than passed over in silence.
#[cfg(not(feature = "server"))]
#[test]
#[ignore = "hostile_stream needs `--features server`"]
fn hostile_stream_needs_the_server_feature() {}

/// Without the `server` feature (the frame encoder) `eventstream` is not built.
#[cfg(not(feature = "server"))]
#[test]
#[ignore = "eventstream needs `--features server`"]
fn eventstream_needs_the_server_feature() {}
