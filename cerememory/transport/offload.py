"""The worker threads an HTTP request's CMP call runs on, off the event loop.

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
while the server is calm (see its docstring), and `Gathering` hands the stores of concurrent
requests to one worker together.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from ..cmp.dispatch import Dispatcher

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
                _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="cerememory-http")
    return _executor


class Gathering:
    """The writes of one operation from concurrent requests, handed to a worker together.

    Run one by one, each write would hold a worker thread while it waits for its group commit:
    with 32 writing clients, 32 threads wake in turn after every commit, each taking the GIL to
    answer its request, and that costs the server more than the writes do. Here the event loop
    queues the writes that arrive while the last set is being committed, and hands them to one
    worker thread in one `Dispatcher.call_each`, which validates, audits and answers each as
    its own call, in its request's context, and commits them as one group."""

    def __init__(self, dispatcher: Dispatcher, name: str) -> None:
        self.dispatcher, self.name = dispatcher, name
        self._waiting: list[tuple[contextvars.Context, dict[str, Any], asyncio.Future[Any]]] = []
        self._handed = False  # a set is with a worker

    async def call(self, body: dict[str, Any]) -> BaseModel:
        """The answer to one write, once it is committed (raising what refused it)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[BaseModel] = loop.create_future()
        self._waiting.append((contextvars.copy_context(), body, future))
        if not self._handed:
            self._hand_over(loop)
        return await future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        calls, self._waiting = self._waiting, []
        self._handed = True
        _pool().submit(self._run, loop, calls)

    def _run(self, loop: asyncio.AbstractEventLoop,
             calls: list[tuple[contextvars.Context, dict[str, Any], asyncio.Future[Any]]]) -> None:
        """On a worker: run the set, then answer its requests on the loop."""
        try:
            outcomes = self.dispatcher.call_each(self.name, [(context, body) for context, body, _ in calls])
        except BaseException as exc:  # noqa: BLE001 - every request of the set is told
            outcomes = [exc] * len(calls)
        try:
            loop.call_soon_threadsafe(self._answer, loop, calls, outcomes)
        except RuntimeError:  # the loop closed meanwhile: nobody waits for the answers
            pass

    def _answer(self, loop: asyncio.AbstractEventLoop,
                calls: list[tuple[contextvars.Context, dict[str, Any], asyncio.Future[Any]]],
                outcomes: list[BaseModel | BaseException]) -> None:
        self._handed = False
        for (_, _, future), outcome in zip(calls, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                _settle(future, None, outcome)
            else:
                _settle(future, outcome, None)
        if self._waiting:
            self._hand_over(loop)


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


QUICK = 0.003  # a read whose recent calls took less (seconds) may run on the loop's thread
IDLE = 0.0002  # a call arriving within this long of the last one's end (seconds) found the server busy
CALM = 0.05  # ... and so may a read only while fewer than this share of recent arrivals found it busy


class Placement:
    """Where one server's CMP calls run. A read (`inline=True`) runs on the event loop's own
    thread when it is quick (its recent calls took under QUICK seconds each) and the server is
    calm: this call found it idle (no call under way, none finished within IDLE seconds), and so
    did nearly all recent ones (a moving share under CALM). Anything else goes to a worker.
    Idle, not just alone: requests that arrived while a read held the loop start right after
    it, and each would otherwise find itself alone and hold the loop in turn. Calm, not just
    idle: with several clients a call now and then finds the server idle, and holding the loop
    for it keeps the others' requests from being read meanwhile. A write never runs here: it
    may wait for others to commit with it (engine/group.py), and they could not arrive."""

    def __init__(self, *, quick: float = QUICK, idle: float = IDLE, calm: float = CALM,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.quick, self.idle, self.calm, self.clock = quick, idle, calm, clock
        self._running = 0
        self._idle_since = clock()
        self._busy = 1.0  # the share of recent arrivals that found the server busy (a moving average)
        self._took: dict[str, float] = {}  # name -> recent seconds a call (a moving average)

    async def run(self, name: str, inline: bool, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`function(*args, **kwargs)`, the call named `name`, where it should run."""
        def here() -> T:
            return contextvars.copy_context().run(function, *args, **kwargs)

        return await self._placed(name, inline, here, lambda: run_in_worker(function, *args, **kwargs))

    async def gathered(self, gathering: Gathering, body: dict[str, Any]) -> BaseModel:
        """A write handed to `gathering` with the others arriving together (never on the loop)."""
        return await self._placed(gathering.name, False, None, lambda: gathering.call(body))

    async def _placed(self, name: str, inline: bool, here: Callable[[], T] | None,
                      away: Callable[[], Awaitable[T]]) -> T:
        began = self.clock()
        busy = self._running > 0 or began - self._idle_since < self.idle
        self._busy = 0.9 * self._busy + (0.1 if busy else 0.0)
        on_loop = inline and not busy and self._busy < self.calm and self._took.get(name, self.quick) < self.quick
        self._running += 1
        try:
            if on_loop and here is not None:
                return here()
            return await away()
        finally:
            done = self.clock()
            took = self._took.get(name)
            self._took[name] = done - began if took is None else 0.8 * took + 0.2 * (done - began)
            self._running -= 1
            if not self._running:
                self._idle_since = done
