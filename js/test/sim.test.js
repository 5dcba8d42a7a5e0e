// The simulator, the outage study and trace replay from JavaScript, against the rebound CLI
// ($REBOUND_BIN, else target/debug/rebound): what the package computes is what the CLI
// prints, and a trace the CLI wrote replays in JavaScript to the CLI's outcome.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  AgentMachine,
  ConfigError,
  EventError,
  ReboundError,
  ScenarioTools,
  TraceError,
  builtinScenarios,
  describe,
  outageModels,
  outagePolicies,
  outageReport,
  readTrace,
  replay,
  runOutage,
  simulate,
  simulateFleet,
  simulateMany,
  userText,
} from "../lib/index.js";
import { cells, cli, compareRow, compareTable, reboundBin, serve } from "./sim-cli.js";

const dir = mkdtempSync(join(tmpdir(), "rebound-js-sim-"));
let files = 0;
function tempFile(name, text) {
  const path = join(dir, `${files++}-${name}`);
  if (text !== undefined) writeFileSync(path, text);
  return path;
}

/** `rebound replay <path>`: its exit code and what it printed. */
function cliReplay(path) {
  const ran = cli(["replay", path]);
  return { status: ran.status, stdout: ran.stdout.trim(), stderr: ran.stderr };
}

test("the CLI this suite checks against is built", () => {
  reboundBin(); // throws, saying how to build it, when it is missing
});

for (const scenario of ["demo", "brownout", "stream-cuts", "overflow", "tool-errors"]) {
  test(`a simulated ${scenario} run replays identically`, () => {
    const run = simulate(scenario, 11);
    assert.equal(run.seed, 11n);
    const report = replay(run.trace);
    assert.ok(report.identical, report.text);
    assert.equal(report.divergence, null);
    assert.equal(report.steps, run.trace.trimEnd().split("\n").length - 1);
    assert.deepEqual(report.outcome, run.result);
    assert.equal(
      report.text,
      `replayed ${report.steps} steps and ${report.commands} commands identically`,
    );
    assert.equal(run.requests, run.tally.requests);
  });
}

test("a run is a pure function of its seed", () => {
  assert.deepEqual(simulate("brownout", 4), simulate("brownout", 4));
  const other = [5, 6, 7, 8, 9].map((s) => simulate("brownout", s).trace);
  assert.ok(other.some((t) => t !== simulate("brownout", 4).trace));
  // A seed past 2^53 crosses exactly, as a bigint or a decimal string.
  const big = 2n ** 63n + 5n;
  assert.equal(simulate("blip", big).seed, big);
  assert.deepEqual(simulate("blip", big), simulate("blip", String(big)));
});

test("many runs give the table rebound sim prints", () => {
  const stats = simulateMany("brownout", 40, 100);
  assert.equal(stats.runs, 40);
  assert.deepEqual(
    stats.perRun.map((r) => r.seed),
    Array.from({ length: 40 }, (_, i) => BigInt(100 + i)),
  );
  assert.equal(stats.succeeded, stats.perRun.filter((r) => r.succeeded).length);
  const failed = Object.values(stats.failures).reduce((a, b) => a + b, 0);
  assert.equal(stats.succeeded + failed + stats.simErrors, 40);
  const ran = cli(["sim", "--scenario", "brownout", "--runs", "40", "--seed", "100"]);
  assert.equal(ran.status, 0, ran.stderr);
  assert.equal(ran.stdout.trim(), stats.table);
});

