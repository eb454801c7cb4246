"""A one-shot wake-up for one waiting thread, cheaper than an `Event`."""

from __future__ import annotations

import threading


class Wakeup:
    """A one-shot signal for the one thread waiting on it: a lock taken when it is made and
    released to wake the waiter. An `Event` would do, but its `Condition` is Python code that
    both sides run under the interpreter lock."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        """Wake the waiter; later calls do nothing. One thread at a time calls it (the one
        leading), so calls never overlap."""
        if not self._set:
            self._set = True
            self._lock.release()

    def wait(self) -> None:
        self._lock.acquire()
