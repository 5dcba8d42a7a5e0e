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
                case c.StreamReset(): ...   # the partial text shown is void
                case c.Finish() | c.Fail(): ...

Agents of one process that share a retry budget answer ``AcquirePermit`` and ``NoteBudget``
with one :class:`SharedBudget` (see :mod:`rebound_agent.budget`).

Every decision (retry or not, how long to wait, compaction, tool error results, failing) is
made by the Rust crates, and so is the run's tally (:attr:`AgentMachine.tally`); this package
only converts and forwards. A bad value (a malformed event or configuration, a number out
of range, a negative seed) raises a :class:`ReboundError` subclass (``ConfigError``,
``EventError``, ``RequestError``, ``TraceError``…) and leaves the machine as it was; an
argument of the wrong Python type (a ``str`` where an ``int`` goes) raises ``TypeError``.

Threads: a machine, a :class:`StreamDecoder` and a :class:`RetryBudget` may be reached from
several threads (a retry budget is meant to be shared by a process's agents). Calls take
turns: a call waits, with the GIL released, while another thread's call on the same object
runs, so none ever sees another half done. A machine's events and commands are still one
sequence, though: drive each machine from one loop. Only a call made from inside another
call on the same object (Python code such as a ``__del__`` running while it works) is
refused, with :class:`ReentrantCallError`.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from . import budget, commands, events, sim
from ._native import (
    BudgetError,
    ConfigError,
    EventError,
    Machine as _Machine,
    ReboundError,
    ReentrantCallError,
    RequestError,
    RunTally,
    SimulationError,
    Snapshot,
    StreamDeadlines,
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
    ScenarioTools,
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
    "RunTally",
    "StreamDeadlines",
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
    "ReentrantCallError",
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
    "ScenarioTools",
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

    It is one run of rebound-core's machine, driven through core's ``Run`` as the Rust
    runner and the simulator drive theirs: the tally, the trace, the stream resets and the
    run's end are core's, counted and decided there.

    Methods, by kind:

    - getters: :meth:`conversation`, :attr:`turns`, :attr:`target`, :attr:`is_terminal`,
      :meth:`outcome`, :attr:`tally`, :meth:`config`, :attr:`seed`;
    - input: :meth:`handle` ``(now_ms, event)`` — the user's message, provider answers
      (and ``ProviderResponding``, the start of one), tool outcomes, timers, compaction
      results, budget permits, host failures, cancel;
    - output: :meth:`poll` — the next command, or None. Drain it after **every** handle
      (:meth:`drain` does), executing commands in order: the next handle drops what was not
      polled. :meth:`step` is both. Besides the machine's commands it hands out
      :class:`~rebound_agent.commands.StreamReset` when an answer that had begun failed;
    - helpers: :meth:`compact_default` answers a ``Compact`` with core's compaction under
      this machine's policy.

    ``now_ms`` is any monotonic millisecond clock of yours (it must not go backwards; with
    a shared retry budget, the budget's clock). ``seed`` drives retry jitter, nothing else:
    commands are a pure function of (config, seed, events), so a trace replays exactly.
    ``config`` is a MachineConfig in its JSON shape (dict or JSON text; missing fields take
    their defaults), ``conversation`` a saved conversation (list of messages) to continue.
    With ``record=True`` the machine keeps a trace of its run (:meth:`trace_jsonl`).

    ``secrets`` names your secrets (API keys, tokens; a ``str`` or several, each at least 8
    bytes): every failure the machine is told of (a provider's message, error type and
    request id, a tool's or host's failure message, a compactor's error) has them replaced
    by ``***`` before the machine takes it in, so no notice, tool error result sent to the
    model, run error, outcome or trace holds one. Words shaped like ``sk-…`` keys are
    masked whatever is named. The conversation itself (the person's messages, the model's
    answers, tool outputs) is left as it is. The wire helpers (:func:`classify_http`,
    :func:`classify_transport`, :class:`StreamDecoder`, :func:`parse_response`) take
    ``secrets=`` too, for what you show before the machine sees it.
    """

    __slots__ = ("_m",)

    def __init__(
        self,
        config: Mapping[str, Any] | str | None = None,
        seed: int = 0,
        conversation: list[Any] | str | None = None,
        record: bool = False,
        secrets: str | Iterable[str] | None = None,
    ) -> None:
        self._m = _Machine(config, seed, conversation, record, secrets)

    def handle(self, now_ms: int, event: Event | Mapping[str, Any]) -> str:
        """Feeds one event at ``now_ms``. Returns ``"accepted"``, or ``"stale"`` (an answer
        the machine no longer waits for: normal after a cancel or a race) or ``"terminal"``
        (the run already ended).

        Raises :class:`EventError` for a malformed event, :class:`UnknownAnswerError` for an
        answer to a command this machine never emitted, :class:`UnexpectedEventError` for
        an event it did not ask for (a second user message during a run); the machine is
        unchanged and stays usable.

        Commands of the previous event not polled yet are dropped: the new event supersedes
        them. So drain after every handle, ``ProviderResponding``'s too (its only commands
        are ``NoteBudget``, for a shared retry budget).

        The clock never goes backwards: a ``now_ms`` earlier than one handed before is taken
        as that one, by the machine and in the trace and the tally.
        """
        return self._m.handle(now_ms, event)

    def poll(self) -> Command | None:
        """The next command to execute, or None. A
        :class:`~rebound_agent.commands.StreamReset` comes first after a ``ProviderFailed``
        that cut an answer which had begun."""
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
        while it runs. A ``HostFailed`` after the finish (the last answer could not be
        stored or shown) turns it into ``{"Err": ...}``."""
        return self._m.outcome()

    @property
    def tally(self) -> RunTally:
        """What the run did so far, counted by rebound-core from the events and commands
        (as the Rust runner and the simulator count theirs): ``requests``, ``retries``,
        ``retry_wait_ms``, ``tool_calls``, ``tool_errors``, ``compactions``, ``fallbacks``,
        ``stream_resets``, the tokens reported (``input_tokens``, ``output_tokens``,
        ``cache_read_tokens``, ``cache_creation_tokens``), ``usage`` per request and
        ``elapsed_ms``; ``to_json()`` has them all. A snapshot: read it again for later
        counts."""
        return self._m.tally

    def compact_default(self, conversation: Snapshot | list[Any]) -> dict[str, Any]:
        """rebound-core's compaction of ``conversation`` with this machine's compaction
        policy (its config's ``compaction``): the ``result`` of ``CompactionFinished``,
        ``{"Ok": messages}`` or ``{"Err": why}``. For a ``Compact`` command, when you have
        no compactor of your own."""
        return self._m.compact_default(conversation)

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