test("one simulated run is the run rebound sim makes and writes as its trace", () => {
  for (const [scenario, seed] of [
    ["demo", 3],
    ["rate-limit-window", 3],
    ["total-outage", 1],
    ["overflow", 8],
  ]) {
    const path = tempFile(`${scenario}.jsonl`);
    const ran = cli([
      "sim", "--scenario", scenario, "--seed", String(seed), "--runs", "1", "--trace-out", path,
    ]);
    assert.equal(ran.status, 0, ran.stderr);
    const run = simulate(scenario, seed);
    // The CLI's statistics of that one run, and its trace, are the package's.
    assert.equal(ran.stdout.trim(), simulateMany(scenario, 1, seed).table);
    const [, runs, success] = cells(ran.stdout.trim().split("\n")[2]);
    assert.equal(runs, "1");
    assert.equal(success.startsWith("100") , run.succeeded, `${scenario}: ${success}`);
    const written = readFileSync(path, "utf8");
    assert.equal(written, run.trace, `${scenario}: the CLI's trace is the package's`);
    // Replayed in JavaScript it ends as the CLI's run did, and `rebound replay` agrees.
    const report = replay(written);
    assert.ok(report.identical, report.text);
    assert.deepEqual(report.outcome, run.result);
    const { status, stdout } = cliReplay(path);
    assert.equal(status, 0);
    assert.equal(stdout, report.text);
  }
});

/** `rebound run --events json --trace <path>` against `url` (seed 9): its exit code and events. */
async function cliRun(url, path) {
  const { execFile } = await import("node:child_process");
  const ran = await new Promise((resolve, reject) =>
    execFile(
      reboundBin(),
      [
        "run", "--base-url", url, "--model", "claude-sonnet-4-5", "--seed", "9",
        "--events", "json", "--trace", path, "Fix the failing test.",
      ],
      {
        env: { ...process.env, ANTHROPIC_API_KEY: "test-key-not-secret" },
        timeout: 120_000,
        encoding: "utf8",
      },
      (error, stdout, stderr) =>
        error && typeof error.code !== "number"
          ? reject(error)
          : resolve({ status: error ? error.code : 0, stdout, stderr }),
    ),
  );
  const events = ran.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
  return { ...ran, events, last: events.at(-1) };
}

test("a trace rebound run wrote against rebound serve replays to the CLI's outcome", async (t) => {
  const server = await serve(["--scenario", "demo", "--seed", "2"]);
  t.after(() => server.stop());
  const path = tempFile("run.jsonl");
  const ran = await cliRun(server.url, path);
  assert.equal(ran.status, 0, ran.stderr);
  const done = ran.last;
  assert.equal(done.type, "done", ran.stdout);

  const text = readFileSync(path, "utf8");
  assert.ok(!text.includes("test-key-not-secret"), "the key is in no trace");
  const report = replay(text);
  assert.ok(report.identical, report.text);
  assert.ok(report.steps > 5);
  // The outcome of the replayed run is the CLI's: how it finished, after as many requests
  // as the CLI counted.
  assert.deepEqual(Object.keys(report.outcome), ["Ok"]);
  const trace = readTrace(text);
  assert.equal(trace.header.seed, 9);
  const commands = trace.steps.flatMap((s) => s.commands);
  assert.equal(commands.filter((c) => c.type === "send_request").length, done.requests);
  const finish = commands.find((c) => c.type === "finish");
  assert.deepEqual({ Ok: finish.reason }, report.outcome);
  assert.equal(
    describeReason(finish.reason),
    done.stop_reason,
    `the run finished as the CLI said (${JSON.stringify(finish.reason)})`,
  );
  const kinds = new Set(trace.steps.map((s) => s.event.type));
  for (const kind of ["user_message", "provider_failed", "timer_fired", "provider_succeeded"]) {
    assert.ok(kinds.has(kind), `${kind} in ${[...kinds]}`);
  }
  const { status, stdout } = cliReplay(path);
  assert.equal(status, 0);
  assert.equal(stdout, report.text);
});

