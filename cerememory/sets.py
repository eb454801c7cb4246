"""Calls that threads make at once, run together as sets by one of the callers.

For work that costs less done at once than one call at a time: the first caller runs `run` on
every call queued meanwhile, while the others sleep until their outcomes are in, and the calls
that arrived while a set ran are the next set, run by the oldest of them. Nothing waits for a
timer: a lone call is a set of one and runs at once.

Two users: the dispatcher hands concurrent stores to the engine as one group commit
(cmp/dispatch.py), and the engine embeds the texts of concurrent requests in one forward pass
of the model (engine/core.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, cast

from .wakeup import Wakeup

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")


@dataclass(eq=False)
class _Call(Generic[Item, Outcome]):
    item: Item
    outcome: Outcome | BaseException | None = None
    done: bool = False
    woken: Wakeup = field(default_factory=Wakeup)  # answered, or this caller runs the next set


class Sets(Generic[Item, Outcome]):
    """Runs the calls of threads in sets: `run` takes a set's items in the order they came and
    returns each one's outcome (a value, or the exception to raise in that caller) in its place."""

    def __init__(self, run: Callable[[list[Item]], Sequence[Outcome | BaseException]]) -> None:
        self._run = run
        self._lock = threading.Lock()
        self._waiting: list[_Call[Item, Outcome]] = []
        self._running = False

    def waiting(self) -> int:
        """Calls queued and not yet taken into a set."""
        with self._lock:
            return len(self._waiting)

    def call(self, item: Item) -> Outcome:
        """The outcome of `item`, run in a set with the calls arriving meanwhile."""
        mine: _Call[Item, Outcome] = _Call(item)
        with self._lock:
            self._waiting.append(mine)
            follow = self._running
            self._running = True
        if follow:
            mine.woken.wait()
        if not mine.done:  # this thread runs the set its call is in, then hands on
            self._run_set(mine)
        if isinstance(mine.outcome, BaseException):
            raise mine.outcome
        return cast(Outcome, mine.outcome)  # done: the run's outcome for this item

    def _run_set(self, mine: _Call[Item, Outcome]) -> None:
        with self._lock:
            calls, self._waiting = self._waiting, []
        try:
            outcomes: Sequence[Outcome | BaseException] = self._run([c.item for c in calls])
            if len(outcomes) != len(calls):
                raise RuntimeError(f"a set of {len(calls)} calls came back with {len(outcomes)} outcomes")
        except BaseException as exc:  # noqa: BLE001 - every call of the set is told
            outcomes = [exc] * len(calls)
        for call, outcome in zip(calls, outcomes, strict=True):
            call.outcome, call.done = outcome, True
            if call is not mine:
                call.woken.set()
        with self._lock:
            successor = self._waiting[0] if self._waiting else None
            self._running = successor is not None
        if successor is not None:
            successor.woken.set()
