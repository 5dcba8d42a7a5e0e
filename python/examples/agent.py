"""A coding agent in Python on asyncio and httpx, with rebound deciding every failure.

The agent owns the I/O: its HTTP client (httpx, no retries of its own), its clock, its file
tools. rebound's machine owns the decisions: whether a failure is retried and after how long,
compacted, turned into a tool error result the model reads, or returned as the run's failure.

Try it against rebound's fake provider and its scripted outage (two terminals)::

    cargo run --release -- serve --scenario demo --port 8787
    python python/examples/agent.py --base-url http://127.0.0.1:8787 "Fix the failing test."

Against a real provider, set ANTHROPIC_API_KEY (or OPENAI_API_KEY with --provider openai and
--base-url https://api.openai.com/v1) and drop --base-url.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterable, AsyncIterator, Callable, Mapping

import httpx

from rebound_agent import (
    AgentMachine,
    StreamDeadlines,
    StreamDecoder,
    StreamError,
    classify_http,
    classify_transport,
    commands as c,
    events as e,
    request_body,
    request_path,
)

TOOLS = [
    {
        "name": "read",
        "description": "Reads a text file of the project. Input: {\"path\": \"relative/path\"}.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "list",
        "description": "Lists a folder of the project. Input: {\"path\": \"relative/folder\"}.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
]
DEFAULT_MODEL = {"anthropic": "claude-sonnet-4-6", "openai": "gpt-4o", "openai_responses": "gpt-5"}
MAX_FILE_BYTES = 64 * 1024


class Tools:
    """The file tools, confined to `root`. A failure is the model's to fix (ToolFailure)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, raw: object) -> Path:
        if not isinstance(raw, str) or not raw:
            raise ToolFailure("`path` must be a non-empty string")
        path = (self.root / raw).resolve()
        if path != self.root and self.root not in path.parents:
            raise ToolFailure(f"{raw} is outside the project folder")
        return path

    def run(self, name: str, args: dict) -> str:
        if name == "read":
            path = self._path(args.get("path"))
            if not path.is_file():
                raise ToolFailure(f"file not found: {args.get('path')}")
            data = path.read_bytes()[:MAX_FILE_BYTES]
            return data.decode("utf-8", errors="replace")
        if name == "list":
            path = self._path(args.get("path") or ".")
            if not path.is_dir():
                raise ToolFailure(f"folder not found: {args.get('path')}")
            return "\n".join(sorted(p.name + ("/" if p.is_dir() else "") for p in path.iterdir()))
        raise ToolFailure(f"unknown tool `{name}`")


class ToolFailure(Exception):
    """A tool call failed in a way the model can act on."""


class DeadlineMissed(Exception):
    """A streamed answer missed one of its request's deadlines (the message says which)."""


async def within(
    deadlines: StreamDeadlines, chunks: AsyncIterable[bytes], decoder: StreamDecoder
) -> AsyncIterator[bytes]:
    """The chunks of a streamed body as they come, within the request's deadlines as
    rebound's HTTP provider keeps them: no byte for ``deadlines.idle_ms``, or no content
    for ``deadlines.progress_ms`` (keep-alives are bytes, not content: ``decoder.progressed``
    tells, so feed each chunk to ``decoder`` before asking for the next), raises
    :class:`DeadlineMissed`. The idle window starts when the next chunk is awaited."""
    idle_s, progress_s = deadlines.idle_ms / 1000, deadlines.progress_ms / 1000
    body = aiter(chunks)
    last_content = time.monotonic()
    while True:
        wait_s = min(idle_s, last_content + progress_s - time.monotonic())
        try:
            chunk = await asyncio.wait_for(anext(body), max(wait_s, 0))
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            if time.monotonic() >= last_content + progress_s:
                raise DeadlineMissed("no content received in time (only keep-alives)") from None
            raise DeadlineMissed("no bytes received in time") from None
        yield chunk
        if decoder.progressed:
            last_content = time.monotonic()
        elif time.monotonic() >= last_content + progress_s:
            raise DeadlineMissed("no content received in time (only keep-alives)")


