// The JSON shapes of rebound-core's values as they cross between JavaScript and the
// WebAssembly: events, actions (the machine's commands), messages, configuration, failures,
// tallies, outcomes and trace lines. Each is what core's serde writes (and reads back), so a
// value of these types is also a line of rebound's trace format. `js/test/types.test.js`
// proves them: it runs real machines, writes what they handed out as TypeScript literals of
// these types and has `tsc --strict` check them.
//
// Core reads a few shorthands these types do not list (a message's `content` as a plain
// string, a tool result's `content` as a string, a missing `usage`); what it writes is always
// the full shape below. Numbers are JavaScript numbers: ids, milliseconds and token counts
// are whole numbers from 0 (core's u64, well below 2^53 in practice).

import type { Snapshot } from "./machine.js";

// ---------------------------------------------------------------------------------------
// JSON

/** Any JSON value. */
export type JsonValue = string | number | boolean | null | JsonValue[] | JsonObject;
/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

// ---------------------------------------------------------------------------------------
// Messages (Anthropic's Messages shape, as sessions and traces hold them)

/** Who wrote a message: the person (tool results included), or the model. */
export type Role = "user" | "assistant";

/** Where an image's bytes come from: inline base64 with its media type, or a URL. */
export type MediaSource =
  | { type: "base64"; /** e.g. `image/png` */ media_type: string; /** base64 bytes */ data: string }
  | { type: "url"; /** fetched by the provider */ url: string };

/** One part of a tool result: text, or an image. */
export type ToolResultPart =
  | { type: "text"; text: string }
  | { type: "image"; source: MediaSource };

/**
 * Who produced a piece of encrypted reasoning or signed thinking: an opaque identity of a
 * target (provider kind, base URL and a keyed hash of its credentials; never a key). Such
 * blocks go back only to the target that made them.
 */
export type TargetIdentity = string;

/** Plain text. */
export interface TextBlock {
  type: "text";
  text: string;
}
/** A tool call made by the model; answered by a `tool_result` block with its `id`. */
export interface ToolUseBlock {
  type: "tool_use";
  /** The provider-assigned call id, echoed by the matching result. */
  id: string;
  /** The tool's name. */
  name: string;
  /** The arguments: a JSON object (an empty object when the model's input was unusable). */
  input: JsonObject;
}
/** The result of a tool call, sent back in the next user message. */
export interface ToolResultBlock {
  type: "tool_result";
  /** The `id` of the `tool_use` block this answers. */
  tool_use_id: string;
  /** What the tool returned (or the error text, when `is_error`). */
  content: ToolResultPart[];
  /** Present (and `true`) when the tool failed. */
  is_error?: boolean;
}
/** An image. */
export interface ImageBlock {
  type: "image";
  source: MediaSource;
}
/** Extended thinking from the model, passed back verbatim (signed: only to its owner). */
export interface ThinkingBlock {
  type: "thinking";
  /** The thinking text. */
  thinking: string;
  /** The provider's signature over it; empty when it gave none. */
  signature: string;
  /** The target that produced it; absent: unknown owner. */
  owner?: TargetIdentity;
}
/** Thinking the provider encrypted whole (Anthropic's `redacted_thinking`). */
export interface RedactedThinkingBlock {
  type: "redacted_thinking";
  /** The encrypted thinking, as the provider sent it. */
  data: string;
  /** The target that produced it; absent: unknown owner. */
  owner?: TargetIdentity;
}
/** An OpenAI Responses `reasoning` output item, kept exactly as received. */
export interface ReasoningBlock {
  type: "reasoning";
  /** The item as the provider sent it. */
  item: JsonValue;
  /** The target that produced it; absent: unknown owner. */
  owner?: TargetIdentity;
}
/** One block of message content, discriminated by `type`. */
export type ContentBlock =
  | TextBlock
  | ToolUseBlock
  | ToolResultBlock
  | ImageBlock
  | ThinkingBlock
  | RedactedThinkingBlock
  | ReasoningBlock;

