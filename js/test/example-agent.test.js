// The example agent (examples/agent.ts, compiled by the repository's TypeScript) against
// `rebound serve` and its fault scenarios: every run ends as the machine decided, the server
// saw what it should, and the trace replays identically with `rebound replay`. Cancel with
// an AbortSignal, mid-stream and mid-backoff.

import { describe, test, before } from "node:test";
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { AgentMachine, SharedBudget, userText } from "../lib/index.js";

import { compileExamples, replayCli, serve, tempDir } from "./serve.js";

let agent;
let agentScript;
let attempts;

before(async () => {
  const dist = compileExamples("example-agent");
  agentScript = join(dist, "examples", "agent.js");
  agent = await import(pathToFileURL(agentScript).href);
  attempts = await import(pathToFileURL(join(dist, "examples", "attempt.js")).href);
});

/** The base URL clients of `provider` take from `rebound serve`'s URL. */
function baseUrl(url, provider) {
  switch (provider) {
    case "anthropic":
    case "bedrock":
      return url;
    case "gemini":
      return url + "/v1beta";
    default:
      return url + "/v1";
  }
}

/** Runs the example agent against `url`: its code, what it said, its trace and outcome. */
async function run(url, provider, { seed = 1, config, signal, onSay, budget } = {}) {
  const dir = tempDir();
  mkdirSync(join(dir, "src"));
  writeFileSync(join(dir, "src", "parse.rs"), "fn parse(input: &str) -> Ast { todo!() }\n");
  const trace = join(dir, "trace.jsonl");
  let out = "";
  const { code, outcome } = await agent.runAgent("Fix the failing test.", {
    baseUrl: baseUrl(url, provider),
    provider,
    root: dir,
    seed,
    trace,
    config,
    signal,
    budget,
    say: (text, end = "\n") => {
      out += text + end;
      onSay?.(text);
    },
  });
  return { code, out, outcome, tracePath: trace, trace: readFileSync(trace, "utf8") };
}

/** The trace's steps (its lines after the header). */
function steps(trace) {
  return trace
    .trim()
    .split("\n")
    .slice(1)
    .map((line) => JSON.parse(line));
}

/** Asserts that `rebound replay` replays the trace identically. */
function assertReplays(tracePath) {
  const { status, text } = replayCli(tracePath);
  assert.equal(status, 0, text);
  assert.match(text, /identically/, text);
}

// Scenarios every run of which finishes (see `rebound sim --scenario NAME --runs 100`).
describe("the agent survives the scripted outage", { concurrency: true }, () => {
  for (const [scenario, provider] of [
    ["demo", "anthropic"],
    ["demo", "openai"],
    ["demo", "openai_responses"],
    ["demo", "gemini"],
    ["demo", "bedrock"],
    ["blip", "anthropic"],
    ["rate-limit-window", "openai"],
    ["tool-errors", "anthropic"],
    ["overflow", "openai_responses"],
  ]) {
    test(`${scenario} on ${provider}`, async () => {
      const server = await serve(scenario, 1);
      try {
        const { code, out, outcome, tracePath } = await run(server.url, provider);
        assert.equal(code, 0, out);
        assert.match(out, /done after/);
        assert.ok("Ok" in outcome, JSON.stringify(outcome));
        assertReplays(tracePath);
        if (["demo", "blip", "rate-limit-window"].includes(scenario)) assert.match(out, /retrying in/);
        if (scenario === "demo") {
          // The cut stream was told, and its text taken back; the overflow compacted.
          assert.match(out, /the answer broke off/);
          assert.match(out, /compacting the conversation/);
        }
        // The server took every request as its API would: the body rebound built.
        const log = await server.requests();
        assert.ok(log.length > 0 && !log.some((l) => l.includes("rejected")), log.join("\n"));
      } finally {
        await server.stop();
      }
    });
  }
});

