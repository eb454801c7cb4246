"""The PostgreSQL backend: one schema shared by several stateless servers.

Each server keeps what the embedded backend keeps in RAM and in its data directory (heads,
graph, vectors, the full-text indexes) as caches of the database, kept current from the change
log (`feed.py`); the rows themselves, and every update to them, live in PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from ...security.audit import Verification
from .audit import TableChain
from .database import Database
from .feed import ChangeFeed, Leadership
from .keys import KeyTables
from .tables import PgTables


class PostgresBackend:
    """`storage.base.Backend` over one schema of one PostgreSQL database."""

    def __init__(self, url: str, namespace: str) -> None:
        self.database = Database(url, namespace)
        self.origin = uuid.uuid4().hex  # this process, in the change log
        self.read = PgTables(self.database, None, self.origin)
        self.changes = ChangeFeed(self.database, self.origin)
        self.leadership = Leadership(self.database)

    @contextmanager
    def transaction(self) -> Iterator[PgTables]:
        with self.database.transaction() as tx:
            yield PgTables(self.database, tx, self.origin)

    def audit_chain(self) -> TableChain:
        return TableChain(self.database)

    def key_store(self) -> KeyTables:
        return KeyTables(self.database)

    def leads(self) -> bool:
        return self.leadership.held()

    def release_cache(self) -> None:
        pass  # PostgreSQL's cache is the server's, not this process's

    def close(self) -> None:
        self.changes.close()
        self.leadership.close()
        self.database.close()


def audit_of(url: str, namespace: str) -> Verification:
    """Verify a shared memory's audit chain without opening an engine."""
    database = Database(url, namespace, migrate=False)
    try:
        return TableChain(database).verify()
    finally:
        database.close()


@contextmanager
def open_key_tables(url: str, namespace: str) -> Iterator[KeyTables]:
    """The key tables of a shared memory, its schema created first when it is new."""
    database = Database(url, namespace)
    try:
        yield KeyTables(database)
    finally:
        database.close()