class Agent:
    """Drives one AgentMachine: executes its commands and feeds it what happened. How one
    request is sent is :meth:`send`'s business (httpx here, :class:`HttpxAgent`; an official
    SDK in agent_sdk.py); everything else is the same loop."""

    def __init__(
        self,
        provider: str,
        model: str,
        tools: Tools,
        seed: int,
        say: Callable[..., None],
        record: bool = False,
        config: Mapping[str, Any] | None = None,
        secrets: list[str] | None = None,
    ) -> None:
        self.provider, self.model, self.tools, self.say = provider, model, tools, say
        # `config`: more of the MachineConfig (its JSON shape), e.g. {"stream": {"idle_ms": …}}.
        config = {"tools": TOOLS, **(config or {})}
        self.tool_specs = config["tools"]
        # `secrets` (the API key): masked in every failure the machine is told of, so a
        # server echoing the key never gets it into a notice, the run's error or the trace.
        self.machine = AgentMachine(config=config, seed=seed, record=record, secrets=secrets)
        self.started = time.monotonic()

    def now(self) -> int:
        """The machine's clock: monotonic milliseconds since the run started."""
        return int((time.monotonic() - self.started) * 1000)

    async def run(self, prompt: str) -> int:
        """Runs the agent loop to its end; 0 when the model finished, 1 when the run failed."""
        event: e.Event | None = e.UserMessage.text(prompt)
        while event is not None:
            self.machine.handle(self.now(), event)
            event = None
            # Drain after every handle; at most one command awaits an answer at a time.
            for command in self.machine.drain():
                match command:
                    case c.SendRequest():
                        event = await self.send(command)
                    case c.Sleep(timer=timer, delay_ms=delay_ms):
                        await asyncio.sleep(delay_ms / 1000)
                        event = e.TimerFired(timer)
                    case c.RunTools(batch=batch, calls=calls):
                        event = await self.run_tools(batch, calls)
                    case c.Compact(compaction=compaction, conversation=conversation):
                        # rebound's own compaction, with the machine's compaction policy.
                        event = e.CompactionFinished(compaction, self.machine.compact_default(conversation))
                    case c.AcquirePermit(permit=permit):
                        event = e.PermitAnswered(permit, "granted")  # no shared budget here
                    case c.StreamReset():
                        # The answer shown so far broke off: it is void (the retry answers anew).
                        self.say("\n\x1b[2m(the answer broke off: the text above is discarded)\x1b[0m")
                    case c.NotifyRetry() | c.NotifyFallback():
                        self.say(f"\x1b[2m{command.text}\x1b[0m")
                    case c.AppendMessage(message=message) if message["role"] == "assistant":
                        self.say("")  # the streamed text is already shown
                    case c.AppendMessage() | c.ReplaceConversation() | c.NoteBudget():
                        pass
                    case c.Finish(turns=turns):
                        t = self.machine.tally  # counted by rebound, not here
                        self.say(
                            f"\x1b[2mdone after {turns} turns (requests: {t.requests}, retries: {t.retries}, "
                            f"stream resets: {t.stream_resets})\x1b[0m"
                        )
                        return 0
                    case c.Fail():
                        self.say(f"rebound: the run failed: {command.message}")
                        return 1
        raise AssertionError("the machine stopped asking for anything before the run ended")

    async def run_tools(self, batch: int, calls: list[dict]) -> e.Event:
        """Runs a batch of tool calls side by side: the event that answers it."""
        outcomes = await asyncio.gather(*(asyncio.to_thread(self.call, x) for x in calls))
        return e.ToolsFinished.per_call(batch, list(outcomes))

    def model_for(self, command: c.SendRequest) -> str:
        """The model that answers ``command``: this agent has one target. With a fallback
        chain (``config["targets"]``), ``command.target`` says which target's model."""
        return self.model

    def call(self, call: dict) -> dict:
        """One tool call's outcome."""
        self.say(f"\x1b[2m→ {call['name']} {call['input']}\x1b[0m")
        try:
            return e.tool_ok(call["id"], self.tools.run(call["name"], call["input"]))
        except ToolFailure as failure:
            return e.tool_error(call["id"], str(failure))
        except OSError as error:
            return e.tool_error(call["id"], f"{type(error).__name__}: {error.strerror or error}")

    async def send(self, command: c.SendRequest) -> e.Event:
        """One attempt of `command`: the event that answers it (ProviderSucceeded or
        ProviderFailed, never an exception)."""
        raise NotImplementedError

    def responding(self, command: c.SendRequest) -> None:
        """Tells the machine the answer to `command` began. Drained at once, as after every
        handle: its only commands are NoteBudget, for a shared retry budget (none here)."""
        self.machine.step(self.now(), e.ProviderResponding(command.request))


