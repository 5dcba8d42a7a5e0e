// The outage playground: rebound's simulator (the npm package's WebAssembly, from ../pkg/)
// runs one retry policy in one outage model of `rebound sim --compare`, and the page draws
// what the study's SVG charts show: the requests per second through the outage (the outage's
// window shaded, rebound's line dashed for reference), and each agent's attempts on a
// timeline. The numbers are the simulator's row; nothing is decided or counted here, only
// drawn.

// Imported when the page runs (not statically), so that a package without its WebAssembly
// says so on the page instead of leaving it loading.
let lib;

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);

/** An SVG element of `name` with `attrs`, and `children` appended. */
function svg(name, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const child of children) el.append(child);
  return el;
}

/** A `<title>` (the tooltip) of `text`. */
function title(text) {
  return svg("title", {}, text);
}

/** The smallest "nice" number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten) ≥ x, as the study's charts. */
function niceCeil(x) {
  if (!(x > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * p >= x) return m * p;
  return 10 * p;
}

/** About `n` round ticks from 0 to `max`. */
function ticks(max, n) {
  const raw = max / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw) ?? raw;
  const out = [];
  for (let t = 0; t <= max + 1e-9; t += step) out.push(Math.round(t * 1e6) / 1e6);
  return out;
}

const WIDTH = 960;
const MARGIN = { left: 60, right: 20, top: 16, bottom: 44 };

