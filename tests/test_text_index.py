"""The full-text index makes every staged change searchable before the next search, even one
staged at a sequence number a commit already reached (another server's change, read after a
later local write)."""

from __future__ import annotations

from pathlib import Path

from cerememory.index.fulltext import TextDoc, TextIndex


def test_a_change_staged_at_a_number_already_visible_is_searchable(tmp_path: Path) -> None:
    index = TextIndex(tmp_path / "text")
    try:
        index.stage(2, add=[TextDoc(id="local", group="semantic", body="the local write")])
        assert [hit for hit, _ in index.search("local write", 5)] == ["local"]
        index.stage(2, add=[TextDoc(id="other", group="semantic", body="the other server's write")])
        assert [hit for hit, _ in index.search("other server", 5)] == ["other"]
    finally:
        index.close(None)