/** One message of the conversation. */
export interface Message {
  /** Who wrote it. */
  role: Role;
  /** Its blocks (core also reads a plain string as one text block). */
  content: ContentBlock[];
}

// ---------------------------------------------------------------------------------------
// Responses

/**
 * Why the model stopped, in Anthropic's vocabulary (OpenAI's `stop`, `length`,
 * `tool_calls` are read as `end_turn`, `max_tokens`, `tool_use`); any other value is kept
 * verbatim.
 */
export type StopReason =
  | "end_turn"
  | "tool_use"
  | "max_tokens"
  | "stop_sequence"
  | "content_filter"
  | "refusal"
  | "pause_turn"
  | (string & {});

/** Token usage reported by the provider. */
export interface Usage {
  /** Prompt tokens. */
  input_tokens: number;
  /** Completion tokens. */
  output_tokens: number;
  /** Tokens written to the prompt cache (Anthropic). */
  cache_creation_input_tokens?: number;
  /** Tokens read from the prompt cache. */
  cache_read_input_tokens?: number;
}

/** What was wrong with the input the model produced for one tool call. */
export type InputProblemKind = "invalid_json" | "truncated" | "not_an_object" | "too_deep";

/** A tool call whose input cannot be used: the machine answers it with an error result. */
export interface ToolInputProblem {
  /** The `tool_use` id. */
  tool_use_id: string;
  /** What was wrong. */
  kind: InputProblemKind;
  /** The raw argument text the model produced (possibly cut short). */
  raw: string;
  /** The parser's detail. */
  detail: string;
}

/**
 * A complete assistant response, as the wire helpers assemble it from a stream or a body:
 * what answers a `send_request` in `provider_succeeded`.
 */
export interface AssistantResponse {
  /** The assistant message (role `assistant`). */
  message: Message;
  /** Why the model stopped. */
  stop_reason: StopReason;
  /** Token usage (core reads a missing one as zeros, and always writes it). */
  usage?: Usage;
  /** Tool calls whose input is unusable; absent when there are none. */
  input_problems?: ToolInputProblem[];
  /** The provider's id of the response (`msg_…`, `chatcmpl-…`). */
  id?: string;
  /** The model that produced it, as the provider names it. */
  model?: string;
}

// ---------------------------------------------------------------------------------------
// Failures

/** Which wire format / API family a provider speaks. */
export type ProviderKind = "anthropic" | "openai" | "openai_responses" | "gemini" | "bedrock";

/**
 * What went wrong with a provider attempt, sorted by what can be done about it:
 * `rate_limited`, `unavailable`, `server_error`, `transport`, `stream_malformed` and
 * `empty_response` are retried; `context_overflow` compacts and retries once;
 * `reasoning_rejected` retries once without reasoning; the rest fail the run (or fall back).
 */
export type FailureKind =
  | "rate_limited"
  | "unavailable"
  | "server_error"
  | "transport"
  | "stream_malformed"
  | "empty_response"
  | "auth_failed"
  | "bad_request"
  | "model_not_found"
  | "quota_exhausted"
  | "context_overflow"
  | "reasoning_rejected"
  | "content_blocked";

/** A transport-level fault: the HTTP exchange did not produce a usable response. */
export type TransportFault =
  | "connect"
  | "dns"
  | "tls"
  | "reset"
  | "timeout"
  | "idle_timeout"
  | "stream_cut"
  | "malformed_stream"
  | "empty_message";

/**
 * Everything known about one failed provider attempt, as the wire helpers classify it:
 * what answers a `send_request` in `provider_failed`. Holds no secret.
 */
export interface ProviderFailure {
  /** What kind of failure this is. */
  kind: FailureKind;
  /** The HTTP status, when the server answered. */
  status?: number;
  /** The provider's error type, e.g. `overloaded_error`. */
  error_type?: string;
  /** The provider's message, or a description of the transport fault. */
  message: string;
  /** The provider's request id, for support tickets. */
  request_id?: string;
  /** The server's delay hint (`retry-after-ms` / `retry-after`), in ms. */
  retry_after_ms?: number;
  /** Time until the rate-limit window resets, from its reset headers, in ms. */
  rate_limit_reset_ms?: number;
  /** The server's `x-should-retry` verdict. */
  should_retry?: boolean;
  /** The transport fault, when there was no usable HTTP response. */
  transport?: TransportFault;
}

