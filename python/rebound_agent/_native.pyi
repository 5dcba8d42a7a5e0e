"""Type stubs of the native module (Rust, PyO3). Use the wrappers in ``rebound_agent``."""

from typing import Any, Iterable, Literal, Mapping, Sequence

Json = Any
#: Secrets the caller names (API keys, tokens): one ``str`` or several, each at least 8
#: bytes; masked (``***``) in every failure text.
Secrets = str | Iterable[str] | None

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

class BudgetError(ReboundError):
    """A permit ask, budget note or ticket a retry budget cannot take; the budget is
    unchanged."""

class ReentrantCallError(ReboundError):
    """A call on a machine, stream decoder or retry budget made from inside another call on
    the same object (Python code such as a ``__del__`` ran while it worked). Calls from other
    threads wait their turn instead."""

class SimulationError(RuntimeError):
    """The simulator could not complete a run (a machine livelock: a bug); names the seed."""

class RequestError(ReboundError):
    """A request body that cannot be built (empty conversation, unpaired tool calls,
    refused options)."""

class Snapshot:
    """A shared, read-only conversation (or a trace's summary of one)."""

    @staticmethod
    def of(conversation: Sequence[Json] | str) -> Snapshot:
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

class StreamDeadlines:
    """How long the answer to a request may take, as every ``SendRequest`` carries them
    (from the machine's ``stream`` config): no byte for ``idle_ms`` fails the attempt (before
    the response's headers too), and no content (text, thinking, a tool call or its input:
    ``StreamDecoder.progressed``; keep-alives are none) for ``progress_ms`` fails it too."""

    def __init__(self, idle_ms: int | None = None, progress_ms: int | None = None) -> None:
        """Deadlines of ``idle_ms`` and ``progress_ms`` (each at least 1); one not given takes
        rebound's default."""
    @staticmethod
    def from_json(value: Mapping[str, Json] | str) -> StreamDeadlines:
        """From ``{"idle_ms", "progress_ms"}`` (a field missing takes its default)."""
    @property
    def idle_ms(self) -> int:
        """No byte for this long fails the attempt, in ms."""
    @property
    def progress_ms(self) -> int:
        """No content for this long fails the attempt, in ms; bytes alone do not reset it."""
    @property
    def is_default(self) -> bool:
        """Whether these are rebound's defaults (a trace line then leaves them out)."""
    def to_json(self) -> dict[str, int]:
        """``{"idle_ms", "progress_ms"}``."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class RunTally:
    """What happened during a run, counted by rebound-core from its events and commands (the
    Rust runner's and the simulator's tallies are this one): a snapshot, read-only."""

    @staticmethod
    def from_json(value: Mapping[str, Json] | str) -> RunTally:
        """The tally of its JSON shape (``to_json()``'s)."""

    @property
    def requests(self) -> int:
        """Provider requests sent (every attempt, compaction summaries included)."""
    @property
    def retries(self) -> int:
        """Retries sent (one announced and never sent, the run canceled in its backoff, is
        not one)."""
    @property
    def retry_wait_ms(self) -> int:
        """The announced delays of those retries, summed, in ms."""
    @property
    def tool_calls(self) -> int:
        """Tool calls in appended assistant messages."""
    @property
    def tool_errors(self) -> int:
        """Appended tool results that were errors."""
    @property
    def compactions(self) -> int:
        """Compactions applied."""
    @property
    def fallbacks(self) -> int:
        """Moves to another target of the fallback chain."""
    @property
    def stream_resets(self) -> int:
        """Answers that began (``ProviderResponding``) and then failed: one ``StreamReset``
        each."""
    @property
    def input_tokens(self) -> int:
        """Input tokens reported, summed over answered requests."""
    @property
    def output_tokens(self) -> int:
        """Output tokens reported, summed."""
    @property
    def cache_read_tokens(self) -> int:
        """Prompt-cache reads reported, summed."""
    @property
    def cache_creation_tokens(self) -> int:
        """Prompt-cache writes reported, summed."""
    @property
    def usage(self) -> list[dict[str, Json]]:
        """Each answered request's ``{"target", "attempt", "purpose", "usage"}``, in order."""
    @property
    def elapsed_ms(self) -> int:
        """Time from the first event handled to the last, on the clock given to ``handle``."""
    def to_json(self) -> dict[str, Json]:
        """Every count in its JSON shape."""
    def __eq__(self, other: object) -> bool: ...

class Machine:
    """The native machine (one run of core's machine); ``rebound_agent.AgentMachine`` wraps
    it."""

    def __init__(
        self,
        config: Mapping[str, Json] | str | None = None,
        seed: int | None = None,
        conversation: list[Json] | str | None = None,
        record: bool = False,
        secrets: Secrets = None,
    ) -> None: ...
    def handle(self, now_ms: int, event: Any) -> Literal["accepted", "stale", "terminal"]:
        """Feeds one event (typed or JSON-shaped) at ``now_ms``."""
    def poll(self) -> tuple[str, dict[str, Json]] | None:
        """The next command as ``(type, fields)``, ``"stream_reset"`` (``request``,
        ``attempt``) among them; ``send_request``'s ``deadlines`` is a StreamDeadlines."""
    def conversation(self) -> Snapshot: ...
    @property
    def turns(self) -> int: ...
    @property
    def target(self) -> int: ...
    @property
    def is_terminal(self) -> bool: ...
    @property
    def seed(self) -> int: ...
    @property
    def tally(self) -> RunTally:
        """The run's tally so far, counted by core."""
    def outcome(self) -> dict[str, Json] | None: ...
    def config(self) -> dict[str, Json]: ...
    def compact_default(self, conversation: Snapshot | Sequence[Json]) -> dict[str, Json]:
        """Core's compaction with this machine's policy: ``{"Ok": messages}`` or
        ``{"Err": why}``."""
    def trace_jsonl(self) -> str: ...

def describe(
    kind: Literal["retry_info", "fallback_info", "run_error"], value: Mapping[str, Json]
) -> str:
    """The one-line text of a retry notice, fallback notice or run error."""

def normalize_event(event: Any) -> dict[str, Json]:
    """The event as the machine reads it; EventError when it cannot."""

class RetryBudget:
    """core's RetryBudget: a token bucket of retries shared by every machine of a process,
    with a first-come, first-served queue of waiting retries and the provider's shared
    rate-limit window. Plain data fed with ``now_ms`` (the budget's clock, which every
    machine sharing it must be driven on). For an asyncio fleet, ``SharedBudget`` drives it.

    Forward each AcquirePermit's ``ask`` to :meth:`request` and each NoteBudget's ``note``
    to :meth:`record`; after every call drain :meth:`poll_decision` (a deposit may grant
    waiters queued earlier), and call :meth:`tick` at :meth:`next_wakeup` so refill and
    deadlines take effect when nothing else happens. Decisions are ``"granted"``,
    ``"denied"`` or ``{"wait_until": ms}`` (the target is rate-limited: answer the machine
    with it, it waits and asks again).
    """

    def __init__(self, config: Mapping[str, Json] | str | None = None) -> None:
        """``config``: a BudgetConfig in its JSON shape (capacity, initial,
        deposit_per_request, deposit_per_success, refill_per_sec,
        deposit_per_answered_retry; missing fields take their defaults, unknown ones raise
        ConfigError)."""
    def request(self, now_ms: int, ticket: int, ask: Mapping[str, Json] | str) -> Json | None:
        """The decision for ``ask`` (kind, target, deadline, since) when known at once;
        None when the request waits in the queue under ``ticket``, until
        :meth:`poll_decision` hands out its answer. BudgetError for a malformed ask or a
        ticket whose answer is still to come."""
    def record(self, now_ms: int, note: Mapping[str, Json] | str) -> None:
        """Takes a NoteBudget's ``note`` (``{"note": "succeeded" | "retry_answered" |
        "rate_limited", "target", "until"?}``); BudgetError when malformed."""
    def tick(self, now_ms: int) -> None:
        """Lets time pass: refill, the grants it pays for, denials at deadlines."""
    def cancel(self, ticket: int) -> bool:
        """Withdraws a waiting request (its machine stopped waiting); whether it waited."""
    def poll_decision(self) -> tuple[int, Json] | None:
        """The next ``(ticket, decision)`` decided for a waiting request, in order."""
    def next_wakeup(self) -> int | None:
        """When :meth:`tick` next changes something on its own; None when nobody waits."""
    def balance(self, now_ms: int) -> float:
        """Tokens available at ``now_ms`` (refills up to it: drain poll_decision after)."""
    @property
    def waiting(self) -> int:
        """Charged permits waiting in the queue."""
    def stats(self) -> dict[str, int]:
        """``{"granted", "denied", "queued", "deposited_milli"}``: charged permits granted,
        denied and queued, and milli-tokens deposited."""
    def config(self) -> dict[str, Json]:
        """The configuration in its JSON shape, every default filled in."""

Provider = str
"""A wire format: ``"anthropic"``, ``"openai"``, ``"openai_responses"``, ``"gemini"`` or
``"bedrock"`` (ConfigError else). Bedrock streams are AWS event-stream bytes, not SSE."""
Bytes = bytes | bytearray | memoryview | str

def request_body(
    provider: Provider,
    conversation: Snapshot | Sequence[Json],
    model: str,
    max_tokens: int | None = None,
    *,
    system: str | None = None,
    tools: Sequence[Mapping[str, Json]] | None = None,
    stream: bool = True,
    options: Mapping[str, Json] | None = None,
    base_url: str | None = None,
    identity: str | None = None,
) -> dict[str, Json]:
    """The JSON request body for ``provider``; RequestError when none can be built.

    ``tools``: ``[{"name", "description", "input_schema"}]``. ``options``: temperature,
    top_p, stop_sequences, tool_choice ("auto", "any", "none", "tool:NAME"),
    parallel_tool_calls, reasoning_effort, thinking_budget, user_id, extra_body.
    ``base_url`` picks the tool-id form the server takes (Mistral's nine characters);
    ``identity`` is the target's, so reasoning another target owns is left out.
    ``max_tokens``: rebound-core's ``DEFAULT_MAX_TOKENS`` (8192) when not given."""

def request_path(provider: Provider, model: str = "", stream: bool = True) -> str:
    """``/v1/messages``, ``/chat/completions``, ``/responses``, Gemini's
    ``/models/{model}:streamGenerateContent?alt=sse`` (``:generateContent`` without
    ``stream``) or Bedrock's ``/model/{model}/converse-stream`` (``/converse``); ConfigError
    without a model for those two."""

def parse_response(provider: Provider, body: Bytes, *, secrets: Secrets = None) -> dict[str, Json]:
    """A whole non-streamed response body as an AssistantResponse; StreamError (with
    ``failure``, ``secrets`` masked) for an error object or a body that is no response."""

class StreamDecoder:
    """Incremental decoder of one streamed response body (server-sent events)."""

    def __init__(self, provider: Provider, *, secrets: Secrets = None) -> None:
        """A decoder for one body of ``provider``; ``secrets`` are masked in the failures it
        raises."""
    def feed(self, data: Bytes) -> list[dict[str, Json]]:
        """The deltas completed by ``data``: ``{"type": "text", "index", "text"}``,
        ``thinking``, ``tool_call_start`` (id, name), ``tool_input_json`` (partial_json).
        StreamError (with ``failure``) when the bytes are no valid stream."""
    @property
    def progressed(self) -> bool:
        """Whether the bytes of the last ``feed`` carried content (text, thinking, a tool call
        or its input, as rebound-core counts it): what moves the progress deadline
        (``SendRequest.deadlines.progress_ms``); keep-alives and empty deltas do not."""
    @property
    def is_complete(self) -> bool:
        """Whether the terminal event arrived."""
    def finish(self) -> dict[str, Json]:
        """The AssistantResponse, or StreamError whose ``failure`` answers the request."""

def classify_http(
    provider: Provider,
    status: int,
    headers: Mapping[str, str] | list[tuple[str, str]] | Any | None = None,
    body: Bytes | None = None,
    now_unix_ms: int | None = None,
    *,
    secrets: Secrets = None,
) -> dict[str, Json]:
    """An HTTP error response as a ProviderFailure (kind, status, hints, request id), with
    ``secrets`` masked (``***``) in its texts."""

def classify_transport(
    description: str,
    *,
    timed_out: bool = False,
    connect_failed: bool = False,
    response_started: bool = False,
    secrets: Secrets = None,
) -> dict[str, Json]:
    """A failed exchange (no usable response) as a ProviderFailure, ``secrets`` masked."""

def compact(
    conversation: Snapshot | Sequence[Json], policy: Mapping[str, Json] | None = None
) -> dict[str, Json]:
    """Deterministic elision: ``{"Ok": messages}`` or ``{"Err": why}``, the ``result`` of
    CompactionFinished."""

def builtin_scenarios() -> list[str]: ...
def simulate(
    scenario: str | Mapping[str, Json], seed: int = 0, config: Mapping[str, Json] | None = None
) -> dict[str, Json]:
    """One run: seed, succeeded, result, requests, duration_ms, retries, tally (a RunTally's
    JSON shape), trace."""
def simulate_many(
    scenario: str | Mapping[str, Json],
    runs: int = 100,
    first_seed: int = 0,
    config: Mapping[str, Json] | None = None,
) -> dict[str, Json]:
    """Statistics of many runs, with ``table`` as ``rebound sim`` prints it."""
def simulate_fleet(
    scenario: str | Mapping[str, Json],
    agents: Sequence[tuple[int, int]],
    config: Mapping[str, Json] | None = None,
) -> dict[str, Json]:
    """Agents ``(seed, start_ms)`` in one world sharing ``config["budget"]``: ``runs``
    (seed, succeeded, result, requests, started_ms, ended_ms each) and ``budget`` (stats or
    None)."""
def outage_report(seed: int = 1, agents: int = 1000) -> dict[str, Json]:
    """The outage experiment: table, rows, met, misses."""
def replay(trace: str | bytes) -> dict[str, Json]:
    """identical, steps, commands, outcome, elapsed_ms, divergence, text."""
def read_trace(text: str) -> dict[str, Json]:
    """``{"header", "steps"}`` in their JSON shape; TraceError when unreadable."""

class ScenarioTools:
    """The tools a scenario scripts, as ``rebound serve``'s scenarios expect them (and
    ``rebound demo`` and the simulator run them). ConfigError for a bad scenario."""

    def __init__(self, scenario: str | Mapping[str, Json]) -> None: ...
    def specs(self) -> list[dict[str, Json]]:
        """The tools' specs (name, description, input_schema), for a machine config's
        ``tools``."""
    def run(self, calls: Sequence[Mapping[str, Json]]) -> tuple[int, dict[str, Json]]:
        """A batch of ``RunTools`` calls: ``(duration_ms, outcome)``, the outcome as
        ``ToolsFinished`` takes it. Nothing is waited; EventError for malformed calls."""
