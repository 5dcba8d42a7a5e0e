import type {
  BatchOutcome,
  BudgetConfig,
  Event,
  MachineConfigInput,
  Outcome,
  RunTally,
  ToolCall,
  ToolSpec,
  TraceCommand,
  TraceHeader,
  TraceStep,
} from "./types.js";

/** A built-in scenario's name (`builtinScenarios()`), a scenario's JSON text, or a scenario object. */
export type Scenario = string | { readonly [field: string]: unknown };

/** A seed: a number, a bigint (for seeds past 2^53) or a decimal string. */
export type Seed = number | bigint | string;

/** How the simulated world is set up beyond the scenario (a SimConfig in its JSON shape). */
export interface SimConfig {
  /** The machine's configuration; rebound's defaults fill what it leaves out. Its `tools` are the scenario's. */
  machine?: MachineConfigInput;
  /** Events one agent may handle before the run counts as a livelock (10,000). */
  max_steps?: number;
  /** A retry budget every agent of the run shares (machines ask it when `machine.retry_budget` is set). */
  budget?: Partial<BudgetConfig> | null;
}

/** One simulated run. */
export interface SimRun {
  seed: bigint;
  succeeded: boolean;
  /** How the run ended: `{Ok: finish_reason}` or `{Err: run_error}`. */
  result: Outcome;
  /** Provider requests sent (attempts). */
  requests: number;
  /** Virtual time from start to end. */
  durationMs: number;
  /** Each retry notice: its virtual time and the status line a person reads. */
  retries: { tMs: number; text: string }[];
  /** What the run did, counted by rebound-core as every driver's run is (virtual times). */
  tally: RunTally;
  /** The run's trace (JSON Lines): `replay` replays it. */
  trace: string;
}

/** Many seeded runs of one scenario, summed up as `rebound sim` does. */
export interface SimStats {
  scenario: string;
  runs: number;
  succeeded: number;
  successRate: number;
  /** Failed runs per error kind. */
  failures: Record<string, number>;
  /** Runs the simulator could not complete (bugs in rebound). */
  simErrors: number;
  firstSimError: string | null;
  meanRequests: number;
  p99Requests: number;
  retries: number;
  p50Ms: number;
  p99Ms: number;
  /** Each run, in seed order. */
  perRun: { seed: bigint; succeeded: boolean; requests: number; elapsedMs: number }[];
  /** The Markdown table `rebound sim` prints. */
  table: string;
}

/** One agent of a simulated fleet. */
export interface FleetRun {
  seed: bigint;
  succeeded: boolean;
  result: Outcome;
  requests: number;
  /** When it started, on the world's virtual clock. */
  startedMs: number;
  /** When it ended, on the world's virtual clock. */
  endedMs: number;
}

/** A simulated fleet: each agent's run, and what the budget they shared did. */
export interface SimFleet {
  /** In the order the agents were given. */
  runs: FleetRun[];
  /** The shared budget's stats, or null without one. */
  budget: { granted: number; denied: number; queued: number; depositedMilli: number } | null;
}

/** One agent of a fleet: its seed and when it starts. */
export type FleetAgent = { seed: Seed; startMs: number } | readonly [Seed, number];

/** The metrics of one policy in one outage model. */
export interface OutageRow {
  model: string;
  /** As the table names it, without emphasis (`rebound`, `rebound, no budget`, a peer). */
  policy: string;
  agents: number;
  /** Turns that completed. */
  completed: number;
  successRate: number;
  /** Requests sent, over all agents. */
  requests: number;
  /** Requests per completed turn (the amplification), null when none completed. */
  requestsPerTurn: number | null;
  requestsPerAgent: number;
  /** Time from an agent's start to its turn's completion, median, over completed turns. */
  p50Ms: number | null;
  p99Ms: number | null;
  /** The most requests in any one second of the model's window. */
  peakPerSec: number;
  /** The row's line of the Markdown table `rebound sim --compare` prints. */
  tableRow: string;
}

/** The outage experiment: every (outage model, policy) row. */
export interface OutageReport {
  /** The Markdown report `rebound sim --compare` prints. */
  table: string;
  rows: OutageRow[];
  /** Whether rebound met its bar (docs/outages.md). */
  met: boolean;
  /** Each rule of the bar rebound broke. */
  misses: string[];
}

/** An outage model of the experiment. */
export interface OutageModel {
  name: string;
  description: string;
  /** Whether all agents run in one process, sharing its retry budget. */
  sharedProcess: boolean;
  /** Whether rebound's agents have a healthy fallback target. */
  fallback: boolean;
  /** Where the peak rate is measured, `[from, until)` ms; null for the whole run. */
  windowMs: [number, number] | null;
  /** When the outages strike, `[from, until)` ms each (none for scripted faults). */
  outagesMs: [number, number][];
}

