"""Commands: what the machine tells its driver to do, as typed objects.

Five commands want an answer (an event carrying their id): :class:`SendRequest`,
:class:`Sleep`, :class:`RunTools`, :class:`Compact` and :class:`AcquirePermit`; the machine
never emits a second while one is unanswered. The rest are done in order and answered by
nothing. :class:`Finish` and :class:`Fail` end the run. One more comes from the run rather
than the machine, among the commands and in order: :class:`StreamReset`, when an answer that
had begun (``ProviderResponding``) failed; it is never in a trace.

Conversations are :class:`Snapshot` objects: shared with the machine, not copied; call
``snapshot.messages()`` for their JSON shape, or pass the snapshot to ``request_body``.
Each command converts to and from the JSON shape of the trace format (``to_json`` /
``Command.from_json``); there a conversation is its summary ``{"messages": n, "digest"}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping

from ._native import EventError, Snapshot, StreamDeadlines, describe

Json = Any
"""A value in its JSON shape: dicts, lists, str, int, float, bool, None."""

__all__ = [
    "Command",
    "AppendMessage",
    "SendRequest",
    "Sleep",
    "NotifyRetry",
    "NotifyFallback",
    "Compact",
    "ReplaceConversation",
    "RunTools",
    "AcquirePermit",
    "NoteBudget",
    "Finish",
    "Fail",
    "StreamReset",
    "StreamDeadlines",
]


@dataclass(frozen=True, slots=True)
class Command:
    """Base of every command. ``type`` is the command's tag in the trace format."""

    type: ClassVar[str] = ""
    answered_by: ClassVar[str | None] = None
    """The event type that answers this command, or None."""

    @property
    def is_terminal(self) -> bool:
        """Whether this command ends the run (Finish or Fail)."""
        return False

    def to_json(self) -> dict[str, Json]:
        """The command as a trace writes it (conversations as their summary)."""
        out: dict[str, Json] = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (Snapshot, StreamDeadlines)):
                value = value.to_json()
            out[f.name] = value
        return out

    @staticmethod
    def from_json(value: Mapping[str, Json]) -> "Command":
        """The typed command of a JSON-shaped one (a trace step's command); a conversation
        becomes a Snapshot holding only its summary. Raises :class:`EventError` for an
        unknown type or missing fields."""
        if not isinstance(value, Mapping):
            raise EventError(f"a command must be a dict, got {type(value).__name__}")
        tag = value.get("type")
        cls = _COMMANDS.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise EventError(
                f"unknown command type {tag!r}; expected one of {', '.join(sorted(_COMMANDS))}"
            )
        return cls._from_fields(value)

    @classmethod
    def _from_fields(cls, value: Mapping[str, Json]) -> "Command":
        kwargs: dict[str, Json] = {}
        for f in fields(cls):
            if f.name in value:
                v = value[f.name]
                if f.name == "conversation":
                    v = Snapshot.from_json(v)
                elif f.name == "deadlines":
                    v = StreamDeadlines.from_json(v)
                kwargs[f.name] = v
        try:
            return cls(**kwargs)
        except TypeError as e:
            raise EventError(f"command {cls.type!r}: {e}") from None


@dataclass(frozen=True, slots=True)
class AppendMessage(Command):
    """Persist and show a complete message (the machine already appended it)."""

    type: ClassVar[str] = "append_message"
    message: Json


@dataclass(frozen=True, slots=True)
class SendRequest(Command):
    """Send ``conversation`` to target ``target`` (attempt ``attempt``, 1-based); answer with
    ProviderSucceeded or ProviderFailed carrying ``request``. ``purpose`` is ``"turn"`` or
    ``"summary"`` (a compaction's summary request, whose answer is not appended).

    ``deadlines`` (always given, from the machine's ``stream`` config) bound the answer: no
    byte for ``deadlines.idle_ms`` fails the attempt, and no content (text, thinking, a tool
    call or its input: ``StreamDecoder.progressed``) for ``deadlines.progress_ms`` fails it
    too; answer then with ProviderFailed, e.g. ``classify_transport(..., timed_out=True,
    response_started=...)``."""

    type: ClassVar[str] = "send_request"
    answered_by: ClassVar[str | None] = "provider_succeeded | provider_failed"
    request: int
    target: int
    attempt: int
    conversation: Snapshot
    purpose: str = "turn"
    deadlines: StreamDeadlines = field(default_factory=StreamDeadlines)

    def to_json(self) -> dict[str, Json]:
        out = Command.to_json(self)
        if out.get("purpose") == "turn":
            del out["purpose"]
        if self.deadlines.is_default:
            del out["deadlines"]
        return out


