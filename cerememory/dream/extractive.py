"""The deterministic summariser: the most informative sentences of a topic group, attributed.

A sentence scores for what makes a memory worth keeping: named entities, numbers, dates and
times, decisions and commitments, and terms the group keeps coming back to. The best
sentences (near-duplicates skipped) are kept in conversation order, each with its speaker,
until the size cap. The same input always gives the same summary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from .tokens import jaccard, strip_speaker, tokens, without_role

HEADLINE_CHARS = 160
MAX_SENTENCE_CHARS = 240
MAX_FACTS = 5
MIN_RELATIVE_SCORE = 0.15  # "ok", "lol": below this share of the best score a sentence says nothing

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_ENTITY = re.compile(r"\b(?:[A-Z][a-z]+(?:[- ][A-Z][a-z]+)*|[A-Z]{2,}[0-9]*|[A-Z][a-z]*[0-9]+)\b")
_NUMBER = re.compile(r"\d")
_MONTHS = ("january february march april may june july august september october november december "
           "jan feb mar apr jun jul aug sep sept oct nov dec").split()
_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_DATE = re.compile(
    r"\b(?:" + "|".join(_MONTHS + _DAYS) + r"|today|tomorrow|yesterday|tonight|weekend|"
    r"(?:next|last|this) (?:week|month|year)|\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}|\d{1,2} ?(?:am|pm)|"
    r"(?:19|20)\d{2})\b", re.I)
_DECISION = re.compile(
    r"\b(?:decid\w*|agree\w*|chose|choose|chosen|plan(?:s|ned|ning)?|will|going to|must|need to|"
    r"should|deadline|due|ship\w*|launch\w*|approv\w*|reject\w*|cancel\w*|postpon\w*|moved?|"
    r"switch\w*|promis\w*|commit\w*|fix(?:ed)?|resolv\w*|prefer\w*|always|never|remember)\b", re.I)
_COMMON_CAPS = frozenset("I I'm I've I'll I'd The A An And But So Yes No Oh Ok Okay Hi Hey Thanks "
                         "Well It It's That This What When Where Why How Do Did Can Could Would "
                         "Should We You He She They My Your Our Their".split())


@dataclass(frozen=True)
class Source:
    """One contributing raw record: who said it, what, and when."""

    speaker: str
    text: str
    created_at: datetime
    tool_io: bool = False  # a tool call or its output: context for a summary, never a fact


@dataclass(frozen=True)
class Sentence:
    order: int
    label: str
    text: str
    score: float
    factual: bool

    def line(self) -> str:
        return f"{self.label}: {self.text}"


@dataclass(frozen=True)
class Extract:
    sentences: list[Sentence]  # selected, in conversation order
    facts: list[Sentence]  # factual sentences worth promoting, in conversation order

    @property
    def best(self) -> Sentence | None:
        return max(self.sentences, key=lambda s: (s.score, -s.order), default=None)


def _split(source: Source) -> tuple[str, list[str]]:
    """The speaker label ("Caroline" when the text starts "Caroline: ", else the speaker role)
    and the sentences of the text."""
    name, text = strip_speaker(without_role(source.text.strip(), source.speaker))
    label = name or source.speaker
    parts = [" ".join(p.split()) for p in _SENTENCE.split(text)]
    return label, [p if len(p) <= MAX_SENTENCE_CHARS else p[: MAX_SENTENCE_CHARS - 1] + "…" for p in parts if p]


def _entities(sentence: str) -> int:
    found = {m.group(0) for m in _ENTITY.finditer(sentence)}
    return len({e for e in found if e.split()[0] not in _COMMON_CAPS})


def score_sentence(sentence: str, recurring: dict[str, int]) -> tuple[float, bool]:
    """(score, factual): informative sentences score high; factual ones carry an entity,
    a number, a date or a decision."""
    toks = tokens(sentence)
    entities = _entities(sentence)
    numbers = len(_NUMBER.findall(sentence))
    dates = len(_DATE.findall(sentence))
    decisions = len(_DECISION.findall(sentence))
    repeated = sum(math.log2(recurring[t]) for t in set(toks) if recurring.get(t, 0) > 1)
    score = (1.0 * min(entities, 4) + 0.6 * min(numbers, 4) + 1.5 * min(dates, 2)
             + 1.2 * min(decisions, 2) + 0.5 * min(repeated, 6) + 0.05 * min(len(toks), 20))
    if len(toks) < 3:
        score *= 0.3
    if sentence.rstrip().endswith("?"):
        score *= 0.7
    factual = (entities or numbers or dates or decisions) > 0 and not sentence.rstrip().endswith("?") and len(toks) >= 3
    return score, bool(factual)


def extract(sources: list[Source], max_chars: int) -> Extract:
    """Pick sentences worth `max_chars` characters (line breaks included)."""
    split = [_split(s) for s in sources]
    doc_freq: dict[str, int] = {}
    for _, sentences in split:
        for t in {t for s in sentences for t in tokens(s)}:
            doc_freq[t] = doc_freq.get(t, 0) + 1
    candidates: list[Sentence] = []
    for source, (label, sentences) in zip(sources, split, strict=True):
        for text in sentences:
            score, factual = score_sentence(text, doc_freq)
            candidates.append(Sentence(len(candidates), label, text, score, factual and not source.tool_io))
    chosen: list[Sentence] = []
    chosen_tokens: list[set[str]] = []
    used = 0
    floor = MIN_RELATIVE_SCORE * max((s.score for s in candidates), default=0.0)
    for s in sorted(candidates, key=lambda s: (-s.score, s.order)):
        if s.score < floor or s.score <= 0:
            continue
        toks = set(tokens(s.text))
        if any(jaccard(toks, other) >= 0.6 and toks and other for other in chosen_tokens):
            continue
        cost = len(s.line()) + 3
        if used + cost > max_chars:
            continue
        chosen.append(s)
        chosen_tokens.append(toks)
        used += cost
    chosen.sort(key=lambda s: s.order)
    facts = sorted(sorted((s for s in chosen if s.factual), key=lambda s: (-s.score, s.order))[:MAX_FACTS],
                   key=lambda s: s.order)
    return Extract(chosen, facts)


def headline(topic_hint: str, best: Sentence | None) -> str:
    text = f"{topic_hint}: {best.line()}" if best else topic_hint
    return text if len(text) <= HEADLINE_CHARS else text[: HEADLINE_CHARS - 1] + "…"
