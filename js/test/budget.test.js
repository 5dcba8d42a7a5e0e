// The shared retry budget from JavaScript: core's RetryBudget as it is (the same cases as
// python/tests/test_budget.py), typed errors for bad input, and SharedBudget answering the
// machines of a process.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";

import {
  AgentMachine,
  BudgetError,
  ConfigError,
  ReboundError,
  RetryBudget,
  SharedBudget,
  userText,
} from "../lib/index.js";

function charged(deadline, since = 0, target = 0) {
  return { kind: "charged", target, deadline, since };
}

function first(target = 0) {
  return { kind: "first_attempt", target, deadline: 0, since: 0 };
}

function budgetConfig({ capacity = 1, initial, perRequest = 0, perSuccess = 1, refill = 0, perAnsweredRetry = 0 } = {}) {
  return {
    capacity,
    initial: initial ?? capacity,
    deposit_per_request: perRequest,
    deposit_per_success: perSuccess,
    refill_per_sec: refill,
    deposit_per_answered_retry: perAnsweredRetry,
  };
}

const SUCCEEDED = { note: "succeeded", target: 0 };

// --- core's RetryBudget, through the binding ---

test("a queued request is granted when a success funds it", () => {
  const b = new RetryBudget(budgetConfig({ capacity: 1, perSuccess: 1 }));
  assert.equal(b.request(0, 1, charged(5_000)), "granted");
  assert.equal(b.request(10, 2, charged(5_000)), undefined);
  assert.equal(b.waiting, 1);
  assert.deepEqual(b.drainDecisions(), []);
  b.record(700, SUCCEEDED);
  assert.deepEqual(b.drainDecisions(), [[2, "granted"]]);
  assert.equal(b.waiting, 0);
  assert.deepEqual(b.stats(), { granted: 2, denied: 0, queued: 1, deposited_milli: 1_000 });
});

test("a waiting request is denied at its deadline, which is its wakeup", () => {
  const b = new RetryBudget(budgetConfig());
  b.request(0, 1, charged(5_000));
  assert.equal(b.request(0, 2, charged(800)), undefined);
  assert.equal(b.nextWakeup(), 800);
  b.tick(799);
  assert.deepEqual(b.drainDecisions(), []);
  b.tick(800);
  assert.deepEqual(b.drainDecisions(), [[2, "denied"]]);
  assert.equal(b.nextWakeup(), undefined);
  assert.equal(b.stats().denied, 1);
});

test("a request past its deadline is denied at once", () => {
  const b = new RetryBudget(budgetConfig());
  b.request(0, 1, charged(5_000));
  assert.equal(b.request(900, 2, charged(800)), "denied");
  assert.equal(b.waiting, 0);
});

test("refill grants the head at the next wakeup", () => {
  // 2.5 tokens a second: the next token is whole 400 ms after the bucket emptied.
  const b = new RetryBudget(budgetConfig({ perSuccess: 0, refill: 2.5 }));
  assert.equal(b.request(0, 1, charged(0)), "granted");
  assert.equal(b.request(0, 2, charged(60_000)), undefined);
  let now = 0;
  let decided = [];
  while ((decided = b.drainDecisions()).length === 0) {
    const wakeup = b.nextWakeup();
    assert.ok(wakeup !== undefined && wakeup > now);
    now = wakeup;
    b.tick(now);
  }
  assert.deepEqual([now, decided], [400, [[2, "granted"]]]);
});

test("a canceled request takes no token and its ticket is free again", () => {
  const b = new RetryBudget(budgetConfig());
  b.request(0, 1, charged(0));
  assert.equal(b.request(0, 2, charged(9_000)), undefined);
  assert.equal(b.cancel(2), true);
  assert.equal(b.cancel(2), false);
  b.record(5, SUCCEEDED);
  assert.deepEqual(b.drainDecisions(), []);
  assert.equal(b.balance(5), 1.0);
  assert.equal(b.request(6, 2, charged(9_000)), "granted");
});

test("a rate limit answers wait_until and sends that target's waiters to wait", () => {
  const b = new RetryBudget(budgetConfig());
  b.request(0, 1, charged(0));
  assert.equal(b.request(0, 2, charged(9_000, 0, 0)), undefined);
  assert.equal(b.request(0, 3, charged(9_000, 0, 1)), undefined);
  b.record(100, { note: "rate_limited", target: 0, until: 2_000 });
  assert.deepEqual(b.drainDecisions(), [[2, { wait_until: 2_000 }]]);
  assert.equal(b.waiting, 1);
  assert.deepEqual(b.request(150, 4, first(0)), { wait_until: 2_000 });
  assert.equal(b.request(2_000, 5, first(0)), "granted");
});

test("a config is read with defaults filled in, and the default is core's", () => {
  assert.deepEqual(new RetryBudget().config(), {
    capacity: 10,
    initial: 10,
    deposit_per_request: 0.1,
    deposit_per_success: 3,
    refill_per_sec: 0.5,
    deposit_per_answered_retry: 10,
  });
  assert.equal(new RetryBudget({ capacity: 3 }).config().capacity, 3);
  assert.equal(new RetryBudget({ capacity: 3 }).config().initial, 10);
  assert.equal(new RetryBudget(null).config().capacity, 10);
});

