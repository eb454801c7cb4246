"""One PostgreSQL schema: numbered migrations, the writer connection, reader connections.

Each memory lives in a schema of its own (the `storage.namespace` setting), so one PostgreSQL
holds several isolated memories and a server sees only its own: every connection sets its
`search_path` to that schema alone. Times are epoch seconds (float8) and bodies codec blobs
(bytea), as in the embedded backend, so the stores above do not know which one they use.

Connections are made lazily and dropped when they fail: a request that meets a dead connection
gets `StorageUnavailable`, and the next one connects again, so the server recovers from a
database restart without one of its own.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from ...cmp.errors import CMPError, ErrorCode
from ..base import StorageUnavailable
from .errors import connect_error, redact, translate

log = logging.getLogger("cerememory.storage")

NAMESPACE = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")
READERS = 8  # pooled connections for reads outside a transaction, per server
_WAIT = 10.0  # seconds to connect, or to wait for a pooled connection
_MIGRATION_LOCK = 0x63657265  # pg_advisory_xact_lock key: one server migrates at a time

# Append-only: an applied migration is never edited (its hash is checked on every open).
MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "initial schema",
        """
        CREATE TABLE records (
            id uuid PRIMARY KEY,
            store text NOT NULL,
            created_at float8 NOT NULL,
            updated_at float8 NOT NULL,
            last_accessed_at float8 NOT NULL,
            access_count integer NOT NULL,
            fidelity_score float8 NOT NULL,
            noise_level float8 NOT NULL,
            decay_rate float8 NOT NULL,
            emotional_anchor float8 NOT NULL,
            reinforcement_count integer NOT NULL,
            stability float8 NOT NULL,
            last_decay_tick float8 NOT NULL,
            emotion_intensity float8 NOT NULL,
            emotion_valence float8 NOT NULL,
            version integer NOT NULL,
            fidelity_base float8 NOT NULL,
            body bytea NOT NULL
        );
        CREATE TABLE raw_journal (
            id uuid PRIMARY KEY,
            session_id text NOT NULL,
            turn_id text,
            topic_id text,
            source text NOT NULL,
            speaker text NOT NULL,
            visibility text NOT NULL,
            secrecy_level text NOT NULL,
            created_at float8 NOT NULL,
            updated_at float8 NOT NULL,
            suppressed boolean NOT NULL,
            dream_processed_at float8,
            body bytea NOT NULL
        );
        CREATE INDEX raw_journal_session ON raw_journal (session_id, created_at);
        CREATE INDEX raw_journal_created ON raw_journal (created_at);
        CREATE TABLE associations (
            source_id uuid NOT NULL,
            target_id uuid NOT NULL,
            association_type text NOT NULL,
            weight float8 NOT NULL,
            created_at float8 NOT NULL,
            last_co_activation float8,
            PRIMARY KEY (source_id, target_id, association_type)
        );
        CREATE INDEX associations_target ON associations (target_id);
        CREATE TABLE vectors (
            record_id uuid PRIMARY KEY,
            dim integer NOT NULL,
            model text NOT NULL,
            vec bytea NOT NULL
        );
        CREATE TABLE state (
            key text PRIMARY KEY,
            value text NOT NULL
        );
        CREATE TABLE consolidations (
            episodic_id uuid PRIMARY KEY,
            semantic_id uuid NOT NULL,
            consolidated_at float8 NOT NULL,
            strategy text NOT NULL
        );
        CREATE TABLE dream_failures (
            first_raw_id uuid PRIMARY KEY,
            fingerprint text NOT NULL,
            raw_record_count integer NOT NULL,
            code text NOT NULL,
            reason text NOT NULL,
            version text NOT NULL,
            failed_at float8 NOT NULL
        );
        CREATE TABLE changes (
            seq bigserial PRIMARY KEY,
            origin text,
            kind text NOT NULL,
            key text NOT NULL,
            at timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    (
        2,
        "the audit log: one hash chain for every server",
        """
        CREATE TABLE audit (
            seq bigint PRIMARY KEY,
            line bytea NOT NULL,
            hash text NOT NULL
        );
        """,
    ),
    (
        3,
        "encryption keys and API keys, shared by every server",
        """
        CREATE TABLE master_key (
            only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
            document bytea NOT NULL
        );
        CREATE TABLE record_keys (
            id uuid PRIMARY KEY,
            wrapped bytea NOT NULL
        );
        CREATE TABLE api_keys (
            id text PRIMARY KEY,
            name text,
            created_at text NOT NULL,
            sha256 text NOT NULL,
            prefix text NOT NULL,
            revoked_at text
        );
        """,
    ),
]
PRIMARY_KEYS = {"records": ("id",), "raw_journal": ("id",),
                "associations": ("source_id", "target_id", "association_type"),
                "vectors": ("record_id",), "state": ("key",), "consolidations": ("episodic_id",),
                "dream_failures": ("first_raw_id",)}


