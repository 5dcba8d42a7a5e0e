// A scripted world for the tests: drives an AgentMachine through the JavaScript API as an
// embedder's loop would (poll everything, answer the one awaited action, repeat) with
// answers taken from a script. Not a test itself; the tests import it.

import { AgentMachine, userText } from "../../lib/index.js";

/** The actions that await an answer. */
export const AWAITING = new Set(["send_request", "sleep", "run_tools", "compact", "acquire_permit"]);

/** An assistant response of one text block that ends the turn. */
export function endTurn(text = "done", usage = { input_tokens: 12, output_tokens: 3 }) {
  return {
    message: { role: "assistant", content: [{ type: "text", text }] },
    stop_reason: "end_turn",
    usage,
  };
}

/** An assistant response that calls tool `name` as `id` with `input`. */
export function toolUse(id, name, input = {}) {
  return {
    message: {
      role: "assistant",
      content: [
        { type: "text", text: "let me look" },
        { type: "tool_use", id, name, input },
      ],
    },
    stop_reason: "tool_use",
    usage: { input_tokens: 20, output_tokens: 5 },
  };
}

/** A provider failure of `kind` with `message` and the other fields of `extra`. */
export function failure(kind, message = `${kind} happened`, extra = {}) {
  return { kind, message, ...extra };
}

/** A tool the model may call. */
export const READ_TOOL = {
  name: "read",
  description: "Reads a file.",
  input_schema: { type: "object", properties: { path: { type: "string" } } },
};

/**
 * Runs a machine of `options` from `first` (a user message by default) against a world:
 * - `world.answers`: what each `send_request` gets, in order: an AssistantResponse, or
 *   `{failure}` (optionally `{failure, responding: true}`: an answer that began, then failed);
 *   when they run out, `endTurn()`.
 * - `world.tool(call)`: a call's `result` (default: `{Ok: {parts: [text]}}`).
 * - `world.compact(action, machine)`: a `compaction_finished` result (default: core's).
 * - `world.permits`: `permit_answered` decisions in order (then `"granted"`).
 * - `world.interrupt(action, machine)`: an event to send instead of the answer (a cancel).
 * Returns the machine and every action and event (with its time) in order.
 */
export function drive(options = {}, world = {}, first = userText("hello")) {
  const machine = new AgentMachine(options);
  const answers = [...(world.answers ?? [])];
  const permits = [...(world.permits ?? [])];
  const actions = [];
  const events = [];
  let now = 0;
  const feed = (event) => {
    events.push({ at: now, event });
    machine.handle(now, event);
  };
  feed(first);
  for (let step = 0; step < 500 && !machine.isTerminal; step++) {
    const polled = machine.drain();
    actions.push(...polled);
    const awaited = polled.find((a) => AWAITING.has(a.type));
    if (awaited === undefined) break;
    now += 10;
    const instead = world.interrupt?.(awaited, machine);
    if (instead !== undefined) {
      feed(instead);
      continue;
    }
    switch (awaited.type) {
      case "send_request": {
        const next = answers.shift() ?? endTurn();
        if (next.failure !== undefined) {
          if (next.responding) feed({ type: "provider_responding", request: awaited.request });
          feed({ type: "provider_failed", request: awaited.request, failure: next.failure });
        } else {
          feed({ type: "provider_succeeded", request: awaited.request, response: next });
        }
        break;
      }
      case "sleep":
        now += awaited.delay_ms;
        feed({ type: "timer_fired", timer: awaited.timer });
        break;
      case "run_tools": {
        const outcomes = awaited.calls.map((call) => ({
          tool_use_id: call.id,
          result: world.tool?.(call) ?? { Ok: { parts: [{ type: "text", text: `ran ${call.name}` }] } },
        }));
        feed({ type: "tools_finished", batch: awaited.batch, outcome: { per_call: outcomes } });
        break;
      }
      case "compact":
        feed({
          type: "compaction_finished",
          compaction: awaited.compaction,
          result: world.compact?.(awaited, machine) ?? machine.compactDefault(awaited.conversation),
        });
        break;
      case "acquire_permit":
        feed({ type: "permit_answered", permit: awaited.permit, decision: permits.shift() ?? "granted" });
        break;
    }
  }
  actions.push(...machine.drain());
  return { machine, actions, events };
}

/** A conversation long enough for core's compaction to shrink: a user turn and big answers,
 * ending with an answer (so a user message may follow). */
export function longConversation(turns = 8) {
  const messages = [{ role: "user", content: [{ type: "text", text: "fix the bug" }] }];
  for (let i = 0; i < turns; i++) {
    messages.push({ role: "assistant", content: [{ type: "text", text: `answer ${i} `.repeat(400) }] });
    if (i + 1 < turns) messages.push({ role: "user", content: [{ type: "text", text: `more ${i}` }] });
  }
  return messages;
}