describe("a random outage ends as the machine decided", { concurrency: true }, () => {
  for (const scenario of ["stream-cuts", "brownout"]) {
    for (const seed of [1, 2]) {
      test(`${scenario}, seed ${seed}`, async () => {
        const server = await serve(scenario, seed);
        try {
          const { code, out, outcome, tracePath } = await run(server.url, "anthropic", { seed });
          assertReplays(tracePath);
          assert.equal(code, "Ok" in outcome ? 0 : 1, out);
        } finally {
          await server.stop();
        }
      });
    }
  }
});

describe("the agent's other runs", { concurrency: true }, () => {
  test("a total outage fails cleanly after the policy's attempts", async () => {
    const server = await serve("total-outage");
    try {
      const { code, out, tracePath } = await run(server.url, "anthropic");
      assert.equal(code, 1);
      assert.match(out, /the run failed/);
      assert.equal(out.split("retrying in").length - 1, 3); // four attempts, the default
      assertReplays(tracePath);
      // The server saw the machine's four attempts and no more: fetch retried nothing.
      assert.equal((await server.requests()).length, 4);
    } finally {
      await server.stop();
    }
  });

  test("the agent reads the project files it is asked for", async () => {
    const server = await serve("demo");
    try {
      const { code, trace } = await run(server.url, "anthropic");
      assert.equal(code, 0);
      // The demo asks for src/parser.rs (missing: a tool error the model reads), then src/parse.rs.
      assert.ok(trace.includes("file not found: src/parser.rs"));
      assert.ok(trace.includes("todo!()"));
    } finally {
      await server.stop();
    }
  });

  // One of each failure the wire can carry, none of which a 4-attempt turn cannot outlast.
  const EVERY_FAILURE = {
    name: "every-failure",
    turns: [
      {
        faults: [
          { type: "transport", fault: "reset" },
          { type: "stream_error" },
          { type: "stream_cut_bytes", after_bytes: 300 },
        ],
        answer: {
          text: "Reading it.",
          tool_calls: [{ id: "toolu_01", name: "read", input: { path: "src/parse.rs" } }],
        },
      },
      {
        faults: [
          { type: "malformed_stream" },
          { type: "http", status: 429, headers: { "retry-after-ms": "150", "x-should-retry": "true" } },
        ],
        answer: { text: "Fixed." },
      },
    ],
  };

  for (const provider of ["anthropic", "openai", "openai_responses"]) {
    test(`every failure the wire carries is told to the machine (${provider})`, async () => {
      const scenario = join(tempDir(), "every-failure.json");
      const wire = provider === "anthropic" ? "anthropic" : "openai";
      writeFileSync(scenario, JSON.stringify({ ...EVERY_FAILURE, provider: wire }));
      const server = await serve(scenario);
      try {
        const { code, out, trace, tracePath } = await run(server.url, provider);
        assert.equal(code, 0, out);
        assertReplays(tracePath);
        const told = steps(trace)
          .filter((s) => s.event.type === "provider_failed")
          .map((s) => s.event.failure);
        // The same failures the Python example agents tell (python/tests/test_example_agent.py).
        assert.deepEqual(
          told.map((f) => f.kind),
          ["transport", "unavailable", "stream_malformed", "stream_malformed", "rate_limited"],
        );
        const last = told.at(-1);
        assert.deepEqual([last.status, last.retry_after_ms], [429, 150]);
      } finally {
        await server.stop();
      }
    });
  }

  test("the command in the example's doc comment runs the agent", async () => {
    const server = await serve("demo");
    try {
      const root = tempDir();
      const child = spawn(
        process.execPath,
        [agentScript, "--base-url", server.url, "--root", root, "Fix the failing test."],
        { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ANTHROPIC_API_KEY: "x" } },
      );
      let out = "";
      child.stdout.on("data", (b) => (out += b));
      child.stderr.on("data", (b) => (out += b));
      const status = await new Promise((done) => child.once("exit", done));
      assert.equal(status, 0, out);
      assert.match(out, /retrying in/);
      assert.match(out, /done after/);
    } finally {
      await server.stop();
    }
  });

  test("a stream silent past its idle deadline is reset and retried", async () => {
    const scenario = join(tempDir(), "stall.json");
    writeFileSync(
      scenario,
      JSON.stringify({
        name: "stall",
        turns: [{ faults: [{ type: "stall", ms: 3000 }], answer: { text: "Fixed." } }],
      }),
    );
    const server = await serve(scenario);
    try {
      const { code, out, trace, tracePath } = await run(server.url, "anthropic", {
        config: { stream: { idle_ms: 400 } },
      });
      assert.equal(code, 0, out);
      assertReplays(tracePath);
      const all = steps(trace);
      const sends = all.flatMap((s) => s.commands).filter((c) => c.type === "send_request");
      assert.ok(sends.length > 0 && sends.every((c) => c.deadlines.idle_ms === 400));
      const kinds = all.map((s) => s.event.type);
      const failed = kinds.indexOf("provider_failed");
      assert.equal(kinds[failed - 1], "provider_responding"); // the answer had begun
      assert.equal(all[failed].event.failure.transport, "idle_timeout");
      // Told to the user before the retry's notice, and counted by the machine.
      assert.ok(out.indexOf("the answer broke off") < out.indexOf("retrying in"), out);
      assert.match(out, /stream resets: 1\)/);
    } finally {
      await server.stop();
    }
  });

  test("an abort mid-stream cancels the run at once", async () => {
    // Every event of the answer comes 300 ms after the one before: abort at the first text.
    const scenario = join(tempDir(), "drip.json");
    writeFileSync(
      scenario,
      JSON.stringify({
        name: "drip",
        turns: [{ faults: [{ type: "slow_drip", interval_ms: 300 }], answer: { text: "Fixed it all, slowly." } }],
      }),
    );
    const server = await serve(scenario);
    try {
      const controller = new AbortController();
      const started = performance.now();
      let streamed = false;
      const { code, out, outcome, trace, tracePath } = await run(server.url, "anthropic", {
        signal: controller.signal,
        onSay: (text) => {
          if (!streamed && text !== "" && !text.startsWith("→")) {
            streamed = true;
            controller.abort();
          }
        },
      });
      assert.ok(streamed, "the answer began streaming");
      assert.equal(code, 1, out);
      assert.deepEqual(outcome, { Err: { type: "canceled" } });
      assert.match(out, /the run failed: .*cancel/);
      assertReplays(tracePath);
      const kinds = steps(trace).map((s) => s.event.type);
      assert.deepEqual(kinds, ["user_message", "provider_responding", "cancel"]);
      // Ended when aborted, not when the drip would have ended.
      assert.ok(performance.now() - started < 3000);
      assert.equal((await server.requests()).length, 1);
    } finally {
      await server.stop();
    }
  });

  test("an abort during a retry's backoff cancels the run at once", async () => {
    const server = await serve("total-outage");
    try {
      const controller = new AbortController();
      const { code, outcome, trace, tracePath } = await run(server.url, "anthropic", {
        signal: controller.signal,
        config: { retry: { initial_delay_ms: 60_000, max_delay_ms: 60_000, jitter: false } },
        onSay: (text) => {
          if (text.includes("retrying in")) controller.abort();
        },
      });
      assert.equal(code, 1);
      assert.deepEqual(outcome, { Err: { type: "canceled" } });
      assertReplays(tracePath);
      const kinds = steps(trace).map((s) => s.event.type);
      assert.deepEqual(kinds, ["user_message", "provider_failed", "cancel"]);
      assert.equal((await server.requests()).length, 1);
    } finally {
      await server.stop();
    }
  });
});

