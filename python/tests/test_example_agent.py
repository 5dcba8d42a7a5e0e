"""The example agent (examples/agent.py: asyncio, httpx, file tools) against `rebound serve`
and its fault scenarios, in every wire format."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, rebound_bin
from rebound_agent import replay

EXAMPLE = REPO / "python" / "examples" / "agent.py"
spec = importlib.util.spec_from_file_location("example_agent", EXAMPLE)
assert spec and spec.loader
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def base_url(url: str, provider: str) -> str:
    return url if provider == "anthropic" else url + "/v1"


def run(url, provider, tmp_path, seed=1):
    lines: list[str] = []
    trace = tmp_path / f"{provider}.jsonl"
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / "parse.rs").write_text("fn parse(input: &str) -> Ast { todo!() }\n")
    code = asyncio.run(
        example.run_agent(
            "Fix the failing test.",
            base_url(url, provider),
            provider=provider,
            root=tmp_path,
            seed=seed,
            trace=trace,
            say=lambda text, end="\n": lines.append(text + end),
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
def test_the_agent_survives_the_scripted_outage(serve, tmp_path, scenario, provider):
    code, out, trace = run(serve(scenario, seed=1), provider, tmp_path)
    assert code == 0, out
    assert "done after" in out
    report = replay(trace)
    assert report.identical, report.text
    assert report.outcome and "Ok" in report.outcome
    if scenario in ("demo", "blip", "rate-limit-window"):
        assert "retrying in" in out


@pytest.mark.parametrize("scenario", ["stream-cuts", "brownout"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_random_outage_ends_as_the_machine_decided(serve, tmp_path, scenario, seed):
    code, out, trace = run(serve(scenario, seed=seed), "anthropic", tmp_path, seed=seed)
    report = replay(trace)
    assert report.identical, report.text
    assert code == (0 if "Ok" in report.outcome else 1)
    assert "Traceback" not in out


def test_a_total_outage_fails_cleanly_after_the_policys_attempts(serve, tmp_path):
    code, out, trace = run(serve("total-outage"), "anthropic", tmp_path)
    assert code == 1
    assert "the run failed" in out
    assert out.count("retrying in") == 3  # four attempts, the default
    assert replay(trace).identical


def test_the_agent_reads_the_project_files_it_is_asked_for(tmp_path, serve):
    code, out, trace = run(serve("demo"), "anthropic", tmp_path)
    assert code == 0
    # The demo asks for src/parser.rs (missing: a tool error the model reads), then src/parse.rs.
    assert "file not found: src/parser.rs" in trace
    assert "todo!()" in trace


def test_the_readme_commands_run_the_agent(serve, tmp_path):
    url = serve("demo")
    p = subprocess.run(
        [sys.executable, str(EXAMPLE), "--base-url", url, "--root", str(tmp_path), "Fix the failing test."],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "ANTHROPIC_API_KEY": "x"},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "retrying in" in p.stdout and "done after" in p.stdout
