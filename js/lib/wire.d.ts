// The wire helpers: what an agent with its own HTTP client (`fetch`) needs to speak a
// provider's API the way rebound's runner does. Every rule is rebound-core's.

import type {
  AssistantResponse,
  CompactionPolicy,
  CompactionResult,
  Message,
  ProviderFailure,
  ProviderKind,
  ToolSpec,
} from "./types.js";
import type { Snapshot } from "./machine.js";

/** Bytes as the helpers take them: a Uint8Array (or another view, or an ArrayBuffer), or a string (UTF-8). */
export type Bytes = Uint8Array | ArrayBufferView | ArrayBuffer | string;

/** Keys and tokens (each at least 8 bytes) to mask (`***`) in every failure a helper returns or throws. */
export type Secrets = string | readonly string[];

/**
 * Request options in their JSON shape (snake_case keys, as rebound's other bindings take
 * them), checked against the provider's API: a RequestError for one it refuses.
 */
export interface RequestOptions {
  /** Sampling temperature (Anthropic: 0 to 1; OpenAI: 0 to 2). */
  temperature?: number;
  /** Nucleus sampling: the probability mass sampled from, 0 to 1. */
  top_p?: number;
  /** Text sequences that end the response when generated (not for Responses). */
  stop_sequences?: string[];
  /** Which tool the model may or must call: `"auto"`, `"any"`, `"none"` or `"tool:NAME"`. */
  tool_choice?: "auto" | "any" | "none" | `tool:${string}`;
  /** Whether the model may call several tools in one response (`false`: at most one). */
  parallel_tool_calls?: boolean;
  /** How much an OpenAI reasoning model reasons (`"low"`, `"medium"`, `"high"`, …). */
  reasoning_effort?: string;
  /** Anthropic extended thinking: the tokens Claude may think with (at least 1024, below the output limit). */
  thinking_budget?: number;
  /** An opaque id of the end user (a hash), which providers use to detect abuse. */
  user_id?: string;
  /** A provider-specific object merged into the body last; keys rebound sets are refused. */
  extra_body?: Record<string, unknown>;
}

/** What a request body needs besides the provider, the conversation and the model. */
export interface RequestBodyOptions {
  /** The output token limit (rebound-core's `DEFAULT_MAX_TOKENS`, 8192). */
  maxTokens?: number;
  /** The system prompt. */
  system?: string;
  /** The tools the model may call. */
  tools?: readonly ToolSpec[];
  /** Ask for a stream (true). */
  stream?: boolean;
  /** Sampling, stop sequences, tool choice, reasoning, a user id and extra body keys. */
  options?: RequestOptions;
  /** The target's base URL: picks the tool-call id form the server takes (Mistral's nine characters). */
  baseUrl?: string;
  /** The target's identity, so that reasoning another target owns is left out. */
  identity?: string;
}

/** A piece of a streamed answer, as `StreamDecoder.feed` returns them. */
export type StreamDelta =
  | { type: "text"; index: number; text: string }
  | { type: "thinking"; index: number; thinking: string }
  | { type: "tool_call_start"; index: number; id: string; name: string }
  | { type: "tool_input_json"; index: number; partial_json: string }
  /** A kind of delta this wrapper does not know yet, shown by its debug form. */
  | { type: "other"; debug: string };

/** Headers as `classifyHttp` takes them: a fetch `Headers`, a Map, `[name, value]` pairs, or an object of strings. */
export type HeadersLike =
  | Headers
  | ReadonlyMap<string, string>
  | Iterable<readonly [string, string]>
  | Readonly<Record<string, string>>;

/** The names of the wire formats rebound speaks; every `provider` argument takes one. */
export function providerKinds(): ProviderKind[];

/**
 * The JSON request body for `provider` as text, ready to send (`fetch(url, {body})`), built
 * by rebound-core from `conversation` (a command's Snapshot, shared; or a list of messages)
 * for `model`: tool-call ids in the form the provider takes, reasoning another target owns
 * left out, options checked. Throws a RequestError when no request can be built (an empty
 * conversation, tool calls not answered in order, refused options), a ConfigError for an
 * unknown provider, or options or tools it cannot read.
 */
