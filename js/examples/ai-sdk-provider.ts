/**
 * rebound inside the Vercel AI SDK: a language model implementing `@ai-sdk/provider`'s
 * `LanguageModelV3` whose every call is a run of rebound's machine.
 *
 * The AI SDK owns the conversation and the tools (`generateText` and `streamText` call
 * `doGenerate`/`doStream` once per step and run the tools between steps). rebound owns what
 * happens inside one step: each attempt, its retry or not and after how long (`retry-after`
 * included), the move to a fallback target, the compaction of a request the model refused
 * as too long, the voiding of a stream cut midway. The requests are rebound's bodies, sent
 * with `fetch` by the examples' `attempt` (examples/attempt.ts), to an
 * Anthropic-compatible endpoint (or any wire format rebound speaks).
 *
 *     import { generateText } from "ai";
 *     const model = new ReboundLanguageModel({
 *       targets: [
 *         { baseUrl: "https://api.anthropic.com", model: "claude-sonnet-4-6", apiKey },
 *         { baseUrl: "https://gateway.example/v1", provider: "openai", model: "gpt-4o", apiKey: other },
 *       ],
 *     });
 *     // The SDK's own retries off: rebound decides them (and so never retries twice).
 *     const { text } = await generateText({ model, prompt: "Fix the failing test.", maxRetries: 0 });
 *
 * What a step ends with is the assistant's message: when it calls tools, the SDK runs them
 * and calls again with their results (a new run, from the SDK's history). A compaction
 * shrinks the request of this step only: the SDK keeps its own history. A stream cut midway
 * cannot be taken back from the SDK's stream: its open parts (text, reasoning, tool input)
 * end with `providerMetadata.rebound.discarded: true`, and the retry's parts follow under
 * new ids; `doGenerate`'s content, and the tool calls and finish of `doStream`, are the
 * answer the machine took.
 */

import { APICallError } from "@ai-sdk/provider";
import type {
  JSONObject,
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3Prompt,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3ToolResultOutput,
  LanguageModelV3Usage,
  SharedV3Warning,
} from "@ai-sdk/provider";

import { AgentMachine, describe } from "rebound-agent";
import type {
  AssistantResponse,
  ContentBlock,
  Event,
  JsonObject,
  JsonValue,
  MachineConfigInput,
  Message,
  ProviderKind,
  RequestOptions,
  SendRequest,
  SharedBudget,
  StreamDelta,
  ToolSpec,
} from "rebound-agent";

import { CANCELED, HttpTarget, attempt, randomSeed, sleep } from "./attempt.js";

/** One model on one endpoint; the first of a model's targets is its primary. */
export interface TargetSettings {
  /** The endpoint's base URL (OpenAI's with `/v1`). */
  baseUrl: string;
  /** The model id. */
  model: string;
  /** The wire format (anthropic). */
  provider?: ProviderKind;
  /** The API key (masked in every failure rebound is told of, when 8 bytes or longer). */
  apiKey: string;
}

/** How a ReboundLanguageModel runs its calls. */
export interface ReboundModelSettings {
  /** Where requests go: the primary target first, then the fallbacks in order. */
  targets: readonly TargetSettings[];
  /** More of the machine's configuration (its JSON shape): `retry`, `stream`, `compaction`… */
  config?: MachineConfigInput;
  /** The retry jitter seed of every run (random per call without one). */
  seed?: number | bigint | string;
  /** The output limit when the call names none (rebound-core's default, 8192). */
  maxOutputTokens?: number;
  /** Each notice of a retry or a fallback, as a person reads it. */
  onNotice?: (text: string) => void;
  /**
   * A retry budget shared with the process's other models and agents (with `config`'s
   * `retry_budget` set, every retry asks it first). Its clock is the runs'.
   */
  budget?: SharedBudget;
}