// --- a fleet sharing one retry budget ---

describe("agents sharing a retry budget", { concurrency: true }, () => {
  // Four agents in a total outage; fast backoffs, so that the budget is what limits them.
  const config = { retry: { initial_delay_ms: 10, max_delay_ms: 20 }, retry_budget: { max_wait_ms: 200 } };

  for (const shared of [false, true]) {
    test(shared ? "send what the budget pays for and no more" : "without a budget, send every attempt", async () => {
      const server = await serve("total-outage");
      try {
        // Two tokens for the whole fleet, and nothing to earn more with.
        const budget = shared
          ? new SharedBudget({ capacity: 2, initial: 2, deposit_per_request: 0, deposit_per_success: 0, refill_per_sec: 0 })
          : undefined;
        const runs = await Promise.all(
          [1, 2, 3, 4].map((seed) =>
            run(server.url, "anthropic", { seed, budget, config: shared ? config : { retry: config.retry } }),
          ),
        );
        for (const r of runs) {
          assert.equal(r.code, 1, r.out);
          assertReplays(r.tracePath);
        }
        const requests = (await server.requests()).length;
        if (shared) {
          // Each agent's first attempt, and the two retries the tokens paid for.
          assert.equal(requests, 4 + 2);
          assert.deepEqual(budget.stats(), { granted: 2, denied: 4, queued: 4, deposited_milli: 0 });
        } else {
          assert.equal(requests, 4 * 4);
        }
      } finally {
        await server.stop();
      }
    });
  }
});

