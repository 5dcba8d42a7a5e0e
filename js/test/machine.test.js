// The agent machine through the package's JavaScript API: retries after retry-after, tool
// errors, overflow and compaction, cancel, the typed errors (and the machine unchanged after
// each), trace recording, secrets masked, and Snapshots against the trace's summaries.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  AgentMachine,
  ConfigError,
  describe,
  EventError,
  normalizeEvent,
  ReboundError,
  Snapshot,
  UnexpectedEventError,
  UnknownAnswerError,
  userText,
} from "../lib/index.js";
import { drive, endTurn, failure, longConversation, READ_TOOL, toolUse } from "./support/drive.js";

const types = (actions) => actions.map((a) => a.type);

/** The trace of a recording machine: its header and steps. */
function trace(machine) {
  const [header, ...steps] = machine.traceJsonl().trimEnd().split("\n").map((l) => JSON.parse(l));
  return { header, steps };
}

test("a rate limit with retry-after is retried after exactly the server's delay", () => {
  const machine = new AgentMachine({ config: { retry: { jitter: true } }, seed: 3 });
  assert.equal(machine.handle(0, userText("hi")), "accepted");
  const first = machine.drain();
  assert.deepEqual(types(first), ["append_message", "send_request"]);
  const request = first[1];
  assert.equal(request.attempt, 1);
  assert.equal(request.purpose, "turn");

  const limited = failure("rate_limited", "slow down", { status: 429, retry_after_ms: 2000 });
  assert.equal(machine.handle(100, { type: "provider_failed", request: request.request, failure: limited }), "accepted");
  const [notice, sleep, ...rest] = machine.drain();
  assert.deepEqual(rest, []);
  assert.equal(notice.type, "notify_retry");
  assert.equal(notice.info.attempt, 2);
  assert.equal(notice.info.retry_after_ms, 2000);
  assert.equal(notice.info.delay_ms, 2000, "a server's hint is never jittered");
  assert.equal(describe("retry_info", notice.info), "rate limited: retrying in 2.0s (attempt 2/4)");
  assert.equal(sleep.type, "sleep");
  assert.equal(sleep.delay_ms, 2000);

  assert.equal(machine.handle(2100, { type: "timer_fired", timer: sleep.timer }), "accepted");
  const [retry] = machine.drain();
  assert.equal(retry.type, "send_request");
  assert.equal(retry.attempt, 2);
  assert.ok(retry.conversation.equals(request.conversation), "a retry sends the same conversation");

  machine.handle(2200, { type: "provider_succeeded", request: retry.request, response: endTurn("hello") });
  assert.deepEqual(types(machine.drain()), ["append_message", "finish"]);
  assert.deepEqual(machine.outcome(), { Ok: { model: "end_turn" } });
  const tally = machine.tally();
  assert.equal(tally.requests, 2);
  assert.equal(tally.retries, 1);
  assert.equal(tally.retry_wait_ms, 2000);
  assert.equal(tally.elapsed_ms, 2200);
  assert.equal(machine.turns, 1);
  assert.ok(machine.isTerminal);
});

test("a tool error becomes an error result for the model and the loop goes on", () => {
  const { machine, actions } = drive(
    { config: { tools: [READ_TOOL] } },
    {
      answers: [toolUse("call_1", "read", { path: "missing.txt" }), endTurn("it is missing")],
      tool: () => ({ Err: { model: { message: "no such file: missing.txt" } } }),
    },
  );
  const run = actions.find((a) => a.type === "run_tools");
  assert.deepEqual(run.calls, [{ id: "call_1", name: "read", input: { path: "missing.txt" } }]);
  const results = actions
    .filter((a) => a.type === "append_message")
    .flatMap((a) => a.message.content)
    .filter((b) => b.type === "tool_result");
  assert.equal(results.length, 1);
  assert.equal(results[0].tool_use_id, "call_1");
  assert.equal(results[0].is_error, true);
  assert.match(results[0].content[0].text, /^Tool execution failed for `read`: no such file: missing\.txt\n/);
  assert.deepEqual(machine.outcome(), { Ok: { model: "end_turn" } });
  assert.equal(machine.tally().tool_calls, 1);
  assert.equal(machine.tally().tool_errors, 1);
  assert.equal(machine.turns, 2);
});

