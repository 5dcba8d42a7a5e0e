//! The names rebound's telemetry uses: span names, attribute keys, event names, metric names
//! and the values of `error.type`, in one place so that dashboards, tests and
//! docs/telemetry.md agree with the code.
//!
//! The `gen_ai.*`, `error.type` and `http.*` names are the OpenTelemetry semantic
//! conventions' (GenAI conventions, status "development": `docs/gen-ai/gen-ai-spans.md`,
//! `gen-ai-agent-spans.md` and `gen-ai-metrics.md` of open-telemetry/semantic-conventions at
//! commit 7b0c0fe1e6d7b7fc857ba496aad7919e368453e7, the last before they moved to their own
//! repository, semantic-conventions-genai). The `rebound.*` names are rebound's own, for
//! what the conventions do not cover: attempts, retries, fallbacks, compactions and the
//! retry budget.

/// The `tracing` target of every span and event of the runner: filter on it
/// (`rebound=info`) to keep or drop them.
pub const TRACING_TARGET: &str = "rebound";

// Operations (`gen_ai.operation.name`), which also start the span names.

/// `gen_ai.operation.name` of a run: the span `invoke_agent` (or `invoke_agent {agent}`).
pub const INVOKE_AGENT: &str = "invoke_agent";
/// `gen_ai.operation.name` of a model call: the span `chat {gen_ai.request.model}`.
pub const CHAT: &str = "chat";
/// `gen_ai.operation.name` of a tool call: the span `execute_tool {gen_ai.tool.name}`.
pub const EXECUTE_TOOL: &str = "execute_tool";
/// The name of the span of one provider attempt inside a `chat` span (rebound's own).
pub const ATTEMPT: &str = "attempt";

// GenAI attributes.

/// The operation: [`INVOKE_AGENT`], [`CHAT`] or [`EXECUTE_TOOL`].
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// The provider: `anthropic` or `openai` (OpenAI-compatible servers included).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The model asked for.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// The model that answered, as the provider names it.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// The provider's id of the response (`msg_…`, `chatcmpl-…`, `resp_…`).
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// Why the model stopped, in Anthropic's words (`end_turn`, `tool_use`, `max_tokens`, …).
/// The conventions ask for a string array; `tracing` has none, so the runner records the one
/// reason as a string, and the `rebound` binary's exporter sends it as a one-element array.
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Prompt tokens, cached tokens included (as the conventions ask, for Anthropic too).
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Completion tokens.
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Prompt tokens read from the provider's cache.
pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// Prompt tokens written to the provider's cache (Anthropic).
pub const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: &str =
    "gen_ai.usage.cache_creation.input_tokens";
/// The agent's name, when the embedder gave one.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// The conversation's id (a session), when the embedder gave one.
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// The conversation sent, as JSON in the conventions' message format: only with content
/// capture on.
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The answer, as JSON in the conventions' message format: only with content capture on.
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// The tool called.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// The model's id of the tool call.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function`: every rebound tool is executed by the agent, on the client side.
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// The tool call's input, as JSON: only with content capture on.
pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// The tool call's output text: only with content capture on.
pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// `input` or `output`, on `gen_ai.client.token.usage`.
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";

// General attributes.

/// A low-cardinality name of what went wrong (see the `ERROR_*` values and
/// [`FailureKind::name`](rebound_core::FailureKind::name)).
pub const ERROR_TYPE: &str = "error.type";
/// The HTTP status of a failed attempt, when the server answered.
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";

// rebound's attributes.

