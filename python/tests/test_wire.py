"""The wire helpers: request bodies, the stream decoder, failure classification.

Streams and error bodies are the byte-for-byte captures in core/fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import READ_TOOL, failure, text_response
from rebound_agent import (
    AgentMachine,
    ConfigError,
    RequestError,
    Snapshot,
    StreamDecoder,
    StreamError,
    classify_http,
    classify_transport,
    compact,
    events as e,
    parse_response,
    request_body,
    request_path,
)

FIXTURES = Path(__file__).resolve().parents[2] / "core" / "fixtures"


def fixture(path: str) -> bytes:
    return (FIXTURES / path).read_bytes()


def chunks(data: bytes, size: int):
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
@pytest.mark.parametrize(
    "provider, path",
    [
        ("anthropic", "streams/anthropic/basic_response.sse"),
        ("anthropic", "streams/anthropic/tool_use_response.sse"),
        ("openai", "streams/openai/text_with_usage.sse"),
        ("openai", "streams/openai/parallel_tool_calls.sse"),
        ("openai_responses", "streams/responses/text_stream.sse"),
    ],
)
def test_a_captured_stream_decodes_the_same_in_any_split(provider, path, size):
    data = fixture(path)
    whole = StreamDecoder(provider)
    whole.feed(data)
    expected = whole.finish()
    d = StreamDecoder(provider)
    deltas = [x for chunk in chunks(data, size) for x in d.feed(chunk)]
    response = d.finish()
    assert response == expected
    assert response["message"]["role"] == "assistant"
    text = "".join(x["text"] for x in deltas if x["type"] == "text")
    blocks = response["message"]["content"]
    assert text == "".join(b.get("text", "") for b in blocks if b["type"] == "text")
    # What the decoder assembled is what the machine takes.
    m = AgentMachine(config={"tools": [READ_TOOL]})
    [_, send] = m.step(0, e.UserMessage.text("hi"))
    assert m.handle(1, e.ProviderSucceeded(send.request, response)) == "accepted"


def test_a_cut_stream_is_a_retryable_failure_the_machine_retries():
    data = fixture("streams/anthropic/basic_response.sse")
    d = StreamDecoder("anthropic")
    d.feed(data[: len(data) // 2])
    assert not d.is_complete
    with pytest.raises(StreamError) as info:
        d.finish()
    assert info.value.failure["kind"] == "stream_malformed"
    assert info.value.failure["transport"] == "stream_cut"
    m = AgentMachine()
    [_, send] = m.step(0, e.UserMessage.text("hi"))
    cmds = m.step(1, e.ProviderFailed(send.request, info.value.failure))
    assert [type(x).__name__ for x in cmds] == ["NotifyRetry", "Sleep"]


def test_progress_is_content_not_bytes():
    """`progressed` moves a request's progress deadline: text does, keep-alives do not."""
    events = [x + b"\n\n" for x in fixture("streams/anthropic/basic_response.sse").split(b"\n\n") if x.strip()]
    d = StreamDecoder("anthropic")
    seen = {}
    for event in events:
        d.feed(event)
        seen.setdefault(event.split(b"\n")[0].decode(), []).append(d.progressed)
    assert seen["event: ping"] == [False]
    assert seen["event: message_start"] == [False]
    assert seen["event: content_block_start"] == [False]  # an empty text block
    assert all(seen["event: content_block_delta"])
    d.feed(b"")
    assert not d.progressed


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\xff\xfe garbage", b"data: {not json}\n\n", b"<html>502 Bad Gateway</html>\n\n", b"data: " + b"x" * 10],
)
def test_bytes_that_are_no_stream_raise_a_stream_error_with_a_failure(garbage):
    d = StreamDecoder("openai")
    with pytest.raises(StreamError) as info:
        d.feed(garbage)
        d.finish()
    assert info.value.failure["kind"] in ("stream_malformed", "server_error")
    assert str(info.value)


def test_an_error_event_in_a_stream_is_classified():
    d = StreamDecoder("anthropic")
    with pytest.raises(StreamError) as info:
        d.feed(fixture("streams/anthropic/error_event_documented.sse"))
        d.finish()
    assert info.value.failure["kind"] == "unavailable"


def test_a_failed_decoder_keeps_failing():
    d = StreamDecoder("openai")
    with pytest.raises(StreamError) as first:
        d.feed(b"data: {not json}\n\n")
    with pytest.raises(StreamError) as again:
        d.feed(b"data: [DONE]\n\n")
    assert again.value.failure == first.value.failure