/** What kind of host failure ends the run. */
export type HostFailureKind = "canceled" | "out_of_memory" | "receiver" | "session_store" | "internal";

/** A failure of the host rather than the model's choice: it ends the run. */
export interface HostFailure {
  /** What failed (`canceled` is the run's cancel). */
  kind: HostFailureKind;
  /** Details for the embedder (never shown to the model). */
  message: string;
}

// ---------------------------------------------------------------------------------------
// Tools

/** A tool the model may call: what the provider is told about it. */
export interface ToolSpec {
  /** The name the model uses, e.g. `read`. */
  name: string;
  /** What the tool does, for the model. */
  description: string;
  /**
   * JSON Schema of the input object (also typed loosely, so that a schema literal whose
   * inferred type has optional keys fits).
   */
  input_schema: JsonValue | { [key: string]: unknown };
}

/** One call a `run_tools` action asks the driver to run. */
export interface ToolCall {
  /** The `tool_use` id, echoed in the call's outcome. */
  id: string;
  /** The tool's name (one of the configured tools). */
  name: string;
  /** The arguments: a JSON object. */
  input: JsonObject;
}

/** What a tool returned when it worked. */
export interface ToolOutput {
  /** The result parts, text and/or images. */
  parts: ToolResultPart[];
}

/**
 * Why a tool call (or a whole batch) failed: `model` is a failure the model can act on (it
 * becomes an error tool result and the loop goes on); `host` ends the run.
 */
export type ToolFailure = { model: { message: string } } | { host: HostFailure };

/** The outcome of one call of a batch: `{Ok: output}` or `{Err: failure}`. */
export interface CallOutcome {
  /** The `tool_use` id of the call. */
  tool_use_id: string;
  /** What it produced. */
  result: { Ok: ToolOutput } | { Err: ToolFailure };
}
/** The outcome of one tool call (a {@link CallOutcome}). */
export type ToolOutcome = CallOutcome;

/**
 * The outcome of a whole `run_tools` batch: one outcome per call (any order), or one
 * failure for every call.
 */
export type BatchOutcome = { per_call: CallOutcome[] } | { whole_batch: ToolFailure };

// ---------------------------------------------------------------------------------------
// The retry budget

/** What a permit is asked for: only `charged` permits cost a token. */
export type PermitKind = "first_attempt" | "hinted" | "charged";

/** One permit request of an `acquire_permit` action. Times are absolute, on the caller's clock. */
export interface PermitAsk {
  /** What the permit is for. */
  kind: PermitKind;
  /** Index of the target the request goes to. */
  target: number;
  /** The latest time a charged permit may be granted (ms); ignored for the other kinds. */
  deadline: number;
  /** When the request being retried first asked (ms): the oldest is served first. */
  since: number;
}

/**
 * The budget's answer to a permit request, in `permit_answered`: go ahead, wait until a
 * time (absolute ms) and ask again, or do not retry.
 */
export type PermitDecision = "granted" | "denied" | { wait_until: number };

/** What a machine tells its budget in a `note_budget` action (tagged by `note`). */
export type BudgetNote =
  | { note: "succeeded"; /** index of the target */ target: number }
  | { note: "retry_answered"; /** index of the target */ target: number }
  | {
      note: "rate_limited";
      /** index of the target */
      target: number;
      /** when the server said it is ready again (absolute ms) */
      until: number;
    };

/** A retry budget's token bucket (a fleet's shared budget). */
export interface BudgetConfig {
  /** Most tokens the bucket holds. */
  capacity: number;
  /** Tokens in the bucket at the start. */
  initial: number;
  /** Tokens each first attempt deposits. */
  deposit_per_request: number;
  /** Tokens each successful response deposits. */
  deposit_per_success: number;
  /** Tokens added per second of elapsed time. */
  refill_per_sec: number;
  /** Tokens a request deposits when one of its retries is answered. */
  deposit_per_answered_retry: number;
}

