"""Events per second through the machine from Python: the per-call cost a Python agent pays.

The workload is core's `machine` bench (core/benches/machine.rs) event for event: 20 turns,
each with three 529 failures, a stream cut, a tool call and its result, then a text answer
(210 events per run), driven synchronously. Two Python drivers:

- typed: `AgentMachine` with the typed events and commands of `rebound_agent` (what an agent
  written like examples/agent.py pays);
- raw: the native `Machine` with events as dicts and commands as (type, fields) tuples (the
  binding's floor: conversion of the JSON shape both ways, no dataclasses).

    python python/bench/machine_overhead.py [runs]

Compare with `cargo bench -p rebound-core --bench machine` on the same machine.
"""

from __future__ import annotations

import statistics
import sys
import time

from rebound_agent import AgentMachine, commands as c, events as e
from rebound_agent._native import Machine

CONFIG = {
    "tools": [{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}],
    "retry": {"max_attempts": 6},
}
OVERLOADED = {"kind": "unavailable", "status": 529, "message": "Overloaded"}
CUT = {"kind": "stream_malformed", "message": "stream ended before the message completed", "transport": "stream_cut"}


def tool_use(turn: int) -> dict:
    return {
        "message": {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{turn}", "name": "read", "input": {"path": "src/lib.rs"}}],
        },
        "stop_reason": "tool_use",
    }


DONE = {"message": {"role": "assistant", "content": [{"type": "text", "text": "done"}]}, "stop_reason": "end_turn"}


def typed_run(turns: int) -> int:
    m = AgentMachine(CONFIG, 7)
    now = events = failures = turn = 0
    inbox: list[e.Event] = [e.UserMessage.text("go")]
    while inbox:
        events += 1
        m.handle(now, inbox.pop())
        while (cmd := m.poll()) is not None:
            if isinstance(cmd, c.SendRequest):
                if failures < 4:
                    failures += 1
                    inbox.append(e.ProviderFailed(cmd.request, CUT if failures == 4 else OVERLOADED))
                else:
                    failures = 0
                    turn += 1
                    inbox.append(e.ProviderSucceeded(cmd.request, tool_use(turn) if turn <= turns else DONE))
            elif isinstance(cmd, c.Sleep):
                now += cmd.delay_ms
                inbox.append(e.TimerFired(cmd.timer))
            elif isinstance(cmd, c.RunTools):
                inbox.append(
                    e.ToolsFinished.per_call(cmd.batch, [e.tool_ok(x["id"], "fn main() {}") for x in cmd.calls])
                )
            elif isinstance(cmd, c.Finish | c.Fail):
                return events
    return events


def raw_run(turns: int) -> int:
    m = Machine(CONFIG, 7)
    now = events = failures = turn = 0
    inbox: list[dict] = [{"type": "user_message", "content": [{"type": "text", "text": "go"}]}]
    while inbox:
        events += 1
        m.handle(now, inbox.pop())
        while (cmd := m.poll()) is not None:
            tag, f = cmd
            if tag == "send_request":
                if failures < 4:
                    failures += 1
                    failure = CUT if failures == 4 else OVERLOADED
                    inbox.append({"type": "provider_failed", "request": f["request"], "failure": failure})
                else:
                    failures = 0
                    turn += 1
                    response = tool_use(turn) if turn <= turns else DONE
                    inbox.append({"type": "provider_succeeded", "request": f["request"], "response": response})
            elif tag == "sleep":
                now += f["delay_ms"]
                inbox.append({"type": "timer_fired", "timer": f["timer"]})
            elif tag == "run_tools":
                outcome = {"per_call": [{"tool_use_id": x["id"], "result": {"Ok": {"parts": [{"type": "text", "text": "fn main() {}"}]}}} for x in f["calls"]]}
                inbox.append({"type": "tools_finished", "batch": f["batch"], "outcome": outcome})
            elif tag in ("finish", "fail"):
                return events
    return events


def measure(run, runs: int) -> tuple[int, list[float]]:
    events = run(20)
    for _ in range(max(3, runs // 10)):  # warm up
        run(20)
    rates = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(runs):
            run(20)
        elapsed = time.perf_counter() - start
        rates.append(events * runs / elapsed)
    return events, rates


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    print(f"Python {sys.version.split()[0]}, {runs} runs per sample, 5 samples")
    for name, run in (("typed", typed_run), ("raw", raw_run)):
        events, rates = measure(run, runs)
        med = statistics.median(rates)
        print(
            f"{name:6} {events} events/run  median {med / 1000:,.1f} k events/s "
            f"({1e6 / med:.2f} µs/event; samples {', '.join(f'{r / 1000:,.1f}' for r in sorted(rates))} k)"
        )


if __name__ == "__main__":
    main()
