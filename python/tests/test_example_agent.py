"""The example agents against `rebound serve` and its fault scenarios, in every wire format:
examples/agent.py (asyncio, httpx) and examples/agent_sdk.py (the official `anthropic` and
`openai` SDKs with max_retries=0), both with file tools and the same loop."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import REPO, rebound_bin
from rebound_agent import replay

EXAMPLES = REPO / "python" / "examples"
# agent_sdk.py imports agent.py's loop and tools, as it does when run as a script.
sys.path.insert(0, str(EXAMPLES))


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AGENTS = {"httpx": load("agent"), "sdk": load("agent_sdk")}
both = pytest.mark.parametrize("agent", sorted(AGENTS))


def base_url(url: str, provider: str) -> str:
    return url if provider == "anthropic" else url + "/v1"


def run(url, provider, tmp_path, seed=1, agent="httpx", config=None):
    lines: list[str] = []
    trace = tmp_path / f"{provider}.jsonl"
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "parse.rs").write_text("fn parse(input: &str) -> Ast { todo!() }\n")
    code = asyncio.run(
        AGENTS[agent].run_agent(
            "Fix the failing test.",
            base_url(url, provider),
            provider=provider,
            root=tmp_path,
            seed=seed,
            trace=trace,
            say=lambda text, end="\n": lines.append(text + end),
            config=config,
        )
    )
    return code, "".join(lines), trace.read_text()


# Scenarios every run of which finishes (see `rebound sim --scenario NAME --runs 100`).
@pytest.mark.parametrize(
    "scenario, provider",
    [
        ("demo", "anthropic"),
        ("demo", "openai"),
        ("demo", "openai_responses"),
        ("blip", "anthropic"),
        ("rate-limit-window", "openai"),
        ("tool-errors", "anthropic"),
        ("overflow", "openai_responses"),
    ],
)
@both
def test_the_agent_survives_the_scripted_outage(serve, tmp_path, scenario, provider, agent):
    code, out, trace = run(serve(scenario, seed=1), provider, tmp_path, agent=agent)
    assert code == 0, out
    assert "done after" in out
    report = replay(trace)
    assert report.identical, report.text
    assert report.outcome and "Ok" in report.outcome
    if scenario in ("demo", "blip", "rate-limit-window"):
        assert "retrying in" in out
    # The server took every request as its API would (the SDK's parameters and extra_body
    # together sent the body rebound built).
    log = serve.last.requests()
    assert log and not any("rejected" in line for line in log), log


@pytest.mark.parametrize("scenario", ["stream-cuts", "brownout"])
@pytest.mark.parametrize("seed", [1, 2])
@both
def test_a_random_outage_ends_as_the_machine_decided(serve, tmp_path, scenario, seed, agent):
    code, out, trace = run(serve(scenario, seed=seed), "anthropic", tmp_path, seed=seed, agent=agent)
    report = replay(trace)
    assert report.identical, report.text
    assert code == (0 if "Ok" in report.outcome else 1)
    assert "Traceback" not in out


@both
def test_a_total_outage_fails_cleanly_after_the_policys_attempts(serve, tmp_path, agent):
    code, out, trace = run(serve("total-outage"), "anthropic", tmp_path, agent=agent)
    assert code == 1
    assert "the run failed" in out
    assert out.count("retrying in") == 3  # four attempts, the default
    assert replay(trace).identical
    # The server saw the machine's four attempts and no more: the client retried nothing.
    assert len(serve.last.requests()) == 4


@both
def test_the_agent_reads_the_project_files_it_is_asked_for(tmp_path, serve, agent):
    code, out, trace = run(serve("demo"), "anthropic", tmp_path, agent=agent)
    assert code == 0
    # The demo asks for src/parser.rs (missing: a tool error the model reads), then src/parse.rs.
    assert "file not found: src/parser.rs" in trace
    assert "todo!()" in trace


@pytest.mark.parametrize("script", ["agent.py", "agent_sdk.py"])
def test_the_readme_commands_run_the_agent(serve, tmp_path, script):
    url = serve("demo")
    p = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--base-url", url, "--root", str(tmp_path), "Fix the failing test."],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "ANTHROPIC_API_KEY": "x"},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "retrying in" in p.stdout and "done after" in p.stdout


# One of each failure the wire can carry, none of which a 4-attempt turn cannot outlast: a
# reset before any response (the SDK's APIConnectionError), an overloaded event inside a 200
# stream (the SDK would raise it as a status error with the 200), a body cut inside an event,
# invalid JSON in the stream, a 429 with a retry-after-ms hint and x-should-retry.
EVERY_FAILURE = {
    "name": "every-failure",
    "turns": [
        {
            "faults": [
                {"type": "transport", "fault": "reset"},
                {"type": "stream_error"},
                {"type": "stream_cut_bytes", "after_bytes": 300},
            ],
            "answer": {"text": "Reading it.", "tool_calls": [{"id": "toolu_01", "name": "read", "input": {"path": "src/parse.rs"}}]},
        },
        {
            "faults": [
                {"type": "malformed_stream"},
                {"type": "http", "status": 429, "headers": {"retry-after-ms": "150", "x-should-retry": "true"}},
            ],
            "answer": {"text": "Fixed."},
        },
    ],
}


@pytest.mark.parametrize("provider", ["anthropic", "openai", "openai_responses"])
def test_both_agents_tell_the_machine_the_same_failures(serve, tmp_path, provider):
    scenario = tmp_path / "every-failure.json"
    scenario.write_text(json.dumps(dict(EVERY_FAILURE, provider="openai" if provider != "anthropic" else provider)))
    told = {}
    for agent in sorted(AGENTS):
        code, out, trace = run(serve(str(scenario)), provider, tmp_path, agent=agent)
        assert code == 0, out
        assert replay(trace).identical
        steps = [json.loads(line) for line in trace.splitlines()[1:]]
        told[agent] = [
            (f["kind"], f.get("status"), f.get("transport"), f.get("retry_after_ms"))
            for f in (s["event"]["failure"] for s in steps if s["event"]["type"] == "provider_failed")
        ]
    assert told["sdk"] == told["httpx"]
    kinds = [k for k, *_ in told["sdk"]]
    assert kinds == ["transport", "unavailable", "stream_malformed", "stream_malformed", "rate_limited"], told
    assert told["sdk"][-1][1:] == (429, None, 150)


# A stream that stops after its first event for longer than the request's idle deadline.
STALL = {
    "name": "stall",
    "turns": [{"faults": [{"type": "stall", "ms": 3_000}], "answer": {"text": "Fixed."}}],
}


@both
def test_a_stream_silent_past_its_idle_deadline_is_reset_and_retried(serve, tmp_path, agent):
    scenario = tmp_path / "stall.json"
    scenario.write_text(json.dumps(STALL))
    config = {"stream": {"idle_ms": 400}}
    code, out, trace = run(serve(str(scenario)), "anthropic", tmp_path, agent=agent, config=config)
    assert code == 0, out
    assert replay(trace).identical
    steps = [json.loads(line) for line in trace.splitlines()[1:]]
    sends = [c for s in steps for c in s["commands"] if c["type"] == "send_request"]
    assert sends and all(c["deadlines"]["idle_ms"] == 400 for c in sends)
    kinds = [s["event"]["type"] for s in steps]
    failed = kinds.index("provider_failed")
    assert kinds[failed - 1] == "provider_responding"  # the answer had begun
    assert steps[failed]["event"]["failure"]["transport"] == "idle_timeout"
    # Told to the user before the retry's notice, and counted by the machine.
    assert out.index("the answer broke off") < out.index("retrying in")
    assert "stream resets: 1)" in out


async def chunks_at(times_and_chunks):
    """A body whose chunks come at the given offsets (s) from the first read."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for at, chunk in times_and_chunks:
        await asyncio.sleep(max(0.0, start + at - loop.time()))
        yield chunk