// ---------------------------------------------------------------------------------------
// Compaction

/** How a conversation is compacted: a summary by the model (falling back to elision), or elision. */
export type CompactionMethod = "summary" | "elide";
/** Why a compaction ran: the provider refused the request as too long, or the threshold passed. */
export type CompactionReason = "overflow" | "threshold";

/** What a compaction did, in a `replace_conversation` action. */
export interface CompactionReport {
  /** Messages before. */
  before_messages: number;
  /** Messages after. */
  after_messages: number;
  /** Approximate bytes before. */
  before_bytes: number;
  /** Approximate bytes after. */
  after_bytes: number;
  /** Estimated tokens before. */
  before_tokens: number;
  /** Estimated tokens after. */
  after_tokens: number;
  /** Why it ran. */
  reason: CompactionReason;
  /** How it was done. */
  method: CompactionMethod;
  /** When a summary was wanted but elision ran instead: why the summary failed. */
  summary_error?: string;
}

/**
 * What answers a `compact` action in `compaction_finished`: the compacted messages, or why
 * the compactor failed (`AgentMachine.compactDefault` returns one).
 */
export type CompactionResult = { Ok: Message[] } | { Err: string };

// ---------------------------------------------------------------------------------------
// Configuration

/** Retry policy for provider failures. */
export interface RetryConfig {
  /** Attempts per request, counting the first (below 1: 1). */
  max_attempts: number;
  /** Delay before the first retry, in ms. */
  initial_delay_ms: number;
  /** Upper bound of the computed delay, in ms. */
  max_delay_ms: number;
  /** Growth factor per retry (below 1 or not finite: 1). */
  multiplier: number;
  /** Whether computed delays are jittered (server hints never are). */
  jitter: boolean;
  /** The longest server-requested delay honoured, in ms. */
  max_retry_after_ms: number;
  /** The longest server-requested delay worth waiting with a next target at hand, in ms. */
  fallback_after_ms: number;
  /** Empty assistant responses tolerated per request. */
  max_empty_responses: number;
}

/** The default compactor's policy. */
export interface CompactionPolicy {
  /** At least this many of the newest messages are kept verbatim. */
  keep_recent_messages: number;
  /** Older text and tool-result payloads longer than this are elided. */
  elide_over_bytes: number;
  /** How much of an elided text's head is kept. */
  keep_head_bytes: number;
  /** Tool results in the kept tail longer than this are cut too. */
  max_tail_result_bytes: number;
}

/** How the machine uses a shared retry budget. */
export interface BudgetUse {
  /** How long a charged retry may wait for a token after its backoff, in ms. */
  max_wait_ms: number;
}

/** How long a response may take: past either deadline, answer with an `idle_timeout` failure. */
export interface StreamDeadlines {
  /** How long a response may stay silent (no byte), in ms. */
  idle_ms: number;
  /** How long a response may go without content, in ms. */
  progress_ms: number;
}

/** One model on one provider that requests can go to (an entry of the fallback chain). */
export interface TargetSpec {
  /** The wire format the target speaks. */
  provider: ProviderKind;
  /** The model name, e.g. `claude-sonnet-4-6`. */
  model: string;
  /** The model's context window in tokens, when known. */
  context_window?: number;
  /** Who this target is, for the reasoning it produces. */
  identity?: TargetIdentity;
}

