"""Reading an append-only log from where the last run stopped, a bounded piece at a time.

Only whole lines: a line the agent is still writing is left for the next run instead of being
counted as corrupt. Memory stays bounded whatever the file holds: it is read in blocks, a line
longer than MAX_LINE_BYTES is passed over as it streams by (never held whole) and reported as
unreadable, and one round stops after about READ_BYTES at a line's end, for the caller to read
the rest in further rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from . import safejson
from .files import open_regular

MAX_LINE_BYTES = 8 << 20  # a Claude Code line with a few screenshots is a few MiB
READ_BYTES = 32 << 20
BLOCK_BYTES = 1 << 20


class Lines:
    """The lines of `path` from byte `offset`, numbered from `first`: iterate for
    (line number, its bytes, or None when it is too long to read). Afterwards `end` is the
    offset after the last line taken, `next_line` the number of the line there, and `more`
    says the round stopped at READ_BYTES with the rest of the file still to read. A last line
    without a newline is taken only if `finished(line)` (else it is still being written)."""

    def __init__(self, path: Path, offset: int, first: int, finished: Callable[[bytes], bool] | None = None) -> None:
        self.path, self.end, self.next_line, self.more = path, offset, first, False
        self._finished = finished

    def __iter__(self) -> Iterator[tuple[int, bytes | None]]:
        with open_regular(self.path) as f:
            f.seek(self.end)
            yield from self._split(f)

    def _take(self, stop: int, line: bytes | None) -> tuple[int, bytes | None]:
        """Move past the line ending at offset `stop`."""
        number = self.next_line
        self.end, self.next_line = stop + 1, number + 1
        return number, line

    def _split(self, f: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
        start = position = self.end  # where this round began; where the next block begins
        pending = bytearray()  # the beginning of a line whose end is not read yet
        skipping = False  # inside a line already longer than MAX_LINE_BYTES: it is not kept
        while block := f.read(BLOCK_BYTES):
            *whole, rest = block.split(b"\n")
            cursor = position
            for part in whole:
                stop = cursor + len(part)
                cursor = stop + 1
                too_long = skipping or stop - self.end > MAX_LINE_BYTES
                line = None if too_long else (bytes(pending) + part if pending else part)
                pending.clear()
                skipping = False
                yield self._take(stop, line)
            if not skipping:
                pending += rest
                if len(pending) > MAX_LINE_BYTES:
                    pending.clear()
                    skipping = True
            position += len(block)
            if position - start >= READ_BYTES and self.end > start:
                self.more = True
                return
        tail = bytes(pending)
        if not skipping and tail and not tail.isspace() and self._finished is not None and self._finished(tail):
            yield self._take(position - 1, tail)


def json_lines(lines: Lines) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for each non-blank line of `lines`; the value is None when the
    line is too long, not JSON, or nested too deep (see `safejson`), for the reader to count as
    skipped."""
    for number, raw in lines:
        if raw is None:
            yield number, None
        elif raw and not raw.isspace():
            yield number, safejson.value(raw)


def jsonl(path: Path, offset: int, first: int) -> Lines:
    """The lines of a JSONL log, its last line taken once it is a whole JSON value."""
    return Lines(path, offset, first, finished=safejson.is_json)