export function requestBody(
  provider: ProviderKind,
  conversation: Snapshot | readonly Message[],
  model: string,
  options?: RequestBodyOptions,
): string;

/**
 * The URL path of `provider`'s requests for `model`, to append to its base URL:
 * `/v1/messages`, `/chat/completions`, `/responses`, Gemini's
 * `/models/{model}:streamGenerateContent?alt=sse` (`:generateContent` without `stream`) or
 * Bedrock's `/model/{model}/converse-stream` (`/converse`); a ConfigError without a model for
 * those two.
 */
export function requestPath(provider: ProviderKind, model?: string, stream?: boolean): string;

/**
 * A whole non-streamed response body (HTTP 200) as an AssistantResponse. Throws a
 * StreamError (its `failure` answers the request, `secrets` masked) for an error object or a
 * body that is no response.
 */
export function parseResponse(
  provider: ProviderKind,
  body: Bytes,
  options?: { secrets?: Secrets },
): AssistantResponse;

/**
 * The incremental decoder of one streamed response body: feed it the bytes as they arrive
 * (any split), show the deltas, `finish()` for the AssistantResponse. Bedrock's body is AWS
 * event-stream frames, the others' server-sent events.
 */
export class StreamDecoder {
  /** A decoder for one body of `provider`; `secrets` are masked in the failures it throws. */
  constructor(provider: ProviderKind, options?: { secrets?: Secrets });
  /**
   * The deltas completed by `data`. Throws a StreamError (with `failure`) when the bytes are
   * no valid stream or carry an error event; every later call throws it again.
   */
  feed(data: Bytes): StreamDelta[];
  /**
   * Whether the bytes of the last `feed` carried content (text, thinking, a tool call or its
   * input): what moves a request's progress deadline (`deadlines.progress_ms`); keep-alives
   * and empty deltas do not.
   */
  readonly progressed: boolean;
  /** Whether the terminal event arrived (the message is complete). */
  readonly isComplete: boolean;
  /**
   * Ends the body: the AssistantResponse (for `provider_succeeded`), or a StreamError whose
   * `failure` is for `provider_failed` (a body that ended before its terminal event is a cut
   * stream). Afterwards the decoder throws a ReboundError.
   */
  finish(): AssistantResponse;
  /**
   * Releases the decoder's WebAssembly memory now (optional: the garbage collector does it
   * once the event loop turns; a synchronous loop over many bodies should call it). Every
   * later call throws a ReboundError.
   */
  free(): void;
}

/**
 * An HTTP error response of `provider` as a ProviderFailure: its kind, status, the server's
 * delay hints (`retry-after`, `retry-after-ms`, rate-limit resets), `x-should-retry`, the
 * request id; `secrets` masked. `nowUnixMs` is the wall time (`Date.now()`) for date-valued
 * hints; without it they are ignored. Never throws on what a server sends.
 */
export function classifyHttp(
  provider: ProviderKind,
  status: number,
  headers?: HeadersLike | null,
  body?: Bytes | null,
  options?: { nowUnixMs?: number; secrets?: Secrets },
): ProviderFailure;

/**
 * A failed exchange (no usable response) as a ProviderFailure, from the client's error text
 * and whether it timed out, failed to connect, or failed after the response started (then a
 * break is a cut stream); `secrets` masked.
 */
export function classifyTransport(
  description: string,
  options?: {
    timedOut?: boolean;
    connectFailed?: boolean;
    responseStarted?: boolean;
    secrets?: Secrets;
  },
): ProviderFailure;

/**
 * Deterministic elision of `conversation` with `policy` (rebound's default policy for what it
 * leaves out), for a `compact` command: the `result` of `compaction_finished`.
 */
export function compact(
  conversation: Snapshot | readonly Message[],
  policy?: Partial<CompactionPolicy>,
): CompactionResult;
