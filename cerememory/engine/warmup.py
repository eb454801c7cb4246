"""What a long-lived process prepares in the background after opening, kept off the path of
its first query.

- The validators of the models a first recall uses: pydantic builds a model's validator when it
  is first used (`defer_build`), about 0.1 s for `recall.query`'s request, response and record.
  They are built while opening waits on storage, so the first recall does not build them.
- Once the first recall has been answered and no request has come for a moment (`QUIET_S`):
  every record's `Head` (opening keeps the heads as columns; made one by one as queries ask for
  them, they would add about a millisecond to each early query and end up scattered in memory,
  slowing decay ticks), then the body cache (`RecordStore.warm`), a batch at a time, each batch
  again only once requests have paused. Both are Python work on every record: sharing the
  interpreter with early queries would slow them down by about as much as they save later ones.

A process that runs one command (`warm_cache=False`, as `cm` opens) starts none of this.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, get_args

from pydantic import BaseModel

from ..cmp import messages as m
from ..model import MemoryRecord

log = logging.getLogger("cerememory")

FIRST_CALL_MODELS: tuple[type[BaseModel], ...] = (m.RecallQueryRequest, m.RecallQueryResponse, MemoryRecord)
QUIET_S = 0.5  # no request for this long: the process is idle, background work may take the interpreter
Idle = Callable[[], bool]  # waits until the process is idle; False when closing instead


def with_nested(models: Iterable[type[BaseModel]]) -> list[type[BaseModel]]:
    """`models` and every model their fields hold, innermost first: each is made on its own
    by the code that answers (a response's items, a record's content), so each needs its own
    validator."""
    out: list[type[BaseModel]] = []

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp in out:
                return
            for field in tp.model_fields.values():
                visit(field.annotation)
            out.append(tp)
        else:
            for arg in get_args(tp):
                visit(arg)

    for model in models:
        visit(model)
    return out


class Warmup:
    """One background thread: the validators first, then, after the first recall (or never,
    if closing comes first), each step given to `opened`, in order, each once the process is
    idle. A step is given `idle` to call again before each slice of its work."""

    def __init__(self, stop: threading.Event, *, quiet: float = QUIET_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._stop = stop
        self._go = threading.Event()  # the first recall answered, or closing
        self._steps: tuple[Callable[[Idle], None], ...] = ()
        self._quiet, self._clock = quiet, clock
        self._requests = threading.Lock()
        self._running = 0  # requests being answered now
        self._last = clock()  # when the last one was answered
        self._thread = threading.Thread(target=self._run, name="cerememory-warm", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def opened(self, *steps: Callable[[Idle], None]) -> None:
        """The stores are open: what to run after the first recall (each is given `idle`)."""
        self._steps = steps

    @contextmanager
    def serving(self, *, recall: bool = False) -> Iterator[None]:
        """Around a request: background work waits while it runs and for `quiet` seconds after
        the last one; the first recall answered lets the steps begin."""
        with self._requests:
            self._running += 1
        try:
            yield
        finally:
            with self._requests:
                self._running -= 1
                self._last = self._clock()
            if recall and not self._go.is_set():
                self._go.set()

    def idle(self) -> bool:
        """Wait until no request is running and none was answered for `quiet` seconds: True
        then, False as soon as closing begins instead."""
        while not self._stop.is_set():
            with self._requests:
                running, last = self._running, self._last
            if running:  # look again after a while: when it ends is not signalled
                wait = max(self._quiet, 0.05)
            else:
                wait = self._quiet - (self._clock() - last)
                if wait <= 0:
                    return True
            self._stop.wait(wait)
        return False

    def join(self) -> None:
        """Stop waiting (the caller has set `stop`) and wait for the thread."""
        self._go.set()
        self._thread.join()

    def _run(self) -> None:
        for model in with_nested(FIRST_CALL_MODELS):
            if self._stop.is_set():
                return
            try:
                model.model_rebuild()
            except Exception:  # best effort: a first use builds it as it always could
                log.debug("building the validator of %s ahead failed", model.__name__, exc_info=True)
        self._go.wait()
        for step in self._steps:
            if not self.idle():
                return
            step(self.idle)