@dataclass(frozen=True, slots=True)
class Sleep(Command):
    """Wait ``delay_ms`` (already jittered), then answer with TimerFired carrying ``timer``."""

    type: ClassVar[str] = "sleep"
    answered_by: ClassVar[str | None] = "timer_fired"
    timer: int
    delay_ms: int


@dataclass(frozen=True, slots=True)
class NotifyRetry(Command):
    """A retry is coming (before its Sleep). ``info``: attempt, max_attempts, delay_ms,
    kind, status, retry_after_ms, message, target. ``text`` is the status line."""

    type: ClassVar[str] = "notify_retry"
    info: Json

    @property
    def text(self) -> str:
        """E.g. ``provider unavailable: retrying in 2.4s (attempt 2/4)``."""
        return describe("retry_info", self.info)


@dataclass(frozen=True, slots=True)
class NotifyFallback(Command):
    """The next request goes to a fallback target. ``info``: from, to, labels, kind,
    message."""

    type: ClassVar[str] = "notify_fallback"
    info: Json

    @property
    def text(self) -> str:
        """The status line."""
        return describe("fallback_info", self.info)


@dataclass(frozen=True, slots=True)
class Compact(Command):
    """Compact ``conversation`` (e.g. with :func:`rebound_agent.compact`); answer with
    CompactionFinished carrying ``compaction``."""

    type: ClassVar[str] = "compact"
    answered_by: ClassVar[str | None] = "compaction_finished"
    compaction: int
    conversation: Snapshot


@dataclass(frozen=True, slots=True)
class ReplaceConversation(Command):
    """The conversation was replaced by its compacted form: persist it. ``report`` says what
    the compaction did (written flat into traces)."""

    type: ClassVar[str] = "replace_conversation"
    conversation: Snapshot
    report: Json

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"type": self.type, "conversation": self.conversation.to_json()}
        out.update(self.report)
        return out

    @classmethod
    def _from_fields(cls, value: Mapping[str, Json]) -> "Command":
        if "conversation" not in value:
            raise EventError("command 'replace_conversation' lacks field conversation")
        report = {k: v for k, v in value.items() if k not in ("type", "conversation")}
        return cls(Snapshot.from_json(value["conversation"]), report)


@dataclass(frozen=True, slots=True)
class RunTools(Command):
    """Run these tool calls (``{"id", "name", "input"}`` each, independent); answer with
    ToolsFinished carrying ``batch``, one outcome per call."""

    type: ClassVar[str] = "run_tools"
    answered_by: ClassVar[str | None] = "tools_finished"
    batch: int
    calls: list[Json]


@dataclass(frozen=True, slots=True)
class AcquirePermit(Command):
    """Ask the shared retry budget for a permit (``ask``: kind, target, deadline, since);
    answer with PermitAnswered carrying ``permit``."""

    type: ClassVar[str] = "acquire_permit"
    answered_by: ClassVar[str | None] = "permit_answered"
    permit: int
    ask: Json


@dataclass(frozen=True, slots=True)
class NoteBudget(Command):
    """Tell the shared retry budget what happened; no answer."""

    type: ClassVar[str] = "note_budget"
    note: Json


@dataclass(frozen=True, slots=True)
class Finish(Command):
    """The run finished (terminal). ``reason``: e.g. ``{"model": "end_turn"}`` or
    ``"max_turns"``."""

    type: ClassVar[str] = "finish"
    reason: Json
    turns: int

    @property
    def is_terminal(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Fail(Command):
    """The run failed (terminal). ``error`` is the RunError; ``message`` its one line."""

    type: ClassVar[str] = "fail"
    error: Json

    @property
    def is_terminal(self) -> bool:
        return True

    @property
    def message(self) -> str:
        """What happened, in one line, for a person."""
        return describe("run_error", self.error)


@dataclass(frozen=True, slots=True)
class StreamReset(Command):
    """The answer to request ``request`` (attempt ``attempt``) had begun and then failed:
    the partial text shown for that request is void. Take it back (or mark it as cut); the
    commands that answer the failure (the retry's NotifyRetry, its Sleep) follow.

    Told by the run, not the machine: nothing answers it and no trace holds it (replay
    derives it again from ``provider_responding`` followed by ``provider_failed``). Each
    one counts in ``AgentMachine.tally.stream_resets``."""

    type: ClassVar[str] = "stream_reset"
    request: int
    attempt: int


_COMMANDS: dict[str, type[Command]] = {
    cls.type: cls
    for cls in (
        AppendMessage,
        SendRequest,
        Sleep,
        NotifyRetry,
        NotifyFallback,
        Compact,
        ReplaceConversation,
        RunTools,
        AcquirePermit,
        NoteBudget,
        Finish,
        Fail,
        StreamReset,
    )
}


def _from_native(tag: str, fields_: dict[str, Json]) -> Command:
    """A command as the native machine hands it out."""
    return _COMMANDS[tag](**fields_)