/** A plot area: scales from data (seconds, y) to pixels, and the axes' group. */
function frame(height, xMax, yMax, { yLabel, yTicks = true, xLabel = "virtual time (s)" }) {
  const w = WIDTH - MARGIN.left - MARGIN.right;
  const h = height - MARGIN.top - MARGIN.bottom;
  const x = (s) => MARGIN.left + (s / xMax) * w;
  const y = (v) => MARGIN.top + h - (v / yMax) * h;
  const root = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${height}`,
    role: "img",
    preserveAspectRatio: "xMidYMid meet",
  });
  const grid = svg("g", { class: "grid" });
  const axis = svg("g", { class: "axis" });
  for (const t of ticks(xMax, 8)) {
    grid.append(svg("line", { x1: x(t), x2: x(t), y1: MARGIN.top, y2: MARGIN.top + h }));
    axis.append(
      svg("text", { x: x(t), y: MARGIN.top + h + 16, "text-anchor": "middle" }, String(t)),
    );
  }
  if (yTicks) {
    for (const t of ticks(yMax, 5)) {
      grid.append(svg("line", { x1: MARGIN.left, x2: MARGIN.left + w, y1: y(t), y2: y(t) }));
      axis.append(
        svg("text", { x: MARGIN.left - 6, y: y(t) + 4, "text-anchor": "end" }, String(t)),
      );
    }
  }
  axis.append(
    svg("line", { x1: MARGIN.left, x2: MARGIN.left + w, y1: MARGIN.top + h, y2: MARGIN.top + h }),
    svg("line", { x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: MARGIN.top + h }),
    svg("text", { x: MARGIN.left + w / 2, y: height - 6, "text-anchor": "middle" }, xLabel),
    svg(
      "text",
      {
        x: 14,
        y: MARGIN.top + h / 2,
        "text-anchor": "middle",
        transform: `rotate(-90 14 ${MARGIN.top + h / 2})`,
      },
      yLabel,
    ),
  );
  root.append(grid);
  return { root, axis, x, y, w, h };
}

/** The outage windows, shaded (in seconds, clipped to the plot). */
function shadeOutages(f, model, xMax) {
  const g = svg("g", { class: "outages" });
  for (const [from, until] of model.outagesMs) {
    const a = from / 1000;
    const b = Math.min(until / 1000, xMax);
    if (a < b) {
      g.append(
        svg(
          "rect",
          { class: "outage", x: f.x(a), y: MARGIN.top, width: f.x(b) - f.x(a), height: f.h },
          title(`outage from ${a} s to ${until / 1000} s`),
        ),
      );
    }
  }
  // Under the grid, as the study's charts shade it.
  f.root.insertBefore(g, f.root.firstChild);
}

/** A per-second series as a step line from 0 to `xMax` seconds (as the study's charts). */
function stepPath(f, perSec, xMax) {
  let d = `M ${f.x(0)} ${f.y(0)}`;
  perSec.forEach((n, s) => {
    d += ` L ${f.x(s)} ${f.y(n)} L ${f.x(Math.min(s + 1, xMax))} ${f.y(n)}`;
  });
  d += ` L ${f.x(Math.min(perSec.length, xMax))} ${f.y(0)} L ${f.x(xMax)} ${f.y(0)}`;
  return d;
}

function policyClass(policy) {
  return policy.name === "rebound" ? "own" : policy.budgeted ? "budgeted" : "";
}

/** The requests-per-second chart: one `rect.second` per second (its count in a tooltip), the policy's step line, rebound's dashed. */
function rateChart(run, reference, model, policy, xMax) {
  const yMax = niceCeil(
    Math.max(10, run.peakPerSec, reference ? reference.peakPerSec : 0) * 1.05,
  );
  const f = frame(320, xMax, yMax, { yLabel: "requests / s" });
  shadeOutages(f, model, xMax);
  const seconds = svg("g", { class: "seconds" });
  run.perSec.forEach((n, s) => {
    if (s >= xMax) return;
    seconds.append(
      svg(
        "rect",
        {
          class: "second",
          "data-second": s,
          "data-requests": n,
          x: f.x(s),
          y: MARGIN.top,
          width: Math.max(f.x(s + 1) - f.x(s), 0.5),
          height: f.h,
        },
        title(`${s}–${s + 1} s: ${n} requests, ${run.completedPerSec[s] ?? 0} turns completed`),
      ),
    );
  });
  f.root.append(seconds);
  f.root.append(
    svg("path", { class: `rate ${policyClass(policy)}`, d: stepPath(f, run.perSec, xMax) }),
  );
  if (reference) {
    f.root.append(
      svg("path", { class: "rate reference", d: stepPath(f, reference.perSec, xMax) }),
    );
  }
  f.root.append(f.axis);
  const legend = svg("g", { class: "legend" });
  legend.append(
    svg(
      "text",
      { x: MARGIN.left + f.w - 6, y: MARGIN.top + 14, "text-anchor": "end" },
      `${policy.name}: peak ${run.peakPerSec} / s` +
        (reference ? ` — dashed: rebound, peak ${reference.peakPerSec} / s` : ""),
    ),
  );
  f.root.append(legend);
  return f.root;
}

/** The attempts chart: one `g.agent` per agent, a dot per request, a bar at completion, a cross where it gave up. */
function attemptsChart(run, model, xMax) {
  const agents = run.turns.length;
  // At most 600 px of agents: past 75 agents a row is thinner than 8 px, past 1,200 thinner
  // than half a pixel (the dots overlap, as the fleet's requests do).
  const row = Math.min(8, 600 / Math.max(agents, 1));
  const height = MARGIN.top + MARGIN.bottom + Math.max(60, row * agents);
  const f = frame(height, xMax, agents, { yLabel: "agent", yTicks: false });
  shadeOutages(f, model, xMax);
  const r = Math.max(0.7, Math.min(3, row / 2));
  const rows = svg("g", { class: "agents" });
  run.turns.forEach((turn, i) => {
    const cy = MARGIN.top + (i + 0.5) * row;
    const end = turn.completedMs ?? turn.requestsMs.at(-1) ?? turn.startMs;
    const g = svg("g", {
      class: `agent ${turn.completedMs === null ? "failed" : "completed"}`,
      "data-agent": i,
    });
    g.append(
      title(
        `agent ${i}: started at ${turn.startMs / 1000} s, ${turn.requestsMs.length} requests, ` +
          (turn.completedMs === null
            ? "gave up"
            : `completed at ${turn.completedMs / 1000} s`),
      ),
      svg("line", {
        class: "span",
        x1: f.x(turn.startMs / 1000),
        x2: f.x(Math.min(end / 1000, xMax)),
        y1: cy,
        y2: cy,
      }),
    );
    for (const at of turn.requestsMs) {
      if (at / 1000 > xMax) continue;
      g.append(svg("circle", { class: "attempt", cx: f.x(at / 1000), cy, r }));
    }
    if (turn.completedMs !== null && turn.completedMs / 1000 <= xMax) {
      const cx = f.x(turn.completedMs / 1000);
      g.append(svg("line", { class: "done", x1: cx, x2: cx, y1: cy - r - 1, y2: cy + r + 1 }));
    } else if (turn.completedMs === null && end / 1000 <= xMax) {
      const cx = f.x(end / 1000) + r + 3;
      const k = r + 1;
      g.append(
        svg("path", {
          class: "gave-up",
          d: `M ${cx - k} ${cy - k} L ${cx + k} ${cy + k} M ${cx - k} ${cy + k} L ${cx + k} ${cy - k}`,
        }),
      );
    }
    rows.append(g);
  });
  f.root.append(rows, f.axis);
  return f.root;
}

/** The cells of a Markdown table line (`| a | b |` → [a, b]). */
function cells(line) {
  return line
    .split("|")
    .slice(1, -1)
    .map((c) => c.trim());
}

const state = { models: [], policies: [] };

function show(run, reference, model, policy, seed, agents) {
  const row = run.row;
  // The row's formatted cells are the simulator's (rebound-study's table), shown as they are.
  const [, , success, p50, p99, perTurn, perAgent, peak] = cells(row.tableRow);
  const field = (name, value) => {
    document.querySelector(`[data-field="${name}"]`).textContent = String(value);
  };
  field("agents", row.agents);
  field("completed", row.completed);
  field("failed", row.agents - row.completed);
  field("success", success);
  field("requests", row.requests);
  field("requests-per-turn", perTurn);
  field("requests-per-agent", perAgent);
  field("p50", p50);
  field("p99", p99);
  field("peak", peak);
  $("results-title").textContent = `${model.name} — ${policy.name} (seed ${seed}, ${agents} agents)`;
  $("command").textContent =
    agents === 1000
      ? `rebound sim --compare --seed ${seed}`
      : `rebound sim --compare --seed ${seed} (with ${agents} agents per model; the CLI runs 1,000)`;
  $("table-header").textContent = run.tableHeader;
  $("table-row").textContent = row.tableRow;

  const lastMs = Math.max(
    run.perSec.length * 1000,
    ...run.turns.map((t) => t.completedMs ?? t.requestsMs.at(-1) ?? t.startMs),
    reference ? reference.perSec.length * 1000 : 0,
  );
  const xMax = niceCeil(Math.max(10, lastMs / 1000));
  const rate = $("rate-chart");
  rate.replaceChildren(rateChart(run, reference, model, policy, xMax));
  const attempts = $("attempts-chart");
  attempts.className = `chart ${policyClass(policy)}`;
  attempts.replaceChildren(attemptsChart(run, model, xMax));
  $("results").hidden = false;
}

function setStatus(text, error = false) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("error", error);
}

function describeModel() {
  const model = state.models.find((m) => m.name === $("model").value);
  $("model-description").textContent = model ? `${model.description}.` : "";
}

async function run(event) {
  event?.preventDefault();
  const model = state.models.find((m) => m.name === $("model").value);
  const policy = state.policies.find((p) => p.name === $("policy").value);
  const seed = $("seed").value.trim();
  const agents = Number($("agents").value);
  if (!model || !policy) return;
  if (!/^\d+$/.test(seed)) {
    setStatus("The seed is a whole number from 0 up.", true);
    return;
  }
  if (!Number.isInteger(agents) || agents < 1 || agents > 5000) {
    setStatus("Agents: a whole number from 1 to 5,000.", true);
    return;
  }
  $("run").disabled = true;
  document.body.dataset.state = "running";
  setStatus(`Running ${agents} agents through ${model.name} under ${policy.name}…`);
  // Let the page paint the status before the simulator holds the thread.
  await new Promise((resolve) => setTimeout(resolve, 20));
  try {
    const started = performance.now();
    const options = { model: model.name, seed, agents };
    const result = lib.runOutage({ ...options, policy: policy.name });
    const reference =
      $("reference").checked && policy.name !== "rebound"
        ? lib.runOutage({ ...options, policy: "rebound" })
        : null;
    const ms = Math.round(performance.now() - started);
    show(result, reference, model, policy, seed, agents);
    setStatus(`Simulated in ${ms} ms of your time.`);
    document.body.dataset.state = "done";
  } catch (e) {
    setStatus(`The simulator refused: ${e.message}`, true);
    document.body.dataset.state = "error";
  } finally {
    $("run").disabled = false;
  }
}

function init() {
  state.models = lib.outageModels();
  state.policies = lib.outagePolicies();
  for (const m of state.models) $("model").append(new Option(m.name, m.name));
  for (const p of state.policies) $("policy").append(new Option(p.name, p.name));
  // Deep links: ?model=brownout&policy=vercel-ai&seed=1&agents=1000 (and &run to run it).
  const params = new URLSearchParams(location.search);
  for (const id of ["model", "policy", "seed", "agents"]) {
    if (params.has(id)) $(id).value = params.get(id);
  }
  describeModel();
  $("model").addEventListener("change", describeModel);
  $("controls").addEventListener("submit", run);
  $("run").disabled = false;
  setStatus("Ready: pick an outage and a policy, then Run.");
  document.body.dataset.state = "ready";
  if (params.has("run")) run();
}

try {
  lib = await import("../lib/index.js");
  init();
} catch (e) {
  setStatus(
    `The simulator could not load (${e.message}); is the package built? (js/build.sh writes js/pkg/)`,
    true,
  );
  document.body.dataset.state = "error";
}
