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

from ..limits import check_request_json
from ..model import StoreType
from . import messages as m

_STORES = {s.value: s for s in StoreType if s is not StoreType.WORKING}
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


# operation -> the recogniser of its plain requests
PLAIN: dict[str, Callable[[dict[str, Any]], BaseModel | None]] = {"recall.list": list_request}