def _sha(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def schema_name(namespace: str) -> str:
    if not NAMESPACE.match(namespace):
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"storage.namespace {namespace!r} is not a valid name",
                       hint="use lower-case letters, digits and _ (at most 48), starting with a letter")
    return namespace


class Database:
    """The connections of one process to one schema."""

    def __init__(self, url: str, namespace: str, *, migrate: bool = True) -> None:
        if not url:
            raise CMPError(ErrorCode.VALIDATION_ERROR, "storage.backend is postgres but storage.postgres_url is unset",
                           hint="set storage.postgres_url (or CEREMEMORY_STORAGE__POSTGRES_URL)")
        self.url = url
        self.where = redact(url)
        self.schema = schema_name(namespace)
        self.write_lock_key = zlib.crc32(f"cerememory-write:{self.schema}".encode())
        self._slots: dict[str, psycopg.Connection] = {}  # the writer's and the audit log's connections
        self._slot_locks: dict[str, threading.RLock] = {}
        self._local = threading.local()  # the write transaction the thread is in
        self.column_types: dict[str, dict[str, str]] = {}
        if migrate:
            self.migrate()
        else:
            self.connect().close()  # a wrong URL or password fails here, not in the pool's threads
        self._readers = ConnectionPool(url, kwargs=self._connect_args(autocommit=True), min_size=1,
                                       max_size=READERS, timeout=_WAIT, name=f"cerememory-{self.schema}", open=True)
        self._load_column_types()

    # ------------------------------------------------------------ connections

    def connect(self, *, autocommit: bool = True) -> psycopg.Connection:
        """A new connection whose search_path is this memory's schema alone."""
        try:
            return psycopg.connect(self.url, **self._connect_args(autocommit=autocommit))
        except psycopg.Error as exc:
            raise connect_error(exc, self.url) from exc

    def _connect_args(self, *, autocommit: bool) -> dict[str, Any]:
        # application_name: pg_stat_activity shows which memory each connection serves
        return {"autocommit": autocommit, "connect_timeout": int(_WAIT), "options": f"-c search_path={self.schema}",
                "application_name": self.application_name}

    @property
    def application_name(self) -> str:
        return f"cerememory {self.schema}"

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one read, on a pooled connection. A pooled connection the server dropped (a
        restart, an administrator) is discarded and the read runs once more on a new one."""
        for attempt in (1, 2):
            conn: psycopg.Connection | None = None
            try:
                with self._readers.connection() as conn:
                    return conn.execute(sql, list(params)).fetchall()
            except PoolTimeout as exc:
                raise StorageUnavailable(f"no connection to PostgreSQL at {self.where} within {_WAIT:.0f} s",
                                         hint="is the server running and reachable? retry when it is") from exc
            except psycopg.Error as exc:
                if attempt == 2 or conn is None or not conn.broken:
                    raise translate(exc) from exc
        raise AssertionError("unreachable")

    def stream(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[list[tuple[Any, ...]]]:
        """Rows of one long read in batches, through a server-side cursor on a connection of its own."""
        conn = self.connect(autocommit=False)
        try:
            with conn.cursor(name="cerememory_scan") as cursor:
                cursor.execute(sql, list(params))
                while rows := cursor.fetchmany(batch):
                    yield rows
        except psycopg.Error as exc:
            raise translate(exc) from exc
        finally:
            conn.close()

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """The process's writer connection in one transaction: all or nothing. Write transactions
        of every server on this schema take turns (a transaction-scoped advisory lock), so the
        change log's sequence numbers become visible in order and a reader that has seen number
        N has seen everything before it; updates apply to the current row, so none is lost."""
        with self.locked("writer", self.write_lock_key) as conn:
            self._local.tx = conn
            try:
                yield conn
            finally:
                self._local.tx = None

    @contextmanager
    def joined(self) -> Iterator[psycopg.Connection]:
        """The write transaction this thread is in, or a transaction of its own: what a part
        outside the repositories (the key store) writes commits with the rows beside it."""
        current = getattr(self._local, "tx", None)
        if current is not None:
            yield current
            return
        with self.transaction() as conn:
            yield conn

    @contextmanager
    def locked(self, slot: str, key: int) -> Iterator[psycopg.Connection]:
        """A transaction on the process's connection named `slot`, holding advisory lock `key`.
        A connection found dead when the transaction begins is replaced once, since nothing was
        sent on it yet; a failure after that rolls back and is reported."""
        with self._slot_locks.setdefault(slot, threading.RLock()):
            conn = self._begin(slot, key)
            try:
                yield conn
            except BaseException as exc:
                if not conn.broken:
                    conn.execute("ROLLBACK")
                else:
                    conn.close()
                if isinstance(exc, psycopg.Error):
                    raise translate(exc) from exc
                raise
            try:
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                if conn.broken:
                    conn.close()
                raise translate(exc) from exc

    def _begin(self, slot: str, key: int) -> psycopg.Connection:
        for attempt in (1, 2):
            conn = self._slots.get(slot)
            if conn is None or conn.closed:
                conn = self._slots[slot] = self.connect()
            try:
                conn.execute("BEGIN")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", [key])
                return conn
            except psycopg.Error as exc:
                if conn.broken:
                    conn.close()
                elif not conn.closed:
                    conn.execute("ROLLBACK")
                if attempt == 2 or not conn.closed:
                    raise translate(exc) from exc
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._readers.close()
        for conn in self._slots.values():
            conn.close()

    # ------------------------------------------------------------ schema

    def pending_migrations(self) -> list[tuple[int, str]]:
        """Migrations this build would apply; raises when the schema is newer or was edited."""
        with self.connect() as conn:
            exists = conn.execute("SELECT to_regclass(%s)", [f"{self.schema}.schema_migrations"]).fetchone()
            applied: dict[int, str] = {}
            if exists and exists[0]:
                applied = dict(conn.execute("SELECT version, sha256 FROM schema_migrations").fetchall())
        return self._check(applied)

    def _check(self, applied: dict[int, str]) -> list[tuple[int, str]]:
        known = {v for v, _, _ in MIGRATIONS}
        newer = [v for v in applied if v not in known]
        if newer:
            raise CMPError(ErrorCode.VERSION_MISMATCH,
                           f"the schema {self.schema} in {self.where} was written by a newer Cerememory "
                           f"(migration {max(newer)}); nothing was changed",
                           hint="upgrade Cerememory on this server to the release the others run")
        for version, name, sql in MIGRATIONS:
            if version in applied and applied[version] != _sha(sql):
                raise CMPError(ErrorCode.INTERNAL_ERROR,
                               f"schema migration {version} ({name}) differs from the one applied",
                               hint="this build's migrations were edited; use the release that created the schema")
        return [(v, name) for v, name, _ in MIGRATIONS if v not in applied]

    def migrate(self) -> list[tuple[int, str]]:
        """Create the schema and apply what is missing, one server at a time; returns what it applied."""
        with self.connect() as conn:
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", [_MIGRATION_LOCK])
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
                    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                                 "version integer PRIMARY KEY, name text NOT NULL, sha256 text NOT NULL)")
                    rows = conn.execute("SELECT version, sha256 FROM schema_migrations").fetchall()
                    applied: dict[int, str] = dict(rows)
                    todo = self._check(applied)
                    for version, name, sql in MIGRATIONS:
                        if version in applied:
                            continue
                        conn.execute(sql)
                        conn.execute("INSERT INTO schema_migrations VALUES (%s, %s, %s)", [version, name, _sha(sql)])
                        log.info("applied schema migration %d (%s) to %s", version, name, self.schema)
            except psycopg.Error as exc:
                raise translate(exc) from exc
        return todo

    def _load_column_types(self) -> None:
        rows = self.query("SELECT table_name, column_name, udt_name FROM information_schema.columns "
                          "WHERE table_schema = %s", [self.schema])
        for table, column, udt in rows:
            self.column_types.setdefault(table, {})[column] = udt
