// rebound-agent's types: every value crosses in the JSON shape of rebound's trace format.

export * from "./types.js";
export * from "./errors.js";
export * from "./machine.js";
export * from "./wire.js";
export * from "./budget.js";
export * from "./sim.js";
