"""The shape limits of what a request may carry, in one place (documented in docs/cmp.md#limits).

Free-form JSON (record and journal metadata, `context.spatial`/`temporal`, recall cue fields) is
checked in one iterative walk: nesting depth, how many members and items it holds, how many
bytes of text, integers that fit in 64 bits, numbers that are finite (JSON has no NaN or
infinity) and strings that are valid Unicode. The walk never re-serialises and never recurses,
so a value nested 100,000 deep costs one pass and no stack. Typed strings are checked for
Unicode by pydantic itself (see `model.Model`).

Stored records are held only to `ANSWER_MAX_DEPTH` when read back: a record nested deeper (one
stored before these limits existed) cannot be carried by every transport's answer, so reads skip
and report it instead of failing the whole answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

KIB = 1024
MIB = 1024 * KIB

# Levels of objects and arrays a stored JSON field may have (its own object is level 1) and still
# be answered by every transport: a protobuf parser stops at 100 nested messages, and an answer
# spends three per JSON level plus its own few (pydantic alone would allow about 250).
ANSWER_MAX_DEPTH = 32
MAX_JSON_DEPTH = ANSWER_MAX_DEPTH - 2  # encode.store keeps `context` two levels down, at metadata._context
MAX_JSON_ITEMS = 10_000  # object members plus array items, all levels together
MAX_JSON_BYTES = 1 * MIB  # UTF-8 bytes of every key and string, plus 8 per other value
MAX_ID_CHARS = 256  # session_id, turn_id, topic_id and context.session_id
MAX_META_ITEMS = 1000  # entries of each meta-memory list (goals, evidence, tags, ...)
MAX_META_BYTES = 1 * MIB  # UTF-8 bytes of all meta-memory text together

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack stores
_FLOAT_MAX = sys.float_info.max  # a float outside ±this (an infinity) or unordered (NaN) is no JSON number
_CONTAINERS = (dict, list, tuple)
_SCALAR_BYTES = 8


def text_bytes(text: str) -> int:
    """UTF-8 length of `text`; raises UnicodeEncodeError for a lone surrogate ("\\ud800")."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def check_request_json(value: Any) -> Any:
    """A pydantic after-validator: `value` within every request limit, else a named error."""
    _walk(value, MAX_JSON_DEPTH, MAX_JSON_ITEMS, MAX_JSON_BYTES)
    return value


def check_answerable(value: Any) -> Any:
    """A pydantic after-validator for stored JSON: shallow enough for every transport's answer.
    Only depth: what was stored before a limit existed stays readable unless no answer can hold it."""
    level = [value]
    for _ in range(ANSWER_MAX_DEPTH):
        deeper = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                kind = type(child)
                if kind is dict or kind is list or (kind is not str and isinstance(child, _CONTAINERS)):
                    deeper.append(child)
        if not deeper:
            return value
        level = deeper
    raise _error("json_too_deep", "nested more than {limit} levels deep (at {path})",
                 ANSWER_MAX_DEPTH, _path_at_depth(value, ANSWER_MAX_DEPTH + 1))


RequestJson = Annotated[dict[str, Any], AfterValidator(check_request_json)]
"""A JSON object sent by a client (metadata): every request limit applies."""

RequestJsonValue = Annotated[Any, AfterValidator(check_request_json)]
"""Any JSON value sent by a client (context.spatial, cue.semantic): every request limit applies."""

StoredJson = Annotated[dict[str, Any], AfterValidator(check_answerable)]
"""A JSON object of a stored record: only what every answer can carry is required of it."""