/** The SDK's prompt as rebound's conversation, its system prompt, and what was left out. */
function conversationOf(prompt: LanguageModelV3Prompt): {
  messages: Message[];
  system: string | undefined;
  warnings: SharedV3Warning[];
} {
  const messages: Message[] = [];
  const systems: string[] = [];
  const warnings: SharedV3Warning[] = [];
  const push = (role: "user" | "assistant", block: ContentBlock) => {
    const last = messages.at(-1);
    // Tool results travel in a user message, which a following user message joins.
    if (last !== undefined && last.role === role) last.content.push(block);
    else messages.push({ role, content: [block] });
  };
  for (const message of prompt) {
    switch (message.role) {
      case "system":
        systems.push(message.content);
        break;
      case "user":
        for (const part of message.content) {
          if (part.type === "text") push("user", { type: "text", text: part.text });
          else warnings.push({ type: "unsupported", feature: `user ${part.type} parts` });
        }
        break;
      case "assistant":
        for (const part of message.content) {
          if (part.type === "text") push("assistant", { type: "text", text: part.text });
          else if (part.type === "tool-call") {
            push("assistant", {
              type: "tool_use",
              id: part.toolCallId,
              name: part.toolName,
              // The SDK's input is the tool's JSON arguments.
              input: (part.input ?? {}) as JsonObject,
            });
          } else warnings.push({ type: "unsupported", feature: `assistant ${part.type} parts` });
        }
        break;
      case "tool":
        for (const part of message.content) {
          if (part.type !== "tool-result") {
            warnings.push({ type: "unsupported", feature: part.type });
            continue;
          }
          const { text, isError } = resultText(part.output);
          push("user", {
            type: "tool_result",
            tool_use_id: part.toolCallId,
            content: [{ type: "text", text }],
            ...(isError ? { is_error: true } : {}),
          });
        }
        break;
    }
  }
  return {
    messages,
    system: systems.length > 0 ? systems.join("\n\n") : undefined,
    warnings,
  };
}

/** A tool result's text, and whether it is an error. */
function resultText(output: LanguageModelV3ToolResultOutput): { text: string; isError: boolean } {
  switch (output.type) {
    case "text":
      return { text: output.value, isError: false };
    case "json":
      return { text: JSON.stringify(output.value), isError: false };
    case "error-text":
      return { text: output.value, isError: true };
    case "error-json":
      return { text: JSON.stringify(output.value), isError: true };
    case "execution-denied":
      return { text: `the tool call was denied${output.reason ? `: ${output.reason}` : ""}`, isError: true };
    case "content":
      return {
        text: output.value.map((p) => (p.type === "text" ? p.text : `[${p.type}]`)).join("\n"),
        isError: false,
      };
    default:
      return { text: JSON.stringify(output), isError: false };
  }
}

/** The call's settings as rebound's request options, and the warnings of those it has none for. */
function requestOptionsOf(options: LanguageModelV3CallOptions): {
  requestOptions: RequestOptions;
  warnings: SharedV3Warning[];
} {
  const requestOptions: RequestOptions = {};
  const warnings: SharedV3Warning[] = [];
  if (options.temperature !== undefined) requestOptions.temperature = options.temperature;
  if (options.topP !== undefined) requestOptions.top_p = options.topP;
  if (options.stopSequences !== undefined) requestOptions.stop_sequences = options.stopSequences;
  const choice = options.toolChoice;
  if (choice !== undefined) {
    requestOptions.tool_choice =
      choice.type === "required" ? "any" : choice.type === "tool" ? `tool:${choice.toolName}` : choice.type;
  }
  for (const [feature, value] of [
    ["topK", options.topK],
    ["presencePenalty", options.presencePenalty],
    ["frequencyPenalty", options.frequencyPenalty],
    ["seed", options.seed],
  ] as const) {
    if (value !== undefined) warnings.push({ type: "unsupported", feature });
  }
  if (options.responseFormat?.type === "json") {
    warnings.push({ type: "unsupported", feature: "responseFormat json" });
  }
  return { requestOptions, warnings };
}

/** The SDK's finish reason of rebound's stop reason. */
function finishReasonOf(stop: string): LanguageModelV3FinishReason {
  const unified: Record<string, LanguageModelV3FinishReason["unified"]> = {
    end_turn: "stop",
    stop_sequence: "stop",
    tool_use: "tool-calls",
    max_tokens: "length",
    content_filter: "content-filter",
    refusal: "content-filter",
  };
  return { unified: unified[stop] ?? "other", raw: stop };
}