def test_a_finished_decoder_refuses_more_bytes():
    d = StreamDecoder("openai")
    d.feed(fixture("streams/openai/text_with_usage.sse"))
    assert d.is_complete
    d.finish()
    with pytest.raises(Exception, match="finished"):
        d.feed(b"data: [DONE]\n\n")


def test_a_non_streamed_response_parses():
    r = parse_response("openai_responses", fixture("streams/responses/output_text_response.json"))
    assert r["message"]["role"] == "assistant"
    with pytest.raises(StreamError) as info:
        parse_response("anthropic", fixture("errors/anthropic_overloaded_529.json"))
    assert info.value.failure["kind"] == "unavailable"


@pytest.mark.parametrize(
    "provider, status, path, kind",
    [
        ("anthropic", 529, "errors/anthropic_overloaded_529.json", "unavailable"),
        ("anthropic", 400, "errors/anthropic_prompt_too_long_400.json", "context_overflow"),
        ("anthropic", 401, "errors/anthropic_authentication_401.json", "auth_failed"),
        ("openai", 429, "errors/openai_insufficient_quota_429.json", "quota_exhausted"),
        ("openai", 400, "errors/openai_context_length_exceeded_400.json", "context_overflow"),
        ("openai", 502, "errors/nginx_bad_gateway_502.html", "server_error"),
    ],
)
def test_captured_error_responses_are_classified(provider, status, path, kind):
    f = classify_http(provider, status, {}, fixture(path))
    assert f["kind"] == kind
    assert f["status"] == status


def test_server_hints_and_request_ids_come_from_the_headers():
    body = fixture("errors/anthropic_rate_limit_429.json")
    f = classify_http("anthropic", 429, {"retry-after": "7", "request-id": "req_abc"}, body)
    assert f["kind"] == "rate_limited"
    assert f["retry_after_ms"] == 7000
    assert f["request_id"] == "req_abc"
    pairs = classify_http("anthropic", 429, [("Retry-After-Ms", "1500")], body)
    assert pairs["retry_after_ms"] == 1500
    assert classify_http("openai", 500, {"x-should-retry": "false"}, b"")["should_retry"] is False
    date = classify_http("openai", 503, {"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, b"", now_unix_ms=1445412480000)
    assert date["retry_after_ms"] == 10_000


def test_httpx_headers_are_read_as_they_are():
    httpx = pytest.importorskip("httpx")
    f = classify_http("openai", 429, httpx.Headers({"retry-after": "2"}), b"{}")
    assert f["retry_after_ms"] == 2000


@pytest.mark.parametrize(
    "kwargs, transport, kind",
    [
        (dict(connect_failed=True), "connect", "transport"),
        (dict(), "dns", "transport"),
        (dict(timed_out=True), "timeout", "transport"),
        (dict(timed_out=True, response_started=True), "idle_timeout", "stream_malformed"),
        (dict(response_started=True), "stream_cut", "stream_malformed"),
    ],
)
def test_transport_errors_are_classified(kwargs, transport, kind):
    text = "dns error: failed to lookup address" if not kwargs else "the connection broke"
    f = classify_transport(text, **kwargs)
    assert (f["transport"], f["kind"]) == (transport, kind)


def test_bad_classifier_input_raises_typed_errors():
    with pytest.raises(ConfigError):
        classify_http("azure", 500, {}, b"")
    with pytest.raises(TypeError):
        classify_http("openai", 500, 42, b"")
    with pytest.raises(ValueError):
        classify_http("openai", 70_000, {}, b"")


@pytest.mark.parametrize("provider", ["anthropic", "openai", "openai_responses"])
def test_a_request_body_is_built_from_a_commands_snapshot(provider):
    m = AgentMachine(config={"tools": [READ_TOOL]})
    [_, send] = m.step(0, e.UserMessage.text("Read README.md"))
    body = request_body(provider, send.conversation, "some-model", 1024, system="Be brief.", tools=[READ_TOOL])
    assert body["model"] == "some-model"
    assert body["stream"] is True
    assert "Read README.md" in json.dumps(body)
    assert "Be brief." in json.dumps(body)
    assert "read" in json.dumps(body["tools"])
    assert request_body(provider, send.conversation.messages(), "some-model", 1024, system="Be brief.", tools=[READ_TOOL]) == body
    assert request_path(provider).startswith("/")


def test_gemini_requests_name_the_model_in_the_path_and_its_streams_decode():
    m = AgentMachine(config={"tools": [READ_TOOL]})
    [_, send] = m.step(0, e.UserMessage.text("Read README.md"))
    body = request_body("gemini", send.conversation, "gemini-2.5-flash", 1024, system="Be brief.", tools=[READ_TOOL])
    assert body["contents"][0] == {"role": "user", "parts": [{"text": "Read README.md"}]}
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["generationConfig"] == {"maxOutputTokens": 1024}
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "read"
    assert request_path("gemini", "gemini-2.5-flash") == "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert request_path("gemini", "gemini-2.5-flash", stream=False) == "/models/gemini-2.5-flash:generateContent"
    with pytest.raises(ConfigError):
        request_path("gemini")
    chunk = {"candidates": [{"content": {"parts": [{"functionCall": {"name": "read", "args": {"path": "README.md"}}}],
                                         "role": "model"}, "finishReason": "STOP", "index": 0}],
             "responseId": "r1"}
    d = StreamDecoder("gemini")
    d.feed(("data: " + json.dumps(chunk) + "\r\n\r\n").encode())
    response = d.finish()
    assert response["stop_reason"] == "tool_use"
    assert response["message"]["content"][0]["id"] == "gc_r1_0"
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}}
    with pytest.raises(StreamError) as err:
        parse_response("gemini", json.dumps(blocked).encode())
    assert err.value.failure["kind"] == "content_blocked"