/** A policy the experiment compares. */
export interface OutagePolicy {
  /** As the table names it, without emphasis. */
  name: string;
  /** One of rebound's own rows. */
  rebound: boolean;
  /** Keeps a retry budget shared by every request of a process. */
  budgeted: boolean;
}

/** One agent's turn in an outage run. */
export interface AgentTurn {
  /** When the agent started, in virtual ms. */
  startMs: number;
  /** When each attempt went to the provider, in virtual ms. */
  requestsMs: number[];
  /** When the turn completed, or null when the policy gave up. */
  completedMs: number | null;
}

/** One policy in one outage model, with every agent's attempts. */
export interface OutageRun {
  /** The experiment's seed. */
  seed: bigint;
  /** Its row of `rebound sim --compare`. */
  row: OutageRow;
  /** The two lines heading the Markdown table. */
  tableHeader: string;
  /** Requests sent in each second of virtual time. */
  perSec: number[];
  /** Turns completed in each second of virtual time. */
  completedPerSec: number[];
  /** The most requests in any one second of the whole run. */
  peakPerSec: number;
  /** The agents start evenly over `[0, staggerMs)`. */
  staggerMs: number;
  turns: AgentTurn[];
}

/** The first step at which the replayed machine did something else. */
export interface Divergence {
  /** 0-based step index. */
  step: number;
  /** The trace's line (step + 2). */
  line: number;
  tMs: number;
  event: Event;
  /** 0-based index of the first differing command. */
  command: number;
  /** The recorded commands of the step. */
  expected: TraceCommand[];
  /** The commands the replayed machine produced. */
  actual: TraceCommand[];
}

/** What a replay found. */
export interface ReplayReport {
  identical: boolean;
  steps: number;
  /** Commands compared (null when it diverged). */
  commands: number | null;
  /** How the replayed run ended, if it did (null when it diverged or had not ended). */
  outcome: Outcome | null;
  elapsedMs: number;
  divergence: Divergence | null;
  /** What `rebound replay` prints for this trace. */
  text: string;
}

/** A trace, read: its header and its steps, in the trace format's JSON shape. */
export interface Trace {
  header: TraceHeader;
  steps: TraceStep[];
}

/** The names of the built-in scenarios (`demo`, `brownout`, …). */
export function builtinScenarios(): string[];
/** Runs `scenario` once with `seed` (0); throws a ConfigError for a bad scenario, config or seed. */
export function simulate(scenario: Scenario, seed?: Seed, config?: SimConfig): SimRun;
/** Runs `scenario` `runs` times (100), seeds `firstSeed` (0) on: what `rebound sim` prints. */
export function simulateMany(
  scenario: Scenario,
  runs?: number,
  firstSeed?: Seed,
  config?: SimConfig,
): SimStats;
/** Runs the agents in one world: one virtual clock and, with `config.budget`, one shared retry budget. */
export function simulateFleet(
  scenario: Scenario,
  agents: readonly FleetAgent[],
  config?: SimConfig,
): SimFleet;
/** The outage experiment (`rebound sim --compare`), `agents` (1,000) per model, seed 1. */
export function outageReport(options?: { seed?: Seed; agents?: number }): OutageReport;
/** The outage models of the experiment, in table order. */
export function outageModels(): OutageModel[];
/** The policies the experiment compares, rebound's first. */
export function outagePolicies(): OutagePolicy[];
/** One policy in one outage model, with every agent's attempts; a ConfigError for unknown names. */
export function runOutage(options: {
  model: string;
  policy?: string;
  seed?: Seed;
  agents?: number;
}): OutageRun;
/** Replays a trace (its text or bytes); throws a TraceError for one that cannot be read. */
export function replay(trace: string | Uint8Array | ArrayBuffer): ReplayReport;
/** Reads a trace (its text or bytes); throws a TraceError. */
export function readTrace(trace: string | Uint8Array | ArrayBuffer): Trace;

/** The tools a scenario scripts, for an agent tested against `rebound serve --scenario`. */
export class ScenarioTools {
  /** The tools of `scenario`; a ConfigError for a bad one. */
  constructor(scenario: Scenario);
  /** The tools' specs, for a machine config's `tools`. */
  specs(): ToolSpec[];
  /** Runs a batch of calls: its scripted duration and outcome (nothing is waited); an EventError for bad calls. */
  run(calls: readonly ToolCall[]): { durationMs: number; outcome: BatchOutcome };
}
