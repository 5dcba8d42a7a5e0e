// rebound-agent without loading its WebAssembly on import: everything the main entry has,
// and `initRebound` to call once first.

export * from "./index.js";

/** What the WebAssembly can be loaded from. */
export type WasmSource =
  | WebAssembly.Module
  | BufferSource
  | Response
  | URL
  | string
  | Promise<WebAssembly.Module | BufferSource | Response>;

/**
 * Loads the WebAssembly from `source` (a compiled `WebAssembly.Module`, as edge runtimes
 * import a `.wasm`; its bytes; a `Response`; a URL): once, before anything else of the
 * package is used. Later calls return at once.
 */
export function initRebound(source: WasmSource): Promise<void>;

/** Loads the WebAssembly from a compiled `WebAssembly.Module` or its bytes, synchronously. */
export function initReboundSync(source: WebAssembly.Module | BufferSource): void;
