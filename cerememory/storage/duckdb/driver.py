"""The DuckDB driver as this package uses it: the compiled engine module `_duckdb` alone.

`import duckdb` also loads DuckDB's Python relation and expression layers and looks up its
own version in the installed package metadata, several times the cost of the engine itself;
storage only connects, runs SQL and catches DuckDB's errors, which `_duckdb` provides (the
same objects `duckdb` re-exports). A short process (one `cm` command) starts that much faster.
Builds that ship no top-level `_duckdb` fall back to the package.
"""

from __future__ import annotations

from pathlib import Path

try:
    import _duckdb as duckdb
except ImportError:  # pragma: no cover - older DuckDB builds keep the engine inside the package
    import duckdb  # type: ignore[no-redef]

__all__ = ["DB_NAME", "connect", "duckdb"]

DB_NAME = "cerememory.duckdb"  # the file a data directory keeps its database in

# DuckDB's own threads: one, the caller's. With worker threads every statement hands its tasks
# to them and waits (a semaphore post and a wake-up each), which costs a one-row write about a
# fifth of its CPU; a memory's tables are a row group or a few (122,880 rows each), and DuckDB
# splits a scan by row group, so bulk reads gain little from them.
THREADS = 1

# How much write-ahead log DuckDB gathers before a commit checkpoints it into the file. A
# checkpoint rewrites every row group the log touched, whole (up to 122,880 rows with their
# vectors), so at DuckDB's 16MB a bulk write checkpoints every ~7,000 records and rewrites its
# tail each time: a third of its time. A larger log costs a reopen after a crash the replay of
# at most this much (about 0.4s per 128MB on 2 cores, beside the seconds loading RAM takes).
CHECKPOINT_THRESHOLD = "128MB"


def connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file at `path` (DuckDB's errors as they come)."""
    return duckdb.connect(str(path), config={"threads": THREADS, "checkpoint_threshold": CHECKPOINT_THRESHOLD})
