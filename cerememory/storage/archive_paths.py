"""Where an export may be written, and writing it so that no half-file is ever left behind.

An export never overwrites, never follows a symbolic link (the file or any directory above
it) and never climbs with `..`: an archive holds every memory, so a mistyped or planted path
must not put it somewhere unexpected or clobber a file. A server writing on its own disk for a
client confines the file to one export directory as well. The archive goes to a temporary
file beside the target and is linked into place only when complete.
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


def export_target(output_path: str | os.PathLike[str], root: Path | None = None) -> Path:
    """The absolute path of a new archive file, or a VALIDATION_ERROR saying why not.

    Without `root` the path is the caller's own choice: absolute, or relative to the current
    directory. With `root` (a server's export directory, created when missing) it is relative to
    `root` and must stay inside it: an absolute path elsewhere is refused, as is any symbolic
    link below `root`.
    """
    text = os.fspath(output_path)
    if not text or not text.strip():
        raise _bad("output_path: must not be empty", "give the path of a new file, e.g. ./memory.cma")
    if "\0" in text:
        raise _bad("output_path: contains a NUL character", "give the path of a new file, e.g. ./memory.cma")
    path = Path(text).expanduser() if root is None else Path(text)
    if ".." in path.parts:
        raise _bad(f"output_path: {text!r} contains a '..' component",
                   "give the path without '..' (an absolute path, or one under the current directory)"
                   if root is None else "give a file name inside the export directory")
    if root is None:  # every directory the caller named (a relative path trusts the current directory)
        base = Path(path.anchor) if path.is_absolute() else Path.cwd()
        path = base / (path.relative_to(path.anchor) if path.is_absolute() else path)
    else:
        base = _export_root(root)
        path = base / _inside(path, root, base)
    step = base
    for part in path.parent.relative_to(base).parts:
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


def _export_root(root: Path) -> Path:
    """The export directory, created (private to this user) when missing, with its links resolved."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise CMPError(ErrorCode.EXPORT_FAILED, f"cannot create the export directory {root}: "
                       f"{exc.strerror or exc}", hint="set archive.export_dir to a writable directory") from exc
    return root.resolve()


def _inside(path: Path, root: Path, base: Path) -> Path:
    """`path` relative to the export directory; an absolute path must already lie inside it."""
    if not path.is_absolute():
        return path
    for prefix in (base, root.absolute()):
        if path.is_relative_to(prefix):
            return path.relative_to(prefix)
    raise _bad(f"output_path: {path} is outside the export directory {base}",
               f"give a file name; this server writes exports only into {base} (archive.export_dir)")


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
