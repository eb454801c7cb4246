"""Requests an embedded caller's reads may be answered in plain JSON, without the CMP models.

Building a message's validator and serializer costs a short process (one `cm` command) more
than the read itself. For the reads listed in `PLAIN`, the embedded client's `dispatch` first
asks here whether the request is of the simple shape that needs no model to check: every key
known, every value of the plain type and within the limits the request model declares. When it
is, the request is made without validation (`model_construct`) and the engine's `<method>_plain`
answers with the JSON the model path would give. Anything else, an invalid request included,
returns None here and goes the model path, which names what is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ..limits import MAX_ID_CHARS, check_request_json
from ..model import SecrecyLevel, StoreType
from . import messages as m

_STORES = {s.value: s for s in StoreType if s is not StoreType.WORKING}
_SECRECY = {s.value: s for s in SecrecyLevel}
_RAW_KEYS = {"session_id", "query", "limit", "include_private_scratch", "include_sealed", "secrecy_levels"}
_LIST_KEYS = {"store", "metadata", "fields", "cursor", "limit", "similar_to"}
_LIST_FIELDS = {f.value: f for f in (m.ListField.TEXT, m.ListField.METADATA)}


def _limit(value: Any, field: str, model: type[BaseModel]) -> int | None:
    """`value` when it is an int within the bounds `field` of `model` declares, else None."""
    if type(value) is not int:
        return None
    info = model.model_fields[field]
    for bound in info.metadata:
        if (getattr(bound, "ge", None) is not None and value < bound.ge) or \
                (getattr(bound, "le", None) is not None and value > bound.le):
            return None
    return value


def list_request(request: dict[str, Any]) -> m.RecallListRequest | None:
    """A `recall.list` request of text and metadata from a curated store, unvalidated but known
    valid; None for anything else."""
    if not request.keys() <= _LIST_KEYS or request.get("store") not in _STORES:
        return None
    limit = _limit(request.get("limit", m.RecallListRequest.model_fields["limit"].default), "limit",
                   m.RecallListRequest)
    fields, cursor, similar = request.get("fields"), request.get("cursor"), request.get("similar_to")
    metadata = request.get("metadata")
    if limit is None or not (fields is None or (type(fields) is list and all(
            type(f) is str and f in _LIST_FIELDS for f in fields))):
        return None
    if not (cursor is None or type(cursor) is str) or not (similar is None or (
            type(similar) is str and len(similar) <= m.MAX_SIMILAR_CHARS and similar.isascii())):
        return None
    if metadata is not None:
        if type(metadata) is not dict or any(type(k) is not str or not k.isascii() or (
                type(v) is float and not math.isfinite(v)) for k, v in metadata.items()):
            return None
        try:
            m.check_filter(metadata)
            check_request_json(metadata)
        except ValueError:  # pydantic's own error is a ValueError too
            return None
    return m.RecallListRequest.model_construct(
        store=_STORES[request["store"]], metadata=metadata, limit=limit, cursor=cursor, similar_to=similar,
        fields=None if fields is None else [_LIST_FIELDS[f] for f in fields])


def raw_request(request: dict[str, Any]) -> m.RecallRawQueryRequest | None:
    """A `recall.raw_query` request by session, text and visibility (no time range, ids or
    derived memory), unvalidated but known valid; None for anything else."""
    if not request.keys() <= _RAW_KEYS:
        return None
    limit = _limit(request.get("limit", m.RecallRawQueryRequest.model_fields["limit"].default), "limit",
                   m.RecallRawQueryRequest)
    session, query, levels = request.get("session_id"), request.get("query"), request.get("secrecy_levels")
    flags = [request.get(k, False) for k in ("include_private_scratch", "include_sealed")]
    if limit is None or any(type(f) is not bool for f in flags) or not (session is None or (
            type(session) is str and len(session) <= MAX_ID_CHARS and session.isascii())):
        return None
    if not (query is None or (type(query) is str and query.isascii())) or not (levels is None or (
            type(levels) is list and all(type(v) is str and v in _SECRECY for v in levels))):
        return None
    return m.RecallRawQueryRequest.model_construct(
        session_id=session, query=query, limit=limit, include_private_scratch=flags[0], include_sealed=flags[1],
        secrecy_levels=None if levels is None else [_SECRECY[v] for v in levels])


# operation -> the recogniser of its plain requests
PLAIN: dict[str, Callable[[dict[str, Any]], BaseModel | None]] = {"recall.list": list_request,
                                                                   "recall.raw_query": raw_request}
