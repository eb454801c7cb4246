"""Compare our `cm` envelopes with the original's recorded ones (tests/cm_reference/): the same
keys with the same JSON types, recursively; ours may add keys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

REFERENCE = Path(__file__).parent / "cm_reference"


def recorded(name: str) -> dict[str, Any]:
    """One recorded step: `{argv, exit, stdout, stderr}`."""
    data: dict[str, Any] = json.loads((REFERENCE / f"{name}.json").read_text(encoding="utf-8"))
    return data


def kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(value)]


def shape_gaps(ours: Any, ref: Any, path: str = "") -> list[str]:
    """Where `ours` lacks a key of `ref` or holds another JSON type. Lists compare their first
    items — for objects with a `type`, ours of the same type when there is one."""
    if kind(ours) != kind(ref):
        return [f"{path or '.'}: {kind(ours)} where the original has {kind(ref)}"]
    gaps: list[str] = []
    if isinstance(ref, dict):
        for key, value in ref.items():
            if key not in ours:
                gaps.append(f"{path}.{key}: missing")
            else:
                gaps += shape_gaps(ours[key], value, f"{path}.{key}")
    elif isinstance(ref, list) and ref and ours:
        first = ref[0]
        same = [o for o in ours if isinstance(o, dict) and isinstance(first, dict) and "type" in first
                and o.get("type") == first["type"]]
        gaps += shape_gaps((same or ours)[0], first, f"{path}[0]")
    return gaps
