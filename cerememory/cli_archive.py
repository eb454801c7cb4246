"""`cerememory export` and `cerememory import`: CMA archives between a data directory and a file.

Everything that can fail on the user's side (the path, the passphrase, reading the file) is
checked before the data directory is opened. Both run through the CMP dispatcher, so each leaves
its audit entry like any other entry point. In process, an export streams straight into a
temporary file beside the target (the dispatcher passes the file and a progress callback through
to the engine); through `--server-url` the archive travels as bytes (see docs/archives.md for the
size limits). Either way the file appears whole or not at all.
"""

from __future__ import annotations

import argparse
import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .api import Memory, MemoryAPI
from .cli_encryption import prompt_passphrase
from .cmp import build
from .storage.archive import is_encrypted
from .storage.archive_paths import export_target, write_new

PASSPHRASE_ENV = "CEREMEMORY_ARCHIVE_PASSPHRASE"
WRITE_CHUNK = 1024 * 1024


def passphrase(*, confirm: bool) -> str:
    """The archive passphrase: the environment variable, else a prompt on the terminal."""
    return prompt_passphrase(PASSPHRASE_ENV, "archive passphrase", confirm=confirm)


def prepare(args: argparse.Namespace) -> tuple[str, dict[str, Any], Path]:
    """(operation, request, file) for an export or import, checked before opening anything."""
    if args.command == "export":
        path = export_target(args.path)
        stores = [s.strip() for s in args.stores.split(",") if s.strip()] if args.stores else None
        request: dict[str, Any] = {"stores": stores, "include_raw_journal": args.raw, "encrypt": args.encrypt}
        if args.encrypt:
            request["encryption_key"] = passphrase(confirm=True)
        return "lifecycle.export", build.drop_none(request), path
    path = Path(args.path).expanduser()
    data = path.read_bytes()
    request = {"archive_id": path.name, "strategy": args.strategy, "conflict_resolution": args.conflict,
               "archive_data": data}
    if is_encrypted(data):
        request["decryption_key"] = passphrase(confirm=False)
    return "lifecycle.import", request, path


@contextmanager
def progress_bar(out: Any, label: str) -> Iterator[Callable[[int, int | None], None]]:
    """A progress bar on stderr fed with (done, total) reports."""
    from rich.progress import Progress

    with Progress(console=out.console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total)


def run(mem: MemoryAPI, prepared: tuple[str, dict[str, Any], Path], out: Any) -> dict[str, Any]:
    """Export to or import from the file, through the dispatcher like every entry point (so the
    audit log has the operation): in process the archive streams straight into the file."""
    op, request, path = prepared
    if op == "lifecycle.export":
        return _export(mem, request, path, out)
    with progress_bar(out, f"importing {path.name}") as progress:
        if isinstance(mem, Memory):
            result = mem.dispatcher.call(op, request, progress=progress).model_dump(mode="json")
        else:
            result = mem.dispatch(op, request)
    return {"path": str(path), **result}


def _export(mem: MemoryAPI, request: dict[str, Any], path: Path, out: Any) -> dict[str, Any]:
    with progress_bar(out, f"exporting to {path.name}") as progress, write_new(path) as sink:
        if isinstance(mem, Memory):  # in process: stream into the file, no size limit
            response = mem.dispatcher.call("lifecycle.export", request, sink=sink, progress=progress)
            result = response.model_dump(mode="json", exclude={"archive_data"})
        else:
            result = mem.dispatch("lifecycle.export", request)
            data = base64.b64decode(result.pop("archive_data") or "")
            for start in range(0, len(data), WRITE_CHUNK):
                sink.write(data[start:start + WRITE_CHUNK])
                progress(min(start + WRITE_CHUNK, len(data)), len(data))
    return {"path": str(path), **{k: v for k, v in result.items() if k != "archive_data"}}
