"""Give the C heap's free pages back to the system after a burst of temporary objects.

Opening a large data directory builds the rows of every table before the indexes take what they
keep; glibc's allocator holds on to the freed memory, so a process looks a few hundred megabytes
larger than what it uses. `malloc_trim` returns it. Elsewhere (another C library, another
system) this does nothing.
"""

from __future__ import annotations

import sys

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

