"""Boxed text tables and terminal styles on the standard library alone.

`cerememory recall` against a server is a command people and hooks run many times a minute;
importing rich costs it more than the recall itself. The commands whose output is one table and
a line print with this module, in the look of rich's default table (a heavy header box, the title
centred above, columns squeezed to the width of the terminal, or 80 columns, or $COLUMNS).
"""

from __future__ import annotations

import os
import sys
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

_STYLES = {"bold": "1", "dim": "2", "italic": "3"}


def colour(stream: TextIO) -> bool:
    """Styles only for a terminal, and never under NO_COLOR or TERM=dumb."""
    return (stream.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM", "") != "dumb")


def styled(text: str, style: str, stream: TextIO) -> str:
    return f"\033[{_STYLES[style]}m{text}\033[0m" if colour(stream) else text


def width_of(stream: TextIO) -> int:
    """$COLUMNS, else the terminal's width, else 80 (a pipe or a file)."""
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else 80
    except (OSError, ValueError):
        return 80


def cells(text: str) -> int:
    """Terminal cells `text` takes: wide (East Asian) characters take two."""
    if text.isascii():
        return len(text)
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1
               for c in text)


def _cut(text: str, width: int) -> tuple[str, str]:
    """The longest head of `text` that fits in `width` cells, and the rest."""
    used = 0
    for i, char in enumerate(text):
        used += cells(char)
        if used > width:
            return text[:i], text[i:]
    return text, ""


def ellipsis(text: str, width: int) -> str:
    if cells(text) <= width:
        return text
    return _cut(text, max(width - 1, 0))[0] + "…"


def wrap(text: str, width: int) -> list[str]:
    """Lines of at most `width` cells, broken between words; a word longer than a line is folded."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if cells(candidate) <= width:
            line = candidate
            continue
        if line:
            lines.append(line)
        while cells(word) > width:
            head, word = _cut(word, width)
            lines.append(head)
        line = word
    return [*lines, line] if line or not lines else lines


@dataclass(frozen=True)
class Column:
    header: str
    fold: bool = False  # wrap long text over lines (else cut it with an ellipsis)


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]], room: int) -> list[int]:
    """Each column's width in cells: its widest cell, then squeezed until the table fits in `room`
    (the folding columns first, then the widest of the others)."""
    widths = [max([cells(column.header), *(cells(row[i]) for row in rows)]) for i, column in enumerate(columns)]
    excess = sum(widths) + 3 * len(widths) + 1 - room
    for i, column in enumerate(columns):
        if column.fold and excess > 0:
            cut = min(excess, widths[i] - min(widths[i], 10))
            widths[i] -= cut
            excess -= cut
    while excess > 0:
        widest = max(range(len(widths)), key=lambda i: (not columns[i].fold, widths[i]))
        if widths[widest] <= 2:
            break
        widths[widest] -= 1
        excess -= 1
    return widths


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, title: str | None = None,
           stream: TextIO | None = None) -> str:
    """The table as text for `stream` (default stdout): its width, and styles only on a terminal."""
    stream = stream or sys.stdout
    widths = _widths(columns, rows, width_of(stream))

    def rule(left: str, fill: str, middle: str, right: str) -> str:
        return left + middle.join(fill * (w + 2) for w in widths) + right

    def line(parts: Sequence[str], bar: str, style: str | None = None) -> str:
        shown = [p + " " * (w - cells(p)) for p, w in zip(parts, widths, strict=True)]
        if style:
            shown = [styled(s, style, stream) for s in shown]
        return bar + bar.join(f" {s} " for s in shown) + bar

    out = []
    if title:
        total = sum(widths) + 3 * len(widths) + 1
        text = ellipsis(title, total)
        pad = (total - cells(text)) // 2
        out.append(" " * pad + styled(text, "italic", stream))
    out.append(rule("┏", "━", "┳", "┓"))
    out.append(line([ellipsis(c.header, w) for c, w in zip(columns, widths, strict=True)], "┃", "bold"))
    out.append(rule("┡", "━", "╇", "┩"))
    for row in rows:
        split = [wrap(cell, w) if column.fold else [ellipsis(cell, w)]
                 for cell, column, w in zip(row, columns, widths, strict=True)]
        for n in range(max(len(lines) for lines in split)):
            out.append(line([lines[n] if n < len(lines) else "" for lines in split], "│"))
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out) + "\n"
