"""Secrets the embedder names: masked in every failure the machine or a wire helper writes."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import failure
from rebound_agent import (
    AgentMachine,
    ConfigError,
    StreamDecoder,
    StreamError,
    classify_http,
    classify_transport,
    parse_response,
    replay,
)
from rebound_agent.events import ProviderFailed, TimerFired, ToolsFinished, UserMessage

KEY = "gw-live-4f2a9b7c1d83e6"
TOKEN = "deploy-token-5e6f7a8b"
READ = {"name": "read", "description": "Reads.", "input_schema": {"type": "object"}}


def _tool_call() -> dict[str, Any]:
    return {
        "message": {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}],
        },
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def test_a_machine_named_secrets_masks_them_in_notices_tool_results_the_error_and_the_trace() -> None:
    m = AgentMachine(
        config={"tools": [READ], "retry": {"jitter": False}}, secrets=[KEY, TOKEN], record=True
    )
    seen = list(m.step(0, UserMessage.text("read it")))
    send = seen[-1]
    seen += m.step(1, {"type": "provider_succeeded", "request": send.request, "response": _tool_call()})
    run_tools = seen[-1]
    seen += m.step(
        2,
        ToolsFinished(
            run_tools.batch,
            {"per_call": [{"tool_use_id": "toolu_1", "result": {"Err": {"model": {"message": f"token {TOKEN} expired"}}}}]},
        ),
    )
    send = seen[-1]
    echoed = failure("unavailable", 529, message=f"key {KEY} refused", request_id=f"req_{KEY}")
    seen += m.step(3, ProviderFailed(send.request, echoed))
    sleep = [c for c in seen if c.type == "sleep"][-1]
    seen += m.step(4, TimerFired(sleep.timer))
    send = seen[-1]
    seen += m.step(5, ProviderFailed(send.request, failure("auth_failed", 401, message=f"bad key {KEY}")))
    assert seen[-1].type == "fail"
    text = repr(seen) + repr(m.outcome()) + repr(m.conversation().messages())
    trace = m.trace_jsonl()
    assert "key *** refused" in text and "token *** expired" in text
    assert "req_***" in trace
    for secret in (KEY, TOKEN):
        assert secret not in text
        assert secret not in trace
    # The trace as recorded replays to the same commands, with no secret named.
    assert replay(trace).identical, replay(trace).text


def test_the_wire_helpers_mask_the_secrets_they_are_named() -> None:
    body = f'{{"type":"error","error":{{"type":"authentication_error","message":"invalid key {KEY}"}}}}'
    headers = {"request-id": f"req_{KEY}"}
    f = classify_http("anthropic", 401, headers, body.encode(), secrets=KEY)
    assert f["message"] == "invalid key ***" and f["request_id"] == "req_***"
    assert KEY in classify_http("anthropic", 401, headers, body.encode())["message"]
    t = classify_transport(f"proxy https://user:{KEY}@proxy failed", secrets=[KEY])
    assert KEY not in t["message"]
    with pytest.raises(StreamError) as raised:
        parse_response("anthropic", body.encode(), secrets=[KEY])
    assert KEY not in str(raised.value) and KEY not in repr(raised.value.failure)
    decoder = StreamDecoder("anthropic", secrets=[KEY])
    in_stream = (
        'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        f'"message":"overloaded, key {KEY}"}}}}\n\n'
    )
    with pytest.raises(StreamError) as raised:
        decoder.feed(in_stream.encode())
    assert raised.value.failure["message"] == "overloaded, key ***"


def test_an_sk_key_glued_to_a_request_id_is_masked_without_being_named() -> None:
    f = classify_http("openai", 500, {"x-request-id": "req_sk-proj-abcdef123456"}, b"{}")
    assert f["request_id"] == "req_sk-***"


def test_secrets_too_short_or_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least 8"):
        AgentMachine(secrets=["abc"])
    with pytest.raises(TypeError):
        AgentMachine(secrets=[1234567890])  # type: ignore[list-item]
    with pytest.raises(ConfigError):
        classify_http("anthropic", 401, secrets="short")
