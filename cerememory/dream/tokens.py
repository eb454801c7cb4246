"""The token sets topic segmentation compares: lowercase alphanumeric runs of length >= 3 minus
a stop list, so that "the", "and" and friends never hold two unrelated topics together."""

from __future__ import annotations

import re
from collections.abc import Iterable

_RUN = re.compile(r"[a-z0-9]+")
SPEAKER_PREFIX = re.compile(r"^\s*([A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,2}):\s+")

STOP_WORDS = frozenset("""
the and for are but not you all any can had her was one our out has him his how its may now
she too use that this with from have they will what when your there their been were just
about into than then them these those would could should which while also very here
""".split())


def tokens(text: str) -> list[str]:
    """Tokens in order, with repeats (for counting); `set(tokens(t))` for overlap."""
    return [t for t in _RUN.findall(text.lower()) if len(t) >= 3 and t not in STOP_WORDS]


def strip_speaker(text: str) -> tuple[str | None, str]:
    """("Caroline", rest) for a text that starts "Caroline: ...", else (None, text): a name
    prefix says who spoke, not what the topic is."""
    match = SPEAKER_PREFIX.match(text)
    return (match.group(1), text[match.end():]) if match else (None, text)


def without_role(text: str, role: str) -> str:
    """`text` without a leading "user: " when `role` is user (any case): transcripts often
    repeat the speaker's role in the text, and a summary that adds the role again would read
    "user: user: ...". """
    head = text.lstrip()
    prefix = f"{role}:"
    return head[len(prefix):].lstrip() if head[:len(prefix)].lower() == prefix.lower() else text


def jaccard(a: set[str], b: set[str]) -> float:
    """Overlap of two token sets; an empty side counts as full overlap (1.0), so a content-free
    record ("ok", "?") never splits a topic on its own."""
    if not a or not b:
        return 1.0
    return len(a & b) / len(a | b)


def top_terms(token_lists: Iterable[list[str]], n: int = 3) -> list[str]:
    """The `n` most frequent tokens; ties broken alphabetically."""
    counts: dict[str, int] = {}
    for items in token_lists:
        for t in items:
            counts[t] = counts.get(t, 0) + 1
    return [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]
