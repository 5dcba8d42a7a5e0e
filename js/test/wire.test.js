// The wire helpers: request bodies for every format, the stream decoder on the byte-for-byte
// captures of core/fixtures/streams (in any split), whole responses, the classification of
// the captured error bodies of core/fixtures/errors, typed errors for garbage, secrets masked.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import fc from "fast-check";

import {
  AgentMachine,
  ConfigError,
  ReboundError,
  RequestError,
  Snapshot,
  StreamDecoder,
  StreamError,
  classifyHttp,
  classifyTransport,
  compact,
  parseResponse,
  providerKinds,
  requestBody,
  requestPath,
  userText,
} from "../lib/index.js";

const FIXTURES = fileURLToPath(new URL("../../core/fixtures/", import.meta.url));

/** The bytes of a fixture file. */
function fixture(path) {
  return new Uint8Array(readFileSync(FIXTURES + path));
}

const READ_TOOL = {
  name: "read",
  description: "Reads a file.",
  input_schema: { type: "object", properties: { path: { type: "string" } } },
};

/** The `send_request` of a machine that was told `text`, and the machine. */
function firstSend(text = "Read README.md") {
  const machine = new AgentMachine({ config: { tools: [READ_TOOL] } });
  machine.handle(0, userText(text));
  const send = machine.drain().find((a) => a.type === "send_request");
  assert.ok(send, "the machine sends a request");
  return { machine, send };
}

/** `data` cut into pieces of `size` bytes. */
function chunks(data, size) {
  const out = [];
  for (let i = 0; i < data.length; i += size) out.push(data.subarray(i, i + size));
  return out;
}

/** The thrown error of `f`, which must throw. */
function thrown(f) {
  try {
    f();
  } catch (e) {
    return e;
  }
  assert.fail("expected a throw");
}

// --- AWS event-stream framing, for Bedrock (its fixtures are the logged frames' headers and
// payloads, as core's tests frame them with `eventstream::encode_frame`) ---

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** One event-stream message: string headers, then the payload text. */
function frame(headers, payload) {
  const enc = new TextEncoder();
  const head = [];
  for (const [name, value] of headers) {
    const n = enc.encode(name);
    const v = enc.encode(value);
    head.push(n.length, ...n, 7, v.length >> 8, v.length & 0xff, ...v);
  }
  const body = enc.encode(payload);
  const total = 12 + head.length + body.length + 4;
  const out = new Uint8Array(total);
  const view = new DataView(out.buffer);
  view.setUint32(0, total);
  view.setUint32(4, head.length);
  view.setUint32(8, crc32(out.subarray(0, 8)));
  out.set(head, 12);
  out.set(body, 12 + head.length);
  view.setUint32(total - 4, crc32(out.subarray(0, total - 4)));
  return out;
}

function event(type, payload) {
  return frame(
    [
      [":event-type", type],
      [":content-type", "application/json"],
      [":message-type", "event"],
    ],
    payload,
  );
}

function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A Bedrock fixture's frames (one JSON object a line: headers and payload). */
function bedrockFrames(path) {
  const text = new TextDecoder().decode(fixture(path));
  return concat(
    text
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => {
        const v = JSON.parse(l);
        return frame(v.headers, v.payload);
      }),
  );
}

/** `messageStop` and `metadata` as the service writes them, ending a Bedrock stream. */
const BEDROCK_ENDING = concat([
  event("contentBlockStop", '{"contentBlockIndex":0,"p":"abc"}'),
  event("messageStop", '{"p":"abcdefgh","stopReason":"end_turn"}'),
  event(
    "metadata",
    '{"metrics":{"latencyMs":512},"p":"abc","usage":{"inputTokens":12,"outputTokens":9,"totalTokens":21}}',
  ),
]);

// --- streams ---

