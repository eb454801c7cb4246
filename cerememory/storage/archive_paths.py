"""Where an export may be written, and writing it so that no half-file is ever left behind.

An export never overwrites, never follows a symbolic link (the file or any directory above
it) and never climbs with `..`: an archive holds every memory, so a mistyped or planted path
must not put it somewhere unexpected or clobber a file. The archive goes to a temporary file
beside the target and is linked into place only when complete.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ..cmp.errors import CMPError, ErrorCode


def _bad(message: str, hint: str) -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, message, hint=hint, details={"field": "output_path"})


def export_target(output_path: str | os.PathLike[str]) -> Path:
    """The absolute path of a new archive file, or a VALIDATION_ERROR saying why not."""
    text = os.fspath(output_path)
    if not text or not text.strip():
        raise _bad("output_path: must not be empty", "give the path of a new file, e.g. ./memory.cma")
    path = Path(text).expanduser()
    if ".." in path.parts:
        raise _bad(f"output_path: {text!r} contains a '..' component",
                   "give the path without '..' (an absolute path, or one under the current directory)")
    # every directory the caller named (a relative path trusts the current directory itself)
    root = Path(path.anchor) if path.is_absolute() else Path.cwd()
    path = root / path.relative_to(path.anchor) if path.is_absolute() else root / path
    step = root
    for part in path.parent.relative_to(root).parts:
        step = step / part
        if step.is_symlink():
            raise _bad(f"output_path: {step} is a symbolic link",
                       "export into a real directory; symbolic links are not followed")
    if not path.parent.is_dir():
        raise _bad(f"output_path: the directory {path.parent} does not exist", "create it first")
    if path.is_symlink():
        raise _bad(f"output_path: {path} is a symbolic link", "export writes a new regular file only")
    if path.exists():
        raise _bad(f"output_path: {path} already exists", "export never overwrites; choose a new file name")
    return path


@contextmanager
def write_new(path: Path) -> Iterator[BinaryIO]:
    """A file object for `path`'s content; on success the file appears whole (mode 0600), on
    failure nothing appears. Linking (not renaming) into place keeps "never overwrite" true
    even if another process creates the same name meanwhile."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, path)
        except FileExistsError:
            raise _bad(f"output_path: {path} already exists", "export never overwrites") from None
        except OSError as exc:  # a file system without hard links: an exclusive rename instead
            if path.exists():
                raise _bad(f"output_path: {path} already exists", "export never overwrites") from exc
            os.replace(temp, path)
    except OSError as exc:
        raise CMPError(ErrorCode.EXPORT_FAILED, f"cannot write {path}: {exc.strerror or exc}",
                       hint="check the directory's permissions and free space") from exc
    finally:
        Path(temp).unlink(missing_ok=True)
