"""lifecycle.export and lifecycle.import over the engine's parts.

Export streams one consistent snapshot (writers wait, readers do not) through the format
writer and, when asked, the sealing writer. Import reads the whole archive first (decrypts,
authenticates, checks the checksum, the counts and every record; `storage.archive`) and only
then hands one `Replacement` to the writer: a bad archive imports nothing, and `replace` is all
or nothing.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from ..cmp import messages as m
from ..cmp.errors import CMPError, ErrorCode
from ..index.graph import Edge
from ..model import MemoryRecord, RawJournalRecord, StoreType, from_ts, new_id, to_ts
from ..progress import ProgressFn
from ..storage import archive_crypto as crypto
from ..storage import archive_format as fmt
from ..storage.archive import MAX_ARCHIVE_BYTES, FileSink, check_export, read_archive
from ..storage.archive_gate import IMPORTS
from ..storage.crypto import VECTOR
from ..stores.records import Head
from ..version import __version__
from .core import CALLER_MODEL, EngineCore, Vectors
from .writer import Replacement, Writer


class Archives:
    def __init__(self, core: EngineCore, writer: Writer) -> None:
        self.core = core
        self.writer = writer

    def export(self, req: m.ExportRequest, sink: BinaryIO | None = None, *,
               progress: ProgressFn | None = None) -> m.ExportResponse:
        """Write an archive to `sink`, or (without one) return it as `archive_data`."""
        return export_archive(self.core, self.writer, req, sink, progress=progress)

    def import_(self, req: m.ImportRequest, *, progress: ProgressFn | None = None) -> m.ImportResponse:
        """Validate the whole archive, then apply it in one transaction. One import runs at a
        time (`archive_gate`), within the data directory's `ArchiveSettings`."""
        settings = self.core.options.archive
        with IMPORTS.slot(settings.import_wait_seconds):
            archive = read_archive(req.archive_data, req.decryption_key, progress=progress,
                                   limits=settings.kdf_limits)
            return _apply(self.core, self.writer, archive, req, progress)


# ================================================================ export


def _durable_lines(core: EngineCore, stores: Sequence[StoreType],
                   skip: set[uuid.UUID]) -> Iterable[fmt.ArchivedRecord]:
    """Curated records on disk with their stored vectors, in id order, in one scan; `skip` are
    the undecodable ones."""
    for record_id, sealed, model, vec in core.records.scan_with_vectors(stores):
        head = core.records.heads.get(record_id)
        if head is None or record_id in skip:
            continue
        body = core.sealer.open(record_id, sealed)
        record = core.records.assemble(record_id, body, core.associations(record_id))
        vector = (np.frombuffer(core.sealer.open(record_id, vec, VECTOR), dtype=np.float32)
                  if vec is not None else None)
        yield fmt.ArchivedRecord(record, head.fidelity_base, vector, model)


def _working_lines(core: EngineCore) -> Iterable[fmt.ArchivedRecord]:
    """Working memory lives in RAM; its vectors are derived again on import."""
    for record in core.fetch([r.id for r in core.working.records()]).values():
        stored = core.working.get(record.id) or record
        record = record.model_copy(update={"fidelity": stored.fidelity})
        yield fmt.ArchivedRecord(record, stored.fidelity.score)


def export_archive(core: EngineCore, writer: Writer, req: m.ExportRequest, sink: BinaryIO | None = None, *,
                   progress: ProgressFn | None = None) -> m.ExportResponse:
    stores = check_export(req)
    buffer = io.BytesIO()
    out = FileSink(sink if sink is not None else buffer, MAX_ARCHIVE_BYTES if sink is None else None)
    archive_id = str(new_id())
    encryption, key = (crypto.new_encryption(req.encryption_key) if req.encrypt and req.encryption_key
                       else (None, b""))
    with writer.lock:  # one consistent snapshot: writers wait, readers go on
        durable = [s for s in stores if s is not StoreType.WORKING]
        # the header announces the counts, so records no read can use are found first and left out
        skipped = core.records.undecodable_among(durable) if durable else set()
        raw_skipped = core.journal.undecodable_ids() if req.include_raw_journal else []
        by_store = {s.value: 0 for s in stores}
        for record_id, head in core.records.heads.items():
            if head.store.value in by_store and record_id not in skipped:
                by_store[head.store.value] += 1
        working = StoreType.WORKING in stores
        if working:
            by_store[StoreType.WORKING.value] = len(core.working)
        raw_total = core.journal.counts()[0] - len(raw_skipped) if req.include_raw_journal else 0
        total = sum(by_store.values()) + raw_total
        counts = {"records": sum(by_store.values()), "by_store": by_store, "raw_journal": raw_total}

        payload: fmt.Sink = out
        if encryption is not None:
            preamble = fmt.preamble(archive_id, encryption)
            out.write(preamble)
            payload = sealing = crypto.SealingWriter(out, key, preamble)
        lines = fmt.HashingWriter(payload)
        lines.write(fmt.dumps(fmt.header(
            archive_id=archive_id, created_at=from_ts(core.clock()).isoformat().replace("+00:00", "Z"),
            generator=f"cerememory {__version__}", stores=stores,
            include_raw_journal=req.include_raw_journal, counts=counts, encryption=encryption)), counted=False)
        done = associations = vectors = 0
        records: Iterable[fmt.ArchivedRecord] = _durable_lines(core, durable, skipped) if durable else ()
        for item in _chain(records, _working_lines(core) if working else ()):
            lines.write(fmt.record_line(item))
            associations += len(item.record.associations)
            vectors += item.vector is not None
            done += 1
            if progress and done % 1000 == 0:
                progress(done, total)
        if done != counts["records"]:
            raise CMPError(ErrorCode.EXPORT_FAILED, "the stores changed during the export",
                           hint="export again")
        if req.include_raw_journal:
            for raw in core.journal.iter_all():
                lines.write(fmt.raw_line(raw))
                done += 1
                if progress and done % 1000 == 0:
                    progress(done, total)
        lines.finish()
    if encryption is not None:
        sealing.close()
    if progress:
        progress(done, total)
    return m.ExportResponse(archive_id=archive_id, size_bytes=out.size, record_count=counts["records"],
                            raw_record_count=raw_total, checksum=out.sha.hexdigest(),
                            archive_data=buffer.getvalue() if sink is None else None,
                            undecodable_ids=sorted(skipped, key=str) + raw_skipped)