const STREAMS = [
  ["anthropic", "streams/anthropic/basic_response.sse"],
  ["anthropic", "streams/anthropic/tool_use_response.sse"],
  ["openai", "streams/openai/text_with_usage.sse"],
  ["openai", "streams/openai/parallel_tool_calls.sse"],
  ["openai_responses", "streams/responses/text_stream.sse"],
  ["openai_responses", "streams/responses/reasoning_stream.sse"],
  ["gemini", "streams/gemini/text_stream.sse"],
  ["gemini", "streams/gemini/function_call_signed.sse"],
];

/** The bytes of a whole stream, for every format (Bedrock's framed and completed). */
function streamBytes(provider, path) {
  return provider === "bedrock" ? concat([bedrockFrames(path), BEDROCK_ENDING]) : fixture(path);
}

const ALL_STREAMS = [...STREAMS, ["bedrock", "streams/bedrock/text_prefix_js_sdk.jsonl"]];

for (const [provider, path] of ALL_STREAMS) {
  test(`a captured ${provider} stream (${path}) decodes the same in any split`, () => {
    const data = streamBytes(provider, path);
    const whole = new StreamDecoder(provider);
    const wholeDeltas = whole.feed(data);
    const expected = whole.finish();
    assert.equal(expected.message.role, "assistant");
    for (const size of [1, 7, 64]) {
      const d = new StreamDecoder(provider);
      const deltas = chunks(data, size).flatMap((c) => d.feed(c));
      assert.deepEqual(d.finish(), expected, `split every ${size} bytes`);
      const text = (ds) => ds.filter((x) => x.type === "text").map((x) => x.text).join("");
      assert.equal(text(deltas), text(wholeDeltas));
    }
    // The text shown is the text assembled.
    const shown = wholeDeltas.filter((x) => x.type === "text").map((x) => x.text).join("");
    const assembled = expected.message.content
      .filter((b) => b.type === "text")
      .map((b) => b.text)
      .join("");
    assert.equal(shown, assembled);
    // What the decoder assembled is what the machine takes.
    const { machine, send } = firstSend();
    assert.equal(
      machine.handle(1, { type: "provider_succeeded", request: send.request, response: expected }),
      "accepted",
    );
  });
}

test("a stream split at every byte boundary decodes to the same response", () => {
  const data = fixture("streams/anthropic/tool_use_response.sse");
  const whole = new StreamDecoder("anthropic");
  whole.feed(data);
  const expected = whole.finish();
  for (let cut = 0; cut <= data.length; cut++) {
    const d = new StreamDecoder("anthropic");
    d.feed(data.subarray(0, cut));
    d.feed(data.subarray(cut));
    assert.deepEqual(d.finish(), expected, `cut at byte ${cut}`);
  }
  assert.equal(expected.stop_reason, "tool_use");
  const call = expected.message.content.find((b) => b.type === "tool_use");
  assert.ok(call && typeof call.input === "object");
});

test("a Bedrock stream split at every byte boundary decodes to the same response", () => {
  const data = concat([bedrockFrames("streams/bedrock/text_prefix_botocore_log.jsonl"), BEDROCK_ENDING]);
  const whole = new StreamDecoder("bedrock");
  whole.feed(data);
  const expected = whole.finish();
  assert.equal(expected.message.content[0].text, "I see");
  for (let cut = 0; cut <= data.length; cut++) {
    const d = new StreamDecoder("bedrock");
    d.feed(data.subarray(0, cut));
    d.feed(data.subarray(cut));
    assert.deepEqual(d.finish(), expected, `cut at byte ${cut}`);
  }
});

test("a logged Bedrock prefix shows its text and reads as a cut stream", () => {
  const d = new StreamDecoder("bedrock");
  const deltas = d.feed(bedrockFrames("streams/bedrock/text_prefix_botocore_log.jsonl"));
  assert.deepEqual(deltas, [
    { type: "text", index: 0, text: "I" },
    { type: "text", index: 0, text: " see" },
  ]);
  assert.equal(d.isComplete, false);
  const e = thrown(() => d.finish());
  assert.ok(e instanceof StreamError);
  assert.equal(e.failure.transport, "stream_cut");
});