def test_bedrock_requests_and_event_stream_bytes():
    convo = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    body = request_body("bedrock", convo, "anthropic.claude-sonnet-4-5-20250929-v1:0", 512)
    assert body["messages"] == [{"role": "user", "content": [{"text": "hi"}]}]
    assert body["inferenceConfig"] == {"maxTokens": 512}
    assert request_path("bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0") == (
        "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    )
    with pytest.raises(ConfigError):
        request_path("bedrock")
    # Not SSE: a corrupt event-stream frame is a typed stream failure, never a crash.
    d = StreamDecoder("bedrock")
    with pytest.raises(StreamError) as err:
        d.feed(b"\x00\x00\x00\x10\x00\x00\x00\x00\xde\xad\xbe\xef" + b"\x00" * 8)
    assert err.value.failure["kind"] == "stream_malformed"
    f = classify_http("bedrock", 429, {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"},
                      b'{"message": "Too many requests, please wait before trying again."}')
    assert f["kind"] == "rate_limited" and f["error_type"] == "ThrottlingException"


def test_request_options_reach_the_body_and_bad_ones_are_refused():
    convo = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    body = request_body("openai", convo, "gpt-4o", 100, tools=[READ_TOOL], options={"temperature": 0.5, "tool_choice": "any"})
    assert body["temperature"] == 0.5 and body["tool_choice"] == "required"
    with pytest.raises(ConfigError):
        request_body("openai", convo, "gpt-4o", options={"temprature": 1})
    with pytest.raises(ConfigError):
        request_body("openai", convo, "gpt-4o", options={"reasoning_effort": "huge"})
    with pytest.raises(RequestError):
        request_body("anthropic", convo, "claude", options={"temperature": 1.5})


def test_a_conversation_no_request_can_be_built_from_is_a_request_error():
    with pytest.raises(RequestError, match="no message"):
        request_body("anthropic", [], "claude")
    unpaired = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
        {"role": "user", "content": [{"type": "text", "text": "no result"}]},
    ]
    with pytest.raises(RequestError):
        request_body("openai", unpaired, "gpt-4o")
    with pytest.raises(ValueError):
        request_body("openai", Snapshot.from_json({"messages": 1, "digest": "0000000000000001"}), "gpt-4o")


def test_compaction_answers_a_compact_command():
    big = "x" * 5000
    convo = []
    for i in range(8):
        convo.append({"role": "user", "content": [{"type": "text", "text": f"{i} {big}"}]})
        convo.append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    result = compact(convo)
    assert "Ok" in result
    assert len(json.dumps(result["Ok"])) < len(json.dumps(convo))
    assert compact(Snapshot.of(convo)) == result


@pytest.mark.parametrize("max_tokens", [-1, 2**70])
def test_max_tokens_out_of_range_is_a_request_error(max_tokens):
    conversation = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    with pytest.raises(RequestError, match="max_tokens must be"):
        request_body("anthropic", conversation, "m", max_tokens)


def test_a_config_error_says_what_was_wrong_without_another_errors_name():
    with pytest.raises(ConfigError) as raised:
        AgentMachine(config={"retry": {"max_attempts": "four"}})
    assert not str(raised.value).startswith("EventError")
    with pytest.raises(RequestError) as refused:
        request_body("anthropic", [{"role": "nobody"}], "m")
    assert not str(refused.value).startswith("EventError")
