"""The system of record a data directory uses, chosen by the `storage.backend` setting."""

from __future__ import annotations

from pathlib import Path

from ..cmp.errors import CMPError, ErrorCode
from .base import Backend

BACKENDS = ("duckdb",)


def open_backend(name: str, data_dir: Path) -> Backend:
    if name == "duckdb":
        from .duckdb import DuckDBBackend

        return DuckDBBackend(data_dir)
    raise CMPError(ErrorCode.VALIDATION_ERROR, f"storage.backend: {name!r} is not a storage backend",
                   hint="use one of: " + ", ".join(BACKENDS))
