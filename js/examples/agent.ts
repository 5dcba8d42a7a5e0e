/**
 * A coding agent in TypeScript on `fetch`, `ReadableStream` and `AbortSignal`, with rebound
 * deciding every failure.
 *
 * The agent owns the I/O: its HTTP client (`fetch`, which never retries), its clock, its
 * file tools, its cancel button. rebound's machine owns the decisions: whether a failure is
 * retried and after how long (`retry-after` included), compacted, turned into a tool error
 * result the model reads, or returned as the run's failure; what a stream cut voids.
 *
 * Try it against rebound's fake provider and its scripted outage (two terminals):
 *
 *     cargo run --release -- serve --scenario demo --port 8787
 *     cd js && npx tsc -p tsconfig.examples.json
 *     node dist/examples/agent.js --base-url http://127.0.0.1:8787 "Fix the failing test."
 *
 * Ctrl-C cancels the run: the request in flight is aborted and the machine told
 * `{type: "cancel"}`. Against a real provider set ANTHROPIC_API_KEY (or OPENAI_API_KEY with
 * `--provider openai --base-url https://api.openai.com/v1`) and drop `--base-url`.
 */

import { readdir, readFile, realpath, stat, writeFile } from "node:fs/promises";
import { isAbsolute, relative, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

import { AgentMachine, describe, userText } from "rebound-agent";
import type {
  Action,
  CallOutcome,
  Event,
  MachineConfigInput,
  ProviderKind,
  SendRequest,
  SharedBudget,
  ToolCall,
  ToolSpec,
} from "rebound-agent";

import { CANCELED, HttpTarget, attempt, randomSeed, sleep } from "./attempt.js";

/** The tools the model may call: the project's files, read-only. */
export const TOOLS: ToolSpec[] = [
  {
    name: "read",
    description: 'Reads a text file of the project. Input: {"path": "relative/path"}.',
    input_schema: {
      type: "object",
      properties: { path: { type: "string" } },
      required: ["path"],
    },
  },
  {
    name: "list",
    description: 'Lists a folder of the project. Input: {"path": "relative/folder"}.',
    input_schema: { type: "object", properties: { path: { type: "string" } } },
  },
];

/** Each provider's model when none is named. */
export const DEFAULT_MODEL: Record<ProviderKind, string> = {
  anthropic: "claude-sonnet-4-6",
  openai: "gpt-4o",
  openai_responses: "gpt-5",
  gemini: "gemini-2.5-flash",
  bedrock: "anthropic.claude-sonnet-4-5-20250929-v1:0",
};

/** The most of a file `read` returns. */
const MAX_FILE_BYTES = 64 * 1024;

/** A tool call failed in a way the model can act on (a missing file, a bad path). */
export class ToolFailure extends Error {}

/** The file tools, confined to `root`. */
export class Tools {
  /** The folder the tools may read (absolute). */
  readonly root: string;

  /** Tools reading the files under `root`. */
  constructor(root: string) {
    this.root = resolve(root);
  }

  /**
   * The real path of `raw` under the root; a ToolFailure for one outside it, or none
   * (`what` names what is missing: "file" or "folder").
   */
  async #path(raw: unknown, what: string): Promise<string> {
    if (typeof raw !== "string" || raw === "") {
      throw new ToolFailure("`path` must be a non-empty string");
    }
    let path: string;
    try {
      path = await realpath(resolve(this.root, raw));
    } catch {
      throw new ToolFailure(`${what} not found: ${raw}`);
    }
    const rel = relative(await realpath(this.root), path);
    if (rel.startsWith("..") || isAbsolute(rel)) {
      throw new ToolFailure(`${raw} is outside the project folder`);
    }
    return path;
  }

  /** Runs tool `name` with `input`: its text, or a ToolFailure. */
  async run(name: string, input: Record<string, unknown>): Promise<string> {
    if (name === "read") {
      const path = await this.#path(input.path, "file");
      if (!(await stat(path)).isFile()) throw new ToolFailure(`file not found: ${String(input.path)}`);
      const data = await readFile(path);
      return new TextDecoder().decode(data.subarray(0, MAX_FILE_BYTES));
    }
    if (name === "list") {
      const raw = typeof input.path === "string" && input.path !== "" ? input.path : ".";
      const path = await this.#path(raw, "folder");
      if (!(await stat(path)).isDirectory()) throw new ToolFailure(`folder not found: ${raw}`);
      const entries = await readdir(path, { withFileTypes: true });
      return entries
        .map((e) => e.name + (e.isDirectory() ? "/" : ""))
        .sort()
        .join("\n");
    }
    throw new ToolFailure(`unknown tool \`${name}\``);
  }
}

