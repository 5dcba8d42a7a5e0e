"""The machine from Python: typed events and commands, their JSON shape, typed errors."""

from __future__ import annotations

import json

import pytest

from conftest import READ_TOOL, drive, failure, text_response, tool_response
from rebound_agent import (
    AgentMachine,
    Command,
    ConfigError,
    Event,
    EventError,
    ReboundError,
    Snapshot,
    StreamDeadlines,
    UnexpectedEventError,
    UnknownAnswerError,
    commands as c,
    events as e,
    read_trace,
    simulate,
)


def outage_then_tool_then_answer():
    """529 once, then a tool call, then an answer."""
    calls = iter(
        [
            lambda r: e.ProviderFailed(r.request, failure("unavailable", 529)),
            lambda r: e.ProviderSucceeded(r.request, tool_response("call_1", "README.md")),
        ]
    )
    return lambda r: next(calls, lambda r: e.ProviderSucceeded(r.request, text_response()))(r)


def test_a_run_with_an_outage_retries_runs_the_tool_and_finishes():
    m = AgentMachine(config={"tools": [READ_TOOL]}, seed=7)
    run = drive(m, outage_then_tool_then_answer())
    kinds = [type(x).__name__ for x in run.commands()]
    assert kinds.count("SendRequest") == 3
    assert kinds.index("NotifyRetry") < kinds.index("Sleep")
    assert isinstance(run.last, c.Finish) and run.last.reason == {"model": "end_turn"}
    # The user's message, the tool call, its result and the answer; nothing from the 529.
    assert len(m.conversation()) == 4
    assert m.outcome() == {"Ok": {"model": "end_turn"}}
    notice = next(x for x in run.commands() if isinstance(x, c.NotifyRetry))
    assert notice.text.startswith("provider unavailable: retrying in ")
    assert "(attempt 2/4)" in notice.text


def test_a_tool_error_becomes_an_error_result_the_model_reads():
    m = AgentMachine(config={"tools": [READ_TOOL]}, seed=1)
    m.step(0, e.UserMessage.text("read it"))
    [append, run_tools] = m.step(1, e.ProviderSucceeded(1, tool_response("call_9", "nope.txt")))
    assert isinstance(run_tools, c.RunTools)
    cmds = m.step(2, e.ToolsFinished.per_call(run_tools.batch, [e.tool_error("call_9", "file not found: nope.txt")]))
    result = cmds[0].message["content"][0]
    assert result["is_error"] is True
    assert "file not found: nope.txt" in result["content"][0]["text"]
    assert isinstance(cmds[1], c.SendRequest)


def test_same_seed_same_commands_other_seed_other_delays():
    def delays(seed):
        m = AgentMachine(seed=seed)
        run = drive(m, lambda r: e.ProviderFailed(r.request, failure("server_error", 500)))
        return [x.delay_ms for x in run.commands() if isinstance(x, c.Sleep)]

    assert delays(5) == delays(5)
    assert len(delays(5)) == 3
    assert any(delays(s) != delays(5) for s in range(6, 12))


def test_a_non_retryable_failure_fails_the_run_with_a_readable_message():
    m = AgentMachine(seed=0)
    run = drive(m, lambda r: e.ProviderFailed(r.request, failure("auth_failed", 401)))
    assert isinstance(run.last, c.Fail)
    assert "auth_failed happened" in run.last.message
    assert m.outcome()["Err"]["type"] == "provider"


def test_every_command_and_event_converts_to_its_json_shape_and_back():
    m = AgentMachine(config={"tools": [READ_TOOL]}, seed=7)
    run = drive(m, outage_then_tool_then_answer())
    for _, event, cmds in run.steps:
        shape = event.to_json()
        assert Event.from_json(json.loads(json.dumps(shape))) == event
        for cmd in cmds:
            shape = cmd.to_json()
            back = Command.from_json(json.loads(json.dumps(shape)))
            assert type(back) is type(cmd)
            assert back.to_json() == shape
            if isinstance(cmd, c.SendRequest):
                assert back.conversation == cmd.conversation
                assert not back.conversation.has_messages
                assert cmd.conversation.has_messages


