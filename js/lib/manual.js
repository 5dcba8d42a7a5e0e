// rebound-agent without loading its WebAssembly on import, for runtimes where the package
// cannot read or fetch its own `.wasm` (Cloudflare Workers and other edge runtimes, which
// import a `.wasm` file as a compiled `WebAssembly.Module`; bundlers that emit it elsewhere).
// Call `initRebound` (or `initReboundSync`) once before anything else:
//
//   import wasm from "rebound-agent/rebound_bg.wasm";     // a WebAssembly.Module in Workers
//   import { initRebound, AgentMachine } from "rebound-agent/manual";
//   await initRebound(wasm);

import { load, loadSync } from "./native.js";

export * from "./api.js";

/**
 * Loads the WebAssembly from `source`: a compiled `WebAssembly.Module`, its bytes, a
 * `Response`, a URL, or a promise of one. Once; later calls return at once.
 */
export function initRebound(source) {
  return load(source);
}

/** Loads the WebAssembly from a compiled `WebAssembly.Module` or its bytes, synchronously. */
export function initReboundSync(source) {
  loadSync(source);
}
