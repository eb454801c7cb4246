"""A data directory is private to its owner: memories, the journal and the keys are nobody
else's business on a shared machine. Directories are 0700 and files 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["make_private", "private_dir"]


def private_dir(path: Path) -> None:
    """Create `path` and whichever of its parents are missing as 0700: a data directory, and a
    directory made to hold one (~/.cerememory, beside its config file), are their owner's alone.
    Directories that exist are left as they are (make_private fixes a data directory's)."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)


def make_private(data_dir: Path) -> list[str]:
    """Take every group and other permission off `data_dir`, its directories and files (symlinks
    are left alone, never followed). Returns the paths, relative to `data_dir`, that had any,
    so an opener can say it fixed them."""
    fixed: list[str] = []

    def tighten(path: Path, private: int) -> None:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            os.chmod(path, (mode & ~0o077) | private)
            fixed.append(str(path.relative_to(data_dir)) if path != data_dir else ".")

    tighten(data_dir, 0o700)
    for root, dirs, files in os.walk(data_dir):
        base = Path(root)
        for name in dirs:
            if not (base / name).is_symlink():
                tighten(base / name, 0o700)
        for name in files:
            path = base / name
            if not path.is_symlink():
                tighten(path, 0o600)
    return fixed
