// rebound-agent: rebound's agent machine, wire helpers, simulator and replay for JavaScript
// and TypeScript (Node, Deno, browsers), one WebAssembly build of the Rust crates.

export * from "./errors.js";
export * from "./machine.js";
export * from "./wire.js";
export * from "./budget.js";
export * from "./sim.js";
