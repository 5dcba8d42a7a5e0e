/** Base of every error rebound throws for bad input. */
export class ReboundError extends Error {
  constructor(message: string, options?: ErrorOptions);
  /** Which error this is (each class has its own). */
  readonly kind:
    | "rebound"
    | "config"
    | "event"
    | "unknown_answer"
    | "unexpected_event"
    | "stream"
    | "trace"
    | "request"
    | "budget";
}
/** A machine configuration, scenario, policy or option that cannot be read. */
export class ConfigError extends ReboundError {
  readonly kind: "config";
}
/** An event the machine cannot take: malformed, or refused. The machine is unchanged. */
export class EventError extends ReboundError {
  readonly kind: "event" | "unknown_answer" | "unexpected_event";
}
/** An answer carrying an id that no command of this machine ever carried. */
export class UnknownAnswerError extends EventError {
  readonly kind: "unknown_answer";
}
/** An event that makes no sense now (a second user message during a run): a driver bug. */
export class UnexpectedEventError extends EventError {
  readonly kind: "unexpected_event";
}
/** Bytes that are no valid stream or response of the provider. */
export class StreamError extends ReboundError {
  constructor(message: string, failure: import("./types.js").ProviderFailure, options?: ErrorOptions);
  readonly kind: "stream";
  /** The classified failure, to answer the request with `provider_failed`. */
  readonly failure: import("./types.js").ProviderFailure;
}
/** A trace that cannot be read: empty, another format or version, a bad or cut line. */
export class TraceError extends ReboundError {
  readonly kind: "trace";
}
/** A request body that cannot be built. */
export class RequestError extends ReboundError {
  readonly kind: "request";
}
/** A permit ask, budget note or ticket a retry budget cannot take. */
export class BudgetError extends ReboundError {
  readonly kind: "budget";
}
