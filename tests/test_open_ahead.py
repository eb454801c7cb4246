"""Opening a data directory ahead of its engine (cerememory/ahead.py, storage/ahead.py): the
engine adopts the lock and the database opened on the thread, a directory owned by another
process is refused the usual way, and what is never adopted is released."""

from __future__ import annotations

from pathlib import Path

import pytest

import cerememory
from cerememory.ahead import close_ahead, open_ahead
from cerememory.api import open_config
from cerememory.cmp.errors import CMPError
from cerememory.config import load_config
from cerememory.storage.lock import DataDirLock, lock_owner


def _config(data_dir: Path):  # noqa: ANN202 - a Config
    return load_config(None, {"data_dir": str(data_dir), "embed.semantic": "off"})


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    """A data directory holding one record, closed again."""
    data_dir = tmp_path / "data"
    with cerememory.open(data_dir, semantic="off") as mem:
        record_id = mem.store("the deploy key rotates on Mondays", store="semantic")
    return data_dir, str(record_id)


def test_the_engine_adopts_what_was_opened_ahead(stored: tuple[Path, str]) -> None:
    data_dir, record_id = stored
    assert open_ahead(_config(data_dir))
    assert not open_ahead(_config(data_dir))  # one at a time per directory
    mem = open_config(_config(data_dir), warm_cache=False)
    try:
        listed = mem.dispatch("recall.list", {"store": "semantic"})
        assert [r["id"] for r in listed["records"]] == [record_id]
        assert lock_owner(data_dir) is not None  # held by this process, through the adopted lock
    finally:
        mem.close()
    assert lock_owner(data_dir) is None  # closing the engine released the lock it adopted
    with cerememory.open(data_dir, semantic="off") as again:  # and the database file
        assert again.dispatch("recall.list", {"store": "semantic"})["records"]


def test_a_directory_owned_elsewhere_is_refused_as_always(stored: tuple[Path, str]) -> None:
    data_dir, _ = stored
    owner = DataDirLock(data_dir)
    owner.acquire(server_url="http://127.0.0.1:9", adopt=False)  # a server's lock (another open file)
    try:
        assert open_ahead(_config(data_dir))
        with pytest.raises(CMPError) as raised:
            open_config(_config(data_dir), warm_cache=False)
        assert raised.value.code.value == "DATA_DIR_LOCKED"
        assert raised.value.details["server_url"] == "http://127.0.0.1:9"
    finally:
        close_ahead()
        owner.release()


def test_what_is_never_adopted_is_released(stored: tuple[Path, str]) -> None:
    data_dir, record_id = stored
    assert open_ahead(_config(data_dir))
    close_ahead()  # the caller went elsewhere (a server, a failure)
    assert lock_owner(data_dir) is None
    with cerememory.open(data_dir, semantic="off") as mem:
        assert [r["id"] for r in mem.dispatch("recall.list", {"store": "semantic"})["records"]] == [record_id]


def test_a_new_directory_is_left_to_the_engine(tmp_path: Path) -> None:
    data_dir = tmp_path / "new"
    open_ahead(_config(data_dir))  # nothing to open there yet
    with open_config(_config(data_dir), warm_cache=False) as mem:
        assert mem.dispatch("recall.list", {"store": "semantic"})["records"] == []
    close_ahead()
