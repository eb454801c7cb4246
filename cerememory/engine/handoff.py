"""The writer's lock, with work that can be handed to whoever holds it.

A server following the writes of other servers changes its RAM under the writer's lock. Under
load, local writes hold that lock almost all the time, one after another, and a thread waiting
its turn waits behind many of them (the lock is not fair). `HandoffLock.hand` instead leaves
the work at the lock: whichever thread holds the lock runs it as it lets go, so the work waits
for one holder at most, and is still done under the lock, between two writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Work = Callable[[], None]


class Handed:
    """Work left at a `HandoffLock`, run once by some holder; `done` is set after it ran and
    `error` holds what it raised (never raised into the thread that happened to run it)."""

    def __init__(self, work: Work) -> None:
        self.work = work
        self.done = threading.Event()
        self.error: BaseException | None = None

    def __call__(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # reported to the thread that handed it
            self.error = exc
        finally:
            self.done.set()


class HandoffLock:
    """A re-entrant lock; work handed to it runs under it when its holder lets go."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # how many times the holder entered: changed only by the holder
        self._owner: int | None = None  # the holding thread
        self._handed: list[Handed] = []
        self._handed_lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._depth += 1
        self._owner = threading.get_ident()
        return True

    def release(self) -> None:
        try:
            if self._depth == 1:
                self._run_handed()
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
            self._lock.release()

    def __enter__(self) -> HandoffLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def hand(self, work: Work, *, poll: float = 0.05) -> None:
        """Run `work` under the lock, by the thread holding it now as it lets go, or by this
        thread if it gets the lock first; returns once it ran, raising what it raised."""
        if self._owner == threading.get_ident():  # this thread holds the lock already
            work()
            return
        handed = Handed(work)
        with self._handed_lock:
            self._handed.append(handed)
        while not handed.done.is_set():
            if self.acquire(timeout=poll):
                self.release()  # runs it, unless a holder did meanwhile
        if handed.error is not None:
            raise handed.error

    def _run_handed(self) -> None:
        while True:
            with self._handed_lock:
                if not self._handed:
                    return
                handed = self._handed.pop(0)
            handed()
