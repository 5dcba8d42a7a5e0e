"""One machine, decoder or retry budget reached from several threads: calls take turns."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any, Callable

import pytest

from conftest import text_response
from rebound_agent import (
    AgentMachine,
    ReentrantCallError,
    RetryBudget,
    StreamDecoder,
)
from rebound_agent.events import ProviderSucceeded, UserMessage


def _on_another_thread(call: Callable[[], Any]) -> Any:
    """Runs `call` on a new thread and waits for it; its exception is raised here."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed back to the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "the other thread never got its turn"
    if "error" in out:
        raise out["error"]
    return out["value"]


class _EventThatLooksAround:
    """An event whose reading runs Python code that uses the machine from another thread, as
    a thread switch in the middle of a call would."""

    def __init__(self, machine: AgentMachine, event: Any) -> None:
        self.machine = machine
        self.event = event
        self.seen: list[Any] = []

    def to_json(self) -> Any:
        self.seen.append(_on_another_thread(lambda: self.machine.tally.requests))
        self.seen.append(_on_another_thread(lambda: [c.type for c in self.machine.drain()]))
        return self.event.to_json()


def test_a_machine_used_from_another_thread_during_a_call_lets_it_take_its_turn() -> None:
    m = AgentMachine()
    first = _EventThatLooksAround(m, UserMessage.text("hi"))
    assert m.handle(0, first) == "accepted"
    assert first.seen == [0, []]
    [send] = [c for c in m.drain() if c.type == "send_request"]
    answer = _EventThatLooksAround(m, ProviderSucceeded(send.request, text_response("hello")))
    assert m.handle(10, answer) == "accepted"
    assert answer.seen == [1, []]
    assert [c.type for c in m.drain()][-1] == "finish"
    assert m.outcome() == {"Ok": {"model": "end_turn"}}


def test_a_retry_budget_shared_by_threads_counts_every_ask_once() -> None:
    budget = RetryBudget(
        {
            "capacity": 5,
            "initial": 5,
            "deposit_per_request": 0,
            "deposit_per_success": 0,
            "refill_per_sec": 0,
        }
    )
    asks_per_thread = 200

    def ask_many(offset: int) -> None:
        for i in range(asks_per_thread):
            ask = {"kind": "charged", "target": 0, "deadline": 0, "since": 0}
            budget.request(0, offset + i, ask)
            while budget.poll_decision() is not None:
                pass

    threads = [threading.Thread(target=ask_many, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = budget.stats()
    assert stats["granted"] == 5
    assert stats["granted"] + stats["denied"] == 4 * asks_per_thread


@pytest.mark.skipif(
    sys.version_info >= (3, 12),
    reason="from 3.12 the collector runs only between bytecodes, never inside a native call",
)
def test_a_decoder_called_again_from_inside_its_own_call_refuses_the_inner_call() -> None:
    decoder = StreamDecoder("anthropic")
    refused: list[BaseException] = []

    def collector_started(phase: str, info: Any) -> None:
        if phase == "start":
            try:
                decoder.is_complete  # noqa: B018 - the call is the point
            except ReentrantCallError as e:
                refused.append(e)

    deltas = b"".join(
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"x"}}\n\n'
        for _ in range(2000)
    )
    start = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":'
        b'"message","role":"assistant","model":"x","content":[],"stop_reason":null,'
        b'"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\n\n'
    )
    threshold = gc.get_threshold()
    gc.callbacks.append(collector_started)
    gc.set_threshold(1)
    try:
        out = decoder.feed(start + deltas)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(collector_started)
    assert len(out) == 2000
    assert refused, "the collector never ran inside feed"
    assert "called again from inside one of its own calls" in str(refused[0])
    # The outer call went on, and the decoder is usable.
    assert decoder.is_complete is False
