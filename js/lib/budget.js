// A retry budget shared by every machine of one process: core's RetryBudget (`RetryBudget`),
// and `SharedBudget`, which answers the `acquire_permit` and `note_budget` actions of a fleet
// of async agents with one RetryBudget, one clock and one timer. Every decision is core's;
// this module converts, and hands each decision to its waiter.

import { native } from "./native.js";
import { BudgetError, ConfigError, ReboundError, call, json } from "./errors.js";

/** Throws a TypeError unless `value` is a number (`what` names it). */
function number(value, what) {
  if (typeof value !== "number") throw new TypeError(`${what} must be a number, not ${typeof value}`);
  return value;
}

/**
 * core's retry budget: a token bucket of retries shared by every machine of a process, with
 * a first-come, first-served queue of waiting retries and the providers' shared rate-limit
 * windows. Plain data fed with `nowMs` (the budget's clock, on which every machine sharing
 * it must be driven).
 *
 * Forward each `acquire_permit`'s `ask` to `request` and each `note_budget`'s `note` to
 * `record`; after every call drain `pollDecision` (a deposit may grant waiters queued
 * earlier), and call `tick` at `nextWakeup()` so refill and deadlines take effect when
 * nothing else happens. For async agents, `SharedBudget` does all of that.
 */
export class RetryBudget {
  #native;

  /**
   * A budget of `config` (a BudgetConfig in its JSON shape: capacity, initial,
   * deposit_per_request, deposit_per_success, refill_per_sec, deposit_per_answered_retry;
   * missing fields take core's defaults, unknown ones throw a ConfigError).
   */
  constructor(config) {
    const text =
      config === undefined || config === null ? undefined : json(config, "budget config", ConfigError);
    this.#native = call(() => new native.RetryBudget(text));
  }

  /** The native budget; a ReboundError once `free()` released it. */
  #live() {
    if (this.#native === undefined) throw new ReboundError("this retry budget was freed");
    return this.#native;
  }

  /**
   * Releases the budget's WebAssembly memory now. Optional: a budget no longer referenced is
   * released by the garbage collector once the event loop turns. Every later call throws a
   * ReboundError.
   */
  free() {
    this.#native?.free();
    this.#native = undefined;
  }

  /**
   * The decision for `ask` (an `acquire_permit`'s: kind, target, deadline, since) at
   * `nowMs` when it is known at once — `"granted"`, `"denied"` or `{wait_until: ms}` — or
   * `undefined` when the request waits in the queue under `ticket`, until `pollDecision`
   * hands out its answer. A BudgetError for a malformed ask or a ticket whose answer is
   * still to come.
   */
  request(nowMs, ticket, ask) {
    number(nowMs, "nowMs");
    number(ticket, "ticket");
    const text = json(ask, "permit ask", BudgetError);
    const budget = this.#live();
    const decided = call(() => budget.request(nowMs, ticket, text));
    return decided === undefined ? undefined : JSON.parse(decided);
  }

  /**
   * Takes a `note_budget`'s `note` (`{note: "succeeded" | "retry_answered" | "rate_limited",
   * target, until?}`) at `nowMs`; a BudgetError when it is malformed.
   */
  record(nowMs, note) {
    number(nowMs, "nowMs");
    const text = json(note, "budget note", BudgetError);
    const budget = this.#live();
    call(() => budget.record(nowMs, text));
  }

  /** Lets time pass to `nowMs`: refill, the grants it pays for, denials at deadlines. */
  tick(nowMs) {
    number(nowMs, "nowMs");
    const budget = this.#live();
    call(() => budget.tick(nowMs));
  }

  /** Withdraws a waiting request (its machine stopped waiting); whether it was waiting. */
  cancel(ticket) {
    number(ticket, "ticket");
    const budget = this.#live();
    return call(() => budget.cancel(ticket));
  }

  /** The next `[ticket, decision]` decided for a waiting request, in order, or `undefined`. */
  pollDecision() {
    const budget = this.#live();
    const decided = call(() => budget.pollDecision());
    return decided === undefined ? undefined : JSON.parse(decided);
  }

  /** Every `[ticket, decision]` decided so far (`pollDecision` until `undefined`). */
  drainDecisions() {
    const out = [];
    for (let d = this.pollDecision(); d !== undefined; d = this.pollDecision()) out.push(d);
    return out;
  }

  /** When `tick` next changes something on its own (ms); `undefined` when nobody waits. */
  nextWakeup() {
    return this.#live().nextWakeup();
  }

  /** Tokens available at `nowMs` (refills up to it: drain `pollDecision` after). */
  balance(nowMs) {
    number(nowMs, "nowMs");
    const budget = this.#live();
    return call(() => budget.balance(nowMs));
  }

  /** Charged permits waiting in the queue. */
  get waiting() {
    return this.#live().waiting;
  }

