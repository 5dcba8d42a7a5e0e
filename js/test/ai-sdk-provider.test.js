// The Vercel AI SDK example (examples/ai-sdk-provider.ts, compiled by the repository's
// TypeScript): its LanguageModelV3's doGenerate and doStream, called as the SDK calls them
// (one call per step, the tools run between steps from the SDK's own history), against
// `rebound serve`: retries, retry-after, a cut stream voided, a tool error, compaction,
// fallback to a second target, a clean failure the SDK does not retry, cancel.

import { describe, test, before } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { SharedBudget } from "../lib/index.js";
import { JS, compileExamples, serve, tempDir } from "./serve.js";

let ReboundLanguageModel;
let APICallError;
let modelModule;

before(async () => {
  const dist = compileExamples("ai-sdk-provider");
  modelModule = join(dist, "examples", "ai-sdk-provider.js");
  ({ ReboundLanguageModel } = await import(pathToFileURL(modelModule).href));
  ({ APICallError } = await import("@ai-sdk/provider"));
});

/** The tools the scenarios' model calls, as the SDK hands them to a model. */
const TOOLS = ["read", "edit", "bash"].map((name) => ({
  type: "function",
  name,
  description: `The ${name} tool.`,
  inputSchema: { type: "object" },
}));

/** What the SDK's tool execution gives back: `src/parse.rs` exists, nothing else. */
function runTool(call) {
  const input = JSON.parse(call.input);
  if (call.toolName === "read" && input.path !== "src/parse.rs") {
    return { type: "error-text", value: `file not found: ${input.path}` };
  }
  if (call.toolName === "read") return { type: "text", value: "fn parse(input: &str) -> Ast { todo!() }\n" };
  return { type: "json", value: { ok: true } };
}

/** The prompt of a new conversation. */
function firstPrompt() {
  return [
    { role: "system", content: "Be brief." },
    { role: "user", content: [{ type: "text", text: "Fix the failing test." }] },
  ];
}

/**
 * The SDK's multi-step loop (as `generateText` with tools runs it): call the model, run the
 * tools it called, append both to the history, until it stops calling tools.
 */
async function steps(model, call, maxSteps = 12) {
  const prompt = firstPrompt();
  const results = [];
  for (let i = 0; i < maxSteps; i++) {
    const result = await call({ prompt: structuredClone(prompt), tools: TOOLS });
    results.push(result);
    const calls = result.content.filter((p) => p.type === "tool-call");
    if (result.finishReason.unified !== "tool-calls") return results;
    prompt.push({
      role: "assistant",
      content: result.content
        .filter((p) => p.type === "text" || p.type === "tool-call")
        .map((p) =>
          p.type === "text"
            ? { type: "text", text: p.text }
            : { type: "tool-call", toolCallId: p.toolCallId, toolName: p.toolName, input: JSON.parse(p.input) },
        ),
    });
    prompt.push({
      role: "tool",
      content: calls.map((c) => ({ type: "tool-result", toolCallId: c.toolCallId, toolName: c.toolName, output: runTool(c) })),
    });
  }
  assert.fail("the model never stopped calling tools");
}

/** doStream's parts, and the step they make (content, finishReason) as the SDK assembles it. */
async function streamed(model, options) {
  const { stream } = await model.doStream(options);
  const parts = [];
  for await (const part of stream) parts.push(part);
  const finish = parts.find((p) => p.type === "finish");
  const error = parts.find((p) => p.type === "error");
  if (error) throw error.error;
  assert.ok(finish, "the stream finished");
  const text = new Map();
  for (const p of parts) {
    if (p.type === "text-start") text.set(p.id, "");
    if (p.type === "text-delta") text.set(p.id, text.get(p.id) + p.delta);
  }
  const discarded = new Set(parts.filter((p) => p.type === "text-end" && p.providerMetadata?.rebound?.discarded).map((p) => p.id));
  const content = [
    ...[...text].filter(([id]) => !discarded.has(id)).map(([, t]) => ({ type: "text", text: t })),
    ...parts.filter((p) => p.type === "tool-call"),
  ];
  return { parts, content, finishReason: finish.finishReason, usage: finish.usage, providerMetadata: finish.providerMetadata };
}

/** A model of one anthropic target at `url`, its notices collected. */
function modelAt(url, extra = {}) {
  const notices = [];
  const model = new ReboundLanguageModel({
    targets: [{ baseUrl: url, model: "claude-sonnet-4-6", apiKey: "sk-ant-test-key-0123456789" }],
    seed: 1,
    onNotice: (text) => notices.push(text),
    ...extra,
  });
  return { model, notices };
}

