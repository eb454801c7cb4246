"""What other servers changed, and which server does the background work.

`ChangeFeed` reads the `changes` log that every write appends to (tables.py) past a watermark,
waking on the NOTIFY a commit sends and polling besides, so a lost notification delays a change
by one poll at most. `Leadership` holds a session-level advisory lock on a connection of its
own: the server holding it runs decay, dreams and consolidation; when that server dies its
connection closes, the lock is free, and the next server to ask takes it.
"""

from __future__ import annotations

import logging
import threading
import zlib

import psycopg

from ...cmp.errors import CMPError
from ..base import Change
from .database import Database
from .tables import channel

log = logging.getLogger("cerememory.storage")
_KEEP_SECONDS = 3600  # changes older than this are pruned; a server further behind reloads


class ChangeFeed:
    def __init__(self, db: Database, origin: str) -> None:
        self.db = db
        self.origin = origin
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def last(self) -> int:
        return int(self.db.query("SELECT coalesce(max(seq), 0) FROM changes")[0][0])

    def since(self, seq: int, limit: int = 10_000) -> tuple[list[Change], bool]:
        """Changes after `seq`, oldest first, and whether the log still reaches back to `seq`
        (False when older changes were pruned: the caller must reload everything)."""
        rows = self.db.query("SELECT seq, origin, kind, key FROM changes WHERE seq > %s ORDER BY seq LIMIT %s",
                             [seq, limit])
        pruned = self.db.query("SELECT value FROM state WHERE key = 'changes_pruned_to'")
        complete = not pruned or int(pruned[0][0]) <= seq
        return [Change(row[0], row[1] == self.origin, row[2], row[3]) for row in rows], complete

    def mine_since(self, seq: int) -> set[str]:
        """Keys (record ids, state keys) this server changed after `seq`: what its RAM may hold
        newer than a read of the database made when the log stood at `seq`."""
        rows = self.db.query("SELECT DISTINCT key FROM changes WHERE seq > %s AND origin = %s", [seq, self.origin])
        return {row[0] for row in rows}

    def wait(self, timeout: float) -> None:
        """Return when another server commits a change, or after `timeout` seconds."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self.db.connect()
                    self._conn.execute(f"LISTEN {channel(self.db.schema)}")
                for _ in self._conn.notifies(timeout=timeout, stop_after=1):
                    pass
            except (psycopg.Error, CMPError) as exc:
                log.warning("waiting for changes from other servers failed: %s", exc)
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                threading.Event().wait(timeout)

    def prune(self) -> None:
        """Drop changes every live server has long seen (run by the leader)."""
        with self.db.transaction() as tx:
            rows = tx.execute("DELETE FROM changes WHERE at < now() - make_interval(secs => %s) RETURNING seq",
                              [_KEEP_SECONDS]).fetchall()
            if rows:
                tx.execute("INSERT INTO state VALUES ('changes_pruned_to', %s) ON CONFLICT (key) "
                           "DO UPDATE SET value = greatest(state.value::bigint, EXCLUDED.value::bigint)::text",
                           [str(max(r[0] for r in rows))])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()


class Leadership:
    """Whether this server runs the background work now (an advisory lock per schema)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.key = zlib.crc32(f"cerememory-leader:{db.schema}".encode())
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def held(self) -> bool:
        """True while this process holds the lock, taking it when it is free."""
        with self._lock:
            try:
                if self._conn is not None and not self._conn.closed:
                    self._conn.execute("SELECT 1")  # still connected, so still holding it
                    return True
                self._conn = self.db.connect()
                row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", [self.key]).fetchone()
                if row and row[0]:
                    return True
            except (psycopg.Error, CMPError) as exc:
                log.warning("cannot tell whether this server leads: %s", exc)
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return False

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