test("tool outcomes that do not answer the batch are refused and the batch still awaited", () => {
  const machine = new AgentMachine({ config: { tools: [READ_TOOL] } });
  machine.handle(0, userText("read it"));
  const [, request] = machine.drain();
  machine.handle(1, { type: "provider_succeeded", request: request.request, response: toolUse("call_1", "read") });
  const run = machine.drain().find((a) => a.type === "run_tools");
  const wrong = { type: "tools_finished", batch: run.batch, outcome: { per_call: [{ tool_use_id: "call_2", result: { Ok: { parts: [] } } }] } };
  assert.throws(
    () => machine.handle(2, wrong),
    (e) => e instanceof EventError && e.kind === "event" && /do not answer the batch/.test(e.message),
  );
  const right = { type: "tools_finished", batch: run.batch, outcome: { per_call: [{ tool_use_id: "call_1", result: { Ok: { parts: [] } } }] } };
  assert.equal(machine.handle(3, right), "accepted");
  assert.ok(machine.drain().some((a) => a.type === "send_request"));
});

test("an overflow is compacted once, the conversation replaced, and the request retried", () => {
  const conversation = longConversation();
  const machine = new AgentMachine({ conversation, record: true });
  machine.handle(0, userText("and now?"));
  const [, request] = machine.drain();
  assert.equal(request.conversation.length, conversation.length + 1);
  const overflow = failure("context_overflow", "prompt is too long", { status: 400 });
  machine.handle(10, { type: "provider_failed", request: request.request, failure: overflow });
  const [notice, compact] = machine.drain();
  assert.equal(notice.type, "notify_retry");
  assert.equal(describe("retry_info", notice.info), "context too long: compacting the conversation and retrying");
  assert.equal(compact.type, "compact");
  assert.ok(compact.conversation.equals(request.conversation));

  const result = machine.compactDefault(compact.conversation);
  const size = (messages) => JSON.stringify(messages).length;
  assert.ok(size(result.Ok) < size(compact.conversation.messages()), "core's compaction shrinks it");
  machine.handle(20, { type: "compaction_finished", compaction: compact.compaction, result });
  const [replace, retry] = machine.drain();
  assert.equal(replace.type, "replace_conversation");
  assert.equal(replace.report.reason, "overflow");
  assert.equal(replace.report.method, "elide");
  assert.equal(replace.report.before_messages, request.conversation.length);
  assert.equal(replace.report.after_messages, result.Ok.length);
  assert.ok(replace.report.after_bytes < replace.report.before_bytes);
  assert.deepEqual(replace.conversation.messages(), result.Ok);
  assert.equal(retry.type, "send_request");
  assert.ok(retry.conversation.equals(replace.conversation), "the retry sends the compacted conversation");
  assert.ok(machine.conversation().equals(replace.conversation));
  assert.equal(retry.attempt, 1, "compaction costs no attempt");

  machine.handle(30, { type: "provider_succeeded", request: retry.request, response: endTurn() });
  machine.drain();
  assert.equal(machine.tally().compactions, 1);
  assert.deepEqual(machine.outcome(), { Ok: { model: "end_turn" } });
});

test("cancel ends the run at once, and what answers afterwards is terminal", () => {
  const machine = new AgentMachine();
  machine.handle(0, userText("hi"));
  const [, request] = machine.drain();
  machine.handle(5, { type: "provider_failed", request: request.request, failure: failure("unavailable", "overloaded", { status: 529 }) });
  const sleep = machine.drain().find((a) => a.type === "sleep");
  assert.equal(machine.handle(6, { type: "cancel" }), "accepted");
  const [fail, ...rest] = machine.drain();
  assert.deepEqual(rest, []);
  assert.deepEqual(fail, { type: "fail", error: { type: "canceled" } });
  assert.equal(describe("run_error", fail.error), "canceled");
  assert.ok(machine.isTerminal);
  assert.deepEqual(machine.outcome(), { Err: { type: "canceled" } });
  assert.equal(machine.handle(7, { type: "timer_fired", timer: sleep.timer }), "terminal");
  assert.equal(machine.tally().retries, 0, "a retry announced and never sent is no retry");
});

test("a duplicate answer is stale, not an error", () => {
  const machine = new AgentMachine();
  machine.handle(0, userText("hi"));
  const [, request] = machine.drain();
  const failed = { type: "provider_failed", request: request.request, failure: failure("server_error", "oops", { status: 500 }) };
  assert.equal(machine.handle(1, failed), "accepted");
  assert.equal(machine.handle(2, failed), "stale");
});