/** The SDK's usage of rebound's. */
function usageOf(usage: AssistantResponse["usage"] | undefined): LanguageModelV3Usage {
  const input: number | undefined = usage?.input_tokens;
  const output: number | undefined = usage?.output_tokens;
  const cacheRead: number | undefined = usage?.cache_read_input_tokens;
  const cacheWrite: number | undefined = usage?.cache_creation_input_tokens;
  return {
    inputTokens: {
      total: input === undefined ? undefined : input + (cacheRead ?? 0) + (cacheWrite ?? 0),
      noCache: input,
      cacheRead,
      cacheWrite,
    },
    outputTokens: { total: output, text: undefined, reasoning: undefined },
  };
}

/** The SDK's content of an assistant message. */
function contentOf(message: Message): LanguageModelV3Content[] {
  const content: LanguageModelV3Content[] = [];
  for (const block of message.content) {
    if (block.type === "text") content.push({ type: "text", text: block.text });
    else if (block.type === "thinking") content.push({ type: "reasoning", text: block.thinking });
    else if (block.type === "tool_use") {
      content.push({
        type: "tool-call",
        toolCallId: block.id,
        toolName: block.name,
        input: JSON.stringify(block.input ?? {}),
      });
    }
  }
  return content;
}

/** How a run of one call ended well: the message the machine appended, and its response. */
interface Step {
  message: Message;
  response: AssistantResponse;
  target: HttpTarget;
  /** What the run did (requests, retries, fallbacks, compactions…), counted by rebound. */
  tally: JSONObject;
}

/** What a streaming run tells as it goes. */
interface Listener {
  /** A piece of the answer to `command`, as it streams in. */
  onDelta(delta: StreamDelta, command: SendRequest): void;
  /** The attempt in flight ended: answered, or `discarded` (a stream cut midway). */
  onAttemptEnd(discarded: boolean): void;
}

/**
 * A language model of the AI SDK whose calls are runs of rebound's machine. `doGenerate`
 * returns the step's assistant message; `doStream` streams it as it comes. A run that
 * fails (the machine gave up, or had nothing to retry) throws an APICallError that the SDK
 * does not retry (`isRetryable: false`, the run error as `data`); a canceled one throws the
 * abort signal's reason.
 */
export class ReboundLanguageModel implements LanguageModelV3 {
  /** The LanguageModel interface this implements. */
  readonly specificationVersion = "v3";
  /** `rebound.` and the primary target's wire format. */
  readonly provider: string;
  /** The primary target's model. */
  readonly modelId: string;
  /** None: files and images are not sent by URL (nor at all: see the warnings). */
  readonly supportedUrls: Record<string, RegExp[]> = {};
  readonly #settings: ReboundModelSettings;
  readonly #targets: HttpTarget[];

