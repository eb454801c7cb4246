"""One process owns a data directory; a second opener is told which process to talk to."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..cmp.errors import CMPError, ErrorCode
from .full import is_disk_full, storage_full

LOCK_NAME = "cerememory.lock"
# data dir -> how to get the lock a thread took for it ahead of its engine (storage/duckdb/ahead.py)
_handed_over: dict[Path, Callable[[], DataDirLock | None]] = {}


def hand_over(data_dir: Path, take: Callable[[], DataDirLock | None] | None) -> None:
    """Let the next `acquire` of `data_dir` adopt the lock `take()` returns (which waits for the
    thread taking it); None withdraws the offer."""
    if take is None:
        _handed_over.pop(data_dir, None)
    else:
        _handed_over[data_dir] = take


def lock_owner(data_dir: Path) -> dict[str, Any] | None:
    """The owner (`{"pid", "server_url"}`) of `data_dir` while a process holds it, else None.

    Probes with a shared lock taken and dropped at once, never creating anything: a client
    deciding whether to talk to a running server must not claim a directory that has none.
    """
    try:
        fd = os.open(data_dir / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return DataDirLock._read_owner(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def owning_server(data_dir: str | Path) -> str | None:
    """The URL of the `cerememory serve` that owns `data_dir` right now (its lock file names it),
    or None when no server holds it. Creates nothing, so a client can ask before choosing where
    to go."""
    owner = lock_owner(Path(data_dir).expanduser())
    url = owner.get("server_url") if owner else None
    return url if isinstance(url, str) and url else None


class DataDirLock:
    """An exclusive `flock` on `<data_dir>/cerememory.lock`, holding the owner's pid and URL.

    The kernel drops the lock when the process dies, so a crash never leaves a stale lock.
    """

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, *, server_url: str | None = None, adopt: bool = True) -> None:
        """Take the lock, or adopt the one this process took ahead of its engine
        (`storage.ahead`) unless `adopt` is False."""
        take = _handed_over.pop(self.path.parent, None) if adopt else None
        if take is not None:
            ahead = take()
            if ahead is not None and ahead._fd is not None:
                self._fd, ahead._fd = ahead._fd, None
                if server_url is not None:
                    self._write_owner(self._fd, server_url)
                return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = self._read_owner(fd)
            os.close(fd)
            pid = owner.get("pid", "unknown")
            url = owner.get("server_url")
            hint = (
                f"talk to the running server instead: --server-url {url}"
                if url
                else "stop that process, or run `cerememory serve` there and use --server-url"
            )
            raise CMPError(
                ErrorCode.DATA_DIR_LOCKED,
                f"data directory {self.path.parent} is in use by process {pid}",
                hint=hint,
                details={"pid": pid, "server_url": url, "data_dir": str(self.path.parent)},
            ) from None
        try:
            self._write_owner(fd, server_url)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _write_owner(self, fd: int, server_url: str | None) -> None:
        try:
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps({"pid": os.getpid(), "server_url": server_url}).encode())
            os.fsync(fd)
        except OSError as exc:
            if is_disk_full(exc):
                raise storage_full(self.path) from exc
            raise

    @staticmethod
    def _read_owner(fd: int) -> dict[str, Any]:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            owner = json.loads(os.read(fd, 4096) or b"{}")
        except (OSError, ValueError):
            return {}
        return owner if isinstance(owner, dict) else {}

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
