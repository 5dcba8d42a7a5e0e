"""Type stubs of the native module (Rust, PyO3). Use the wrappers in ``rebound_agent``."""

from typing import Any, Literal, Mapping

Json = Any

class ReboundError(ValueError):
    """Base of every error rebound raises for bad input."""

class ConfigError(ReboundError):
    """A configuration, scenario, policy or option that cannot be read."""

class EventError(ReboundError):
    """An event the machine cannot take; the machine is unchanged."""

class UnknownAnswerError(EventError):
    """An answer carrying an id that no command of this machine ever carried."""

class UnexpectedEventError(EventError):
    """An event the machine did not ask for now (a driver bug)."""

class StreamError(ReboundError):
    """Bytes that are no valid stream; ``failure`` is the classified ProviderFailure."""

    failure: dict[str, Json]

class TraceError(ReboundError):
    """A trace that cannot be read."""

class Snapshot:
    """A shared, read-only conversation (or a trace's summary of one)."""

    @staticmethod
    def of(conversation: list[Json] | str) -> Snapshot:
        """A snapshot of a list of messages in their JSON shape."""
    @staticmethod
    def from_json(value: Mapping[str, Json] | str) -> Snapshot:
        """The snapshot of a trace's ``{"messages": n, "digest": "..."}``."""
    @property
    def has_messages(self) -> bool:
        """Whether the messages are here (not only a trace's summary)."""
    @property
    def digest(self) -> str:
        """FNV-1a digest of the conversation's JSON, 16 hex digits."""
    def messages(self) -> list[dict[str, Json]]:
        """The messages in their JSON shape; ReboundError for a summary."""
    def to_json(self) -> dict[str, Json]:
        """``{"messages": n, "digest": "..."}``, as traces write it."""
    def __len__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Machine:
    """The native machine; ``rebound_agent.AgentMachine`` wraps it."""

    def __init__(
        self,
        config: Mapping[str, Json] | str | None = None,
        seed: int | None = None,
        conversation: list[Json] | str | None = None,
        record: bool = False,
    ) -> None: ...
    def handle(self, now_ms: int, event: Any) -> Literal["accepted", "stale", "terminal"]:
        """Feeds one event (typed or JSON-shaped) at ``now_ms``."""
    def poll(self) -> tuple[str, dict[str, Json]] | None:
        """The next command as ``(type, fields)``."""
    def conversation(self) -> Snapshot: ...
    @property
    def turns(self) -> int: ...
    @property
    def target(self) -> int: ...
    @property
    def is_terminal(self) -> bool: ...
    @property
    def seed(self) -> int: ...
    def outcome(self) -> dict[str, Json] | None: ...
    def config(self) -> dict[str, Json]: ...
    def trace_jsonl(self) -> str: ...

def describe(
    kind: Literal["retry_info", "fallback_info", "run_error"], value: Mapping[str, Json]
) -> str:
    """The one-line text of a retry notice, fallback notice or run error."""

def normalize_event(event: Any) -> dict[str, Json]:
    """The event as the machine reads it; EventError when it cannot."""
