"""rebound for Python agents: the sans-IO agent machine of rebound-core, its wire helpers,
the simulator and trace replay of rebound-sim.

Keep your own HTTP client or SDK (with its retries off); let rebound decide. Drive the machine
like this::

    from rebound_agent import AgentMachine, commands as c, events as e

    machine = AgentMachine(config={"tools": [...]}, seed=42)
    machine.handle(now_ms(), e.UserMessage.text("Fix the failing test."))
    while True:
        for command in machine.drain():
            match command:
                case c.SendRequest(): ...   # send; answer ProviderSucceeded/ProviderFailed
                case c.Sleep(): ...         # wait delay_ms; answer TimerFired
                case c.RunTools(): ...      # run; answer ToolsFinished
                case c.Finish() | c.Fail(): ...

Agents of one process that share a retry budget answer ``AcquirePermit`` and ``NoteBudget``
with one :class:`SharedBudget` (see :mod:`rebound_agent.budget`).

Every decision (retry or not, how long to wait, compaction, tool error results, failing) is
made by the Rust crates; this package only converts and forwards. Bad input raises a
:class:`ReboundError` subclass and leaves the machine as it was.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

from . import budget, commands, events, sim
from ._native import (
    BudgetError,
    ConfigError,
    EventError,
    Machine as _Machine,
    ReboundError,
    RequestError,
    SimulationError,
    Snapshot,
    StreamDecoder,
    StreamError,
    TraceError,
    UnexpectedEventError,
    UnknownAnswerError,
    classify_http,
    classify_transport,
    compact,
    parse_response,
    request_body,
    request_path,
)
from .budget import RetryBudget, SharedBudget
from .commands import Command
from .events import Event
from .sim import (
    builtin_scenarios,
    outage_report,
    read_trace,
    replay,
    simulate,
    simulate_fleet,
    simulate_many,
)

__all__ = [
    "AgentMachine",
    "Snapshot",
    "Command",
    "Event",
    "commands",
    "events",
    "ReboundError",
    "ConfigError",
    "EventError",
    "UnknownAnswerError",
    "UnexpectedEventError",
    "StreamError",
    "TraceError",
    "RequestError",
    "SimulationError",
    "BudgetError",
    "sim",
    # the shared retry budget
    "budget",
    "RetryBudget",
    "SharedBudget",
    # wire helpers
    "request_body",
    "request_path",
    "parse_response",
    "StreamDecoder",
    "classify_http",
    "classify_transport",
    "compact",
    # simulator and replay
    "builtin_scenarios",
    "simulate",
    "simulate_many",
    "simulate_fleet",
    "outage_report",
    "replay",
    "read_trace",
]

_from_native = commands._from_native


class AgentMachine:
    """An agent loop as a pure state machine: it decides, your driver acts.

    Methods, by kind:

    - getters: :meth:`conversation`, :attr:`turns`, :attr:`target`, :attr:`is_terminal`,
      :meth:`outcome`, :meth:`config`, :attr:`seed`;
    - input: :meth:`handle` ``(now_ms, event)`` — the user's message, provider answers,
      tool outcomes, timers, compaction results, budget permits, host failures, cancel;
    - output: :meth:`poll` — the next command, or None. Drain it after **every** handle
      (:meth:`drain` does), executing commands in order. :meth:`step` is both.

    ``now_ms`` is any monotonic millisecond clock of yours (it must not go backwards; with
    a shared retry budget, the budget's clock). ``seed`` drives retry jitter, nothing else:
    commands are a pure function of (config, seed, events), so a trace replays exactly.
    ``config`` is a MachineConfig in its JSON shape (dict or JSON text; missing fields take
    their defaults), ``conversation`` a saved conversation (list of messages) to continue.
    With ``record=True`` the machine keeps a trace of its run (:meth:`trace_jsonl`).
    """

    __slots__ = ("_m",)

    def __init__(
        self,
        config: Mapping[str, Any] | str | None = None,
        seed: int = 0,
        conversation: list[Any] | str | None = None,
        record: bool = False,
    ) -> None:
        self._m = _Machine(config, seed, conversation, record)

    def handle(self, now_ms: int, event: Event | Mapping[str, Any]) -> str:
        """Feeds one event at ``now_ms``. Returns ``"accepted"``, or ``"stale"`` (an answer
        the machine no longer waits for: normal after a cancel or a race) or ``"terminal"``
        (the run already ended).

        Raises :class:`EventError` for a malformed event, :class:`UnknownAnswerError` for an
        answer to a command this machine never emitted, :class:`UnexpectedEventError` for
        an event it did not ask for (a second user message during a run); the machine is
        unchanged and stays usable.
        """
        return self._m.handle(now_ms, event)

    def poll(self) -> Command | None:
        """The next command to execute, or None."""
        raw = self._m.poll()
        if raw is None:
            return None
        return _from_native(*raw)

    def drain(self) -> Iterator[Command]:
        """Every queued command, in order (poll until None)."""
        poll = self._m.poll
        while (raw := poll()) is not None:
            yield _from_native(*raw)

    def step(self, now_ms: int, event: Event | Mapping[str, Any]) -> list[Command]:
        """:meth:`handle` followed by draining :meth:`poll`."""
        self._m.handle(now_ms, event)
        return list(self.drain())

    def conversation(self) -> Snapshot:
        """The conversation as it stands (only complete messages), shared, not copied."""
        return self._m.conversation()

    @property
    def turns(self) -> int:
        """Assistant messages appended in this run."""
        return self._m.turns

    @property
    def target(self) -> int:
        """Index of the target requests currently go to."""
        return self._m.target

    @property
    def is_terminal(self) -> bool:
        """Whether the run finished or failed."""
        return self._m.is_terminal

    @property
    def seed(self) -> int:
        """The jitter seed."""
        return self._m.seed

    def outcome(self) -> dict[str, Any] | None:
        """How the run ended: ``{"Ok": finish_reason}`` or ``{"Err": run_error}``; None
        while it runs."""
        return self._m.outcome()

    def config(self) -> dict[str, Any]:
        """The configuration in its JSON shape, every default filled in."""
        return self._m.config()

    def trace_jsonl(self) -> str:
        """The run so far as a rebound trace (JSON Lines), replayable by ``replay`` and
        ``rebound replay``. Only for a machine made with ``record=True``."""
        return self._m.trace_jsonl()

    def __repr__(self) -> str:
        state = "terminal" if self.is_terminal else "running"
        return f"AgentMachine(seed={self.seed}, turns={self.turns}, {state})"