PING = b'event: ping\ndata: {"type": "ping"}\n\n'
START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    b'"role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
)
TEXT = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n'


def read_within(idle_ms, progress_ms, body):
    """What `within` makes of `body`: the chunks read, and the deadline missed (or None)."""
    agent = AGENTS["httpx"]
    decoder = agent.StreamDecoder("anthropic")
    deadlines = agent.StreamDeadlines(idle_ms, progress_ms)

    async def go():
        read = []
        try:
            async for chunk in agent.within(deadlines, chunks_at(body), decoder):
                decoder.feed(chunk)
                read.append(chunk)
        except agent.DeadlineMissed as missed:
            return read, str(missed)
        return read, None

    return asyncio.run(go())


def test_within_fails_a_stream_of_keep_alives_at_its_progress_deadline():
    body = [(0, START), *((0.05 * i, PING) for i in range(1, 40))]
    read, missed = read_within(10_000, 300, body)
    assert missed == "no content received in time (only keep-alives)"
    assert 4 <= len(read) <= 9  # pings kept coming; the content did not


def test_within_fails_a_silent_stream_at_its_idle_deadline():
    read, missed = read_within(200, 60_000, [(0, START), (5, TEXT)])
    assert (read, missed) == ([START], "no bytes received in time")


def test_within_fails_silence_at_the_progress_deadline_when_it_comes_first():
    read, missed = read_within(60_000, 200, [(0, START + TEXT), (5, TEXT)])
    assert (read, missed) == ([START + TEXT], "no content received in time (only keep-alives)")


def test_within_passes_a_stream_whose_content_keeps_coming():
    body = [(0, START), *((0.05 * i, TEXT if i % 2 else PING) for i in range(1, 12))]
    read, missed = read_within(200, 200, body)
    assert missed is None and len(read) == 12
