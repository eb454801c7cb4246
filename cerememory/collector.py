"""Hold off Python's cyclic garbage collector during a burst of short-lived objects.

A batch of a thousand records builds tens of thousands of containers (the parsed request, the
records, their bodies and index entries) that reference counting frees on its own. Each 700
allocations trigger a young collection, and every few batches a full one walks every object
the process holds: at 100k stored records that walk costs more than the batch's own work, and
finds nothing to free. Held off for the batch, the collector runs once after it instead.

The collector is one per process: a pause is counted, so concurrent bursts on several threads
keep it off until the last one ends, and a process that turned it off itself keeps it off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_paused = 0  # bursts running now
_resume = False  # whether the collector was on when the first of them began


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the duration of the block (and of any other pause running)."""
    global _paused, _resume
    with _lock:
        if _paused == 0:
            _resume = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _lock:
            _paused -= 1
            if _paused == 0 and _resume:
                gc.enable()