test("a trace of a run the CLI failed replays to the CLI's error", async (t) => {
  // One 529 (retried), then a 400 the machine does not retry: the run fails.
  const scenario = tempFile(
    "refused.json",
    JSON.stringify({
      name: "refused",
      turns: [
        {
          faults: [
            { type: "http", status: 529 },
            { type: "http", status: 400 },
          ],
          answer: { text: "Done." },
        },
      ],
    }),
  );
  const server = await serve(["--scenario", scenario]);
  t.after(() => server.stop());
  const path = tempFile("refused.jsonl");
  const ran = await cliRun(server.url, path);
  assert.equal(ran.status, 1, ran.stderr);
  const failed = ran.last;
  assert.equal(failed.type, "error", ran.stdout);

  const text = readFileSync(path, "utf8");
  const report = replay(text);
  assert.ok(report.identical, report.text);
  assert.deepEqual(Object.keys(report.outcome), ["Err"]);
  // The error the replayed run ends with is the one the CLI printed, word for word.
  assert.equal(describe("run_error", report.outcome.Err), failed.message);
  assert.equal(report.outcome.Err.failure.status, failed.status);
  const sent = readTrace(text)
    .steps.flatMap((s) => s.commands)
    .filter((c) => c.type === "send_request").length;
  assert.equal(sent, failed.requests);
  const { status, stdout } = cliReplay(path);
  assert.equal(status, 0);
  assert.equal(stdout, report.text);
});

/** A finish reason as the CLI's `done` event writes it (`end_turn`, `max_turns`, …). */
function describeReason(reason) {
  if (typeof reason === "string") return reason;
  if (reason && typeof reason === "object" && "model" in reason) return reason.model;
  return JSON.stringify(reason);
}

test("a divergence is reported as rebound replay reports it", () => {
  const lines = simulate("demo", 3).trace.trimEnd().split("\n");
  const step = lines.slice(1).findIndex((l) => l.includes('"type":"sleep"'));
  assert.ok(step >= 0);
  const record = JSON.parse(lines[step + 1]);
  for (const c of record.commands) if (c.type === "sleep") c.delay_ms += 1;
  lines[step + 1] = JSON.stringify(record);
  const text = `${lines.join("\n")}\n`;
  const report = replay(text);
  assert.equal(report.identical, false);
  const d = report.divergence;
  assert.deepEqual([d.step, d.line], [step, step + 2]);
  assert.equal(d.expected[d.command].delay_ms, d.actual[d.command].delay_ms + 1);
  assert.equal(report.outcome, null);
  const { status, stdout } = cliReplay(tempFile("altered.jsonl", text));
  assert.equal(status, 1);
  assert.equal(report.text.trim(), stdout);
});

test("a trace recorded by an AgentMachine in JavaScript replays in the CLI", () => {
  const m = new AgentMachine({ seed: 21, record: true });
  let now = 0;
  let attempts = 0;
  m.handle(now, userText("hi"));
  for (let a = m.poll(); a; a = m.poll()) {
    if (a.type === "send_request") {
      attempts += 1;
      now += 50;
      m.handle(
        now,
        attempts < 3
          ? {
              type: "provider_failed",
              request: a.request,
              failure: { kind: "unavailable", message: "overloaded", status: 529 },
            }
          : {
              type: "provider_succeeded",
              request: a.request,
              response: {
                message: { role: "assistant", content: [{ type: "text", text: "Done." }] },
                stop_reason: "end_turn",
              },
            },
      );
    } else if (a.type === "sleep") {
      now += a.delay_ms;
      m.handle(now, { type: "timer_fired", timer: a.timer });
    }
  }
  assert.ok(m.isTerminal);
  const text = m.traceJsonl();
  const report = replay(text);
  assert.ok(report.identical, report.text);
  assert.deepEqual(report.outcome, m.outcome());
  const { status, stdout } = cliReplay(tempFile("js.jsonl", text));
  assert.equal(status, 0, stdout);
  assert.equal(stdout, report.text);
});

test("a trace's bytes replay as its text does", () => {
  const text = simulate("blip", 1).trace;
  const bytes = new TextEncoder().encode(text);
  assert.deepEqual(replay(bytes), replay(text));
  assert.deepEqual(readTrace(bytes.buffer), readTrace(text));
  const steps = readTrace(text).steps;
  assert.equal(steps.length, text.trimEnd().split("\n").length - 1);
  const raw = text.trimEnd().split("\n").slice(1).map((l) => JSON.parse(l));
  assert.deepEqual(steps.map((s) => s.event), raw.map((r) => r.event));
  assert.deepEqual(steps.map((s) => s.commands), raw.map((r) => r.commands));
  assert.deepEqual(steps.map((s) => s.t_ms), raw.map((r) => r.t_ms));
});

