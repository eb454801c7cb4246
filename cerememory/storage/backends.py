"""The system of record a data directory uses, chosen by the `storage.*` settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..cmp.errors import CMPError, ErrorCode
from .base import Backend

BACKENDS = ("duckdb", "postgres")


@dataclass(frozen=True)
class StorageSettings:
    backend: str = "duckdb"  # one of BACKENDS
    postgres_url: str | None = None  # libpq URL; PG* variables, PGPASSFILE and sslmode apply as in psql
    namespace: str = "cerememory"  # the PostgreSQL schema holding this memory


def open_backend(settings: StorageSettings, data_dir: Path) -> Backend:
    if settings.backend == "duckdb":
        from .duckdb import DuckDBBackend

        return DuckDBBackend(data_dir)
    if settings.backend == "postgres":
        from .postgres import PostgresBackend

        return PostgresBackend(settings.postgres_url or "", settings.namespace)
    raise CMPError(ErrorCode.VALIDATION_ERROR, f"storage.backend: {settings.backend!r} is not a storage backend",
                   hint="use one of: " + ", ".join(BACKENDS))
