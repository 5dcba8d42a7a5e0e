// Property tests (fast-check): whatever a caller hands the package — random sequences of
// well-formed events of every type with random ids (some answering the command the machine
// awaits, most not), junk values, huge numbers, negative and NaN times, strings where numbers
// go, extreme configurations — it throws nothing but the package's typed errors
// (`ReboundError` subclasses) or a plain `TypeError` of a wrong JavaScript argument; never a
// WebAssembly `RuntimeError` (a Rust panic). After a refused event the machine is unchanged
// (same tally, conversation, target, outcome) and takes the next valid answer.
//
// Seeded and reproducible: every run uses the fixed seed SEED below (REBOUND_FC_SEED=<n>
// picks another, REBOUND_FC_RUNS=<n> the number of runs). On a failure fast-check prints the
// seed, the path and the shrunk counterexample; `REBOUND_FC_SEED=<seed> node --test
// test/properties.test.js` replays it. The first test also checks that its callers reached
// every action and every way of taking or refusing an event (REBOUND_FC_REACHED=1 prints
// what they reached), so that it cannot pass by exploring nothing.

import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  AgentMachine,
  describe,
  normalizeEvent,
  ReboundError,
  Snapshot,
  userText,
} from "../lib/index.js";
import { AWAITING, endTurn, longConversation, toolUse } from "./support/drive.js";

/** The fixed seed of every property here (so CI runs the same cases each time). */
const SEED = Number(process.env.REBOUND_FC_SEED ?? 20261204);
const RUNS = Number(process.env.REBOUND_FC_RUNS ?? 300);
const PARAMETERS = { seed: SEED, numRuns: RUNS, includeErrorInReport: true };

// ---------------------------------------------------------------------------------------
// Values

/** Numbers a JavaScript caller can pass where core wants a whole number. */
const EDGE_NUMBERS = [
  -1, -0, 0, 0.5, 1, 2, 7, Number.NaN, Infinity, -Infinity, 65535, 65536, 4294967295, 4294967296,
  2 ** 53 - 1, 2 ** 53, 1e19, 1.8e19, 2 ** 64, 1e300, -1e19, Number.MIN_VALUE, Number.MAX_VALUE,
];
const edgeNumber = fc.constantFrom(...EDGE_NUMBERS);
/** A number, usually small and whole, sometimes an edge or a double. */
const number = fc.oneof({ weight: 4, arbitrary: fc.nat(20) }, { weight: 2, arbitrary: edgeNumber }, fc.double());
/** Mostly a number; sometimes what a careless caller puts there instead. */
const numberish = fc.oneof(
  { weight: 8, arbitrary: number },
  fc.string({ maxLength: 4 }),
  fc.constantFrom(null, true, undefined, "1", [], {}),
);
const text = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom("", " ", "\u0000", "\ud800", "sk-live-0123456789abcdef"));

const FAILURE_KINDS = [
  "rate_limited", "unavailable", "server_error", "transport", "stream_malformed", "empty_response",
  "auth_failed", "bad_request", "model_not_found", "quota_exhausted", "context_overflow",
  "reasoning_rejected", "content_blocked",
];
const TRANSPORT = ["connect", "dns", "tls", "reset", "timeout", "idle_timeout", "stream_cut", "malformed_stream", "empty_message"];

/** A provider failure: a real kind and fields, some of them absurd. */
const failureArb = fc.record(
  {
    kind: fc.oneof({ weight: 9, arbitrary: fc.constantFrom(...FAILURE_KINDS) }, text),
    message: text,
    status: fc.oneof(fc.integer({ min: 100, max: 599 }), edgeNumber),
    error_type: text,
    request_id: text,
    retry_after_ms: number,
    rate_limit_reset_ms: number,
    should_retry: fc.boolean(),
    transport: fc.constantFrom(...TRANSPORT),
  },
  { requiredKeys: ["kind", "message"] },
);

const TOOL = { name: "read", description: "Reads a file.", input_schema: { type: "object" } };

