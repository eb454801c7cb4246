"""Group commit: concurrent writes share one transaction.

A commit costs about the same for one record as for a hundred (the log write and its sync
dominate), so with many clients the write rate is set by commits per second. `GroupCommit`
lets one caller at a time lead: it waits a bounded moment for others to arrive (only when
writes have been arriving together; a lone writer never waits), then commits everything
queued in one call of `commit` and answers each caller. Every caller returns only after its
write was committed, or raises the error that kept it out.

Callers that are not leading wait on their own `Wakeup`, which the leader sets once their write
is committed; it then hands the lead straight to the oldest write still queued. Waiting on a
shared lock instead made every answered caller take that lock in turn, each needing the
interpreter lock to do so, and the next group waited behind them all.

The wait adapts to load: it is a fraction of the last commit's duration, capped by
`MAX_WAIT`, and ends early once as many submissions are queued as the last group held. It
counts submissions, not writes: a thread handing in a set of writes (a transport gathers the
stores that arrived together) brings everything that was there to take, and a leader that
waited for a set as large as the last would wait out the whole wait for writes that, queued
behind it upstream, cannot arrive.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ..wakeup import Wakeup

MAX_WAIT = 0.004  # seconds a leader waits at most for more writes to arrive
WAIT_SHARE = 0.5  # of the last commit's duration
MAX_GROUP = 256  # writes per transaction at most; more wait for the next group

T = TypeVar("T")


@dataclass(eq=False)
class Pending(Generic[T]):
    """One caller's write, queued: the caller's context (audit attribution runs in it)."""

    write: T
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    first: bool = True  # the first write of its submission (`submit_each` hands in several)
    done: bool = False
    error: BaseException | None = None
    woken: Wakeup = field(default_factory=Wakeup)  # committed, or this caller leads next


class GroupCommit(Generic[T]):
    """Serialises commits of `T`s, committing the ones that arrive together as one group.

    `commit(take)` is called by one thread at a time; `take()` returns the group, and is
    called once `commit` holds its own locks, so writes that arrive while it waits for them
    join the group. `commit` sets `error` on each write it refused and raises only for a
    failure of the whole group; each write of a group that raised is then committed again on
    its own, so one write's fault never fails another's.
    """

    def __init__(self, commit: Callable[[Callable[[], list[Pending[T]]]], None], *,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._commit = commit
        self._clock = clock
        self._queue: list[Pending[T]] = []
        self._arrived = threading.Condition()  # guards the queue and `_leading`; a gathering leader waits on it
        self._leading = False
        self._last_arrivals = 1  # submissions the last group held
        self._last_seconds = 0.0
        self.groups = 0  # groups led, for tests and benchmarks
        self.commits = 0  # transactions that committed at least one write (introspect.stats, metrics)
        self.committed = 0  # the writes they committed: committed / commits is how well writes group

    def submit(self, write: T) -> None:
        """Queue `write` and return once it is committed (raising what refused it)."""
        error = self.submit_each([(write, contextvars.copy_context())])[0]
        if error is not None:
            raise error

    def submit_each(self, writes: Sequence[tuple[T, contextvars.Context]]) -> list[BaseException | None]:
        """Queue `writes` together, each attributed to its own caller's context, and return once
        every one is committed: what refused each (None where it was committed). One thread
        hands in the writes of many callers (a transport gathering them), so they commit
        together without a thread waiting for each."""
        mine = [Pending(write, context, first=n == 0) for n, (write, context) in enumerate(writes)]
        if not mine:
            return []
        with self._arrived:
            self._queue.extend(mine)
            follow = self._leading
            self._leading = True
            if follow:
                self._arrived.notify()  # the leader may be gathering
        for pending in mine:  # queued in order and adjacent, so committed in that order
            if follow and not pending.done:
                pending.woken.wait()  # committed, or this thread leads next
            follow = True
            if not pending.done:
                self._lead_until(pending)
        return [pending.error for pending in mine]

    def pending(self) -> int:
        """Writes queued and not yet taken by a leader."""
        with self._arrived:
            return len(self._queue)

    def _lead_until(self, mine: Pending[T]) -> None:
        """Commit groups until `mine` is committed, then hand the lead to the oldest write queued."""
        try:
            while not mine.done:
                self._lead()
        finally:
            with self._arrived:
                successor = self._queue[0] if self._queue else None
                self._leading = successor is not None
            if successor is not None:
                successor.woken.set()

    def _take(self) -> list[Pending[T]]:
        """The queued writes, up to MAX_GROUP."""
        with self._arrived:
            group, self._queue = self._queue[:MAX_GROUP], self._queue[MAX_GROUP:]
        return group

    def _gather(self) -> None:
        """Wait for more submissions when they have been arriving together, at most MAX_WAIT."""
        if self._last_arrivals <= 1:
            return
        wait = min(MAX_WAIT, WAIT_SHARE * self._last_seconds)
        deadline = self._clock() + wait
        with self._arrived:
            while len(self._queue) < MAX_GROUP and _arrivals(self._queue) < self._last_arrivals:
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._arrived.wait(left)

    def _lead(self) -> None:
        self._gather()
        started = self._clock()
        taken: list[Pending[T]] = []

        def take() -> list[Pending[T]]:
            if not taken:
                taken.extend(self._take())
            return list(taken)

        try:
            self._commit(take)
            self._count(taken)
        except BaseException as exc:
            self._one_by_one(take(), exc)
        finally:
            for pending in taken:
                pending.done = True
                pending.woken.set()
            self._last_arrivals = max(1, _arrivals(taken))
            self._last_seconds = self._clock() - started
            self.groups += 1

    def _one_by_one(self, group: list[Pending[T]], exc: BaseException) -> None:
        """The group failed as a whole: commit each write alone, so only its own fault fails it."""
        if len(group) == 1:
            group[0].error = exc
            return
        for pending in group:
            if pending.error is None:
                try:
                    self._commit(functools.partial(list, [pending]))
                    self._count([pending])
                except BaseException as alone:  # noqa: BLE001 - handed to its caller
                    pending.error = alone

    def _count(self, committed: list[Pending[T]]) -> None:
        """Count a transaction that committed `committed`, less the writes it refused."""
        writes = sum(pending.error is None for pending in committed)
        if writes:
            self.commits += 1
            self.committed += writes


def _arrivals(writes: Sequence[Pending[T]]) -> int:
    """How many submissions `writes` came in (a group may hold the tail of one cut short)."""
    return sum(pending.first for pending in writes)
