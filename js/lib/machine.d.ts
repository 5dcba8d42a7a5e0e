import type {
  Action,
  CompactionResult,
  Event,
  FallbackInfo,
  MachineConfig,
  MachineConfigInput,
  Message,
  Outcome,
  ProviderRetryInfo,
  RunError,
  RunTally,
  SnapshotSummary,
} from "./types.js";

/** A shared, read-only conversation as a command carried it, or a trace's summary of one. */
export class Snapshot {
  private constructor();
  /** A snapshot of `messages`. */
  static of(messages: readonly Message[]): Snapshot;
  /** The snapshot of a trace's `{messages, digest}`. */
  static fromSummary(summary: SnapshotSummary): Snapshot;
  /** Whether the messages themselves are here (not only a trace's summary). */
  readonly hasMessages: boolean;
  /** The 64-bit FNV-1a digest of the conversation's JSON, 16 hex digits. */
  readonly digest: string;
  /** The number of messages. */
  readonly length: number;
  /** The messages (a new array each call); throws a ReboundError for a trace's summary. */
  messages(): Message[];
  /** Whether `other` is the same conversation. */
  equals(other: unknown): boolean;
  /** The trace's form. */
  toJSON(): SnapshotSummary;
}

/** Options of a new AgentMachine. */
export interface MachineOptions {
  /** A MachineConfig in its JSON shape; rebound's defaults fill what it leaves out. */
  config?: MachineConfigInput;
  /** The jitter seed (0). */
  seed?: number | bigint | string;
  /** The messages the run starts from. */
  conversation?: readonly Message[];
  /** Record the steps, for `traceJsonl()`. */
  record?: boolean;
  /** Keys and tokens (each at least 8 bytes) to mask in every failure the machine is told of. */
  secrets?: readonly string[];
}

/** How `handle` took an event. */
export type Handled = "accepted" | "stale" | "terminal";

/** The agent machine: events in with the caller's clock, actions out. */
export class AgentMachine {
  constructor(options?: MachineOptions);
  /** Feeds one event at `nowMs`; throws an EventError (machine unchanged) if it cannot take it. */
  handle(nowMs: number, event: Event): Handled;
  /** The next action, or `undefined` when there is none. */
  poll(): Action | undefined;
  /** Every action there is now, in order. */
  drain(): Action[];
  /** The conversation as it stands (only complete messages). */
  conversation(): Snapshot;
  /** Assistant messages appended in this run. */
  readonly turns: number;
  /** Index of the target requests currently go to. */
  readonly target: number;
  /** Whether the run ended (finished or failed). */
  readonly isTerminal: boolean;
  /** The jitter seed. */
  readonly seed: bigint;
  /** What happened so far, counted by core's run. */
  tally(): RunTally;
  /** How the run ended, or `undefined` while it runs. */
  outcome(): Outcome | undefined;
  /** The configuration with every default filled in. */
  config(): MachineConfig;
  /** Core's compaction of `conversation` with this machine's policy. */
  compactDefault(
    conversation: Snapshot | readonly Message[],
  ): CompactionResult;
  /** The run so far as a trace (JSON Lines); needs `record: true`. */
  traceJsonl(): string;
  /**
   * Releases the machine's WebAssembly memory now (optional: the garbage collector does it
   * once the event loop turns; a synchronous loop over many machines should call it). Every
   * later call throws a ReboundError; Snapshots it handed out stay valid.
   */
  free(): void;
}

/** The one-line text a person reads for a retry notice (`notify_retry`'s `info`). */
export function describe(kind: "retry_info", value: ProviderRetryInfo): string;
/** The one-line text a person reads for a fallback notice (`notify_fallback`'s `info`). */
export function describe(kind: "fallback_info", value: FallbackInfo): string;
/** The one-line text a person reads for a run error (`fail`'s `error`). */
export function describe(kind: "run_error", value: RunError): string;
/** `event` as the machine reads it; throws an EventError if it cannot. */
export function normalizeEvent(event: unknown): Event;
/** The event of a user message of one text block. */
export function userText(text: string): Event;
