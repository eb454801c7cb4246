"""Statements DuckDB plans once per connection and runs again with new values (issue 16).

DuckDB's Python API plans every `execute` anew; for a one-row INSERT planning costs about
twice what running it does, and every lone write runs one. A statement `PREPARE`d once is
run by `EXECUTE name(values)`, which reuses its plan as long as each value has the type the
plan was made for. `EXECUTE` takes no `?` parameters, so the values are written into its text
as SQL literals of exactly those types (a null as `NULL::type`, `TypedNull`); a value of any
other type (or a bare `NULL`) makes DuckDB plan the statement again, which is slower but still
right.

Only statements DuckDB keeps its plan for gain: a plain INSERT ... VALUES does; INSERT OR
REPLACE and an INSERT that casts a parameter are planned again at every EXECUTE.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .driver import duckdb

# Past this much SQL text the literals cost more to parse than planning the statement saves
# (a body of about 15 KB written as hex).
LITERALS_LIMIT = 30_000


def _double(value: float) -> str:
    value = float(value)  # numpy's float64 is a float whose repr names its type
    if not math.isfinite(value):
        return f"'{value!r}'::DOUBLE"
    text = repr(value)  # the shortest text that reads back as the same double
    return text if "e" in text else text + "e0"  # "1.5" alone would be a DECIMAL


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass(frozen=True)
class TypedNull:
    """A null for a column of SQL type `sql_type`: written `NULL::type`, which keeps the plan
    a bare NULL would make DuckDB redo."""

    sql_type: str


# by exact type: one dict lookup per value. Each writer also takes a subclass's value (an
# enum, numpy's float64) as its base type's.
_WRITERS: dict[type, Callable[[Any], str]] = {
    bool: lambda value: "true" if value else "false",
    int: lambda value: str(int(value)),
    float: _double,
    str: _text,
    bytes: lambda value: f"unhex('{bytes(value).hex()}')",
    uuid.UUID: lambda value: f"'{uuid.UUID(int=value.int)}'::UUID",
    TypedNull: lambda value: f"NULL::{value.sql_type}",
}


def literal(value: Any) -> str | None:
    """`value` as a SQL literal of the type DuckDB binds the Python value to (BOOLEAN, DOUBLE,
    VARCHAR, BLOB, UUID; an int as an INTEGER when it fits one, else a BIGINT), or None for a
    type written no other way. A numpy scalar is written as its Python value."""
    write = _WRITERS.get(type(value))
    if write is not None:
        return write(value)
    for kind, write in _WRITERS.items():  # bool before int: a bool is an int too
        if isinstance(value, kind):
            return write(value)
    item = getattr(value, "item", None)  # another numpy scalar
    if callable(item):
        plain = item()
        return None if type(plain) is type(value) else literal(plain)
    return None


def literals(values: Sequence[Any]) -> str | None:
    """The values as one argument list, or None when one has no literal or the text is long."""
    parts = []
    size = 0
    for value in values:
        text = literal(value)
        if text is None:
            return None
        size += len(text)
        if size > LITERALS_LIMIT:
            return None
        parts.append(text)
    return ", ".join(parts)


class Prepared:
    """The statements prepared on one connection, by their SQL; a new connection (the database
    reopened) starts with none."""

    def __init__(self) -> None:
        self._conn: duckdb.DuckDBPyConnection | None = None
        self._names: dict[str, str] = {}

    def name(self, conn: duckdb.DuckDBPyConnection, sql: str) -> str:
        """The name `sql` is prepared under on `conn`, preparing it the first time."""
        if conn is not self._conn:
            self._conn, self._names = conn, {}
        name = self._names.get(sql)
        if name is None:
            name = f"cerememory_{len(self._names)}"
            conn.execute(f"PREPARE {name} AS {sql}")
            self._names[sql] = name
        return name

    def execute(self, conn: duckdb.DuckDBPyConnection, sql: str) -> duckdb.DuckDBPyConnection:
        """Run `sql`, which takes no values, through its prepared plan."""
        return conn.execute(f"EXECUTE {self.name(conn, sql)}")

    def execute_with(self, conn: duckdb.DuckDBPyConnection, sql: str,
                     values: Sequence[Any]) -> duckdb.DuckDBPyConnection | None:
        """Run `sql` (its parameters written `$1`, `$2`, ...) with `values` through its prepared
        plan; None, with nothing run, when a value cannot be written as a literal."""
        statement = self.statement(conn, sql, values)
        return None if statement is None else conn.execute(statement)

    def statement(self, conn: duckdb.DuckDBPyConnection, sql: str, values: Sequence[Any]) -> str | None:
        """The EXECUTE that runs `sql` with `values` through its plan on `conn`; None when a
        value cannot be written as a literal."""
        args = literals(values)
        return None if args is None else f"EXECUTE {self.name(conn, sql)}({args})"
