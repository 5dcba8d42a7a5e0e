"""The fake provider server, checked by the official Anthropic, OpenAI (Chat Completions and
Responses) and Google Gen AI (Gemini API and Vertex AI) Python SDKs.

Each test starts the `fake_server` example (path in $REBOUND_FAKE_SERVER) with a scenario,
reads its address from the first line of its output and its request log from the JSON
lines after it, and talks to it with the real SDKs:

- normal streams (and non-streaming calls) parse into the expected text and tool calls;
- with retries off, each fault raises the SDK's own exception class;
- with the SDKs' default retries on, the log shows 429 and 529 retried, 401 not;
- what a reasoning model passes back (Responses reasoning items, Gemini thought signatures)
  is accepted unchanged and refused changed.
"""

import base64
import json
import os
import queue
import subprocess
import sys
import threading
import time
import unittest

import anthropic
import google.oauth2.credentials
import httpx2
import openai
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

SERVER = os.environ.get("REBOUND_FAKE_SERVER", "target/debug/examples/fake_server")
KEY = "sk-fake-test-key-0123456789"

ANSWER_TEXT = "Let me read the parser first."
ANSWER_CALL = {"name": "read", "input": {"path": "src/parse.rs"}}


def scenario(faults=(), answer=None, **extra):
    """A one-turn scenario: `faults` first, then `answer` (text + a tool call)."""
    answer = answer or {"text": ANSWER_TEXT, "tool_calls": [dict(ANSWER_CALL, id="toolu_01")]}
    return dict({"turns": [{"faults": list(faults), "answer": answer}]}, **extra)