def test_the_json_shape_is_the_trace_format():
    m = AgentMachine(config={"tools": [READ_TOOL]}, seed=7, record=True)
    run = drive(m, outage_then_tool_then_answer())
    lines = [json.loads(line) for line in m.trace_jsonl().splitlines()]
    assert lines[0]["format"] == "rebound-trace" and lines[0]["seed"] == 7
    assert len(lines) - 1 == len(run.steps)
    for line, (t, event, cmds) in zip(lines[1:], run.steps):
        assert line["t_ms"] == t
        assert line["event"] == event.to_json()
        assert line["commands"] == [x.to_json() for x in cmds]


def test_a_machine_continues_a_saved_conversation():
    first = AgentMachine(seed=1)
    drive(first, lambda r: e.ProviderSucceeded(r.request, text_response("first")))
    saved = first.conversation().messages()
    second = AgentMachine(seed=1, conversation=saved)
    cmds = second.step(0, e.UserMessage.text("and now?"))
    assert len(cmds[1].conversation) == 3
    assert cmds[1].conversation.messages()[:2] == saved


def started(seed=0):
    m = AgentMachine(seed=seed)
    cmds = m.step(0, e.UserMessage.text("hi"))
    return m, cmds[1]


def finishes(m, request):
    cmds = m.step(50, e.ProviderSucceeded(request.request, text_response()))
    return isinstance(cmds[-1], c.Finish)


@pytest.mark.parametrize(
    "bad, error",
    [
        ({"type": "provider_failed", "request": 1}, EventError),
        ({"type": "no_such_event"}, EventError),
        ({"request": 1}, EventError),
        ({"type": "provider_failed", "request": 1, "failure": {"kind": "bogus", "message": "x"}}, EventError),
        ({"type": "provider_failed", "request": 1, "failure": {"kind": "unavailable", "message": float("nan")}}, EventError),
        ({"type": "provider_succeeded", "request": 1, "response": {"message": object()}}, EventError),
        ({"type": "provider_failed", "request": -3, "failure": failure("unavailable")}, EventError),
        ("{not json", EventError),
        (42, EventError),
        (e.ProviderFailed(99, failure("unavailable")), UnknownAnswerError),
        (e.TimerFired(1), UnknownAnswerError),
        (e.ToolsFinished.per_call(4, []), UnknownAnswerError),
        (e.UserMessage.text("a second message during the run"), UnexpectedEventError),
    ],
)
def test_bad_input_raises_a_typed_error_and_the_machine_stays_usable(bad, error):
    m, request = started()
    before = len(m.conversation())
    with pytest.raises(error) as info:
        m.handle(10, bad)
    assert isinstance(info.value, ReboundError) and isinstance(info.value, ValueError)
    assert str(info.value)
    assert m.poll() is None
    assert len(m.conversation()) == before
    assert finishes(m, request)


def test_deeply_nested_input_is_refused_not_a_crash():
    m, request = started()
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(EventError, match="nested deeper"):
        m.handle(10, {"type": "provider_failed", "request": 1, "failure": deep})
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(EventError):
        m.handle(10, {"type": "provider_failed", "request": 1, "failure": cyclic})
    assert finishes(m, request)


@pytest.mark.parametrize("now", [-1, 2**64, 1.5, "10", None, True])
def test_a_bad_time_is_a_typed_error(now):
    m, request = started()
    with pytest.raises((ReboundError, TypeError)):
        m.handle(now, e.Cancel())
    assert finishes(m, request)


def test_a_stale_answer_is_reported_not_raised():
    m, request = started()
    assert m.handle(5, e.ProviderFailed(request.request, failure("unavailable", 503))) == "accepted"
    assert m.handle(6, e.ProviderFailed(request.request, failure("unavailable", 503))) == "stale"
    m.handle(7, e.Cancel())
    assert m.handle(8, e.Cancel()) == "terminal"


@pytest.mark.parametrize(
    "config",
    [{"retry": {"max_attempts": "four"}}, "{oops", {"retry": {"multiplier": "x"}}, [1, 2], 7],
)
def test_a_bad_config_is_a_config_error(config):
    with pytest.raises(ConfigError):
        AgentMachine(config=config)


def test_a_config_is_read_with_defaults_filled_in():
    m = AgentMachine(config=json.dumps({"retry": {"max_attempts": 9}}))
    assert m.config()["retry"]["max_attempts"] == 9
    assert m.config()["retry"]["initial_delay_ms"] == 500


