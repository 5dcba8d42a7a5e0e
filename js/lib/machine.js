// The agent machine for JavaScript: core's `Run` in WebAssembly, with events in and actions
// out as plain objects in the JSON shape of the trace format (see index.d.ts for each).
// Nothing here decides anything: it converts and forwards.

import { native } from "./native.js";
import { call, ConfigError, EventError, json, ReboundError } from "./errors.js";

/**
 * A shared, read-only conversation as a command carried it (the machine's own copy, not a
 * copy of it), or the summary of one read from a trace.
 */
export class Snapshot {
  #native;

  /** @internal Wraps a native snapshot; use `Snapshot.of` or `Snapshot.fromSummary`. */
  constructor(nativeSnapshot) {
    if (!(nativeSnapshot instanceof native.Snapshot)) {
      throw new TypeError("use Snapshot.of(messages) or Snapshot.fromSummary(summary)");
    }
    this.#native = nativeSnapshot;
  }

  /** A snapshot of `messages` (a list of messages in their JSON shape). */
  static of(messages) {
    return new Snapshot(call(() => native.Snapshot.fromMessages(json(messages, "conversation"))));
  }

  /** The snapshot of a trace's `{messages: n, digest: "<16 hex digits>"}`. */
  static fromSummary(summary) {
    return new Snapshot(
      call(() => native.Snapshot.fromSummary(json(summary, "snapshot summary"))),
    );
  }

  /** @internal The native snapshot, for the package's other modules. */
  static native(snapshot) {
    return snapshot.#native;
  }

  /** Whether the messages themselves are here (not only a trace's summary). */
  get hasMessages() {
    return this.#native.hasMessages;
  }

  /** The 64-bit FNV-1a digest of the conversation's JSON, 16 hex digits, as in traces. */
  get digest() {
    return this.#native.digest;
  }

  /** The number of messages. */
  get length() {
    return this.#native.length;
  }

  /** The messages, in their JSON shape (a new array each call). */
  messages() {
    return JSON.parse(call(() => this.#native.messagesJson()));
  }

  /** Whether `other` is the same conversation. */
  equals(other) {
    return other instanceof Snapshot && this.#native.equals(other.#native);
  }

  /** The trace's form: `{messages: n, digest: "…"}`. */
  toJSON() {
    return { messages: this.length, digest: this.digest };
  }
}

/** A conversation argument: a Snapshot, or a list of messages. */
export function snapshotOf(conversation) {
  return conversation instanceof Snapshot ? conversation : Snapshot.of(conversation);
}

const CARRIES_CONVERSATION = new Set(["send_request", "compact", "replace_conversation"]);

/**
 * The agent machine: feed it events with the caller's clock (`handle`), execute what it asks
 * (`poll` until nothing is left), and answer the commands that await an answer with the id
 * they carried. One run per machine; the tally, the trace and the outcome are core's.
 */
export class AgentMachine {
  #native;

  /**
   * @param {object} [options]
   * @param {object} [options.config] a MachineConfig in its JSON shape (defaults: rebound's)
   * @param {number|bigint|string} [options.seed] the jitter seed (0)
   * @param {object[]} [options.conversation] the messages the run starts from
   * @param {boolean} [options.record] record the steps, for `traceJsonl()`
   * @param {string[]} [options.secrets] keys and tokens to mask in every failure it is told of
   */
  constructor(options = {}) {
    if (options === null || typeof options !== "object") {
      throw new ConfigError("AgentMachine takes an options object");
    }
    const { config, seed, conversation, record = false, secrets = [] } = options;
    if (!Array.isArray(secrets) || secrets.some((s) => typeof s !== "string")) {
      throw new ConfigError("secrets must be an array of strings");
    }
    this.#native = call(
      () =>
        new native.Machine(
          config === undefined || config === null
            ? undefined
            : json(config, "machine config", ConfigError),
          seed,
          conversation === undefined || conversation === null
            ? undefined
            : json(conversation, "conversation", ConfigError),
          Boolean(record),
          secrets,
        ),
    );
  }

  /** The native machine; a ReboundError once `free()` released it. */
  #live() {
    if (this.#native === undefined) {
      throw new ReboundError("this machine was freed: make a new AgentMachine");
    }
    return this.#native;
  }

