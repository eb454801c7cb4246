"""The system of record a data directory uses, chosen by the `storage.*` settings."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..cmp.errors import CMPError, ErrorCode
from .base import ApiKeyRows, AuditChain, Backend, KeyStore

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


@contextmanager
def open_key_store(settings: StorageSettings, data_dir: Path) -> Iterator[KeyStore]:
    """Where the memory's encryption keys live, without opening the rest of it (`init --encrypt`,
    `rekey`). A data directory's caller holds its lock."""
    if settings.backend == "postgres":
        from .postgres import open_key_tables

        with open_key_tables(settings.postgres_url or "", settings.namespace) as tables:
            yield tables
        return
    from .keyfiles import KeyFiles

    yield KeyFiles(data_dir)


def open_api_keys(settings: StorageSettings) -> ApiKeyRows:
    """The API key table of a memory shared over PostgreSQL (a data directory's is a file of
    security/keys.py)."""
    from .postgres.apikeys import ApiKeyTable
    from .postgres.database import Database

    return ApiKeyTable(Database(settings.postgres_url or "", settings.namespace))


def open_audit_chain(settings: StorageSettings) -> AuditChain | None:
    """The audit chain of a memory shared over PostgreSQL, for a command that writes to it
    without opening the memory (None: the audit log is a file in the data directory)."""
    if settings.backend != "postgres":
        return None
    from .postgres.audit import TableChain
    from .postgres.database import Database

    return TableChain(Database(settings.postgres_url or "", settings.namespace), owns=True)
