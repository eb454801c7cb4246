"""The repositories of `storage.base` over DuckDB: every SQL statement the engine runs.

A `DuckTables` without a transaction reads through the calling thread's cursor; inside
`DuckDBBackend.transaction()` it is bound to the writer connection, and its reads see the
transaction's own writes.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...model import uuids_of_hex
from .. import sql
from ..base import HEAD_COLUMNS, Columns, EdgeColumns, Row, StoredHeads, StoredVectors
from ..codec import blobs_of_rows
from ..sql import Dialect
from .database import COUNTERS, Database
from .driver import duckdb
from .prepared import TypedNull
from .transaction import WriteTransaction

_UUID_COLUMNS = {"id", "record_id", "source_id", "target_id", "episodic_id", "semantic_id", "first_raw_id"}


_FEW_ROWS = 8


def _param(name: str, value: Any) -> Any:
    """One value as a statement parameter: ids as text (cast in SQL), numpy scalars as Python's."""
    if value is None:
        return None
    if name in _UUID_COLUMNS:
        return str(value)
    return value.item() if isinstance(value, np.generic) else value


def _as_uuids(values: Sequence[Any] | np.ndarray) -> Sequence[Any]:
    """Ids given as text as UUIDs (as `prepared.literal` writes them for a UUID column)."""
    return [uuid.UUID(v) if isinstance(v, str) else v for v in values]


@functools.cache
def _insert_sql(table: str, names: tuple[str, ...], rows: int) -> str:
    """INSERT of `rows` rows with its values as numbered parameters (as a prepared statement
    takes them; an id cast in SQL would have DuckDB plan the statement again every time)."""
    one = len(names)
    values = "), (".join(", ".join(f"${row * one + k + 1}" for k in range(one)) for row in range(rows))
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({values})"


def _id_texts(values: Sequence[Any]) -> np.ndarray:
    """Ids as the 32 hex digits DuckDB casts to UUID (half the work of the hyphenated form);
    a column holding text or nulls as it is."""
    try:
        return np.array([v.hex for v in values], dtype=object)
    except AttributeError:
        return np.array([None if v is None else str(v) for v in values], dtype=object)


def _column(name: str, values: Sequence[Any] | np.ndarray) -> np.ndarray:
    """One column of a batch as DuckDB scans it: numbers as they come (a float64 array stays
    one), everything else (and a column with nulls) as Python objects; ids as text, cast in SQL."""
    if isinstance(values, np.ndarray):
        return values
    if name in _UUID_COLUMNS:
        return _id_texts(values)
    if len(values) and isinstance(values[0], bytes | str):  # blobs and text: never a fixed-width copy first
        return np.array(values, dtype=object)
    typed = np.asarray(values)
    if typed.ndim == 1 and typed.dtype.kind in "biuf":
        return typed
    return np.array(list(values), dtype=object)


def _shared(values: Sequence[Any] | np.ndarray) -> bool:
    """Whether a column holds one number or text in every row (a batch's shared time, store, or
    embedding model): it goes in as one parameter, not as a column DuckDB binds and scans."""
    if isinstance(values, np.ndarray) or not len(values):
        return False
    first = values[0]
    return type(first) in (str, int, float) and values.count(first) == len(values)


def _batch(columns: Columns) -> dict[str, np.ndarray]:
    """A batch of rows as named numpy columns, which DuckDB reads in one scan."""
    return {name: _column(name, values) for name, values in columns.items()}