/** A content block of any type, with fields that mostly fit. */
const blockArb = fc.oneof(
  fc.record({ type: fc.constant("text"), text }),
  fc.record({ type: fc.constant("tool_use"), id: text, name: fc.constantFrom("read", "write", ""), input: fc.oneof(fc.constant({}), fc.jsonValue({ maxDepth: 3 })) }),
  fc.record({ type: fc.constant("tool_result"), tool_use_id: text, content: fc.oneof(text, fc.constant([])), is_error: fc.boolean() }),
  fc.record({ type: fc.constant("thinking"), thinking: text, signature: text }),
  fc.record({ type: fc.constant("redacted_thinking"), data: text }),
  fc.record({ type: fc.constant("reasoning"), item: fc.jsonValue({ maxDepth: 2 }) }),
  fc.record({ type: fc.constant("image"), source: fc.record({ type: fc.constant("url"), url: text }) }),
);
const messageArb = fc.record({ role: fc.constantFrom("assistant", "user", "system"), content: fc.oneof(text, fc.array(blockArb, { maxLength: 4 })) });
const responseArb = fc.record(
  {
    message: fc.record({ role: fc.constant("assistant"), content: fc.array(blockArb, { maxLength: 4 }) }),
    stop_reason: fc.constantFrom("end_turn", "tool_use", "max_tokens", "stop", "length", "refusal", "weird"),
    usage: fc.record({ input_tokens: number, output_tokens: number, cache_read_input_tokens: number }, { requiredKeys: [] }),
    input_problems: fc.array(fc.record({ tool_use_id: text, kind: fc.constantFrom("invalid_json", "truncated", "not_an_object", "too_deep"), raw: text, detail: text }), { maxLength: 2 }),
  },
  { requiredKeys: ["message", "stop_reason"] },
);
const toolResultArb = fc.oneof(
  fc.record({ Ok: fc.record({ parts: fc.array(fc.record({ type: fc.constant("text"), text }), { maxLength: 2 }) }) }),
  fc.record({ Err: fc.record({ model: fc.record({ message: text }) }) }),
  fc.record({ Err: fc.record({ host: fc.record({ kind: fc.constantFrom("canceled", "out_of_memory", "receiver", "session_store", "internal"), message: text }) }) }),
);

/** An id: usually one the machine issued (by index into what it issued), else anything. */
const idArb = fc.oneof(
  { weight: 4, arbitrary: fc.record({ issued: fc.nat(40) }) },
  { weight: 2, arbitrary: fc.record({ literal: number }) },
  fc.record({ literal: numberish }),
);

/** A well-formed event of every type, its ids and payloads random. */
const eventArb = fc.oneof(
  fc.record({ type: fc.constant("user_message"), content: fc.array(blockArb, { maxLength: 3 }) }),
  fc.constant({ type: "resume" }),
  fc.constant({ type: "cancel" }),
  fc.record({ type: fc.constant("provider_succeeded"), request: idArb, response: responseArb }),
  fc.record({ type: fc.constant("provider_responding"), request: idArb }),
  fc.record({ type: fc.constant("provider_failed"), request: idArb, failure: failureArb }),
  fc.record({ type: fc.constant("tools_finished"), batch: idArb, outcome: fc.oneof(
    fc.record({ per_call: fc.array(fc.record({ tool_use_id: text, result: toolResultArb }), { maxLength: 3 }) }),
    fc.record({ whole_batch: fc.oneof(fc.record({ model: fc.record({ message: text }) }), fc.record({ host: fc.record({ kind: fc.constant("internal"), message: text }) })) }),
  ) }),
  fc.record({ type: fc.constant("timer_fired"), timer: idArb }),
  fc.record({ type: fc.constant("compaction_finished"), compaction: idArb, result: fc.oneof(fc.record({ Ok: fc.array(messageArb, { maxLength: 3 }) }), fc.record({ Err: text })) }),
  fc.record({ type: fc.constant("permit_answered"), permit: idArb, decision: fc.oneof(fc.constantFrom("granted", "denied", "maybe"), fc.record({ wait_until: numberish })) }),
  fc.record({ type: fc.constant("host_failed"), failure: fc.record({ kind: fc.constantFrom("canceled", "out_of_memory", "receiver", "session_store", "internal", "bored"), message: text }) }),
);

/** Junk: anything at all, or an event's tag with junk fields. */
const junkArb = fc.oneof(
  fc.anything({ maxDepth: 3, withBigInt: true, withNullPrototype: true, withTypedArray: true, withSparseArray: true }),
  fc.record({
    type: fc.constantFrom("user_message", "provider_succeeded", "provider_failed", "tools_finished", "timer_fired", "compaction_finished", "permit_answered", "host_failed", "nope"),
    request: fc.anything({ maxDepth: 1 }),
    timer: fc.anything({ maxDepth: 1 }),
    content: fc.anything({ maxDepth: 2 }),
    failure: fc.anything({ maxDepth: 2 }),
    response: fc.anything({ maxDepth: 2 }),
  }, { requiredKeys: ["type"] }),
);

