"""`cerememory migrate --to URL` / `--from URL`: move a memory between the embedded backend (the
data directory) and PostgreSQL.

The copy travels as a CMA archive, the format `export` and `import` already validate: every
record with its decay state, associations, vectors and the raw journal. The import is one
transaction, so the target holds the whole memory or nothing; an interrupted move is simply run
again. The target must be empty (a move never merges into another memory), and the counts of
both sides are compared at the end.

An encrypted memory stays encrypted: before the target is opened it receives the source's
wrapped master key (the document `init --encrypt` wrote), so the same passphrase opens both and
every record is sealed again under a fresh data key of the target's. The archive between the two
exists only in this process's memory. A target encrypted beforehand (`init --encrypt`) is used as
it is, so `migrate` into one also encrypts a plaintext memory on the way.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cmp.errors import CMPError, ErrorCode

if TYPE_CHECKING:
    from .api import Memory


def add_parser(sub: Any, common: Any) -> None:
    p = sub.add_parser("migrate", help="Copy a memory between the data directory and PostgreSQL.",
                       description="Copy the memory in the data directory into PostgreSQL (--to URL), or a "
                                   "PostgreSQL memory into the data directory (--from URL). All or nothing; "
                                   "the target must be empty; counts are checked at the end. An encrypted "
                                   "memory stays encrypted: the target opens with the same passphrase.")
    common(p, remote=False)
    way = p.add_mutually_exclusive_group(required=True)
    way.add_argument("--to", metavar="URL", help="PostgreSQL URL to copy the data directory into")
    way.add_argument("--from", dest="source", metavar="URL", help="PostgreSQL URL to copy into the data directory")
    p.add_argument("--namespace", help="PostgreSQL schema of the memory (default: storage.namespace)")


def _open(config: Any, backend: str, url: str | None, namespace: str, data_dir: Path) -> Memory:
    from .api import open_config
    from .config import load_config

    flags = {"data_dir": str(data_dir), "storage.backend": backend, "storage.postgres_url": url,
             "storage.namespace": namespace}
    return open_config(load_config(config.path, {k: v for k, v in flags.items() if v is not None}))


def _not_empty() -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, "the target memory is not empty; nothing was copied",
                    hint="migrate into a new namespace (--namespace) or an empty data directory")


def _carry_encryption(source: tuple, target: tuple) -> None:
    """Give an empty, unencrypted target the source's wrapped master key (see the module's doc).
    Run after the source opened, so its passphrase is known to be right."""
    from .storage.backends import StorageSettings, open_key_store
    from .storage.lock import DataDirLock

    def keys(side: tuple) -> Any:
        backend, url, namespace, data_dir = side
        return open_key_store(StorageSettings(backend=backend, postgres_url=url, namespace=namespace), data_dir)

    with keys(source) as store:
        document = store.document()
    if document is None:
        return
    backend, _, _, data_dir = target
    if backend == "duckdb":
        data_dir.mkdir(parents=True, exist_ok=True)
    with DataDirLock(data_dir) if backend == "duckdb" else contextlib.nullcontext(), keys(target) as store:
        if store.document() is None:
            if not store.blank():
                raise _not_empty()
            store.create(document)


def _counts(mem: Memory) -> tuple[int, int]:
    stats = mem.stats()
    return stats.total_records, stats.raw_journal_records


def run_migrate(args: argparse.Namespace, config: Any, out: Any) -> int:
    import io
    import shutil
    import tempfile

    from .cli_archive import progress_bar

    namespace = args.namespace or config["storage.namespace"]
    url = args.to or args.source
    cache = Path(tempfile.mkdtemp(prefix="cerememory-migrate-"))  # the PostgreSQL side's derived indexes
    embedded = ("duckdb", None, namespace, config.data_dir)
    shared = ("postgres", url, namespace, cache)
    source_side, target_side = (embedded, shared) if args.to else (shared, embedded)
    try:
        with contextlib.ExitStack() as stack:
            source = stack.enter_context(_open(config, *source_side))
            _carry_encryption(source_side, target_side)
            target = stack.enter_context(_open(config, *target_side))
            if _counts(target) != (0, 0):
                raise _not_empty()
            archive = io.BytesIO()
            with progress_bar(out, "reading the source") as progress:
                exported = source.dispatcher.call("lifecycle.export", {"include_raw_journal": True},
                                                  sink=archive, progress=progress)
            with progress_bar(out, "writing the target") as progress:
                imported = target.dispatcher.call("lifecycle.import", {
                    "archive_id": "migrate", "strategy": "replace", "archive_data": archive.getvalue()},
                    progress=progress)
            expected, found = _counts(source), _counts(target)
            if expected != found:
                raise CMPError(ErrorCode.INTERNAL_ERROR,
                               f"counts differ after the copy: source {expected}, target {found}",
                               hint="the source changed during the copy, or the import skipped records; "
                                    "the server log has details")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    result = {"direction": "to postgres" if args.to else "from postgres", "namespace": namespace,
              "records": found[0], "raw_records": found[1], "archive_bytes": exported.model_dump()["size_bytes"],
              "records_imported": imported.model_dump()["records_imported"]}
    if out.as_json:
        out.json(result)
    else:
        out.console().print(f"copied {found[0]} records and {found[1]} journal records "
                            f"{result['direction']} (namespace {namespace}); counts match")
    return 0


