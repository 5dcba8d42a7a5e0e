// One build loads everywhere: the package imported by Deno (from npm's `deno`, a
// devDependency) as by Node, the same run on both. Browsers load it in the playground's test.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { AgentMachine, userText } from "../lib/index.js";

const here = new URL(".", import.meta.url);
const deno = fileURLToPath(new URL("../node_modules/.bin/deno", here));

// A run with a retry: the user's message, an overloaded provider, the timer, a reply.
const script = `
const { AgentMachine, userText, ReboundError } = await import(${JSON.stringify(
  new URL("../lib/index.js", here).href,
)});
const machine = new AgentMachine({ seed: 3, record: true });
machine.handle(0, userText("hi"));
const seen = [];
let now = 0;
for (let a = machine.poll(); a; a = machine.poll()) {
  seen.push(a.type);
  if (a.type === "send_request" && a.attempt === 1) {
    machine.handle(now += 10, { type: "provider_failed", request: a.request,
      failure: { kind: "unavailable", message: "busy", status: 529 } });
  } else if (a.type === "send_request") {
    machine.handle(now += 10, { type: "provider_succeeded", request: a.request, response: {
      message: { role: "assistant", content: [{ type: "text", text: "hello" }] },
      stop_reason: "end_turn" } });
  } else if (a.type === "sleep") {
    machine.handle(now += a.delay_ms, { type: "timer_fired", timer: a.timer });
  }
}
let typed = false;
try { machine.handle(now, { type: "nonsense" }); } catch (e) { typed = e instanceof ReboundError && e.kind === "event"; }
console.log(JSON.stringify({ seen, tally: machine.tally(), typed, trace: machine.traceJsonl() }));
`;

test("the package loads in Deno and runs the machine as in Node", () => {
  const ran = spawnSync(deno, ["eval", "--quiet", script], {
    encoding: "utf8",
    env: { ...process.env, DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
  });
  assert.equal(ran.status, 0, `deno failed (is js/node_modules installed? npm ci):\n${ran.stderr}`);
  const inDeno = JSON.parse(ran.stdout);
  assert.ok(inDeno.typed, "a malformed event throws an EventError in Deno too");

  // The same run in Node: the same actions, tally and trace (but for the driver's name).
  const node = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
  });
  assert.equal(node.status, 0, node.stderr);
  const inNode = JSON.parse(node.stdout);
  assert.deepEqual(inDeno.seen, inNode.seen);
  assert.deepEqual(inDeno.tally, inNode.tally);
  assert.equal(inDeno.trace, inNode.trace);
  assert.ok(inNode.seen.includes("sleep"), `a retry was slept: ${inNode.seen}`);
  assert.equal(inNode.tally.retries, 1);
});

test("the package is importable as the module the package.json exports", () => {
  const machine = new AgentMachine();
  assert.equal(machine.handle(0, userText("hello")), "accepted");
});

test("the packed package installs and runs where only its files are (npm pack, npm install)", () => {
  const dir = mkdtempSync(join(tmpdir(), "rebound-pack-"));
  const packed = spawnSync("npm", ["pack", "--silent", "--pack-destination", dir], {
    cwd: fileURLToPath(new URL("..", here)),
    encoding: "utf8",
  });
  assert.equal(packed.status, 0, packed.stderr);
  const tarball = join(dir, packed.stdout.trim().split("\n").pop());
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  const installed = spawnSync(
    "npm",
    ["install", "--offline", "--no-audit", "--no-fund", "--silent", tarball],
    { cwd: dir, encoding: "utf8" },
  );
  assert.equal(installed.status, 0, installed.stderr);
  // Both entries, from the installed copy: the main one loads itself, the manual one takes
  // the exported .wasm.
  const consumer = `
    import { AgentMachine, userText, simulate } from "rebound-agent";
    import { createRequire } from "node:module";
    const machine = new AgentMachine();
    machine.handle(0, userText("hi"));
    const wasm = createRequire(import.meta.url).resolve("rebound-agent/rebound_bg.wasm");
    console.log(JSON.stringify({ kinds: machine.drain().map((a) => a.type), ok: simulate("blip", 1).succeeded, wasm }));
  `;
  const ran = spawnSync(process.execPath, ["--input-type=module", "-e", consumer], {
    cwd: dir,
    encoding: "utf8",
  });
  assert.equal(ran.status, 0, ran.stderr);
  const out = JSON.parse(ran.stdout);
  assert.deepEqual(out.kinds, ["append_message", "send_request"]);
  assert.equal(out.ok, true);
  assert.ok(out.wasm.startsWith(join(dir, "node_modules", "rebound-agent")), out.wasm);
  rmSync(dir, { recursive: true, force: true });
});