test("a trace that cannot be read is a TraceError, as rebound replay refuses it", () => {
  const lines = simulate("demo").trace.trimEnd().split("\n");
  lines[2] = "{not json";
  const corrupt = {
    empty: ["", /empty/],
    "another format": ['{"format":"other-trace","version":1}\n', /not a rebound trace/],
    "another version": ['{"format":"rebound-trace","version":99}\n', /version 99/],
    "a bad line": [`${lines.join("\n")}\n`, /line 3/],
    "not JSON at all": ["hello\n", /./],
  };
  for (const [what, [text, message]] of Object.entries(corrupt)) {
    assert.throws(
      () => replay(text),
      (e) => e instanceof TraceError && e.kind === "trace" && message.test(e.message),
      what,
    );
    assert.throws(() => readTrace(text), TraceError, what);
    if (text !== "") {
      const { status } = cliReplay(tempFile("corrupt.jsonl", text));
      assert.equal(status, 2, `rebound replay refuses ${what} too`);
    }
  }
  assert.throws(() => replay(new Uint8Array([0x7b, 0xff, 0xfe])), TraceError);
  assert.throws(() => replay(undefined), TraceError);
  assert.throws(() => replay(42), TraceError);
});

test("a bad scenario, config or number is a ConfigError", () => {
  assert.ok(builtinScenarios().includes("demo"));
  assert.throws(() => simulate("no-such-scenario"), (e) =>
    e instanceof ConfigError && /no built-in scenario/.test(e.message));
  assert.throws(() => simulate('{"name": 3}'), ConfigError);
  assert.throws(() => simulate({ name: 3 }), ConfigError);
  assert.throws(() => simulate(42), ConfigError);
  assert.throws(() => simulate("blip", 0, { max_steps: "many" }), ConfigError);
  assert.throws(() => simulate("blip", 0, { no_such_field: 1 }), ConfigError);
  for (const call of [
    () => simulate("blip", -1),
    () => simulate("blip", 1.5),
    () => simulate("blip", 2n ** 64n),
    () => simulate("blip", "12abc"),
    () => simulate("blip", {}),
    () => simulateMany("blip", -1),
    () => simulateMany("blip", 2 ** 32),
    () => simulateMany("blip", 3, -5),
    () => simulateFleet("blip", [[-1, 0]]),
    () => simulateFleet("blip", [{ seed: 1 }]),
    () => simulateFleet("blip", "agents"),
    () => outageReport({ agents: -1 }),
    () => runOutage({ model: "brownout", agents: 1.5 }),
    () => runOutage({ model: "no-such-model" }),
    () => runOutage({ model: "brownout", policy: "no-such-policy" }),
  ]) {
    assert.throws(call, ConfigError, String(call));
  }
});

test("a fleet shares one clock and, when asked, one retry budget", () => {
  const agents = Array.from({ length: 20 }, (_, i) => ({ seed: i, startMs: i * 100 }));
  const alone = simulateFleet("total-outage", agents);
  assert.equal(alone.budget, null);
  assert.equal(alone.runs.length, 20);
  assert.deepEqual(
    alone.runs.map((r) => [r.seed, r.startedMs]),
    agents.map((a) => [BigInt(a.seed), a.startMs]),
  );
  const shared = simulateFleet(
    "total-outage",
    agents.map((a) => [a.seed, a.startMs]),
    { machine: { retry_budget: {} }, budget: {} },
  );
  assert.ok(shared.budget.denied > 0, JSON.stringify(shared.budget));
  const sent = (fleet) => fleet.runs.reduce((n, r) => n + r.requests, 0);
  assert.ok(sent(shared) < sent(alone), `${sent(shared)} < ${sent(alone)}`);
});

