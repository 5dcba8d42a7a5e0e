// The wire helpers for agents with their own HTTP client (`fetch`): request bodies and
// paths, the incremental stream decoder, whole-response parsing, failure classification and
// compaction, each one rebound-core's (see wire.d.ts). This module converts JavaScript
// values (bytes, headers, options) to what the native side takes and parses what it
// returns; it decides nothing.

import { native } from "./native.js";
import { call, ConfigError, ReboundError, RequestError, json } from "./errors.js";
import { Snapshot } from "./machine.js";

const encoder = new TextEncoder();

/** The bytes of `data`: a Uint8Array (or another view, or an ArrayBuffer) as it is, a string as UTF-8. */
function bytesOf(data, what) {
  if (data instanceof Uint8Array) return data;
  if (typeof data === "string") return encoder.encode(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw new TypeError(`${what} must be a Uint8Array, an ArrayBuffer or a string`);
}

/** `value` when it is a string; a TypeError naming `what` else. */
function string(value, what) {
  if (typeof value !== "string") throw new TypeError(`${what} must be a string, not ${typeof value}`);
  return value;
}

/** An optional string option: a string, or `undefined` for nothing (`undefined` or `null`). */
function optionalString(value, what) {
  return value === undefined || value === null ? undefined : string(value, what);
}

/** The secrets option: an array of strings (a lone string is one secret). */
function secretsOf(secrets) {
  if (secrets === undefined || secrets === null) return [];
  if (typeof secrets === "string") return [secrets];
  if (!Array.isArray(secrets) || secrets.some((s) => typeof s !== "string")) {
    throw new ConfigError("secrets must be a string or an array of strings");
  }
  return secrets;
}

/** An options argument: an object, or nothing. */
function optionsOf(options, what) {
  if (options === undefined || options === null) return {};
  if (typeof options !== "object") throw new TypeError(`${what} takes an options object`);
  return options;
}

/**
 * Runs `f` with the native snapshot of `conversation` (a Snapshot, shared; or a list of
 * messages, read as a RequestError when it is no conversation).
 */
function withConversation(conversation, f) {
  if (conversation instanceof Snapshot) return f(Snapshot.native(conversation));
  const snapshot = call(() =>
    native.requestConversation(json(conversation, "conversation", RequestError)),
  );
  try {
    return f(snapshot);
  } finally {
    snapshot.free();
  }
}

/** The names of the wire formats rebound speaks; every `provider` argument takes one. */
export function providerKinds() {
  return native.providerKinds();
}

/**
 * The JSON request body for `provider` as text, ready to send: built by rebound-core from
 * `conversation` (a command's Snapshot, or a list of messages) for `model`. Throws a
 * RequestError when no request can be built (an empty conversation, tool calls not answered
 * in order, options the provider refuses), a ConfigError for options or tools it cannot read.
 */
export function requestBody(provider, conversation, model, options) {
  const {
    maxTokens,
    system,
    tools,
    stream = true,
    options: requestOptions,
    baseUrl,
    identity,
  } = optionsOf(options, "requestBody");
  if (maxTokens !== undefined && typeof maxTokens !== "number") {
    throw new RequestError(`maxTokens must be a number, not ${typeof maxTokens}`);
  }
  const toolsJson =
    tools === undefined || tools === null ? undefined : json(tools, "tools", ConfigError);
  const optionsJson =
    requestOptions === undefined || requestOptions === null
      ? undefined
      : json(requestOptions, "request options", ConfigError);
  const strings = [
    string(provider, "provider"),
    string(model, "model"),
    optionalString(system, "system"),
    optionalString(baseUrl, "baseUrl"),
    optionalString(identity, "identity"),
  ];
  return withConversation(conversation, (snapshot) =>
    call(() =>
      native.requestBody(
        strings[0],
        snapshot,
        strings[1],
        maxTokens,
        strings[2],
        toolsJson,
        Boolean(stream),
        optionsJson,
        strings[3],
        strings[4],
      ),
    ),
  );
}

/**
 * The URL path of `provider`'s requests for `model`, to append to its base URL. Gemini's and
 * Bedrock's name the model (a ConfigError without one) and whether to stream.
 */
export function requestPath(provider, model = "", stream = true) {
  const kind = string(provider, "provider");
  const name = string(model, "model");
  return call(() => native.requestPath(kind, name, Boolean(stream)));
}

/**
 * A whole non-streamed response body (HTTP 200) as an AssistantResponse. Throws a
 * StreamError (its `failure` answers the request, `secrets` masked) when the body is an
 * error object, not a response, or not JSON.
 */
export function parseResponse(provider, body, options) {
  const { secrets } = optionsOf(options, "parseResponse");
  const kind = string(provider, "provider");
  const bytes = bytesOf(body, "body");
  const masked = secretsOf(secrets);
  return JSON.parse(call(() => native.parseResponse(kind, bytes, masked)));
}

/**
 * The incremental decoder of one streamed response body: `feed` it the body's bytes as they
 * arrive (any split; strings as UTF-8), show the deltas, then `finish()` for the
 * AssistantResponse. Bedrock's body is AWS event-stream frames, the others' server-sent
 * events.
 */
export class StreamDecoder {
  #native;

  /** A decoder for one body of `provider`; `secrets` are masked in the failures it throws. */
  constructor(provider, options) {
    const { secrets } = optionsOf(options, "StreamDecoder");
    const kind = string(provider, "provider");
    const masked = secretsOf(secrets);
    this.#native = call(() => new native.StreamDecoder(kind, masked));
  }

  /** The native decoder; a ReboundError once `free()` released it. */
  #live() {
    if (this.#native === undefined) {
      throw new ReboundError("this decoder was freed: make a new StreamDecoder for the next body");
    }
    return this.#native;
  }

  /**
   * Releases the decoder's WebAssembly memory now. Optional: a decoder no longer referenced
   * is released by the garbage collector once the event loop turns; a synchronous loop over
   * many bodies should call it. Every later call throws a ReboundError.
   */
  free() {
    this.#native?.free();
    this.#native = undefined;
  }

  /**
   * The deltas completed by `data`. Throws a StreamError (with `failure`) when the bytes are
   * no valid stream or carry an error event; every later call throws it again.
   */
  feed(data) {
    const bytes = bytesOf(data, "data");
    const decoder = this.#live();
    return JSON.parse(call(() => decoder.feed(bytes)));
  }

  /**
   * Whether the bytes of the last `feed` carried content: what moves a request's progress
   * deadline. Keep-alives and empty deltas do not.
   */
  get progressed() {
    return this.#live().progressed;
  }

  /** Whether the terminal event arrived (the message is complete). */
  get isComplete() {
    return this.#live().isComplete;
  }

  /**
   * Ends the body: the AssistantResponse, or a StreamError whose `failure` answers the
   * request (a body that ended before its terminal event is a cut stream). The decoder
   * cannot be fed afterwards.
   */
  finish() {
    const decoder = this.#live();
    return JSON.parse(call(() => decoder.finish()));
  }
}

