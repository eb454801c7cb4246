"""Return values that read both ways: as the reference Python SDK returns them and as CMP does.

The reference SDK (PyPI `cerememory` 0.2.2) returns a record id from `store`, a list from
`recall` and a count from `forget`; this package returns the CMP response. Each class here is the
SDK's value (a `UUID`, a `list`, an `int`) that also answers every attribute of the CMP response
(`.record_id`, `.memories`, `.records_deleted`, `.model_dump()` ...), so code written for either
runs unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel


class _Answers:
    """Attribute access falls through to the CMP response kept in `response`."""

    response: BaseModel

    def __getattr__(self, name: str) -> Any:
        if name == "response":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.response, name)


class RecordId(_Answers, uuid.UUID):
    """The id of a stored record, and the store response (`.record_id`, `.store`, ...)."""

    def __init__(self, response: BaseModel) -> None:
        super().__init__(str(response.record_id))  # type: ignore[attr-defined]
        object.__setattr__(self, "response", response)  # a UUID refuses setattr

    def __repr__(self) -> str:
        return f"RecordId('{self}')"


class Listed(_Answers, list[Any]):
    """The items of a response (recalled memories, journal records), and the response itself
    (`.memories`, `.records`, `.total_candidates`, `.activation_trace`, ...)."""

    def __init__(self, response: BaseModel, items: Iterable[Any]) -> None:
        super().__init__(items)
        self.response = response


class Count(_Answers, int):
    """How many records an operation touched, and its response (`.records_deleted`)."""

    response: BaseModel

    def __new__(cls, response: BaseModel, count: int) -> Count:
        value = super().__new__(cls, count)
        value.response = response
        return value


def wire(request: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    """A request model (this package's, or any pydantic model of the same fields) or a mapping,
    as the JSON-like dict an operation takes; fields left at None are left out."""
    if isinstance(request, BaseModel):
        return request.model_dump(mode="json", exclude_none=True)
    return dict(request)