test("a stream may be fed strings, other views and ArrayBuffers", () => {
  const data = fixture("streams/openai/text_with_usage.sse");
  const text = new TextDecoder().decode(data);
  const a = new StreamDecoder("openai");
  a.feed(text);
  const b = new StreamDecoder("openai");
  b.feed(new DataView(data.buffer, data.byteOffset, data.byteLength));
  const c = new StreamDecoder("openai");
  c.feed(data.slice().buffer);
  assert.deepEqual(a.finish(), b.finish());
  assert.deepEqual(c.finish(), parseStream("openai", data));
  assert.throws(() => new StreamDecoder("openai").feed(42), TypeError);
});

function parseStream(provider, data) {
  const d = new StreamDecoder(provider);
  d.feed(data);
  return d.finish();
}

test("a cut stream is a retryable failure the machine retries", () => {
  const data = fixture("streams/anthropic/basic_response.sse");
  const d = new StreamDecoder("anthropic");
  d.feed(data.subarray(0, data.length >> 1));
  assert.equal(d.isComplete, false);
  const e = thrown(() => d.finish());
  assert.ok(e instanceof StreamError && e instanceof ReboundError);
  assert.equal(e.kind, "stream");
  assert.equal(e.failure.kind, "stream_malformed");
  assert.equal(e.failure.transport, "stream_cut");
  const { machine, send } = firstSend();
  machine.handle(1, { type: "provider_failed", request: send.request, failure: e.failure });
  assert.deepEqual(
    machine.drain().map((a) => a.type),
    ["notify_retry", "sleep"],
  );
});

test("progress is content, not bytes", () => {
  const text = new TextDecoder().decode(fixture("streams/anthropic/basic_response.sse"));
  const events = text.split("\n\n").filter((x) => x.trim()).map((x) => x + "\n\n");
  const d = new StreamDecoder("anthropic");
  const seen = {};
  for (const ev of events) {
    d.feed(ev);
    (seen[ev.split("\n")[0]] ??= []).push(d.progressed);
  }
  assert.deepEqual(seen["event: ping"], [false]);
  assert.deepEqual(seen["event: message_start"], [false]);
  assert.deepEqual(seen["event: content_block_start"], [false]);
  assert.ok(seen["event: content_block_delta"].every(Boolean));
  d.feed("");
  assert.equal(d.progressed, false);
});

for (const garbage of [
  new Uint8Array([0, 0xff, 0xfe, 0x20, 0x67]),
  "data: {not json}\n\n",
  "<html>502 Bad Gateway</html>\n\n",
  "data: " + "x".repeat(10),
]) {
  test(`bytes that are no stream throw a StreamError with a failure (${JSON.stringify(String(garbage)).slice(0, 30)})`, () => {
    const d = new StreamDecoder("openai");
    const e = thrown(() => {
      d.feed(garbage);
      d.finish();
    });
    assert.ok(e instanceof StreamError, `${e}`);
    assert.ok(["stream_malformed", "server_error"].includes(e.failure.kind), e.failure.kind);
    assert.ok(e.message.length > 0);
  });
}

test("a corrupt Bedrock frame is a typed stream failure", () => {
  const d = new StreamDecoder("bedrock");
  const bad = new Uint8Array([0, 0, 0, 0x10, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0]);
  const e = thrown(() => d.feed(bad));
  assert.ok(e instanceof StreamError);
  assert.equal(e.failure.kind, "stream_malformed");
});

test("an error event in a stream is classified", () => {
  const d = new StreamDecoder("anthropic");
  const e = thrown(() => {
    d.feed(fixture("streams/anthropic/error_event_documented.sse"));
    d.finish();
  });
  assert.ok(e instanceof StreamError);
  assert.equal(e.failure.kind, "unavailable");
  for (const [path, kind] of [
    ["streams/responses/failed_documented.sse", "server_error"],
    ["streams/responses/error_documented.sse", null],
  ]) {
    const r = new StreamDecoder("openai_responses");
    const err = thrown(() => {
      r.feed(fixture(path));
      r.finish();
    });
    assert.ok(err instanceof StreamError, path);
    if (kind) assert.equal(err.failure.kind, kind, path);
  }
});

