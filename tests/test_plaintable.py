"""Plain-text tables: widths, wrapping, wide characters, and styles only on a terminal."""

from __future__ import annotations

import io

from cerememory.plaintable import Column, cells, render


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


COLUMNS = [Column("id"), Column("store"), Column("content", fold=True)]
ROWS = [["01a234fa-726c-734e-93f2-59a19ea15571", "episodic", "the deploy key rotates every Monday at nine"],
        ["01a234fa-726c-734f-92ad-e55cb6c7d697", "semantic", "東京のオフィスは五階にあります"]]


def test_a_table_fits_the_width_folding_content_first(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    wide = render(COLUMNS, ROWS, title="2 memories", stream=io.StringIO()).splitlines()
    assert wide[1].startswith("┏") and wide[3].startswith("┡") and wide[-1].startswith("└")
    assert "the deploy key rotates every Monday at nine" in wide[4]
    assert len(wide) == 7  # title, three rule lines, header, two one-line rows
    monkeypatch.setenv("COLUMNS", "60")
    narrow = render(COLUMNS, ROWS, title="2 memories", stream=io.StringIO()).splitlines()
    assert all(cells(line) <= 60 for line in narrow)
    assert len({cells(line) for line in narrow[1:]}) == 1  # every line of the box is as wide
    body = [line.split("│")[1:4] for line in narrow[4:-1]]
    second = next(n for n, (id_cell, _, _) in enumerate(body) if n and id_cell.strip())
    assert " ".join(content.strip() for _, _, content in body[:second]) == ROWS[0][2]  # folded, never cut
    assert "".join(content.strip() for _, _, content in body[second:]) == ROWS[1][2]  # two cells a character
    assert body[0][0].strip().endswith("…")  # the other columns give way with an ellipsis


def test_styles_only_on_a_terminal_and_never_under_no_color(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert "\033[1m" in render(COLUMNS, ROWS, stream=Terminal())
    assert "\033[" not in render(COLUMNS, ROWS, stream=io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\033[" not in render(COLUMNS, ROWS, stream=Terminal())
