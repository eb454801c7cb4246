"""How many threads a vector search uses, and its work shared between them a piece at a time.

One policy for every scan: BLAS runs one thread per call in this process, and a large scan
spreads itself over one thread per core (at most 8) instead; a BLAS thread count the user set
(OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, ...) is left to BLAS and also caps the scan's threads.

The scans are bound by memory bandwidth and their kernels (numpy, simsimd) release the GIL, so
two threads on two cores finish one in about half the time. Each thread takes the next piece
when it is done with one: when another process holds a core, the pool's thread starts late (or
after the work is gone) and just takes fewer pieces, and the caller never waits long for a piece
a helper holds (see _Pieces). A fixed split waits for its slow half instead: simsimd's own
`threads=2` made the int8 pass 1.4 times slower than one thread while the other core was busy.
Sharing still costs something (more calls, a hand-off, a piece now and then run twice: 5-10%
of the int8 pass with the other core busy), so while other processes keep the other cores
busy (read from /proc/stat every half second) a scan is not shared at all: it runs as one piece
on the calling thread, as it would alone.
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
CORES = os.cpu_count() or 1  # read once: os.cpu_count() costs about 12 us a call
LOAD_SAMPLE_S = 0.5  # how often a search re-reads how busy the other processes keep the cores
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
    cores = max(1, min(CORES, MAX_THREADS))
    user = _user_threads()
    return cores if user is None else min(cores, user)


def set_blas_policy() -> None:
    """BLAS runs one thread per call in this process, from the first search or embedding on,
    unless the user set a BLAS thread count. The scan spreads a large matrix over the cores
    itself, and numpy releases the GIL, so BLAS threads of its own would only compete with those
    slices (and with the server's other requests) for the same cores: on 2 cores, numpy's
    default made vector search 1.5-1.8 times slower than one thread. An embedding's forward pass
    on two BLAS threads ends sooner alone, but costs about 1.6 times the CPU, and with other
    requests running (concurrent stores) it ends no sooner (bench/embedder_ab.py)."""
    global _blas_set
    with _lock:
        if _blas_set:
            return
        _blas_set = True
    if any(os.environ.get(name) for name in BLAS_THREAD_VARIABLES):
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def _busy_seconds() -> float | None:
    """CPU seconds all cores spent busy since boot (Linux); None where /proc/stat is missing."""
    try:
        with open("/proc/stat", "rb") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


class _Others:
    """How many cores other processes kept busy over the last LOAD_SAMPLE_S or so: the machine's
    busy time less this process's own (all its threads, helpers included)."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.busy = self.own = self.cores = 0.0

    def cores_busy(self) -> float:
        now = time.monotonic()
        if self.at is not None and now - self.at < LOAD_SAMPLE_S:
            return self.cores
        busy, own = _busy_seconds(), time.process_time()
        if busy is None:
            return 0.0
        with _lock:
            if self.at is not None and now > self.at:
                self.cores = max(0.0, (busy - self.busy) - (own - self.own)) / (now - self.at)
            self.at, self.busy, self.own = now, busy, own
        return self.cores


_others = _Others()


def helper_threads(pieces: int) -> int:
    """Pool threads worth handing a scan of `pieces` pieces: search_threads() - 1, fewer when
    other processes keep those cores busy, never more than the pieces after the caller's."""
    wanted = min(search_threads(), pieces) - 1
    if wanted <= 0:
        return 0
    spare = CORES - 1 - _others.cores_busy()
    return max(0, min(wanted, int(spare + 0.5)))


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


def share(rows: int, piece_rows: int, work: Callable[[int, int], None]) -> None:
    """Run work(start, stop) over rows [0, rows): with spare cores, in pieces of `piece_rows`
    shared by the calling thread and helper_threads() pool threads, each taking the next piece
    when it is done with one; otherwise once, over all rows, on the calling thread. Returns when
    every row is done (some perhaps twice) and raises the error a piece raised on the calling
    thread."""
    count = -(-rows // piece_rows)
    helpers = helper_threads(count)
    if helpers <= 0:
        work(0, rows)
        return

    def piece(p: int) -> None:
        work(p * piece_rows, min(rows, (p + 1) * piece_rows))

    pieces = _Pieces(count, piece)
    pool = _executor(search_threads() - 1)
    for _ in range(helpers):
        pool.submit(pieces.help)
    pieces.run()