/** Where the agent's words go: `say(text)` ends a line, `say(text, "")` does not. */
export type Say = (text: string, end?: string) => void;

/** What `runAgent` needs. */
export interface AgentOptions {
  /** The provider's base URL (OpenAI's with `/v1`, Gemini's with `/v1beta`). */
  baseUrl: string;
  /** The wire format (anthropic). */
  provider?: ProviderKind;
  /** The model (each provider's DEFAULT_MODEL). */
  model?: string;
  /** The API key (the provider's environment variable, else a placeholder for a fake server). */
  apiKey?: string;
  /** The folder the file tools may read (the current one). */
  root?: string;
  /** The retry jitter seed (random). */
  seed?: number | bigint | string;
  /** Write the run's rebound trace here (replay it with `rebound replay`). */
  trace?: string;
  /** Where the agent's words go (stdout). */
  say?: Say;
  /** More of the machine's configuration (its JSON shape), e.g. `{stream: {idle_ms: 5000}}`. */
  config?: MachineConfigInput;
  /** Cancels the run: the request in flight is aborted and the machine told `cancel`. */
  signal?: AbortSignal;
  /**
   * The retry budget this agent shares with the others of the process (with `config`'s
   * `retry_budget` set, the machine asks it before every retry). Its clock is the agent's.
   */
  budget?: SharedBudget;
}

/** How a run ended: its exit code (0 finished, 1 failed or canceled) and the machine's outcome. */
export interface AgentResult {
  /** 0 when the model finished, 1 when the run failed or was canceled. */
  code: number;
  /** The machine's outcome: `{Ok: reason}` or `{Err: error}`. */
  outcome: unknown;
}

/**
 * Drives one AgentMachine: executes its actions and feeds it what happened. Every rule
 * (retry or not, how long to wait, compaction, tool errors, failing) is the machine's.
 */
export class Agent {
  /** The run's machine: every decision is its. */
  readonly machine: AgentMachine;
  /** Where each target of the machine's fallback chain is reached (one when it has none). */
  readonly #targets: HttpTarget[];
  /** The tools the model is offered: the machine's. */
  readonly #toolSpecs: readonly ToolSpec[];
  readonly #tools: Tools;
  readonly #say: Say;
  readonly #signal: AbortSignal | undefined;
  readonly #budget: SharedBudget | undefined;
  readonly #started = performance.now();

