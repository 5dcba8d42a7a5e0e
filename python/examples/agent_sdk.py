"""The example agent on the official SDKs (`anthropic`, `openai`) with their retries off,
rebound deciding every failure.

The SDK sends each request the machine asks for: it owns the base URL, the keys and headers,
the connection pool and the timeouts, and raises its own exceptions. With ``max_retries=0``
it decides nothing: what it raised, or the HTTP status, headers and body of its error, or the
bytes of its streamed answer, go to rebound, and the machine decides whether to retry (and
after how long, honouring the server's hints), compact, return a tool error to the model, or
fail. The loop, the file tools and the tool errors are examples/agent.py's; only `send`
differs.

The streamed body is read raw (``with_streaming_response``) and decoded by rebound: the SDK's
event stream ends quietly when a body breaks off between two events, and turns an ``error``
event into an exception carrying the 200 of the response, so neither tells a cut or an
overloaded stream apart from a finished one; rebound's decoder does.

Try it against rebound's fake provider and its scripted outage (two terminals)::

    cargo run --release -- serve --scenario demo --port 8787
    python python/examples/agent_sdk.py --base-url http://127.0.0.1:8787 "Fix the failing test."

With ``--provider openai`` or ``openai_responses`` the base URL takes ``/v1``. Against a real
provider, set ANTHROPIC_API_KEY (or OPENAI_API_KEY) and drop --base-url.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any, AsyncContextManager, Callable, Mapping

import anthropic
import httpx2
import openai

from agent import DEFAULT_MODEL, TOOLS, Agent, DeadlineMissed, Tools, printer, within
from rebound_agent import (
    StreamDecoder,
    StreamError,
    classify_http,
    classify_transport,
    commands as c,
    events as e,
    request_body,
)

Client = anthropic.AsyncAnthropic | openai.AsyncOpenAI
"""The SDK client of the provider: Anthropic's for ``anthropic``, OpenAI's for the others."""

STATUS_ERRORS = (anthropic.APIStatusError, openai.APIStatusError)
CONNECTION_ERRORS = (anthropic.APIConnectionError, openai.APIConnectionError)
TIMEOUT_ERRORS = (anthropic.APITimeoutError, openai.APITimeoutError)


def make_client(provider: str, base_url: str | None, api_key: str) -> Client:
    """The provider's SDK client, with its own retries off: rebound decides."""
    if provider == "anthropic":
        return anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0)
    return openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0)