// --- one attempt's deadlines, against a local server whose chunks come when told ---

const PING = 'event: ping\ndata: {"type": "ping"}\n\n';
const START =
  'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",' +
  '"role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,' +
  '"usage":{"input_tokens":1,"output_tokens":1}}}\n\n' +
  'event: content_block_start\ndata: {"type":"content_block_start","index":0,' +
  '"content_block":{"type":"text","text":""}}\n\n';
const TEXT =
  'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n';
const END =
  'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n' +
  'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}\n\n' +
  'event: message_stop\ndata: {"type":"message_stop"}\n\n';

/** What one attempt makes of a body whose chunks come at the given offsets (ms). */
async function attemptWithin(idleMs, progressMs, body) {
  const server = createServer((request, response) => {
    request.resume();
    response.writeHead(200, { "content-type": "text/event-stream" });
    const timers = body.map(([at, chunk]) => setTimeout(() => (chunk === null ? response.end() : response.write(chunk)), at));
    response.on("close", () => timers.forEach(clearTimeout));
  });
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  try {
    const machine = new AgentMachine();
    machine.handle(0, userText("hi"));
    const send = machine.drain().find((a) => a.type === "send_request");
    const target = new attempts.HttpTarget("anthropic", `http://127.0.0.1:${server.address().port}`, "m", "k");
    let responding = 0;
    const answer = await attempts.attempt(
      target,
      { ...send, deadlines: { idle_ms: idleMs, progress_ms: progressMs } },
      { body: { maxTokens: 100 }, onResponding: () => (responding += 1) },
    );
    return { answer, responding };
  } finally {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  }
}

describe("one attempt keeps its request's deadlines", { concurrency: true }, () => {
  test("a stream of keep-alives fails at its progress deadline", async () => {
    const pings = Array.from({ length: 40 }, (_, i) => [50 * (i + 1), PING]);
    const { answer, responding } = await attemptWithin(10_000, 300, [[0, START], ...pings]);
    assert.equal(responding, 1);
    assert.equal(answer.type, "provider_failed");
    assert.equal(answer.failure.transport, "idle_timeout");
    assert.match(answer.failure.message, /no content received in time \(only keep-alives\)/);
  });

  test("a silent stream fails at its idle deadline", async () => {
    const { answer } = await attemptWithin(200, 60_000, [[0, START], [5_000, TEXT]]);
    assert.equal(answer.type, "provider_failed");
    assert.match(answer.failure.message, /no bytes received in time/);
  });

  test("silence fails at the progress deadline when it comes first", async () => {
    const { answer } = await attemptWithin(60_000, 200, [[0, START + TEXT], [5_000, TEXT]]);
    assert.match(answer.failure.message, /no content received in time/);
  });

  test("a stream whose content keeps coming passes both deadlines", async () => {
    const body = Array.from({ length: 12 }, (_, i) => [50 * (i + 1), i % 2 ? PING : TEXT]);
    const { answer } = await attemptWithin(200, 200, [[0, START], ...body, [650, END], [700, null]]);
    assert.equal(answer.type, "provider_succeeded", JSON.stringify(answer));
    assert.equal(answer.response.message.content[0].text, "Hi".repeat(6));
  });
});
