// rebound-agent: rebound's agent machine, wire helpers, simulator and replay for JavaScript
// and TypeScript (Node, Deno, browsers), one WebAssembly build of the Rust crates. Importing
// it loads the WebAssembly (top-level await); `rebound-agent/manual` does not.

import "./load.js";

export * from "./api.js";
