// The outage playground in a real headless browser (Debian's Chromium, driven by
// playwright-core): the page loads the package from a static file server, a run draws its
// charts (an SVG group per agent, a rect per second), and the numbers it shows are the row
// `rebound sim --compare` prints for the same outage model, policy and seed.
//
// Chromium is /usr/bin/chromium ($CHROMIUM names another); without it the test fails,
// unless REBOUND_SKIP_BROWSER=1 (a developer's choice, never CI's).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { extname, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { cells, compareRow, compareTable } from "./sim-cli.js";

const root = fileURLToPath(new URL("..", import.meta.url)); // js/
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
const skip = process.env.REBOUND_SKIP_BROWSER === "1";

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".wasm": "application/wasm",
  ".json": "application/json",
};

/** A static file server of js/ on a free loopback port (GET only, nothing outside js/). */
function staticServer() {
  const server = createServer(async (req, res) => {
    const path = decodeURIComponent(new URL(req.url, "http://x").pathname);
    const file = normalize(`${root}${sep}${path}`);
    if (req.method !== "GET" || !file.startsWith(root) || file.includes(`${sep}node_modules${sep}`)) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve({ server, port: server.address().port })),
  );
}

let browser;
let site;

before(async () => {
  if (skip) return;
  if (!existsSync(chromiumPath)) {
    throw new Error(
      `no Chromium at ${chromiumPath}: install Debian's (apt-get install chromium) or set ` +
        "CHROMIUM to one; REBOUND_SKIP_BROWSER=1 skips this test (never in CI)",
    );
  }
  if (!existsSync(new URL("../pkg/rebound_bg.wasm", import.meta.url))) {
    throw new Error("js/pkg/ is not built: run js/build.sh first");
  }
  const { chromium } = await import("playwright-core");
  browser = await chromium.launch({
    executablePath: chromiumPath,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  site = await staticServer();
});

after(async () => {
  await browser?.close();
  site?.server.close();
});

/** A page of the playground, failing the test on any error the page logs or throws. */
async function playground(t, query = "") {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console error: ${m.text()}`);
  });
  t.after(() => page.close());
  await page.goto(`http://127.0.0.1:${site.port}/playground/index.html${query}`);
  // The page says it is ready (or running a deep link's run) once the simulator loaded.
  await page.waitForSelector("body[data-state]");
  assert.notEqual(await page.getAttribute("body", "data-state"), "error", await page.textContent("#status"));
  return { page, problems };
}

/** Runs the page's form with these choices and waits for its result. */
async function runOn(page, { model, policy, seed, agents }) {
  await page.selectOption("#model", model);
  await page.selectOption("#policy", policy);
  await page.fill("#seed", String(seed));
  await page.fill("#agents", String(agents));
  await page.click("#run");
  await page.waitForSelector("body[data-state=done], body[data-state=error]", {
    timeout: 300_000,
  });
  const state = await page.getAttribute("body", "data-state");
  assert.equal(state, "done", await page.textContent("#status"));
}

/** What the page shows: its numbers and its table row. */
async function shown(page) {
  return page.evaluate(() => {
    const fields = {};
    for (const dd of document.querySelectorAll("[data-field]")) {
      fields[dd.dataset.field] = dd.textContent;
    }
    return { fields, row: document.getElementById("table-row").textContent };
  });
}

test("the playground loads, lists every outage model and policy", { skip }, async (t) => {
  const { page, problems } = await playground(t);
  const models = await page.$$eval("#model option", (os) => os.map((o) => o.value));
  const policies = await page.$$eval("#policy option", (os) => os.map((o) => o.value));
  assert.ok(models.includes("brownout") && models.includes("total-outage"), String(models));
  assert.equal(policies[0], "rebound");
  assert.ok(policies.includes("vercel-ai") && policies.length > 10, String(policies));
  assert.match(await page.textContent("#status"), /Ready/);
  assert.deepEqual(problems, []);
});

for (const [model, policy, seed] of [
  ["brownout", "rebound", 1],
  ["total-outage", "anthropic-sdk-python", 2],
]) {
  test(`a run of ${model} under ${policy} draws its charts and shows rebound sim's numbers`, {
    skip,
    timeout: 900_000,
  }, async (t) => {
    const table = compareTable(seed); // `rebound sim --compare --seed <seed>`, 1,000 agents
    const { page, problems } = await playground(t);
    await runOn(page, { model, policy, seed, agents: 1000 });

    // The charts: one group per agent (1,000), one rect per second of requests.
    const agents = await page.$$eval("#attempts-chart svg g.agent", (gs) => gs.length);
    assert.equal(agents, 1000);
    const attempts = await page.$$eval("#attempts-chart svg circle.attempt", (cs) => cs.length);
    const seconds = await page.$$eval("#rate-chart svg rect.second", (rs) =>
      rs.map((r) => Number(r.dataset.requests)),
    );
    assert.ok(seconds.length > 0);
    const lines = await page.$$eval("#rate-chart svg path.rate", (ps) => ps.length);
    assert.equal(lines, policy === "rebound" ? 1 : 2, "the policy's line, and rebound's dashed");

    // The numbers: the CLI's row for the same model, policy and seed.
    const cli = compareRow(table, model, policy);
    const { fields, row } = await shown(page);
    assert.equal(row, cli);
    const [, , success, p50, p99, perTurn, perAgent, peak] = cells(cli);
    assert.deepEqual(
      {
        success: fields.success,
        p50: fields.p50,
        p99: fields.p99,
        perTurn: fields["requests-per-turn"],
        perAgent: fields["requests-per-agent"],
        peak: fields.peak,
      },
      { success, p50, p99, perTurn, perAgent, peak },
    );
    assert.equal(fields.agents, "1000");
    const completed = Number(fields.completed);
    assert.equal(completed + Number(fields.failed), 1000);
    assert.equal((completed / 10).toFixed(1), success.replace(" %", ""));
    // Every request drawn is one the row counts: a dot per attempt, per second in the bars.
    const requests = Number(fields.requests);
    assert.equal(requests.toString(), fields.requests);
    assert.equal((requests / 1000).toFixed(2), perAgent);
    assert.equal(seconds.reduce((a, b) => a + b, 0), requests);
    assert.equal(attempts, requests, "a dot per request");
    assert.deepEqual(problems, []);
  });
}

test("a deep link runs the playground, and a bad seed is refused on the page", { skip }, async (t) => {
  const { page, problems } = await playground(
    t,
    "?model=blip&policy=vercel-ai&seed=4&agents=50&run",
  );
  await page.waitForSelector("body[data-state=done]", { timeout: 120_000 });
  assert.equal(await page.$$eval("#attempts-chart svg g.agent", (gs) => gs.length), 50);
  assert.match(await page.textContent("#results-title"), /blip — vercel-ai \(seed 4, 50 agents\)/);
  await page.fill("#seed", "-3");
  await page.evaluate(() =>
    document.getElementById("controls").dispatchEvent(new Event("submit", { cancelable: true })),
  );
  assert.match(await page.textContent("#status"), /seed is a whole number/);
  assert.deepEqual(problems, []);
});
