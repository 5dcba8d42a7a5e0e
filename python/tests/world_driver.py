"""The Python binding as one of the drivers of tests/tests/drivers.rs: plays one scripted
world of tests/worlds.json with the example agent's loop (python/examples/agent.py, httpx)
against the fake server the Rust test started, the world's scripted tools run by rebound
(:class:`ScenarioTools`), the machine configured and seeded as the world says. Writes the
run's trace and prints one JSON line: ``{"tally": {...}}``, or ``{"failed": kind}``.

    python world_driver.py WORLD.json BASE_URL TRACE.jsonl
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from rebound_agent import ScenarioTools, commands as c, events as e


def example_agent() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "examples" / "agent.py"
    spec = importlib.util.spec_from_file_location("rebound_example_agent", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


agent = example_agent()


class WorldAgent(agent.HttpxAgent):  # type: ignore[misc,name-defined]
    """The example agent, its tools the world's scripted ones and its model the target's."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, world: dict[str, Any]) -> None:
        self.scenario_tools = ScenarioTools(world["scenario"])
        config = {**world["machine"], "tools": self.scenario_tools.specs()}
        self.models = [target["model"] for target in config["targets"]]
        super().__init__(
            client, base_url, "anthropic", self.models[0], "test-key", tools=None,
            seed=world["machine_seed"], say=lambda *_, **__: None, record=True, config=config,
        )

    def model_for(self, command: c.SendRequest) -> str:
        return self.models[command.target]

    async def run_tools(self, batch: int, calls: list[dict]) -> e.Event:
        # The scripted durations are not waited, as the Rust drivers do not wait them.
        _duration_ms, outcome = self.scenario_tools.run(calls)
        return e.ToolsFinished(batch, outcome)


async def play(world: dict[str, Any], base_url: str, trace: Path) -> dict[str, Any]:
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=0)) as client:
        driver = WorldAgent(client, base_url, world)
        code = await driver.run(world["user_message"])
        trace.write_text(driver.machine.trace_jsonl())
        if code != 0:
            # As core's RunError::kind names it: the provider failure's kind, else the type.
            error = (driver.machine.outcome() or {}).get("Err") or {}
            if not isinstance(error, dict):
                return {"failed": str(error)}
            if error.get("type") == "provider":
                return {"failed": (error.get("failure") or {}).get("kind", "unknown")}
            return {"failed": error.get("type", "unknown")}
        t = driver.machine.tally
        fields = ("requests", "retries", "retry_wait_ms", "compactions", "fallbacks", "tool_calls",
                  "tool_errors", "stream_resets")
        return {"tally": {name: getattr(t, name) for name in fields}}


def main() -> int:
    world_file, base_url, trace = sys.argv[1:4]
    world = json.loads(Path(world_file).read_text())
    print(json.dumps(asyncio.run(play(world, base_url, Path(trace)))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
