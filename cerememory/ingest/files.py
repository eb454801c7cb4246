"""Which session files are read, and how they are opened.

A session directory holds whatever was put there, by the agent or by a checked-out repository:
a FIFO named `*.jsonl` would block a plain `open` for ever, a link to `/dev/zero` would be read
until memory runs out, a link to `~/.ssh/id_rsa` would put a key into the journal. So discovery
lists candidates without following links to directories, `admit` lets through only regular
files that a link does not take out of the directory being scanned, and `open_regular` opens
without blocking and checks the type again on the open descriptor.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

MAX_DOCUMENT_BYTES = 64 << 20  # a session file read whole (or a Cursor value): larger ones are not read
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class Refused(OSError):
    """A file that is not read: not a regular file, a link leading out of the scanned directory,
    or too large to read whole. An `OSError`, so it is reported like any unreadable file."""


def walk(root: Path, wanted: Callable[[str], bool],
         enter: Callable[[str, int], bool] = lambda name, depth: True) -> Iterator[Path]:
    """`root` itself when it is not a directory, else every entry below it, other than a
    directory, whose name is `wanted`. A sub-directory at `depth` (1: directly below `root`) is
    searched if `enter(name, depth)`; links to directories never are (a loop, or a way out)."""
    if not root.is_dir():
        if root.is_symlink() or root.exists():
            yield root
        return
    folders = [(root, 0)]
    while folders:
        folder, depth = folders.pop()
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError:
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            try:
                if entry.is_dir(follow_symlinks=False):
                    if enter(entry.name, depth + 1):
                        folders.append((Path(entry.path), depth + 1))
                    continue
                if entry.is_symlink() and entry.is_dir():
                    continue
            except OSError:
                continue
            if wanted(entry.name):
                yield Path(entry.path)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def regular(path: Path, follow_links: bool = True) -> os.stat_result:
    """The status of `path` if it is a regular file (a link to one, unless not `follow_links`),
    else `Refused`."""
    st = os.stat(path, follow_symlinks=follow_links)
    if stat.S_ISLNK(st.st_mode):
        raise Refused("a symbolic link, not followed here")
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"{_kind(st.st_mode)}, not a regular file")
    return st


def admit(path: Path, root: Path) -> os.stat_result:
    """The status of `path`, found under `root`, if it may be read: a regular file, reached
    through a symbolic link only if the link's target lies inside `root` (both resolved)."""
    if os.path.islink(path):
        target = Path(os.path.realpath(path))
        if not target.is_relative_to(os.path.realpath(root)):
            raise Refused(f"a symbolic link leading out of {root}")
    return regular(path)


def open_regular(path: Path, follow_links: bool = True) -> BinaryIO:
    """`path` opened for reading if it is a regular file. Checked before opening (opening a
    device can have effects) and on the descriptor after (it may have been replaced meanwhile);
    opened non-blocking, so a FIFO put there in between cannot stall the run."""
    regular(path, follow_links)
    fd = os.open(path, _OPEN_FLAGS | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0)))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Refused(f"{_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_whole(path: Path, limit: int, follow_links: bool = True) -> bytes:
    """All of a file read as one document: `Refused` if it holds more than `limit` bytes, and
    never more than `limit` + 1 bytes read even if it grows meanwhile."""
    with open_regular(path, follow_links) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise Refused(f"larger than {limit:,} bytes, the most read as one document")
    return data