  /** An agent of `options`, with its API key, recording its trace when `record`. */
  constructor(options: AgentOptions & { apiKey: string; record: boolean }) {
    const provider = options.provider ?? "anthropic";
    const model = options.model ?? DEFAULT_MODEL[provider];
    // A fallback chain in the config (`targets`) is reached at the same base URL, each
    // target with its own model.
    const models = options.config?.targets?.map((target) => target.model) ?? [model];
    this.#targets = (models.length > 0 ? models : [model]).map(
      (m) => new HttpTarget(provider, options.baseUrl, m, options.apiKey),
    );
    this.#toolSpecs = options.config?.tools ?? TOOLS;
    this.#tools = new Tools(options.root ?? ".");
    this.#say = options.say ?? ((text, end = "\n") => process.stdout.write(text + end));
    this.#signal = options.signal;
    this.#budget = options.budget;
    this.machine = new AgentMachine({
      config: { ...(options.config ?? {}), tools: [...this.#toolSpecs] },
      seed: options.seed ?? randomSeed(),
      record: options.record,
      // The API key, masked in every failure the machine is told of: a server echoing it
      // never gets it into a notice, the run's error or the trace.
      secrets: this.#targets[0]?.secrets ?? [],
    });
  }

  /**
   * The machine's clock: monotonic milliseconds since the agent was made, or the shared
   * budget's (every machine sharing a budget is driven on its clock).
   */
  now(): number {
    return this.#budget?.nowMs() ?? Math.floor(performance.now() - this.#started);
  }

  /** Runs the agent loop to its end: 0 when the model finished, 1 when the run failed. */
  async run(prompt: string): Promise<number> {
    let event: Event | undefined = userText(prompt);
    while (event !== undefined) {
      this.machine.handle(this.now(), event);
      event = undefined;
      // Drain after every handle; at most one action awaits an answer at a time.
      for (const action of this.machine.drain()) {
        const answer = await this.execute(action);
        if (typeof answer === "number") return answer;
        if (answer !== undefined) event = answer;
      }
      // Canceled while an answer was awaited: the machine decides what a cancel ends.
      if (event !== undefined && this.#signal?.aborted) event = { type: "cancel" };
    }
    throw new Error("the machine stopped asking for anything before the run ended");
  }

  /** Executes one action: the event that answers it, an exit code at the end, or nothing. */
  async execute(action: Action): Promise<Event | number | undefined> {
    switch (action.type) {
      case "send_request": {
        const answer = await this.send(action);
        return answer === CANCELED ? { type: "cancel" } : answer;
      }
      case "sleep":
        return (await sleep(action.delay_ms, this.#signal))
          ? { type: "timer_fired", timer: action.timer }
          : { type: "cancel" };
      case "run_tools":
        return this.runTools(action.batch, action.calls);
      case "compact":
        // rebound's own compaction, with the machine's compaction policy.
        return {
          type: "compaction_finished",
          compaction: action.compaction,
          result: this.machine.compactDefault(action.conversation),
        };
      case "acquire_permit":
        // Without a shared budget, every permit is granted.
        if (this.#budget === undefined) {
          return { type: "permit_answered", permit: action.permit, decision: "granted" };
        }
        try {
          return await this.#budget.acquire(action, { signal: this.#signal });
        } catch (error) {
          if (this.#signal?.aborted) return { type: "cancel" };
          throw error;
        }
      case "note_budget":
        this.#budget?.note(action);
        return undefined;
      case "stream_reset":
        // The answer shown so far broke off: it is void (the retry answers anew).
        this.#say("\n(the answer broke off: the text above is discarded)");
        return undefined;
      case "notify_retry":
        this.#say(describe("retry_info", action.info));
        return undefined;
      case "notify_fallback":
        this.#say(describe("fallback_info", action.info));
        return undefined;
      case "append_message":
        if (action.message.role === "assistant") this.#say(""); // its text was streamed
        return undefined;
      case "replace_conversation":
        return undefined;
      case "finish": {
        const t = this.machine.tally(); // counted by rebound, not here
        this.#say(
          `done after ${action.turns} turns (requests: ${t.requests}, retries: ${t.retries}, ` +
            `stream resets: ${t.stream_resets})`,
        );
        return 0;
      }
      case "fail":
        this.#say(`rebound: the run failed: ${describe("run_error", action.error)}`);
        return 1;
      default:
        throw new Error(`an action this agent does not know: ${JSON.stringify(action)}`);
    }
  }

  /** Runs a batch of tool calls side by side: the event that answers it. */
  async runTools(batch: number, calls: ToolCall[]): Promise<Event> {
    const outcomes = await Promise.all(
      calls.map(async (call): Promise<CallOutcome> => {
        this.#say(`→ ${call.name} ${JSON.stringify(call.input)}`);
        try {
          const text = await this.#tools.run(call.name, call.input);
          return { tool_use_id: call.id, result: { Ok: { parts: [{ type: "text", text }] } } };
        } catch (error) {
          const message =
            error instanceof ToolFailure
              ? error.message
              : `${(error as Error).name}: ${(error as Error).message}`;
          // A failure the model can act on: the machine makes it an error tool result.
          return { tool_use_id: call.id, result: { Err: { model: { message } } } };
        }
      }),
    );
    if (this.#signal?.aborted) return { type: "cancel" };
    return { type: "tools_finished", batch, outcome: { per_call: outcomes } };
  }

  /**
   * One attempt of a `send_request`, its text shown as it streams: the event that answers
   * it, or CANCELED when the run's signal fired.
   */
  send(command: SendRequest): Promise<Event | typeof CANCELED> {
    const target = this.#targets[command.target] ?? this.#targets[0];
    if (target === undefined) throw new Error("the agent has no target");
    return attempt(target, command, {
      body: { tools: this.#toolSpecs },
      signal: this.#signal,
      onDelta: (delta) => {
        if (delta.type === "text") this.#say(delta.text, "");
      },
      // The answer began: drained at once, as after every handle (its only actions are
      // note_budget, for the shared retry budget).
      onResponding: () => {
        this.machine.handle(this.now(), { type: "provider_responding", request: command.request });
        for (const action of this.machine.drain()) {
          if (action.type === "note_budget") this.#budget?.note(action);
        }
      },
    });
  }
}

/** The API key's environment variable for `provider`. */
function keyVariable(provider: ProviderKind): string {
  switch (provider) {
    case "anthropic":
      return "ANTHROPIC_API_KEY";
    case "gemini":
      return "GEMINI_API_KEY";
    case "bedrock":
      return "AWS_BEARER_TOKEN_BEDROCK";
    default:
      return "OPENAI_API_KEY";
  }
}

/** Runs the example agent once on `prompt`; with `trace`, writes the run's trace there. */
export async function runAgent(prompt: string, options: AgentOptions): Promise<AgentResult> {
  const provider = options.provider ?? "anthropic";
  const apiKey =
    options.apiKey ?? process.env[keyVariable(provider)] ?? "no-key-for-the-fake-server";
  const agent = new Agent({ ...options, provider, apiKey, record: options.trace !== undefined });
  try {
    const code = await agent.run(prompt);
    if (options.trace !== undefined) await writeFile(options.trace, agent.machine.traceJsonl());
    return { code, outcome: agent.machine.outcome() };
  } finally {
    agent.machine.free();
  }
}

/** The command line: `agent.js [--base-url URL] [--provider P] [--root DIR] … PROMPT`. */
const USAGE = `usage: agent.js [--base-url URL] [--provider P] [--model M] [--root DIR]
                [--seed N] [--trace FILE] PROMPT

  --base-url  the provider's base URL (default: the provider's own API)
  --provider  anthropic, openai, openai_responses, gemini or bedrock (anthropic)
  --model     the model (each provider's default)
  --root      the folder the read and list tools may read (.)
  --seed      the retry jitter seed (random)
  --trace     write the run's rebound trace here (replay it with \`rebound replay\`)
`;

/** The provider's own API, for a run without `--base-url`. */
function defaultBaseUrl(provider: ProviderKind): string {
  switch (provider) {
    case "anthropic":
      return "https://api.anthropic.com";
    case "gemini":
      return "https://generativelanguage.googleapis.com/v1beta";
    case "bedrock":
      return `https://bedrock-runtime.${process.env.AWS_REGION ?? "us-east-1"}.amazonaws.com`;
    default:
      return "https://api.openai.com/v1";
  }
}

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        "base-url": { type: "string" },
        provider: { type: "string", default: "anthropic" },
        model: { type: "string" },
        root: { type: "string", default: "." },
        seed: { type: "string" },
        trace: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help === true) {
    process.stdout.write(USAGE);
    return 0;
  }
  const provider = values.provider as ProviderKind;
  if (!(provider in DEFAULT_MODEL)) {
    process.stderr.write(`unknown provider ${provider}: one of ${Object.keys(DEFAULT_MODEL).join(", ")}\n`);
    return 2;
  }
  const prompt = positionals.join(" ");
  if (prompt === "") {
    process.stderr.write(USAGE);
    return 2;
  }
  const baseUrl = values["base-url"] ?? defaultBaseUrl(provider);
  // Ctrl-C cancels the run: the machine ends it as canceled.
  const controller = new AbortController();
  process.once("SIGINT", () => controller.abort());
  const { code } = await runAgent(prompt, {
    baseUrl,
    provider,
    model: values.model,
    root: values.root,
    seed: values.seed,
    trace: values.trace,
    signal: controller.signal,
  });
  return code;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main();
}
