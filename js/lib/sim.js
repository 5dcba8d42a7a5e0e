// The simulator, the outage study and trace replay for JavaScript: rebound-sim and
// rebound-study in WebAssembly. Everything runs in Rust; these wrappers only check the
// arguments' types, parse the results and give them names (see sim.d.ts for each shape).
//
// - `simulate` runs a scenario (a built-in name, its JSON text or an object) once in virtual
//   time; `simulateMany` runs it for many seeds and returns the statistics `rebound sim`
//   prints; `simulateFleet` runs many agents in one world, sharing one retry budget.
// - `outageReport` runs the outage experiment (`rebound sim --compare`); `outageModels`,
//   `outagePolicies` and `runOutage` run one policy in one of its outage models, with every
//   agent's attempts (what the outage playground draws).
// - `ScenarioTools` runs a scenario's scripted tools, for an agent tested against
//   `rebound serve --scenario`.
// - `replay` replays a trace (recorded by the CLI, the runner, the simulator or an
//   `AgentMachine({record: true})`) and reports the first divergence as `rebound replay`
//   prints it; `readTrace` reads one into its header and steps.

import { native } from "./native.js";
import { call, ConfigError, EventError, json, TraceError } from "./errors.js";

/** A scenario argument as the native side takes it: a built-in name or JSON text. */
function scenarioText(scenario) {
  if (typeof scenario === "string") return scenario;
  if (scenario !== null && typeof scenario === "object") {
    return json(scenario, "scenario", ConfigError);
  }
  throw new ConfigError(
    `a scenario is a built-in name, a scenario object or its JSON text, not ${typeof scenario}`,
  );
}

/** A SimConfig argument as JSON text, or undefined for the defaults. */
function configText(config) {
  if (config === undefined || config === null) return undefined;
  if (typeof config !== "object") {
    throw new ConfigError(`a simulator config is an object, not ${typeof config}`);
  }
  return json(config, "simulator config", ConfigError);
}

/** A seed as the native side takes it: a number, a bigint or a decimal string. */
function seedArg(seed, what = "seed") {
  if (seed === undefined || seed === null) return undefined;
  if (typeof seed === "number" || typeof seed === "bigint" || typeof seed === "string") {
    return seed;
  }
  throw new ConfigError(`${what} must be a number, a bigint or a decimal string`);
}

/** A count as the native side takes it: a number (the native side checks its range). */
function countArg(value, what) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number") {
    throw new ConfigError(`${what} must be a whole number, not ${typeof value}`);
  }
  return value;
}

/** The text of a trace: a string, or its UTF-8 bytes. */
function traceText(trace) {
  if (typeof trace === "string") return trace;
  if (trace instanceof Uint8Array || trace instanceof ArrayBuffer) {
    try {
      return new TextDecoder("utf-8", { fatal: true }).decode(trace);
    } catch (e) {
      throw new TraceError(`the trace is not UTF-8: ${e.message}`);
    }
  }
  throw new TraceError(
    `a trace is its JSON Lines text (a string or its bytes), not ${
      trace === null ? "null" : typeof trace
    }; in Node, read the file first (fs.readFileSync(path, "utf8"))`,
  );
}

/** `value` parsed, with the seeds the native side wrote as decimal strings made bigints. */
function parsed(text) {
  return JSON.parse(text, (key, value) =>
    key === "seed" && typeof value === "string" ? BigInt(value) : value,
  );
}

/** The names of the built-in scenarios (`demo`, `brownout`, …). */
export function builtinScenarios() {
  return native.builtinScenarios();
}

/**
 * Runs `scenario` once with `seed` (0) in virtual time. `config` is a SimConfig in its JSON
 * shape (`{machine, max_steps, budget}`). Throws a ConfigError for an unknown or bad
 * scenario, config or seed, a ReboundError if the machine livelocks (a bug, with the seed).
 */
export function simulate(scenario, seed = 0, config = undefined) {
  return parsed(
    call(() => native.simulate(scenarioText(scenario), seedArg(seed), configText(config))),
  );
}

/**
 * Runs `scenario` `runs` times (100), seeds `firstSeed` (0) to `firstSeed + runs - 1`: the
 * statistics `rebound sim --scenario … --runs … --seed …` prints (`table` is its output).
 */
