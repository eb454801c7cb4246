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


def connect(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to the DuckDB file at `path` (DuckDB's errors as they come)."""
    return duckdb.connect(str(path))
