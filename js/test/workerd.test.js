// The package in Cloudflare's Workers runtime (workerd, from npm, a devDependency): a worker
// imports the `.wasm` as Workers do (a compiled WebAssembly.Module module), loads it with
// `initRebound` of the manual entry, runs a machine and the simulator, and answers what
// Node's copy of the package answers: the same actions, the same simulator trace.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { simulate } from "../lib/index.js";

const JS = fileURLToPath(new URL("..", import.meta.url));
const workerd = join(JS, "node_modules", ".bin", "workerd");

const WORKER = `
import wasm from "./js/pkg/rebound_bg.wasm";
import { initRebound, AgentMachine, userText, simulate } from "./js/lib/manual.js";

export default {
  async fetch() {
    await initRebound(wasm);
    const machine = new AgentMachine({ seed: 1 });
    machine.handle(0, userText("hi"));
    const kinds = machine.drain().map((a) => a.type);
    return Response.json({ kinds, trace: simulate("blip", 1).trace });
  },
};
`;

/** A free loopback port. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** The worker's folder: the worker, the package's modules and its `.wasm`, and workerd's config. */
function workerFolder(port) {
  const dir = mkdtempSync(join(tmpdir(), "rebound-workerd-"));
  cpSync(join(JS, "lib"), join(dir, "js", "lib"), { recursive: true, filter: (p) => !p.endsWith(".d.ts") });
  cpSync(join(JS, "pkg", "rebound.js"), join(dir, "js", "pkg", "rebound.js"));
  cpSync(join(JS, "pkg", "rebound_bg.wasm"), join(dir, "js", "pkg", "rebound_bg.wasm"));
  writeFileSync(join(dir, "worker.js"), WORKER);
  const modules = [
    '(name = "worker.js", esModule = embed "worker.js")',
    ...readdirSync(join(dir, "js", "lib")).map(
      (f) => `(name = "js/lib/${f}", esModule = embed "js/lib/${f}")`,
    ),
    '(name = "js/pkg/rebound.js", esModule = embed "js/pkg/rebound.js")',
    '(name = "js/pkg/rebound_bg.wasm", wasm = embed "js/pkg/rebound_bg.wasm")',
  ];
  writeFileSync(
    join(dir, "config.capnp"),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .w) ],
  sockets = [ (name = "http", address = "127.0.0.1:${port}", http = (), service = "main") ],
);
const w :Workerd.Worker = (
  modules = [ ${modules.join(",\n    ")} ],
  compatibilityDate = "2026-11-01",
);
`,
  );
  return dir;
}

test("the manual entry runs in workerd with the .wasm imported as a module", async () => {
  const port = await freePort();
  const dir = workerFolder(port);
  const server = spawn(workerd, ["serve", join(dir, "config.capnp")], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  server.stderr.on("data", (chunk) => (stderr += chunk));
  const exited = new Promise((done) => server.once("exit", done));
  try {
    let answer;
    for (let tries = 0; answer === undefined && tries < 100; tries += 1) {
      try {
        answer = await fetch(`http://127.0.0.1:${port}/`);
      } catch {
        if (server.exitCode !== null) break;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    assert.ok(answer, `workerd did not answer (is js/node_modules installed? npm ci):\n${stderr}`);
    const body = await answer.text();
    assert.equal(answer.status, 200, `${body}\n${stderr}`);
    const out = JSON.parse(body);
    assert.deepEqual(out.kinds, ["append_message", "send_request"]);
    assert.equal(out.trace, simulate("blip", 1).trace);
  } finally {
    server.kill();
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
});
