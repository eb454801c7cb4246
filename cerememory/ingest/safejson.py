"""JSON from session files, which may have been written to hurt: nested too deep to parse
(`json` raises RecursionError) or for the readers to walk, or holding escapes of lone surrogates
(`"\\ud800"`) that no UTF-8 store can encode. A value comes back usable, or not at all."""

from __future__ import annotations

import json
import re
from typing import Any

from .turns import decode, scrub

MAX_DEPTH = 128  # real sessions nest about 10 deep; far below the interpreter's recursion limit
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than `limit` deep (iteratively: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def loads(data: bytes | str) -> Any:
    """The value of `data` (bytes as UTF-8, invalid bytes as U+FFFD), its strings encodable
    (lone surrogates as U+FFFD). ValueError when it is not JSON or nests deeper than MAX_DEPTH."""
    text = decode(data) if isinstance(data, bytes) else data
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    nested = isinstance(value, dict | list)
    if nested and text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(value, MAX_DEPTH):
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return scrub(value) if _SURROGATE_ESCAPE.search(text) else value


def value(data: bytes | str) -> Any:
    """`loads(data)`, or None when it is not usable JSON."""
    try:
        return loads(data)
    except ValueError:
        return None


def is_json(data: bytes) -> bool:
    """Whether `data` is one whole, usable JSON value (a last line the agent has finished)."""
    try:
        loads(data)
    except ValueError:
        return False
    return True
