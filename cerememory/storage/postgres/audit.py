"""The audit log of a shared memory: one hash chain in the `audit` table, whichever server writes.

Each append links to the last entry under a transaction-scoped advisory lock, so entries from
several servers form one chain, verified exactly as the file form is (security/audit.py): the
stored line is the entry's canonical JSON with its hash, byte for byte.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from ...security.audit import GENESIS, Verification, link, verify_lines
from .database import Database


class TableChain:
    """`security.audit.Chain` over the `audit` table of one schema."""

    def __init__(self, db: Database, *, owns: bool = False) -> None:
        self.db = db
        self.owns = owns  # whether closing the chain closes the database's connections
        self.where = f"{db.where} (schema {db.schema}, table audit)"
        self._key = zlib.crc32(f"cerememory-audit:{db.schema}".encode())
        self._head = (0, GENESIS)

    def extend(self, entries: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
        if not entries:
            return []
        with self.db.locked("audit", self._key) as conn:
            last = conn.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
            linked = link(entries, *((int(last[0]), str(last[1])) if last else (0, GENESIS)))
            with conn.cursor() as cursor:
                cursor.executemany("INSERT INTO audit (seq, line, hash) VALUES (%s, %s, %s)",
                                   [(entry["seq"], line, digest) for entry, digest, line in linked])
        self._head = (linked[-1][0]["seq"], linked[-1][1])
        return [(entry, digest) for entry, digest, _ in linked]

    def head(self) -> tuple[int, str]:
        return self._head

    def lines(self, batch: int = 5000) -> Iterator[bytes]:
        for rows in self.db.stream("SELECT line FROM audit ORDER BY seq", [], batch):
            yield from (bytes(row[0]) for row in rows)

    def verify(self) -> Verification:
        report = verify_lines(self.lines(), self.where)
        if report.ok:
            self._head = (report.entries, report.head)
        return report

    def sync(self) -> None:
        """Every append is committed before it returns."""

    def close(self) -> None:
        """A server's chain shares the backend's connections, closed with them."""
        if self.owns:
            self.db.close()
