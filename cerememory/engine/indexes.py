"""The full-text indexes are derived from the database: rebuilt when missing, damaged or behind
(the stamp each index keeps is the sequence number of the last change it holds). Over a shared
database, an index a clean close left current to a change-log position catches up instead: the
records changed since are indexed again, and only if the log no longer reaches back that far,
or the counts then disagree, is the index rebuilt."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from ..cmp import messages as m
from ..index.fulltext import TextDoc, TextIndex
from ..model import RawJournalRecord, StoreType
from ..progress import ProgressFn
from ..stores.undecodable import UndecodableRecord
from .core import EngineCore
from .docs import raw_text_doc, record_text_doc
from .writer import JOURNAL_SEQ, RECORDS_SEQ, Writer

LOG_BATCH = 10_000  # change-log entries read at a time
Restage = Callable[[EngineCore, list[uuid.UUID]], None]  # stages the current text of some records


def stage_records(core: EngineCore, ids: list[uuid.UUID], seq: int | None = None) -> None:
    """Stage the current text of curated records `ids`: the ones that still exist again, the
    others deleted (another server changed or forgot them). `seq` is the database's records
    sequence number when the caller read it already."""
    if seq is None:
        seq = sequence(core, RECORDS_SEQ)
    records = core.fetch([i for i in ids if i in core.records.heads])
    core.text.stage(seq, delete=[str(i) for i in ids],
                    add=[record_text_doc(r) for r in records.values() if r.store is not StoreType.WORKING])
    core.text.mark_pending()


def stage_raw(core: EngineCore, ids: list[uuid.UUID], read: tuple[int, list[RawJournalRecord]] | None = None) -> None:
    """Stage the current text of journal records `ids` (deleted when they are gone); `read` is
    the journal sequence number and the records when the caller read them already."""
    seq, records = read if read is not None else read_raw(core, ids)
    core.raw_text.stage(seq, delete=[str(i) for i in ids], add=[raw_text_doc(r) for r in records])
    core.raw_text.mark_pending()


def read_raw(core: EngineCore, ids: list[uuid.UUID]) -> tuple[int, list[RawJournalRecord]]:
    """The journal's sequence number and the journal records `ids` still stored, as `stage_raw` takes them."""
    seq = sequence(core, JOURNAL_SEQ)
    core.sealer.prefetch(ids)
    return seq, core.journal.get(ids)


def sequence(core: EngineCore, key: str) -> int:
    """The database's sequence number `key` (RECORDS_SEQ, JOURNAL_SEQ): a text index's stamp."""
    return int(core.read.state.get(key, "0") or 0)


class TextIndexes:
    def __init__(self, core: EngineCore, writer: Writer) -> None:
        self.core = core
        self.writer = writer
        self.repaired: list[str] = []  # the indexes rebuilt when the data directory was opened
        self.caught_up: list[str] = []  # the indexes brought current from the change log instead

    def repair(self, progress: ProgressFn | None) -> None:
        """Rebuild a full-text index that is missing, damaged or behind the database."""
        core = self.core
        core.text.purge_group(StoreType.WORKING.value)  # working memory did not survive
        journal_total, _ = core.journal.counts()
        restage_records: Restage = stage_records
        restage_raw: Restage = stage_raw
        checks = [("records", core.text, RECORDS_SEQ, len(core.records.heads), self.rebuild_records, restage_records),
                  ("journal", core.raw_text, JOURNAL_SEQ, journal_total, self.rebuild_journal, restage_raw)]
        for name, index, key, expected, rebuild, restage in checks:
            seq = self._seq(key)
            if index.stamp() == seq and index.num_docs() == expected:
                continue
            if expected == 0 and index.num_docs() == 0:
                index.write_stamp(seq)  # a new data directory: nothing to rebuild
                continue
            if self._catch_up(index, "record" if index is core.text else "raw", restage, seq) \
                    and index.num_docs() == expected:
                self.caught_up.append(name)
                continue
            rebuild(progress)
            self.repaired.append(name)

    def _catch_up(self, index: TextIndex, kind: str, restage: Restage,
                  seq: int) -> bool:
        """Index again what the change log says changed since the index's position; False when
        there is no position or the log was pruned past it."""
        feed, position = self.core.backend.changes, index.changes_position()
        if feed is None or position is None:
            return False
        changed: dict[str, None] = {}
        while True:
            changes, complete = feed.since(position, LOG_BATCH)
            if not complete:
                return False
            changed.update(dict.fromkeys(c.key for c in changes if c.kind == kind))
            if len(changes) < LOG_BATCH:
                break
            position = changes[-1].seq
        restage(self.core, [uuid.UUID(k) for k in changed])  # stages at the database's sequence number
        index.commit_through(seq)
        return True

    def reindex(self, req: m.ReindexRequest, progress: ProgressFn | None = None) -> m.ReindexResponse:
        wanted = req.target
        both = m.ReindexTarget.ALL
        return m.ReindexResponse(
            records=self.rebuild_records(progress) if wanted in (both, m.ReindexTarget.RECORDS) else None,
            journal=self.rebuild_journal(progress) if wanted in (both, m.ReindexTarget.JOURNAL) else None)

    def _seq(self, key: str) -> int:
        return sequence(self.core, key)

    def rebuild_records(self, progress: ProgressFn | None = None) -> int:
        core = self.core
        with self.writer.lock:
            total = len(core.records.heads)

            def docs() -> Iterable[TextDoc]:
                for n, (record_id, body) in enumerate(core.records.iter_bodies(), 1):
                    yield self._record_doc(record_id, body)
                    if progress and n % 1000 == 0:
                        progress(n, total)
                yield from (record_text_doc(r) for r in core.working.records())

            count = core.text.rebuild(docs(), self._seq(RECORDS_SEQ)) - len(core.working)
            if progress:
                progress(count, total)
            return count

    def rebuild_journal(self, progress: ProgressFn | None = None) -> int:
        core = self.core
        with self.writer.lock:
            total, _ = core.journal.counts()

            def docs() -> Iterable[TextDoc]:
                for n, (record_id, session_id, record) in enumerate(core.journal.scan(), 1):
                    # an undecodable record keeps an empty document, so the index still counts it
                    yield raw_text_doc(record) if record else TextDoc(id=str(record_id), group=session_id, body="")
                    if progress and n % 1000 == 0:
                        progress(n, total)

            count = core.raw_text.rebuild(docs(), self._seq(JOURNAL_SEQ))
            if progress:
                progress(count, total)
            return count

    def _record_doc(self, record_id: uuid.UUID, body: bytes | None) -> TextDoc:
        """A record's text document; an empty one for an undecodable record, so that the index
        still counts it and is not rebuilt on every open."""
        head = self.core.records.heads.get(record_id)
        try:
            if body is not None and head is not None:
                return record_text_doc(self.core.records.assemble(record_id, body, []))
        except UndecodableRecord:
            pass
        return TextDoc(id=str(record_id), group=head.store.value if head else "", body="")
