//! JavaScript bindings of rebound-core, rebound-sim and rebound-study, compiled to
//! WebAssembly with wasm-bindgen (the npm package `rebound-agent`, in this folder).
//!
//! The package only converts and forwards: every decision is made by the Rust crates. Values
//! cross the boundary as JSON text in the JSON shape of the trace format (one `JSON.parse`
//! on the JavaScript side is the fastest way to make a JavaScript object of it); a
//! conversation crosses as a `Snapshot`, a handle that shares the machine's copy. Bad input
//! throws a JavaScript `Error` whose `kind` names one of the typed errors of the `errors`
//! module (`lib/errors.js` makes it an instance of its class), never a panic.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod budget;
mod convert;
mod errors;
mod machine;
mod sim;
mod wire;