/** A time: usually forward from the last, sometimes backwards, negative, NaN, huge or no number. */
const timeArb = fc.oneof(
  { weight: 8, arbitrary: fc.record({ forward: fc.nat(100_000) }) },
  fc.record({ literal: fc.oneof(edgeNumber, fc.double(), fc.constantFrom("5", null, undefined, 10n)) }),
);

/** One move of a caller: a valid answer to what the machine awaits, a random event, or junk. */
const moveArb = fc.record({
  what: fc.oneof(
    { weight: 6, arbitrary: fc.record({ answer: fc.nat(1000), response: responseArb, failure: failureArb }) },
    { weight: 4, arbitrary: fc.record({ event: eventArb }) },
    { weight: 1, arbitrary: fc.record({ junk: junkArb }) },
  ),
  at: timeArb,
  thenAnswer: fc.boolean(),
});

/** A configuration: a usual one, one with extreme numbers, or junk. */
const configArb = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(
    undefined,
    { tools: [TOOL] },
    { tools: [TOOL], retry_budget: { max_wait_ms: 1000 } },
    { tools: [TOOL], retry_budget: {}, retry: { jitter: false }, targets: [{ provider: "gemini", model: "g" }, { provider: "bedrock", model: "b" }] },
    { tools: [TOOL], compact_with: "summary", targets: [{ provider: "anthropic", model: "a", context_window: 1000 }, { provider: "openai", model: "b" }] },
    { tools: [TOOL], max_turns: 2, auto_compact: false, retry: { max_attempts: 1 } },
  ) },
  { weight: 3, arbitrary: fc.record({
    tools: fc.constant([TOOL]),
    retry: fc.record({ max_attempts: number, initial_delay_ms: number, max_delay_ms: number, multiplier: number, jitter: fc.boolean(), max_retry_after_ms: number, fallback_after_ms: number, max_empty_responses: number }, { requiredKeys: [] }),
    targets: fc.array(fc.record({ provider: fc.constantFrom("anthropic", "openai", "openai_responses", "gemini", "bedrock"), model: text, context_window: number }, { requiredKeys: ["provider", "model"] }), { maxLength: 3 }),
    max_turns: fc.option(number),
    compaction: fc.record({ keep_recent_messages: number, elide_over_bytes: number, keep_head_bytes: number, max_tail_result_bytes: number }, { requiredKeys: [] }),
    compact_with: fc.constantFrom("summary", "elide"),
    compact_threshold_percent: number,
    retry_budget: fc.option(fc.record({ max_wait_ms: number }, { requiredKeys: [] })),
    stream: fc.record({ idle_ms: number, progress_ms: number }, { requiredKeys: [] }),
  }, { requiredKeys: [] }) },
  { weight: 1, arbitrary: fc.anything({ maxDepth: 2 }) },
);

// ---------------------------------------------------------------------------------------
// The caller

/** Whether `thrown` is what the package may throw: a typed error, or a TypeError of JavaScript. */
function allowed(thrown) {
  return thrown instanceof ReboundError || (thrown instanceof TypeError && !(thrown instanceof WebAssembly.RuntimeError));
}

/** Calls `f`; returns its value, or `{threw}` for an allowed error; fails for any other. */
function attempt(f, what) {
  try {
    return { value: f() };
  } catch (thrown) {
    if (!allowed(thrown)) {
      assert.fail(`${what} threw ${thrown?.constructor?.name}: ${thrown?.message ?? thrown}\n${thrown?.stack ?? ""}`);
    }
    return { threw: thrown };
  }
}

/** What must not change when an event is refused. */
function state(machine) {
  return JSON.stringify({
    tally: machine.tally(),
    outcome: machine.outcome(),
    terminal: machine.isTerminal,
    turns: machine.turns,
    target: machine.target,
    conversation: machine.conversation().digest,
  });
}

/**
 * A valid answer to `awaited` (or the user's message before the run), from the move's
 * randomness: the events to send, the last of them the answer.
 */
