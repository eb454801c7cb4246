"""The full-text index's own housekeeping (cerememory/index/fulltext.py)."""

from __future__ import annotations

from pathlib import Path

from cerememory.index.fulltext import TextDoc, TextIndex


def test_purge_group_drops_that_group_and_commits_nothing_when_it_is_empty(tmp_path: Path) -> None:
    index = TextIndex(tmp_path / "records")
    try:
        index.stage(1, add=[TextDoc("a", "working", "volatile note"), TextDoc("b", "semantic", "volatile fact")])
        index.commit_through(1)
        assert {doc_id for doc_id, _ in index.search("volatile", 10)} == {"a", "b"}
        index.purge_group("working")
        assert [doc_id for doc_id, _ in index.search("volatile", 10)] == ["b"]
        meta = tmp_path / "records" / "meta.json"
        before = meta.read_bytes()  # each commit writes a new opstamp here
        index.purge_group("working")
        assert meta.read_bytes() == before
        assert [doc_id for doc_id, _ in index.search("volatile", 10)] == ["b"]
    finally:
        index.close()
