// Everything the package exports, without loading the WebAssembly: `index.js` loads it first,
// `manual.js` leaves it to `initRebound`.

export * from "./errors.js";
export * from "./machine.js";
export * from "./wire.js";
export * from "./budget.js";
export * from "./sim.js";