  /** A model of `settings.targets` (the first is the primary). */
  constructor(settings: ReboundModelSettings) {
    if (settings.targets.length === 0) throw new TypeError("a ReboundLanguageModel needs a target");
    this.#settings = settings;
    this.#targets = settings.targets.map(
      (t) => new HttpTarget(t.provider ?? "anthropic", t.baseUrl, t.model, t.apiKey),
    );
    this.provider = `rebound.${this.#targets[0].provider}`;
    this.modelId = this.#targets[0].model;
  }

  /** One step, whole. */
  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const { step, warnings } = await this.#run(options);
    return {
      content: contentOf(step.message),
      finishReason: finishReasonOf(String(step.response.stop_reason)),
      usage: usageOf(step.response.usage),
      warnings,
      response: { modelId: step.target.model },
      providerMetadata: { rebound: { tally: step.tally, target: step.target.model } },
    };
  }

  /** One step, streamed: text, reasoning and tool input as they come. */
  async doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    const abort = new AbortController();
    const outer = options.abortSignal;
    const forward = () => abort.abort(outer?.reason);
    if (outer?.aborted) forward();
    outer?.addEventListener("abort", forward, { once: true });
    let run: Promise<void> | undefined;
    const stream = new ReadableStream<LanguageModelV3StreamPart>({
      start: (controller) => {
        // The parts open in the attempt in flight: ended when it ends.
        const open = new Map<string, "text" | "reasoning" | "tool">();
        const toolIds = new Map<number, string>();
        const end = (discarded: boolean) => {
          const providerMetadata = discarded ? { rebound: { discarded: true } } : undefined;
          for (const [id, kind] of open) {
            const type = kind === "text" ? "text-end" : kind === "reasoning" ? "reasoning-end" : "tool-input-end";
            controller.enqueue({ type, id, ...(providerMetadata ? { providerMetadata } : {}) });
          }
          open.clear();
          toolIds.clear();
        };
        const listener: Listener = {
          onDelta: (delta, command) => {
            const key = `${command.request}.${command.attempt}`;
            switch (delta.type) {
              case "text":
              case "thinking": {
                const kind = delta.type === "text" ? "text" : "reasoning";
                const id = `${kind}-${key}.${delta.index}`;
                if (!open.has(id)) {
                  open.set(id, kind);
                  controller.enqueue({ type: kind === "text" ? "text-start" : "reasoning-start", id });
                }
                controller.enqueue({
                  type: kind === "text" ? "text-delta" : "reasoning-delta",
                  id,
                  delta: delta.type === "text" ? delta.text : delta.thinking,
                });
                break;
              }
              case "tool_call_start":
                toolIds.set(delta.index, delta.id);
                open.set(delta.id, "tool");
                controller.enqueue({ type: "tool-input-start", id: delta.id, toolName: delta.name });
                break;
              case "tool_input_json": {
                const id = toolIds.get(delta.index);
                if (id !== undefined && delta.partial_json !== "") {
                  controller.enqueue({ type: "tool-input-delta", id, delta: delta.partial_json });
                }
                break;
              }
              default:
                break;
            }
          },
          onAttemptEnd: end,
        };
        run = (async () => {
          try {
            const { step } = await this.#run(
              { ...options, abortSignal: abort.signal },
              (warnings) => controller.enqueue({ type: "stream-start", warnings }),
              listener,
            );
            for (const part of contentOf(step.message)) {
              if (part.type === "tool-call") controller.enqueue(part);
            }
            controller.enqueue({ type: "response-metadata", modelId: step.target.model });
            controller.enqueue({
              type: "finish",
              finishReason: finishReasonOf(String(step.response.stop_reason)),
              usage: usageOf(step.response.usage),
              providerMetadata: { rebound: { tally: step.tally, target: step.target.model } },
            });
            controller.close();
          } catch (error) {
            if (abort.signal.aborted) controller.error(error);
            else {
              controller.enqueue({ type: "error", error });
              controller.close();
            }
          } finally {
            outer?.removeEventListener("abort", forward);
          }
        })();
      },
      cancel: async (reason) => {
        abort.abort(reason);
        await run;
      },
    });
    return { stream };
  }

  /**
   * Runs the machine for one call until the assistant's message is in: the step, and the
   * warnings (told to `onStart` before the first attempt).
   */
  async #run(
    options: LanguageModelV3CallOptions,
    onStart?: (warnings: SharedV3Warning[]) => void,
    listener?: Listener,
  ): Promise<{ step: Step; warnings: SharedV3Warning[] }> {
    const { messages, system, warnings } = conversationOf(options.prompt);
    const { requestOptions, warnings: unsupported } = requestOptionsOf(options);
    warnings.push(...unsupported);
    const tools: ToolSpec[] = [];
    for (const tool of options.tools ?? []) {
      if (tool.type === "function") {
        // A JSON Schema is JSON.
        const schema = tool.inputSchema as unknown as JsonValue;
        tools.push({ name: tool.name, description: tool.description ?? "", input_schema: schema });
      } else {
        warnings.push({ type: "unsupported", feature: `provider tool ${tool.id}` });
      }
    }
    onStart?.(warnings);
    const signal = options.abortSignal;
    const started = performance.now();
    const budget = this.#settings.budget;
    // Every machine sharing a budget is driven on its clock.
    const now = () => budget?.nowMs() ?? Math.floor(performance.now() - started);
    const machine = new AgentMachine({
      config: {
        ...(this.#settings.config ?? {}),
        tools,
        targets: this.#targets.map((t) => ({ provider: t.provider, model: t.model })),
      },
      seed: this.#settings.seed ?? randomSeed(),
      conversation: messages,
      secrets: this.#targets.flatMap((t) => t.secrets),
    });
    const body = {
      maxTokens: options.maxOutputTokens ?? this.#settings.maxOutputTokens,
      system,
      tools,
      options: requestOptions,
    };
    // The machine is this call's: its memory is released when the call ends.
    try {
      let appended: Message | undefined;
      let response: AssistantResponse | undefined;
      let target = this.#targets[0];
      // The SDK's history ends with the user's message or the tools' results: the machine
      // resumes from it and asks the model for the next message.
      let event: Event | undefined = { type: "resume" };
      while (event !== undefined) {
        machine.handle(now(), event);
        event = undefined;
        for (const action of machine.drain()) {
          switch (action.type) {
            case "send_request": {
              target = this.#targets[action.target] ?? this.#targets[0];
              const answer = await attempt(target, action, {
                body,
                signal,
                onDelta: listener && ((delta) => listener.onDelta(delta, action)),
                onResponding: () => {
                  machine.handle(now(), { type: "provider_responding", request: action.request });
                  for (const noted of machine.drain()) {
                    if (noted.type === "note_budget") budget?.note(noted);
                  }
                },
              });
              if (answer === CANCELED) {
                event = { type: "cancel" };
              } else {
                if (answer.type === "provider_succeeded") {
                  response = answer.response;
                  listener?.onAttemptEnd(false);
                }
                event = answer;
              }
              break;
            }
            case "stream_reset":
              // The answer that had begun broke off: its parts are void.
              listener?.onAttemptEnd(true);
              break;
            case "sleep":
              event = (await sleep(action.delay_ms, signal))
                ? { type: "timer_fired", timer: action.timer }
                : { type: "cancel" };
              break;
            case "compact":
              // rebound's own compaction, with the machine's policy; the SDK keeps its history.
              event = {
                type: "compaction_finished",
                compaction: action.compaction,
                result: machine.compactDefault(action.conversation),
              };
              break;
            case "acquire_permit":
              if (budget === undefined) {
                event = { type: "permit_answered", permit: action.permit, decision: "granted" };
              } else {
                try {
                  event = await budget.acquire(action, { signal });
                } catch (error) {
                  if (!signal?.aborted) throw error;
                  event = { type: "cancel" };
                }
              }
              break;
            case "note_budget":
              budget?.note(action);
              break;
            case "notify_retry":
              this.#settings.onNotice?.(describe("retry_info", action.info));
              break;
            case "notify_fallback":
              this.#settings.onNotice?.(describe("fallback_info", action.info));
              break;
            case "append_message":
              if (action.message.role === "assistant") appended = action.message;
              break;
            case "run_tools":
            case "finish":
              // The step is over: the SDK runs the tools and calls again.
              if (appended === undefined || response === undefined) {
                throw new Error(`the run ended its step without an answer (${action.type})`);
              }
              const tally = jsonObject(machine.tally());
              return { step: { message: appended, response, target, tally }, warnings };
            case "fail": {
              if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
              const error = action.error;
              throw new APICallError({
                message: describe("run_error", error),
                url: target.url,
                requestBodyValues: undefined,
                // The last provider failure's status, when the run ended on one.
                statusCode: error.type === "provider" ? error.failure.status : undefined,
                // rebound already retried what was worth retrying.
                isRetryable: false,
                data: { error, tally: machine.tally() },
              });
            }
            default:
              break;
          }
        }
        if (event !== undefined && signal?.aborted) event = { type: "cancel" };
      }
      throw new Error("the machine stopped asking for anything before the run ended");
    } finally {
      machine.free();
    }
  }
}

/** A value of rebound's JSON shape (a tally) as the SDK's provider metadata takes JSON. */
function jsonObject(value: object): JSONObject {
  return JSON.parse(JSON.stringify(value)) as JSONObject;
}
