// The README's TypeScript loop is the package's API: its block, with the names it leaves to
// the reader declared, type-checks under tsc --strict against lib/index.d.ts, and its switch
// is exhaustive (a case taken out is an error).

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const JS = fileURLToPath(new URL("..", import.meta.url));
const readme = readFileSync(join(JS, "..", "README.md"), "utf8");

/** The first ```ts block of the README's JavaScript section. */
function loop() {
  const section = readme.slice(readme.indexOf("## JavaScript and TypeScript"));
  const block = /```ts\n([\s\S]*?)```/.exec(section);
  assert.ok(block, "the README's JavaScript section has a ts block");
  return block[1];
}

/** tsc --strict over `source` as a module inside the package (so "rebound-agent" resolves). */
function check(source, name) {
  const dir = join(JS, "dist", "readme");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${name}.ts`);
  const lines = source.split("\n");
  const imports = lines.filter((l) => l.startsWith("import "));
  const rest = lines.filter((l) => !l.startsWith("import "));
  const declared = [
    'import type { ToolSpec } from "rebound-agent";',
    "declare const TOOLS: ToolSpec[];",
    "declare const seed: number;",
    "declare const apiKey: string;",
    "declare const prompt: string;",
    "declare const model: string;",
  ];
  writeFileSync(file, [...imports, ...declared, ...rest, "export {};"].join("\n"));
  const tsc = join(JS, "node_modules", "typescript", "bin", "tsc");
  return spawnSync(
    process.execPath,
    [tsc, "--ignoreConfig", "--strict", "--noEmit", "--target", "es2022",
      "--module", "nodenext", "--moduleResolution", "nodenext", "--lib", "es2022,dom",
      "--types", "node", file],
    { cwd: JS, encoding: "utf8" },
  );
}

test("the README's loop type-checks against the package's types", () => {
  const ran = check(loop(), "loop");
  assert.equal(ran.status, 0, `tsc refused the README's loop:\n${ran.stdout}${ran.stderr}`);
});

test("the README's switch is exhaustive: without one case tsc refuses it", () => {
  const cut = loop().replace('case "note_budget": ', "");
  assert.notEqual(cut, loop(), "the block names note_budget");
  const ran = check(cut, "loop-cut");
  assert.notEqual(ran.status, 0, "tsc took a switch missing note_budget");
  assert.match(ran.stdout, /never/);
});
