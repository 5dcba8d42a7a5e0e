"""Shared helpers: a scripted driver of the machine, as an agent would write one."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from rebound_agent import AgentMachine, commands as c, events as e


def text_response(text: str = "done") -> dict[str, Any]:
    """An assistant response that ends the turn."""
    return {
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }


def tool_response(call_id: str, path: str) -> dict[str, Any]:
    """An assistant response asking for the `read` tool."""
    return {
        "message": {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": call_id, "name": "read", "input": {"path": path}}],
        },
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def failure(kind: str, status: int | None = None, **extra: Any) -> dict[str, Any]:
    """A classified ProviderFailure."""
    f: dict[str, Any] = {"kind": kind, "message": f"{kind} happened"}
    if status is not None:
        f["status"] = status
    f.update(extra)
    return f


READ_TOOL = {"name": "read", "description": "Reads a file.", "input_schema": {"type": "object"}}


class Run:
    """What a driven run saw: every step's event, its commands, and the time."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, e.Event, list[c.Command]]] = []
        self.lengths: list[tuple[int, int]] = []  # conversation length before/after each step

    def commands(self) -> Iterable[c.Command]:
        for _, _, cmds in self.steps:
            yield from cmds

    @property
    def last(self) -> c.Command:
        return self.steps[-1][2][-1]


def drive(
    machine: AgentMachine,
    answer: Callable[[c.SendRequest], e.Event],
    prompt: str = "Fix the failing test.",
    max_steps: int = 500,
) -> Run:
    """Runs the machine to its end: `answer` answers each request; sleeps advance the clock;
    tools answer with the file's name."""
    run = Run()
    now = 0
    inbox: list[e.Event] = [e.UserMessage.text(prompt)]
    for _ in range(max_steps):
        if not inbox:
            break
        event = inbox.pop()
        before = len(machine.conversation())
        cmds = machine.step(now, event)
        run.lengths.append((before, len(machine.conversation())))
        run.steps.append((now, event, cmds))
        for cmd in cmds:
            match cmd:
                case c.SendRequest():
                    now += 10
                    inbox.append(answer(cmd))
                case c.Sleep(timer=timer, delay_ms=delay):
                    now += delay
                    inbox.append(e.TimerFired(timer))
                case c.RunTools(batch=batch, calls=calls):
                    inbox.append(
                        e.ToolsFinished.per_call(batch, [e.tool_ok(x["id"], x["input"]["path"]) for x in calls])
                    )
                case c.Compact():
                    raise AssertionError("no compaction expected in these runs")
                case c.AcquirePermit(permit=permit):
                    inbox.append(e.PermitAnswered(permit, "granted"))
    assert machine.is_terminal, "the run did not end"
    return run


# --- the Rust CLI (`rebound`), for traces it records and the fake provider it serves ---

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def rebound_bin() -> str:
    """The `rebound` binary: $REBOUND_BIN, else the workspace's newer build (release or
    debug), else one on PATH. Tests that need it skip without it, unless
    REBOUND_REQUIRE_CLI=1 (CI)."""
    builds = [REPO / "target" / p / "rebound" for p in ("release", "debug")]
    builds = sorted((b for b in builds if b.exists()), key=lambda b: b.stat().st_mtime, reverse=True)
    candidates = [os.environ.get("REBOUND_BIN"), *map(str, builds), shutil.which("rebound")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    message = "the rebound CLI is not built: cargo build -p rebound-cli, or set REBOUND_BIN"
    if os.environ.get("REBOUND_REQUIRE_CLI") == "1":
        pytest.fail(message)
    pytest.skip(message)


class Server:
    """`rebound serve` on a free port, stopped when the test ends."""

    def __init__(self, scenario: str, seed: int = 0) -> None:
        # Its request log goes to stderr: a file, so that a long run never fills a pipe.
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [rebound_bin(), "serve", "--scenario", scenario, "--seed", str(seed)],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://"), f"rebound serve printed {self.url!r}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def requests(self) -> list[str]:
        """Stops the server and returns its request log: one line per request it received
        (`#0 +2881ms POST /v1/messages [anthropic] conversation 0 at 0ms -> fault: …`)."""
        self.stop()
        self.log.seek(0)
        lines = self.log.read().decode("utf-8", errors="replace").splitlines()
        return [line for line in lines if line.startswith("#")]


class Serve:
    """The `serve` fixture: `serve(NAME, seed=0)` starts `rebound serve --scenario NAME` and
    returns its base URL; `serve.last` is the last server started."""

    def __init__(self) -> None:
        self.servers: list[Server] = []

    def __call__(self, scenario: str, seed: int = 0) -> str:
        server = Server(scenario, seed)
        self.servers.append(server)
        return server.url

    @property
    def last(self) -> Server:
        return self.servers[-1]


@pytest.fixture
def serve():
    """Starts `rebound serve --scenario NAME`; returns its base URL."""
    start = Serve()
    yield start
    for s in start.servers:
        s.stop()