function validAnswer(machine, awaited, move) {
  if (awaited === undefined) return [userText("hello")];
  const pick = move.answer ?? 0;
  switch (awaited.type) {
    case "send_request": {
      const request = awaited.request;
      const succeeded = (response) => ({ type: "provider_succeeded", request, response });
      const failed = { type: "provider_failed", request, failure: sanitizeFailure(move.failure) };
      switch (pick % 7) {
        case 6:
          return [{ type: "provider_failed", request, failure: { kind: "quota_exhausted", message: "out of credit", status: 429 } }];
        case 5:
          return [{ type: "provider_failed", request, failure: { kind: "context_overflow", message: "prompt is too long", status: 400 } }];
        case 0:
          return [succeeded(sanitize(move.response))];
        case 1:
          return [succeeded(toolUse(`call_${pick}`, pick % 3 === 0 ? "write" : "read", { path: "a" }))];
        case 2:
          return [failed];
        case 3:
          return [{ type: "provider_responding", request }, failed];
        default:
          return [succeeded(endTurn(`answer ${pick}`))];
      }
    }
    case "sleep":
      return [{ type: "timer_fired", timer: awaited.timer }];
    case "run_tools":
      return [{
        type: "tools_finished",
        batch: awaited.batch,
        outcome: { per_call: awaited.calls.map((c, i) => ({ tool_use_id: c.id, result: (pick + i) % 3 === 0 ? { Err: { model: { message: "failed" } } } : { Ok: { parts: [{ type: "text", text: "ok" }] } } })) },
      }];
    case "compact":
      return [{ type: "compaction_finished", compaction: awaited.compaction, result: pick % 4 === 0 ? { Err: "compactor down" } : machine.compactDefault(awaited.conversation) }];
    case "acquire_permit":
      return [{ type: "permit_answered", permit: awaited.permit, decision: ["granted", "granted", "denied", { wait_until: awaited.ask.since + 100 }][pick % 4] }];
    default:
      throw new Error(`not an awaited action: ${awaited.type}`);
  }
}

/** A response core reads: the random one's message, a known stop reason, small usage. */
function sanitize(response = endTurn()) {
  const { input_problems: _ignored, usage: _usage, ...rest } = response;
  const content = rest.message.content.filter((b) => b.type !== "tool_result" && b.type !== "image");
  return {
    ...rest,
    message: { role: "assistant", content: content.map((b) => (b.type === "tool_use" ? { ...b, input: {} } : b)) },
    usage: { input_tokens: 1, output_tokens: 1 },
  };
}

/** A failure core reads: a real kind, small whole numbers. */
function sanitizeFailure(failure = { kind: "unavailable", message: "overloaded" }) {
  const kind = FAILURE_KINDS.includes(failure.kind) ? failure.kind : "unavailable";
  const whole = (n) => (Number.isSafeInteger(n) && n >= 0 ? n : undefined);
  const out = { kind, message: String(failure.message) };
  const status = whole(failure.status);
  if (status !== undefined && status < 65536) out.status = status;
  if (whole(failure.retry_after_ms) !== undefined) out.retry_after_ms = failure.retry_after_ms;
  return out;
}

/** The event a move's random one stands for: issued ids looked up. */
function resolve(event, issued) {
  const id = (v) => (v.issued !== undefined ? (issued.length === 0 ? v.issued : issued[v.issued % issued.length]) : v.literal);
  const out = { ...event };
  for (const key of ["request", "batch", "timer", "compaction", "permit"]) {
    if (key in out) out[key] = id(out[key]);
  }
  return out;
}

/** What the random callers reached, to check they explore (a fixed seed makes it stable). */
const reached = { handled: new Set(), refused: new Set(), actions: new Set(), acceptedAfterRefusal: 0 };

function drain(machine) {
  const got = attempt(() => machine.drain(), "drain");
  return got.value ?? [];
}

