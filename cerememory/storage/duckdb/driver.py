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


def connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file at `path` (DuckDB's errors as they come)."""
    return duckdb.connect(str(path), config={"threads": THREADS})