test("the outage report names every policy, and one policy's run is its row", () => {
  const report = outageReport({ seed: 3, agents: 20 });
  const policies = outagePolicies();
  const models = outageModels();
  assert.equal(policies[0].name, "rebound");
  assert.ok(policies.length > 10);
  assert.equal(report.rows.length, models.length * policies.length);
  assert.deepEqual(
    [...new Set(report.rows.map((r) => r.policy))],
    policies.map((p) => p.name),
  );
  assert.equal(report.met, report.misses.length === 0);
  for (const row of report.rows) {
    assert.ok(report.table.includes(row.tableRow), row.tableRow);
    assert.ok(row.completed <= row.agents && row.agents === 20);
  }
  for (const [model, policy] of [
    ["brownout", "rebound"],
    ["total-outage", "vercel-ai"],
    ["rate-limit-shared", "aws-sdk adaptive (rate limiter)"],
  ]) {
    const run = runOutage({ model, policy, seed: 3, agents: 20 });
    const row = report.rows.find((r) => r.model === model && r.policy === policy);
    assert.deepEqual(run.row, row);
    assert.equal(run.turns.length, 20);
    const sent = run.turns.reduce((n, t) => n + t.requestsMs.length, 0);
    assert.equal(sent, row.requests);
    assert.equal(run.perSec.reduce((a, b) => a + b, 0), row.requests);
    assert.equal(run.turns.filter((t) => t.completedMs !== null).length, row.completed);
    assert.equal(run.peakPerSec, Math.max(0, ...run.perSec));
    assert.equal(run.seed, 3n);
  }
  const brownout = models.find((m) => m.name === "brownout");
  assert.deepEqual(brownout.outagesMs, [[0, 120000]]);
});

test("the outage experiment is the one rebound sim --compare prints", () => {
  const table = compareTable(1);
  const report = outageReport({ seed: 1 });
  assert.equal(report.table.trimEnd(), table.trimEnd());
  // One policy in one model, alone, is that row of it: what the playground shows.
  for (const [model, policy] of [
    ["brownout", "rebound"],
    ["long-retry-after-fallback", "gemini-cli"],
  ]) {
    const run = runOutage({ model, policy, seed: 1 });
    assert.equal(run.row.tableRow, compareRow(table, model, policy));
    assert.equal(run.turns.length, 1000);
  }
});

test("scenario tools answer as the scenario scripts them", () => {
  const scripted = {
    name: "scripted-tools",
    turns: [
      {
        answer: {
          tool_calls: [
            { id: "toolu_a", name: "read", input: { path: "a.rs" },
              outcome: { type: "ok", text: "fn a() {}" } },
            { id: "toolu_b", name: "read", input: { path: "b.rs" },
              outcome: { type: "error", message: "no such file" }, duration_ms: 700 },
          ],
        },
      },
      {
        answer: {
          tool_calls: [{ id: "toolu_c", name: "read", input: {} }],
          batch_error: { type: "error", message: "the tool server is gone" },
        },
      },
      { answer: { text: "Done." } },
    ],
  };
  const tools = new ScenarioTools(scripted);
  assert.ok(tools.specs().some((s) => s.name === "read"));
  const { durationMs, outcome } = tools.run([
    { id: "toolu_a", name: "read", input: { path: "a.rs" } },
    { id: "toolu_b", name: "read", input: { path: "b.rs" } },
    { id: "toolu_x", name: "read", input: {} },
  ]);
  assert.equal(durationMs, 700);
  const [a, b, x] = outcome.per_call;
  assert.deepEqual(
    [a.tool_use_id, b.tool_use_id, x.tool_use_id],
    ["toolu_a", "toolu_b", "toolu_x"],
  );
  assert.match(JSON.stringify(a), /fn a\(\) \{\}/);
  assert.match(JSON.stringify(b), /no such file/);
  assert.match(JSON.stringify(x), /read finished/);
  const whole = tools.run([{ id: "toolu_c", name: "read", input: {} }]).outcome;
  assert.match(JSON.stringify(whole.whole_batch), /the tool server is gone/);
  assert.throws(() => new ScenarioTools("no-such-scenario"), ConfigError);
  assert.throws(() => tools.run([{ name: "read" }]), EventError);
});

test("every error the simulator throws is a ReboundError", () => {
  for (const call of [() => replay("x"), () => simulate("nope"), () => new ScenarioTools(1)]) {
    assert.throws(call, ReboundError);
  }
});
