"""The API keys of a shared memory, in its schema (`storage.base.ApiKeyRows`): a key created
against any server is in the table every server reads, and so is its revocation. Servers read
the table again at most once a second, so a revocation reaches all of them within about that."""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from .database import Database

COLUMNS = ("id", "name", "created_at", "sha256", "prefix", "revoked_at")
RELOAD_SECONDS = 1.0


class ApiKeyTable:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.where = f"the table {db.schema}.api_keys at {db.where}"

    def load(self) -> list[dict[str, Any]]:
        rows = self.db.query(f"SELECT {', '.join(COLUMNS)} FROM api_keys ORDER BY created_at, id")
        return [dict(zip(COLUMNS, row, strict=True)) for row in rows]

    @contextmanager
    def locked(self) -> Iterator[list[dict[str, Any]]]:
        with self.db.transaction() as tx:  # write transactions of every server take turns
            rows = tx.execute(f"SELECT {', '.join(COLUMNS)} FROM api_keys ORDER BY created_at, id").fetchall()
            yield [dict(zip(COLUMNS, row, strict=True)) for row in rows]

    def save(self, rows: list[dict[str, Any]]) -> None:
        with self.db.joined() as tx:
            tx.execute("DELETE FROM api_keys")
            for row in rows:
                tx.execute(f"INSERT INTO api_keys ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * len(COLUMNS))})",
                           [row[c] for c in COLUMNS])

    def stamp(self) -> Hashable | None:
        """Another server may have changed the table at any time: a new stamp every second."""
        return int(time.monotonic() / RELOAD_SECONDS)

    def close(self) -> None:
        self.db.close()
