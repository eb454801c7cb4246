"""How human output looks, decided once per run: colour (a terminal without NO_COLOR, or
--color / --no-color), emoji or their plain-text stand-ins (--no-emoji, CASS_MEMORY_NO_EMOJI),
and the reference's text helpers (word wrap, `key: value` blocks, truncation)."""

from __future__ import annotations

import os
import sys

WIDTH = 80  # the reference's width when stdout is not a terminal
RULE = "─" * WIDTH
_STYLES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34", "magenta": "35",
           "cyan": "36", "gray": "90"}
# the reference's icons: (emoji, plain text)
ICONS = {"success": ("✓", "[OK]"), "failure": ("✗", "[FAIL]"), "warning": ("⚠️", "[!]"), "skipped": ("⊘", "[SKIP]"),
         "tip": ("💡", "Tip:")}
_colour: bool | None = None
_emoji = True


def use_colour(enabled: bool | None) -> None:
    """Decide once per run: None asks the terminal (a tty, and NO_COLOR unset)."""
    global _colour
    _colour = enabled


def use_emoji(enabled: bool) -> None:
    global _emoji
    _emoji = enabled


def colour_on() -> bool:
    if _colour is not None:
        return _colour
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def paint(text: str, style: str) -> str:
    return f"\033[{_STYLES[style]}m{text}\033[0m" if colour_on() else text


def icon(name: str) -> str:
    emoji, plain = ICONS[name]
    return emoji if _emoji else plain


def icon_prefix(name: str) -> str:
    """The icon and a space, or nothing when the icon has no plain form."""
    value = icon(name)
    return f"{value} " if value else ""


def emoji(symbol: str) -> str:
    """A decorative emoji: itself, or nothing under --no-emoji."""
    return symbol if _emoji else ""


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap, paragraph by paragraph, never breaking a word (the reference's)."""
    width = max(10, width)
    lines: list[str] = []
    for paragraph in str(text).split("\n"):
        words = paragraph.split()
        if not words:
            lines.append("")
            continue
        current = words[0]
        for word in words[1:]:
            if len(current) + 1 + len(word) <= width:
                current += " " + word
            else:
                lines.append(current)
                current = word
        lines.append(current)
    return lines


def key_values(rows: list[tuple[str, str]], indent: str = "  ", width: int = WIDTH) -> list[str]:
    """`key: value` rows with the keys padded to one width, values wrapped under themselves."""
    key_width = min(max((len(k) for k, _ in rows), default=0), 24)
    value_width = max(10, width - len(indent) - key_width - 2)
    out: list[str] = []
    for key, value in rows:
        wrapped = wrap(value, value_width)
        out.append(f"{indent}{key.ljust(key_width)}: {wrapped[0]}")
        out += [f"{indent}{' ' * key_width}: {extra}" for extra in wrapped[1:]]
    return out