def test_a_partial_nested_config_takes_every_missing_setting_from_the_default():
    default = AgentMachine(config={}).config()
    m = AgentMachine(config={"retry": {"jitter": False}, "stream": {"idle_ms": 5000}})
    assert m.config()["retry"] == {**default["retry"], "jitter": False}
    assert m.config()["retry"]["fallback_after_ms"] == 30_000  # the documented default
    assert m.config()["stream"]["progress_ms"] == StreamDeadlines().progress_ms
    run = simulate("blip", seed=1, config={"machine": {"retry": {"jitter": False}}})
    assert read_trace(run.trace).header["config"]["retry"]["fallback_after_ms"] == 30_000


@pytest.mark.parametrize(
    "config, key",
    [
        ({"retyr": {"max_attempts": 9}}, "retyr"),
        ({"retry": {"max_atempts": 9}}, "max_atempts"),
        ({"stream": {"idle": 5}}, "idle"),
        ({"retry_budget": {"max_wait": 5}}, "max_wait"),
        ({"targets": [{"provider": "anthropic", "model": "m", "window": 5}]}, "window"),
    ],
)
def test_a_typo_in_a_config_is_a_config_error_naming_the_key(config, key):
    with pytest.raises(ConfigError, match=f"unknown field `{key}`"):
        AgentMachine(config=config)
    with pytest.raises(ConfigError, match=f"unknown field `{key}`"):
        simulate("blip", config={"machine": config})
    with pytest.raises(ConfigError, match="unknown field `machnie`"):
        simulate("blip", config={"machnie": config})


@pytest.mark.parametrize("config", [{"retry": [9, 100]}, {"stream": [5000, 60000]}, {"targets": [["anthropic", "m"]]}])
def test_settings_by_position_are_a_config_error(config):
    with pytest.raises(ConfigError, match="expected an object"):
        AgentMachine(config=config)


def test_an_event_dict_with_a_field_it_does_not_have_is_refused_as_from_json_refuses_it():
    m = AgentMachine()
    [_, send] = m.step(0, e.UserMessage.text("hi"))
    extra = {"type": "provider_responding", "request": send.request, "attempt": 1}
    with pytest.raises(EventError, match="unknown field `attempt`"):
        m.handle(5, extra)
    with pytest.raises(EventError):
        e.Event.from_json(extra)
    # The machine is untouched and goes on.
    assert m.handle(6, e.ProviderResponding(send.request)) == "accepted"


def test_a_trace_summary_snapshot_has_no_messages():
    s = Snapshot.from_json({"messages": 3, "digest": "00000000000000ff"})
    assert len(s) == 3 and s.digest == "00000000000000ff"
    with pytest.raises(ReboundError, match="only the message count"):
        s.messages()
    with pytest.raises(EventError):
        Snapshot.from_json({"messages": 3, "digest": "xyz"})


def test_a_snapshot_digest_matches_the_trace_of_the_same_conversation():
    m, request = started()
    assert Snapshot.of(request.conversation.messages()).digest == request.conversation.digest
    assert Snapshot.of(request.conversation.messages()) == request.conversation


@pytest.mark.parametrize(
    "outcomes, why",
    [
        (["toolu_1", "toolu_x"], "not a call"),  # an id the batch does not hold
        (["toolu_1", "toolu_1"], "two outcomes"),  # one call answered twice
        ([], "no outcome"),  # a call without its outcome
    ],
)
def test_tool_outcomes_that_do_not_answer_the_batch_are_refused_and_the_machine_waits(outcomes, why):
    m = AgentMachine(config={"tools": [READ_TOOL]}, seed=1)
    [_, send] = m.step(0, e.UserMessage.text("hi"))
    [_, run] = m.step(10, e.ProviderSucceeded(send.request, tool_response("toolu_1", "a.rs")))
    assert isinstance(run, c.RunTools)
    wrong = e.ToolsFinished.per_call(run.batch, [e.tool_ok(i, "text") for i in outcomes])
    with pytest.raises(EventError, match=why):
        m.handle(20, wrong)
    assert list(m.drain()) == [] and not m.is_terminal
    right = e.ToolsFinished.per_call(run.batch, [e.tool_ok("toolu_1", "text")])
    assert [type(x).__name__ for x in m.step(30, right)] == ["AppendMessage", "SendRequest"]
