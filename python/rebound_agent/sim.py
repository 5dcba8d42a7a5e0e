"""The simulator and trace replay of rebound-sim, from Python.

- :func:`simulate` runs a scenario (a built-in name, its JSON text or a dict) once in virtual
  time; :func:`simulate_many` runs it for many seeds and returns the statistics
  ``rebound sim`` prints; :func:`simulate_fleet` runs many agents in one world, sharing one
  retry budget.
- :func:`outage_report` runs the outage experiment (``rebound sim --compare``).
- :class:`ScenarioTools` runs a scenario's scripted tools, for an agent tested against
  ``rebound serve --scenario``.
- :func:`replay` replays a trace (recorded by the Rust CLI, the runner, the simulator or an
  ``AgentMachine(record=True)``) into a fresh machine and reports the first divergence as
  ``rebound replay`` prints it; :func:`read_trace` reads one into typed steps.

Everything runs in Rust (without holding the GIL for the long runs); these wrappers only give
the results names and types.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from . import _native
from ._native import RunTally, TraceError
from .commands import Command
from .events import Event

__all__ = [
    "builtin_scenarios",
    "ScenarioTools",
    "simulate",
    "simulate_many",
    "simulate_fleet",
    "outage_report",
    "replay",
    "read_trace",
    "SimRun",
    "SimStats",
    "FleetRun",
    "SimFleet",
    "OutageReport",
    "ReplayReport",
    "Divergence",
    "Trace",
    "TraceStep",
]

ScenarioTools = _native.ScenarioTools
"""The tools a scenario scripts, for an agent tested against ``rebound serve --scenario``:
``specs()`` for the machine's ``tools``, ``run(calls)`` → ``(duration_ms, outcome)`` for a
``RunTools`` command (``ToolsFinished(batch, outcome)`` answers it)."""

Scenario = str | Mapping[str, Any]
"""A built-in scenario's name, a scenario's JSON text, or a dict of its JSON shape."""


def builtin_scenarios() -> list[str]:
    """The names of the built-in scenarios (``demo``, ``brownout``, …)."""
    return list(_native.builtin_scenarios())


@dataclass(frozen=True)
class SimRun:
    """One simulated run."""

    seed: int
    succeeded: bool
    result: dict[str, Any]
    """``{"Ok": finish_reason}`` or ``{"Err": run_error}``."""
    requests: int
    duration_ms: int
    """Virtual time from start to end."""
    retries: list[tuple[int, str]]
    """Each retry notice: its virtual time and status line."""
    tally: RunTally
    """What the run did, counted by rebound-core as every driver's run is (virtual times)."""
    trace: str
    """The run's trace (JSON Lines): :func:`replay` replays it."""


def simulate(scenario: Scenario, seed: int = 0, config: Mapping[str, Any] | None = None) -> SimRun:
    """Runs ``scenario`` once with ``seed``. ``config`` is a SimConfig in its JSON shape
    (``{"machine": MachineConfig, "max_steps", "budget"}``). Raises ConfigError for an
    unknown or bad scenario, SimulationError if the machine livelocks (a bug)."""
    d = _native.simulate(scenario, seed, config)
    d["retries"] = [tuple(r) for r in d["retries"]]
    d["tally"] = RunTally.from_json(d["tally"])
    return SimRun(**d)


@dataclass(frozen=True)
class SimStats:
    """Many seeded runs of one scenario, summarized as ``rebound sim`` does."""

    scenario: str
    runs: int
    succeeded: int
    success_rate: float
    failures: dict[str, int]
    """Failed runs per error kind."""
    sim_errors: int
    """Runs the simulator could not complete (machine bugs)."""
    first_sim_error: str | None
    mean_requests: float
    p99_requests: int
    retries: int
    p50_ms: int
    p99_ms: int
    per_run: list[tuple[int, bool, int, int]]
    """Each run: (seed, succeeded, requests, virtual ms)."""
    table: str
    """The Markdown table ``rebound sim`` prints."""

    def __str__(self) -> str:
        return self.table


def simulate_many(
    scenario: Scenario, runs: int = 100, first_seed: int = 0, config: Mapping[str, Any] | None = None
) -> SimStats:
    """Runs ``scenario`` ``runs`` times, seeds ``first_seed`` to ``first_seed + runs - 1``."""
    d = _native.simulate_many(scenario, runs, first_seed, config)
    d["per_run"] = [tuple(r) for r in d["per_run"]]
    return SimStats(**d)


@dataclass(frozen=True)
class FleetRun:
    """One agent of a simulated fleet."""

    seed: int
    succeeded: bool
    result: dict[str, Any]
    """``{"Ok": finish_reason}`` or ``{"Err": run_error}``."""
    requests: int
    started_ms: int
    ended_ms: int
    """When it started and ended, on the world's virtual clock."""