def _walk(value: Any, max_depth: int, max_items: int, max_bytes: int) -> None:
    """Level by level, so depth needs no bookkeeping per node and the check stops at the first
    level too deep. The common JSON types are handled inline (encode is hot); ASCII strings are
    measured with no copy, others encoded once, which is also their Unicode check."""
    if isinstance(value, _CONTAINERS):
        level, size = [value], 0
    else:
        level, size = [], _scalar_size(value, value)
    depth = items = 0
    while level and size <= max_bytes:
        depth += 1
        if depth > max_depth:
            raise _error("json_too_deep", "nested more than {limit} levels deep (at {path})",
                         max_depth, _path_at_depth(value, max_depth + 1))
        deeper: list[Any] = []
        for node in level:
            children: Iterable[Any]
            items += len(node)
            if items > max_items:
                raise _error("json_too_many_items", "holds more than {limit} object members and array items",
                             max_items)
            if isinstance(node, dict):
                for key in node:
                    size += len(key) if type(key) is str and key.isascii() else _key_size(key, value)
                children = node.values()
            else:
                children = node
            for child in children:
                kind = type(child)
                if kind is str:
                    size += len(child) if child.isascii() else _text_size(child, value)
                elif kind is dict or kind is list:
                    deeper.append(child)
                elif (kind is int and _INT_MIN <= child <= _INT_MAX or kind is bool or child is None
                      or kind is float and -_FLOAT_MAX <= child <= _FLOAT_MAX):
                    size += _SCALAR_BYTES
                elif isinstance(child, _CONTAINERS):
                    deeper.append(child)
                else:
                    size += _scalar_size(child, value)
        level = deeper
    if size > max_bytes:
        raise PydanticCustomError("content_too_large", "holds more than {limit} bytes of keys and values",
                                  {"limit": max_bytes})


def _key_size(key: Any, root: Any) -> int:
    if not isinstance(key, str):
        raise _error("json_key", "object keys must be strings (at {path})", None,
                     _path_to(root, lambda k, _: k is key))
    return _text_size(key, root)


def _text_size(text: str, root: Any) -> int:
    try:
        return text_bytes(text)
    except UnicodeEncodeError:
        raise _error("string_unicode", "text is not valid Unicode: a lone surrogate (at {path})", None,
                     _path_to(root, lambda k, v: k is text or v is text)) from None


def _scalar_size(value: Any, root: Any) -> int:
    if isinstance(value, str):
        return _text_size(value, root)
    if value is None or isinstance(value, bool):
        return _SCALAR_BYTES
    if isinstance(value, float):
        if not -_FLOAT_MAX <= value <= _FLOAT_MAX:  # JSON has none: an answer could carry it only as null
            raise _error("json_not_finite", "{value} is not a finite number (at {path}): NaN, infinities and "
                         "numbers beyond ±1.8e308 cannot be stored", None,
                         _path_to(root, lambda _, v: v is value), value=str(value))
        return _SCALAR_BYTES
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise _error("json_int_range", "integers must fit in 64 bits (at {path})", None,
                         _path_to(root, lambda _, v: v is value))
        return _SCALAR_BYTES
    raise _error("json_type", "{kind} is not a JSON value (at {path})", None,
                 _path_to(root, lambda _, v: v is value), kind=type(value).__name__)


def _error(kind: str, template: str, limit: int | None, path: str = "", /,
           **extra: Any) -> PydanticCustomError:
    return PydanticCustomError(kind, template, {"limit": limit, "path": path or "the top", **extra})


# ---------------------------------------------------------------- error paths (the slow walk)


def _children(node: Any) -> list[tuple[Any, Any]]:
    if isinstance(node, dict):
        return list(node.items())
    if isinstance(node, list | tuple):
        return list(enumerate(node))
    return []


def _label(path: list[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part).encode("utf-8", "backslashreplace").decode("utf-8")
            out += f".{text}" if out else text
    return out


def _path_to(root: Any, hit: Any) -> str:
    """The path of the first member for which `hit(key, value)` holds; only when reporting."""
    stack: list[tuple[Any, list[Any]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        for key, child in _children(node):
            if hit(key, child):
                return _label([*path, key])
            if isinstance(child, _CONTAINERS):
                stack.append((child, [*path, key]))
    return ""


def _path_at_depth(root: Any, depth: int) -> str:
    """The path of the first container `depth` levels deep; only when reporting."""
    stack: list[tuple[Any, list[Any]]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if len(path) + 1 >= depth:
            return _label(path)
        stack.extend((child, [*path, key]) for key, child in _children(node) if isinstance(child, _CONTAINERS))
    return ""
