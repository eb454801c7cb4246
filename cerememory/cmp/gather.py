"""Concurrent calls from threads of an operation the engine takes together
(`Dispatcher.gathers`, encode.store's): one of the calling threads runs every call queued
meanwhile in one `Dispatcher.call_each`, while the others sleep until their answers are in.

Run one by one, each call would do its own validation, audit entry and answer on its own
thread right after its group commit, and all the threads of a group would take the GIL in
turn to do it: the server's threaded transports (gRPC) spent more on that than on the writes.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from ..wakeup import Wakeup

Request = dict[str, Any] | BaseModel


class SetRunner(Protocol):
    """What runs a set: `Dispatcher.call_each`."""

    def call_each(self, name: str, calls: Sequence[tuple[contextvars.Context, Request]]
                  ) -> list[BaseModel | BaseException]: ...


@dataclass(eq=False)
class _Call:
    context: contextvars.Context
    request: Request
    outcome: BaseModel | BaseException | None = None
    woken: Wakeup = field(default_factory=Wakeup)  # answered, or this caller runs the next set


class Gathered:
    """The calls of operation `name` that threads make at once, run as sets."""

    def __init__(self, dispatcher: SetRunner, name: str) -> None:
        self.dispatcher, self.name = dispatcher, name
        self._lock = threading.Lock()
        self._waiting: list[_Call] = []
        self._running = False

    def waiting(self) -> int:
        """Calls queued and not yet taken into a set."""
        with self._lock:
            return len(self._waiting)

    def call(self, request: Request) -> BaseModel:
        """`Dispatcher.call(name, request)`, in a set with the calls arriving meanwhile."""
        mine = _Call(contextvars.copy_context(), request)
        with self._lock:
            self._waiting.append(mine)
            follow = self._running
            self._running = True
        if follow:
            mine.woken.wait()
        if mine.outcome is None:  # this thread runs the set its call is in, then hands on
            self._run_set(mine)
        if isinstance(mine.outcome, BaseException):
            raise mine.outcome
        assert mine.outcome is not None
        return mine.outcome

    def _run_set(self, mine: _Call) -> None:
        with self._lock:
            calls, self._waiting = self._waiting, []
        try:
            outcomes = self.dispatcher.call_each(self.name, [(c.context, c.request) for c in calls])
        except BaseException as exc:  # noqa: BLE001 - every call of the set is told
            outcomes = [exc] * len(calls)
        for call, outcome in zip(calls, outcomes, strict=True):
            call.outcome = outcome
            if call is not mine:
                call.woken.set()
        with self._lock:
            successor = self._waiting[0] if self._waiting else None
            self._running = successor is not None
        if successor is not None:
            successor.woken.set()
