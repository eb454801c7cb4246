"""One DuckDB file: schema, numbered migrations, the single writer connection, reader cursors.

DuckDB is slow at single-row writes and fast at columnar ones, so every write path hands
whole batches over as numpy columns it scans in one statement (tables.py). Times are stored as
epoch seconds (DOUBLE) and record bodies as codec blobs.

A full disk is STORAGE_FULL, and it never needs a restart: a write that cannot reach the
write-ahead log is rolled back, and when a checkpoint fails DuckDB invalidates the whole
database instance, which is then reopened (at once, and again before the next use if that
failed). A commit that DuckDB reports durable although its checkpoint failed stands.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ...cmp.errors import CMPError, ErrorCode
from ..full import is_disk_full, storage_full
from .ahead import take_connection
from .driver import connect, duckdb
from .errors import translate
from .prepared import Prepared
from .transaction import WriteTransaction

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("cerememory.storage")
_INVALIDATED = "database has been invalidated"
_DURABLE = "commit succeeded and is durable"
RELEASED_LIMIT = "64MB"  # what DuckDB may keep cached when `release_cache` lets go of the rest

# Append-only: an applied migration is never edited (its hash is checked on every open).
MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "initial schema",
        """
        CREATE TABLE records (
            id UUID PRIMARY KEY,
            store VARCHAR NOT NULL,
            created_at DOUBLE NOT NULL,
            updated_at DOUBLE NOT NULL,
            last_accessed_at DOUBLE NOT NULL,
            access_count INTEGER NOT NULL,
            fidelity_score DOUBLE NOT NULL,
            noise_level DOUBLE NOT NULL,
            decay_rate DOUBLE NOT NULL,
            emotional_anchor DOUBLE NOT NULL,
            reinforcement_count INTEGER NOT NULL,
            stability DOUBLE NOT NULL,
            last_decay_tick DOUBLE NOT NULL,
            emotion_intensity DOUBLE NOT NULL,
            emotion_valence DOUBLE NOT NULL,
            version INTEGER NOT NULL,
            body BLOB NOT NULL
        );
        CREATE TABLE raw_journal (
            id UUID PRIMARY KEY,
            session_id VARCHAR NOT NULL,
            turn_id VARCHAR,
            topic_id VARCHAR,
            source VARCHAR NOT NULL,
            speaker VARCHAR NOT NULL,
            visibility VARCHAR NOT NULL,
            secrecy_level VARCHAR NOT NULL,
            created_at DOUBLE NOT NULL,
            updated_at DOUBLE NOT NULL,
            suppressed BOOLEAN NOT NULL,
            dream_processed_at DOUBLE,
            body BLOB NOT NULL
        );
        CREATE TABLE associations (
            source_id UUID NOT NULL,
            target_id UUID NOT NULL,
            association_type VARCHAR NOT NULL,
            weight DOUBLE NOT NULL,
            created_at DOUBLE NOT NULL,
            last_co_activation DOUBLE,
            PRIMARY KEY (source_id, target_id, association_type)
        );
        CREATE TABLE vectors (
            record_id UUID PRIMARY KEY,
            dim INTEGER NOT NULL,
            model VARCHAR NOT NULL,
            vec BLOB NOT NULL
        );
        CREATE TABLE state (
            key VARCHAR PRIMARY KEY,
            value VARCHAR NOT NULL
        );
        """,
    ),
    (
        2,
        "closed-form decay: the strength at the last reinforcement, stability in seconds",
        """
        ALTER TABLE records ADD COLUMN fidelity_base DOUBLE DEFAULT 1.0;
        UPDATE records SET fidelity_base = fidelity_score;
        UPDATE records SET stability = CASE store
            WHEN 'episodic' THEN 66960.0 WHEN 'semantic' THEN 259200.0 WHEN 'procedural' THEN 604800.0
            WHEN 'emotional' THEN 172800.0 ELSE 60.0 END
        WHERE stability <= 1.0;
        """,
    ),
    (
        3,
        "consolidation ledger: which episodic record was promoted to which semantic one",
        """
        CREATE TABLE consolidations (
            episodic_id UUID PRIMARY KEY,
            semantic_id UUID NOT NULL,
            consolidated_at DOUBLE NOT NULL,
            strategy VARCHAR NOT NULL
        );
        """,
    ),
    (
        4,
        "dream failures: a topic group that failed, skipped until its raw records change",
        """
        CREATE TABLE dream_failures (
            first_raw_id UUID PRIMARY KEY,
            fingerprint VARCHAR NOT NULL,
            raw_record_count INTEGER NOT NULL,
            code VARCHAR NOT NULL,
            reason VARCHAR NOT NULL,
            version VARCHAR NOT NULL,
            failed_at DOUBLE NOT NULL
        );
        """,
    ),
    (
        5,
        "counters in sequences: the full-text index stamps count on in DuckDB sequences; the state row keeps the "
        "count before",
        """
        CREATE SEQUENCE counter_records_seq;
        CREATE SEQUENCE counter_journal_seq;
        """,
    ),
    (
        6,
        "vectors stored uncompressed: a vector's bytes do not compress, and DuckDB's analysis of them at every "
        "checkpoint cost most of a bulk write's time",
        """
        CREATE TABLE vectors_uncompressed (
            record_id UUID PRIMARY KEY,
            dim INTEGER NOT NULL,
            model VARCHAR NOT NULL,
            vec BLOB USING COMPRESSION uncompressed NOT NULL
        );
        INSERT INTO vectors_uncompressed SELECT record_id, dim, model, vec FROM vectors;
        DROP TABLE vectors;
        ALTER TABLE vectors_uncompressed RENAME TO vectors;
        """,
    ),
]
# State keys counted by a sequence of migration 5 (see `tables.DuckState`): drawing from one costs
# a write a third of what updating a state row does.
COUNTERS = {"records_seq": "counter_records_seq", "journal_seq": "counter_journal_seq"}


def _sha(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def _invalidates(exc: duckdb.Error) -> bool:
    return isinstance(exc, duckdb.FatalException) or _INVALIDATED in str(exc)


class Database:
    """One DuckDB file; one writer connection plus a cursor per reading thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()  # the thread's cursor and the connection it belongs to
        self._write_lock = threading.RLock()
        self._invalid: str | None = None  # why the instance must be reopened before the next use
        self._counted_before: dict[str, int] = {}
        self._column_types: dict[str, dict[str, str]] = {}
        self.prepared = Prepared()  # the writer connection's prepared statements
        self._conn = self._connect()
        self._migrate()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        opened: duckdb.DuckDBPyConnection | None = take_connection(self.path)  # opened while this process started
        if opened is not None:
            return opened
        try:
            return connect(self.path)
        except duckdb.Error as exc:
            if is_disk_full(exc):
                raise storage_full(self.path) from exc
            raise CMPError(
                ErrorCode.INTERNAL_ERROR,
                f"cannot open the database {self.path}: {exc}",
                hint="the file may be damaged or held by another program",
            ) from exc

    # ------------------------------------------------------------ schema

    def _migrate(self) -> None:
        c = self._conn
        c.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name VARCHAR, sha256 VARCHAR)"
        )
        applied = dict(c.execute("SELECT version, sha256 FROM schema_migrations").fetchall())
        known = {v for v, _, _ in MIGRATIONS}
        newer = [v for v in applied if v not in known]
        if newer:
            raise CMPError(
                ErrorCode.VERSION_MISMATCH,
                f"the database was written by a newer Cerememory (schema {max(newer)})",
                hint="upgrade Cerememory to open this data directory",
            )
        for version, name, sql in MIGRATIONS:
            if version in applied:
                if applied[version] != _sha(sql):
                    raise CMPError(
                        ErrorCode.INTERNAL_ERROR,
                        f"schema migration {version} ({name}) differs from the one applied",
                        hint="this build's migrations were edited; use the release that created the data",
                    )
                continue
            with self.transaction() as tx:
                tx.execute(sql)
                tx.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", [version, name, _sha(sql)])

    def counted_before(self, key: str) -> int:
        """What counter `key` (one of COUNTERS) had counted in its state row when it moved into
        its sequence. That row is never written again, so it is read once."""
        if key not in self._counted_before:
            rows = self.query("SELECT value FROM state WHERE key = ?", [key])
            self._counted_before[key] = int(rows[0][0]) if rows else 0
        return self._counted_before[key]

    def column_types(self, table: str) -> dict[str, str]:
        """Each column of `table` and its SQL type, read once (the schema changes only as the
        database opens)."""
        types = self._column_types.get(table)
        if types is None:
            rows = self.query("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ?", [table])
            types = self._column_types[table] = dict(rows)
        return types

    def draw(self, tx: duckdb.DuckDBPyConnection, sequence: str) -> int:
        """The next number of `sequence`, drawn in the write transaction `tx` by a prepared
        statement: planning `SELECT nextval(...)` anew costs twice what running it does, and
        every write draws one."""
        return int(self.prepared.execute(tx, f"SELECT nextval('{sequence}')").fetchall()[0][0])

    # ------------------------------------------------------------ connections

    @contextmanager
    def transaction(self) -> Iterator[WriteTransaction]:
        """The single writer: serialised, all-or-nothing (begun by its first statement, see
        transaction.py). Storage failures come out as STORAGE_FULL (a full disk) or as DuckDB's
        own error."""
        with self._write_lock:
            conn = self._usable()
            tx = WriteTransaction(conn)
            try:
                yield tx
            except BaseException as exc:
                if tx.begun:
                    self._rollback(conn)
                if isinstance(exc, duckdb.Error):
                    self._raise(exc)
                raise
            if not tx.begun:  # nothing ran, or one statement that committed as it ran
                return
            try:
                conn.execute("COMMIT")
            except duckdb.Error as exc:
                if self.durable_despite(exc):
                    return
                self._rollback(conn)
                self._raise(exc)

    def durable_despite(self, exc: duckdb.Error) -> bool:
        """Whether `exc` reports a commit durable although the checkpoint after it failed; the
        database is then reopened, and the commit stands."""
        if _DURABLE not in str(exc).lower():
            return False
        self._invalidate(exc)
        return True

    def _rollback(self, conn: duckdb.DuckDBPyConnection) -> None:
        try:
            conn.execute("ROLLBACK")
        except duckdb.Error:  # no transaction left to roll back, or the instance was invalidated
            pass

    def _raise(self, exc: duckdb.Error) -> NoReturn:
        """Raise a DuckDB failure as a CMP error, reopening an invalidated instance first."""
        if _invalidates(exc):
            self._invalidate(exc)
        raise translate(exc, self.path) from exc

    def _invalidate(self, exc: duckdb.Error) -> None:
        log.warning("the database %s must be reopened: %s", self.path, exc)
        with self._write_lock:
            self._invalid = str(exc)
            try:
                self._usable()
            except CMPError:  # still full, say: the next use tries again
                log.warning("reopening %s failed; retrying at the next use", self.path, exc_info=True)

    def _usable(self) -> duckdb.DuckDBPyConnection:
        """The connection, reopened first if DuckDB invalidated the instance. Cursors of the old
        one are dropped by their threads at their next use (see `reader`)."""
        if self._invalid is None:
            return self._conn
        with self._write_lock:
            if self._invalid is not None:
                try:
                    self._conn.close()
                except duckdb.Error:
                    pass
                self._conn = self._connect()
                log.warning("reopened the database %s", self.path)
                self._invalid = None
            return self._conn

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread, so reads run beside the writer."""
        conn = self._usable()
        cursor = getattr(self._local, "cursor", None)
        if cursor is None or self._local.conn is not conn:
            cursor = conn.cursor()
            self._local.cursor, self._local.conn = cursor, conn
        return cursor

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of one read; a read that finds the instance invalidated reopens it and runs again."""
        try:
            return self.reader().execute(sql, params or []).fetchall()
        except duckdb.Error as exc:
            if not _invalidates(exc):
                self._raise(exc)
            self._invalidate(exc)
        try:
            return self.reader().execute(sql, params or []).fetchall()
        except duckdb.Error as exc:
            self._raise(exc)

    def query_columns(self, sql: str, params: Sequence[Any] | None = None) -> dict[str, np.ndarray]:
        """One read as numpy columns (a null in a numeric column comes out masked)."""
        try:
            return self.reader().execute(sql, params or []).fetchnumpy()
        except duckdb.Error as exc:
            self._raise(exc)

    def query_columns_together(self, *sqls: str) -> list[dict[str, np.ndarray]]:
        """Several reads as numpy columns, all of one snapshot (one read transaction)."""
        cursor = self.reader()
        try:
            cursor.execute("BEGIN TRANSACTION")
            try:
                return [cursor.execute(sql).fetchnumpy() for sql in sqls]
            finally:
                cursor.execute("COMMIT")
        except duckdb.Error as exc:
            self._raise(exc)

    def stream(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[list[tuple[Any, ...]]]:
        """Rows of one long read in batches, on a cursor of its own (so the thread's cursor is
        free for other reads meanwhile)."""
        cursor = self._usable().cursor()
        try:
            cursor.execute(sql, params)
            while rows := cursor.fetchmany(batch):
                yield rows
        except duckdb.Error as exc:
            self._raise(exc)
        finally:
            cursor.close()

    def release_cache(self) -> None:
        """Let DuckDB drop the table blocks it keeps cached after a bulk read (loading every
        vector leaves about their size cached): it evicts unpinned blocks down to a lowered
        memory limit, then the default limit is set back (Cerememory sets none of its own).
        The blocks are on disk; a query that reads them again reads them from there."""
        with self._write_lock:
            conn = self._usable()
            try:
                try:
                    conn.execute(f"SET memory_limit = '{RELEASED_LIMIT}'")
                finally:
                    conn.execute("RESET memory_limit")
            except duckdb.Error:
                log.debug("could not release DuckDB's cache", exc_info=True)  # best effort: it only costs RAM

    def close(self) -> None:
        self._conn.close()
