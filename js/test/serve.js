// Shared by the example tests: the `rebound` CLI (its fake provider, `rebound serve`, and
// `rebound replay`), and the examples compiled by the repository's TypeScript. No tests here.

import { spawn, spawnSync } from "node:child_process";
import { accessSync, constants, mkdtempSync, openSync, readFileSync, closeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The npm package's folder (js/). */
export const JS = fileURLToPath(new URL("..", import.meta.url));

/**
 * The `rebound` binary: $REBOUND_BIN, else the workspace's debug build (../target/debug, or
 * $CARGO_TARGET_DIR/debug). Missing, it is a failure that says how to build it: CI builds it
 * with `cargo test --workspace` before these tests run, so none is skipped.
 */
export function reboundBin() {
  const candidates = [
    process.env.REBOUND_BIN,
    join(JS, "..", "target", "debug", "rebound"),
    process.env.CARGO_TARGET_DIR && join(process.env.CARGO_TARGET_DIR, "debug", "rebound"),
  ].filter(Boolean);
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      // the next one
    }
  }
  throw new Error(
    `the rebound CLI is not built (looked for ${candidates.join(", ")}): run ` +
      "`cargo build -p rebound-cli` at the repository's root, or set REBOUND_BIN to the binary",
  );
}

/**
 * Compiles the examples with the repository's TypeScript (tsconfig.examples.json) into
 * `dist/<name>/` (each test file its own folder: test files run side by side), and returns
 * that folder.
 */
export function compileExamples(name) {
  const outDir = join(JS, "dist", name);
  const tsc = join(JS, "node_modules", "typescript", "bin", "tsc");
  const result = spawnSync(process.execPath, [tsc, "-p", "tsconfig.examples.json", "--outDir", outDir], {
    cwd: JS,
    encoding: "utf8",
  });
  if (result.status !== 0) {
    throw new Error(`tsc failed on the examples:\n${result.stdout}${result.stderr}`);
  }
  return outDir;
}

/** `rebound serve --scenario NAME` on a free loopback port, its request log in a file. */
export class Server {
  /** Starts the server; `await server.ready` before using `url`. */
  constructor(scenario, seed = 0) {
    const dir = mkdtempSync(join(tmpdir(), "rebound-serve-"));
    this.logPath = join(dir, "requests.log");
    // Its request log goes to stderr: a file, so that a long run never fills a pipe.
    const log = openSync(this.logPath, "w");
    this.process = spawn(reboundBin(), ["serve", "--scenario", scenario, "--seed", String(seed)], {
      stdio: ["ignore", "pipe", log],
    });
    closeSync(log);
    this.exited = new Promise((done) => this.process.once("exit", done));
    /** The base URL, once the server printed it. */
    this.ready = new Promise((done, fail) => {
      const lines = createInterface({ input: this.process.stdout });
      lines.once("line", (line) => {
        this.url = line.trim();
        if (this.url.startsWith("http://")) done(this.url);
        else fail(new Error(`rebound serve printed ${JSON.stringify(line)}`));
      });
      this.process.once("exit", (code) =>
        fail(new Error(`rebound serve exited (${code}) before printing its URL`)),
      );
    });
  }

  /** Stops the server (by its process id). */
  async stop() {
    if (this.process.exitCode === null && this.process.signalCode === null) {
      this.process.kill("SIGTERM");
      await this.exited;
    }
  }

  /** Stops the server and returns its request log: one line per request it received. */
  async requests() {
    await this.stop();
    return readFileSync(this.logPath, "utf8")
      .split("\n")
      .filter((line) => line.startsWith("#"));
  }
}

/** Starts `rebound serve --scenario NAME --seed SEED` and waits for its URL. */
export async function serve(scenario, seed = 0) {
  const server = new Server(scenario, seed);
  await server.ready;
  return server;
}

/** `rebound replay TRACE`: its exit status and what it printed. */
export function replayCli(tracePath) {
  const result = spawnSync(reboundBin(), ["replay", tracePath], { encoding: "utf8" });
  return { status: result.status, text: result.stdout + result.stderr };
}

/** A fresh folder for a run (its project files and trace). */
export function tempDir(prefix = "rebound-agent-") {
  return mkdtempSync(join(tmpdir(), prefix));
}
