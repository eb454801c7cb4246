"""A full disk, wherever it surfaces, as the one CMP error STORAGE_FULL.

A full disk reaches Cerememory as an `OSError` (the audit log, key files, the lock file), as a
DuckDB error (the database and its write-ahead log) or as a tantivy error (the full-text
indexes), the last two as text only. All of them say so in the same few ways.
"""

from __future__ import annotations

import errno
from pathlib import Path

from ..cmp.errors import CMPError, ErrorCode

_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_FULL_TEXT = ("no space left on device", "os error 28", "disk quota exceeded", "os error 122")


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) reports a full disk or an exhausted quota."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        if any(marker in str(current).lower() for marker in _FULL_TEXT):
            return True
        current = current.__cause__ or current.__context__
    return False


def storage_full(path: str | Path) -> CMPError:
    """The error a client gets for a change that was not made because the disk is full."""
    return CMPError(ErrorCode.STORAGE_FULL, f"nothing was written: the disk holding {path} is full",
                    hint="free space on that disk; writes work again without a restart, reads go on meanwhile",
                    details={"path": str(path)})
