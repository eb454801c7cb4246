"""Full-text search over tantivy: BM25 with English stemming and stop words.

The analyzer is named in the index's schema (`cm_<name>`), so an index built by another
analyzer does not match the schema on open and is rebuilt from the database, like any other
incompatible index: a changed analyzer never leaves old terms behind. Each document's id is
also held as two 64-bit fast fields, so a search reads its hits' ids from columns instead of
opening each hit's stored document.

In an encrypted data directory the index holds keyed hashes instead of words: text is analysed
in Python with the same English pipeline, each term is replaced by its hash, and tantivy indexes
the hashes split on whitespace (queries are hashed alike). Term statistics are unchanged, so
ranking is too; what search loses is the ability to match anything but whole analysed terms,
which a plain-words query never asks for anyway.

The index is derived data. A stamp file records the database mutation counter the index was
last committed at; an index whose stamp disagrees with the database is rebuilt on open. When
the database is shared, a clean close also records the change-log position the index holds
everything up to, so the next open can apply only what changed since (engine/indexes.py).

A full disk kills tantivy's writer and loses what it held uncommitted, so everything staged
since the last commit is also kept here: after a failure a new writer is made (once the disk has
room) and given all of it again. Searches meanwhile answer from the last commit.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple, cast

import tantivy

from ..model import uuids_of_ints
from ..storage.full import is_disk_full
from .words import STOP_WORDS

log = logging.getLogger("cerememory.index")
COMMIT_DELAY = 0.05  # seconds without a write before the background commit
COMMIT_LONGEST = 1.0  # seconds a steady stream of writes goes uncommitted at most
WRITER_HEAP = 15_000_000  # tantivy's minimum; larger heaps made each commit slower here
_WORD = re.compile(r"\w+", re.UNICODE)


class TextDoc(NamedTuple):
    """A document to index (a tuple: a batch makes a thousand, at half a frozen dataclass's cost)."""

    id: str
    group: str  # the store of a record, the session of a raw journal entry
    body: str
    summary: str = ""
    why: str = ""


def _english(stop: tantivy.Filter) -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(stop)
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


KEY_HALVES = ("key_hi", "key_lo")  # fast fields: the high and low 64 bits of a UUID id
_LOW_64 = (1 << 64) - 1

# name -> (schema tokenizer name, encrypted-index tokenizer name, builder)
ANALYZERS: dict[str, tuple[str, str, Callable[[], tantivy.TextAnalyzer]]] = {
    # English stemming, NLTK's 179 stop words (question and function words included)
    "english": ("cm_en2", "cm_hashed_en2", lambda: _english(tantivy.Filter.custom_stopword(sorted(STOP_WORDS)))),
    # English stemming, Lucene's 33 stop words (the analyzer of earlier versions)
    "english_minimal": ("cm_en", "cm_hashed", lambda: _english(tantivy.Filter.stopword("english"))),
}
DEFAULT_ANALYZER = "english"


def _schema(analyzer: str) -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    b.add_text_field("id", stored=True, tokenizer_name="raw")
    b.add_text_field("group", stored=False, tokenizer_name="raw")
    for half in KEY_HALVES:  # the id as two numbers: a hit's id is read without opening its stored document
        b.add_unsigned_field(half, fast=True)
    for field in ("body", "summary", "why"):
        b.add_text_field(field, stored=False, tokenizer_name=analyzer)
    return b.build()


def id_key(record_id: str) -> int | None:
    """The 128-bit number of a canonical UUID text; None for any other id."""
    digits = record_id.replace("-", "")
    if len(digits) != 32:
        return None
    try:
        return int(digits, 16)
    except ValueError:
        return None


def query_terms(text: str) -> list[str]:
    """Words of a free-text cue; the query language's operators are never interpreted."""
    return _WORD.findall(text)


class TextIndex:
    """One tantivy directory with a long-lived writer (the writer lock doubles as ownership)."""

    FIELD_BOOSTS = {"body": 1.0, "summary": 1.2, "why": 0.8}

    def __init__(self, path: Path, hash_term: Callable[[str], str] | None = None,
                 analyzer: str | None = None) -> None:
        self.path = path
        self.stamp_path = path.with_suffix(".stamp.json")
        self._hash_term = hash_term
        self.analyzer = analyzer or DEFAULT_ANALYZER
        self._tokenizer, self._hashed_tokenizer, build = ANALYZERS[self.analyzer]
        self._build = build
        self._terms = build() if hash_term else None
        self._open()

    def _hashed(self, text: str) -> str:
        """The text as the index sees it: unchanged, or its analysed terms as keyed hashes."""
        if self._hash_term is None or self._terms is None or not text:
            return text
        return " ".join(self._hash_term(term) for term in self._terms.analyze(text))

    def _open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.schema = _schema(self._hashed_tokenizer if self._hash_term else self._tokenizer)
        try:
            index = tantivy.Index(self.schema, path=str(self.path), reuse=True)
        except ValueError:
            # an incompatible or damaged directory: it is derived data, so start over
            shutil.rmtree(self.path)
            self.path.mkdir(parents=True)
            self.stamp_path.unlink(missing_ok=True)
            index = tantivy.Index(self.schema, path=str(self.path), reuse=False)
        index.register_tokenizer(self._tokenizer, self._build())
        index.register_tokenizer(self._hashed_tokenizer,
                                 tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace()).build())
        self.index: tantivy.Index | None = index  # None once closed
        self.writer: tantivy.IndexWriter | None = index.writer(heap_size=WRITER_HEAP, num_threads=1)
        self._queued: list[TextDoc | str] = []  # staged, not yet given to the writer
        self._queue_lock = threading.Lock()
        self._unsaved: list[TextDoc | str] = []  # given to the writer since the last commit: a doc, or an id deleted
        self._lock = threading.RLock()  # tantivy's writer takes one caller at a time
        self._staged = self._visible = self.stamp() or 0
        self._pending = threading.Event()
        self._stopping = threading.Event()  # set by close(): ends the committer's wait at once
        self._closing = False
        self._committer = threading.Thread(target=self._commit_loop, name=f"cerememory-commit-{self.path.name}",
                                           daemon=True)
        self._committer.start()

    # ------------------------------------------------------------ staleness

    def _stamped(self, field: str) -> int | None:
        try:
            return int(json.loads(self.stamp_path.read_text())[field])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def stamp(self) -> int | None:
        return self._stamped("seq")

    def changes_position(self) -> int | None:
        """The change-log position a clean close left the index current to (None after a
        crash, or when the database is not shared): any later commit drops it."""
        return self._stamped("changes")

    def write_stamp(self, seq: int, changes: int | None = None) -> None:
        tmp = self.stamp_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"seq": seq} if changes is None else {"seq": seq, "changes": changes}))
        tmp.replace(self.stamp_path)

    def _open_index(self) -> tantivy.Index:
        if self.index is None:
            raise RuntimeError(f"{self.path}: the index is closed")
        return self.index

    def num_docs(self) -> int:
        index = self._open_index()
        index.reload()
        return index.searcher().num_docs

    # ------------------------------------------------------------ writes
    #
    # Writers stage their changes under the database sequence number of their transaction and
    # return: DuckDB already holds the data durably, and this index is derived from it. A tantivy
    # commit (about 10 ms: segment files and fsync) then makes everything staged so far
    # searchable at once — lazily before the next search, or from a background committer shortly
    # after the last write. Many writes share one commit, and every search sees every write that
    # returned before it.

    def stage(self, seq: int, *, add: Iterable[TextDoc] = (), delete: Iterable[str] = ()) -> None:
        """Queue changes for the next commit and return at once: a writer never waits for a
        commit in progress, and analysing the text happens on the committing thread."""
        changes: list[TextDoc | str] = [*delete, *add]
        with self._queue_lock:
            self._queued.extend(changes)
            self._staged = max(self._staged, seq)

    def _uncommitted(self) -> bool:
        """Whether any change is staged and not yet committed, whatever its number."""
        return bool(self._unsaved or self._queued)

    def _drain(self) -> int:
        """Hand the queued changes to the writer (caller holds `_lock`); returns the sequence
        number they bring the index to. A writer that fails is replaced at the next commit
        and given everything since the last commit again."""
        with self._queue_lock:
            changes, self._queued = self._queued, []
            target = self._staged
        self._unsaved.extend(changes)
        if self.writer is not None:
            try:
                for change in changes:
                    self._apply(self.writer, change)
            except ValueError as exc:
                self._drop_writer(exc)
        return target

    def _apply(self, writer: tantivy.IndexWriter, change: TextDoc | str, *, replay: bool = False) -> None:
        if isinstance(change, str):
            writer.delete_documents_by_term("id", change)
            return
        if replay:  # a failed commit may have kept it after all: never index a record twice
            writer.delete_documents_by_term("id", change.id)
        doc = tantivy.Document(id=change.id, group=change.group, body=self._hashed(change.body),
                               summary=self._hashed(change.summary), why=self._hashed(change.why))
        key = id_key(change.id)
        if key is not None:
            doc.add_unsigned(KEY_HALVES[0], key >> 64)
            doc.add_unsigned(KEY_HALVES[1], key & _LOW_64)
        writer.add_document(doc)

    def _drop_writer(self, exc: Exception) -> None:
        """Forget a failed writer (dropping it releases tantivy's directory lock)."""
        log.warning("%s: the index writer failed and is replaced at the next commit: %s", self.path, exc)
        self.writer = None

    def _writer(self) -> tantivy.IndexWriter:
        """The live writer, or a new one given everything staged since the last commit."""
        if self.writer is None:
            self.writer = writer = self._open_index().writer(heap_size=WRITER_HEAP, num_threads=1)
            for change in self._unsaved:
                self._apply(writer, change, replay=True)
        return self.writer

    def mark_pending(self) -> None:
        """Ask the background committer to make staged changes searchable soon."""
        self._pending.set()

    def _commit_loop(self) -> None:
        while not self._closing:
            if not self._pending.wait(timeout=0.5):
                continue
            if self._closing or not self._settled():
                return  # close() commits what is left, at once
            try:
                self.commit_through(self._staged)
            except Exception:  # the next search or write retries; the stamp stays behind until then
                log.exception("background commit of %s failed", self.path)

    def _settled(self) -> bool:
        """Wait until writes pause for COMMIT_DELAY, or COMMIT_LONGEST after the first: each
        commit adds a segment that tantivy merges later, so a steady stream of writes sharing
        one commit a second costs far less than one commit per pause of a few ms. A search
        commits what it needs itself. False once close() began."""
        deadline = time.monotonic() + COMMIT_LONGEST
        while True:
            self._pending.clear()
            left = deadline - time.monotonic()
            if self._stopping.wait(max(0.0, min(COMMIT_DELAY, left))):
                return False
            if not self._pending.is_set() or left <= COMMIT_DELAY:
                return True

    def commit_through(self, seq: int) -> None:
        """Return once everything staged up to `seq` is searchable and durable. Changes staged
        at a number already visible (another server's, whose number a later local write had
        already reached) are committed too."""
        with self._lock:
            if self._visible >= seq and not self._uncommitted():
                return
            target = self._drain()
            try:
                self._writer().commit()
            except ValueError as exc:
                self._drop_writer(exc)
                raise
            self._unsaved.clear()
            self._open_index().reload()
            self.write_stamp(target)
            self._visible = target

    def purge_group(self, group: str) -> None:
        """Drop a whole group now, keeping the stamp (used for volatile working memory). A group
        with no document costs one count, not a commit (whose fsyncs every open would pay)."""
        with self._lock:
            self._drain()
            if not self._unsaved and not self._holds(group):
                return
            writer = self._writer()
            writer.delete_documents_by_term("group", group)
            writer.commit()
            self._unsaved.clear()
            self._open_index().reload()

    def _holds(self, group: str) -> bool:
        """Whether a committed, undeleted document of `group` is in the index."""
        query = tantivy.Query.term_query(self.schema, "group", group)
        return bool(self._open_index().searcher().search(query, 1).hits)

    def rebuild(self, docs: Iterable[TextDoc], seq: int) -> int:
        """Replace everything with `docs`. Not kept for a replay: a rebuild that fails leaves the
        stamp behind, so the next open rebuilds again from the database."""
        with self._lock:
            with self._queue_lock:
                self._queued.clear()
            self._unsaved.clear()
            writer = self._writer()
            writer.delete_all_documents()
            count = 0
            for doc in docs:
                self._apply(writer, doc)
                count += 1
            with self._queue_lock:
                self._staged = max(self._staged, seq)
            self._visible = -1
            self.commit_through(seq)
            return count

    # ------------------------------------------------------------ reads

    def search(
        self, text: str, limit: int, groups: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """Top `limit` (id, bm25) pairs for the words of `text`, restricted to `groups`."""
        found = self._search(text, limit, groups)
        if found is None:
            return []
        searcher, hits = found
        return [(searcher.doc(addr)["id"][0], float(score)) for score, addr in hits]

    def search_ids(
        self, text: str, limit: int, groups: Sequence[str] | None = None
    ) -> list[tuple[uuid.UUID, float]]:
        """`search` with each id as a `uuid.UUID` (ids indexed as canonical UUID text), made in
        bulk: recall asks this of a pool of hits per query."""
        found = self._search(text, limit, groups)
        if found is None:
            return []
        searcher, hits = found
        addresses = list(map(itemgetter(1), hits))
        high, low = (searcher.fast_field_values(half, addresses) for half in KEY_HALVES)
        if None in high or None in low:  # a document indexed without its key: its stored id is read
            return [(uuid.UUID(searcher.doc(addr)["id"][0]), float(score)) for score, addr in hits]
        ids = uuids_of_ints([h << 64 | lo for h, lo in zip(cast(list[int], high), cast(list[int], low), strict=True)])
        return list(zip(ids, map(float, map(itemgetter(0), hits)), strict=True))

    def _search(self, text: str, limit: int,
                groups: Sequence[str] | None) -> tuple[tantivy.Searcher, list[tuple[float, tantivy.DocAddress]]] | None:
        """The searcher and its top `limit` (bm25, address) hits; None when nothing can match."""
        terms = query_terms(self._hashed(text))
        if not terms or limit <= 0:
            return None
        if self._staged > self._visible or self._uncommitted():
            try:
                self.commit_through(self._staged)  # read your writes
            except ValueError as exc:
                if not is_disk_full(exc):
                    raise
                log.warning("%s: searching without the latest writes until the disk has room: %s", self.path, exc)
        index = self._open_index()
        query, _errors = index.parse_query_lenient(
            " ".join(terms), ["body", "summary", "why"], field_boosts=self.FIELD_BOOSTS
        )
        if groups is not None:
            query = tantivy.Query.boolean_query([
                (tantivy.Occur.Must, query),
                (tantivy.Occur.Must, tantivy.Query.term_set_query(self.schema, "group", list(groups))),
            ])
        searcher = index.searcher()
        return searcher, searcher.search(query, limit, count=False).hits

    def close(self, changes: int | None = None) -> None:
        """Commit what is staged; `changes`: the change-log position everything staged reflects."""
        self._closing = True
        self._stopping.set()
        self._pending.set()
        self._committer.join(timeout=10)
        try:
            self.commit_through(self._staged)
            if changes is not None:
                self.write_stamp(self._visible, changes)
        finally:
            # dropping the writer releases tantivy's directory lock
            self.writer = None
            self.index = None
