"""Events: everything the world tells the machine, as typed objects.

Each event converts to and from the JSON shape of the trace format (``to_json`` /
``Event.from_json``), which is also what the machine reads: an event's fields are checked by
rebound-core when it is handled, and a malformed one raises :class:`EventError`.

Nested payloads (a response, a failure, a tool outcome) stay in their JSON shape: plain dicts
and lists, as the trace format writes them, and as the wire helpers of this package return
them (``StreamDecoder.finish()``, ``classify_http(...)``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping

from ._native import EventError

Json = Any
"""A value in its JSON shape: dicts, lists, str, int, float, bool, None."""

__all__ = [
    "Event",
    "UserMessage",
    "Resume",
    "ProviderSucceeded",
    "ProviderResponding",
    "ProviderFailed",
    "ToolsFinished",
    "TimerFired",
    "CompactionFinished",
    "PermitAnswered",
    "HostFailed",
    "Cancel",
    "tool_ok",
    "tool_error",
]


_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """The dataclass's field names, computed once per class (``fields()`` is slow)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every event. ``type`` is the event's tag in the trace format."""

    type: ClassVar[str] = ""

    def to_json(self) -> dict[str, Json]:
        """The event in the trace format's JSON shape: ``{"type": ..., <fields>}``."""
        out: dict[str, Json] = {"type": self.type}
        for name in _field_names(type(self)):
            out[name] = getattr(self, name)
        return out

    @staticmethod
    def from_json(value: Mapping[str, Json]) -> "Event":
        """The typed event of a JSON-shaped one (as a trace step's ``event``).

        Raises :class:`EventError` when ``type`` is missing or unknown or a field is missing
        or unexpected. The field values are checked when the event is handled.
        """
        if not isinstance(value, Mapping):
            raise EventError(f"an event must be a dict, got {type(value).__name__}")
        tag = value.get("type")
        cls = _EVENTS.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise EventError(
                f"unknown event type {tag!r}; expected one of {', '.join(sorted(_EVENTS))}"
            )
        names = {f.name for f in fields(cls)}
        extra = set(value) - names - {"type"}
        if extra:
            raise EventError(f"event {tag!r} has no field(s) {', '.join(sorted(extra))}")
        missing = [n for n in names if n not in value]
        if missing:
            raise EventError(f"event {tag!r} lacks field(s) {', '.join(sorted(missing))}")
        return cls(**{n: value[n] for n in names})


@dataclass(frozen=True, slots=True)
class UserMessage(Event):
    """The person sent a message: starts the run. ``content`` is a list of content blocks,
    e.g. ``[{"type": "text", "text": "hi"}]``; :meth:`text` builds that."""

    type: ClassVar[str] = "user_message"
    content: list[Json]

    @staticmethod
    def text(text: str) -> "UserMessage":
        """The person's message as one text block."""
        return UserMessage([{"type": "text", "text": text}])


@dataclass(frozen=True, slots=True)
class Resume(Event):
    """Continue a loaded conversation without a new message (e.g. after a crash)."""

    type: ClassVar[str] = "resume"


@dataclass(frozen=True, slots=True)
class ProviderSucceeded(Event):
    """Request ``request`` produced a complete assistant message. ``response`` is an
    AssistantResponse (``{"message", "stop_reason", "usage"}``), e.g. from
    ``StreamDecoder.finish()``."""

    type: ClassVar[str] = "provider_succeeded"
    request: int
    response: Json


@dataclass(frozen=True, slots=True)
class ProviderResponding(Event):
    """Optional: the answer to request ``request`` began (a success status and its first
    bytes). Not an answer; the request still ends with ProviderSucceeded or ProviderFailed."""

    type: ClassVar[str] = "provider_responding"
    request: int


@dataclass(frozen=True, slots=True)
class ProviderFailed(Event):
    """Request ``request`` failed. ``failure`` is a ProviderFailure, e.g. from
    ``classify_http`` or ``classify_transport``."""

    type: ClassVar[str] = "provider_failed"
    request: int
    failure: Json


@dataclass(frozen=True, slots=True)
class ToolsFinished(Event):
    """Tool batch ``batch`` finished. ``outcome`` is ``{"per_call": [...]}`` (one entry per
    call, see :func:`tool_ok` and :func:`tool_error`) or ``{"whole_batch": failure}``."""

    type: ClassVar[str] = "tools_finished"
    batch: int
    outcome: Json

    @staticmethod
    def per_call(batch: int, outcomes: list[Json]) -> "ToolsFinished":
        """The batch's outcome, one entry per call (any order)."""
        return ToolsFinished(batch, {"per_call": list(outcomes)})


@dataclass(frozen=True, slots=True)
class TimerFired(Event):
    """Sleep ``timer`` ended."""

    type: ClassVar[str] = "timer_fired"
    timer: int


@dataclass(frozen=True, slots=True)
class CompactionFinished(Event):
    """Compaction ``compaction`` finished: ``result`` is ``{"Ok": [messages]}`` (as
    :func:`rebound_agent.compact` returns it) or ``{"Err": "why"}``."""

    type: ClassVar[str] = "compaction_finished"
    compaction: int
    result: Json


@dataclass(frozen=True, slots=True)
class PermitAnswered(Event):
    """The shared retry budget answered permit ``permit``: ``"granted"``, ``"denied"`` or
    ``{"wait_until": ms}``."""

    type: ClassVar[str] = "permit_answered"
    permit: int
    decision: Json


@dataclass(frozen=True, slots=True)
class HostFailed(Event):
    """The host failed (receiver, session store, out of memory): the run fails.
    ``failure`` is ``{"kind": ..., "message": ...}``."""

    type: ClassVar[str] = "host_failed"
    failure: Json


@dataclass(frozen=True, slots=True)
class Cancel(Event):
    """The person or embedder canceled: the run fails at once."""

    type: ClassVar[str] = "cancel"


_EVENTS: dict[str, type[Event]] = {
    cls.type: cls
    for cls in (
        UserMessage,
        Resume,
        ProviderSucceeded,
        ProviderResponding,
        ProviderFailed,
        ToolsFinished,
        TimerFired,
        CompactionFinished,
        PermitAnswered,
        HostFailed,
        Cancel,
    )
}


def tool_ok(tool_use_id: str, text: str) -> Json:
    """The outcome of a tool call that worked and produced ``text``."""
    return {"tool_use_id": tool_use_id, "result": {"Ok": {"parts": [{"type": "text", "text": text}]}}}


def tool_error(tool_use_id: str, message: str) -> Json:
    """The outcome of a tool call that failed in a way the model can act on (bad arguments,
    a missing file): the machine turns it into an error tool result and the loop goes on."""
    return {"tool_use_id": tool_use_id, "result": {"Err": {"model": {"message": message}}}}
