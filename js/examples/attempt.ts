/**
 * One attempt of a rebound `send_request` over `fetch`, as the example agent (agent.ts) and
 * the Vercel AI SDK example (ai-sdk-provider.ts) both send it: rebound's request body, the
 * stream decoded by rebound as it arrives, every failure classified by rebound, the
 * command's two deadlines kept, the run's AbortSignal honoured. Only `fetch`,
 * `ReadableStream`, `AbortController` and timers: it runs in Node, Deno, browsers and edge
 * runtimes alike.
 */

import {
  StreamDecoder,
  StreamError,
  classifyHttp,
  classifyTransport,
  requestBody,
  requestPath,
} from "rebound-agent";
import type { Event, ProviderFailure, ProviderKind, SendRequest, StreamDelta } from "rebound-agent";

/** The headers that authenticate a request to `provider` with `apiKey`. */
function authHeaders(provider: ProviderKind, apiKey: string): Record<string, string> {
  switch (provider) {
    case "anthropic":
      return { "x-api-key": apiKey, "anthropic-version": "2023-06-01" };
    case "gemini":
      return { "x-goog-api-key": apiKey };
    default:
      // OpenAI's APIs, and a Bedrock API key (AWS_BEARER_TOKEN_BEDROCK).
      return { authorization: `Bearer ${apiKey}` };
  }
}

/** The text of a `fetch` failure with its cause (undici puts the socket's error there). */
function fetchErrorText(error: unknown): { text: string; code?: string } {
  if (!(error instanceof Error)) return { text: String(error) };
  const cause = (error as Error & { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as Error & { code?: unknown }).code;
    return {
      text: `${error.name}: ${error.message}: ${cause.message}`,
      code: typeof code === "string" ? code : undefined,
    };
  }
  return { text: `${error.name}: ${error.message}` };
}