class SdkAgent(Agent):
    """The agent on an official SDK: the SDK sends, rebound decodes, classifies and decides."""

    def __init__(
        self,
        client: Client,
        provider: str,
        model: str,
        tools: Tools,
        seed: int,
        say: Callable[..., None],
        record: bool = False,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(provider, model, tools, seed, say, record, config)
        self.client = client

    def create(self, body: dict[str, Any], timeout: httpx2.Timeout) -> AsyncContextManager[Any]:
        """The SDK call that sends `body` (rebound's, unchanged), its answer streamed raw.

        The SDK's required parameters go by name; the rest of the body as ``extra_body``,
        which the SDK merges into the JSON it sends, so a field this SDK version has no
        parameter for still goes out as rebound built it.
        """
        rest = dict(body)
        model = rest.pop("model")
        rest.pop("stream", None)
        if isinstance(self.client, anthropic.AsyncAnthropic):
            return self.client.messages.with_streaming_response.create(
                model=model,
                max_tokens=rest.pop("max_tokens"),
                messages=rest.pop("messages"),
                stream=True,
                extra_body=rest,
                timeout=timeout,
            )
        if self.provider == "openai":
            return self.client.chat.completions.with_streaming_response.create(
                model=model, messages=rest.pop("messages"), stream=True, extra_body=rest, timeout=timeout
            )
        return self.client.responses.with_streaming_response.create(
            model=model, input=rest.pop("input"), stream=True, extra_body=rest, timeout=timeout
        )

    async def send(self, command: c.SendRequest) -> e.Event:
        """One attempt through the SDK, within the command's deadlines (the SDK's read
        timeout is the idle deadline, for the headers too; :func:`agent.within` keeps both on
        the streamed answer); whatever happened becomes ProviderSucceeded or a ProviderFailed
        classified by rebound."""
        body = request_body(self.provider, command.conversation, self.model, 4096, tools=TOOLS)
        # Connecting is the client's own business (10 s here), not a deadline of the answer.
        timeout = httpx2.Timeout(command.deadlines.idle_ms / 1000, connect=10)
        try:
            async with self.create(body, timeout) as response:
                # A success status: the answer began.
                self.responding(command)
                decoder = StreamDecoder(self.provider)
                try:
                    async for chunk in within(command.deadlines, response.iter_bytes(), decoder):
                        for delta in decoder.feed(chunk):
                            if delta["type"] == "text":
                                self.say(delta["text"], end="")
                except DeadlineMissed as missed:
                    failure = classify_transport(str(missed), timed_out=True, response_started=True)
                    return e.ProviderFailed(command.request, failure)
                except httpx2.HTTPError as error:
                    # The body broke off (reset, idle timeout): a cut stream, retried.
                    failure = classify_transport(
                        f"{type(error).__name__}: {error}",
                        timed_out=isinstance(error, httpx2.TimeoutException),
                        response_started=True,
                    )
                    return e.ProviderFailed(command.request, failure)
                return e.ProviderSucceeded(command.request, decoder.finish())
        except StreamError as error:
            # An error event in the stream, bytes that are no stream, or a body that ended
            # before its terminal event.
            return e.ProviderFailed(command.request, error.failure)
        except STATUS_ERRORS as error:
            # An error status: the SDK read the body and raised; rebound reads its status,
            # headers (retry-after, x-should-retry, rate-limit resets) and body.
            r = error.response
            failure = classify_http(self.provider, r.status_code, r.headers, r.content, int(time.time() * 1000))
            return e.ProviderFailed(command.request, failure)
        except CONNECTION_ERRORS as error:
            # No response: the SDK wraps what httpx2 raised (connect, reset, timeout).
            cause = error.__cause__ or error
            failure = classify_transport(
                f"{type(cause).__name__}: {cause}",
                timed_out=isinstance(error, TIMEOUT_ERRORS),
                connect_failed=isinstance(cause, httpx2.ConnectError),
            )
            return e.ProviderFailed(command.request, failure)


async def run_agent(
    prompt: str,
    base_url: str | None,
    provider: str = "anthropic",
    model: str | None = None,
    root: Path = Path("."),
    seed: int | None = None,
    trace: Path | None = None,
    say: Callable[..., None] = printer,
    config: Mapping[str, Any] | None = None,
) -> int:
    """Runs the SDK agent once; returns its exit code (0: finished, 1: the run failed).
    With `trace`, writes the run's rebound trace there (replay it with `rebound replay`).
    `config`: more of the machine's configuration (e.g. ``{"stream": {"idle_ms": 5000}}``)."""
    key_env = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    api_key = os.environ.get(key_env, "no-key-for-the-fake-server")
    seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little")
    async with make_client(provider, base_url, api_key) as client:
        agent = SdkAgent(
            client, provider, model or DEFAULT_MODEL[provider], Tools(root), seed, say, trace is not None, config
        )
        code = await agent.run(prompt)
        if trace is not None:
            trace.write_text(agent.machine.trace_jsonl())
        return code


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("prompt")
    parser.add_argument("--base-url", default=None, help="provider base URL (OpenAI: with /v1); default: the SDK's")
    parser.add_argument("--provider", choices=sorted(DEFAULT_MODEL), default="anthropic")
    parser.add_argument("--model", default=None)
    parser.add_argument("--root", type=Path, default=Path("."), help="folder the file tools may read")
    parser.add_argument("--seed", type=int, default=None, help="retry jitter seed (default: random)")
    parser.add_argument("--trace", type=Path, default=None, help="write the run's rebound trace here")
    args = parser.parse_args()
    return asyncio.run(run_agent(args.prompt, args.base_url, args.provider, args.model, args.root, args.seed, args.trace))


if __name__ == "__main__":
    sys.exit(main())
