"""Values cross the boundary in their JSON shape, read and written directly (no JSON value or
text in between): what Python gets is exactly what `json.loads` would make of core's JSON,
and what Python gives is read exactly as JSON would be, no more leniently."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import READ_TOOL, drive, failure, text_response, tool_response
from rebound_agent import AgentMachine, ConfigError, EventError, _native, commands as c, events as e
from rebound_agent._native import normalize_event


def assert_json_shaped(value: Any, where: str = "value") -> None:
    """Only dicts with str keys, lists, str, int, float, bool and None, all the way down."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, str), f"{where}: key {k!r} is no str"
            assert_json_shaped(v, f"{where}[{k!r}]")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            assert_json_shaped(v, f"{where}[{i}]")
    else:
        assert value is None or isinstance(value, (str, int, float, bool)), f"{where}: {type(value).__name__}"
    assert json.loads(json.dumps(value)) == value


def test_what_python_gets_is_json_shaped():
    m = AgentMachine(config={"tools": [READ_TOOL]}, seed=3)
    assert_json_shaped(m.config(), "config")
    answers = iter([failure("unavailable", 529), tool_response("t1", "a.rs"), text_response()])
    run = drive(m, lambda cmd: _answer(cmd, answers))
    for command in run.commands():
        assert_json_shaped(command.to_json(), type(command).__name__)
    assert_json_shaped(m.outcome(), "outcome")
    assert_json_shaped(m.tally.to_json(), "tally")
    assert_json_shaped(m.conversation().messages(), "messages")
    assert_json_shaped(_native.simulate("demo", 1, None), "simulation")


def _answer(cmd: c.SendRequest, answers: Any) -> e.Event:
    answer = next(answers)
    if "kind" in answer:
        return e.ProviderFailed(cmd.request, answer)
    return e.ProviderSucceeded(cmd.request, answer)


def test_an_event_reads_back_as_it_was_given():
    event = {
        "type": "provider_failed",
        "request": 1,
        "failure": {"kind": "rate_limited", "status": 429, "message": "slow down", "retry_after_ms": 1500},
    }
    normalized = normalize_event(event)
    assert normalize_event(normalized) == normalized
    assert normalized["failure"]["retry_after_ms"] == 1500
    # Tuples are read as lists, typed events through their JSON shape, JSON text as JSON.
    as_tuple = {"type": "user_message", "content": ({"type": "text", "text": "hi"},)}
    assert normalize_event(as_tuple) == normalize_event(e.UserMessage.text("hi"))
    assert normalize_event(json.dumps(event)) == normalized


@pytest.mark.parametrize(
    "config",
    [
        {"retry": {"jitter": "no"}},  # no truthiness: a str is no bool
        {"retry": {"max_attempts": True}},  # a bool is no int
        {"retry": {"max_attempts": 4.0}},  # a float is no int
        {"retry": {"multiplier": float("inf")}},  # JSON has no infinity
        {"retry": {"max_attempts": 2**70}},  # beyond 64 bits
        {"retry": {1: 2}},  # keys are str
        {"retry": {"max_attempts": {4}}},  # a set has no JSON form
    ],
)
def test_a_config_is_read_as_strictly_as_json(config):
    with pytest.raises(ConfigError):
        AgentMachine(config=config)


@pytest.mark.parametrize(
    "event",
    [
        {"type": "timer_fired", "timer": True},
        {"type": "timer_fired", "timer": 1.0},
        {"type": "timer_fired", "timer": "1"},
        {"type": "provider_failed", "request": 1, "failure": {"kind": "unavailable", "message": b"bytes"}},
        {"type": "provider_failed", "request": 1, "failure": {"kind": ["unavailable"], "message": "x"}},
    ],
)
def test_an_event_is_read_as_strictly_as_json(event):
    m = AgentMachine()
    m.step(0, e.UserMessage.text("hi"))
    with pytest.raises(EventError):
        m.handle(1, event)
    assert m.poll() is None


def test_an_error_says_where_the_value_is_wrong():
    with pytest.raises(ConfigError) as info:
        AgentMachine(config={"retry": {"max_attempts": "four"}})
    assert '["retry"]["max_attempts"]' in str(info.value)
    assert "expected u32" in str(info.value)
    with pytest.raises(EventError) as info:
        normalize_event({"type": "user_message", "content": [{"type": "text", "text": {1, 2}}]})
    assert str(info.value).startswith('event["content"][0]["text"]: a set has no JSON form')


def test_a_failing_to_json_is_an_event_error():
    class Broken:
        def to_json(self):
            raise RuntimeError("boom")

    with pytest.raises(EventError, match="to_json\\(\\) failed: RuntimeError: boom"):
        normalize_event(Broken())