/** Everything the machine decides with, every setting filled in (as `config()` returns it). */
export interface MachineConfig {
  /** Retry policy for provider failures. */
  retry: RetryConfig;
  /** The tools the model may call. */
  tools: ToolSpec[];
  /** The fallback chain, primary first; empty: one unnamed target (index 0). */
  targets: TargetSpec[];
  /** Stop (with `max_turns`) once this many assistant messages were appended; `null`: never. */
  max_turns: number | null;
  /** Whether a context overflow triggers one compaction and retry. */
  auto_compact: boolean;
  /** The default compactor's policy. */
  compaction: CompactionPolicy;
  /** How to compact. */
  compact_with: CompactionMethod;
  /** Compact before a request past this percentage of the target's context window (0: never). */
  compact_threshold_percent: number;
  /** When set, charged retries need a permit from a shared retry budget. */
  retry_budget: BudgetUse | null;
  /** How long a response may take; absent: the defaults (90 s idle, 10 min without content). */
  stream?: StreamDeadlines;
}

/**
 * A MachineConfig as a caller writes it: every setting may be left out (also inside a
 * nested record), taking rebound's default; a key that is no setting is a ConfigError.
 */
export interface MachineConfigInput {
  /** Retry policy for provider failures. */
  retry?: Partial<RetryConfig>;
  /** The tools the model may call. */
  tools?: ToolSpec[];
  /** The fallback chain, primary first. */
  targets?: TargetSpec[];
  /** Stop once this many assistant messages were appended. */
  max_turns?: number | null;
  /** Whether a context overflow triggers one compaction and retry. */
  auto_compact?: boolean;
  /** The default compactor's policy. */
  compaction?: Partial<CompactionPolicy>;
  /** How to compact. */
  compact_with?: CompactionMethod;
  /** Compact before a request past this percentage of the target's context window. */
  compact_threshold_percent?: number;
  /** When set, charged retries need a permit from a shared retry budget. */
  retry_budget?: Partial<BudgetUse> | null;
  /** How long a response may take. */
  stream?: Partial<StreamDeadlines>;
}

// ---------------------------------------------------------------------------------------
// Notices, errors, outcomes

/** What a request is for: the next message, or a summary for compaction (not appended). */
export type RequestPurpose = "turn" | "summary";

/** Told to the UI before a delayed retry, a compaction retry or the retry without reasoning. */
export interface ProviderRetryInfo {
  /** The 1-based number of the attempt about to be made. */
  attempt: number;
  /** Attempts allowed per request on this target. */
  max_attempts: number;
  /** How long the driver will wait before it, in ms. */
  delay_ms: number;
  /** What failed. */
  kind: FailureKind;
  /** The HTTP status, if any. */
  status?: number;
  /** The server's `retry-after` hint, if any, in ms. */
  retry_after_ms?: number;
  /** The provider's message or fault description. */
  message: string;
  /** Index of the target being retried. */
  target: number;
}

/** Told to the UI before the first request to a fallback target. */
export interface FallbackInfo {
  /** Index of the abandoned target. */
  from: number;
  /** Index of the target taking over. */
  to: number;
  /** Printable name of `from`. */
  from_label: string;
  /** Printable name of `to`. */
  to_label: string;
  /** What made `from` give up. */
  kind: FailureKind;
  /** The last failure's message. */
  message: string;
}

/** Why the machine stopped trying a provider failure (tagged by `type`). */
export type GiveUp =
  | { type: "not_retryable" }
  | { type: "attempts_exhausted"; /** attempts made */ attempts: number }
  | { type: "empty_responses"; /** empty answers received */ count: number }
  | { type: "budget_exhausted" }
  | { type: "retry_after_too_long"; /** the server's hint, ms */ hint_ms: number; /** the cap, ms */ cap_ms: number }
  | {
      type: "retry_after_long";
      /** the server's hint, ms */
      hint_ms: number;
      /** the policy's `fallback_after_ms` */
      fallback_after_ms: number;
    }
  | { type: "compaction_disabled" }
  | { type: "overflow_after_compaction" }
  | { type: "compaction_failed"; /** the compactor's message */ message: string }
  | { type: "reasoning_rejected_again" };

/** One target's last failure, kept when the run fell back to the next target. */
export interface TargetFailure {
  /** Index of the target. */
  target: number;
  /** Printable name of the target. */
  label: string;
  /** Its last failure. */
  failure: ProviderFailure;
  /** Why it was abandoned. */
  reason: GiveUp;
}