/** Headers as `[name, value]` pairs: a fetch `Headers`, a Map, pairs, or a plain object. */
function headerPairs(headers) {
  if (headers === undefined || headers === null) return [];
  const bad = () =>
    new TypeError("headers must be a Headers, a Map, [name, value] pairs or an object of strings");
  let pairs;
  if (typeof headers !== "object") throw bad();
  if (typeof headers[Symbol.iterator] === "function") {
    // Headers (fetch), Map and arrays of pairs iterate as [name, value].
    pairs = Array.from(headers, (pair) => (Array.isArray(pair) ? [pair[0], pair[1]] : pair));
  } else {
    pairs = Object.entries(headers);
  }
  for (const pair of pairs) {
    if (!Array.isArray(pair) || typeof pair[0] !== "string" || typeof pair[1] !== "string") {
      throw bad();
    }
  }
  return pairs;
}

/**
 * Classifies an HTTP error response of `provider` (status, headers, body) into a
 * ProviderFailure: its kind, the server's delay hints (`retry-after`, `retry-after-ms`,
 * rate-limit resets), `x-should-retry`, the request id; `secrets` masked. `nowUnixMs` is the
 * wall time (`Date.now()`), for date-valued hints; without it they are ignored. Never throws
 * on what a server sends.
 */
export function classifyHttp(provider, status, headers, body, options) {
  const { nowUnixMs, secrets } = optionsOf(options, "classifyHttp");
  const kind = string(provider, "provider");
  const masked = secretsOf(secrets);
  if (typeof status !== "number") {
    throw new ReboundError(`status must be a number, not ${typeof status}`);
  }
  if (nowUnixMs !== undefined && nowUnixMs !== null && typeof nowUnixMs !== "number") {
    throw new ReboundError(`nowUnixMs must be a number, not ${typeof nowUnixMs}`);
  }
  const pairs = JSON.stringify(headerPairs(headers));
  const bytes = body === undefined || body === null ? new Uint8Array(0) : bytesOf(body, "body");
  return JSON.parse(
    call(() =>
      native.classifyHttp(kind, status, pairs, bytes, nowUnixMs ?? undefined, masked),
    ),
  );
}

/**
 * Classifies an exchange that produced no usable response from what the HTTP client said:
 * its error text, and whether it timed out, failed to connect, or failed after the response
 * started (then a break is a cut stream). `secrets` masked.
 */
export function classifyTransport(description, options) {
  const {
    timedOut = false,
    connectFailed = false,
    responseStarted = false,
    secrets,
  } = optionsOf(options, "classifyTransport");
  const text = string(description, "description");
  const masked = secretsOf(secrets);
  return JSON.parse(
    call(() =>
      native.classifyTransport(
        text,
        Boolean(timedOut),
        Boolean(connectFailed),
        Boolean(responseStarted),
        masked,
      ),
    ),
  );
}

/**
 * Compacts `conversation` (a command's Snapshot, or a list of messages) by deterministic
 * elision with `policy` (a CompactionPolicy; rebound's default without one): the `result` of
 * `compaction_finished`, `{Ok: messages}` or `{Err: why}`.
 */
export function compact(conversation, policy) {
  const policyJson =
    policy === undefined || policy === null
      ? undefined
      : json(policy, "compaction policy", ConfigError);
  return withConversation(conversation, (snapshot) =>
    JSON.parse(call(() => native.compact(snapshot, policyJson))),
  );
}
