// Real runs that between them make every kind of action, event, failure and ending the
// machine has: what types.test.js checks the declared types against. Not a test itself.

import { drive, endTurn, failure, longConversation, READ_TOOL, toolUse } from "./drive.js";
import { userText } from "../../lib/index.js";

const NO_JITTER = { retry: { jitter: false } };

/** Each scenario: a name and a thunk that runs it (`drive`'s result). */
export const SCENARIOS = {
  "retry after retry-after, then a stream reset, then success": () =>
    drive({ config: NO_JITTER, record: true }, {
      answers: [
        { failure: failure("rate_limited", "slow down", { status: 429, retry_after_ms: 2000, request_id: "req_1" }) },
        { failure: failure("stream_malformed", "cut", { transport: "stream_cut" }), responding: true },
        {
          ...endTurn("hi"),
          id: "msg_1",
          model: "m-1",
          usage: { input_tokens: 9, output_tokens: 2, cache_read_input_tokens: 4, cache_creation_input_tokens: 1 },
        },
      ],
    }),

  "a tool call, a tool error, a bad tool input, then the answer": () =>
    drive({ config: { tools: [READ_TOOL] } }, {
      answers: [
        toolUse("call_1", "read", { path: "a.txt" }),
        {
          ...toolUse("call_2", "read"),
          input_problems: [{ tool_use_id: "call_2", kind: "invalid_json", raw: "{", detail: "EOF" }],
        },
        toolUse("call_3", "write", { path: "b.txt" }),
        endTurn("read it"),
      ],
      tool: (call) => (call.id === "call_1" ? { Err: { model: { message: "no such file" } } } : undefined),
    }),

  "thinking, redacted thinking, reasoning and images in the answer": () =>
    drive(
      { config: { targets: [{ provider: "anthropic", model: "claude-x", identity: "anthropic:abc", context_window: 200000 }] } },
      {
        answers: [
          {
            message: {
              role: "assistant",
              content: [
                { type: "thinking", thinking: "hmm", signature: "sig" },
                { type: "redacted_thinking", data: "xyz" },
                { type: "reasoning", item: { type: "reasoning", id: "rs_1", summary: [] } },
                { type: "text", text: "here" },
              ],
            },
            stop_reason: "end_turn",
            usage: { input_tokens: 5, output_tokens: 5 },
          },
        ],
      },
      {
        type: "user_message",
        content: [
          { type: "text", text: "look" },
          { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
          { type: "image", source: { type: "url", url: "https://example.com/a.png" } },
        ],
      },
    ),

  "an overflow compacted by elision, then success": () =>
    drive({ conversation: longConversation(), record: true }, {
      answers: [{ failure: failure("context_overflow", "prompt is too long", { status: 400, error_type: "invalid_request_error" }) }],
    }),

  "an overflow compacted by a summary": () =>
    drive({ conversation: longConversation(), config: { compact_with: "summary" } }, {
      answers: [{ failure: failure("context_overflow", "too long", { status: 400 }) }, endTurn("summary of it"), endTurn()],
    }),

  "an overflow whose compactor fails": () =>
    drive({ conversation: longConversation() }, {
      answers: [{ failure: failure("context_overflow", "too long", { status: 400 }) }],
      compact: () => ({ Err: "the summarizer timed out" }),
    }),

  "an overflow after compaction": () =>
    drive({ conversation: longConversation() }, {
      answers: [
        { failure: failure("context_overflow", "too long", { status: 400 }) },
        { failure: failure("context_overflow", "still too long", { status: 400 }) },
      ],
    }),

  "an overflow with compaction off": () =>
    drive({ config: { auto_compact: false } }, { answers: [{ failure: failure("context_overflow") }] }),

  "a fallback after quota exhaustion, then attempts exhausted": () =>
    drive(
      {
        config: {
          retry: { max_attempts: 2, jitter: false },
          targets: [
            { provider: "anthropic", model: "claude-a" },
            { provider: "openai", model: "gpt-b" },
          ],
        },
      },
      {
        answers: [
          { failure: failure("quota_exhausted", "out of credit", { status: 429, error_type: "insufficient_quota" }) },
          { failure: failure("unavailable", "overloaded", { status: 529 }) },
          { failure: failure("transport", "reset", { transport: "reset" }) },
        ],
      },
    ),

  "a retry-after too long": () =>
    drive({}, { answers: [{ failure: failure("rate_limited", "wait", { status: 429, retry_after_ms: 3_600_000 }) }] }),

  "a retry-after long with a fallback at hand, then an unknown model": () =>
    drive(
      { config: { targets: [{ provider: "gemini", model: "g" }, { provider: "bedrock", model: "b" }] } },
      {
        answers: [
          { failure: failure("rate_limited", "wait", { status: 429, retry_after_ms: 60_000 }) },
          { failure: failure("model_not_found", "no such model", { status: 404 }) },
        ],
      },
    ),

  "a budget's permits: granted, waited, denied": () =>
    drive({ config: { retry_budget: { max_wait_ms: 1000 }, retry: { jitter: false } } }, {
      answers: [
        { failure: failure("rate_limited", "wait", { status: 429, retry_after_ms: 500 }) },
        { failure: failure("server_error", "oops", { status: 500, should_retry: true }) },
      ],
      permits: ["granted", "granted", { wait_until: 5000 }, "denied"],
    }),

  "a budget's notes of success and answered retries": () =>
    drive({ config: { retry_budget: {}, stream: { idle_ms: 1000, progress_ms: 5000 } } }, {
      answers: [{ failure: failure("unavailable", "overloaded", { status: 503 }) }, endTurn()],
    }),

  "empty responses": () =>
    drive({ config: { retry: { max_empty_responses: 1, jitter: false } } }, {
      answers: [
        { failure: failure("empty_response", "nothing", { transport: "empty_message" }) },
        { failure: failure("empty_response", "nothing", { transport: "empty_message" }) },
      ],
    }),

  "reasoning rejected twice": () =>
    drive({}, {
      answers: [
        { failure: failure("reasoning_rejected", "invalid_encrypted_content", { status: 400 }) },
        { failure: failure("reasoning_rejected", "again", { status: 400 }) },
      ],
    }),

  "an authentication failure": () =>
    drive({}, { answers: [{ failure: failure("auth_failed", "bad key", { status: 401 }) }] }),

  "cancel during a backoff": () =>
    drive({}, {
      answers: [{ failure: failure("unavailable", "overloaded", { status: 529 }) }],
      interrupt: (action) => (action.type === "sleep" ? { type: "cancel" } : undefined),
    }),

  "a host failure during tools": () =>
    drive({ config: { tools: [READ_TOOL] } }, {
      answers: [toolUse("call_1", "read")],
      interrupt: (action) =>
        action.type === "run_tools"
          ? { type: "host_failed", failure: { kind: "session_store", message: "disk full" } }
          : undefined,
    }),

  "a whole tool batch failing for the host": () =>
    drive({ config: { tools: [READ_TOOL] } }, {
      answers: [toolUse("call_1", "read")],
      interrupt: (action) =>
        action.type === "run_tools"
          ? {
              type: "tools_finished",
              batch: action.batch,
              outcome: { whole_batch: { host: { kind: "out_of_memory", message: "oom" } } },
            }
          : undefined,
    }),

  "an empty user message": () =>
    drive({}, {}, { type: "user_message", content: [{ type: "text", text: "   " }] }),

  "max turns": () =>
    drive({ config: { tools: [READ_TOOL], max_turns: 1 } }, { answers: [toolUse("call_1", "read")] }),

  "resume with nothing to do": () =>
    drive({ conversation: longConversation(1) }, {}, { type: "resume" }),

  "resume answering an open tool call": () =>
    drive(
      {
        config: { tools: [READ_TOOL] },
        conversation: [
          { role: "user", content: "hi" },
          { role: "assistant", content: [{ type: "tool_use", id: "call_9", name: "read", input: {} }] },
        ],
      },
      {},
      { type: "resume" },
    ),

  "a corrupt conversation": () =>
    drive(
      {
        conversation: [
          { role: "user", content: [{ type: "tool_result", tool_use_id: "nobody", content: "orphan", is_error: true }] },
        ],
      },
      {},
      userText("go on"),
    ),

  "a plain run of one answer": () => drive({ seed: 7 }, {}, userText("hello")),
};
