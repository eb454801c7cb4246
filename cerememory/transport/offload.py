"""The worker threads an HTTP request's CMP call runs on, off the event loop.

A plain `ThreadPoolExecutor` rather than Starlette's `run_in_threadpool` (anyio's worker
threads): anyio hands each call over through a `queue.Queue`, whose condition variable, capacity
limiter and cancel scope cost the event loop's thread about a tenth of a millisecond of the GIL
per request, where the executor's C `SimpleQueue` costs a few microseconds. The call runs in a
copy of the caller's context, as anyio runs it, so the request id, key and transport bound by the
middleware (cmp/context.py) reach the dispatcher and the audit log.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

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
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_pool(), lambda: context.run(function, *args, **kwargs))
