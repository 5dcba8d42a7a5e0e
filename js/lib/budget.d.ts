// The retry budget shared by every machine of a process: core's RetryBudget, and
// SharedBudget, which answers a fleet of async agents with one.

import type {
  AcquirePermit,
  BudgetConfig,
  BudgetNote,
  NoteBudget,
  PermitAnswered,
  PermitAsk,
  PermitDecision,
} from "./types.js";

/** What a budget did so far. */
export interface RetryBudgetStats {
  /** Charged permits granted. */
  granted: number;
  /** Charged permits denied. */
  denied: number;
  /** Charged permits that waited in the queue. */
  queued: number;
  /** Milli-tokens deposited. */
  deposited_milli: number;
}

/**
 * core's retry budget: a token bucket of retries shared by every machine of a process, with
 * a first-come, first-served queue of waiting retries and the providers' shared rate-limit
 * windows. Plain data fed with `nowMs`, the budget's clock, on which every machine sharing it
 * must be driven. Forward each `acquire_permit`'s `ask` to `request` and each
 * `note_budget`'s `note` to `record`; after every call drain `pollDecision`, and `tick` at
 * `nextWakeup()`. Bad input throws a BudgetError (a ConfigError for a config, a ReboundError
 * for a clock reading or ticket out of range, a TypeError for a non-number) and leaves the
 * budget as it was.
 */
export class RetryBudget {
  /** A budget of `config` (missing fields take core's defaults; unknown ones throw a ConfigError). */
  constructor(config?: Partial<BudgetConfig> | null);
  /**
   * The decision for `ask` when known at once, or `undefined` when the request waits under
   * `ticket` until `pollDecision` hands out its answer. A BudgetError for a malformed ask or a
   * ticket whose answer is still to come.
   */
  request(nowMs: number, ticket: number, ask: PermitAsk): PermitDecision | undefined;
  /** Takes a `note_budget`'s `note`; a BudgetError when malformed. */
  record(nowMs: number, note: BudgetNote): void;
  /** Lets time pass: refill, the grants it pays for, denials at deadlines. */
  tick(nowMs: number): void;
  /** Withdraws a waiting request; whether it was waiting. */
  cancel(ticket: number): boolean;
  /** The next `[ticket, decision]` decided for a waiting request, in order. */
  pollDecision(): [number, PermitDecision] | undefined;
  /** Every `[ticket, decision]` decided so far. */
  drainDecisions(): [number, PermitDecision][];
  /** When `tick` next changes something on its own; `undefined` when nobody waits. */
  nextWakeup(): number | undefined;
  /** Tokens available at `nowMs` (refills up to it: drain `pollDecision` after). */
  balance(nowMs: number): number;
  /** Charged permits waiting in the queue. */
  readonly waiting: number;
  /** What the budget did so far. */
  stats(): RetryBudgetStats;
  /** The configuration, every default filled in. */
  config(): BudgetConfig;
  /**
   * Releases the budget's WebAssembly memory now (optional: the garbage collector does it
   * once the event loop turns). Every later call throws a ReboundError.
   */
  free(): void;
}

/**
 * One retry budget for every machine of a process: one core RetryBudget, one clock, and each
 * waiting retry woken the moment the budget decides it. Drive every machine sharing it on
 * its clock, `nowMs()`.
 */
export class SharedBudget {
  /** A shared budget of `config`; `clock` is a monotonic clock in ms (`performance.now`). */
  constructor(config?: Partial<BudgetConfig> | null, options?: { clock?: () => number });
  /** The budget's clock: whole milliseconds since it was made. */
  nowMs(): number;
  /** The core budget it drives (feed it no requests of your own). */
  readonly budget: RetryBudget;
  /**
   * The `permit_answered` event answering `command` (an `acquire_permit` action), at once or
   * when the budget decides it. Aborting `signal` withdraws the request and rejects with its
   * reason. A BudgetError for a malformed ask.
   */
  acquire(
    command: Pick<AcquirePermit, "permit" | "ask">,
    options?: { signal?: AbortSignal },
  ): Promise<PermitAnswered>;
  /** Forwards a `note_budget` action; a BudgetError for a malformed note. */
  note(command: Pick<NoteBudget, "note">): void;
  /** What the budget did so far. */
  stats(): RetryBudgetStats;
  /** Tokens available now. */
  balance(): number;
  /** Requests waiting in the queue. */
  readonly waiting: number;
}
