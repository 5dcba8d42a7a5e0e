"""The simulator, the outage report and trace replay from Python, against the Rust CLI."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import READ_TOOL, drive, failure, rebound_bin, text_response, tool_response
from rebound_agent import (
    AgentMachine,
    ConfigError,
    EventError,
    ScenarioTools,
    commands as c,
    TraceError,
    builtin_scenarios,
    events as e,
    outage_report,
    read_trace,
    replay,
    simulate,
    simulate_fleet,
    simulate_many,
)


@pytest.mark.parametrize("scenario", ["demo", "brownout", "stream-cuts", "overflow", "tool-errors"])
def test_a_simulated_run_replays_identically(scenario):
    run = simulate(scenario, seed=11)
    report = replay(run.trace)
    assert report.identical and report.divergence is None
    assert report.steps == len(run.trace.splitlines()) - 1
    assert report.outcome == run.result
    assert report.text == f"replayed {report.steps} steps and {report.commands} commands identically"


def test_a_run_is_a_pure_function_of_its_seed():
    assert simulate("brownout", seed=4) == simulate("brownout", seed=4)
    assert any(simulate("brownout", seed=s).trace != simulate("brownout", seed=4).trace for s in range(5, 10))


def test_many_runs_give_the_statistics_rebound_sim_prints():
    stats = simulate_many("brownout", runs=40, first_seed=100)
    assert stats.runs == 40 == len(stats.per_run)
    assert [r[0] for r in stats.per_run] == list(range(100, 140))
    assert stats.succeeded == sum(1 for r in stats.per_run if r[1])
    assert stats.succeeded + sum(stats.failures.values()) + stats.sim_errors == 40
    assert stats.table.splitlines()[0].startswith("| scenario |")
    out = subprocess.run(
        [rebound_bin(), "sim", "--scenario", "brownout", "--runs", "40", "--seed", "100"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert out.strip() == stats.table


def test_a_scenario_may_be_json_and_a_bad_one_is_a_config_error():
    assert "demo" in builtin_scenarios()
    with pytest.raises(ConfigError, match="no built-in scenario"):
        simulate("no-such-scenario")
    with pytest.raises(ConfigError):
        simulate('{"name": 3}')


def test_the_outage_report_names_every_policy_and_the_verdict():
    report = outage_report(seed=1, agents=20)
    policies = {r["policy"] for r in report.rows}
    assert "rebound" in policies and len(policies) > 2
    assert report.table.count("\n") >= len(report.rows)
    assert report.met == (not report.misses)
    for row in report.rows:
        assert 0.0 <= row["success_rate"] <= 1.0
        assert row["completed"] <= row["agents"] == 20


def cli_replay(path) -> tuple[int, str]:
    p = subprocess.run([rebound_bin(), "replay", str(path)], capture_output=True, text=True)
    return p.returncode, p.stdout


@pytest.mark.parametrize("scenario", ["demo", "rate-limit-window", "total-outage"])
def test_a_trace_recorded_by_rebound_sim_replays_from_python(tmp_path, scenario):
    path = tmp_path / "sim.jsonl"
    subprocess.run(
        [rebound_bin(), "sim", "--scenario", scenario, "--seed", "3", "--trace-out", str(path)],
        check=True, capture_output=True,
    )
    report = replay(path)
    assert report.identical, report.text
    assert report.text == cli_replay(path)[1].strip()


def test_a_trace_recorded_by_rebound_run_against_rebound_serve_replays_from_python(tmp_path, serve):
    url = serve("demo", seed=2)
    path = tmp_path / "run.jsonl"
    subprocess.run(
        [rebound_bin(), "run", "--base-url", url, "--model", "claude-sonnet-4-5", "--seed", "9",
         "--trace", str(path), "Fix the failing test."],
        check=True, capture_output=True, timeout=120,
        env={**os.environ, "ANTHROPIC_API_KEY": "test-key-not-secret"},
    )
    text = path.read_text()
    assert "test-key-not-secret" not in text
    report = replay(text)
    assert report.identical, report.text
    assert report.steps > 5
    trace = read_trace(path)
    assert trace.header["seed"] == 9
    kinds = {s.event.type for s in trace.steps}
    assert {"user_message", "provider_failed", "timer_fired", "provider_succeeded"} <= kinds


def test_a_divergence_is_reported_as_the_cli_reports_it(tmp_path):
    lines = simulate("demo", seed=3).trace.splitlines()
    step = next(i for i, line in enumerate(lines[1:]) if '"type":"sleep"' in line)
    record = json.loads(lines[step + 1])
    for c in record["commands"]:
        if c["type"] == "sleep":
            c["delay_ms"] += 1
    lines[step + 1] = json.dumps(record)
    path = tmp_path / "altered.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = replay(path)
    assert not report.identical
    d = report.divergence
    assert (d.step, d.line) == (step, step + 2)
    assert d.expected[d.command]["delay_ms"] == d.actual[d.command]["delay_ms"] + 1
    code, printed = cli_replay(path)
    assert code == 1
    assert report.text.strip() == printed.strip()


def test_a_trace_recorded_in_python_replays_in_the_cli(tmp_path):
    m = AgentMachine(config={"tools": [READ_TOOL]}, seed=21, record=True)
    script = iter([
        lambda r: e.ProviderFailed(r.request, failure("unavailable", 529)),
        lambda r: e.ProviderFailed(r.request, failure("rate_limited", 429, retry_after_ms=1200)),
        lambda r: e.ProviderSucceeded(r.request, tool_response("call_1", "a.txt")),
    ])
    drive(m, lambda r: next(script, lambda r: e.ProviderSucceeded(r.request, text_response()))(r))
    path = tmp_path / "python.jsonl"
    path.write_text(m.trace_jsonl())
    assert replay(path).identical
    code, printed = cli_replay(path)
    assert code == 0, printed
    assert printed.strip() == replay(path).text


def test_a_typed_trace_converts_back_to_the_recorded_json():
    text = simulate("overflow", seed=1).trace
    raw = [json.loads(line) for line in text.splitlines()[1:]]
    trace = read_trace(text)
    for step, line in zip(trace.steps, raw):
        assert step.event.to_json() == line["event"]
        assert [c.to_json() for c in step.commands] == line["commands"]


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty"),
        ('{"format":"other-trace","version":1}\n', "not a rebound trace"),
        ('{"format":"rebound-trace","version":99}\n', "version 99"),
        (None, "line 3"),
    ],
)
def test_an_unreadable_trace_is_a_trace_error(text, match):
    if text is None:
        lines = simulate("demo").trace.splitlines()
        lines[2] = "{not json"
        text = "\n".join(lines) + "\n"
    with pytest.raises(TraceError, match=match):
        replay(text)


SCRIPTED_TOOLS = {
    "name": "scripted-tools",
    "turns": [
        {"answer": {"tool_calls": [
            {"id": "toolu_a", "name": "read", "input": {"path": "a.rs"}, "outcome": {"type": "ok", "text": "fn a() {}"}},
            {"id": "toolu_b", "name": "read", "input": {"path": "b.rs"},
             "outcome": {"type": "error", "message": "no such file"}, "duration_ms": 700},
        ]}},
        {"answer": {"tool_calls": [{"id": "toolu_c", "name": "read", "input": {}}], "batch_error": {"type": "error", "message": "the tool server is gone"}}},
        {"answer": {"text": "Done."}},
    ],
}


def test_scenario_tools_answer_as_the_scenario_scripts_them():
    tools = ScenarioTools(SCRIPTED_TOOLS)
    assert "read" in [s["name"] for s in tools.specs()]
    calls = [{"id": "toolu_a", "name": "read", "input": {"path": "a.rs"}},
             {"id": "toolu_b", "name": "read", "input": {"path": "b.rs"}},
             {"id": "toolu_x", "name": "read", "input": {}}]
    ms, outcome = tools.run(calls)
    assert ms == 700  # the slowest call
    [a, b, x] = outcome["per_call"]
    assert (a["tool_use_id"], b["tool_use_id"], x["tool_use_id"]) == ("toolu_a", "toolu_b", "toolu_x")
    assert "fn a() {}" in json.dumps(a) and "no such file" in json.dumps(b)
    assert "read finished" in json.dumps(x)  # unscripted: succeeds
    # A scripted batch error fails the whole batch; the machine takes the outcome as it is.
    _, whole = tools.run([{"id": "toolu_c", "name": "read", "input": {}}])
    assert "the tool server is gone" in json.dumps(whole["whole_batch"])
    m = AgentMachine(config={"tools": tools.specs()}, seed=1)
    [_, send] = m.step(0, e.UserMessage.text("hi"))
    [_, run] = m.step(10, e.ProviderSucceeded(send.request, tool_response("toolu_a", "a.rs")))
    assert isinstance(run, c.RunTools)
    _, outcome = tools.run(run.calls)
    # The result is appended and the conversation goes back to the model.
    assert [type(x).__name__ for x in m.step(20, e.ToolsFinished(run.batch, outcome))] == [
        "AppendMessage", "SendRequest"]


def test_scenario_tools_refuse_bad_scenarios_and_calls_with_typed_errors():
    with pytest.raises(ConfigError):
        ScenarioTools("no-such-scenario")
    with pytest.raises(EventError):
        ScenarioTools("tool-errors").run([{"name": "read"}])


def test_replay_reads_a_trace_file_named_by_a_str_path(tmp_path):
    trace = simulate("blip", seed=1).trace
    path = tmp_path / "run.jsonl"
    path.write_text(trace)
    assert replay(str(path)).identical and replay(path).identical
    assert len(read_trace(str(path)).steps) == len(read_trace(trace).steps)
    with pytest.raises(TraceError, match="cannot read the trace file"):
        replay(str(tmp_path / "missing.jsonl"))


@pytest.mark.parametrize(
    "call",
    [
        lambda: simulate("blip", seed=-1),
        lambda: simulate("blip", seed=2**64),
        lambda: simulate_many("blip", runs=-1),
        lambda: simulate_many("blip", runs=2**32),
        lambda: simulate_many("blip", first_seed=-5),
        lambda: outage_report(agents=-1),
        lambda: simulate_fleet("blip", [(-1, 0)]),
    ],
)
def test_numbers_out_of_range_are_config_errors_not_overflow_errors(call):
    with pytest.raises(ConfigError, match="must be|invalid"):
        call()


def test_a_number_of_the_wrong_type_is_a_type_error():
    with pytest.raises(TypeError):
        simulate("blip", seed="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        simulate("blip", seed=True)  # type: ignore[arg-type]
