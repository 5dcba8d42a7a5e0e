// Loads the package's WebAssembly once, wherever the module runs: in Node and Deno the bytes
// are read from the file beside the bindings (a file: URL, which Node's fetch cannot read),
// in browsers fetched from it. The package's main entry imports this first; a runtime that
// can do neither (an edge runtime importing the `.wasm` as a module) uses
// `rebound-agent/manual` and `initRebound` instead.

import { load } from "./native.js";

const wasmUrl = new URL("../pkg/rebound_bg.wasm", import.meta.url);

async function wasmSource() {
  if (wasmUrl.protocol !== "file:") return wasmUrl;
  if (typeof globalThis.Deno !== "undefined") return globalThis.Deno.readFile(wasmUrl);
  const { readFile } = await import("node:fs/promises");
  return readFile(wasmUrl);
}

await load(await wasmSource());