test("typed errors: each an Error of its class and kind, the machine unchanged after it", () => {
  const machine = new AgentMachine();
  machine.handle(0, userText("hi"));
  const [, request] = machine.drain();
  const refusals = [
    [() => machine.handle(1, { type: "no_such_event" }), EventError, "event"],
    [() => machine.handle(1, { type: "timer_fired" }), EventError, "event"],
    [() => machine.handle(1, { type: "provider_succeeded", request: request.request, response: {} }), EventError, "event"],
    [() => machine.handle(1, "not an event"), EventError, "event"],
    [() => machine.handle(-1, { type: "cancel" }), EventError, "event"],
    [() => machine.handle(Number.NaN, { type: "cancel" }), EventError, "event"],
    [() => machine.handle("1", { type: "cancel" }), EventError, "event"],
    [() => machine.handle(1, { type: "timer_fired", timer: 99 }), UnknownAnswerError, "unknown_answer"],
    [() => machine.handle(1, { type: "provider_failed", request: 42, failure: failure("transport") }), UnknownAnswerError, "unknown_answer"],
    [() => machine.handle(1, userText("again")), UnexpectedEventError, "unexpected_event"],
    [() => machine.handle(1, { type: "resume" }), UnexpectedEventError, "unexpected_event"],
    [() => normalizeEvent({ type: "timer_fired", timer: 1, extra: 1 }), EventError, "event"],
    [() => new AgentMachine({ config: { retries: 3 } }), ConfigError, "config"],
    [() => new AgentMachine({ config: { retry: [4, 500] } }), ConfigError, "config"],
    [() => new AgentMachine({ seed: -1 }), ConfigError, "config"],
    [() => new AgentMachine({ seed: "lots" }), ConfigError, "config"],
    [() => new AgentMachine({ secrets: ["short"] }), ConfigError, "config"],
    [() => new AgentMachine({ conversation: [{ role: "system", content: "x" }] }), ConfigError, "config"],
    [() => new AgentMachine(42), ConfigError, "config"],
    [() => new AgentMachine().traceJsonl(), ReboundError, "rebound"],
    // A kind that is no string once reached wasm-bindgen's string glue and trapped.
    [() => describe({}, {}), ReboundError, "rebound"],
    [() => describe("retry_info", { attempt: "2" }), EventError, "event"],
    [() => Snapshot.fromSummary({ messages: 1, digest: "xyz" }).messages(), EventError, "event"],
    [() => Snapshot.fromSummary({ messages: 1, digest: "0123456789abcdef" }).messages(), ReboundError, "rebound"],
  ];
  for (const [f, Class, kind] of refusals) {
    assert.throws(f, (e) => {
      assert.ok(e instanceof Class, `${f}: ${e} is a ${Class.name}`);
      assert.ok(e instanceof ReboundError && e instanceof Error);
      assert.equal(e.kind, kind, `${f}: kind`);
      assert.equal(e.name, Class.name);
      assert.ok(e.message.length > 0);
      return true;
    }, `${f} throws`);
  }
  assert.ok(UnknownAnswerError.prototype instanceof EventError);
  assert.ok(UnexpectedEventError.prototype instanceof EventError);
  // Unchanged: the awaited request still takes its answer.
  assert.deepEqual(machine.drain(), []);
  assert.equal(machine.handle(2, { type: "provider_succeeded", request: request.request, response: endTurn() }), "accepted");
  assert.deepEqual(types(machine.drain()), ["append_message", "finish"]);
});

test("a recorded run's trace holds its header, every step, and the same snapshots", () => {
  const { machine, actions, events } = drive(
    { record: true, seed: 11, config: { retry: { jitter: false } } },
    { answers: [{ failure: failure("unavailable", "overloaded", { status: 529 }) }, endTurn()] },
  );
  const { header, steps } = trace(machine);
  assert.equal(header.format, "rebound-trace");
  assert.equal(header.version, 1);
  assert.equal(header.seed, 11);
  assert.equal(machine.seed, 11n);
  assert.deepEqual(header.config, machine.config());
  assert.equal(header.meta.driver, "javascript");
  assert.deepEqual(
    steps.map((s) => [s.t_ms, s.event]),
    events.map((e) => [e.at, e.event]),
  );
  // The commands are the actions, conversations as their summaries.
  const commands = steps.flatMap((s) => s.commands);
  assert.deepEqual(types(commands), types(actions));
  for (const [i, action] of actions.entries()) {
    if (action.conversation === undefined) continue;
    const summary = commands[i].conversation;
    assert.equal(action.conversation.digest, summary.digest);
    assert.deepEqual(action.conversation.toJSON(), summary);
    assert.ok(Snapshot.fromSummary(summary).equals(action.conversation));
    assert.ok(action.conversation.equals(Snapshot.fromSummary(summary)));
    assert.ok(Snapshot.of(action.conversation.messages()).equals(action.conversation));
    assert.equal(Snapshot.of(action.conversation.messages()).digest, summary.digest);
  }
});