for (const config of [{ capacty: 3 }, { capacity: "ten" }, [1, 2], "[1, 2]", 7, { initial: NaN }, { capacity: 10n }]) {
  test(`a bad config is a ConfigError (${String(config)})`, () => {
    assert.throws(() => new RetryBudget(config), (e) => e instanceof ConfigError && e.message.length > 0);
  });
}

/** An empty budget with ticket 7 waiting (deadline 5 s). */
function waitingBudget() {
  const b = new RetryBudget(budgetConfig());
  assert.equal(b.request(0, 1, charged(0)), "granted");
  assert.equal(b.request(0, 7, charged(5_000)), undefined);
  return b;
}

const BAD = [
  ["an ask without its fields", (b) => b.request(10, 8, { kind: "charged" }), BudgetError],
  ["an ask of an unknown kind", (b) => b.request(10, 8, { ...charged(5_000), kind: "urgent" }), BudgetError],
  ["a negative deadline", (b) => b.request(10, 8, { ...charged(5_000), deadline: -1 }), BudgetError],
  ["an ask that is a string", (b) => b.request(10, 8, "{not json"), BudgetError],
  ["an ask that is an array", (b) => b.request(10, 8, [charged(5_000)]), BudgetError],
  ["an ask by position", (b) => b.request(10, 8, ["charged", 0, 5_000, 0]), BudgetError],
  ["an ask of null", (b) => b.request(10, 8, null), BudgetError],
  ["no ask", (b) => b.request(10, 8, undefined), BudgetError],
  ["a ticket still waiting", (b) => b.request(10, 7, charged(5_000)), BudgetError],
  ["a negative clock", (b) => b.request(-1, 8, charged(5_000)), ReboundError],
  ["a clock past 2^53", (b) => b.request(2 ** 64, 8, charged(5_000)), ReboundError],
  ["an infinite clock", (b) => b.request(Infinity, 8, charged(5_000)), ReboundError],
  ["a negative ticket", (b) => b.request(10, -8, charged(5_000)), ReboundError],
  ["a fractional ticket", (b) => b.request(10, 8.5, charged(5_000)), ReboundError],
  ["a clock that is a string", (b) => b.request("10", 8, charged(5_000)), TypeError],
  ["a note without a target", (b) => b.record(10, { note: "succeeded" }), BudgetError],
  ["an unknown note", (b) => b.record(10, { note: "celebrated", target: 0 }), BudgetError],
  ["a rate limit without until", (b) => b.record(10, { note: "rate_limited", target: 0 }), BudgetError],
  ["a note with a cyclic target", (b) => {
    const target = {};
    target.self = target;
    b.record(10, { note: "succeeded", target });
  }, BudgetError],
  ["a note at no time", (b) => b.record(null, SUCCEEDED), TypeError],
  ["a tick backwards from 0", (b) => b.tick(-5), ReboundError],
  ["a tick of true", (b) => b.tick(true), TypeError],
  ["a cancel of a string", (b) => b.cancel("7"), TypeError],
  ["a balance before 0", (b) => b.balance(-1), ReboundError],
];

for (const [what, f, Class] of BAD) {
  test(`bad input throws a typed error and the budget stays usable: ${what}`, () => {
    const b = waitingBudget();
    assert.throws(() => f(b), (e) => e instanceof Class && e.message.length > 0);
    // Unchanged: the waiter is still there, nothing was decided or counted...
    assert.equal(b.waiting, 1);
    assert.deepEqual(b.drainDecisions(), []);
    assert.deepEqual(b.stats(), { granted: 1, denied: 0, queued: 1, deposited_milli: 0 });
    // ...and the budget goes on: a success grants it.
    b.record(100, SUCCEEDED);
    assert.deepEqual(b.drainDecisions(), [[7, "granted"]]);
  });
}

test("a budget error is a BudgetError with its kind", () => {
  const b = waitingBudget();
  assert.throws(
    () => b.request(10, 7, charged(5_000)),
    (error) =>
      error instanceof BudgetError &&
      error instanceof ReboundError &&
      error.kind === "budget" &&
      /ticket 7/.test(error.message),
  );
});

test("a ticket is taken until its answer is handed out", () => {
  const b = waitingBudget();
  b.record(100, SUCCEEDED);
  // Decided, but not handed out yet: still taken.
  assert.throws(() => b.request(100, 7, charged(5_000)), (e) => e instanceof BudgetError && /ticket 7/.test(e.message));
  assert.deepEqual(b.drainDecisions(), [[7, "granted"]]);
  assert.equal(b.request(100, 7, charged(5_000)), undefined);
});

test("a freed budget says so", () => {
  const b = waitingBudget();
  b.free();
  b.free();
  for (const f of [() => b.request(1, 9, charged(5)), () => b.tick(1), () => b.waiting, () => b.stats()]) {
    assert.throws(f, (e) => e instanceof ReboundError && /freed/.test(e.message));
  }
});

