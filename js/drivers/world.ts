// The JavaScript binding as one of the drivers of tests/tests/drivers.rs: plays one scripted
// world of tests/worlds.json with the example agent's loop (examples/agent.ts: fetch,
// ReadableStream) against the fake server the Rust test started, the world's scripted tools
// run by rebound (ScenarioTools), the machine configured and seeded as the world says.
// Writes the run's trace and prints one JSON line: `{"tally": {...}}`, or `{"failed": kind}`.
//
//   node dist/driver/drivers/world.js WORLD.json BASE_URL TRACE.jsonl

import { readFileSync, writeFileSync } from "node:fs";
import { Agent } from "../examples/agent.js";
import { ScenarioTools } from "rebound-agent";
import type { Event, MachineConfigInput, ToolCall } from "rebound-agent";

/** One world as tests/tests/drivers.rs writes it for the bindings. */
interface World {
  scenario: string | { readonly [field: string]: unknown };
  user_message: string;
  machine: MachineConfigInput;
  machine_seed: number;
}

/** The example agent, its tools the world's scripted ones. */
class WorldAgent extends Agent {
  readonly #scenarioTools: ScenarioTools;

  constructor(baseUrl: string, world: World, tools: ScenarioTools) {
    super({
      baseUrl,
      provider: "anthropic",
      apiKey: "test-key",
      seed: world.machine_seed,
      say: () => {},
      record: true,
      config: { ...world.machine, tools: tools.specs() },
    });
    this.#scenarioTools = tools;
  }

  /** The scripted outcome, its duration not waited (the Rust drivers do not wait it). */
  override async runTools(batch: number, calls: ToolCall[]): Promise<Event> {
    const { outcome } = this.#scenarioTools.run(calls);
    return { type: "tools_finished", batch, outcome };
  }
}

async function main(): Promise<number> {
  const [worldFile, baseUrl, tracePath] = process.argv.slice(2);
  if (worldFile === undefined || baseUrl === undefined || tracePath === undefined) {
    process.stderr.write("usage: world.js WORLD.json BASE_URL TRACE.jsonl\n");
    return 2;
  }
  const world = JSON.parse(readFileSync(worldFile, "utf8")) as World;
  const agent = new WorldAgent(baseUrl, world, new ScenarioTools(world.scenario));
  const code = await agent.run(world.user_message);
  writeFileSync(tracePath, agent.machine.traceJsonl());
  if (code !== 0) {
    // As core's RunError::kind names it: the provider failure's kind, else the error's type.
    const outcome = agent.machine.outcome();
    const error = outcome !== undefined && "Err" in outcome ? outcome.Err : undefined;
    const kind =
      error === undefined ? "unknown" : error.type === "provider" ? error.failure.kind : error.type;
    process.stdout.write(JSON.stringify({ failed: kind }) + "\n");
    return 0;
  }
  const t = agent.machine.tally();
  const tally = {
    requests: t.requests,
    retries: t.retries,
    retry_wait_ms: t.retry_wait_ms,
    compactions: t.compactions,
    fallbacks: t.fallbacks,
    tool_calls: t.tool_calls,
    tool_errors: t.tool_errors,
    stream_resets: t.stream_resets,
  };
  process.stdout.write(JSON.stringify({ tally }) + "\n");
  return 0;
}

process.exitCode = await main();
