// Checked by `npx tsc -p js` (js/tsconfig.json includes test/**/*.ts), never run: a driver's
// switch over every action and every event, exhaustive to a `never`, so adding a member to
// `Action` or `Event` without handling it here stops the build; and values the types must
// refuse, each under a `@ts-expect-error` (tsc fails if one is accepted).

import {
  AgentMachine,
  describe,
  userText,
  type Action,
  type Answers,
  type AwaitingAction,
  type Event,
  type MachineConfigInput,
  type Outcome,
  type RunError,
} from "../lib/index.js";

/** Fails to compile when `value` can be anything but `never` (a member left unhandled). */
function unreachable(value: never): never {
  throw new Error(`unhandled: ${JSON.stringify(value)}`);
}

/** What a driver does with each action: every member named, no default. */
export function drive(machine: AgentMachine, action: Action, now: number): string {
  switch (action.type) {
    case "append_message":
      return `${action.message.role}: ${action.message.content.length} blocks`;
    case "send_request":
      return `request ${action.request} to ${action.target}, attempt ${action.attempt}, ${action.conversation.length} messages, ${action.purpose}, idle ${action.deadlines.idle_ms} ms`;
    case "sleep":
      return `timer ${action.timer} after ${action.delay_ms} ms`;
    case "notify_retry":
      return describe("retry_info", action.info);
    case "notify_fallback":
      return describe("fallback_info", action.info);
    case "compact": {
      const result = machine.compactDefault(action.conversation);
      machine.handle(now, { type: "compaction_finished", compaction: action.compaction, result });
      return "compacted";
    }
    case "replace_conversation":
      return `${action.report.before_messages} -> ${action.report.after_messages} (${action.report.reason}, ${action.report.method})`;
    case "run_tools":
      machine.handle(now, {
        type: "tools_finished",
        batch: action.batch,
        outcome: {
          per_call: action.calls.map((call) => ({
            tool_use_id: call.id,
            result: { Err: { model: { message: `no tool ${call.name}` } } },
          })),
        },
      });
      return "tools";
    case "acquire_permit":
      machine.handle(now, { type: "permit_answered", permit: action.permit, decision: "granted" });
      return `${action.ask.kind} permit for ${action.ask.target}`;
    case "note_budget":
      switch (action.note.note) {
        case "succeeded":
        case "retry_answered":
          return `target ${action.note.target}`;
        case "rate_limited":
          return `target ${action.note.target} until ${action.note.until}`;
        default:
          return unreachable(action.note);
      }
    case "finish":
      return typeof action.reason === "string" ? action.reason : action.reason.model;
    case "fail":
      return describe("run_error", action.error);
    case "stream_reset":
      return `request ${action.request} attempt ${action.attempt} was cut`;
    default:
      return unreachable(action);
  }
}

/** Every event, named. */
export function name(event: Event): string {
  switch (event.type) {
    case "user_message":
      return event.content.map((b) => b.type).join(",");
    case "resume":
    case "cancel":
      return event.type;
    case "provider_succeeded":
      return `${event.request}: ${event.response.stop_reason}`;
    case "provider_responding":
      return `${event.request} began`;
    case "provider_failed":
      return `${event.request}: ${event.failure.kind} ${event.failure.status ?? ""}`;
    case "tools_finished":
      return "per_call" in event.outcome ? `${event.outcome.per_call.length} outcomes` : "whole batch";
    case "timer_fired":
      return `timer ${event.timer}`;
    case "compaction_finished":
      return "Ok" in event.result ? `${event.result.Ok.length} messages` : event.result.Err;
    case "permit_answered":
      return typeof event.decision === "string" ? event.decision : `wait until ${event.decision.wait_until}`;
    case "host_failed":
      return event.failure.kind;
    default:
      return unreachable(event);
  }
}

/** Every run error, and an outcome read without a cast. */
export function why(outcome: Outcome): string {
  if ("Ok" in outcome) return typeof outcome.Ok === "string" ? outcome.Ok : `model: ${outcome.Ok.model}`;
  const error: RunError = outcome.Err;
  switch (error.type) {
    case "canceled":
    case "empty_user_message":
      return error.type;
    case "host":
      return error.failure.message;
    case "provider":
      return `${error.failure.kind} (${error.reason.type}) on ${error.label}, ${error.earlier.length} before`;
    case "invariant":
      return error.message;
    default:
      return unreachable(error);
  }
}

/** The answer to an awaited action is typed by the action's `type`. */
export function answerTo<A extends AwaitingAction>(_action: A, answer: Answers[A["type"]]): Event {
  return answer;
}

const config: MachineConfigInput = { retry: { max_attempts: 6 }, targets: [{ provider: "anthropic", model: "m" }] };
export const machine = new AgentMachine({ config, seed: 1n, record: true });
machine.handle(0, userText("hi"));
for (const action of machine.drain()) drive(machine, action, 1);

export const refused = [
  // @ts-expect-error: no action has this type
  ((action: Action) => action.type === "sleeep")(machine.poll()!),
  // @ts-expect-error: a sleep has no `request`
  ((action: Action) => action.type === "sleep" && action.request)(machine.poll()!),
  // @ts-expect-error: an event of an unknown type
  machine.handle(0, { type: "user_mesage", content: [] }),
  // @ts-expect-error: an id is a number
  machine.handle(0, { type: "timer_fired", timer: "1" }),
  // @ts-expect-error: a failure of an unknown kind
  machine.handle(0, { type: "provider_failed", request: 1, failure: { kind: "slow", message: "x" } }),
  // @ts-expect-error: a timer does not answer a request
  answerTo({ type: "send_request" } as Action & { type: "send_request" }, { type: "timer_fired", timer: 1 }),
  // @ts-expect-error: a setting that does not exist
  new AgentMachine({ config: { retries: 3 } }),
];
