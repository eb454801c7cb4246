"""An embedded data directory opened ahead of its engine, on a thread.

A short process (one `cm` command) spends most of its start importing the engine's modules,
which runs Python and holds the interpreter lock; taking the data directory's lock and opening
its DuckDB file is work of the kernel and of DuckDB's C++, which runs beside it. `open_ahead`
starts that work on a thread; the engine, when it opens the same directory, waits for the thread
and adopts what it opened (the lock through `DataDirLock.acquire`, the connection through
`take_connection` from `Database`). A step that failed ahead is simply done again by the engine, which then
reports the failure the usual way (a directory owned by a server, a damaged file). Whatever is
never adopted is closed at exit.
"""

from __future__ import annotations

import atexit
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..lock import DataDirLock, hand_over
from .driver import DB_NAME, connect


@dataclass
class _Ahead:
    lock: DataDirLock | None = None
    connection: Any = None  # the DuckDB connection, once open
    done: threading.Event = field(default_factory=threading.Event)


_pending: dict[Path, _Ahead] = {}  # resolved data directory -> what is being opened there
_guard = threading.Lock()


def open_ahead(data_dir: Path) -> bool:
    """Start taking `data_dir`'s lock and opening its DuckDB file on a thread (a file that is
    not there yet is left to the engine, which creates it); returns whether the thread started."""
    data_dir = data_dir.expanduser().resolve()
    with _guard:
        if data_dir in _pending:
            return False
        ahead = _pending[data_dir] = _Ahead()
    hand_over(data_dir, lambda: _take_lock(data_dir))
    threading.Thread(target=_open, args=(ahead, data_dir), name="cerememory-open-ahead", daemon=True).start()
    return True


def _open(ahead: _Ahead, data_dir: Path) -> None:
    try:
        lock = DataDirLock(data_dir)
        lock.acquire(adopt=False)
        ahead.lock = lock
        if (data_dir / DB_NAME).is_file():
            ahead.connection = connect(data_dir / DB_NAME)
    except Exception:  # noqa: BLE001 - the engine's own attempt reports it
        pass
    finally:
        ahead.done.set()


def _wait(data_dir: Path) -> _Ahead | None:
    with _guard:
        ahead = _pending.get(data_dir)
    if ahead is None:
        return None
    ahead.done.wait()
    return ahead


def _take_lock(data_dir: Path) -> DataDirLock | None:
    """The lock of `data_dir` taken ahead (once), after waiting for the thread; None when none was."""
    ahead = _wait(data_dir)
    if ahead is None:
        return None
    lock, ahead.lock = ahead.lock, None
    return lock


def take_connection(path: Path) -> Any:
    """The DuckDB connection to `path` opened ahead (once), or None."""
    ahead = _wait(path.parent)
    if ahead is None:
        return None
    with _guard:
        _pending.pop(path.parent, None)
    connection, ahead.connection = ahead.connection, None
    if ahead.lock is not None:  # taken ahead but never adopted: not this process's to keep
        ahead.lock.release()
        ahead.lock = None
    return connection


def close_ahead() -> None:
    """Close what was opened ahead and never adopted (the process went elsewhere, or failed first)."""
    with _guard:
        left = list(_pending.items())
        _pending.clear()
    for data_dir, ahead in left:
        hand_over(data_dir, None)
        ahead.done.wait()
        if ahead.connection is not None:
            ahead.connection.close()
        if ahead.lock is not None:
            ahead.lock.release()


atexit.register(close_ahead)