class HttpxAgent(Agent):
    """The agent on httpx: rebound builds the body, decodes the stream, classifies failures."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        provider: str,
        model: str,
        api_key: str,
        tools: Tools,
        seed: int,
        say: Callable[..., None],
        record: bool = False,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        # A key shorter than 8 bytes (a fake server's) cannot be masked: rebound refuses it
        # as a secret, since masking it would mask ordinary words.
        secrets = [api_key] if len(api_key.strip()) >= 8 else None
        super().__init__(provider, model, tools, seed, say, record, config, secrets)
        self.client = client
        self.url = base_url.rstrip("/") + request_path(provider)
        if provider == "anthropic":
            self.headers = {"x-api-key": api_key, "anthropic-version": "2023-06-01"}
        else:
            self.headers = {"authorization": f"Bearer {api_key}"}

    async def send(self, command: c.SendRequest) -> e.Event:
        """One attempt: the request rebound built, streamed, decoded and classified, within
        the command's deadlines: httpx's read timeout is the idle deadline (for the headers
        and an error body too), :func:`within` keeps both on the streamed answer."""
        body = request_body(
            self.provider, command.conversation, self.model_for(command), 4096, tools=self.tool_specs
        )
        # Connecting is the client's own business (10 s here), not a deadline of the answer.
        timeout = httpx.Timeout(command.deadlines.idle_ms / 1000, connect=10)
        started = False
        try:
            async with self.client.stream(
                "POST", self.url, json=body, headers=self.headers, timeout=timeout
            ) as response:
                started = True
                if response.status_code != 200:
                    raw = await response.aread()
                    failure = classify_http(
                        self.provider, response.status_code, response.headers, raw, int(time.time() * 1000)
                    )
                    return e.ProviderFailed(command.request, failure)
                self.responding(command)
                decoder = StreamDecoder(self.provider)
                async for chunk in within(command.deadlines, response.aiter_bytes(), decoder):
                    for delta in decoder.feed(chunk):
                        if delta["type"] == "text":
                            self.say(delta["text"], end="")
                return e.ProviderSucceeded(command.request, decoder.finish())
        except StreamError as error:
            return e.ProviderFailed(command.request, error.failure)
        except DeadlineMissed as missed:
            failure = classify_transport(str(missed), timed_out=True, response_started=True)
            return e.ProviderFailed(command.request, failure)
        except httpx.HTTPError as error:
            failure = classify_transport(
                f"{type(error).__name__}: {error}",
                timed_out=isinstance(error, httpx.TimeoutException),
                connect_failed=isinstance(error, httpx.ConnectError),
                response_started=started,
            )
            return e.ProviderFailed(command.request, failure)


def printer(text: str, end: str = "\n") -> None:
    print(text, end=end, flush=True)


async def run_agent(
    prompt: str,
    base_url: str,
    provider: str = "anthropic",
    model: str | None = None,
    root: Path = Path("."),
    seed: int | None = None,
    trace: Path | None = None,
    say: Callable[..., None] = printer,
    config: Mapping[str, Any] | None = None,
) -> int:
    """Runs the example agent once; returns its exit code. With `trace`, writes the run's
    rebound trace there (replay it with `rebound replay`). `config`: more of the machine's
    configuration (e.g. ``{"stream": {"idle_ms": 5000}}``)."""
    key_env = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    api_key = os.environ.get(key_env, "no-key-for-the-fake-server")
    seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
    # httpx itself never retries a request; rebound decides.
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=0)) as client:
        agent = HttpxAgent(
            client, base_url, provider, model or DEFAULT_MODEL[provider], api_key, Tools(root), seed, say,
            record=trace is not None, config=config,
        )
        code = await agent.run(prompt)
        if trace is not None:
            trace.write_text(agent.machine.trace_jsonl())
        return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prompt")
    parser.add_argument("--base-url", default=None, help="provider base URL (OpenAI: with /v1)")
    parser.add_argument("--provider", choices=sorted(DEFAULT_MODEL), default="anthropic")
    parser.add_argument("--model", default=None)
    parser.add_argument("--root", type=Path, default=Path("."), help="folder the file tools may read")
    parser.add_argument("--seed", type=int, default=None, help="retry jitter seed (default: random)")
    parser.add_argument("--trace", type=Path, default=None, help="write the run's rebound trace here")
    args = parser.parse_args()
    base_url = args.base_url or (
        "https://api.anthropic.com" if args.provider == "anthropic" else "https://api.openai.com/v1"
    )
    return asyncio.run(
        run_agent(args.prompt, base_url, args.provider, args.model, args.root, args.seed, args.trace)
    )


if __name__ == "__main__":
    sys.exit(main())