/** Why a run failed (tagged by `type`); returned to the embedder, never shown to the model. */
export type RunError =
  | { type: "canceled" }
  | { type: "host"; /** what failed */ failure: HostFailure }
  | {
      type: "provider";
      /** The last failure. */
      failure: ProviderFailure;
      /** Why the machine stopped. */
      reason: GiveUp;
      /** Index of the last target tried. */
      target: number;
      /** Printable name of the last target tried. */
      label: string;
      /** Earlier targets of the fallback chain and their last failures. */
      earlier: TargetFailure[];
    }
  | { type: "empty_user_message" }
  | { type: "invariant"; /** what was wrong */ message: string };

/** Why a run finished: the model stopped (with its stop reason), `max_turns`, or nothing to do. */
export type FinishReason = { model: StopReason } | "max_turns" | "nothing_to_do";

/** How a run ended: `{Ok: reason}` or `{Err: error}` (`AgentMachine.outcome()`). */
export type Outcome = { Ok: FinishReason } | { Err: RunError };

// ---------------------------------------------------------------------------------------
// Events: what the world tells the machine (`AgentMachine.handle`)

/** The person sent a message: starts the run (only before it started). */
export interface UserMessage {
  type: "user_message";
  /** The message's blocks (usually one text block: `userText(text)`). */
  content: ContentBlock[];
}
/** Continue a loaded conversation without a new message (e.g. after a crash). */
export interface Resume {
  type: "resume";
}
/** Answers a `send_request`: the request produced a complete assistant message. */
export interface ProviderSucceeded {
  type: "provider_succeeded";
  /** The `request` of the `send_request` this answers. */
  request: number;
  /** The assembled response. */
  response: AssistantResponse;
}
/**
 * Optional, about a `send_request`, and no answer to it: the provider began answering (a
 * success status and the first piece arrived). If the request then fails, the run hands
 * out a `stream_reset`.
 */
export interface ProviderResponding {
  type: "provider_responding";
  /** The `request` of the `send_request` being answered. */
  request: number;
}
/** Answers a `send_request`: the request failed. */
export interface ProviderFailed {
  type: "provider_failed";
  /** The `request` of the `send_request` this answers. */
  request: number;
  /** The classified failure. */
  failure: ProviderFailure;
}
/** Answers a `run_tools`: the batch finished (an outcome for each of its calls, or one for all). */
export interface ToolsFinished {
  type: "tools_finished";
  /** The `batch` of the `run_tools` this answers. */
  batch: number;
  /** What the calls produced. */
  outcome: BatchOutcome;
}
/** Answers a `sleep`: its delay passed. */
export interface TimerFired {
  type: "timer_fired";
  /** The `timer` of the `sleep` this answers. */
  timer: number;
}
/** Answers a `compact`: the compacted messages, or why the compactor failed. */
export interface CompactionFinished {
  type: "compaction_finished";
  /** The `compaction` of the `compact` this answers. */
  compaction: number;
  /** The result. */
  result: CompactionResult;
}
/** Answers an `acquire_permit`: the shared retry budget decided. */
export interface PermitAnswered {
  type: "permit_answered";
  /** The `permit` of the `acquire_permit` this answers. */
  permit: number;
  /** The budget's decision. */
  decision: PermitDecision;
}
/** The host failed (receiver, session store, out of memory): the run fails. */
export interface HostFailed {
  type: "host_failed";
  /** What failed (`canceled`: the run's cancel). */
  failure: HostFailure;
}
/** The person or embedder canceled: the run fails at once. */
export interface Cancel {
  type: "cancel";
}

/** Something that happened, handed to `AgentMachine.handle`; discriminated by `type`. */
export type Event =
  | UserMessage
  | Resume
  | ProviderSucceeded
  | ProviderResponding
  | ProviderFailed
  | ToolsFinished
  | TimerFired
  | CompactionFinished
  | PermitAnswered
  | HostFailed
  | Cancel;

/** The `type` of an event. */
export type EventType = Event["type"];

// ---------------------------------------------------------------------------------------
// Actions: what the machine asks of its driver (`AgentMachine.poll`)

