"""A retry budget shared by every machine of one asyncio process.

A machine configured with a retry budget (``config={"retry_budget": {"max_wait_ms":
15000}}``) asks it before every attempt (:class:`~rebound_agent.commands.AcquirePermit`,
answered by :class:`~rebound_agent.events.PermitAnswered`) and tells it of successes and
rate limits (:class:`~rebound_agent.commands.NoteBudget`). :class:`SharedBudget` answers
those commands for a whole fleet of agents, as the Rust runner's ``SharedBudget`` does: one
core ``RetryBudget`` (:class:`RetryBudget`), one clock, and each waiting retry woken the
moment the budget decides it::

    budget = SharedBudget({"capacity": 10})

    async def agent(machine: AgentMachine) -> None:
        event: Event = UserMessage.text("Fix the failing test.")
        while not machine.is_terminal:
            for command in machine.step(budget.now_ms(), event):
                match command:
                    case AcquirePermit():
                        event = await budget.acquire(command)
                    case NoteBudget():
                        budget.note(command)
                    ...  # SendRequest, Sleep, RunTools, Compact as usual

    await asyncio.gather(*(agent(AgentMachine(config, seed=i)) for i in range(100)))

Every machine sharing the budget must be driven on **its clock**, :meth:`SharedBudget.now_ms`:
permit asks, answers and notes carry absolute times that the budget compares across
machines. Every decision is core's; this module only hands them to the right waiter.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping

from ._native import RetryBudget
from .commands import AcquirePermit, NoteBudget
from .events import PermitAnswered

__all__ = ["RetryBudget", "SharedBudget"]

Json = Any


class SharedBudget:
    """One retry budget for every machine of an asyncio process.

    - :meth:`now_ms` is the budget's clock: drive every machine sharing it on it.
    - :meth:`acquire` answers an ``AcquirePermit``: at once, or when a deposit, refill, a
      rate limit or the ask's deadline decides it. Queued requests wait in core's
      first-come, first-served queue under tickets unique in this budget; one timer ticks
      the budget at its ``next_wakeup``. A ``{"wait_until": ms}`` decision (the target is
      rate-limited) goes to the machine like any other: it waits, then asks again.
      Canceling the awaiting task (the run ended or was canceled) withdraws the request.
    - :meth:`note` forwards a ``NoteBudget``; it may decide waiting requests.
    - :meth:`stats`, :meth:`balance`, :attr:`waiting` and :attr:`budget` for reports.

    ``config`` is a BudgetConfig in its JSON shape (None: core's default, 10 tokens).
    ``clock`` is any monotonic clock in seconds: ``time.monotonic`` by default, which is
    what asyncio's own loops use; pass ``loop.time`` for a loop with a clock of its own
    (the budget's timer runs on the loop). The budget's clock starts at 0 when it is
    created.
    """

    __slots__ = ("_budget", "_clock", "_origin", "_waiters", "_next_ticket", "_loop", "_timer", "_timer_at")

    def __init__(
        self,
        config: Mapping[str, Json] | str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._budget = RetryBudget(config)
        self._clock = clock
        self._origin = clock()
        self._waiters: dict[int, asyncio.Future[Json]] = {}
        self._next_ticket = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None

    def now_ms(self) -> int:
        """The budget's clock: milliseconds since it was created (rounded to the nearest)."""
        return int((self._clock() - self._origin) * 1000.0 + 0.5)

    @property
    def budget(self) -> RetryBudget:
        """The core budget it drives (do not feed it requests of your own)."""
        return self._budget

    async def acquire(self, command: AcquirePermit) -> PermitAnswered:
        """The answer to ``command`` (an AcquirePermit of any machine sharing this budget),
        to feed back to that machine. Raises :class:`BudgetError` for a malformed ask."""
        self._loop = loop = asyncio.get_running_loop()
        self._next_ticket += 1
        ticket = self._next_ticket
        decided = self._budget.request(self.now_ms(), ticket, command.ask)
        if decided is not None:
            self._settle()
            return PermitAnswered(command.permit, decided)
        answer: asyncio.Future[Json] = loop.create_future()
        self._waiters[ticket] = answer
        self._settle()  # the request's own ask may already have decided it
        try:
            return PermitAnswered(command.permit, await answer)
        finally:
            if self._waiters.pop(ticket, None) is not None:
                # Still waiting: its task was canceled. Leave the queue.
                self._budget.cancel(ticket)
                self._settle()

    def note(self, command: NoteBudget) -> None:
        """Forwards a NoteBudget (a success, an answered retry, a rate limit). Raises
        :class:`BudgetError` for a malformed note."""
        self._budget.record(self.now_ms(), command.note)
        self._settle()

    def stats(self) -> dict[str, int]:
        """Charged permits granted, denied and queued, and milli-tokens deposited."""
        return self._budget.stats()

    def balance(self) -> float:
        """Tokens available now."""
        tokens = self._budget.balance(self.now_ms())
        self._settle()
        return tokens

    @property
    def waiting(self) -> int:
        """Requests waiting in the queue."""
        return self._budget.waiting

    def _settle(self) -> None:
        """Hands every decided permit to its waiter, then sets the timer for the next
        wakeup."""
        while (decided := self._budget.poll_decision()) is not None:
            ticket, decision = decided
            waiter = self._waiters.pop(ticket, None)
            # A waiter that is gone was canceled: nothing to tell.
            if waiter is not None and not waiter.done():
                waiter.set_result(decision)
        self._schedule(self._budget.next_wakeup())

    def _schedule(self, at: int | None) -> None:
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_at = None
        if at is None or self._loop is None or self._loop.is_closed():
            return
        delay = max(0.0, self._origin + at / 1000.0 - self._clock())
        # The tick takes its turn behind the tasks woken at the same time, as the Rust
        # runner's (done by a waiting task woken by its timer): a first attempt due at the
        # moment a waiter's deadline comes still pays for that waiter.
        self._timer = self._loop.call_later(delay, self._loop.call_soon, self._wake)
        self._timer_at = at

    def _wake(self) -> None:
        self._timer = self._timer_at = None
        self._budget.tick(self.now_ms())
        self._settle()

    def __repr__(self) -> str:
        return f"SharedBudget(now_ms={self.now_ms()}, waiting={self.waiting}, stats={self.stats()})"
