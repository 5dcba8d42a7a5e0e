//! # rebound-effects
//!
//! The library an agent embeds: the tokio [`runner`] that executes an
//! [`AgentMachine`](rebound_core::AgentMachine)'s commands, the [`provider`]s that speak the
//! Anthropic and OpenAI wire formats over HTTP, [`tools`], [`session`] transcripts, the
//! [`receiver`] of a run's events, the retry [`budget`] stores, and [`telemetry`]: `tracing`
//! spans named by the OpenTelemetry GenAI conventions.
//!
//! Features (only `schema` on by default, so an agent pulls only what it runs):
//!
//! | feature | what it adds |
//! |---|---|
//! | `lua` | tools defined in Lua files (`tools::lua`, Lua 5.4 built from source) |
//! | `mcp` | MCP servers as a tool source (`tools::mcp`, over stdio) |
//! | `redis` | a retry budget shared by processes through Redis (`budget::redis`) |
//! | `otel` | OpenTelemetry metrics of runs (`telemetry`), through the OpenTelemetry API |

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
