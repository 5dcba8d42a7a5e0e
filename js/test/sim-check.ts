// Type-checked, never run (tsc -p js checks it; node --test runs no .ts): the simulator's
// declarations (lib/sim.d.ts) are usable as a program uses them, and refuse what they must.

import {
  ScenarioTools,
  TraceError,
  outageModels,
  outagePolicies,
  readTrace,
  replay,
  runOutage,
  simulate,
  simulateFleet,
  simulateMany,
  type OutageRun,
  type ReplayReport,
} from "../lib/index.js";

const run = simulate("demo", 1n, { machine: { retry: { max_attempts: 3 } }, max_steps: 500 });
const seed: bigint = run.seed;
const ended: string = "Ok" in run.result ? "finished" : `failed: ${run.result.Err.type}`;
const retries: number = run.tally.retries + run.retries.length;

const report: ReplayReport = replay(run.trace);
if (report.divergence !== null) {
  const line: number = report.divergence.line;
  const first = report.divergence.expected[report.divergence.command];
  console.log(line, first?.type);
}

const trace = readTrace(new TextEncoder().encode(run.trace));
for (const step of trace.steps) {
  switch (step.event.type) {
    case "provider_failed":
      console.log(step.t_ms, step.event.failure.kind);
      break;
    default:
      break;
  }
}

const stats = simulateMany("brownout", 10, "5");
const firstSeed: bigint | undefined = stats.perRun[0]?.seed;
const fleet = simulateFleet("total-outage", [{ seed: 1, startMs: 0 }, [2n, 100]], {
  budget: { capacity: 10 },
});
const denied: number | undefined = fleet.budget?.denied;

const model = outageModels()[0];
const outage: OutageRun = runOutage({ model: model.name, policy: outagePolicies()[1].name });
const gaveUp = outage.turns.filter((t) => t.completedMs === null).length;
const perTurn: number | null = outage.row.requestsPerTurn;

const tools = new ScenarioTools({ name: "tools", turns: [] });
const { durationMs, outcome } = tools.run([{ id: "toolu_1", name: "read", input: {} }]);
const calls = "per_call" in outcome ? outcome.per_call.length : 0;

try {
  replay("");
} catch (e) {
  if (e instanceof TraceError) {
    const kind: "trace" = e.kind;
    console.log(kind);
  }
}

// @ts-expect-error a model is required
runOutage({ policy: "rebound" });
// @ts-expect-error a trace is text or bytes
replay({ steps: [] });
// @ts-expect-error a seed is a number, a bigint or a string
simulate("demo", true);

console.log(seed, ended, retries, firstSeed, denied, gaveUp, perTurn, durationMs, calls);
