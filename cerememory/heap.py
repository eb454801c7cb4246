"""Give the C heap's free pages back to the system after a burst of temporary objects.

Opening a large data directory builds the rows of every table before the indexes take what they
keep; glibc's allocator holds on to the freed memory, so a process looks a few hundred megabytes
larger than what it uses. `malloc_trim` returns it. Elsewhere (another C library, another
system) this does nothing.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

TRIM_AFTER_RECORDS = 10_000  # below this, what a bulk read leaves behind is not worth a trim


def release_free_memory() -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes  # here: a short command over a small memory never needs it

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


@contextmanager
def lasting_objects() -> Iterator[None]:
    """Build objects that live as long as the engine (opening, every head made at once): no
    cyclic collection runs while they are built, and afterwards they are moved out of the
    collector's generations (`gc.freeze`), so later full collections do not walk them (100k
    heads would double the collector's share of a decay tick)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()
