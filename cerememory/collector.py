"""Hold off Python's cyclic garbage collector while many objects are built at once.

A batch of a thousand records builds tens of thousands of containers (the parsed request, the
records, their bodies and index entries) that reference counting frees on its own. Each 700
allocations trigger a young collection, and every few batches a full one walks every object
the process holds: at 100k stored records that walk costs more than the batch's own work, and
finds nothing to free. Held off for the batch, the collector runs once after it instead.

The collector is one per process: a pause is counted, so concurrent bursts on several threads
keep it off until the last one ends, and a process that turned it off itself keeps it off.
Bursts that overlap without end (a server taking batches from many clients at once) would keep
it off for good: once it has been off for `LONGEST_PAUSE_S`, the burst that ends next runs one
collection, so cyclic garbage still goes.

Objects built to last as long as the engine (opening's, every head made at once) are built the
same way and then moved out of the collector's generations (`lasting_objects`), so later full
collections never walk them.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_paused = 0  # bursts running now
_resume = False  # whether the collector was on when the first of them began
_since = 0.0  # when the collector was last off and clean: the first pause began, or a collection ran
LONGEST_PAUSE_S = 10.0


@contextmanager
def paused() -> Iterator[None]:
    """The collector off for the duration of the block (and of any other pause running)."""
    global _paused, _resume, _since
    with _lock:
        if _paused == 0:
            _resume = gc.isenabled()
            _since = time.monotonic()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        collect = False
        with _lock:
            _paused -= 1
            if _paused == 0 and _resume:
                gc.enable()
            elif _paused and _resume and time.monotonic() - _since >= LONGEST_PAUSE_S:
                collect, _since = True, time.monotonic()
        if collect:
            gc.collect()


@contextmanager
def lasting_objects() -> Iterator[None]:
    """Build objects that live as long as the engine: no cyclic collection runs while they are
    built, and afterwards they are frozen (`gc.freeze`), so later full collections skip them
    (100k heads would double the collector's share of a decay tick)."""
    with paused():
        try:
            yield
        finally:
            gc.freeze()
