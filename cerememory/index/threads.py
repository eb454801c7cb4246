"""How many threads a vector search uses, and its work shared between them a piece at a time.

One policy for every scan: BLAS runs one thread per call in this process, and a large scan
spreads itself over one thread per core (at most 8) instead; a BLAS thread count the user set
(OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, ...) is left to BLAS and also caps the scan's threads.

The scans are bound by memory bandwidth and their kernels (numpy, simsimd) release the GIL, so
two threads on two cores finish one in about half the time. Each thread takes the next piece
when it is done with one: when another process holds a core, the pool's thread starts late (or
after the work is gone) and just takes fewer pieces, so a search is not slower than the calling
thread alone (see _Pieces). A fixed split waits for its slow half instead: simsimd's own `threads=2` made the
int8 pass 1.4 times slower than one thread while the other core was busy.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

# a thread count the user set for BLAS; the engine then leaves BLAS alone
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
MAX_THREADS = 8
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_blas_set = False


def _user_threads() -> int | None:
    """The smallest positive BLAS thread count the user set, if any."""
    counts = [int(v) for name in BLAS_THREAD_VARIABLES
              if (v := os.environ.get(name, "").strip()).isdigit() and int(v) > 0]
    return min(counts) if counts else None


def search_threads() -> int:
    """Threads one large scan uses: one per core, at most MAX_THREADS and at most the user's
    BLAS thread count."""
    cores = max(1, min(os.cpu_count() or 1, MAX_THREADS))
    user = _user_threads()
    return cores if user is None else min(cores, user)


def set_blas_policy() -> None:
    """BLAS runs one thread per call in this process, once, unless the user set a BLAS thread
    count. The scan spreads a large matrix over the cores itself, and numpy releases the GIL,
    so BLAS threads of its own would only compete with those slices (and with the server's
    other requests) for the same cores: on 2 cores, numpy's default made vector search
    1.5-1.8 times slower than one thread."""
    global _blas_set
    with _lock:
        if _blas_set:
            return
        _blas_set = True
    if any(os.environ.get(name) for name in BLAS_THREAD_VARIABLES):
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="cerememory-scan")
        return _pool


class _Pieces:
    """The pieces of one call, handed out in order. Once every piece is handed out, the caller
    waits for a piece a helper still runs only as long as a piece takes it, then runs that
    piece itself: a helper the OS put aside mid-piece would otherwise hold the search up for a
    whole time slice. A piece gives the same result whoever runs it, so running one twice
    costs time, never correctness; a helper that fails leaves its piece to the caller, whose
    own error then surfaces."""

    def __init__(self, count: int, work: Callable[[int], None]) -> None:
        self.count, self.work = count, work
        self.next = itertools.count()  # next() on it is atomic under the GIL
        self.finished = [False] * count
        self.changed = threading.Condition()

    def _run(self, piece: int) -> None:
        self.work(piece)
        with self.changed:
            self.finished[piece] = True
            self.changed.notify_all()

    def help(self) -> None:
        while (piece := next(self.next)) < self.count:
            try:
                self._run(piece)
            except Exception:  # noqa: BLE001 - the caller runs the piece again and raises
                return

    def run(self) -> None:
        took = 0.0  # the longest piece on this thread: how long a helper's piece may take
        while (piece := next(self.next)) < self.count:
            started = time.perf_counter()
            self._run(piece)
            took = max(took, time.perf_counter() - started)
        for piece in range(self.count):
            with self.changed:
                done = self.changed.wait_for(partial(self.finished.__getitem__, piece), timeout=took)
            if not done:
                self._run(piece)


def share(count: int, work: Callable[[int], None]) -> None:
    """Run work(0), ..., work(count - 1), each once, on the calling thread and up to
    search_threads() - 1 pool threads, each taking the next piece when it is done with one;
    returns when every piece is done (some perhaps twice) and raises the error a piece raised
    on the calling thread."""
    helpers = min(search_threads(), count) - 1
    if helpers <= 0:
        for piece in range(count):
            work(piece)
        return
    pieces = _Pieces(count, work)
    pool = _executor(search_threads() - 1)
    for _ in range(helpers):
        pool.submit(pieces.help)
    pieces.run()