test("a failed decoder keeps failing, a finished one refuses more bytes", () => {
  const d = new StreamDecoder("openai");
  const first = thrown(() => d.feed("data: {not json}\n\n"));
  const again = thrown(() => d.feed("data: [DONE]\n\n"));
  assert.deepEqual(again.failure, first.failure);
  const done = new StreamDecoder("openai");
  done.feed(fixture("streams/openai/text_with_usage.sse"));
  assert.ok(done.isComplete);
  done.finish();
  const e = thrown(() => done.feed("data: [DONE]\n\n"));
  assert.ok(e instanceof ReboundError && !(e instanceof StreamError));
  assert.match(e.message, /finished/);
  assert.throws(() => done.finish(), /finished/);
  // Freed, it says so.
  done.free();
  done.free();
  const freed = thrown(() => done.feed("data: [DONE]\n\n"));
  assert.ok(freed instanceof ReboundError && /freed/.test(freed.message));
  assert.ok(thrown(() => done.isComplete) instanceof ReboundError);
});

test("a non-streamed response parses, an error body is a StreamError", () => {
  const r = parseResponse("openai_responses", fixture("streams/responses/output_text_response.json"));
  assert.equal(r.message.role, "assistant");
  const f = parseResponse("openai_responses", fixture("streams/responses/function_call_response.json"));
  assert.equal(f.stop_reason, "tool_use");
  const e = thrown(() => parseResponse("anthropic", fixture("errors/anthropic_overloaded_529.json")));
  assert.ok(e instanceof StreamError);
  assert.equal(e.failure.kind, "unavailable");
  const g = thrown(() => parseResponse("gemini", '{"promptFeedback": {"blockReason": "SAFETY"}}'));
  assert.equal(g.failure.kind, "content_blocked");
  assert.ok(thrown(() => parseResponse("openai", "not json")) instanceof StreamError);
});

// --- classification ---

const ERRORS = [
  ["anthropic", 529, "errors/anthropic_overloaded_529.json", "unavailable"],
  ["anthropic", 400, "errors/anthropic_prompt_too_long_400.json", "context_overflow"],
  ["anthropic", 401, "errors/anthropic_authentication_401.json", "auth_failed"],
  ["anthropic", 429, "errors/anthropic_rate_limit_429.json", "rate_limited"],
  ["openai", 429, "errors/openai_insufficient_quota_429.json", "quota_exhausted"],
  ["openai", 400, "errors/openai_context_length_exceeded_400.json", "context_overflow"],
  ["openai", 401, "errors/openai_invalid_api_key_401.json", "auth_failed"],
  ["openai", 503, "errors/openai_overloaded_503.json", "unavailable"],
  ["openai", 502, "errors/nginx_bad_gateway_502.html", "server_error"],
  ["openai", 400, "errors/vllm_context_length_400.json", "context_overflow"],
  ["gemini", 400, "errors/gemini_input_token_count_400.json", "context_overflow"],
  ["gemini", 429, "errors/gemini_quota_per_minute_quoted_429.json", "rate_limited"],
  ["bedrock", 400, "errors/bedrock_input_too_long_400.json", "context_overflow"],
];

for (const [provider, status, path, kind] of ERRORS) {
  test(`the captured error ${path} is ${kind}`, () => {
    const f = classifyHttp(provider, status, {}, fixture(path));
    assert.equal(f.kind, kind);
    assert.equal(f.status, status);
  });
}