  /**
   * Releases the machine's WebAssembly memory now. Optional: a machine no longer referenced
   * is released by the garbage collector once the event loop turns (between `await`s). A
   * synchronous loop over many machines (a batch of simulated runs, a benchmark) should call
   * it, or the memory grows until the loop ends. Every later call throws a ReboundError;
   * Snapshots it handed out stay valid.
   */
  free() {
    this.#native?.free();
    this.#native = undefined;
  }

  /**
   * Feeds one event at `nowMs` (the caller's clock, in ms). Returns `"accepted"`, `"stale"`
   * (an answer to something no longer awaited) or `"terminal"` (the run had ended). Throws an
   * EventError (the machine unchanged) for a malformed event, an UnknownAnswerError for an
   * answer to a command it never emitted, an UnexpectedEventError for one it did not ask for.
   */
  handle(nowMs, event) {
    if (typeof nowMs !== "number") {
      throw new EventError(`nowMs must be a number of milliseconds, not ${typeof nowMs}`);
    }
    return call(() => this.#live().handle(nowMs, json(event, "event")));
  }

  /**
   * The next action, or `undefined` when there is none: a command of the machine (its
   * `type` says which), or `{type: "stream_reset"}` when an answer that had begun failed.
   */
  poll() {
    const text = call(() => this.#live().poll());
    if (text === undefined) return undefined;
    const action = JSON.parse(text);
    if (CARRIES_CONVERSATION.has(action.type)) {
      action.conversation = new Snapshot(this.#live().polledSnapshot());
    }
    return action;
  }

  /** Every action there is now, in order (`poll` until `undefined`). */
  drain() {
    const actions = [];
    for (let a = this.poll(); a !== undefined; a = this.poll()) actions.push(a);
    return actions;
  }

  /** The conversation as it stands (only complete messages). */
  conversation() {
    return new Snapshot(this.#live().conversation());
  }

  /** Assistant messages appended in this run. */
  get turns() {
    return this.#live().turns;
  }

  /** Index of the target requests currently go to. */
  get target() {
    return this.#live().target;
  }

  /** Whether the run ended (finished or failed). */
  get isTerminal() {
    return this.#live().isTerminal;
  }

  /** The jitter seed, as a bigint. */
  get seed() {
    return BigInt(this.#live().seed);
  }

  /** What happened so far, counted by core's run. */
  tally() {
    return JSON.parse(call(() => this.#live().tallyJson()));
  }

  /** How the run ended: `{Ok: reason}` or `{Err: error}`, or `undefined` while it runs. */
  outcome() {
    const text = call(() => this.#live().outcomeJson());
    return text === undefined ? undefined : JSON.parse(text);
  }

  /** The configuration, in its JSON shape (every default filled in). */
  config() {
    return JSON.parse(call(() => this.#live().configJson()));
  }

  /**
   * Core's compaction of `conversation` (a Snapshot or a list of messages) with this
   * machine's policy: the `result` of `compaction_finished`, `{Ok: messages}` or `{Err: why}`.
   */
  compactDefault(conversation) {
    const snapshot = Snapshot.native(snapshotOf(conversation));
    return JSON.parse(call(() => this.#live().compactDefault(snapshot)));
  }

  /** The run so far as a trace (JSON Lines), when the machine was made with `record: true`. */
  traceJsonl() {
    return call(() => this.#live().traceJsonl());
  }
}

/**
 * The one-line text a person reads for a retry notice (`"retry_info"`), a fallback notice
 * (`"fallback_info"`) or a run error (`"run_error"`).
 */
export function describe(kind, value) {
  // wasm-bindgen's glue reads a string argument's `length`: anything else must not reach it
  // (an object there ends in a trap of the WebAssembly, not an error).
  if (typeof kind !== "string") {
    throw new ReboundError(
      `cannot describe a ${typeof kind}: expected "retry_info", "fallback_info" or "run_error"`,
    );
  }
  return call(() => native.describe(kind, json(value, kind)));
}

/** `event` as the machine reads it (its normalized JSON shape); throws an EventError if it cannot. */
export function normalizeEvent(event) {
  return JSON.parse(call(() => native.normalizeEvent(json(event, "event"))));
}

/** The event of a user message of one text block. */
export function userText(text) {
  return { type: "user_message", content: [{ type: "text", text }] };
}
