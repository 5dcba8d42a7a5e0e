// The rebound CLI, for the tests that check the package against it: where its binary is,
// `rebound serve` on a free port, and `rebound sim --compare`'s table. Not a test file
// itself: it only exports helpers.

import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The rebound binary: $REBOUND_BIN, else the workspace's debug build; throws how to build it. */
export function reboundBin() {
  const bin =
    process.env.REBOUND_BIN ||
    fileURLToPath(new URL("../../target/debug/rebound", import.meta.url));
  if (!existsSync(bin)) {
    throw new Error(
      `no rebound binary at ${bin}: build it with \`cargo build -p rebound-cli\` (from the ` +
        `repository's root; with CARGO_TARGET_DIR set, point REBOUND_BIN at ` +
        `$CARGO_TARGET_DIR/debug/rebound)`,
    );
  }
  return bin;
}

/** Runs the CLI with `args`: {status, stdout, stderr}. */
export function cli(args, options = {}) {
  const ran = spawnSync(reboundBin(), args, { encoding: "utf8", ...options });
  if (ran.error) throw ran.error;
  return ran;
}

/** Starts `rebound serve` with `args` on a free port; resolves to {url, stop}. */
export function serve(args) {
  const child = spawn(reboundBin(), ["serve", "--port", "0", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (d) => {
    stderr += d;
  });
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`rebound serve printed no address in 30 s:\n${stderr}`));
    }, 30_000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`rebound serve exited with ${code}:\n${stderr}`));
    });
    child.stdout.on("data", (d) => {
      out += d;
      const line = out.split("\n")[0];
      if (out.includes("\n") && line.startsWith("http://")) {
        clearTimeout(timer);
        child.removeAllListeners("exit");
        resolve({
          url: line.trim(),
          stop: () =>
            new Promise((done) => {
              if (child.exitCode !== null) return done();
              child.once("exit", () => done());
              child.kill("SIGTERM");
            }),
        });
      }
    });
  });
}

/** The cells of a Markdown table line (`| a | b |` → ["a", "b"]). */
export function cells(line) {
  return line
    .split("|")
    .slice(1, -1)
    .map((c) => c.trim());
}

const tables = new Map();

/**
 * What `rebound sim --compare --seed <seed>` prints (1,000 agents per outage model, every
 * model and policy; a few seconds), run once per seed and process.
 */
export function compareTable(seed = 1) {
  if (!tables.has(seed)) {
    const ran = cli(["sim", "--compare", "--seed", String(seed)], { maxBuffer: 1 << 24 });
    // Exit 1 means rebound missed its bar: the table is printed all the same.
    if (ran.status !== 0 && ran.status !== 1) {
      throw new Error(`rebound sim --compare exited with ${ran.status}:\n${ran.stderr}`);
    }
    tables.set(seed, ran.stdout);
  }
  return tables.get(seed);
}

/** The line of `table` for `model` and `policy` (its name without emphasis). */
export function compareRow(table, model, policy) {
  const line = table
    .split("\n")
    .find((l) => {
      const c = cells(l);
      return c[0] === model && c[1].replace(/^\*\*(.*)\*\*$/, "$1") === policy;
    });
  if (!line) throw new Error(`rebound sim --compare printed no row for ${model} / ${policy}`);
  return line;
}