test("server hints and request ids come from the headers, in any form", () => {
  const body = fixture("errors/anthropic_rate_limit_429.json");
  const f = classifyHttp("anthropic", 429, { "retry-after": "7", "request-id": "req_abc" }, body);
  assert.equal(f.kind, "rate_limited");
  assert.equal(f.retry_after_ms, 7000);
  assert.equal(f.request_id, "req_abc");
  assert.equal(classifyHttp("anthropic", 429, [["Retry-After-Ms", "1500"]], body).retry_after_ms, 1500);
  const fetched = new Headers({ "retry-after": "2" });
  assert.equal(classifyHttp("openai", 429, fetched, "{}").retry_after_ms, 2000);
  assert.equal(classifyHttp("openai", 429, new Map([["retry-after", "3"]]), "{}").retry_after_ms, 3000);
  assert.equal(classifyHttp("openai", 500, { "x-should-retry": "false" }).should_retry, false);
  const date = classifyHttp(
    "openai",
    503,
    { "retry-after": "Wed, 21 Oct 2015 07:28:10 GMT" },
    null,
    { nowUnixMs: 1445412480000 },
  );
  assert.equal(date.retry_after_ms, 10_000);
  const bedrock = classifyHttp(
    "bedrock",
    429,
    { "x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/" },
    '{"message": "Too many requests, please wait before trying again."}',
  );
  assert.equal(bedrock.kind, "rate_limited");
  assert.equal(bedrock.error_type, "ThrottlingException");
});

for (const [options, transport, kind] of [
  [{ connectFailed: true }, "connect", "transport"],
  [{}, "dns", "transport"],
  [{ timedOut: true }, "timeout", "transport"],
  [{ timedOut: true, responseStarted: true }, "idle_timeout", "stream_malformed"],
  [{ responseStarted: true }, "stream_cut", "stream_malformed"],
]) {
  test(`a transport error ${JSON.stringify(options)} is ${transport}`, () => {
    const text =
      Object.keys(options).length === 0 ? "dns error: failed to lookup address" : "the connection broke";
    const f = classifyTransport(text, options);
    assert.deepEqual([f.transport, f.kind], [transport, kind]);
  });
}

test("bad classifier input throws typed errors", () => {
  assert.ok(thrown(() => classifyHttp("azure", 500, {}, "")) instanceof ConfigError);
  assert.throws(() => classifyHttp("openai", 500, 42, ""), TypeError);
  assert.throws(() => classifyHttp("openai", 500, { a: 1 }, ""), TypeError);
  assert.ok(thrown(() => classifyHttp("openai", 70_000, {}, "")) instanceof ReboundError);
  assert.ok(thrown(() => classifyHttp("openai", -1, {}, "")) instanceof ReboundError);
  assert.ok(thrown(() => classifyHttp("openai", 1.5, {}, "")) instanceof ReboundError);
  assert.ok(thrown(() => classifyHttp("openai", 500, {}, "", { nowUnixMs: NaN })) instanceof ReboundError);
  assert.ok(thrown(() => new StreamDecoder("nobody")) instanceof ConfigError);
  assert.ok(thrown(() => parseResponse("nobody", "{}")) instanceof ConfigError);
  assert.ok(thrown(() => requestPath("nobody")) instanceof ConfigError);
});

test("secrets are masked in every failure a helper returns or throws", () => {
  const key = "sk-ant-secret-0123456789";
  const echoed = JSON.stringify({ type: "error", error: { type: "authentication_error", message: `invalid x-api-key ${key}` } });
  const f = classifyHttp("anthropic", 401, { "request-id": "req_1" }, echoed, { secrets: [key] });
  assert.equal(f.kind, "auth_failed");
  assert.ok(!JSON.stringify(f).includes(key), JSON.stringify(f));
  assert.match(f.message, /\*\*\*/);
  const token = "tok-very-private-42";
  const t = classifyTransport(`connect to https://proxy/?token=${token} failed`, {
    connectFailed: true,
    secrets: token,
  });
  assert.ok(!JSON.stringify(t).includes(token));
  const streamed = `event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded ${token}"}}\n\n`;
  const d = new StreamDecoder("anthropic", { secrets: [token] });
  const e = thrown(() => d.feed(streamed));
  assert.ok(e instanceof StreamError);
  assert.ok(!e.message.includes(token) && !JSON.stringify(e.failure).includes(token));
  const p = thrown(() =>
    parseResponse("anthropic", `{"type":"error","error":{"type":"overloaded_error","message":"no ${token}"}}`, {
      secrets: [token],
    }),
  );
  assert.ok(!JSON.stringify(p.failure).includes(token));
  // A secret too short to mask without masking ordinary words is refused.
  assert.ok(thrown(() => new StreamDecoder("anthropic", { secrets: ["abc"] })) instanceof ConfigError);
  assert.ok(thrown(() => classifyTransport("x", { secrets: [1] })) instanceof ConfigError);
});

