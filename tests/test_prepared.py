"""Prepared statements run with their values written as SQL literals (storage/duckdb/prepared.py):
every value must read back exactly as the same value inserted through `?` parameters would."""

from __future__ import annotations

import enum
import json
import math
import uuid

import numpy as np
import pytest

from cerememory.storage.duckdb import prepared
from cerememory.storage.duckdb.database import Database
from cerememory.storage.duckdb.driver import duckdb
from cerememory.storage.duckdb.tables import DuckTables

TRICKY_TEXT = ["", "'", "''", "a'b", "back\\slash", "\\x41", "new\nline", "tab\t", "üñíçødé 😀", "E'x'",
               "$$dollar$$", "--comment", "/* c */", "nul\x00inside", "'); DROP TABLE t; --"]
TRICKY_FLOATS = [0.0, -0.0, 1.0, -1.5, 5e-324, 1.7976931348623157e308, 0.1, 1 / 3, 1e22, 123456789.123456789,
                 float("inf"), float("-inf"), float("nan")]


TABLE = "CREATE TABLE t (id UUID PRIMARY KEY, s VARCHAR, f DOUBLE, i INTEGER, big BIGINT, ok BOOLEAN, b BLOB)"


@pytest.fixture
def conn():
    c = duckdb.connect()
    c.execute(TABLE)
    yield c
    c.close()


SQL = "INSERT INTO t (id, s, f, i, big, ok, b) VALUES ($1, $2, $3, $4, $5, $6, $7)"


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def _round_trip(conn, values) -> None:
    statements = prepared.Prepared()
    assert statements.execute_with(conn, SQL, values) is not None
    row = conn.execute("SELECT id, s, f, i, big, ok, b FROM t").fetchone()
    assert all(_same(got, want) for got, want in zip(row, values, strict=True)), (row, values)
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (1,)  # the text did not run anything else


@pytest.mark.parametrize("text", TRICKY_TEXT)
def test_text_reads_back_exactly(conn, text):
    _round_trip(conn, [uuid.uuid4(), text, 1.0, -(2**31), 2**63 - 1, True, bytes(range(256))])


@pytest.mark.parametrize("number", TRICKY_FLOATS)
def test_numbers_read_back_exactly(conn, number):
    _round_trip(conn, [uuid.uuid4(), "x", number, 2**31 - 1, -(2**63), False, b""])


class Kind(enum.IntEnum):
    THREE = 3


class Name(enum.StrEnum):
    X = "x'x"


def test_numpy_scalars_and_enums_are_their_python_values(conn):
    statements = prepared.Prepared()
    values = [uuid.uuid4(), Name.X, np.float32(0.25), Kind.THREE, np.int64(2**40), np.bool_(True), b"z"]
    assert statements.execute_with(conn, SQL, values) is not None
    assert conn.execute("SELECT s, f, i, big, ok, b FROM t").fetchone() == ("x'x", 0.25, 3, 2**40, True, b"z")


def _planned_again(conn, tmp_path, values) -> bool:
    """Whether running SQL with `values`, after a first run that made its plan, plans it again."""
    statements = prepared.Prepared()
    statements.execute_with(conn, SQL, [uuid.uuid4(), "a", 1.0, 1, 2**40, False, b"x"])
    conn.execute("PRAGMA enable_profiling='json'")
    conn.execute(f"PRAGMA profiling_output='{tmp_path / 'p.json'}'")
    conn.execute("SET profiling_coverage='ALL'")
    conn.execute("SET profiling_mode='detailed'")
    statements.execute_with(conn, SQL, values)
    conn.execute("PRAGMA disable_profiling")
    profile = json.loads((tmp_path / "p.json").read_text())
    return bool(profile.get("optimizer", {}).get("total_time"))


def test_the_plan_is_reused(conn, tmp_path):
    """Literals of the parameters' own types (an int is an INTEGER literal when it fits one, so a
    BIGINT column's values are large here): DuckDB runs the plan it made, without the optimizer."""
    assert not _planned_again(conn, tmp_path, [uuid.uuid4(), "b", 2.5, 3, 2**41, True, b"y"])


def test_typed_nulls_read_back_and_keep_the_plan(conn, tmp_path):
    nulls = [prepared.TypedNull(t) for t in ("VARCHAR", "DOUBLE", "INTEGER", "BIGINT", "BOOLEAN", "BLOB")]
    assert not _planned_again(conn, tmp_path, [uuid.uuid4(), *nulls])
    assert conn.execute("SELECT s, f, i, big, ok, b FROM t WHERE s IS NULL").fetchall() == [(None,) * 6]


def test_values_without_a_literal_are_left_to_the_caller(conn):
    statements = prepared.Prepared()
    assert statements.execute_with(conn, SQL, [uuid.uuid4(), None, 1.0, 1, 2, True, b""]) is None
    assert statements.execute_with(conn, SQL, [uuid.uuid4(), "x", 1.0, 1, 2, True,
                                               b"x" * prepared.LITERALS_LIMIT]) is None
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_a_new_connection_prepares_again(conn):
    statements = prepared.Prepared()
    statements.execute_with(conn, SQL, [uuid.uuid4(), "a", 1.0, 1, 2, True, b""])
    other = duckdb.connect()
    other.execute(TABLE)
    statements.execute_with(other, SQL, [uuid.uuid4(), "b", 1.0, 1, 2, True, b""])
    assert other.execute("SELECT s FROM t").fetchall() == [("b",)]
    other.close()


def test_rows_written_through_it_equal_those_written_with_parameters(tmp_path):
    """A lone row and two rows in one statement (both prepared) against rows inserted with `?`
    parameters (INSERT OR REPLACE), numpy scalars and ids as text included."""
    db = Database(tmp_path / "x.duckdb")
    ids = [uuid.uuid4() for _ in range(4)]

    def columns(first: int, n: int, *, text_ids: bool = False) -> dict:
        return {"record_id": [str(i) if text_ids else i for i in ids[first:first + n]],
                "dim": [np.int64(3)] * n, "model": ["it's"] * n}

    with db.transaction() as tx:
        vectors = DuckTables(db, tx).vectors
        vectors.insert(columns(0, 1), [b"\x00one"], replace=False)
        vectors.insert(columns(1, 2, text_ids=True), [b"\x00one"] * 2, replace=False)
        vectors.insert(columns(3, 1), [b"\x00one"], replace=True)  # with parameters
    rows = db.query("SELECT record_id, dim, model, vec FROM vectors")
    assert sorted(rows) == sorted((i, 3, "it's", b"\x00one") for i in ids)
    db.close()
