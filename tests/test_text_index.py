"""The full-text index makes every staged change searchable before the next search, even one
staged at a sequence number a commit already reached (another server's change, read after a
later local write)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

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


def test_hits_as_uuids_are_the_ids_searched_for_in_the_same_order(tmp_path: Path) -> None:
    index = TextIndex(tmp_path / "text")
    ids = [uuid.UUID(int=(n + 1) * 0x0123456789ABCDEF0123456789ABCDEF % (1 << 128)) for n in range(40)]
    try:
        index.stage(1, add=[TextDoc(id=str(i), group="semantic", body=f"river {'stone ' * (n % 7)}")
                            for n, i in enumerate(ids)])
        plain = index.search("river stone", 30)
        assert len(plain) == 30
        assert index.search_ids("river stone", 30) == [(uuid.UUID(i), s) for i, s in plain]
        index.stage(2, add=[TextDoc(id="not-a-uuid", group="semantic", body="a lonely marsh")])
        assert index.search("marsh", 5) == [("not-a-uuid", index.search("marsh", 5)[0][1])]
        with pytest.raises(ValueError):  # an id that is no UUID has no key: refused rather than guessed
            index.search_ids("marsh", 5)
    finally:
        index.close(None)