// --- request bodies ---

test("the provider kinds are core's five wire formats", () => {
  assert.deepEqual(providerKinds(), ["anthropic", "openai", "openai_responses", "gemini", "bedrock"]);
});

for (const provider of ["anthropic", "openai", "openai_responses"]) {
  test(`a ${provider} request body is built from a command's snapshot`, () => {
    const { send } = firstSend();
    const text = requestBody(provider, send.conversation, "some-model", {
      maxTokens: 1024,
      system: "Be brief.",
      tools: [READ_TOOL],
    });
    assert.equal(typeof text, "string");
    const body = JSON.parse(text);
    assert.equal(body.model, "some-model");
    assert.equal(body.stream, true);
    assert.ok(text.includes("Read README.md"));
    assert.ok(text.includes("Be brief."));
    assert.ok(JSON.stringify(body.tools).includes("read"));
    const again = requestBody(provider, send.conversation.messages(), "some-model", {
      maxTokens: 1024,
      system: "Be brief.",
      tools: [READ_TOOL],
    });
    assert.equal(again, text);
    assert.equal(JSON.parse(requestBody(provider, send.conversation, "m", { stream: false })).stream ?? false, false);
    assert.ok(requestPath(provider).startsWith("/"));
  });
}

test("the paths are each API's", () => {
  assert.equal(requestPath("anthropic"), "/v1/messages");
  assert.equal(requestPath("openai"), "/chat/completions");
  assert.equal(requestPath("openai_responses"), "/responses");
});

