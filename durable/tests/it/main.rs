//! rebound-durable's integration tests, one module per file, in one test binary (one link of
//! Restate's SDK and the runner, one parallel pool): `cargo test -p rebound-durable --test it
//! crash` runs one module. Each test starts its own `restate-server` (`support/restate.rs`).

#[path = "../support/restate.rs"]
mod restate;

mod cancel;
mod crash;
mod secrets;
mod telemetry;
