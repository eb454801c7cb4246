"""Where a server's CMP calls run: on its event loop's thread or on a worker thread.

Both servers answer on an event loop (uvicorn for HTTP, grpc.aio for gRPC) and run each call
where `Calls` puts it.

A plain `ThreadPoolExecutor` rather than Starlette's `run_in_threadpool` (anyio's worker
threads): anyio hands each call over through a `queue.Queue`, whose condition variable, capacity
limiter and cancel scope cost the event loop's thread about a tenth of a millisecond of the GIL
per request, where the executor's C `SimpleQueue` costs a few microseconds. The call runs in a
copy of the caller's context, as anyio runs it, so the request id, key and transport bound by the
middleware (cmp/context.py) reach the dispatcher and the audit log. The worker settles the awaiting
asyncio future itself, once, through the loop: `loop.run_in_executor` would chain a second future
to the executor's, with a done-callback on each side, for every request.

A hop to a worker and back hands the GIL across threads twice and wakes two of them: on a
2-core machine that is about a fifth of a millisecond of a lone client's wait, more than a quick
read takes to serialise. `Placement` runs such a read on the event loop's own thread instead
(see its docstring), and `Gathering` hands the stores of concurrent requests to one worker
together.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from ..cmp.dispatch import Dispatcher, Operation

P = ParamSpec("P")
T = TypeVar("T")

# as many as anyio's default limiter allows: the calls of many clients run side by side (stores
# that arrive together take one worker between them, `Gathering`)
WORKERS = 40

_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        with _lock:
            if _executor is None:
                _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="cerememory-call")
    return _executor


class Gathering:
    """The writes of one operation from concurrent requests, handed to a worker together.

    Run one by one, each write would hold a worker thread while it waits for its group commit:
    with 32 writing clients, 32 threads wake in turn after every commit, each taking the GIL to
    answer its request, and that costs the server more than the writes do. Here the event loop
    queues the writes that arrive while the last set is being committed, and one worker thread
    takes them in one `Dispatcher.call_each`, which validates, audits and answers each as its
    own call, in its request's context, and commits them as one group.

    The worker takes the next set itself as soon as its set is committed, and the loop answers
    the committed set meanwhile: when the loop handed the next set over only after answering
    the last, the database sat idle for a quarter of each cycle."""

    def __init__(self, dispatcher: Dispatcher, name: str) -> None:
        self.dispatcher, self.name = dispatcher, name
        self._waiting: list[tuple[contextvars.Context, dict[str, Any], asyncio.Future[Any]]] = []
        self._handed = False  # a worker is running sets
        self._lock = threading.Lock()  # the loop queues writes, the worker takes them

    async def call(self, body: dict[str, Any]) -> BaseModel:
        """The answer to one write, once it is committed (raising what refused it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[BaseModel] = loop.create_future()
        with self._lock:
            self._waiting.append((contextvars.copy_context(), body, future))
            hand_over = not self._handed
            self._handed = True
        if hand_over:
            _pool().submit(self._run, loop)
        return await future

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        """On a worker: run the waiting sets one after another, each answered on the loop."""
        while True:
            with self._lock:
                calls, self._waiting = self._waiting, []
                if not calls:
                    self._handed = False
                    return
            try:
                outcomes = self.dispatcher.call_each(self.name, [(context, body) for context, body, _ in calls])
            except BaseException as exc:  # noqa: BLE001 - every request of the set is told
                outcomes = [exc] * len(calls)
            try:
                loop.call_soon_threadsafe(_answer, calls, outcomes)
            except RuntimeError:  # the loop closed meanwhile: nobody waits for the answers
                pass


def _answer(calls: list[tuple[contextvars.Context, dict[str, Any], asyncio.Future[Any]]],
            outcomes: list[BaseModel | BaseException]) -> None:
    for (_, _, future), outcome in zip(calls, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            _settle(future, None, outcome)
        else:
            _settle(future, outcome, None)


async def run_in_worker(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`function(*args, **kwargs)` on a worker thread, in a copy of this context."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()
    _pool().submit(_run, loop, future, lambda: context.run(function, *args, **kwargs))
    return await future


def _run(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], call: Callable[[], Any]) -> None:
    """On a worker: run `call` and hand its outcome to `future` on its loop."""
    try:
        outcome: tuple[Any, BaseException | None] = (call(), None)
    except BaseException as exc:  # the caller's to see, as `run_in_executor` would give it
        outcome = (None, exc)
    try:
        loop.call_soon_threadsafe(_settle, future, *outcome)
    except RuntimeError:  # the loop closed meanwhile: nobody waits for the answer
        pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the request was given up (its client went away)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


QUICK = 0.003  # a read whose recent calls took less CPU than this (seconds) runs on the loop's thread


class Placement:
    """Where one server's CMP calls run. A read (`inline=True`) runs on the event loop's own
    thread when it is quick: its recent calls took under QUICK seconds of CPU each, on the
    thread that ran them (what a call waits for, the interpreter lock, a worker or I/O, is not
    counted, so a busy server does not make a read look slow). Anything else goes to a worker.

    The work of all requests runs under one interpreter lock, so a worker adds only hand-offs
    to a quick read, busy server or not: with 8 clients recalling over HTTP, reads on the loop
    answered 1.5 times the calls of reads on workers, at two thirds of the p50
    (docs/operations.md gives a mixed load). Mixing the two is worse than either (reads on the
    loop only when they found the server idle: 0.79 times). Before a read runs on the loop, the
    loop takes one turn to read what else has arrived, so that every connection's requests are
    answered in turn: without it, two of 8 clients were answered half as often as the others.

    A write never runs here: it may wait for others to commit with it (engine/group.py), and
    they could not arrive."""

    def __init__(self, *, quick: float = QUICK, cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.quick, self.cpu_clock = quick, cpu_clock
        self._took: dict[str, float] = {}  # name -> recent CPU seconds a call (a moving average)

    async def run(self, name: str, inline: bool, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`function(*args, **kwargs)`, the call named `name`, where it should run."""
        spent: float | None = None  # left None by a call still running when its caller gave up

        def timed() -> T:
            nonlocal spent
            began = self.cpu_clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent = self.cpu_clock() - began

        try:
            if inline and self._took.get(name, self.quick) < self.quick:
                await asyncio.sleep(0)  # the others' requests that arrived meanwhile first
                return contextvars.copy_context().run(timed)
            return await run_in_worker(timed)
        finally:
            if spent is not None:
                took = self._took.get(name)
                self._took[name] = spent if took is None else 0.8 * took + 0.2 * spent


class Calls:
    """Where one server runs each CMP call: the writes that the engine takes together go to a
    worker as one set (`Gathering`), and the rest where `Placement` puts them (a read that
    changes nothing may run on the event loop's thread)."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher, self.placement = dispatcher, Placement()
        self._gatherings: dict[str, Gathering] = {}

    async def run(self, op: Operation, body: dict[str, Any]) -> BaseModel:
        """The answer to one call of `op` with its request `body`, in this context."""
        if self.dispatcher.gathers(op.name):
            gathering = self._gatherings.get(op.name)
            if gathering is None:
                gathering = self._gatherings[op.name] = Gathering(self.dispatcher, op.name)
            return await gathering.call(body)
        return await self.placement.run(op.name, not op.audited, self.dispatcher.call, op.name, body)