class FakeServer:
    """The example binary as a subprocess, with its request log read in the background."""

    def __init__(self, scenario_json):
        self.proc = subprocess.Popen(
            [SERVER, "--scenario", json.dumps(scenario_json), "--api-key", KEY],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        first = self.proc.stdout.readline().strip()
        if not first.startswith("http://"):
            raise RuntimeError(f"fake server did not start: {first!r}")
        self.url = first
        self.lines = queue.Queue()
        self.log = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def requests(self, at_least=0, timeout=5.0):
        """The log so far; waits (bounded) until it has `at_least` entries."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                while True:
                    self.log.append(self.lines.get_nowait())
            except queue.Empty:
                pass
            if len(self.log) >= at_least or time.monotonic() > deadline:
                return list(self.log)
            time.sleep(0.02)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class ServerTest(unittest.TestCase):
    def serve(self, scenario_json):
        server = FakeServer(scenario_json)
        self.addCleanup(server.stop)
        return server

    def anthropic(self, server, **kw):
        kw.setdefault("max_retries", 0)
        return anthropic.Anthropic(api_key=KEY, base_url=server.url, timeout=10.0, **kw)

    def openai(self, server, **kw):
        kw.setdefault("max_retries", 0)
        return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", timeout=10.0, **kw)


MESSAGES = [{"role": "user", "content": "Fix the failing test."}]
TOOLS_A = [{"name": "read", "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
TOOLS_O = [{"type": "function", "function": {
    "name": "read", "description": "Read a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
TOOLS_R = [{"type": "function", "name": "read", "description": "Read a file.", "strict": False,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]
STATELESS = {"store": False, "include": ["reasoning.encrypted_content"]}


class AnthropicSdk(ServerTest):
    def stream(self, client):
        with client.messages.stream(model="claude-test", max_tokens=256,
                                    messages=MESSAGES, tools=TOOLS_A) as s:
            for _ in s:
                pass
            return s.get_final_message()

    def test_stream_parses_into_text_and_tool_call(self):
        server = self.serve(scenario())
        message = self.stream(self.anthropic(server))
        self.assertEqual(message.content[0].type, "text")
        self.assertEqual(message.content[0].text, ANSWER_TEXT)
        call = message.content[1]
        self.assertEqual((call.type, call.id, call.name), ("tool_use", "toolu_01", "read"))
        self.assertEqual(call.input, ANSWER_CALL["input"])
        self.assertEqual(message.stop_reason, "tool_use")

    def test_non_streaming_create_parses(self):
        server = self.serve(scenario())
        message = self.anthropic(server).messages.create(
            model="claude-test", max_tokens=256, messages=MESSAGES)
        self.assertEqual(message.content[0].text, ANSWER_TEXT)
        self.assertEqual(message.content[1].input, ANSWER_CALL["input"])

    def test_529_is_the_overloaded_server_error(self):
        server = self.serve(scenario([{"type": "http", "status": 529}]))
        with self.assertRaises(anthropic.InternalServerError) as cm:
            self.stream(self.anthropic(server))
        self.assertEqual(cm.exception.status_code, 529)
        self.assertIsInstance(cm.exception, anthropic.OverloadedError)

    def test_429_is_a_rate_limit_error_with_its_header(self):
        server = self.serve(scenario([{"type": "http", "status": 429,
                                       "headers": {"retry-after": "7"}}]))
        with self.assertRaises(anthropic.RateLimitError) as cm:
            self.stream(self.anthropic(server))
        self.assertEqual(cm.exception.response.headers.get("retry-after"), "7")
        self.assertTrue(cm.exception.response.headers.get("request-id", "").startswith("req_"))

    def test_mid_stream_error_event_raises_the_stream_error(self):
        server = self.serve(scenario([{"type": "stream_error",
                                       "error_type": "overloaded_error",
                                       "message": "Overloaded"}]))
        with self.assertRaises(anthropic.APIStatusError) as cm:
            self.stream(self.anthropic(server))
        self.assertIn("overloaded_error", str(cm.exception))

    def test_cut_stream_raises_instead_of_returning_a_partial_message(self):
        server = self.serve(scenario([{"type": "stream_cut", "after_events": 4}]))
        # The Anthropic SDK lets the transport's own error through while iterating: the
        # chunked body ended without its terminating chunk.
        with self.assertRaises((anthropic.APIConnectionError, httpx2.RemoteProtocolError)) as cm:
            self.stream(self.anthropic(server))
        self.assertIn("incomplete chunked read", str(cm.exception))

    def test_missing_key_and_context_overflow_are_the_real_errors(self):
        server = self.serve(scenario([{"type": "context_overflow"}]))
        bad = anthropic.Anthropic(api_key="wrong-key", base_url=server.url, max_retries=0)
        with self.assertRaises(anthropic.AuthenticationError):
            self.stream(bad)
        with self.assertRaises(anthropic.BadRequestError) as cm:
            self.stream(self.anthropic(server))
        self.assertIn("prompt is too long", str(cm.exception))

    def test_default_retries_retry_429_and_529_but_not_401(self):
        server = self.serve(scenario([
            {"type": "http", "status": 429, "headers": {"retry-after-ms": "50"}},
            {"type": "http", "status": 529, "headers": {"retry-after-ms": "50"}},
        ]))
        message = self.stream(self.anthropic(server, max_retries=2))
        self.assertEqual(message.content[0].text, ANSWER_TEXT)
        log = server.requests(at_least=3)
        self.assertEqual([r["outcome"]["type"] for r in log], ["fault", "fault", "answered"])
        self.assertEqual([r["outcome"].get("fault", {}).get("status") for r in log[:2]], [429, 529])
        retry_counts = [dict(r["headers"]).get("x-stainless-retry-count") for r in log]
        self.assertEqual(retry_counts, ["0", "1", "2"])
        # The key went as `x-api-key` or `authorization`; the log holds neither.
        for r in log:
            headers = dict(r["headers"])
            self.assertTrue("x-api-key" in headers or "authorization" in headers, headers)
            self.assertNotIn(KEY, json.dumps(r))

        server = self.serve(scenario([{"type": "http", "status": 401}]))
        with self.assertRaises(anthropic.AuthenticationError):
            self.stream(self.anthropic(server, max_retries=2))
        time.sleep(0.3)
        self.assertEqual(len(server.requests()), 1, "401 is not retried")


class OpenAiSdk(ServerTest):
    def stream(self, client):
        text, calls = "", {}
        stream = client.chat.completions.create(model="gpt-test", messages=MESSAGES,
                                                tools=TOOLS_O, stream=True)
        finish = None
        for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                text += delta.content or ""
                for tc in delta.tool_calls or []:
                    c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                    c["id"] = tc.id or c["id"]
                    if tc.function:
                        c["name"] += tc.function.name or ""
                        c["arguments"] += tc.function.arguments or ""
                finish = choice.finish_reason or finish
        return text, [calls[i] for i in sorted(calls)], finish

    def test_stream_parses_into_text_and_tool_call(self):
        server = self.serve(scenario())
        text, calls, finish = self.stream(self.openai(server))
        self.assertEqual(text, ANSWER_TEXT)
        self.assertEqual(len(calls), 1)
        self.assertEqual((calls[0]["id"], calls[0]["name"]), ("toolu_01", "read"))
        self.assertEqual(json.loads(calls[0]["arguments"]), ANSWER_CALL["input"])
        self.assertEqual(finish, "tool_calls")

    def test_non_streaming_create_parses(self):
        server = self.serve(scenario())
        r = self.openai(server).chat.completions.create(model="gpt-test", messages=MESSAGES)
        message = r.choices[0].message
        self.assertEqual(message.content, ANSWER_TEXT)
        self.assertEqual(json.loads(message.tool_calls[0].function.arguments),
                         ANSWER_CALL["input"])

    def test_529_is_an_internal_server_error(self):
        server = self.serve(scenario([{"type": "http", "status": 529}]))
        with self.assertRaises(openai.InternalServerError) as cm:
            self.stream(self.openai(server))
        self.assertEqual(cm.exception.status_code, 529)

    def test_429_is_a_rate_limit_error_with_its_header(self):
        server = self.serve(scenario([{"type": "http", "status": 429,
                                       "headers": {"retry-after": "7"}}]))
        with self.assertRaises(openai.RateLimitError) as cm:
            self.stream(self.openai(server))
        self.assertEqual(cm.exception.response.headers.get("retry-after"), "7")
        self.assertEqual(cm.exception.code, "rate_limit_exceeded")

    def test_mid_stream_error_raises_the_stream_error(self):
        server = self.serve(scenario([{"type": "stream_error", "error_type": "server_error",
                                       "message": "The server had an error"}]))
        with self.assertRaises(openai.APIError) as cm:
            self.stream(self.openai(server))
        self.assertIn("The server had an error", str(cm.exception))

    def test_cut_stream_is_a_connection_error(self):
        server = self.serve(scenario([{"type": "stream_cut", "after_events": 3}]))
        with self.assertRaises(openai.APIConnectionError):
            self.stream(self.openai(server))

    def test_context_overflow_is_a_bad_request_with_its_code(self):
        server = self.serve(scenario([{"type": "context_overflow"}]))
        with self.assertRaises(openai.BadRequestError) as cm:
            self.stream(self.openai(server))
        self.assertEqual(cm.exception.code, "context_length_exceeded")

    def test_default_retries_retry_429_and_529_but_not_401(self):
        server = self.serve(scenario([
            {"type": "http", "status": 429, "headers": {"retry-after-ms": "50"}},
            {"type": "http", "status": 529, "headers": {"retry-after-ms": "50"}},
        ]))
        text, _, _ = self.stream(self.openai(server, max_retries=2))
        self.assertEqual(text, ANSWER_TEXT)
        log = server.requests(at_least=3)
        self.assertEqual([r["outcome"]["type"] for r in log], ["fault", "fault", "answered"])
        retry_counts = [dict(r["headers"]).get("x-stainless-retry-count") for r in log]
        self.assertEqual(retry_counts, ["0", "1", "2"])
        self.assertTrue(all(dict(r["headers"]).get("authorization") == "<redacted>" for r in log))
        self.assertNotIn(KEY, json.dumps(log))

        server = self.serve(scenario([{"type": "http", "status": 401}]))
        with self.assertRaises(openai.AuthenticationError):
            self.stream(self.openai(server, max_retries=2))
        time.sleep(0.3)
        self.assertEqual(len(server.requests()), 1, "401 is not retried")


class OpenAiResponsesSdk(ServerTest):
    def create(self, client, stream, **kw):
        return client.responses.create(model="gpt-test", input=kw.pop("input", MESSAGES),
                                       tools=TOOLS_R, stream=stream, **STATELESS, **kw)

    def events(self, client):
        return list(self.create(client, True))

    def check_answer(self, response):
        # The fake model reasons first: a reasoning item with encrypted content.
        self.assertEqual([i.type for i in response.output],
                         ["reasoning", "message", "function_call"])
        self.assertTrue(response.output[0].encrypted_content.startswith("gAAAA"))
        self.assertEqual(response.output_text, ANSWER_TEXT)
        call = response.output[2]
        self.assertEqual((call.call_id, call.name), ("toolu_01", "read"))
        self.assertEqual(json.loads(call.arguments), ANSWER_CALL["input"])

    def test_stream_events_parse_into_reasoning_text_and_function_call(self):
        server = self.serve(scenario())
        events = self.events(self.openai(server))
        types = [e.type for e in events]
        self.assertEqual((types[0], types[-1]), ("response.created", "response.completed"))
        self.assertEqual([e.sequence_number for e in events], list(range(len(events))))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        self.assertEqual(text, ANSWER_TEXT)
        args = "".join(e.delta for e in events
                       if e.type == "response.function_call_arguments.delta")
        self.assertEqual(json.loads(args), ANSWER_CALL["input"])
        self.check_answer(events[-1].response)
        self.assertEqual(events[-1].response.status, "completed")

    def test_stream_helper_accumulates_the_final_response(self):
        server = self.serve(scenario())
        with self.openai(server).responses.stream(model="gpt-test", input=MESSAGES,
                                                  tools=TOOLS_R, **STATELESS) as s:
            for _ in s:
                pass
            final = s.get_final_response()
        self.check_answer(final)

    def test_non_streaming_create_parses(self):
        server = self.serve(scenario())
        self.check_answer(self.create(self.openai(server), False))

    def test_reasoning_passed_back_is_accepted_and_a_changed_one_refused(self):
        server = self.serve({"turns": [
            {"answer": {"text": ANSWER_TEXT, "tool_calls": [dict(ANSWER_CALL, id="toolu_01")]}},
            {"answer": {"text": "Done reading."}}]})
        client = self.openai(server)
        first = self.create(client, False)
        items = [i.model_dump(exclude_none=True) for i in first.output]
        result = {"type": "function_call_output", "call_id": "toolu_01", "output": "fn parse()"}
        second = self.create(client, False, input=MESSAGES + items + [result])
        self.assertEqual(second.output_text, "Done reading.")
        log = server.requests(at_least=2)
        self.assertEqual(log[1]["body"]["input"][1], items[0], "passed back unchanged")

        items[0]["encrypted_content"] = items[0]["encrypted_content"] + "x"
        with self.assertRaises(openai.BadRequestError) as cm:
            self.create(client, False, input=MESSAGES + items + [result])
        self.assertEqual(cm.exception.code, "invalid_encrypted_content")

    def test_429_is_a_rate_limit_error_with_its_header(self):
        server = self.serve(scenario([{"type": "http", "status": 429,
                                       "headers": {"retry-after": "7"}}]))
        with self.assertRaises(openai.RateLimitError) as cm:
            self.events(self.openai(server))
        self.assertEqual(cm.exception.response.headers.get("retry-after"), "7")
        self.assertTrue(cm.exception.response.headers.get("x-request-id", "").startswith("req_"))

    def test_529_is_an_internal_server_error(self):
        server = self.serve(scenario([{"type": "http", "status": 529}]))
        with self.assertRaises(openai.InternalServerError) as cm:
            self.events(self.openai(server))
        self.assertEqual(cm.exception.status_code, 529)

    def test_failure_inside_the_stream_is_a_response_failed_event(self):
        server = self.serve(scenario([{"type": "stream_error", "error_type": "rate_limit_exceeded",
                                       "message": "Rate limit reached for requests"}]))
        events = self.events(self.openai(server))
        last = events[-1]
        self.assertEqual(last.type, "response.failed")
        self.assertEqual(last.response.status, "failed")
        self.assertEqual(last.response.error.code, "rate_limit_exceeded")
        self.assertEqual(last.response.error.message, "Rate limit reached for requests")

    def test_cut_stream_is_a_connection_error(self):
        server = self.serve(scenario([{"type": "stream_cut", "after_events": 3}]))
        with self.assertRaises(openai.APIConnectionError):
            self.events(self.openai(server))

    def test_context_overflow_is_a_bad_request_with_its_code(self):
        server = self.serve(scenario([{"type": "context_overflow"}]))
        with self.assertRaises(openai.BadRequestError) as cm:
            self.events(self.openai(server))
        self.assertEqual(cm.exception.code, "context_length_exceeded")

    def test_default_retries_retry_429_and_529_but_not_401(self):
        server = self.serve(scenario([
            {"type": "http", "status": 429, "headers": {"retry-after-ms": "50"}},
            {"type": "http", "status": 529, "headers": {"retry-after-ms": "50"}},
        ]))
        self.check_answer(self.create(self.openai(server, max_retries=2), False))
        log = server.requests(at_least=3)
        self.assertEqual([r["outcome"]["type"] for r in log], ["fault", "fault", "answered"])
        self.assertTrue(all(r["path"] == "/v1/responses" for r in log))
        self.assertNotIn(KEY, json.dumps(log))

        server = self.serve(scenario([{"type": "http", "status": 401}]))
        with self.assertRaises(openai.AuthenticationError):
            self.events(self.openai(server, max_retries=2))
        time.sleep(0.3)
        self.assertEqual(len(server.requests()), 1, "401 is not retried")


# The Gemini request the tests send: the model, the user's message and the `read` tool.
GEMINI_MODEL = "gemini-test"
GEMINI_CONTENTS = [genai_types.Content(role="user",
                                       parts=[genai_types.Part(text="Fix the failing test.")])]
GEMINI_TOOLS = [genai_types.Tool(function_declarations=[genai_types.FunctionDeclaration(
    name="read", description="Read a file.",
    parameters_json_schema={"type": "object", "properties": {"path": {"type": "string"}}})])]
# Two turns: a tool call, then text after its result.
TOOL_THEN_TEXT = {"turns": [
    {"answer": {"text": ANSWER_TEXT, "tool_calls": [dict(ANSWER_CALL, id="toolu_01")]}},
    {"answer": {"text": "Done reading."}}]}


class GeminiSdk(ServerTest):
    """google-genai against the fake server's Gemini API (`/v1beta/models/...`). The SDK
    joins `base_url`, `api_version` and `models/{model}:generateContent` (or
    `:streamGenerateContent?alt=sse`) into the URL, and sends the key as `x-goog-api-key`."""

    def gemini(self, server, **options):
        """A Gemini API client of `server`. The SDK does not retry unless told
        (retry_options None: one attempt), so each fault reaches the test as the SDK's own
        exception."""
        options.setdefault("retry_options", None)
        return genai.Client(api_key=KEY, http_options=genai_types.HttpOptions(
            base_url=server.url, api_version="v1beta", timeout=10_000, **options))

    def config(self, **kw):
        """The request's config: the `read` tool, and `kw`."""
        return genai_types.GenerateContentConfig(tools=GEMINI_TOOLS, **kw)

    def generate(self, client, contents=None, **kw):
        """One `generate_content` call (the user's message unless `contents`)."""
        return client.models.generate_content(
            model=GEMINI_MODEL, contents=contents or GEMINI_CONTENTS, config=self.config(**kw))

    def stream(self, client, **kw):
        """Every chunk of one `generate_content_stream` call."""
        return list(client.models.generate_content_stream(
            model=GEMINI_MODEL, contents=GEMINI_CONTENTS, config=self.config(**kw)))

    def check_call(self, calls, parts):
        """`calls` is the scripted call, and its part in `parts` carries a signature."""
        self.assertEqual(len(calls), 1)
        self.assertEqual((calls[0].id, calls[0].name), ("toolu_01", "read"))
        self.assertEqual(calls[0].args, ANSWER_CALL["input"])
        # The fake model signs its first call, as Gemini 3 does.
        call_part = next(p for p in parts if p.function_call)
        self.assertIsInstance(call_part.thought_signature, bytes)
        self.assertTrue(call_part.thought_signature)

    def test_generate_content_parses_into_text_and_a_signed_function_call(self):
        server = self.serve(scenario())
        response = self.generate(self.gemini(server))
        parts = response.candidates[0].content.parts
        self.assertEqual([p.text for p in parts if p.text], [ANSWER_TEXT])
        self.check_call(response.function_calls, parts)
        self.assertEqual(response.candidates[0].finish_reason, genai_types.FinishReason.STOP)
        self.assertGreater(response.usage_metadata.prompt_token_count, 0)
        [record] = server.requests(at_least=1)
        self.assertEqual(record["path"], f"/v1beta/models/{GEMINI_MODEL}:generateContent")
        self.assertEqual(dict(record["headers"]).get("x-goog-api-key"), "<redacted>")
        self.assertNotIn(KEY, json.dumps(record))

    def test_stream_parses_into_text_and_a_signed_function_call(self):
        server = self.serve(scenario())
        chunks = self.stream(self.gemini(server))
        self.assertGreater(len(chunks), 2)
        parts = [p for c in chunks for p in c.candidates[0].content.parts]
        self.assertEqual("".join(p.text or "" for p in parts), ANSWER_TEXT)
        calls = [fc for c in chunks for fc in c.function_calls or []]
        self.check_call(calls, parts)
        self.assertEqual(chunks[-1].candidates[0].finish_reason, genai_types.FinishReason.STOP)
        [record] = server.requests(at_least=1)
        self.assertEqual(record["path"], f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent")

    def test_asking_for_thoughts_signs_the_text_too(self):
        server = self.serve(scenario())
        thinking = genai_types.ThinkingConfig(include_thoughts=True)
        response = self.generate(self.gemini(server), thinking_config=thinking)
        parts = response.candidates[0].content.parts
        text_part = next(p for p in parts if p.text)
        self.assertTrue(text_part.thought_signature)
        call_part = next(p for p in parts if p.function_call)
        self.assertNotEqual(text_part.thought_signature, call_part.thought_signature)

    def test_429_is_a_client_error_with_its_retry_after(self):
        server = self.serve(scenario([{"type": "http", "status": 429,
                                       "headers": {"retry-after": "7"}}]))
        with self.assertRaises(genai_errors.ClientError) as cm:
            self.stream(self.gemini(server))
        self.assertEqual((cm.exception.code, cm.exception.status), (429, "RESOURCE_EXHAUSTED"))
        self.assertEqual(cm.exception.response.headers.get("retry-after"), "7")
        time.sleep(0.2)
        self.assertEqual(len(server.requests()), 1, "no retry by default")

    def test_503_is_a_server_error(self):
        server = self.serve(scenario([{"type": "http", "status": 503}]))
        with self.assertRaises(genai_errors.ServerError) as cm:
            self.generate(self.gemini(server))
        self.assertEqual((cm.exception.code, cm.exception.status), (503, "UNAVAILABLE"))

    def test_failure_inside_the_stream_is_raised_by_the_iterator(self):
        message = "The model is overloaded. Please try again later."
        server = self.serve(scenario([{"type": "stream_error", "error_type": "UNAVAILABLE",
                                       "message": message, "after_deltas": 1}]))
        client, chunks = self.gemini(server), []
        with self.assertRaises(genai_errors.ServerError) as cm:
            for chunk in client.models.generate_content_stream(
                    model=GEMINI_MODEL, contents=GEMINI_CONTENTS, config=self.config()):
                chunks.append(chunk)
        self.assertTrue(chunks, "the answer began before the failure")
        self.assertEqual((cm.exception.code, cm.exception.status), (503, "UNAVAILABLE"))
        self.assertEqual(cm.exception.message, message)

    def test_function_response_with_the_signature_back_is_accepted_and_a_changed_one_refused(self):
        server = self.serve(TOOL_THEN_TEXT)
        client = self.gemini(server)
        first = self.generate(client)
        model_turn = first.candidates[0].content
        result = genai_types.Content(role="user", parts=[
            genai_types.Part.from_function_response(name="read",
                                                    response={"result": "fn parse() {}"})])
        second = self.generate(client, contents=GEMINI_CONTENTS + [model_turn, result])
        self.assertEqual(second.text, "Done reading.")
        log = server.requests(at_least=2)
        sent = log[1]["body"]["contents"]
        self.assertEqual(sent[2]["parts"][0]["functionResponse"]["name"], "read")
        # The signature went back exactly as it came.
        call = next(p for p in sent[1]["parts"] if "functionCall" in p)
        signed = next(p for p in model_turn.parts if p.function_call)
        self.assertEqual(call["thoughtSignature"],
                         base64.urlsafe_b64encode(signed.thought_signature).decode())

        changed = model_turn.model_copy(deep=True)
        for part in changed.parts:
            if part.thought_signature:
                part.thought_signature = part.thought_signature[:-1] + b"x"
        with self.assertRaises(genai_errors.ClientError) as cm:
            self.generate(client, contents=GEMINI_CONTENTS + [changed, result])
        self.assertEqual((cm.exception.code, cm.exception.status), (400, "INVALID_ARGUMENT"))
        self.assertEqual(cm.exception.message, "Corrupted thought signature.")

    def test_vertex_ai_with_a_static_token_and_a_base_url(self):
        # Vertex mode needs no Google credentials when it is given a token: the SDK sends it
        # as a bearer token, to `{base_url}/{api_version}/projects/{p}/locations/{l}/
        # publishers/google/models/{model}:generateContent`.
        token = google.oauth2.credentials.Credentials(token=KEY)
        server = self.serve(scenario())
        client = genai.Client(
            vertexai=True, project="p1", location="us-central1", credentials=token,
            http_options=genai_types.HttpOptions(base_url=server.url, api_version="v1",
                                                 timeout=10_000, retry_options=None))
        response = self.generate(client)
        self.check_call(response.function_calls, response.candidates[0].content.parts)
        [record] = server.requests(at_least=1)
        self.assertEqual(record["path"], "/v1/projects/p1/locations/us-central1/publishers/"
                                         f"google/models/{GEMINI_MODEL}:generateContent")
        headers = dict(record["headers"])
        self.assertEqual(headers.get("authorization"), "<redacted>")
        self.assertNotIn("x-goog-api-key", headers)


if __name__ == "__main__":
    if not os.path.exists(SERVER):
        sys.exit(f"fake server binary not found at {SERVER}; run tests/python/run.sh")
    unittest.main()
