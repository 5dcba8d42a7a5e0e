// `rebound-agent/manual` loads nothing on import, as an edge runtime needs (Cloudflare Workers
// import a `.wasm` as a compiled WebAssembly.Module and forbid fetching it): before
// `initRebound` every call is a ReboundError saying what to do; after it, with the module
// compiled by the caller, the package works as the main entry does. Each case runs in a
// fresh Node process, since the WebAssembly is loaded once per process.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

function run(source) {
  const ran = spawnSync(process.execPath, ["--input-type=module", "-e", source], {
    cwd: new URL("..", import.meta.url),
    encoding: "utf8",
  });
  assert.equal(ran.status, 0, ran.stderr);
  return JSON.parse(ran.stdout);
}

test("before initRebound, the manual entry has loaded nothing and says so", () => {
  const out = run(`
    import { AgentMachine, ReboundError, simulate } from "rebound-agent/manual";
    const seen = [];
    for (const f of [() => new AgentMachine(), () => simulate("blip", 1)]) {
      try { f(); seen.push("ran"); } catch (e) { seen.push([e instanceof ReboundError, e.message]); }
    }
    console.log(JSON.stringify(seen));
  `);
  for (const [typed, message] of out) {
    assert.equal(typed, true);
    assert.match(message, /not loaded.*initRebound/);
  }
});

test("initRebound with a compiled WebAssembly.Module, as Workers import it, runs the package", async () => {
  const out = run(`
    import { readFile } from "node:fs/promises";
    import { createRequire } from "node:module";
    import { initRebound, AgentMachine, userText, simulate } from "rebound-agent/manual";
    // The file the package exports as "rebound-agent/rebound_bg.wasm", compiled by the caller.
    const path = createRequire(import.meta.url).resolve("rebound-agent/rebound_bg.wasm");
    const module = await WebAssembly.compile(await readFile(path));
    await initRebound(module);
    await initRebound(module); // once: a second call is harmless
    const machine = new AgentMachine({ seed: 1 });
    machine.handle(0, userText("hi"));
    const kinds = machine.drain().map((a) => a.type);
    console.log(JSON.stringify({ kinds, trace: simulate("blip", 1).trace }));
  `);
  assert.deepEqual(out.kinds, ["append_message", "send_request"]);
  // The simulator in the manually loaded package wrote the main entry's trace, byte for byte.
  const main = await import("rebound-agent");
  assert.equal(out.trace, main.simulate("blip", 1).trace);
});

test("the main entry and the manual one are the same package", async () => {
  const main = await import("rebound-agent");
  const manual = await import("rebound-agent/manual");
  assert.equal(main.AgentMachine, manual.AgentMachine);
  assert.equal(typeof manual.initRebound, "function");
});