/** Socket errors that mean no connection was made. */
const CONNECT_ERRORS = new Set([
  "ECONNREFUSED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/**
 * A random jitter seed: Web Crypto's where the runtime has it as a global (browsers, Deno,
 * edge runtimes, Node 19 and later), else `Math.random`'s 53 bits (Node 18).
 */
export function randomSeed(): bigint {
  const crypto = (globalThis as { crypto?: Crypto }).crypto;
  if (crypto?.getRandomValues !== undefined) return crypto.getRandomValues(new BigUint64Array(1))[0];
  return BigInt(Math.floor(Math.random() * Number.MAX_SAFE_INTEGER));
}

/** Waits `ms`; false when `signal` was aborted first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((done) => {
    if (signal?.aborted) return done(false);
    const onAbort = () => {
      clearTimeout(timer);
      done(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      done(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * A request's two deadlines, as rebound's HTTP provider keeps them: no byte for `idle_ms`
 * (from the send, for the headers too), or no content for `progress_ms` (from the start of
 * the answer: keep-alives are bytes, not content), aborts the request with the deadline
 * missed as `missed`.
 */
class Deadlines {
  missed: string | undefined;
  readonly #controller: AbortController;
  readonly #idleMs: number;
  readonly #progressMs: number;
  #idle: ReturnType<typeof setTimeout> | undefined;
  #progress: ReturnType<typeof setTimeout> | undefined;

  /** The deadlines of a request that `controller` aborts; the idle window starts now. */
  constructor(deadlines: { idle_ms: number; progress_ms: number }, controller: AbortController) {
    this.#controller = controller;
    this.#idleMs = deadlines.idle_ms;
    this.#progressMs = deadlines.progress_ms;
    this.byte();
  }

  /** A byte (or the headers) arrived: the idle window starts again. */
  byte(): void {
    clearTimeout(this.#idle);
    this.#idle = setTimeout(() => this.#miss("no bytes received in time"), this.#idleMs);
  }

  /** Content arrived (or the answer began): the progress window starts again. */
  content(): void {
    clearTimeout(this.#progress);
    this.#progress = setTimeout(
      () => this.#miss("no content received in time (only keep-alives)"),
      this.#progressMs,
    );
  }

  /** Both windows closed: the request is over. */
  stop(): void {
    clearTimeout(this.#idle);
    clearTimeout(this.#progress);
  }

  #miss(why: string): void {
    if (this.missed !== undefined) return;
    this.missed = why;
    this.#controller.abort(new Error(why));
  }
}

/** The answer to a `send_request` was canceled (the run's signal fired). */
export const CANCELED = Symbol("canceled");

/** Where one target's requests go: its wire format, model, URL, headers and key. */
export class HttpTarget {
  /** The wire format. */
  readonly provider: ProviderKind;
  /** The model id. */
  readonly model: string;
  /** Where requests are posted: the base URL and rebound's request path. */
  readonly url: string;
  /** The content type and the provider's authentication headers. */
  readonly headers: Record<string, string>;
  /** The key, when long enough to mask (rebound refuses shorter secrets). */
  readonly secrets: string[];

  /** A target of `provider` at `baseUrl` for `model`, authenticated with `apiKey`. */
  constructor(provider: ProviderKind, baseUrl: string, model: string, apiKey: string) {
    this.provider = provider;
    this.model = model;
    this.url = baseUrl.replace(/\/+$/, "") + requestPath(provider, model);
    this.headers = { "content-type": "application/json", ...authHeaders(provider, apiKey) };
    // A key shorter than 8 bytes (a fake server's) cannot be masked: rebound refuses it as
    // a secret, since masking it would mask ordinary words.
    this.secrets = apiKey.trim().length >= 8 ? [apiKey] : [];
  }
}

/** What one attempt needs besides its target and command. */
export interface AttemptOptions {
  /** The body's other parts: tools, system prompt, output limit, request options. */
  body: Parameters<typeof requestBody>[3];
  /** The run's cancel: aborts the request in flight. */
  signal?: AbortSignal;
  /** Each piece of the answer as it streams in. */
  onDelta?: (delta: StreamDelta) => void;
  /**
   * The answer began (a 200 and its body): tell the machine `provider_responding` and drain
   * it, as after every handle.
   */
  onResponding?: () => void;
}

/**
 * One attempt of a `send_request` to `target`: the event that answers it
 * (`provider_succeeded` or `provider_failed`, never a throw), or CANCELED when `signal`
 * fired. The body, the decoding and every classification are rebound's; the deadlines are
 * the command's.
 */
export async function attempt(
  target: HttpTarget,
  command: SendRequest,
  options: AttemptOptions,
): Promise<Event | typeof CANCELED> {
  const { signal } = options;
  const failed = (failure: ProviderFailure): Event => ({
    type: "provider_failed",
    request: command.request,
    failure,
  });
  const secrets = target.secrets;
  const body = requestBody(target.provider, command.conversation, target.model, options.body);
  // One controller aborts the request: the run's cancel, or a missed deadline.
  const controller = new AbortController();
  const cancel = () => controller.abort(signal?.reason);
  if (signal?.aborted) return CANCELED;
  signal?.addEventListener("abort", cancel, { once: true });
  const deadlines = new Deadlines(command.deadlines, controller);
  let decoder: StreamDecoder | undefined;
  let started = false;
  try {
    const response = await fetch(target.url, {
      method: "POST",
      headers: target.headers,
      body,
      signal: controller.signal,
    });
    started = true;
    deadlines.byte();
    if (response.status !== 200) {
      const raw = new Uint8Array(await response.arrayBuffer());
      return failed(
        classifyHttp(target.provider, response.status, response.headers, raw, {
          nowUnixMs: Date.now(),
          secrets,
        }),
      );
    }
    if (response.body === null) {
      return failed(classifyTransport("the response has no body", { responseStarted: true }));
    }
    options.onResponding?.();
    deadlines.content();
    decoder = new StreamDecoder(target.provider, { secrets });
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      deadlines.byte();
      for (const delta of decoder.feed(value)) options.onDelta?.(delta);
      if (decoder.progressed) deadlines.content();
    }
    return { type: "provider_succeeded", request: command.request, response: decoder.finish() };
  } catch (error) {
    if (error instanceof StreamError) return failed(error.failure);
    if (deadlines.missed !== undefined) {
      return failed(
        classifyTransport(deadlines.missed, { timedOut: true, responseStarted: started, secrets }),
      );
    }
    if (signal?.aborted) return CANCELED;
    const { text, code } = fetchErrorText(error);
    return failed(
      classifyTransport(text, {
        connectFailed: !started && code !== undefined && CONNECT_ERRORS.has(code),
        responseStarted: started,
        secrets,
      }),
    );
  } finally {
    decoder?.free();
    deadlines.stop();
    signal?.removeEventListener("abort", cancel);
  }
}
