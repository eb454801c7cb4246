"""The DuckDB backend: one file in the data directory holds the system of record."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..keyfiles import KeyFiles
from .database import Database
from .driver import DB_NAME

if TYPE_CHECKING:
    from .tables import DuckTables

__all__ = ["DB_NAME", "DuckDBBackend"]


class DuckDBBackend:
    """`storage.base.Backend` over `<data_dir>/cerememory.duckdb`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        from .tables import DuckTables  # numpy and the models: imported when a backend opens, not before

        self.database = Database(data_dir / DB_NAME)
        self.read: DuckTables = DuckTables(self.database)
        self.changes = None  # the data directory's lock lets one process write it

    def leads(self) -> bool:
        return True

    def audit_chain(self) -> None:
        return None  # the audit log is a file in the data directory

    def key_store(self) -> KeyFiles:
        return KeyFiles(self.data_dir)  # beside the database, never inside it

    def release_cache(self) -> None:
        self.database.release_cache()

    @contextmanager
    def transaction(self) -> Iterator[DuckTables]:
        from .tables import DuckTables

        with self.database.transaction() as tx:
            yield DuckTables(self.database, tx)

    def close(self) -> None:
        self.database.close()