@dataclass(frozen=True)
class SimFleet:
    """A simulated fleet: each agent's run, and what the budget they shared did."""

    runs: list[FleetRun]
    """In the order the agents were given."""
    budget: dict[str, int] | None
    """The shared budget's stats (granted, denied, queued, deposited_milli), None without one."""

    @property
    def requests(self) -> int:
        """Requests the whole fleet sent."""
        return sum(r.requests for r in self.runs)


def simulate_fleet(
    scenario: Scenario, agents: Sequence[tuple[int, int]], config: Mapping[str, Any] | None = None
) -> SimFleet:
    """Runs one agent per ``(seed, start_ms)`` of ``agents`` in one world: one virtual clock
    and, when ``config["budget"]`` is set (a BudgetConfig), one retry budget they all share
    (a machine asks it only when ``config["machine"]["retry_budget"]`` is set). The Rust
    twin of a fleet of asyncio agents sharing a :class:`rebound_agent.SharedBudget`."""
    d = _native.simulate_fleet(scenario, list(agents), config)
    return SimFleet([FleetRun(**r) for r in d["runs"]], d["budget"])


@dataclass(frozen=True)
class OutageReport:
    """The outage experiment: every (outage model, policy) row."""

    table: str
    """The Markdown report ``rebound sim --compare`` prints."""
    rows: list[dict[str, Any]]
    """model, policy, agents, completed, success_rate, requests, requests_per_turn,
    p50_ms, p99_ms, peak_per_sec."""
    met: bool
    """Whether rebound met its bar (see docs/outages.md)."""
    misses: list[str]
    """Each rule of the bar rebound broke."""

    def __str__(self) -> str:
        return self.table


def outage_report(seed: int = 1, agents: int = 1000) -> OutageReport:
    """Runs the outage experiment with ``agents`` agents per outage model (the default
    1,000 and seed 1 are the tables of docs/outages.md; it takes a while)."""
    return OutageReport(**_native.outage_report(seed, agents))


@dataclass(frozen=True)
class Divergence:
    """The first step at which the replayed machine did something else."""

    step: int
    """0-based step index."""
    line: int
    """The trace's line (step + 2)."""
    t_ms: int
    event: dict[str, Any]
    command: int
    """0-based index of the first differing command."""
    expected: list[dict[str, Any]]
    actual: list[dict[str, Any]]


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found."""

    identical: bool
    steps: int
    commands: int | None
    """Commands compared (None when it diverged)."""
    outcome: dict[str, Any] | None
    """How the replayed run ended, if it did."""
    elapsed_ms: int
    divergence: Divergence | None
    text: str
    """What ``rebound replay`` prints for this trace."""

    def __bool__(self) -> bool:
        return self.identical

    def __str__(self) -> str:
        return self.text


def _text(trace: str | bytes | os.PathLike[str]) -> str | bytes:
    """The trace's text: ``trace`` itself, or the file it names. A trace's text starts with
    its JSON header (``{``), so a non-empty ``str`` that does not is taken as a path."""
    if isinstance(trace, str) and trace.strip() and not trace.lstrip().startswith("{"):
        trace = Path(trace)
    if isinstance(trace, os.PathLike):
        try:
            with open(trace, "rb") as f:
                return f.read()
        except OSError as error:
            raise TraceError(f"cannot read the trace file {os.fspath(trace)!r}: {error.strerror or error}") from None
    return trace


def replay(trace: str | bytes | os.PathLike[str]) -> ReplayReport:
    """Replays a trace (its text, or a path to its file as a ``str`` or a path). Raises
    TraceError for a trace that cannot be read (no such file, empty, another format or
    version, a bad or cut line)."""
    d = _native.replay(_text(trace))
    if d["divergence"] is not None:
        d["divergence"] = Divergence(**d["divergence"])
    return ReplayReport(**d)


@dataclass(frozen=True)
class TraceStep:
    """One step of a trace: an event at a time and the commands it produced."""

    t_ms: int
    event: Event
    commands: list[Command]


@dataclass(frozen=True)
class Trace:
    """A trace read into typed steps (commands' conversations are summaries)."""

    header: dict[str, Any]
    """``{"format", "version", "seed", "config", "initial_conversation"?, "meta"?}``."""
    steps: list[TraceStep]


def read_trace(trace: str | bytes | os.PathLike[str]) -> Trace:
    """Reads a trace (its text, or a path to its file as a ``str`` or a path); raises
    TraceError."""
    text = _text(trace)
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    d = _native.read_trace(text)
    steps = [
        TraceStep(s["t_ms"], Event.from_json(s["event"]), [Command.from_json(c) for c in s["commands"]])
        for s in d["steps"]
    ]
    return Trace(d["header"], steps)