def _chain(*parts: Iterable[fmt.ArchivedRecord]) -> Iterable[fmt.ArchivedRecord]:
    for part in parts:
        yield from part



# ================================================================ import


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


def _existing_updated(core: EngineCore) -> dict[uuid.UUID, tuple[StoreType, float]]:
    out = {i: (h.store, h.updated_at) for i, h in core.records.items()}
    out.update({r.id: (r.store, to_ts(r.updated_at)) for r in core.working.records()})
    return out


def _raw_updated(core: EngineCore, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, float]:
    if not ids:
        return {}
    return core.journal.updated_at(ids)


def _plan(core: EngineCore, archive: fmt.ParsedArchive, req: m.ImportRequest) -> _Plan:
    plan = _Plan()
    existing = _existing_updated(core)
    replace = req.strategy is m.ImportStrategy.REPLACE
    if replace:
        covered = set(archive.stores)
        plan.removed = {i for i, (store, _) in existing.items() if store in covered}
    for item in archive.records:
        found = existing.get(item.record.id)
        if found is None or item.record.id in plan.removed:
            plan.records.append(item)
        elif _wins(req.conflict_resolution, to_ts(item.record.updated_at), found[1]):
            plan.records.append(item)
            plan.displaced.add(item.record.id)
        else:
            plan.skipped += 1
    if replace and archive.include_raw_journal:
        plan.raw_removed = core.journal.ids()
    gone = set(plan.raw_removed)
    raw_existing = _raw_updated(core, [r.id for r in archive.raw if r.id not in gone])
    for raw in archive.raw:
        old = raw_existing.get(raw.id)
        if old is None:
            plan.raw.append(raw)
        elif _wins(req.conflict_resolution, to_ts(raw.updated_at), old):
            plan.raw.append(raw)
            plan.raw_removed.append(raw.id)
        else:
            plan.raw_skipped += 1
    return plan


def _edges(plan: _Plan, alive: set[uuid.UUID]) -> list[Edge]:
    """The archived associations of the records taken, where their target exists afterwards."""
    return [Edge(item.record.id, a.target_id, a.association_type.value, a.weight, to_ts(a.created_at),
                 to_ts(a.last_co_activation) if a.last_co_activation else None)
            for item in plan.records for a in item.record.associations if a.target_id in alive]


def _vectors(core: EngineCore, records: Sequence[fmt.ArchivedRecord]) -> Vectors:
    """Archived vectors where this store can use them; otherwise derived as on encode (caller
    embeddings, or this store's embedder), so a vector never mixes two models' spaces."""
    name = core.embedder.name if core.embedder is not None else None
    out: Vectors = {}
    derive: list[MemoryRecord] = []
    for item in records:
        if item.vector is not None and item.model is not None and (
                item.model in (CALLER_MODEL, name) or name is None):
            out[item.record.id] = (item.vector, item.model)
        else:
            derive.append(item.record)
    if derive:
        out.update(core.vectors_for(derive))
    return out


def _head(item: fmt.ArchivedRecord) -> Head:
    head = Head.of(item.record)
    head.fidelity_base = item.fidelity_base
    return head


def _apply(core: EngineCore, writer: Writer, archive: fmt.ParsedArchive, req: m.ImportRequest,
           progress: ProgressFn | None) -> m.ImportResponse:
    with writer.lock:
        plan = _plan(core, archive, req)
        existing = set(core.records.heads) | {r.id for r in core.working.records()}
        taken = {item.record.id for item in plan.records}
        alive = (existing - plan.removed) | taken
        writer.replace(Replacement(
            cleared=plan.removed | plan.displaced, gone=plan.removed - taken,
            records=[item.record for item in plan.records],
            heads={item.record.id: _head(item) for item in plan.records if item.record.store is not StoreType.WORKING},
            edges=_edges(plan, alive), vectors=_vectors(core, plan.records),
            raw_removed=plan.raw_removed, raw=plan.raw))
    if progress:
        total = len(archive.records) + len(archive.raw)
        progress(total, total)
    return m.ImportResponse(records_imported=len(plan.records), raw_records_imported=len(plan.raw),
                            records_skipped=plan.skipped + plan.raw_skipped)