/** Runs one random caller; fails on a panic, an untyped error, or a refusal that changed anything. */
function play(config, seed, long, moves) {
  const conversation = long ? longConversation() : undefined;
  const made = attempt(() => new AgentMachine({ config, seed, conversation, record: true }), "new AgentMachine");
  if (made.threw !== undefined) return;
  const machine = made.value;
  const issued = [];
  let awaited;
  let now = 0;
  const take = (actions) => {
    for (const a of actions) {
      reached.actions.add(a.type);
      for (const key of ["request", "timer", "batch", "compaction", "permit"]) if (typeof a[key] === "number") issued.push(a[key]);
      if (AWAITING.has(a.type)) awaited = a;
    }
    if (machine.isTerminal) awaited = undefined;
  };
  for (const move of moves) {
    let event;
    if (move.what.answer !== undefined) {
      if (machine.isTerminal) continue;
      const events = validAnswer(machine, awaited, move.what);
      for (const e of events.slice(0, -1)) {
        // A provider_responding: stale when one was sent for this request already.
        assert.match(attempt(() => machine.handle(now, e), `handle(${safe(e)})`).value, /^(accepted|stale)$/);
        take(drain(machine));
      }
      event = events.at(-1);
    } else if (move.what.event !== undefined) {
      event = resolve(move.what.event, issued);
    } else {
      event = move.what.junk;
    }
    const at = move.at.forward !== undefined ? (now += move.at.forward) : move.at.literal;
    const before = state(machine);
    const handled = attempt(() => machine.handle(at, event), `handle(${String(at)}, ${safe(event)})`);
    if (handled.threw === undefined) {
      assert.ok(["accepted", "stale", "terminal"].includes(handled.value));
      reached.handled.add(handled.value);
      take(drain(machine));
      continue;
    }
    reached.refused.add(handled.threw.kind ?? handled.threw.name);
    assert.equal(state(machine), before, `a refused event changed the machine: ${safe(event)} (${handled.threw.message})`);
    assert.deepEqual(drain(machine), [], "a refused event queues nothing");
    if (move.thenAnswer && !machine.isTerminal && (awaited !== undefined || issued.length === 0)) {
      const answer = validAnswer(machine, awaited, { answer: 2, failure: { kind: "unavailable", message: "x" } }).at(-1);
      const next = attempt(() => machine.handle(now, answer), `the valid answer ${safe(answer)} after a refusal`);
      assert.equal(next.value, "accepted", `after a refusal, the valid answer ${safe(answer)} is taken (${next.threw?.message})`);
      reached.acceptedAfterRefusal += 1;
      take(drain(machine));
    }
  }
  // Whatever happened, the machine still reports and answers.
  for (const f of [() => machine.tally(), () => machine.outcome(), () => machine.config(), () => machine.traceJsonl(), () => machine.conversation().messages()]) {
    attempt(f, "a getter");
  }
  if (!machine.isTerminal && awaited !== undefined) {
    const answer = validAnswer(machine, awaited, { answer: 4 }).at(-1);
    // (pick 4: a plain answer to a request; the other actions have one kind of answer.)
    assert.equal(attempt(() => machine.handle(now, answer), "the last valid answer").value, "accepted");
  }
}

/** A printable form of anything (a bigint, an object of no prototype), cut short. */
function safe(value) {
  return fc.stringify(value).slice(0, 300);
}

test(`random callers never make the machine panic or change on a refusal (seed ${SEED})`, () => {
  fc.assert(
    fc.property(configArb, fc.oneof(fc.nat(), edgeNumber, fc.constantFrom("18446744073709551615", 5n, "x")), fc.boolean(), fc.array(moveArb, { minLength: 1, maxLength: 60, size: "medium" }), play),
    PARAMETERS,
  );
  if (process.env.REBOUND_FC_REACHED) console.log(reached);
  // The callers went everywhere: every action, every way of taking an event, every refusal.
  assert.deepEqual([...reached.handled].sort(), ["accepted", "stale", "terminal"]);
  assert.deepEqual([...reached.refused].sort(), ["event", "unexpected_event", "unknown_answer"]);
  for (const type of ["send_request", "sleep", "run_tools", "compact", "replace_conversation", "acquire_permit", "note_budget", "notify_retry", "notify_fallback", "stream_reset", "finish", "fail"]) {
    assert.ok(reached.actions.has(type), `some random caller saw a ${type}`);
  }
  assert.ok(reached.acceptedAfterRefusal > RUNS / 10, "valid answers followed refusals");
});

test(`the rest of the API takes any argument with a typed error (seed ${SEED})`, () => {
  const any = fc.anything({ maxDepth: 3, withBigInt: true, withNullPrototype: true });
  fc.assert(
    fc.property(any, any, (a, b) => {
      attempt(() => Snapshot.of(a), "Snapshot.of");
      attempt(() => Snapshot.fromSummary(a), "Snapshot.fromSummary");
      attempt(() => normalizeEvent(a), "normalizeEvent");
      attempt(() => describe(a, b), "describe");
      for (const kind of ["retry_info", "fallback_info", "run_error"]) attempt(() => describe(kind, a), `describe(${kind})`);
      attempt(() => new AgentMachine(a), "new AgentMachine");
      attempt(() => new AgentMachine({ config: a, seed: b, conversation: a, secrets: b }), "new AgentMachine(options)");
      attempt(() => new AgentMachine().compactDefault(a), "compactDefault");
      attempt(() => new Snapshot(a), "new Snapshot");
    }),
    PARAMETERS,
  );
});
