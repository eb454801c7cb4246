"""Numbers in words for what the CLIs print: `1 record`, `2 records`, never `1 records`."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and `noun`, plural unless n is 1 (`plural` for nouns that add more than an s)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