/// The jitter seed of the run, to reproduce it (`Runner::seed`).
pub const REBOUND_SEED: &str = "rebound.seed";
/// The index of the target in the fallback chain.
pub const REBOUND_TARGET: &str = "rebound.target";
/// The 1-based attempt number on the target.
pub const REBOUND_ATTEMPT: &str = "rebound.attempt";
/// Attempts made in a `chat` span.
pub const REBOUND_ATTEMPTS: &str = "rebound.attempts";
/// Attempts allowed per request on the target.
pub const REBOUND_MAX_ATTEMPTS: &str = "rebound.max_attempts";
/// What a request is for: `turn`, or `summary` (a compaction's summary).
pub const REBOUND_REQUEST_PURPOSE: &str = "rebound.request.purpose";
/// The provider's own error type (`overloaded_error`, `rate_limit_exceeded`, …).
pub const REBOUND_PROVIDER_ERROR_TYPE: &str = "rebound.provider.error_type";
/// The provider's request id (`request-id`, `x-request-id`), for support tickets.
pub const REBOUND_PROVIDER_REQUEST_ID: &str = "rebound.provider.request_id";
/// The transport fault of a failed attempt (`connect`, `reset`, `stream_cut`, …).
pub const REBOUND_TRANSPORT_FAULT: &str = "rebound.transport.fault";
/// How long the runner waits before the next attempt, in ms.
pub const REBOUND_RETRY_DELAY_MS: &str = "rebound.retry.delay_ms";
/// Why that long: [`RETRY_SERVER_HINT`] or [`RETRY_BACKOFF`].
pub const REBOUND_RETRY_REASON: &str = "rebound.retry.reason";
/// The server's delay hint (`retry-after`), in ms.
pub const REBOUND_RETRY_AFTER_MS: &str = "rebound.retry.server_hint_ms";
/// The target given up, by label (`anthropic:claude-sonnet-4-5`).
pub const REBOUND_FALLBACK_FROM: &str = "rebound.fallback.from";
/// The target taking over, by label.
pub const REBOUND_FALLBACK_TO: &str = "rebound.fallback.to";
/// Why a compaction ran: `overflow` or `threshold`.
pub const REBOUND_COMPACTION_REASON: &str = "rebound.compaction.reason";
/// How: `summary` or `elide`.
pub const REBOUND_COMPACTION_METHOD: &str = "rebound.compaction.method";
/// Messages before a compaction.
pub const REBOUND_COMPACTION_BEFORE_MESSAGES: &str = "rebound.compaction.before_messages";
/// Messages after it.
pub const REBOUND_COMPACTION_AFTER_MESSAGES: &str = "rebound.compaction.after_messages";
/// Approximate conversation bytes before.
pub const REBOUND_COMPACTION_BEFORE_BYTES: &str = "rebound.compaction.before_bytes";
/// Approximate conversation bytes after.
pub const REBOUND_COMPACTION_AFTER_BYTES: &str = "rebound.compaction.after_bytes";
/// Estimated tokens before.
pub const REBOUND_COMPACTION_BEFORE_TOKENS: &str = "rebound.compaction.before_tokens";
/// Estimated tokens after.
pub const REBOUND_COMPACTION_AFTER_TOKENS: &str = "rebound.compaction.after_tokens";
/// What a budget permit was for: `first_attempt`, `hinted` or `charged`.
pub const REBOUND_BUDGET_PERMIT: &str = "rebound.budget.permit";
/// The budget's answer: `granted`, `wait_until` or `denied`.
pub const REBOUND_BUDGET_DECISION: &str = "rebound.budget.decision";
/// How long the permit was waited for, in ms.
pub const REBOUND_BUDGET_WAIT_MS: &str = "rebound.budget.wait_ms";
/// Tokens left in the budget after the decision, when the store can tell.
pub const REBOUND_BUDGET_TOKENS: &str = "rebound.budget.tokens";
/// Until when a rate limit holds every agent of the budget, in ms on the budget's clock.
pub const REBOUND_BUDGET_UNTIL_MS: &str = "rebound.budget.until_ms";
/// Why a run finished (`end_turn`, `max_turns`, …).
pub const REBOUND_FINISH_REASON: &str = "rebound.finish_reason";
/// Assistant messages appended by the run.
pub const REBOUND_TURNS: &str = "rebound.turns";
/// Provider requests sent by the run (every attempt).
pub const REBOUND_REQUESTS: &str = "rebound.requests";
/// Retries sent by the run (`RunTally::retries`).
pub const REBOUND_RETRIES: &str = "rebound.retries";