/** Persist and show a complete message (the machine already appended it). No answer. */
export interface AppendMessage {
  type: "append_message";
  /** The message. */
  message: Message;
}
/**
 * Send `conversation` to target `target`; answer with `provider_succeeded` or
 * `provider_failed` carrying `request` (and, optionally, `provider_responding` first).
 */
export interface SendRequest {
  type: "send_request";
  /** The id to answer with. */
  request: number;
  /** Index into the fallback chain (`config.targets`). */
  target: number;
  /** 1-based attempt number on this target for this request. */
  attempt: number;
  /** What to send, shared with the machine. */
  conversation: Snapshot;
  /** The next message (`turn`), or a summary for compaction, whose answer is not appended. */
  purpose: RequestPurpose;
  /** How long the response may take: past either, answer with an `idle_timeout` failure. */
  deadlines: StreamDeadlines;
}
/** Wait `delay_ms` on the caller's own timer, then answer with `timer_fired` carrying `timer`. */
export interface Sleep {
  type: "sleep";
  /** The id to answer with. */
  timer: number;
  /** The chosen delay (already jittered), in ms. */
  delay_ms: number;
}
/** Tell the UI a retry is coming (before its `sleep`). No answer. */
export interface NotifyRetry {
  type: "notify_retry";
  /** The details (`describe("retry_info", info)` says it in one line). */
  info: ProviderRetryInfo;
}
/** Tell the UI the next request goes to a fallback target. No answer. */
export interface NotifyFallback {
  type: "notify_fallback";
  /** The details (`describe("fallback_info", info)` says it in one line). */
  info: FallbackInfo;
}
/** Compact `conversation`; answer with `compaction_finished` carrying `compaction`. */
export interface Compact {
  type: "compact";
  /** The id to answer with. */
  compaction: number;
  /** What to compact (`AgentMachine.compactDefault` does it core's way). */
  conversation: Snapshot;
}
/** The conversation was replaced by its compacted form: persist it and tell the UI. No answer. */
export interface ReplaceConversation {
  type: "replace_conversation";
  /** The new conversation. */
  conversation: Snapshot;
  /** What the compaction did. */
  report: CompactionReport;
}
/** Run these tool calls (independent; concurrently if possible); answer with `tools_finished`. */
export interface RunTools {
  type: "run_tools";
  /** The id to answer with. */
  batch: number;
  /** The calls, in the order the model made them. */
  calls: ToolCall[];
}
/** Ask the shared retry budget for a permit; answer with `permit_answered` carrying `permit`. */
export interface AcquirePermit {
  type: "acquire_permit";
  /** The id to answer with. */
  permit: number;
  /** What to ask the budget. */
  ask: PermitAsk;
}
/** Tell the shared retry budget what happened. No answer. */
export interface NoteBudget {
  type: "note_budget";
  /** A success, an answered retry, or a rate limit every agent of the budget waits out. */
  note: BudgetNote;
}
/** The run finished. Terminal. */
export interface Finish {
  type: "finish";
  /** Why. */
  reason: FinishReason;
  /** Assistant messages appended in this run. */
  turns: number;
}
/** The run failed. Terminal. */
export interface Fail {
  type: "fail";
  /** Why (`describe("run_error", error)` says it in one line). */
  error: RunError;
}
/**
 * Not a command of the machine but of the run, in order among them: an answer that had
 * begun (`provider_responding`) failed, so discard what was shown of it. No answer.
 */
export interface StreamReset {
  type: "stream_reset";
  /** The request whose answer was cut. */
  request: number;
  /** Its attempt number. */
  attempt: number;
}

/** A command of the machine, as `poll` hands it out (conversations as Snapshots). */
export type Command =
  | AppendMessage
  | SendRequest
  | Sleep
  | NotifyRetry
  | NotifyFallback
  | Compact
  | ReplaceConversation
  | RunTools
  | AcquirePermit
  | NoteBudget
  | Finish
  | Fail;