class _Rows:
    """Reads and writes of one table: reads on the transaction when there is one."""

    def __init__(self, db: Database, tx: WriteTransaction | None) -> None:
        self.db = db
        self.tx = tx

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        if self.tx is not None:
            return self.tx.execute(sql, list(params)).fetchall()
        return self.db.query(sql, list(params))

    def _stream(self, sql: str, params: Sequence[Any], batch: int) -> Iterator[list[Row]]:
        return self.db.stream(sql, list(params), batch)

    def _writer(self) -> duckdb.DuckDBPyConnection:
        if self.tx is None:
            raise RuntimeError("a write outside a transaction: use Backend.transaction()")
        return self.tx.connection()

    def _write(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._writer().execute(sql, list(params)).fetchall()

    def _insert(self, table: str, columns: Columns, *, replace: bool = True) -> None:
        """Many rows in one statement: a few new ones through a prepared INSERT (prepared.py), a
        few others as parameters, more scanned from numpy columns (registering a scan costs
        DuckDB about as much as binding ten rows of parameters)."""
        rows = len(next(iter(columns.values()))) if columns else 0
        if not rows:
            return
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        if rows <= _FEW_ROWS and not replace and self._insert_prepared(table, columns, rows):
            return
        if rows <= _FEW_ROWS:
            one = "(" + ", ".join("?::UUID" if k in _UUID_COLUMNS else "?" for k in columns) + ")"
            params = [_param(k, v) for row in zip(*columns.values(), strict=True)
                      for k, v in zip(columns, row, strict=True)]
            self._write(f"{verb} INTO {table} ({', '.join(columns)}) VALUES {', '.join([one] * rows)}", params)
            return
        shared = {k: _param(k, v[0]) for k, v in list(columns.items())[1:] if _shared(v)}
        select = ", ".join(("?" if k in shared else k) + ("::UUID" if k in _UUID_COLUMNS else "") for k in columns)
        name = f"_batch_{threading.get_ident()}"
        sql = f"{verb} INTO {table} ({', '.join(columns)}) SELECT {select} FROM {name}"
        self._with_batch(name, {k: v for k, v in columns.items() if k not in shared}, sql, list(shared.values()))

    def _insert_bumped(self, table: str, columns: Columns, *, replace: bool, bump: str | None) -> int | None:
        """`_insert`, and with `bump` that counter bumped too: its new value. A few new rows go
        in one statement with the bump, run on its own when it is all the transaction writes
        (transaction.py): the caller writes nothing after it."""
        if bump is not None and not replace:
            counted = self._insert_last(table, columns, bump)
            if counted is not None:
                return counted
        self._insert(table, columns, replace=replace)
        return None if bump is None else DuckState(self.db, self.tx).bump(bump)

    def _insert_last(self, table: str, columns: Columns, counter: str) -> int | None:
        """`_insert_bumped`'s one statement: the counter's new value, or None with nothing run."""
        rows = len(columns["id"])
        if self.tx is None or self.tx.begun or not 0 < rows <= _FEW_ROWS:
            return None
        sql = f"{_insert_sql(table, tuple(columns), rows)} RETURNING nextval('{COUNTERS[counter]}')"
        statement = self.db.prepared.statement(self.tx.prepare_on(), sql, self._row_values(table, columns))
        if statement is None:
            return None
        try:
            drawn = self.tx.run_last(statement)
        except duckdb.Error as exc:
            if not self.db.durable_despite(exc):
                raise
            return int(DuckState(self.db, None).get(counter) or 0)  # committed; its answer went with the checkpoint
        return None if drawn is None else self.db.counted_before(counter) + max(int(row[0]) for row in drawn)

    def _insert_prepared(self, table: str, columns: Columns, rows: int) -> bool:
        """A few new rows through an INSERT prepared once per connection and row count (a lone
        write's row, say); False, with nothing written, when a value has no SQL literal."""
        sql = _insert_sql(table, tuple(columns), rows)
        return self.db.prepared.execute_with(self._writer(), sql, self._row_values(table, columns)) is not None

    def _row_values(self, table: str, columns: Columns) -> list[Any]:
        """The values of `columns` row by row, as `_insert_sql`'s parameters take them; a null
        typed as its column, so that the statement's plan holds for it."""
        names = list(columns)
        values = [_as_uuids(column) if name in _UUID_COLUMNS else column for name, column in columns.items()]
        return [TypedNull(self.db.column_types(table)[names[k]]) if value is None else value
                for row in zip(*values, strict=True) for k, value in enumerate(row)]

    def _update_from(self, sql: str, columns: Columns) -> list[Row]:
        """An UPDATE ... FROM `_batch` joined on the batch's `id` column (one row per id)."""
        return self._with_batch("_batch", columns, sql)

    def _with_batch(self, name: str, columns: Columns, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run `sql` with `columns` registered as the table `name`."""
        tx = self._writer()
        tx.register(name, _batch(columns))
        try:
            return tx.execute(sql, list(params)).fetchall()
        finally:
            tx.unregister(name)

    def _delete(self, table: str, column: str, ids: Sequence[uuid.UUID]) -> list[Row]:
        if not ids:
            return []
        return self._write(f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::UUID[])) RETURNING {column}",
                           [[str(i) for i in ids]])


def _ids(ids: Sequence[uuid.UUID]) -> list[str]:
    return [str(i) for i in ids]


# The SQL twin of `dynamics.decay.reinforce`, applied to the current row: strength at the recall,
# then the lift, and stability continued from the elapsed time and boosted.
_ELAPSED = "greatest(b.at - records.last_accessed_at, 0.0)"
_STRENGTH = f"(records.fidelity_base * pow(1.0 + {_ELAPSED} / records.stability, -b.exponent))"
_CONTINUED = f"(records.stability + {_ELAPSED})"
_REINFORCE = (
    f"UPDATE records SET fidelity_base = greatest(least(1.0, {_STRENGTH} + b.lift * (1.0 - {_STRENGTH})), "
    f"{_STRENGTH}), stability = {_CONTINUED} * (1.0 + b.boost * pow({_CONTINUED}, -0.2)), "
    "access_count = records.access_count + 1, reinforcement_count = records.reinforcement_count + 1, "
    "last_accessed_at = greatest(records.last_accessed_at, b.at) "
    "FROM _batch b WHERE records.id = b.id::UUID"
)
_REINFORCE_UNCHANGED = (
    "UPDATE records SET fidelity_base = b.base, stability = b.stability, "
    "access_count = records.access_count + b.n, reinforcement_count = records.reinforcement_count + b.n, "
    "last_accessed_at = greatest(records.last_accessed_at, b.at) FROM _batch b WHERE records.id = b.id::UUID "
    "AND records.fidelity_base = b.base_before AND records.stability = b.stability_before "
    "AND records.last_accessed_at = b.accessed_before "
    "RETURNING records.id"
)
_DECAY = ("UPDATE records SET fidelity_score = b.fidelity_score, noise_level = b.noise_level, "
          "emotional_anchor = b.emotional_anchor, last_decay_tick = b.last_decay_tick "
          "FROM _batch b WHERE records.id = b.id::UUID")


_HEX = "replace({}::VARCHAR, '-', '')"  # an id as 32 hex digits, for `uuids_of_hex`
_NODES = ("WITH ends AS (SELECT source_id AS id FROM associations UNION SELECT target_id FROM associations) "
          "SELECT id, (row_number() OVER (ORDER BY id)) - 1 AS n FROM ends")
_EDGE_NODES = f"SELECT {_HEX.format('id')} AS id FROM ({_NODES}) ORDER BY n"
# a never co-activated edge's time as NaN, not null: a column with nulls comes out as a numpy
# masked array, and a short process that needs no numpy.ma otherwise should not import it for this
_EDGE_COLUMNS = ("SELECT s.n AS source, t.n AS target, a.association_type, a.weight, a.created_at, "
                 "coalesce(a.last_co_activation, 'NaN'::DOUBLE) AS last_co_activation{} "
                 "FROM associations a JOIN nodes s ON s.id = a.source_id JOIN nodes t ON t.id = a.target_id")
_EDGES_NUMBERED = f"WITH nodes AS ({_NODES}) " + _EDGE_COLUMNS.format("")
# the edges between records, each end numbered by its record's place in id order (as `heads` reads them)
_EDGES_OVER_RECORDS = ("WITH nodes AS (SELECT id, (row_number() OVER (ORDER BY id)) - 1 AS n FROM records) "
                       + _EDGE_COLUMNS.format(", (SELECT count(*) FROM records) AS records"))


class DuckRecords(_Rows):
    def heads(self) -> StoredHeads:
        # as numpy columns, ids as hex made UUIDs here: DuckDB's own UUID conversion, and a
        # tuple per row, cost more at 100k rows
        columns = self.db.query_columns(
            f"SELECT {_HEX.format('id')} AS id, {', '.join(HEAD_COLUMNS)} FROM records ORDER BY records.id")
        return StoredHeads(uuids_of_hex(columns["id"].tolist()), [columns[name] for name in HEAD_COLUMNS])

    def heads_of(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, Row]]:
        rows = self._read(f"SELECT id, {', '.join(HEAD_COLUMNS)} FROM records WHERE id IN (SELECT unnest(?::UUID[]))",
                          [_ids(ids)])
        return [(row[0], row[1:]) for row in rows]

    def bodies(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, bytes]]:
        rows = self._read("SELECT id, body FROM records WHERE id IN (SELECT unnest(?::UUID[]))", [_ids(ids)])
        return [(row[0], row[1]) for row in rows]

    def scan_bodies(self, stores: Sequence[str] | None, batch: int) -> Iterator[list[tuple[uuid.UUID, bytes]]]:
        if stores is None:
            query, params = "SELECT id, body FROM records ORDER BY id", []
        else:
            query = "SELECT id, body FROM records WHERE store IN (SELECT unnest(?)) ORDER BY id"
            params = [list(stores)]
        for rows in self._stream(query, params, batch):
            yield [(row[0], row[1]) for row in rows]

    def scan_with_vectors(self, stores: Sequence[str], batch: int) -> Iterator[list[Row]]:
        return self._stream("SELECT r.id, r.body, v.model, v.vec FROM records r LEFT JOIN vectors v "
                            "ON v.record_id = r.id WHERE r.store IN (SELECT unnest(?)) ORDER BY r.id",
                            [list(stores)], batch)

    def insert(self, columns: Columns, *, replace: bool, bump: str | None = None) -> int | None:
        return self._insert_bumped("records", columns, replace=replace, bump=bump)

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        self._delete("records", "id", ids)

    def write_decay(self, columns: Columns) -> None:
        if columns["id"]:
            self._update_from(_DECAY, columns)

    def reinforce(self, columns: Columns) -> None:
        if columns["id"]:
            self._update_from(_REINFORCE, columns)

    def reinforce_unchanged(self, columns: Columns) -> set[uuid.UUID]:
        return {row[0] for row in self._update_from(_REINFORCE_UNCHANGED, columns)} if columns["id"] else set()


DUCK = Dialect(param="?", in_list="{column} IN (SELECT unnest({param}))",
               in_ids="{column} IN (SELECT unnest({param}::UUID[]))", ids=_ids,
               first_id="arg_min(id, (created_at, id))")


class DuckJournal(_Rows, sql.SqlJournal):
    dialect = DUCK


class DuckEdges(_Rows):
    def load(self, heads: StoredHeads | None = None) -> EdgeColumns:
        # as numpy columns, each end as a node number DuckDB gives it (its id's rank), so no
        # Python step runs per edge: the rank among the records `heads` holds (read in id
        # order) when the table still holds as many, else among the edges' own ends
        if heads is not None:
            edges = self.db.query_columns(_EDGES_OVER_RECORDS)
            if not len(edges["records"]) or int(edges["records"][0]) == len(heads.ids):
                return self._columns(heads.ids, edges)
        nodes, edges = self.db.query_columns_together(_EDGE_NODES, _EDGES_NUMBERED)
        return self._columns(uuids_of_hex(nodes["id"].tolist()), edges)

    @staticmethod
    def _columns(nodes: list[uuid.UUID], edges: dict[str, np.ndarray]) -> EdgeColumns:
        return EdgeColumns(nodes, edges["source"].astype(np.int64),
                           edges["target"].astype(np.int64), edges["association_type"].tolist(),
                           np.asarray(edges["weight"], dtype=np.float64),
                           np.asarray(edges["created_at"], dtype=np.float64),
                           np.asarray(edges["last_co_activation"], dtype=np.float64))

    def load_from(self, ids: Sequence[uuid.UUID]) -> list[Row]:
        return self._read(f"{sql.EDGES} WHERE source_id IN (SELECT unnest(?::UUID[]))", [_ids(ids)])

    def insert(self, columns: Columns) -> None:
        self._insert("associations", columns)

    def delete_from(self, ids: Sequence[uuid.UUID]) -> None:
        self._delete("associations", "source_id", ids)

    def delete_to(self, ids: Sequence[uuid.UUID]) -> None:
        self._delete("associations", "target_id", ids)


class DuckVectors(_Rows):
    def load(self) -> Iterator[StoredVectors]:
        # one read, as numpy columns (no Python step per row): the blobs as one object column,
        # which the engine joins into one buffer per dimension, and each vector's store joined
        # from its record, so the engine need not look every id up among the heads for it
        columns = self.db.query_columns(
            f"SELECT {_HEX.format('v.record_id')} AS id, v.dim, r.store, v.vec FROM vectors v "
            "JOIN records r ON r.id = v.record_id")
        if len(columns["id"]):
            yield StoredVectors(uuids_of_hex(columns["id"].tolist()), columns["dim"].astype(np.int64),
                                columns["vec"], stores=columns["store"])

    def load_for(self, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, int, bytes]]:
        rows = self._read("SELECT record_id, dim, vec FROM vectors WHERE record_id IN (SELECT unnest(?::UUID[]))",
                          [_ids(ids)])
        return [(row[0], row[1], row[2]) for row in rows]

    def insert(self, columns: Columns, vec: Sequence[bytes] | np.ndarray, *, replace: bool = True) -> None:
        if isinstance(vec, np.ndarray):  # a float32 matrix: one blob per row
            vec = blobs_of_rows(vec)
        # a plain INSERT when no id can conflict: half the work of INSERT OR REPLACE at 1000 rows
        self._insert("vectors", {**columns, "vec": vec}, replace=replace)

    def delete(self, ids: Sequence[uuid.UUID]) -> None:
        self._delete("vectors", "record_id", ids)


class DuckLedger(_Rows):
    def load(self) -> list[tuple[uuid.UUID, uuid.UUID]]:
        return [(row[0], row[1]) for row in self._read("SELECT episodic_id, semantic_id FROM consolidations")]

    def insert(self, columns: Columns) -> None:
        self._insert("consolidations", columns)

    def delete(self, episodic_ids: Sequence[uuid.UUID]) -> None:
        self._delete("consolidations", "episodic_id", episodic_ids)


class DuckState(_Rows):
    """State rows; the counters of COUNTERS (the full-text index stamps, bumped by every write)
    count in sequences on top of what their state rows counted before. A sequence's draw is
    not undone by a rollback, so a counter may skip a number (at worst an index whose stamp
    then differs is rebuilt on the next open)."""

    def get(self, key: str, default: str | None = None) -> str | None:
        if key in COUNTERS:
            rows = self._read("SELECT last_value FROM duckdb_sequences() WHERE sequence_name = ?", [COUNTERS[key]])
            counted = self.db.counted_before(key) + (int(rows[0][0] or 0) if rows else 0)
            return str(counted) if counted else default
        rows = self._read("SELECT value FROM state WHERE key = ?", [key])
        return str(rows[0][0]) if rows else default

    def set(self, key: str, value: str) -> None:
        if key in COUNTERS:
            raise ValueError(f"{key} is a counter: it is only bumped")
        self._write("INSERT OR REPLACE INTO state VALUES (?, ?)", [key, value])

    def bump(self, key: str) -> int:
        """Increment a counter in one statement (used to detect stale indexes)."""
        if key in COUNTERS:
            return self.db.counted_before(key) + self.db.draw(self._writer(), COUNTERS[key])
        rows = self._write("UPDATE state SET value = (value::BIGINT + 1)::VARCHAR WHERE key = ? RETURNING value", [key])
        if rows:
            return int(rows[0][0])
        self.set(key, "1")
        return 1

    def delete_prefix(self, prefix: str) -> None:
        self._write("DELETE FROM state WHERE starts_with(key, ?)", [prefix])


class DuckFailures(_Rows):
    def load(self) -> list[Row]:
        return self._read(f"SELECT {sql.FAILURE_COLUMNS} FROM dream_failures")

    def put(self, row: Row) -> None:
        self._write(f"INSERT OR REPLACE INTO dream_failures ({sql.FAILURE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [str(row[0]), *row[1:]])

    def prune(self) -> None:
        self._write(sql.PRUNE_FAILURES)


class DuckTables:
    """`storage.base.Tables` over one database, bound to a transaction or to the reader cursors."""

    def __init__(self, db: Database, tx: WriteTransaction | None = None) -> None:
        self.records = DuckRecords(db, tx)
        self.journal = DuckJournal(db, tx)
        self.edges = DuckEdges(db, tx)
        self.vectors = DuckVectors(db, tx)
        self.ledger = DuckLedger(db, tx)
        self.state = DuckState(db, tx)
        self.failures = DuckFailures(db, tx)
