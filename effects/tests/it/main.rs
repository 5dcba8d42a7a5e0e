//! rebound-effects' integration tests, one module per file, in one test binary: Cargo links
//! each `tests/*.rs` as a binary of its own against the whole dependency graph (tokio, reqwest,
//! the OpenTelemetry SDK, the fake provider server...), so one binary links once and runs every
//! test in one parallel pool. `cargo test -p rebound-effects --test it session` runs one module.
//!
//! The helpers the modules share are declared here, once: `table` keeps docs/robustness.md
//! under one lock for the whole binary (with `REBOUND_UPDATE_ROBUSTNESS` two modules may rewrite
//! it at the same time).

#[path = "../hostile_support/server.rs"]
mod server;
#[path = "../support/shared_buf.rs"]
mod shared_buf;
#[path = "../hostile_support/table.rs"]
mod table;

#[cfg(feature = "bedrock")]
mod aws_sigv4;
mod hostile_fuzz_corpus;
mod hostile_model;
mod hostile_provider;
#[cfg(all(feature = "lua", feature = "schema"))]
mod lua_tools;
#[cfg(feature = "otel")]
mod otlp_example;
mod provider_config;
mod reasoning_owner;
#[cfg(feature = "redis")]
mod redis_budget;
mod request_openapi;
mod runner_budget;
mod runner_outcomes;
mod runner_responding;
mod runner_seed;
mod secrets;
mod session;
mod telemetry;
mod tool_ids;
mod tool_media;
mod tools_files;
#[cfg(feature = "schema")]
mod tools_set;

/// The modules a feature gates, when it is off: said in the test list rather than passed over
/// in silence (`cargo test --workspace` turns every feature on).
#[cfg(not(feature = "bedrock"))]
#[test]
#[ignore = "aws_sigv4 needs `--features bedrock`"]
fn aws_sigv4_needs_the_bedrock_feature() {}

#[cfg(not(all(feature = "lua", feature = "schema")))]
#[test]
#[ignore = "lua_tools needs `--features lua,schema`"]
fn lua_tools_needs_the_lua_and_schema_features() {}

#[cfg(not(feature = "otel"))]
#[test]
#[ignore = "otlp_example needs `--features otel`"]
fn otlp_example_needs_the_otel_feature() {}

#[cfg(not(feature = "redis"))]
#[test]
#[ignore = "redis_budget needs `--features redis`"]
fn redis_budget_needs_the_redis_feature() {}

#[cfg(not(feature = "schema"))]
#[test]
#[ignore = "tools_set needs the `schema` feature (a default one)"]
fn tools_set_needs_the_schema_feature() {}
