// Loads the package's WebAssembly once, wherever the module runs: in Node and Deno the bytes
// are read from the file beside the bindings (a file: URL, which Node's fetch cannot read),
// in browsers and edge runtimes fetched from it. Every other module imports `native` from here.

import init, * as native from "../pkg/rebound.js";

const wasmUrl = new URL("../pkg/rebound_bg.wasm", import.meta.url);

async function wasmSource() {
  if (wasmUrl.protocol !== "file:") return wasmUrl;
  if (typeof globalThis.Deno !== "undefined") return globalThis.Deno.readFile(wasmUrl);
  const { readFile } = await import("node:fs/promises");
  return readFile(wasmUrl);
}

await init({ module_or_path: await wasmSource() });

export { native };
