"""Opening an embedded data directory in two halves, for a process that opens one at once.

The embedded client (`cerememory.api`) imports the whole engine first; `open_ahead` starts the
storage's own part before that (the data directory's lock and its database file, on a thread:
storage/duckdb/ahead.py), so the two run side by side. `open_config` then opens the engine as always
and adopts what was opened ahead. A data directory on another storage backend is opened the
usual way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Config


def open_ahead(config: Config) -> bool:
    """Start opening `config`'s data directory on a thread; whether it started."""
    if config["storage.backend"] != "duckdb":
        return False
    from .storage.duckdb.ahead import open_ahead as start

    return start(config.data_dir)


def close_ahead() -> None:
    """Release what was opened ahead and not adopted by an engine (the caller went elsewhere)."""
    from .storage.duckdb.ahead import close_ahead as close

    close()