// Events (span events: a `tracing` event whose message is the name).

/// On a `chat` span: the machine retries after a failed attempt.
pub const EVENT_RETRY: &str = "retry";
/// On the `invoke_agent` span: the next request goes to another target.
pub const EVENT_FALLBACK: &str = "fallback";
/// On the `invoke_agent` span: the conversation was compacted.
pub const EVENT_COMPACTION: &str = "compaction";
/// On the span the permit was asked in: the retry budget answered after a wait, or for a
/// retry, or refused.
pub const EVENT_BUDGET_PERMIT: &str = "budget.permit";
/// On the `chat` span: a 429's delay now holds every agent sharing the budget.
pub const EVENT_BUDGET_RATE_LIMITED: &str = "budget.rate_limited";
/// On an `attempt` span: the partial text streamed so far was discarded.
pub const EVENT_STREAM_RESET: &str = "stream.reset";

// Values.

/// [`REBOUND_RETRY_REASON`]: the server's `retry-after` set the delay.
pub const RETRY_SERVER_HINT: &str = "server_hint";
/// [`REBOUND_RETRY_REASON`]: the retry policy's jittered exponential backoff set it.
pub const RETRY_BACKOFF: &str = "backoff";
/// [`ERROR_TYPE`] of a tool call that failed in a way the model reads (an error result).
pub const ERROR_TOOL: &str = "tool_error";
/// [`ERROR_TYPE`] of a tool call the tool set refused before running it: no such tool.
pub const ERROR_UNKNOWN_TOOL: &str = "unknown_tool";
/// [`ERROR_TYPE`] of a tool call whose input broke its tool's schema.
pub const ERROR_INVALID_ARGUMENTS: &str = "invalid_arguments";
/// [`ERROR_TYPE`] of anything that ended because the run was canceled.
pub const ERROR_CANCELED: &str = "canceled";
/// [`ERROR_TYPE`] the conventions reserve for "none of the above".
pub const ERROR_OTHER: &str = "_OTHER";

// Metrics.

/// Histogram, seconds: one `chat` call (retries included) or one run (`invoke_agent`).
pub const METRIC_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// Histogram, `{token}`: tokens of each answered `chat` call, by `gen_ai.token.type`.
pub const METRIC_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// Counter, `{retry}`: retries sent, by `error.type` and `rebound.retry.reason`.
pub const METRIC_RETRIES: &str = "rebound.retries";
/// Counter, `{fallback}`: moves to another target, by `error.type`.
pub const METRIC_FALLBACKS: &str = "rebound.fallbacks";
/// Counter, `{compaction}`: compactions, by reason and method.
pub const METRIC_COMPACTIONS: &str = "rebound.compactions";
/// Counter, `{call}`: tool calls, by `gen_ai.tool.name` and `error.type` when failed.
pub const METRIC_TOOL_CALLS: &str = "rebound.tool.calls";
/// Histogram, seconds: how long permits of the retry budget were waited for, by decision.
pub const METRIC_BUDGET_WAIT: &str = "rebound.budget.wait.duration";
/// Up-down counter, `{waiter}`: runners of this process waiting for a budget permit now.
pub const METRIC_BUDGET_WAITERS: &str = "rebound.budget.waiters";
/// Gauge, `{token}`: tokens in the retry budget, after each decision (stores that can tell).
pub const METRIC_BUDGET_TOKENS: &str = "rebound.budget.tokens";

/// The bucket boundaries the conventions give for `gen_ai.client.operation.duration`, s.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// The bucket boundaries the conventions give for `gen_ai.client.token.usage`.
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];

/// The environment variable the conventions' instrumentations read to record message
/// content (`true` to opt in). The library never reads it; the `rebound` binary does.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
