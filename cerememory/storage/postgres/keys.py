"""The keys of an encrypted shared memory, in its own schema (`storage.base.KeyStore`).

`master_key` holds the one master key wrapped by the passphrase, so every server given the
same passphrase derives the same key-encryption key and unwraps the same master key (and the
same full-text token key, so the servers' indexes agree). `record_keys` holds each record's
data key wrapped by the master key. A data key is written in the transaction of the first
record that uses it, so no record commits without its key; forgetting a record deletes the
key's row.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ...cmp.errors import CMPError, ErrorCode
from .database import Database


class KeyTables:
    shared = True

    def __init__(self, db: Database) -> None:
        self.db = db
        self.where = f"the memory {db.schema} at {db.where}"
        self.document_name = f"the table {db.schema}.master_key"
        self.keys_name = f"the table {db.schema}.record_keys"

    def document(self) -> bytes | None:
        rows = self.db.query("SELECT document FROM master_key")
        return bytes(rows[0][0]) if rows else None

    def blank(self) -> bool:
        rows = self.db.query("SELECT NOT EXISTS (SELECT 1 FROM records) AND NOT EXISTS (SELECT 1 FROM raw_journal)")
        return bool(rows[0][0])

    def create(self, document: bytes) -> None:
        with self.db.joined() as tx:
            inserted = tx.execute("INSERT INTO master_key (document) VALUES (%s) ON CONFLICT DO NOTHING "
                                  "RETURNING only_row", [document]).fetchall()
        if not inserted:
            raise CMPError(ErrorCode.VALIDATION_ERROR, f"{self.where} is already encrypted",
                           hint="use `cerememory rekey` to change its passphrase")

    def replace(self, document: bytes) -> None:
        with self.db.joined() as tx:
            tx.execute("UPDATE master_key SET document = %s", [document])

    def load(self) -> list[tuple[uuid.UUID, bytes]]:
        return [(row[0], bytes(row[1])) for row in self.db.query("SELECT id, wrapped FROM record_keys")]

    def fetch(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]:
        rows = self.db.query("SELECT id, wrapped FROM record_keys WHERE id = ANY(%s::uuid[])", [list(ids)])
        return [(row[0], bytes(row[1])) for row in rows]

    def add(self, entries: Sequence[tuple[uuid.UUID, bytes]]) -> None:
        with self.db.joined() as tx:
            tx.execute("INSERT INTO record_keys (id, wrapped) SELECT * FROM unnest(%s::uuid[], %s::bytea[]) "
                       "ON CONFLICT (id) DO NOTHING", [[i for i, _ in entries], [w for _, w in entries]])

    def remove(self, ids: Sequence[uuid.UUID]) -> None:
        with self.db.joined() as tx:
            tx.execute("DELETE FROM record_keys WHERE id = ANY(%s::uuid[])", [list(ids)])

    def remove_orphans(self, live: set[uuid.UUID]) -> list[uuid.UUID]:
        """Keys whose record and journal entry are both gone, by the database's own reckoning:
        keys are written in their records' transactions, so only an interrupted erase leaves one."""
        with self.db.joined() as tx:
            rows = tx.execute("DELETE FROM record_keys k "
                              "WHERE NOT EXISTS (SELECT 1 FROM records r WHERE r.id = k.id) "
                              "AND NOT EXISTS (SELECT 1 FROM raw_journal j WHERE j.id = k.id) "
                              "RETURNING k.id").fetchall()
        return [row[0] for row in rows]
