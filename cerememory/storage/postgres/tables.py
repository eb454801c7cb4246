"""The repositories of `storage.base` over PostgreSQL: every SQL statement the engine runs.

Batches travel as one array per column and are unnested in the database, so a write of many
rows is one statement. Every write also appends to the `changes` log in its transaction (what
changed, and which server changed it) and notifies the other servers on commit; `feed.py`
reads the log back. Reinforcement and decay are updates of the current row, so servers that
recall the same record at once never lose one another's recalls.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import psycopg

from .. import sql
from ..base import HEAD_COLUMNS, Columns, EdgeColumns, Row, StoredHeads, StoredVectors
from ..codec import blobs_of_rows
from ..sql import Dialect
from .database import PRIMARY_KEYS, Database

# kinds of change in the log: a record written or removed, only its decay state, a journal
# record, a consolidation ledger row, a state key
RECORD, HEAD, LEDGER, STATE = "record", "head", "ledger", "state"


def channel(schema: str) -> str:
    return f"cerememory_{schema}"


def _array_type(values: Sequence[Any], column_type: str | None) -> str:
    if column_type is not None:
        return column_type
    sample = next((v for v in values if v is not None), None)
    if isinstance(sample, bool):
        return "bool"
    if isinstance(sample, int):
        return "int8"
    if isinstance(sample, float):
        return "float8"
    if isinstance(sample, uuid.UUID):
        return "uuid"
    if isinstance(sample, bytes):
        return "bytea"
    return "text"


class _Rows:
    """Reads and writes of one table: reads on the transaction when there is one."""

    def __init__(self, db: Database, tx: psycopg.Connection | None, origin: str) -> None:
        self.db = db
        self.tx = tx
        self.origin = origin

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        if self.tx is not None:
            return self.tx.execute(sql, list(params)).fetchall()
        return self.db.query(sql, list(params))

    def _stream(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[list[Row]]:
        return self.db.stream(sql, list(params), batch)

    def _writer(self) -> psycopg.Connection:
        if self.tx is None:
            raise RuntimeError("a write outside a transaction: use Backend.transaction()")
        return self.tx

    def _write(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cursor = self._writer().execute(sql, list(params))
        return cursor.fetchall() if cursor.description else []

    def _unnest(self, table: str | None, columns: Columns) -> tuple[str, list[Any]]:
        """`unnest(%s::t1[], %s::t2[], ...) AS b(c1, c2, ...)` and its parameters."""
        types = self.db.column_types.get(table or "", {})
        arrays = ", ".join(f"%s::{_array_type(v, types.get(k))}[]" for k, v in columns.items())
        return f"unnest({arrays}) AS b({', '.join(columns)})", [list(v) for v in columns.values()]

    def _insert(self, table: str, columns: Columns, *, replace: bool = True) -> None:
        if not columns or not next(iter(columns.values())):
            return
        names = list(columns)
        source, params = self._unnest(table, columns)
        statement = f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(names)} FROM {source}"
        if replace:
            keys = PRIMARY_KEYS[table]
            rest = [n for n in names if n not in keys]
            action = f"UPDATE SET {', '.join(f'{n} = EXCLUDED.{n}' for n in rest)}" if rest else "NOTHING"
            statement += f" ON CONFLICT ({', '.join(keys)}) DO {action}"
        self._write(statement, params)

    def _insert_bumped(self, table: str, columns: Columns, *, replace: bool, bump: str | None) -> int | None:
        """`_insert`, and with `bump` that counter bumped too: its new value."""
        self._insert(table, columns, replace=replace)
        return None if bump is None else PgState(self.db, self.tx, self.origin).bump(bump)

    def _delete(self, table: str, column: str, ids: Sequence[uuid.UUID]) -> list[Row]:
        if not ids:
            return []
        return self._write(f"DELETE FROM {table} WHERE {column} = ANY(%s::uuid[]) RETURNING {column}", [list(ids)])

    def _changed(self, kind: str, keys: Sequence[Any], *, mine: bool = True) -> None:
        """Log a change for the other servers (and for this one too when `mine` is False: its
        RAM does not hold the result, which the database computed)."""
        if not keys:
            return
        self._write("INSERT INTO changes (origin, kind, key) SELECT %s, %s, k FROM unnest(%s::text[]) AS k",
                    [self.origin if mine else None, kind, [str(k) for k in keys]])
        self._write("SELECT pg_notify(%s, '')", [channel(self.db.schema)])


# The SQL twin of `dynamics.decay.reinforce` (as in the embedded backend), on the current row.
_ELAPSED = "greatest(b.at - r.last_accessed_at, 0.0)"
_STRENGTH = f"(r.fidelity_base * power(1.0 + {_ELAPSED} / r.stability, -b.exponent))"
_CONTINUED = f"(r.stability + {_ELAPSED})"
_REINFORCE = (
    f"UPDATE records r SET fidelity_base = greatest(least(1.0, {_STRENGTH} + b.lift * (1.0 - {_STRENGTH})), "
    f"{_STRENGTH}), stability = {_CONTINUED} * (1.0 + b.boost * power({_CONTINUED}, -0.2)), "
    "access_count = r.access_count + 1, reinforcement_count = r.reinforcement_count + 1, "
    "last_accessed_at = greatest(r.last_accessed_at, b.at) FROM {source} WHERE r.id = b.id RETURNING r.id"
)
_REINFORCE_UNCHANGED = (
    "UPDATE records r SET fidelity_base = b.base, stability = b.stability, "
    "access_count = r.access_count + b.n, reinforcement_count = r.reinforcement_count + b.n, "
    "last_accessed_at = greatest(r.last_accessed_at, b.at) FROM {source} WHERE r.id = b.id "
    "AND r.fidelity_base = b.base_before AND r.stability = b.stability_before "
    "AND r.last_accessed_at = b.accessed_before RETURNING r.id"
)
_DECAY = ("UPDATE records r SET fidelity_score = b.fidelity_score, noise_level = b.noise_level, "
          "emotional_anchor = b.emotional_anchor, last_decay_tick = b.last_decay_tick "
          "FROM {source} WHERE r.id = b.id RETURNING r.id")
_HEADS = f"SELECT id, {', '.join(HEAD_COLUMNS)} FROM records"


class PgRecords(_Rows):
    def heads(self) -> StoredHeads:
        rows = self._read(_HEADS)
        values = [[row[k] for row in rows] for k in range(1, 1 + len(HEAD_COLUMNS))]
        return StoredHeads([row[0] for row in rows], values)

    def heads_of(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, Row]]:
        return [(row[0], row[1:]) for row in self._read(f"{_HEADS} WHERE id = ANY(%s::uuid[])", [list(ids)])]

    def bodies(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]:
        rows = self._read("SELECT id, body FROM records WHERE id = ANY(%s::uuid[])", [list(ids)])
        return [(row[0], bytes(row[1])) for row in rows]

    def scan_bodies(self, stores: Sequence[str] | None, batch: int) -> Iterator[list[tuple[uuid.UUID, bytes]]]:
        if stores is None:
            rows = self.db.stream("SELECT id, body FROM records ORDER BY id", [], batch)
        else:
            rows = self.db.stream("SELECT id, body FROM records WHERE store = ANY(%s) ORDER BY id",
                                  [list(stores)], batch)
        for chunk in rows:
            yield [(row[0], bytes(row[1])) for row in chunk]

    def scan_with_vectors(self, stores: Sequence[str], batch: int) -> Iterator[list[Row]]:
        query = ("SELECT r.id, r.body, v.model, v.vec FROM records r LEFT JOIN vectors v "
                 "ON v.record_id = r.id WHERE r.store = ANY(%s) ORDER BY r.id")
        for chunk in self.db.stream(query, [list(stores)], batch):
            yield [(i, bytes(body), model, bytes(vec) if vec is not None else None) for i, body, model, vec in chunk]

    def insert(self, columns: Columns, *, replace: bool, bump: str | None = None) -> int | None:
        bumped = self._insert_bumped("records", columns, replace=replace, bump=bump)
        self._changed(RECORD, columns["id"])
        return bumped

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        self._changed(RECORD, [row[0] for row in self._delete("records", "id", ids)])

    def _update(self, statement: str, columns: Columns) -> set[uuid.UUID]:
        source, params = self._unnest(None, columns)
        return {row[0] for row in self._write(statement.format(source=source), params)}

    def write_decay(self, columns: Columns) -> None:
        if columns["id"]:
            self._changed(HEAD, list(self._update(_DECAY, columns)))

    def reinforce(self, columns: Columns) -> None:
        if columns["id"]:
            self._changed(HEAD, list(self._update(_REINFORCE, columns)), mine=False)

    def reinforce_unchanged(self, columns: Columns) -> set[uuid.UUID]:
        if not columns["id"]:
            return set()
        applied = self._update(_REINFORCE_UNCHANGED, columns)
        self._changed(HEAD, list(applied))
        return applied


PG = Dialect(param="%s", in_list="{column} = ANY({param})", in_ids="{column} = ANY({param}::uuid[])", ids=list,
            first_id="(array_agg(id ORDER BY created_at, id))[1]")


class PgJournal(_Rows, sql.SqlJournal):
    dialect = PG


class PgEdges(_Rows):
    def load(self, heads: StoredHeads | None = None) -> EdgeColumns:
        return EdgeColumns.of_rows(self._read(sql.EDGES))

    def load_from(self, ids: Sequence[uuid.UUID]) -> list[Row]:
        return self._read(f"{sql.EDGES} WHERE source_id = ANY(%s::uuid[])", [list(ids)])

    def insert(self, columns: Columns) -> None:
        self._insert("associations", columns)
        self._changed(RECORD, sorted(set(columns.get("source_id", ()))))

    def delete_from(self, ids: Sequence[uuid.UUID]) -> None:
        self._changed(RECORD, sorted({row[0] for row in self._delete("associations", "source_id", ids)}))

    def delete_to(self, ids: Sequence[uuid.UUID]) -> None:
        if ids:
            rows = self._write("DELETE FROM associations WHERE target_id = ANY(%s::uuid[]) RETURNING source_id",
                               [list(ids)])
            self._changed(RECORD, sorted({row[0] for row in rows}))


class PgVectors(_Rows):
    def load(self, batch: int = 8192) -> Iterator[StoredVectors]:
        rows = self._read("SELECT record_id, dim, vec FROM vectors")
        for start in range(0, len(rows), batch):
            part = rows[start:start + batch]
            yield StoredVectors([row[0] for row in part], np.array([row[1] for row in part], dtype=np.int64),
                                [bytes(row[2]) for row in part])

    def load_for(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, int, bytes]]:
        rows = self._read("SELECT record_id, dim, vec FROM vectors WHERE record_id = ANY(%s::uuid[])", [list(ids)])
        return [(record_id, dim, bytes(vec)) for record_id, dim, vec in rows]

    def insert(self, columns: Columns, vec: Sequence[bytes] | np.ndarray, *, replace: bool = True) -> None:
        if isinstance(vec, np.ndarray):  # bytea travels as one value per row
            vec = blobs_of_rows(vec)
        self._insert("vectors", {**columns, "vec": vec}, replace=replace)
        self._changed(RECORD, columns.get("record_id", ()))

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        self._changed(RECORD, [row[0] for row in self._delete("vectors", "record_id", ids)])


class PgLedger(_Rows):
    def load(self) -> list[tuple[uuid.UUID, uuid.UUID]]:
        return [(row[0], row[1]) for row in self._read("SELECT episodic_id, semantic_id FROM consolidations")]

    def insert(self, columns: Columns) -> None:
        self._insert("consolidations", columns)
        self._changed(LEDGER, columns.get("episodic_id", ()))

    def delete(self, episodic_ids: Sequence[uuid.UUID]) -> None:
        self._changed(LEDGER, [row[0] for row in self._delete("consolidations", "episodic_id", episodic_ids)])


class PgState(_Rows):
    def get(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM state WHERE key = %s", [key])
        return str(rows[0][0]) if rows else default

    def set(self, key: str, value: str) -> None:
        self._write("INSERT INTO state VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    [key, value])
        self._changed(STATE, [key])

    def bump(self, key: str) -> int:
        """Increment a counter in one statement, so that servers bumping it at once both count."""
        rows = self._write("INSERT INTO state VALUES (%s, '1') ON CONFLICT (key) DO UPDATE "
                           "SET value = (state.value::bigint + 1)::text RETURNING value", [key])
        return int(rows[0][0])

    def delete_prefix(self, prefix: str) -> None:
        rows = self._write("DELETE FROM state WHERE starts_with(key, %s) RETURNING key", [prefix])
        self._changed(STATE, [row[0] for row in rows])


class PgFailures(_Rows):
    def load(self) -> list[Row]:
        return self._read(f"SELECT {sql.FAILURE_COLUMNS} FROM dream_failures")

    def put(self, row: Row) -> None:
        self._write(f"INSERT INTO dream_failures ({sql.FAILURE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (first_raw_id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, "
                    "raw_record_count = EXCLUDED.raw_record_count, code = EXCLUDED.code, reason = EXCLUDED.reason, "
                    "version = EXCLUDED.version, failed_at = EXCLUDED.failed_at", list(row))

    def prune(self) -> None:
        self._write(sql.PRUNE_FAILURES)


class PgTables:
    """`storage.base.Tables` over one schema, bound to a transaction or to the reader connections."""

    def __init__(self, db: Database, tx: psycopg.Connection | None, origin: str) -> None:
        self.records = PgRecords(db, tx, origin)
        self.journal = PgJournal(db, tx, origin)
        self.edges = PgEdges(db, tx, origin)
        self.vectors = PgVectors(db, tx, origin)
        self.ledger = PgLedger(db, tx, origin)
        self.state = PgState(db, tx, origin)
        self.failures = PgFailures(db, tx, origin)
