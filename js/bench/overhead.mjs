// Events per second through the machine from JavaScript: the per-call cost a JavaScript agent
// pays, measured as python/bench/machine_overhead.py measures Python's, on the same workload.
//
// The workload is core's `machine` bench (core/benches/machine.rs) event for event: 20 turns,
// each with three 529 failures, a stream cut, a tool call and its result, then a text answer
// (210 events per run), driven synchronously. Two JavaScript drivers:
//
// - api: `AgentMachine` of the package (lib/machine.js): events as objects, actions parsed
//   into objects, conversations as Snapshots (what an agent written against the package pays);
//   each run ends with `free()`, and the event loop turns between samples: without either,
//   a synchronous loop keeps every machine's WebAssembly memory until it ends and slows down
//   tenfold over a few thousand runs;
// - raw: the native `Machine` of the WebAssembly (pkg/rebound.js) with events as JSON text
//   and actions parsed with one JSON.parse (the binding's floor: the JSON shape both ways).
//
// Build the package's release WebAssembly first (the `wasm` profile; a dev build is ten
// times slower and measures nothing of interest):
//
//     REBOUND_WASM_PROFILE=wasm bash js/build.sh
//     node js/bench/overhead.mjs [runs] [--rounds N] [--native BIN]
//
// With `--native BIN` (the criterion binary `cargo bench -p rebound-core --bench machine
// --no-run` names), every round runs the native bench first, then both drivers, and prints
// the ratios round by round, as docs/performance.md's Python section compares them.

import { execFileSync } from "node:child_process";
import { AgentMachine, userText } from "../lib/index.js";
import { native } from "../lib/native.js";

const CONFIG = {
  tools: [{ name: "read", description: "read a file", input_schema: { type: "object" } }],
  retry: { max_attempts: 6 },
};
const OVERLOADED = { kind: "unavailable", status: 529, message: "Overloaded" };
const CUT = { kind: "stream_malformed", message: "stream ended before the message completed", transport: "stream_cut" };
const DONE = { message: { role: "assistant", content: [{ type: "text", text: "done" }] }, stop_reason: "end_turn" };

function toolUse(turn) {
  return {
    message: {
      role: "assistant",
      content: [{ type: "tool_use", id: `t${turn}`, name: "read", input: { path: "src/lib.rs" } }],
    },
    stop_reason: "tool_use",
  };
}

/** One run through the package's AgentMachine; the number of events handled. */
function apiRun(turns) {
  const m = new AgentMachine({ config: CONFIG, seed: 7 });
  try {
    return apiDrive(m, turns);
  } finally {
    m.free();
  }
}

function apiDrive(m, turns) {
  let now = 0;
  let events = 0;
  let failures = 0;
  let turn = 0;
  const inbox = [userText("go")];
  while (inbox.length > 0) {
    events += 1;
    m.handle(now, inbox.pop());
    for (let a = m.poll(); a !== undefined; a = m.poll()) {
      switch (a.type) {
        case "send_request":
          if (failures < 4) {
            failures += 1;
            inbox.push({ type: "provider_failed", request: a.request, failure: failures === 4 ? CUT : OVERLOADED });
          } else {
            failures = 0;
            turn += 1;
            inbox.push({ type: "provider_succeeded", request: a.request, response: turn <= turns ? toolUse(turn) : DONE });
          }
          break;
        case "sleep":
          now += a.delay_ms;
          inbox.push({ type: "timer_fired", timer: a.timer });
          break;
        case "run_tools":
          inbox.push({
            type: "tools_finished",
            batch: a.batch,
            outcome: {
              per_call: a.calls.map((c) => ({
                tool_use_id: c.id,
                result: { Ok: { parts: [{ type: "text", text: "fn main() {}" }] } },
              })),
            },
          });
          break;
        case "finish":
        case "fail":
          return events;
      }
    }
  }
  return events;
}