describe("the AI SDK model against rebound serve", { concurrency: true }, () => {
  test("doGenerate steps through a blip: the machine retried, the SDK's history carried the tools", async () => {
    const server = await serve("blip", 1);
    try {
      const { model, notices } = modelAt(server.url);
      assert.equal(model.specificationVersion, "v3");
      assert.equal(model.provider, "rebound.anthropic");
      const results = await steps(model, (o) => model.doGenerate(o));
      const last = results.at(-1);
      assert.equal(last.finishReason.unified, "stop");
      assert.ok(last.content.some((p) => p.type === "text" && p.text.length > 0));
      assert.ok(results.length > 1, "the model called tools first");
      assert.equal(results[0].finishReason.unified, "tool-calls");
      assert.ok(last.usage.outputTokens.total > 0);
      // Two 529s, retried by rebound (and told), none by the SDK.
      assert.equal(notices.filter((n) => n.includes("retrying in")).length, 2, notices.join("\n"));
      assert.equal(results[0].providerMetadata.rebound.tally.retries, 2);
      const log = await server.requests();
      assert.equal(log.length, results.length + 2, log.join("\n"));
      assert.ok(!log.some((l) => l.includes("rejected")), log.join("\n"));
    } finally {
      await server.stop();
    }
  });

  test("doStream steps through the demo: retry-after, a cut stream voided, a tool error, compaction", async () => {
    const server = await serve("demo", 1);
    try {
      const { model, notices } = modelAt(server.url);
      const results = await steps(model, (o) => streamed(model, o));
      assert.equal(results.at(-1).finishReason.unified, "stop");
      const all = results.flatMap((r) => r.parts);
      assert.equal(all.filter((p) => p.type === "stream-start").length, results.length);
      // The stream cut midway (inside a tool call's input): its open parts end marked as
      // discarded, and the retry's parts follow under new ids.
      const discarded = all.filter((p) => p.providerMetadata?.rebound?.discarded === true);
      assert.ok(discarded.length > 0 && discarded.every((p) => p.type.endsWith("-end")), JSON.stringify(discarded));
      const text = notices.join("\n");
      assert.match(text, /rate limited: retrying in 2\.0s/);
      assert.match(text, /compacting the conversation/);
      const tallies = results.map((r) => r.providerMetadata.rebound.tally);
      assert.equal(tallies.reduce((n, t) => n + t.stream_resets, 0), 1);
      assert.equal(tallies.reduce((n, t) => n + t.compactions, 0), 1);
      const log = await server.requests();
      assert.ok(log.some((l) => l.includes("context overflow") || l.includes("context_overflow")), log.join("\n"));
      assert.ok(!log.some((l) => l.includes("rejected")), log.join("\n"));
    } finally {
      await server.stop();
    }
  });

  test("a primary that is down falls back to the second target, in another wire format", async () => {
    const down = await serve("total-outage");
    const up = await serve("healthy");
    try {
      const notices = [];
      const model = new ReboundLanguageModel({
        targets: [
          { baseUrl: down.url, model: "claude-sonnet-4-6", apiKey: "sk-ant-test-key-0123456789" },
          { baseUrl: up.url + "/v1", provider: "openai", model: "gpt-4o", apiKey: "sk-openai-test-0123456789" },
        ],
        config: { retry: { initial_delay_ms: 10, max_delay_ms: 20 } },
        seed: 1,
        onNotice: (text) => notices.push(text),
      });
      const result = await model.doGenerate({ prompt: firstPrompt(), tools: TOOLS });
      assert.equal(result.providerMetadata.rebound.target, "gpt-4o");
      assert.equal(result.providerMetadata.rebound.tally.fallbacks, 1);
      assert.ok(notices.some((n) => !n.includes("retrying in")), notices.join("\n"));
      assert.ok((await down.requests()).length >= 1);
      const served = await up.requests();
      assert.equal(served.length, 1);
      assert.match(served[0], /\[openai\]/);
    } finally {
      await down.stop();
      await up.stop();
    }
  });

  test("a run the machine gave up on is an APICallError the SDK does not retry", async () => {
    const server = await serve("total-outage");
    try {
      const { model } = modelAt(server.url, { config: { retry: { initial_delay_ms: 10, max_delay_ms: 20 } } });
      await assert.rejects(model.doGenerate({ prompt: firstPrompt(), tools: TOOLS }), (error) => {
        assert.ok(APICallError.isInstance(error), String(error));
        assert.equal(error.isRetryable, false);
        assert.equal(error.data.tally.requests, 4);
        assert.equal(error.statusCode, 529);
        assert.ok(error.message.length > 0);
        return true;
      });
      assert.equal((await server.requests()).length, 4);
      // In a stream, the failure is its error part.
      const { stream } = await model.doStream({ prompt: firstPrompt(), tools: TOOLS });
      const parts = [];
      for await (const p of stream) parts.push(p);
      assert.equal(parts[0].type, "stream-start");
      assert.equal(parts.at(-1).type, "error");
      assert.ok(APICallError.isInstance(parts.at(-1).error));
    } finally {
      await server.stop();
    }
  });

  test("an abort signal cancels a stream mid-answer", async () => {
    const scenario = join(tempDir(), "drip.json");
    writeFileSync(
      scenario,
      JSON.stringify({ name: "drip", turns: [{ faults: [{ type: "slow_drip", interval_ms: 300 }], answer: { text: "Fixed it all, slowly." } }] }),
    );
    const server = await serve(scenario);
    try {
      const { model } = modelAt(server.url);
      const controller = new AbortController();
      const { stream } = await model.doStream({ prompt: firstPrompt(), tools: TOOLS, abortSignal: controller.signal });
      const parts = [];
      const started = performance.now();
      await assert.rejects(
        (async () => {
          for await (const p of stream) {
            parts.push(p);
            if (p.type === "text-delta") controller.abort(new Error("the user left"));
          }
        })(),
        /the user left/,
      );
      assert.ok(parts.some((p) => p.type === "text-delta"));
      assert.ok(!parts.some((p) => p.type === "finish"));
      assert.ok(performance.now() - started < 3000);
      assert.equal((await server.requests()).length, 1);
    } finally {
      await server.stop();
    }
  });

  test("models sharing a retry budget send the retries it pays for and no more", async () => {
    const server = await serve("total-outage");
    try {
      // One token for both models, and nothing to earn more with.
      const budget = new SharedBudget({ capacity: 1, initial: 1, deposit_per_request: 0, deposit_per_success: 0, refill_per_sec: 0 });
      const config = { retry: { initial_delay_ms: 10, max_delay_ms: 20 }, retry_budget: { max_wait_ms: 200 } };
      const models = [1, 2].map((seed) => modelAt(server.url, { seed, config, budget }).model);
      const results = await Promise.allSettled(models.map((m) => m.doGenerate({ prompt: firstPrompt(), tools: TOOLS })));
      for (const r of results) {
        assert.equal(r.status, "rejected");
        assert.ok(APICallError.isInstance(r.reason), String(r.reason));
      }
      // Each model's first attempt, and the one retry the token paid for.
      assert.equal((await server.requests()).length, 2 + 1);
      assert.equal(budget.stats().granted, 1);
    } finally {
      await server.stop();
    }
  });

  test("what the SDK asks for that rebound does not send is a warning", async () => {
    const server = await serve("healthy");
    try {
      const { model } = modelAt(server.url);
      const result = await model.doGenerate({
        prompt: firstPrompt(),
        tools: [...TOOLS, { type: "provider", id: "anthropic.web_search", name: "web_search", args: {} }],
        topK: 3,
        temperature: 0.2,
        toolChoice: { type: "required" },
      });
      const features = result.warnings.map((w) => w.feature);
      assert.ok(features.includes("topK"), JSON.stringify(result.warnings));
      assert.ok(features.some((f) => f.includes("web_search")));
      assert.ok(result.content.length > 0);
    } finally {
      await server.stop();
    }
  });

  test("the model runs in Deno as in Node: only fetch, streams and timers", async () => {
    // One doGenerate against a blip, in Deno (npm's `deno`, a devDependency) with the
    // package and the provider interface mapped to their files, then in Node: the same
    // decisions (the seed makes the retry delays the same).
    const script = `
      const { ReboundLanguageModel } = await import(${JSON.stringify(pathToFileURL(modelModule).href)});
      const notices = [];
      const model = new ReboundLanguageModel({
        targets: [{ baseUrl: Deno.args[0], model: "claude-sonnet-4-6", apiKey: "sk-ant-test-key-0123456789" }],
        seed: 1,
        onNotice: (text) => notices.push(text),
      });
      const r = await model.doGenerate({ prompt: ${JSON.stringify(firstPrompt())}, tools: ${JSON.stringify(TOOLS)} });
      console.log(JSON.stringify({ finish: r.finishReason, notices, tally: r.providerMetadata.rebound.tally }));
    `;
    const dir = tempDir();
    const map = join(dir, "import-map.json");
    writeFileSync(
      map,
      JSON.stringify({
        imports: {
          "rebound-agent": pathToFileURL(join(JS, "lib", "index.js")).href,
          "@ai-sdk/provider": pathToFileURL(join(JS, "node_modules", "@ai-sdk", "provider", "dist", "index.mjs")).href,
        },
      }),
    );
    writeFileSync(join(dir, "run.mjs"), script);
    const deno = join(JS, "node_modules", ".bin", "deno");
    const server = await serve("blip", 1);
    let inDeno;
    try {
      const child = spawn(deno, ["run", "--quiet", "--allow-net", "--allow-read", "--import-map", map, join(dir, "run.mjs"), server.url], {
        env: { ...process.env, DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
      });
      let out = "";
      let err = "";
      child.stdout.on("data", (b) => (out += b));
      child.stderr.on("data", (b) => (err += b));
      const status = await new Promise((done) => {
        child.once("error", (e) => done(`${e.message} (is js/node_modules installed? npm ci)`));
        child.once("exit", done);
      });
      assert.equal(status, 0, `deno failed:\n${err}`);
      inDeno = JSON.parse(out);
    } finally {
      await server.stop();
    }
    const again = await serve("blip", 1);
    try {
      const { model, notices } = modelAt(again.url);
      const r = await model.doGenerate({ prompt: firstPrompt(), tools: TOOLS });
      assert.deepEqual(inDeno.finish, r.finishReason);
      assert.deepEqual(inDeno.notices, notices);
      assert.equal(inDeno.tally.retries, 2);
      assert.equal(inDeno.tally.retries, r.providerMetadata.rebound.tally.retries);
    } finally {
      await again.stop();
    }
  });
});