test("a fractional clock reading is taken as the machine takes it, floored", () => {
  const b = new RetryBudget(budgetConfig());
  b.request(0, 1, charged(0));
  assert.equal(b.request(0.4, 2, charged(800)), undefined);
  b.tick(799.9);
  assert.deepEqual(b.drainDecisions(), []);
  b.tick(800.2);
  assert.deepEqual(b.drainDecisions(), [[2, "denied"]]);
});

test("any arguments get a typed error or a TypeError, never a trap, and the budget goes on", () => {
  const anything = fc.anything({ withBigInt: true, withNullPrototype: true, withTypedArray: true });
  const number = fc.oneof(fc.double(), fc.integer(), fc.constant(2 ** 53), fc.constant(-0));
  fc.assert(
    fc.property(fc.oneof(anything, number), fc.oneof(anything, number), anything, (a, b, c) => {
      const budget = waitingBudget();
      for (const f of [
        () => budget.request(a, b, c),
        () => budget.request(10, 8, c),
        () => budget.record(a, c),
        () => budget.record(10, c),
        () => budget.tick(a),
        () => budget.cancel(a),
        () => budget.balance(a),
        () => new RetryBudget(c),
      ]) {
        try {
          f();
        } catch (e) {
          assert.ok(e instanceof ReboundError || e instanceof TypeError, String(e));
          assert.ok(!(e instanceof WebAssembly.RuntimeError), String(e));
        }
      }
      budget.drainDecisions();
      budget.tick(2 ** 53 - 1);
      budget.drainDecisions();
      budget.free();
      return true;
    }),
    { seed: 20261204, numRuns: 300 },
  );
});

// --- SharedBudget, for the machines of one process (a manual clock, real timers) ---

/** A clock the test moves. */
function manualClock() {
  const clock = { now: 0, read: () => clock.now };
  return clock;
}

describe("SharedBudget", () => {
  test("a waiting agent is granted when another agent's success funds it", async () => {
    const clock = manualClock();
    const shared = new SharedBudget(budgetConfig(), { clock: clock.read });
    const a = await shared.acquire({ permit: 1, ask: charged(5_000) });
    assert.deepEqual(a, { type: "permit_answered", permit: 1, decision: "granted" });
    const waiting = shared.acquire({ permit: 1, ask: charged(5_000) });
    assert.equal(shared.waiting, 1);
    clock.now = 300;
    shared.note({ note: SUCCEEDED });
    assert.deepEqual(await waiting, { type: "permit_answered", permit: 1, decision: "granted" });
    assert.equal(shared.waiting, 0);
    assert.deepEqual(shared.stats(), { granted: 2, denied: 0, queued: 1, deposited_milli: 1_000 });
  });

  test("a waiting agent is denied at its deadline, by the budget's own timer", async () => {
    const shared = new SharedBudget(budgetConfig());
    await shared.acquire({ permit: 1, ask: charged(0) });
    const started = performance.now();
    const answer = await shared.acquire({ permit: 2, ask: charged(shared.nowMs() + 50) });
    assert.equal(answer.decision, "denied");
    assert.ok(performance.now() - started >= 40);
    assert.equal(shared.waiting, 0);
  });

  test("an aborted acquire leaves the queue and takes no token", async () => {
    const clock = manualClock();
    const shared = new SharedBudget(budgetConfig(), { clock: clock.read });
    await shared.acquire({ permit: 1, ask: charged(0) });
    const controller = new AbortController();
    const waiting = shared.acquire({ permit: 2, ask: charged(60_000) }, { signal: controller.signal });
    controller.abort(new Error("the run ended"));
    await assert.rejects(waiting, /the run ended/);
    assert.equal(shared.waiting, 0);
    shared.note({ note: SUCCEEDED });
    assert.equal(shared.balance(), 1);
  });

  test("a malformed ask or note throws, and the shared budget goes on", async () => {
    const shared = new SharedBudget(budgetConfig());
    await assert.rejects(shared.acquire({ permit: 1, ask: { kind: "charged" } }), BudgetError);
    assert.throws(() => shared.note({ note: { note: "celebrated" } }), BudgetError);
    const ok = await shared.acquire({ permit: 1, ask: charged(0) });
    assert.equal(ok.decision, "granted");
    assert.throws(() => new SharedBudget({ capacty: 1 }), ConfigError);
  });

  test("machines configured with a retry budget are answered by it", async () => {
    const shared = new SharedBudget(budgetConfig({ capacity: 2 }));
    const machine = new AgentMachine({ config: { retry_budget: { max_wait_ms: 1000 } } });
    machine.handle(shared.nowMs(), userText("hi"));
    let actions = machine.drain();
    const ask = actions.find((a) => a.type === "acquire_permit");
    assert.ok(ask, JSON.stringify(actions));
    const answer = await shared.acquire(ask);
    assert.equal(machine.handle(shared.nowMs(), answer), "accepted");
    actions = machine.drain();
    assert.ok(actions.some((a) => a.type === "send_request"), JSON.stringify(actions));
  });
});
