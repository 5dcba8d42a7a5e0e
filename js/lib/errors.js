// The package's typed errors. Bad input throws one of these (never a panic); each is an
// `Error` with a `kind` naming its class, so `catch (e) { if (e instanceof ReboundError) … }`
// and `switch (e.kind)` both work.

import { isLoaded } from "./native.js";

/** Base of every error rebound throws for bad input. */
export class ReboundError extends Error {
  /** @param {string} message @param {ErrorOptions} [options] */
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
  /** Which error this is (each class has its own). */
  get kind() {
    return "rebound";
  }
}

/** A machine configuration, scenario, policy or option that cannot be read. */
export class ConfigError extends ReboundError {
  get kind() {
    return "config";
  }
}

/** An event the machine cannot take: malformed, or refused. The machine is unchanged. */
export class EventError extends ReboundError {
  get kind() {
    return "event";
  }
}

/** An answer carrying an id that no command of this machine ever carried. */
export class UnknownAnswerError extends EventError {
  get kind() {
    return "unknown_answer";
  }
}

/** An event that makes no sense now (a second user message during a run): a driver bug. */
export class UnexpectedEventError extends EventError {
  get kind() {
    return "unexpected_event";
  }
}

/**
 * Bytes that are no valid stream or response of the provider. `failure` holds the
 * classified ProviderFailure, to answer the request with `provider_failed`.
 */
export class StreamError extends ReboundError {
  /** @param {string} message @param {object} failure @param {ErrorOptions} [options] */
  constructor(message, failure, options) {
    super(message, options);
    /** The classified failure to answer the request with. */
    this.failure = failure;
  }
  get kind() {
    return "stream";
  }
}

/** A trace that cannot be read: empty, another format or version, a bad or cut line. */
export class TraceError extends ReboundError {
  get kind() {
    return "trace";
  }
}

/** A request body that cannot be built (an empty conversation, options the provider refuses). */
export class RequestError extends ReboundError {
  get kind() {
    return "request";
  }
}

/** A permit ask, budget note or ticket a retry budget cannot take. */
export class BudgetError extends ReboundError {
  get kind() {
    return "budget";
  }
}

const classes = {
  rebound: ReboundError,
  config: ConfigError,
  event: EventError,
  unknown_answer: UnknownAnswerError,
  unexpected_event: UnexpectedEventError,
  trace: TraceError,
  request: RequestError,
  budget: BudgetError,
};

/**
 * The typed error of what the native side threw (an `Error` with a `kind`); anything else
 * (a JavaScript `TypeError` of a wrong argument, say) as it is.
 */
export function typed(thrown) {
  if (!(thrown instanceof Error) || typeof thrown.kind !== "string") return thrown;
  if (thrown.kind === "stream") {
    let failure;
    try {
      failure = JSON.parse(thrown.failure);
    } catch {
      failure = undefined;
    }
    return new StreamError(thrown.message, failure);
  }
  const Class = classes[thrown.kind] ?? ReboundError;
  return new Class(thrown.message);
}

/** `f()`, with what the native side throws made typed. */
export function call(f) {
  try {
    return f();
  } catch (thrown) {
    if (!isLoaded()) {
      throw new ReboundError(
        'rebound-agent\'s WebAssembly is not loaded: import "rebound-agent", or await ' +
          'initRebound(...) of "rebound-agent/manual" before anything else',
      );
    }
    throw typed(thrown);
  }
}

/** The JSON text of `value`, or a ReboundError of `Class` naming `what` when it has none. */
export function json(value, what, Class = EventError) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw new Class(`${what} has no JSON form: ${e.message}`);
  }
  if (text === undefined) throw new Class(`${what} has no JSON form (it is ${typeof value})`);
  return text;
}
