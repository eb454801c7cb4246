"""The worker threads an HTTP request's CMP call runs on, off the event loop.

A plain `ThreadPoolExecutor` rather than Starlette's `run_in_threadpool` (anyio's worker
threads): anyio hands each call over through a `queue.Queue`, whose condition variable, capacity
limiter and cancel scope cost the event loop's thread about a tenth of a millisecond of the GIL
per request, where the executor's C `SimpleQueue` costs a few microseconds. The call runs in a
copy of the caller's context, as anyio runs it, so the request id, key and transport bound by the
middleware (cmp/context.py) reach the dispatcher and the audit log. The worker settles the awaiting
asyncio future itself, once, through the loop: `loop.run_in_executor` would chain a second future
to the executor's, with a done-callback on each side, for every request.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# as many as anyio's default limiter allows: concurrent writes must all be in flight at once to
# commit together (engine/group.py)
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
