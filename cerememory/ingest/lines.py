"""Reading an append-only log from where the last run stopped: only whole lines, so a line the
agent is still writing is left for the next run instead of being counted as corrupt."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .turns import decode


def session_files(root: Path, wanted: Callable[[str], bool]) -> Iterator[Path]:
    """`root` itself when it is a file, else every file below it whose name is `wanted`."""
    if root.is_file():
        yield root
        return
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if wanted(name):
                yield Path(folder, name)


def read_from(path: Path, offset: int) -> tuple[bytes, int]:
    """The bytes from `offset` up to the last newline, and the offset after them. A final line
    without a newline is included only if it is a complete JSON value (the file is finished)."""
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    tail = data[end:]
    if tail.strip():
        try:
            json.loads(tail)
        except ValueError:
            return data[:end], offset + end
        return data, offset + len(data)
    return data[:end], offset + end


def json_lines(data: bytes, first_line: int) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value or None when the line is not JSON) for each non-blank line."""
    for number, raw in enumerate(data.split(b"\n"), first_line):
        if not raw.strip():
            continue
        try:
            yield number, json.loads(decode(raw))
        except ValueError:
            yield number, None


def next_line(data: bytes, first_line: int) -> int:
    """The number of the line after `data`, which started at `first_line`."""
    return first_line + data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
