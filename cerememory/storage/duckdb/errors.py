"""DuckDB's errors as CMP errors, in one place (tests/test_storage_errors.py checks the table).

A full disk is STORAGE_FULL wherever it surfaces. A failure of the files or the connection is
`StorageUnavailable`: the machine's fault, retried rather than held against a request. Anything
else DuckDB refuses is an internal error. DuckDB's own message can quote stored values, so it
goes to the server log, never into the error a client sees.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ...cmp.errors import CMPError, ErrorCode
from ..base import StorageUnavailable
from ..full import is_disk_full, storage_full
from .driver import duckdb

log = logging.getLogger("cerememory.storage")

UNAVAILABLE = (duckdb.IOException, duckdb.FatalException, duckdb.ConnectionException, duckdb.PermissionException)


def translate(exc: duckdb.Error, path: Path) -> CMPError:
    """The CMP error a DuckDB failure on the database at `path` is reported as."""
    if is_disk_full(exc):
        return storage_full(path)
    log.warning("the database %s failed: %s: %s", path, type(exc).__name__, exc)
    if isinstance(exc, UNAVAILABLE):
        return StorageUnavailable(f"the database {path} cannot be read or written ({type(exc).__name__})",
                                  hint="check the disk and the permissions of the data directory; "
                                       "the server log has DuckDB's message")
    if isinstance(exc, duckdb.TransactionException):
        return CMPError(ErrorCode.INTERNAL_ERROR, "the database refused the transaction; nothing was changed",
                        hint="retry the operation")
    return CMPError(ErrorCode.INTERNAL_ERROR, f"the database refused an operation ({type(exc).__name__}); "
                    "nothing was changed", hint="the server log has DuckDB's message")
