"""Closing what is still open when the interpreter exits.

Python tears a process down while its daemon threads still run; one caught inside DuckDB at that
moment aborts the whole process (`terminate called after throwing an instance of ...`, exit 134)
after its work was done. So whatever owns such threads registers here when it opens, and at exit,
before the teardown, each one still open is closed, newest first: the scheduler before the engine
it drives, every thread joined.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
import weakref
from typing import Protocol

log = logging.getLogger("cerememory")


class Closeable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakValueDictionary[int, Closeable] = weakref.WeakValueDictionary()
_order = itertools.count()
_lock = threading.Lock()
_registered = False


def close_at_exit(thing: Closeable) -> None:
    """Close `thing` at interpreter exit unless it was closed (or collected) before; a weak
    reference, so registering never keeps anything alive.

    The exit hook is registered on the first call, after DuckDB registered its own (it is
    imported before anything that opens a database): atexit runs the newest hook first, and
    DuckDB's refuses further queries."""
    global _registered
    with _lock:
        _open[next(_order)] = thing
        if not _registered:
            atexit.register(close_all)
            _registered = True


def close_all() -> None:
    """Close everything still registered, newest first; a failure is logged, never raised."""
    with _lock:
        things = [thing for _, thing in sorted(_open.items(), reverse=True)]
        _open.clear()
    for thing in things:
        try:
            thing.close()
        except Exception:
            log.exception("closing %s at exit failed", type(thing).__name__)