/**
 * What `AgentMachine.poll` hands out: a command, or a `stream_reset`; discriminated by
 * `type`. A driver's `switch (action.type)` should list every member with no `default`, so
 * that it stops compiling when one is added.
 */
export type Action = Command | StreamReset;

/** The `type` of an action. */
export type ActionType = Action["type"];

/** The five actions that await an answer; the machine awaits at most one at a time. */
export type AwaitingAction = SendRequest | Sleep | RunTools | Compact | AcquirePermit;

/** For each action that awaits an answer, the events that answer it. */
export interface Answers {
  send_request: ProviderSucceeded | ProviderFailed;
  sleep: TimerFired;
  run_tools: ToolsFinished;
  compact: CompactionFinished;
  acquire_permit: PermitAnswered;
}

// ---------------------------------------------------------------------------------------
// Tallies and traces

/** What one answered provider request used. */
export interface RequestUsage {
  /** The target it went to. */
  target: number;
  /** Its attempt number. */
  attempt: number;
  /** What it was for. */
  purpose: RequestPurpose;
  /** The usage the provider reported. */
  usage: Usage;
}

/** Counts of what happened during a run (`AgentMachine.tally()`), each derived by core. */
export interface RunTally {
  /** Provider requests sent (every attempt, summaries included). */
  requests: number;
  /** Retries sent. */
  retries: number;
  /** The announced delays of those retries, summed, in ms. */
  retry_wait_ms: number;
  /** Tool calls in appended assistant messages. */
  tool_calls: number;
  /** Appended tool results that were errors. */
  tool_errors: number;
  /** Compactions applied. */
  compactions: number;
  /** Moves to another target of the fallback chain. */
  fallbacks: number;
  /** Answers that began and then failed. */
  stream_resets: number;
  /** Input tokens reported, summed. */
  input_tokens: number;
  /** Output tokens reported, summed. */
  output_tokens: number;
  /** Prompt-cache reads reported, summed. */
  cache_read_tokens: number;
  /** Prompt-cache writes reported, summed. */
  cache_creation_tokens: number;
  /** Usage of each answered request, in order. */
  usage: RequestUsage[];
  /** Time from the first event to the last, in ms, on the caller's clock. */
  elapsed_ms: number;
}

/** A conversation as a trace writes it: its length and digest (`Snapshot.toJSON()`). */
export interface SnapshotSummary {
  /** The number of messages. */
  messages: number;
  /** The 64-bit FNV-1a digest of its JSON, 16 hex digits. */
  digest: string;
}

/**
 * A command as a trace line holds it: conversations as their summary, `purpose` and
 * `deadlines` left out when they are the defaults, a compaction's report written flat.
 */
export type TraceCommand =
  | Exclude<Command, SendRequest | Compact | ReplaceConversation>
  | (Omit<SendRequest, "conversation" | "purpose" | "deadlines"> & {
      conversation: SnapshotSummary;
      purpose?: RequestPurpose;
      deadlines?: StreamDeadlines;
    })
  | (Omit<Compact, "conversation"> & { conversation: SnapshotSummary })
  | ({ type: "replace_conversation"; conversation: SnapshotSummary } & CompactionReport);

/** The first line of a trace (`AgentMachine.traceJsonl()`): what rebuilds the machine. */
export interface TraceHeader {
  /** Always `rebound-trace`. */
  format: "rebound-trace";
  /** The format version. */
  version: number;
  /** The jitter seed (a JSON number: past 2^53 it loses precision in `JSON.parse`). */
  seed: number;
  /** The machine's configuration. */
  config: MachineConfig;
  /** The conversation the machine started from, when it continued one. */
  initial_conversation?: Message[];
  /** Free-form facts about the run (driver, scenario), never secrets. */
  meta?: { [key: string]: string };
}

/** Every further line of a trace: an event at a time and the commands it produced. */
export interface TraceStep {
  /** When the event was handled (ms, the caller's clock). */
  t_ms: number;
  /** The event. */
  event: Event;
  /** The commands it produced, in order. */
  commands: TraceCommand[];
}