export function simulateMany(scenario, runs = 100, firstSeed = 0, config = undefined) {
  return parsed(
    call(() =>
      native.simulateMany(
        scenarioText(scenario),
        countArg(runs, "runs") ?? 100,
        seedArg(firstSeed, "firstSeed"),
        configText(config),
      ),
    ),
  );
}

/**
 * Runs one agent per `{seed, startMs}` (or `[seed, startMs]`) of `agents` in one world: one
 * virtual clock and, when `config.budget` is set (a BudgetConfig), one retry budget they all
 * share (a machine asks it only when `config.machine.retry_budget` is set).
 */
export function simulateFleet(scenario, agents, config = undefined) {
  if (!Array.isArray(agents)) {
    throw new ConfigError("agents must be an array of {seed, startMs} (or [seed, startMs])");
  }
  const seeds = [];
  const starts = [];
  for (const agent of agents) {
    const [seed, startMs] = Array.isArray(agent)
      ? agent
      : agent !== null && typeof agent === "object"
        ? [agent.seed, agent.startMs]
        : [];
    if (seed === undefined || startMs === undefined) {
      throw new ConfigError("each agent is {seed, startMs} or [seed, startMs]");
    }
    seeds.push(seedArg(seed));
    starts.push(countArg(startMs, "an agent's startMs"));
  }
  return parsed(
    call(() => native.simulateFleet(scenarioText(scenario), seeds, starts, configText(config))),
  );
}

/**
 * The outage experiment (`rebound sim --compare`): rebound against the modelled retry
 * policies of other agent stacks, `agents` agents per outage model, experiment seed `seed`
 * (without them the study's `ExperimentConfig::default()`'s: 1,000 agents, seed 1, the tables
 * of docs/outages.md). With the defaults it takes a while.
 */
export function outageReport({ seed, agents } = {}) {
  return parsed(
    call(() => native.outageReport(seedArg(seed), countArg(agents, "agents"))),
  );
}

/** The outage models of the experiment, in table order. */
export function outageModels() {
  return JSON.parse(call(() => native.outageModels()));
}

/** The policies the experiment compares, rebound's first, then the modelled peers. */
export function outagePolicies() {
  return JSON.parse(call(() => native.outagePolicies()));
}

/**
 * One policy (`rebound` by default, or a name of `outagePolicies()`) in one outage model (a
 * name of `outageModels()`), `agents` agents, experiment seed `seed` (the study's defaults
 * without them: 1,000 agents, seed 1): its row of `rebound sim --compare --seed …`, its
 * requests per second and every agent's attempts. Throws a ConfigError for an unknown model
 * or policy.
 */
export function runOutage({ model, policy = "rebound", seed, agents } = {}) {
  if (typeof model !== "string") throw new ConfigError("model must be a name of outageModels()");
  if (typeof policy !== "string") {
    throw new ConfigError("policy must be a name of outagePolicies()");
  }
  return parsed(
    call(() => native.runOutage(model, policy, seedArg(seed), countArg(agents, "agents"))),
  );
}

/**
 * Replays a trace (its JSON Lines text, or its bytes) into a fresh machine and compares every
 * step's commands with the recorded ones. Throws a TraceError for a trace that cannot be read
 * (empty, another format or version, a bad or cut line).
 */
export function replay(trace) {
  return JSON.parse(call(() => native.replay(traceText(trace))));
}

/** Reads a trace (its text, or its bytes) into its header and steps; throws a TraceError. */
export function readTrace(trace) {
  return JSON.parse(call(() => native.readTrace(traceText(trace))));
}

/**
 * The tools a scenario scripts, for an agent tested against `rebound serve --scenario`:
 * `specs()` for the machine config's `tools`, `run(calls)` → `{durationMs, outcome}` for a
 * `run_tools` command (`{type: "tools_finished", batch, outcome}` answers it).
 */
export class ScenarioTools {
  #native;

  /** The tools of `scenario` (a built-in name, its JSON text or an object). */
  constructor(scenario) {
    this.#native = call(() => new native.ScenarioTools(scenarioText(scenario)));
  }

  /** The tools' specs (`name`, `description`, `input_schema`). */
  specs() {
    return JSON.parse(call(() => this.#native.specsJson()));
  }

  /**
   * Runs a batch of calls (a `run_tools` command's `calls`): the batch's scripted duration
   * and its outcome. Nothing is waited. Throws an EventError for calls that are not
   * `{id, name, input}`.
   */
  run(calls) {
    return JSON.parse(call(() => this.#native.run(json(calls, "tool calls", EventError))));
  }
}
