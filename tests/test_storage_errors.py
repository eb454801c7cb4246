"""DuckDB's errors reach callers as CMP errors, translated in one place (storage/duckdb/errors.py)."""

from __future__ import annotations

import duckdb
import pytest

from cerememory import CMPError, ErrorCode
from cerememory.dream.failures import is_machine_failure
from cerememory.storage.base import StorageUnavailable
from cerememory.storage.duckdb.database import Database
from cerememory.storage.duckdb.errors import translate


def _all_subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.extend([sub, *_all_subclasses(sub)])
    return out


DUCKDB_ERRORS = sorted({c for c in _all_subclasses(duckdb.Error) if "duckdb" in c.__module__},
                       key=lambda c: c.__name__)


@pytest.mark.parametrize("error", DUCKDB_ERRORS, ids=lambda c: c.__name__)
def test_every_duckdb_error_has_a_cmp_error(error, tmp_path):
    translated = translate(error('Duplicate key "id: the secret plan"'), tmp_path / "db.duckdb")
    assert isinstance(translated, CMPError)
    assert translated.hint
    assert "secret plan" not in translated.message  # DuckDB quotes values; they go to the log only


@pytest.mark.parametrize(("error", "code", "machine"), [
    (duckdb.IOException("could not write: No space left on device"), ErrorCode.STORAGE_FULL, True),
    (duckdb.IOException("Permission denied"), ErrorCode.INTERNAL_ERROR, True),
    (duckdb.FatalException("database has been invalidated"), ErrorCode.INTERNAL_ERROR, True),
    (duckdb.ConnectionException("Connection already closed"), ErrorCode.INTERNAL_ERROR, True),
    (duckdb.ConstraintException("Duplicate key"), ErrorCode.INTERNAL_ERROR, False),
    (duckdb.TransactionException("Conflict on update"), ErrorCode.INTERNAL_ERROR, False),
    (duckdb.CatalogException("Table with name nope does not exist"), ErrorCode.INTERNAL_ERROR, False),
])
def test_the_mapping(error, code, machine, tmp_path):
    translated = translate(error, tmp_path / "db.duckdb")
    assert translated.code is code
    assert isinstance(translated, StorageUnavailable) == (machine and code is ErrorCode.INTERNAL_ERROR)
    assert is_machine_failure(translated) is machine


def test_a_failed_statement_rolls_back_and_raises_the_cmp_error(tmp_path):
    db = Database(tmp_path / "db.duckdb")
    try:
        with db.transaction() as tx:
            tx.execute("INSERT INTO state VALUES ('kept', 'v')")
        with pytest.raises(CMPError) as failed, db.transaction() as tx:
            tx.execute("INSERT INTO state VALUES ('new', 'v')")
            tx.execute("INSERT INTO state VALUES ('kept', 'twice')")  # the primary key refuses it
        assert failed.value.code is ErrorCode.INTERNAL_ERROR and "nothing was changed" in failed.value.message
        assert isinstance(failed.value.__cause__, duckdb.ConstraintException)
        assert db.query("SELECT key, value FROM state ORDER BY key") == [("kept", "v")]
        with pytest.raises(CMPError):
            db.query("SELECT * FROM no_such_table")
    finally:
        db.close()
