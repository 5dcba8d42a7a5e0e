// The WebAssembly's bindings (wasm-bindgen's module) and whether they are loaded. Every module
// of the package calls the native side through `native`; nothing here loads anything:
// `load.js` does for the package's main entry, `manual.js`'s `initRebound` for runtimes that
// hand the module over themselves (edge runtimes that import a `.wasm` as a module).

import init, { initSync } from "../pkg/rebound.js";
import * as native from "../pkg/rebound.js";

let loaded = false;

/** Whether the WebAssembly is loaded (by either entry). */
export function isLoaded() {
  return loaded;
}

/** Loads the WebAssembly from `source` (anything wasm-bindgen's init takes); once. */
export async function load(source) {
  await init({ module_or_path: source });
  loaded = true;
}

/** Loads the WebAssembly from a compiled `WebAssembly.Module` or its bytes, synchronously. */
export function loadSync(source) {
  initSync({ module: source });
  loaded = true;
}

export { native };