test("Snapshots compare by their messages, and a summary by length and digest", () => {
  const a = Snapshot.of([{ role: "user", content: "hi" }]);
  const b = Snapshot.of([{ role: "user", content: [{ type: "text", text: "hi" }] }]);
  const c = Snapshot.of([{ role: "user", content: "ho" }]);
  assert.ok(a.hasMessages);
  assert.equal(a.length, 1);
  assert.match(a.digest, /^[0-9a-f]{16}$/);
  assert.ok(a.equals(b), "a string content reads as one text block");
  assert.equal(a.digest, b.digest);
  assert.ok(!a.equals(c));
  assert.notEqual(a.digest, c.digest);
  assert.ok(!a.equals({ messages: 1, digest: a.digest }), "only a Snapshot equals a Snapshot");
  const summary = Snapshot.fromSummary(a.toJSON());
  assert.ok(!summary.hasMessages);
  assert.ok(summary.equals(a) && a.equals(summary));
  assert.ok(!Snapshot.fromSummary({ messages: 2, digest: a.digest }).equals(a));
  assert.throws(() => new Snapshot({}), TypeError);
});

test("secrets are masked in every failure the machine is told of", () => {
  const secret = "sk-live-0123456789abcdef";
  const { machine, actions } = drive(
    { secrets: [secret], record: true, config: { retry: { max_attempts: 2, jitter: false } } },
    {
      answers: [
        { failure: failure("unavailable", `bad gateway for key ${secret}`, { status: 502, request_id: `req-${secret}` }) },
        { failure: failure("auth_failed", `invalid x-api-key ${secret}`, { status: 401 }) },
      ],
    },
  );
  const everything = JSON.stringify({ actions, outcome: machine.outcome(), trace: machine.traceJsonl() });
  assert.ok(!everything.includes(secret), "the key appears nowhere");
  const notice = actions.find((a) => a.type === "notify_retry");
  assert.match(notice.info.message, /bad gateway for key \S+/);
  assert.equal(machine.outcome().Err.type, "provider");
  assert.ok(!describe("run_error", machine.outcome().Err).includes(secret));
});

test("a fallback is announced and counted", () => {
  const { machine, actions } = drive(
    { config: { targets: [{ provider: "anthropic", model: "a" }, { provider: "openai", model: "b" }] } },
    { answers: [{ failure: failure("quota_exhausted", "out of credit", { status: 429 }) }, endTurn()] },
  );
  const notice = actions.find((a) => a.type === "notify_fallback");
  assert.deepEqual([notice.info.from, notice.info.to, notice.info.from_label, notice.info.to_label], [0, 1, "anthropic:a", "openai:b"]);
  assert.equal(describe("fallback_info", notice.info), "quota exhausted (out of credit): falling back from anthropic:a to openai:b");
  assert.equal(machine.target, 1);
  assert.equal(machine.tally().fallbacks, 1);
  assert.deepEqual(machine.outcome(), { Ok: { model: "end_turn" } });
});

test("an answer that began and then failed hands out a stream reset", () => {
  const { machine, actions } = drive({}, {
    answers: [{ failure: failure("stream_malformed", "cut", { transport: "stream_cut" }), responding: true }],
  });
  const reset = actions.find((a) => a.type === "stream_reset");
  const first = actions.find((a) => a.type === "send_request");
  assert.deepEqual(reset, { type: "stream_reset", request: first.request, attempt: 1 });
  assert.equal(machine.tally().stream_resets, 1);
});

test("a freed machine refuses every call with a ReboundError, and its snapshots stay", () => {
  const machine = new AgentMachine();
  machine.handle(0, userText("hi"));
  const [, request] = machine.drain();
  machine.free();
  machine.free();
  for (const f of [() => machine.handle(1, { type: "cancel" }), () => machine.poll(), () => machine.tally(), () => machine.turns, () => machine.conversation()]) {
    assert.throws(f, (e) => e instanceof ReboundError && e.kind === "rebound" && /freed/.test(e.message));
  }
  assert.equal(request.conversation.length, 1);
  assert.deepEqual(request.conversation.messages(), [{ role: "user", content: [{ type: "text", text: "hi" }] }]);
});
