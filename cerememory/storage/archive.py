"""lifecycle.export and lifecycle.import: CMA archives of the stores and the raw journal.

Export streams one consistent snapshot (writers wait, readers do not) through the format
writer and, when asked, the sealing writer. Import reads the whole archive first — decrypts,
authenticates, checks the checksum, the counts and every record — and only then writes, in
one DuckDB transaction, before mirroring the result into the RAM indexes (heads, vectors,
graph, working memory) and staging the full-text changes. A bad archive imports nothing, and
`replace` is all or nothing. The format is in `archive_format`, the cryptography in
`archive_crypto`, the file rules in `archive_paths`, what an import may cost in
`archive_settings` and `archive_gate`; docs/archives.md is the user's view.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ..cmp import messages as m
from ..cmp.context import note_records
from ..cmp.errors import CMPError, ErrorCode
from ..index.graph import Edge
from ..model import MemoryRecord, RawJournalRecord, StoreType, new_id
from ..stores.records import Head, dt, ts
from ..version import __version__
from . import archive_crypto as crypto
from . import archive_format as fmt
from .archive_gate import IMPORTS
from .archive_settings import ArchiveSettings
from .crypto import VECTOR
from .db import Database

if TYPE_CHECKING:
    from ..engine import Engine

# The largest archive held in memory: an import's archive_data, an export returned as bytes.
# It matches the gRPC import cap; over HTTP the 64 MiB JSON body limit allows ~48 MiB of
# base64-encoded archive. The CLI's embedded export streams to disk and has no limit.
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
FORMATS = ("cma", "jsonl")
Progress = Callable[[int, int | None], None]


def _bad(message: str, field_name: str, hint: str | None = None) -> CMPError:
    return CMPError(ErrorCode.VALIDATION_ERROR, message, hint=hint, details={"field": field_name})


def _too_large(what: str) -> CMPError:
    return CMPError(ErrorCode.CONTENT_TOO_LARGE, f"{what} exceeds {MAX_ARCHIVE_BYTES} bytes",
                    hint="export fewer stores at a time, or use `cerememory export` on the server's "
                         "machine, which streams to disk",
                    details={"field": "archive_data", "limit": MAX_ARCHIVE_BYTES})


# ================================================================ export


class _FileSink:
    """Counts and hashes the bytes that reach the output, and enforces a size cap."""

    def __init__(self, out: BinaryIO, limit: int | None) -> None:
        self.out, self.limit = out, limit
        self.size = 0
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.limit is not None and self.size > self.limit:
            raise _too_large("the archive")
        self.sha.update(data)
        return self.out.write(data) or len(data)


def _check_export(req: m.ExportRequest) -> list[StoreType]:
    if req.format.lower() not in FORMATS:
        raise _bad(f"lifecycle.export: format: {req.format!r} is not supported", "format",
                   hint="use cma (jsonl is accepted as an alias)")
    if req.encrypt and not req.encryption_key:
        raise _bad("lifecycle.export: encryption_key: required when encrypt is true", "encryption_key",
                   hint="give a passphrase (CLI: CEREMEMORY_ARCHIVE_PASSPHRASE or the prompt)")
    if req.encryption_key and not req.encrypt:
        raise _bad("lifecycle.export: encryption_key given but encrypt is false", "encrypt",
                   hint="set encrypt: true to encrypt the archive, or drop the key")
    return list(dict.fromkeys(req.stores)) if req.stores else list(StoreType)


def _durable_lines(engine: Engine, stores: Sequence[StoreType],
                   skip: set[uuid.UUID]) -> Iterable[fmt.ArchivedRecord]:
    """Curated records on disk with their stored vectors, in id order, in one scan; `skip` are
    the undecodable ones."""
    cursor = engine.db.fresh_reader()
    try:
        cursor.execute("SELECT r.id, r.body, v.model, v.vec FROM records r "
                       "LEFT JOIN vectors v ON v.record_id = r.id "
                       "WHERE r.store IN (SELECT unnest(?)) ORDER BY r.id", [[s.value for s in stores]])
        while rows := cursor.fetchmany(2000):
            for record_id, body, model, vec in rows:
                head = engine.records.heads.get(record_id)
                if head is None or record_id in skip:
                    continue
                body = engine.sealer.open(record_id, body)
                record = engine.records.assemble(record_id, body, engine._associations(record_id))
                vector = (np.frombuffer(engine.sealer.open(record_id, vec, VECTOR), dtype=np.float32)
                          if vec is not None else None)
                yield fmt.ArchivedRecord(record, head.fidelity_base, vector, model)
    finally:
        cursor.close()


def _working_lines(engine: Engine) -> Iterable[fmt.ArchivedRecord]:
    """Working memory lives in RAM; its vectors are derived again on import."""
    for record in engine.fetch([r.id for r in engine.working.records()]).values():
        stored = engine.working.get(record.id) or record
        record = record.model_copy(update={"fidelity": stored.fidelity})
        yield fmt.ArchivedRecord(record, stored.fidelity.score)


def export_archive(engine: Engine, req: m.ExportRequest, sink: BinaryIO | None = None, *,
                   progress: Progress | None = None) -> m.ExportResponse:
    """Write an archive to `sink`, or (without one) return it as `archive_data`."""
    stores = _check_export(req)
    buffer = io.BytesIO() if sink is None else None
    out = _FileSink(sink if sink is not None else buffer, MAX_ARCHIVE_BYTES if sink is None else None)
    archive_id = str(new_id())
    encryption, key = (crypto.new_encryption(req.encryption_key) if req.encrypt and req.encryption_key
                       else (None, b""))
    with engine._write:  # one consistent snapshot: writers wait, readers go on
        durable = [s for s in stores if s is not StoreType.WORKING]
        # the header announces the counts, so records no read can use are found first and left out
        skipped = engine.records.undecodable_among(durable) if durable else set()
        raw_skipped = engine.journal.undecodable_ids() if req.include_raw_journal else []
        by_store = {s.value: 0 for s in stores}
        for record_id, head in engine.records.heads.items():
            if head.store.value in by_store and record_id not in skipped:
                by_store[head.store.value] += 1
        working = StoreType.WORKING in stores
        if working:
            by_store[StoreType.WORKING.value] = len(engine.working)
        raw_total = engine.journal.counts()[0] - len(raw_skipped) if req.include_raw_journal else 0
        total = sum(by_store.values()) + raw_total
        counts = {"records": sum(by_store.values()), "by_store": by_store, "raw_journal": raw_total}

        payload: Any = out
        if encryption is not None:
            preamble = fmt.preamble(archive_id, encryption)
            out.write(preamble)
            payload = crypto.SealingWriter(out, key, preamble)
        writer = fmt.HashingWriter(payload)
        writer.write(fmt.dumps(fmt.header(
            archive_id=archive_id, created_at=dt(engine.clock()).isoformat().replace("+00:00", "Z"),
            generator=f"cerememory {__version__}", stores=stores,
            include_raw_journal=req.include_raw_journal, counts=counts, encryption=encryption)), counted=False)
        done = associations = vectors = 0
        records: Iterable[fmt.ArchivedRecord] = _durable_lines(engine, durable, skipped) if durable else ()
        for item in _chain(records, _working_lines(engine) if working else ()):
            writer.write(fmt.record_line(item))
            associations += len(item.record.associations)
            vectors += item.vector is not None
            done += 1
            if progress and done % 1000 == 0:
                progress(done, total)
        if done != counts["records"]:
            raise CMPError(ErrorCode.EXPORT_FAILED, "the stores changed during the export",
                           hint="export again")
        if req.include_raw_journal:
            for raw in engine.journal.iter_all():
                writer.write(fmt.raw_line(raw))
                done += 1
                if progress and done % 1000 == 0:
                    progress(done, total)
        writer.finish()
    if encryption is not None:
        payload.close()
    if progress:
        progress(done, total)
    return m.ExportResponse(archive_id=archive_id, size_bytes=out.size, record_count=counts["records"],
                            raw_record_count=raw_total, checksum=out.sha.hexdigest(),
                            archive_data=buffer.getvalue() if buffer is not None else None,
                            undecodable_ids=sorted(skipped, key=str) + raw_skipped)


def _chain(*parts: Iterable[fmt.ArchivedRecord]) -> Iterable[fmt.ArchivedRecord]:
    for part in parts:
        yield from part


# ================================================================ import


def is_encrypted(data: bytes) -> bool:
    """Whether an archive needs a passphrase (reads only its first line)."""
    head, _ = fmt.first_line(data)
    return head.get("kind") == "encrypted"


def read_archive(data: bytes, passphrase: str | None, *, progress: Progress | None = None,
                 limits: crypto.KdfLimits = crypto.DEFAULT_LIMITS) -> fmt.ParsedArchive:
    """Decrypt (when sealed), authenticate and parse a whole archive; raises on any problem,
    and on a key-derivation cost above `limits` before deriving anything."""
    if len(data) > MAX_ARCHIVE_BYTES:
        raise _too_large("archive_data")
    head, start = fmt.first_line(data)
    if head.get("kind") != "encrypted":
        return fmt.parse(data, progress=progress)
    if not passphrase:
        raise _bad("lifecycle.import: decryption_key: this archive is encrypted", "decryption_key",
                   hint="give its passphrase (CLI: CEREMEMORY_ARCHIVE_PASSPHRASE or the prompt)")
    salt, params, chunk, check = crypto.read_params(head.get("encryption") or {}, limits)
    key = crypto.derive_key(passphrase, salt, params)
    if not hmac.compare_digest(crypto.key_check(key), check):
        raise fmt.damaged("wrong passphrase for this encrypted archive", "wrong_key",
                          hint="check the passphrase the archive was exported with")
    plain = crypto.open_sealed(memoryview(data)[start:], key, bytes(memoryview(data)[:start]), chunk)
    archive = fmt.parse(plain, progress=progress)
    if archive.header.get("archive_id") != head.get("archive_id"):
        raise fmt.damaged("the encrypted archive's preamble and content do not belong together", "tampered")
    return archive


@dataclass
class _Plan:
    """What an import will change, decided before the transaction starts."""

    removed: set[uuid.UUID] = field(default_factory=set)  # replace: records that go away
    displaced: set[uuid.UUID] = field(default_factory=set)  # existing records overwritten
    records: list[fmt.ArchivedRecord] = field(default_factory=list)
    raw_removed: list[uuid.UUID] = field(default_factory=list)
    raw: list[RawJournalRecord] = field(default_factory=list)
    skipped: int = 0
    raw_skipped: int = 0


def _wins(conflict: m.ConflictResolution, imported: float, existing: float) -> bool:
    if conflict is m.ConflictResolution.KEEP_IMPORTED:
        return True
    if conflict is m.ConflictResolution.KEEP_EXISTING:
        return False
    return imported > existing  # keep_newer: a tie keeps what is there


def _existing_updated(engine: Engine) -> dict[uuid.UUID, tuple[StoreType, float]]:
    out = {i: (h.store, h.updated_at) for i, h in engine.records.items()}
    out.update({r.id: (r.store, ts(r.updated_at)) for r in engine.working.records()})
    return out


def _raw_updated(engine: Engine, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, float]:
    if not ids:
        return {}
    rows = engine.db.query("SELECT id, updated_at FROM raw_journal WHERE id IN (SELECT unnest(?::UUID[]))",
                           [[str(i) for i in ids]])
    return dict(rows)


def _plan(engine: Engine, archive: fmt.ParsedArchive, req: m.ImportRequest) -> _Plan:
    plan = _Plan()
    existing = _existing_updated(engine)
    replace = req.strategy is m.ImportStrategy.REPLACE
    if replace:
        covered = set(archive.stores)
        plan.removed = {i for i, (store, _) in existing.items() if store in covered}
    for item in archive.records:
        found = existing.get(item.record.id)
        if found is None or item.record.id in plan.removed:
            plan.records.append(item)
        elif _wins(req.conflict_resolution, ts(item.record.updated_at), found[1]):
            plan.records.append(item)
            plan.displaced.add(item.record.id)
        else:
            plan.skipped += 1
    if replace and archive.include_raw_journal:
        plan.raw_removed = [row[0] for row in engine.db.query("SELECT id FROM raw_journal")]
    gone = set(plan.raw_removed)
    raw_existing = _raw_updated(engine, [r.id for r in archive.raw if r.id not in gone])
    for raw in archive.raw:
        old = raw_existing.get(raw.id)
        if old is None:
            plan.raw.append(raw)
        elif _wins(req.conflict_resolution, ts(raw.updated_at), old):
            plan.raw.append(raw)
            plan.raw_removed.append(raw.id)
        else:
            plan.raw_skipped += 1
    return plan


def _edges(plan: _Plan, alive: set[uuid.UUID]) -> list[Edge]:
    """The archived associations of the records taken, where their target exists afterwards."""
    return [Edge(item.record.id, a.target_id, a.association_type.value, a.weight, ts(a.created_at),
                 ts(a.last_co_activation) if a.last_co_activation else None)
            for item in plan.records for a in item.record.associations if a.target_id in alive]


def _vectors(engine: Engine, records: Sequence[fmt.ArchivedRecord]) -> dict[uuid.UUID, tuple[np.ndarray, str]]:
    """Archived vectors where this store can use them; otherwise derived as on encode (caller
    embeddings, or this store's embedder), so a vector never mixes two models' spaces."""
    from ..engine import CALLER_MODEL

    name = engine.embedder.name if engine.embedder is not None else None
    out: dict[uuid.UUID, tuple[np.ndarray, str]] = {}
    derive: list[MemoryRecord] = []
    for item in records:
        if item.vector is not None and item.model is not None and (
                item.model in (CALLER_MODEL, name) or name is None):
            out[item.record.id] = (item.vector, item.model)
        else:
            derive.append(item.record)
    if derive:
        out.update(engine.vectors_for(derive))
    return out


def _head(item: fmt.ArchivedRecord) -> Head:
    head = Head.of(item.record)
    head.fidelity_base = item.fidelity_base
    return head


def import_archive(engine: Engine, req: m.ImportRequest, *, progress: Progress | None = None) -> m.ImportResponse:
    """Validate the whole archive, then apply it in one transaction; see the module docstring.
    One import runs at a time (`archive_gate`), within the data directory's `ArchiveSettings`."""
    settings: ArchiveSettings = engine.options.archive
    with IMPORTS.slot(settings.import_wait_seconds):
        archive = read_archive(req.archive_data, req.decryption_key, progress=progress,
                               limits=settings.kdf_limits)
        return _apply(engine, archive, req, progress)


def _apply(engine: Engine, archive: fmt.ParsedArchive, req: m.ImportRequest,
           progress: Progress | None) -> m.ImportResponse:
    from ..engine import raw_text_doc, record_text_doc

    with engine._write:
        plan = _plan(engine, archive, req)
        existing = set(engine.records.heads) | {r.id for r in engine.working.records()}
        taken = {item.record.id for item in plan.records}
        alive = (existing - plan.removed) | taken
        gone = plan.removed - taken  # records that no longer exist at all
        edges = _edges(plan, alive)
        durable = [item for item in plan.records if item.record.store is not StoreType.WORKING]
        working = [item.record.model_copy(update={"associations": []})  # the graph holds them
                   for item in plan.records if item.record.store is StoreType.WORKING]
        vectors = _vectors(engine, plan.records)
        durable_ids = {item.record.id for item in durable}
        out_of_place = plan.removed | plan.displaced  # rows to clear before writing the archive's
        with engine.db.transaction() as tx:
            cleared = [i for i in out_of_place if i in engine.records.heads]
            engine.records.delete(tx, cleared)
            Database.delete_ids(tx, "vectors", "record_id", cleared)
            Database.delete_ids(tx, "associations", "source_id", list(out_of_place))
            Database.delete_ids(tx, "associations", "target_id", list(gone))
            Database.delete_ids(tx, "consolidations", "episodic_id", list(gone))
            written = engine.records.insert(tx, [i.record for i in durable], replace=True,
                                            heads=[_head(i) for i in durable])
            engine._insert_edges(tx, [e for e in edges if e.source in durable_ids])  # as encode does
            engine._insert_vectors(tx, {i: v for i, v in vectors.items() if i in durable_ids})
            Database.delete_ids(tx, "raw_journal", "id", plan.raw_removed)
            if plan.raw:
                engine.journal.insert(tx, plan.raw)
            engine._flush_in(tx)
            seq = engine.db.bump(tx, "records_seq")
            journal_seq = engine.db.bump(tx, "journal_seq") if plan.raw or plan.raw_removed else None
            engine.intend_audit("import", [*gone, *plan.raw_removed, *(item.record.id for item in plan.records),
                                      *(r.id for r in plan.raw)])
        note_records([*gone, *plan.raw_removed, *(item.record.id for item in plan.records),
                      *(r.id for r in plan.raw)])
        # committed: erase the keys of what is gone for good, mirror into RAM
        kept_raw = {r.id for r in plan.raw}
        engine.sealer.destroy([*gone, *(i for i in plan.raw_removed if i not in kept_raw)])
        for record_id in gone:
            engine.consolidated.pop(record_id, None)
        engine.records.forget_heads(out_of_place)
        engine.working.remove(list(out_of_place))
        engine.graph.remove_nodes(gone)
        engine.graph.remove_out_edges(out_of_place)
        engine.vectors.remove(list(out_of_place))
        engine.records.commit_heads(written)
        engine.text.stage(seq, delete=[str(i) for i in out_of_place])
        for record in working:
            engine._evict(engine.working.put(record), seq)
        engine.graph.add(edges)
        engine._add_vectors_ram(vectors, {item.record.id: item.record.store for item in plan.records})
        engine.text.stage(seq, add=[record_text_doc(item.record) for item in plan.records])
        if journal_seq is not None:
            engine.raw_text.stage(journal_seq, delete=[str(i) for i in plan.raw_removed],
                                  add=[raw_text_doc(r) for r in plan.raw])
    engine.text.mark_pending()
    engine.raw_text.mark_pending()
    if progress:
        total = len(archive.records) + len(archive.raw)
        progress(total, total)
    return m.ImportResponse(records_imported=len(plan.records), raw_records_imported=len(plan.raw),
                            records_skipped=plan.skipped + plan.raw_skipped)