test("gemini requests name the model in the path", () => {
  const { send } = firstSend();
  const body = JSON.parse(
    requestBody("gemini", send.conversation, "gemini-2.5-flash", {
      maxTokens: 1024,
      system: "Be brief.",
      tools: [READ_TOOL],
    }),
  );
  assert.deepEqual(body.contents[0], { role: "user", parts: [{ text: "Read README.md" }] });
  assert.deepEqual(body.systemInstruction, { parts: [{ text: "Be brief." }] });
  assert.deepEqual(body.generationConfig, { maxOutputTokens: 1024 });
  assert.equal(body.tools[0].functionDeclarations[0].name, "read");
  assert.equal(requestPath("gemini", "gemini-2.5-flash"), "/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
  assert.equal(requestPath("gemini", "gemini-2.5-flash", false), "/models/gemini-2.5-flash:generateContent");
  assert.ok(thrown(() => requestPath("gemini")) instanceof ConfigError);
  const chunk = {
    candidates: [
      {
        content: { parts: [{ functionCall: { name: "read", args: { path: "README.md" } } }], role: "model" },
        finishReason: "STOP",
        index: 0,
      },
    ],
    responseId: "r1",
  };
  const d = new StreamDecoder("gemini");
  d.feed(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
  const response = d.finish();
  assert.equal(response.stop_reason, "tool_use");
  assert.equal(response.message.content[0].id, "gc_r1_0");
});

test("bedrock requests are Converse bodies with the model in the path", () => {
  const convo = [{ role: "user", content: [{ type: "text", text: "hi" }] }];
  const body = JSON.parse(requestBody("bedrock", convo, "anthropic.claude-sonnet-4-5-20250929-v1:0", { maxTokens: 512 }));
  assert.deepEqual(body.messages, [{ role: "user", content: [{ text: "hi" }] }]);
  assert.deepEqual(body.inferenceConfig, { maxTokens: 512 });
  assert.equal(
    requestPath("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0"),
    "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream",
  );
  assert.ok(thrown(() => requestPath("bedrock")) instanceof ConfigError);
});

test("request options reach the body and bad ones are refused", () => {
  const convo = [{ role: "user", content: [{ type: "text", text: "hi" }] }];
  const body = JSON.parse(
    requestBody("openai", convo, "gpt-4o", {
      maxTokens: 100,
      tools: [READ_TOOL],
      options: { temperature: 0.5, tool_choice: "any" },
    }),
  );
  assert.equal(body.temperature, 0.5);
  assert.equal(body.tool_choice, "required");
  assert.ok(thrown(() => requestBody("openai", convo, "gpt-4o", { options: { temprature: 1 } })) instanceof ConfigError);
  assert.ok(
    thrown(() => requestBody("openai", convo, "gpt-4o", { options: { reasoning_effort: "huge" } })) instanceof ConfigError,
  );
  assert.ok(thrown(() => requestBody("openai", convo, "gpt-4o", { options: { tool_choice: "tool:" } })) instanceof ConfigError);
  assert.ok(
    thrown(() => requestBody("anthropic", convo, "claude", { options: { temperature: 1.5 } })) instanceof RequestError,
  );
  assert.ok(thrown(() => requestBody("openai", convo, "gpt-4o", { tools: [{ nope: 1 }] })) instanceof ConfigError);
  // Mistral takes nine-character tool ids.
  const withCall = [
    ...convo,
    { role: "assistant", content: [{ type: "tool_use", id: "functions.read:0", name: "read", input: {} }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "functions.read:0", content: [{ type: "text", text: "x" }] }] },
  ];
  const mistral = JSON.parse(requestBody("openai", withCall, "m", { baseUrl: "https://api.mistral.ai/v1" }));
  assert.match(mistral.messages[1].tool_calls[0].id, /^[A-Za-z0-9]{9}$/);
});

test("a conversation no request can be built from is a RequestError", () => {
  const e = thrown(() => requestBody("anthropic", [], "claude"));
  assert.ok(e instanceof RequestError);
  assert.match(e.message, /no message/);
  const unpaired = [
    { role: "user", content: [{ type: "text", text: "hi" }] },
    { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "read", input: {} }] },
    { role: "user", content: [{ type: "text", text: "no result" }] },
  ];
  assert.ok(thrown(() => requestBody("openai", unpaired, "gpt-4o")) instanceof RequestError);
  const refused = thrown(() => requestBody("anthropic", [{ role: "nobody" }], "m"));
  assert.ok(refused instanceof RequestError);
  assert.ok(!refused.message.startsWith("EventError"));
  const summary = Snapshot.fromSummary({ messages: 1, digest: "0000000000000001" });
  const s = thrown(() => requestBody("openai", summary, "gpt-4o"));
  assert.ok(s instanceof ReboundError);
  for (const maxTokens of [-1, 2 ** 70, 1.5, NaN]) {
    const m = thrown(() => requestBody("anthropic", [{ role: "user", content: [{ type: "text", text: "hi" }] }], "m", { maxTokens }));
    assert.ok(m instanceof RequestError, String(maxTokens));
    assert.match(m.message, /maxTokens must be/);
  }
  assert.ok(thrown(() => requestBody("anthropic", [], "m", { maxTokens: "9" })) instanceof RequestError);
  const cyclic = [];
  cyclic.push(cyclic);
  assert.ok(thrown(() => requestBody("anthropic", cyclic, "m")) instanceof RequestError);
});

test("compaction answers a compact command", () => {
  const big = "x".repeat(5000);
  const convo = [];
  for (let i = 0; i < 8; i++) {
    convo.push({ role: "user", content: [{ type: "text", text: `${i} ${big}` }] });
    convo.push({ role: "assistant", content: [{ type: "text", text: "ok" }] });
  }
  const result = compact(convo);
  assert.ok("Ok" in result);
  assert.ok(JSON.stringify(result.Ok).length < JSON.stringify(convo).length);
  assert.deepEqual(compact(Snapshot.of(convo)), result);
  const machine = new AgentMachine();
  assert.deepEqual(machine.compactDefault(convo), result);
  // The policy is the caller's: one that keeps more recent messages whole keeps more.
  const gentle = compact(convo, { keep_recent_messages: 8, elide_over_bytes: 1024, keep_head_bytes: 256, max_tail_result_bytes: 32768 });
  assert.ok("Ok" in gentle, JSON.stringify(gentle).slice(0, 200));
  assert.ok(JSON.stringify(gentle.Ok).length > JSON.stringify(result.Ok).length);
  assert.ok(thrown(() => compact(convo, { keep_recent: "all" })) instanceof ConfigError);
  assert.ok(thrown(() => compact([{ role: 3 }])) instanceof RequestError);
});