  /** `{granted, denied, queued, deposited_milli}`: charged permits granted, denied and queued, and milli-tokens deposited. */
  stats() {
    const budget = this.#live();
    return JSON.parse(call(() => budget.statsJson()));
  }

  /** The configuration in its JSON shape, every default filled in. */
  config() {
    const budget = this.#live();
    return JSON.parse(call(() => budget.configJson()));
  }
}

/**
 * One retry budget for every machine of a process, as the Rust runner's shared budget is:
 * one core RetryBudget, one clock, and each waiting retry woken the moment the budget
 * decides it. Drive every machine sharing it on its clock, `nowMs()`.
 */
export class SharedBudget {
  #budget;
  #clock;
  #origin;
  /** Tickets waiting for their answer, and how to hand it over. */
  #waiters = new Map();
  #nextTicket = 0;
  #timer = undefined;
  #timerAt = undefined;

  /**
   * A shared budget of `config` (a BudgetConfig in its JSON shape; core's default without
   * one). `clock` is any monotonic clock in milliseconds (`performance.now` by default); the
   * budget's clock starts at 0 when it is made.
   */
  constructor(config, options = {}) {
    const { clock = () => performance.now() } = options ?? {};
    if (typeof clock !== "function") throw new ConfigError("clock must be a function returning milliseconds");
    this.#budget = new RetryBudget(config);
    this.#clock = clock;
    this.#origin = clock();
  }

  /** The budget's clock: whole milliseconds since it was made (rounded to the nearest). */
  nowMs() {
    return Math.max(0, Math.round(this.#clock() - this.#origin));
  }

  /** The core budget it drives (feed it no requests of your own). */
  get budget() {
    return this.#budget;
  }

  /**
   * The `permit_answered` event answering `command` (an `acquire_permit` of any machine
   * sharing this budget): at once, or when a deposit, refill, a rate limit or the ask's
   * deadline decides it. Aborting `signal` withdraws the request from the queue and rejects
   * with the signal's reason. A BudgetError for a malformed ask.
   */
  acquire(command, options = {}) {
    const { signal } = options ?? {};
    if (signal?.aborted) return Promise.reject(signal.reason);
    this.#nextTicket += 1;
    const ticket = this.#nextTicket;
    let decided;
    try {
      decided = this.#budget.request(this.nowMs(), ticket, command.ask);
    } catch (e) {
      return Promise.reject(e);
    }
    const answer = (decision) => ({ type: "permit_answered", permit: command.permit, decision });
    if (decided !== undefined) {
      this.#settle();
      return Promise.resolve(answer(decided));
    }
    const waiting = new Promise((resolve, reject) => {
      const onAbort = () => {
        if (this.#waiters.delete(ticket)) {
          // Still waiting: leave the queue.
          this.#budget.cancel(ticket);
          this.#settle();
        }
        reject(signal.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#waiters.set(ticket, (decision) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(answer(decision));
      });
    });
    this.#settle(); // the request's own ask may already have decided it
    return waiting;
  }

  /** Forwards a `note_budget` (a success, an answered retry, a rate limit); a BudgetError for a malformed note. */
  note(command) {
    this.#budget.record(this.nowMs(), command.note);
    this.#settle();
  }

  /** Charged permits granted, denied and queued, and milli-tokens deposited. */
  stats() {
    return this.#budget.stats();
  }

  /** Tokens available now. */
  balance() {
    const tokens = this.#budget.balance(this.nowMs());
    this.#settle();
    return tokens;
  }

  /** Requests waiting in the queue. */
  get waiting() {
    return this.#budget.waiting;
  }

  /** Hands every decided permit to its waiter, then sets the timer for the next wakeup. */
  #settle() {
    for (const [ticket, decision] of this.#budget.drainDecisions()) {
      const hand = this.#waiters.get(ticket);
      // A waiter that is gone was withdrawn: nothing to tell.
      if (hand !== undefined) {
        this.#waiters.delete(ticket);
        hand(decision);
      }
    }
    this.#schedule(this.#budget.nextWakeup());
  }

  #schedule(at) {
    if (at === this.#timerAt) return;
    clearTimeout(this.#timer);
    this.#timer = this.#timerAt = undefined;
    if (at === undefined) return;
    const delay = Math.max(0, this.#origin + at - this.#clock());
    // The tick takes its turn behind the timers due at the same time, as the Rust runner's:
    // a first attempt due at the moment a waiter's deadline comes still pays for that waiter.
    this.#timer = setTimeout(() => setTimeout(() => this.#wake(), 0), delay);
    this.#timerAt = at;
  }

  #wake() {
    this.#timer = this.#timerAt = undefined;
    this.#budget.tick(this.nowMs());
    this.#settle();
  }
}
