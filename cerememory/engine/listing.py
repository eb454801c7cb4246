"""recall.list: every record of one store, oldest first, filtered by metadata.

An inventory, not a recall: nothing is ranked, reconsolidated or hidden for having decayed, so
a client that keeps its own records in a store (cm keeps playbook rules in procedural) can read
all of them back in a few pages. Records are decoded straight from their stored bodies; the
heads in RAM give the order, so a page costs the bodies it reads and no more. A record that
cannot be decoded is left out of its page and named in `undecodable_ids`.
"""

from __future__ import annotations

import threading
import uuid
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ..cmp import messages as m
from ..cmp.errors import CMPError, ErrorCode
from ..embed.base import normalise_rows
from ..limits import check_answerable
from ..model import StoreType, from_ts, iso_utc, to_ts
from ..stores.bodies import BODY_FIELDS
from ..stores.undecodable import collect
from .core import EngineCore

BATCH = 500  # bodies read per query while a page fills
PAGE_CACHE = 8  # pages kept
DEFAULT_FIELDS = (m.ListField.TEXT, m.ListField.METADATA)
Key = tuple[float, str]  # (created_at, id hex): the listing order, and what a cursor names


class Listing:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self._pages: dict[tuple[Any, ...], tuple[int, m.RecallListResponse]] = {}
        self._pages_lock = threading.Lock()

    def list_records(self, req: m.RecallListRequest) -> m.RecallListResponse:
        page = self._cached_page(req)
        if req.similar_to is None:
            return page
        return page.model_copy(update=self._similarity(req.similar_to, [r.id for r in page.records]))


    def _similarity(self, text: str, ids: list[uuid.UUID]) -> dict[str, Any]:
        """Each listed record's cosine to `text` (one embedding, one product over their vectors), or
        why there is none: the same answer recall's vector signal would give."""
        if self.core.embedder is None:
            return {"semantic_search": False, "semantic_off_reason": self.core.semantic_off_reason}
        query = normalise_rows(self.core.embed([text.strip() or " "])[0])
        scores: dict[str, float] = {}
        for found, rows in self.core.vectors.rows(ids).values():
            if rows.shape[1] == query.shape[0]:
                scores.update((str(i), round(float(s), 6)) for i, s in zip(found, rows @ query, strict=True))
        return {"similarity": scores, "semantic_search": True, "semantic_off_reason": None}


    def _cached_page(self, req: m.RecallListRequest) -> m.RecallListResponse:
        """A page, from the engine's page cache when nothing was written since it was made (cm
        lists the same playbook on every command). Working memory and fidelity change without a
        write, so those pages are always built afresh."""
        if req.store is StoreType.WORKING or m.ListField.FIDELITY in (req.fields or ()):
            return self._page(req)
        revision = self.core.records.revision
        hit = self._cached(req)
        if hit is not None:
            return hit
        page = self._page(req)
        key = _cache_key(req)
        with self._pages_lock:
            if self.core.records.revision == revision:  # no write raced the build
                cache = self._pages
                if len(cache) >= PAGE_CACHE and key not in cache:
                    cache.pop(next(iter(cache)))
                cache[key] = (revision, page)
        return page

    def _cached(self, req: m.RecallListRequest) -> m.RecallListResponse | None:
        """The cached page of `req`, while nothing was written since it was made."""
        with self._pages_lock:
            hit = self._pages.get(_cache_key(req))
        return hit[1] if hit is not None and hit[0] == self.core.records.revision else None


    def _page(self, req: m.RecallListRequest) -> m.RecallListResponse:
        with collect() as skipped:
            return self._build_page(req, skipped)


    def list_plain(self, req: m.RecallListRequest) -> dict[str, Any] | None:
        """The page as JSON, built without the response models, for a caller that runs one short
        command (the embedded client's `dispatch`): answered for the default fields (text and
        metadata) of a curated store, from the same bodies the model path reads. None (the
        model path answers) for other fields or stores, for a page the cache already holds, and
        when a record's metadata would not pass the response's own check."""
        fields = set(req.fields or DEFAULT_FIELDS)
        if req.store is StoreType.WORKING or not fields <= set(DEFAULT_FIELDS) or self._cached(req) is not None:
            return None
        with collect() as skipped:
            out, next_cursor, scanned = self._collect(req, skipped)
        records = []
        for item in out:
            metadata = item.get("metadata")
            try:
                if metadata is not None:
                    check_answerable(metadata)
            except (ValueError, TypeError):  # pydantic's own error is a ValueError
                return None
            records.append({"id": str(item["id"]), "store": item["store"].value,
                            "created_at": iso_utc(item["created_at"]), "updated_at": iso_utc(item["updated_at"]),
                            "text": item.get("text"), "content": None, "metadata": metadata, "meta": None,
                            "emotion": None, "fidelity": None})
        page: dict[str, Any] = {"records": records, "next_cursor": next_cursor, "total_scanned": scanned,
                                "similarity": None, "semantic_search": False, "semantic_off_reason": None,
                                "undecodable_ids": [str(i) for i in skipped]}
        if req.similar_to is not None:
            page.update(self._similarity(req.similar_to, [item["id"] for item in out]))
        return page

    def _collect(self, req: m.RecallListRequest,
                 skipped: list[uuid.UUID]) -> tuple[list[dict[str, Any]], str | None, int]:
        """(the page's records as plain values, the next cursor, how many records were scanned)."""
        keys: list[Key] = sorted(self._members(req.store))
        position = bisect_right(keys, _parse_cursor(req.cursor)) if req.cursor else 0
        wanted = req.metadata or {}
        fields = set(req.fields or DEFAULT_FIELDS)
        now = self.core.clock()
        out: list[dict[str, Any]] = []
        scanned = 0
        while position < len(keys) and len(out) < req.limit:
            batch = [uuid.UUID(hex=h) for _, h in keys[position:position + BATCH]]
            values = self._values(batch)
            for record_id in batch:
                position += 1
                scanned += 1
                value = values.get(record_id)
                try:
                    if value is None or not _matches(value.get("metadata") or {}, wanted):
                        continue
                    out.append(self._listed(record_id, value, fields, now))
                except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:  # a body of the wrong shape
                    self.core.records.undecodable.note(record_id, exc)
                    continue
                if len(out) == req.limit:
                    break
        return out, (_cursor(keys[position - 1]) if position < len(keys) else None), scanned

    def _build_page(self, req: m.RecallListRequest, skipped: list[uuid.UUID]) -> m.RecallListResponse:
        out, next_cursor, scanned = self._collect(req, skipped)
        # one validation for the page: pydantic checks a thousand records in one call far faster;
        # a record it refuses is left out as undecodable and the rest validated again
        while True:
            try:
                return m.RecallListResponse.model_validate({"records": out, "next_cursor": next_cursor,
                                                            "total_scanned": scanned,
                                                            "undecodable_ids": tuple(skipped)})
            except ValidationError as exc:
                loc = exc.errors(include_url=False)[0].get("loc", ())
                if len(loc) < 2 or loc[0] != "records" or not isinstance(loc[1], int):
                    raise
                bad = out.pop(loc[1])
                self.core.records.undecodable.note(bad["id"], exc)


    def _members(self, store: StoreType) -> list[Key]:
        if store is StoreType.WORKING:
            return [(to_ts(r.created_at), r.id.hex) for r in self.core.working.records()]
        return [(head.created_at, record_id.hex) for record_id, head in self.core.records.items()
                if head.store is store]


    def _values(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
        """The body fields (content, emotion, metadata, meta) of each id still present and decodable."""
        out = self.core.records.body_values([i for i in ids if i in self.core.records])
        for record_id in ids:
            record = self.core.working.get(record_id) if record_id not in out else None
            if record is not None:
                out[record_id] = record.model_dump(include=BODY_FIELDS)
        return out


    def _listed(self, record_id: uuid.UUID, value: dict[str, Any], fields: set[m.ListField],
                now: float) -> dict[str, Any]:
        head = self.core.head(record_id)
        assert head is not None  # the record was decoded a moment ago under the same snapshot
        blocks = value["content"]["blocks"]
        for block in blocks:
            block.pop("embedding", None)
            block.pop("embedding_f32", None)
        item: dict[str, Any] = {"id": record_id, "store": head.store, "created_at": from_ts(head.created_at),
                                "updated_at": from_ts(head.updated_at)}
        if m.ListField.TEXT in fields:
            item["text"] = "\n".join(_text(b["data"]) for b in blocks if b.get("modality", "text") == "text")
        if m.ListField.FIDELITY in fields:
            item["fidelity"] = round(self.core.state(head, now)[0], 6)
        for name in ("content", "metadata", "meta", "emotion"):
            if m.ListField(name) in fields:
                item[name] = value.get(name)
        return item


def _cache_key(req: m.RecallListRequest) -> tuple[Any, ...]:
    wanted = tuple(sorted((k, type(v).__name__, v) for k, v in (req.metadata or {}).items()))  # true != 1
    return (req.store, wanted, tuple(req.fields or DEFAULT_FIELDS), req.cursor, req.limit)


def _text(data: bytes | str) -> str:
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def _cursor(key: Key) -> str:
    return f"{key[0]!r}/{key[1]}"


def _parse_cursor(cursor: str) -> Key:
    created, _, hex_id = cursor.partition("/")
    try:
        return float(created), uuid.UUID(hex=hex_id).hex
    except ValueError:
        raise CMPError(ErrorCode.VALIDATION_ERROR, f"cursor {cursor[:80]!r} was not issued by recall.list",
                       hint="pass next_cursor from the previous page unchanged, or leave it out") from None


def _matches(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Equal values of the same JSON type: `true` does not match `1`."""
    for key, value in wanted.items():
        if key not in metadata:
            return False
        found = metadata[key]
        if found != value or isinstance(found, bool) != isinstance(value, bool):
            return False
    return True