/** One run through the native Machine, JSON text both ways; the number of events handled. */
function rawRun(turns) {
  const m = new native.Machine(JSON.stringify(CONFIG), 7, undefined, false, []);
  let now = 0;
  let events = 0;
  let failures = 0;
  let turn = 0;
  const inbox = [JSON.stringify(userText("go"))];
  try {
    while (inbox.length > 0) {
      events += 1;
      m.handle(now, inbox.pop());
      for (let text = m.poll(); text !== undefined; text = m.poll()) {
        const a = JSON.parse(text);
        switch (a.type) {
          case "send_request":
            if (failures < 4) {
              failures += 1;
              inbox.push(JSON.stringify({ type: "provider_failed", request: a.request, failure: failures === 4 ? CUT : OVERLOADED }));
            } else {
              failures = 0;
              turn += 1;
              inbox.push(JSON.stringify({ type: "provider_succeeded", request: a.request, response: turn <= turns ? toolUse(turn) : DONE }));
            }
            break;
          case "sleep":
            now += a.delay_ms;
            inbox.push(`{"type":"timer_fired","timer":${a.timer}}`);
            break;
          case "run_tools":
            inbox.push(
              JSON.stringify({
                type: "tools_finished",
                batch: a.batch,
                outcome: {
                  per_call: a.calls.map((c) => ({
                    tool_use_id: c.id,
                    result: { Ok: { parts: [{ type: "text", text: "fn main() {}" }] } },
                  })),
                },
              }),
            );
            break;
          case "finish":
          case "fail":
            return events;
        }
      }
    }
    return events;
  } finally {
    m.free();
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** Lets the event loop turn, so the garbage collector's finalizers run as in an agent. */
const turn = () => new Promise((resolve) => setImmediate(resolve));

/** Five samples of `runs` runs after a warm-up: the events per run and each sample's events/s. */
async function measure(run, runs) {
  const events = run(20);
  for (let i = 0; i < Math.max(3, runs / 10); i++) run(20);
  const rates = [];
  for (let s = 0; s < 5; s++) {
    await turn();
    const start = process.hrtime.bigint();
    for (let i = 0; i < runs; i++) run(20);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    rates.push((events * runs) / seconds);
  }
  return { events, rates };
}

/** The native bench's median throughput, in events/s, from criterion's `thrpt:` line. */
function nativeRate(binary) {
  const out = execFileSync(binary, ["--bench", "machine/retry", "--noplot", "--warm-up-time", "1", "--measurement-time", "3"], {
    encoding: "utf8",
  });
  const m = /thrpt:\s*\[\S+ \S+ (\S+) (\w*)elem\/s/.exec(out);
  if (m === null) throw new Error(`no throughput in the native bench's output:\n${out}`);
  return Number(m[1]) * { "": 1, K: 1e3, M: 1e6, G: 1e9 }[m[2]];
}

async function main() {
  const args = process.argv.slice(2);
  const flag = (name) => {
    const i = args.indexOf(name);
    return i < 0 ? undefined : args.splice(i, 2)[1];
  };
  const nativeBinary = flag("--native");
  const rounds = Number(flag("--rounds") ?? 1);
  const runs = Number(args[0] ?? 200);
  console.log(`node ${process.version}, ${runs} runs per sample, 5 samples, ${rounds} round(s)`);
  const ratios = { api: [], raw: [] };
  for (let round = 1; round <= rounds; round++) {
    const nativeEvents = nativeBinary === undefined ? undefined : nativeRate(nativeBinary);
    if (nativeEvents !== undefined) {
      console.log(`round ${round}: native ${(nativeEvents / 1e6).toFixed(2)} M events/s (${(1e6 / nativeEvents).toFixed(3)} µs/event)`);
    }
    for (const [name, run] of [["api", apiRun], ["raw", rawRun]]) {
      const { events, rates } = await measure(run, runs);
      const med = median(rates);
      const samples = rates.map((r) => (r / 1000).toFixed(1)).sort((a, b) => a - b).join(", ");
      let line = `${name.padEnd(4)} ${events} events/run  median ${(med / 1000).toFixed(1)} k events/s (${(1e6 / med).toFixed(2)} µs/event; samples ${samples} k)`;
      if (nativeEvents !== undefined) {
        ratios[name].push(nativeEvents / med);
        line += `  native ÷ ${name} ${(nativeEvents / med).toFixed(1)}×`;
      }
      console.log(line);
    }
  }
  if (nativeBinary !== undefined) {
    for (const name of ["raw", "api"]) {
      console.log(`median over ${rounds} rounds: native ÷ ${name} ${median(ratios[name]).toFixed(1)}× (rounds: ${ratios[name].map((r) => r.toFixed(1)).join(", ")})`);
    }
  }
}

await main();