// --- garbage in: typed errors out, never a trap ---

/** Whether `e` is what bad input may throw: a typed error, or a TypeError of a wrong argument. */
function typedOrTypeError(e) {
  return e instanceof ReboundError || (e instanceof TypeError && !(e instanceof WebAssembly.RuntimeError));
}

/** Runs `f`; true when it returned or threw a typed error (or a TypeError), false for anything else. */
function onlyTypedErrors(f) {
  try {
    f();
    return true;
  } catch (e) {
    if (typedOrTypeError(e)) return true;
    throw e;
  }
}

const FC = { seed: 20261204, numRuns: 300 };

test("random bytes in any split never make a decoder throw anything but a StreamError", () => {
  fc.assert(
    fc.property(
      fc.constantFrom(...providerKinds()),
      fc.array(fc.uint8Array({ maxLength: 64 }), { maxLength: 8 }),
      (provider, pieces) => {
        const d = new StreamDecoder(provider);
        try {
          for (const piece of pieces) d.feed(piece);
          d.finish();
        } catch (e) {
          assert.ok(e instanceof StreamError, `${provider}: ${e}`);
          assert.equal(typeof e.failure.kind, "string");
        } finally {
          d.free();
        }
      },
    ),
    FC,
  );
});

test("a captured stream with bytes flipped fails as a StreamError or decodes", () => {
  const data = fixture("streams/anthropic/tool_use_response.sse");
  fc.assert(
    fc.property(fc.nat(data.length - 1), fc.integer({ min: 0, max: 255 }), (at, byte) => {
      const bent = data.slice();
      bent[at] = byte;
      const d = new StreamDecoder("anthropic");
      try {
        d.feed(bent);
        d.finish();
      } catch (e) {
        assert.ok(e instanceof StreamError, String(e));
      } finally {
        d.free();
      }
    }),
    FC,
  );
});

test("any arguments to the wire helpers get a typed error or a TypeError, never a trap", () => {
  const anything = fc.anything({ withBigInt: true, withNullPrototype: true, withTypedArray: true });
  const provider = fc.oneof(fc.constantFrom(...providerKinds()), anything);
  fc.assert(
    fc.property(provider, anything, anything, anything, anything, (p, a, b, c, d) => {
      onlyTypedErrors(() => requestBody(p, a, b, c));
      onlyTypedErrors(() => requestBody(p, [{ role: "user", content: [{ type: "text", text: "hi" }] }], "m", a));
      onlyTypedErrors(() => requestBody("openai", [{ role: "user", content: "hi" }], "m", { options: a, tools: b }));
      onlyTypedErrors(() => requestPath(p, a, b));
      onlyTypedErrors(() => parseResponse(p, a, b));
      onlyTypedErrors(() => new StreamDecoder(p, a).feed(b));
      onlyTypedErrors(() => classifyHttp(p, a, b, c, d));
      onlyTypedErrors(() => classifyHttp("openai", 429, a, b, c));
      onlyTypedErrors(() => classifyTransport(a, b));
      onlyTypedErrors(() => compact(a, b));
      return true;
    }),
    FC,
  );
});

test("any JSON as a conversation or options is a RequestError or a ConfigError", () => {
  const json = fc.jsonValue();
  fc.assert(
    fc.property(fc.constantFrom(...providerKinds()), json, json, (provider, conversation, options) => {
      try {
        const body = requestBody(provider, conversation, "m", { options });
        assert.equal(typeof JSON.parse(body), "object");
      } catch (e) {
        assert.ok(e instanceof RequestError || e instanceof ConfigError, String(e));
      }
    }),
    FC,
  );
});
