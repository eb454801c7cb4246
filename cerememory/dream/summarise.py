"""A topic group's summary: a heading, the body (LLM when configured, else extractive) and a
redaction note. The LLM only ever sees contributing records; on any failure the extractive
summary is used and the reason is reported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..llm.providers import LLMError
from ..model import RawSource, RawSpeaker
from ..security.sanitize import Sanitizer
from .extractive import Source, extract, headline
from .grouping import Group
from .settings import DEFAULT_MAX_CHARS
from .tokens import without_role

if TYPE_CHECKING:
    from ..llm import LLMClient

MAX_PROMPT_CHARS = 16_000
EXTRACTIVE = "extractive"

SYSTEM_PROMPT = (
    "You turn an excerpt of a conversation log into a short memory for later recall. Write plain "
    "text, at most {words} words. Keep names, numbers, dates, times and decisions exactly as "
    "stated, and say who said or decided what. Do not invent anything; do not add advice."
)


@dataclass(frozen=True)
class Summary:
    text: str
    headline: str
    facts: list[str]
    summariser: str
    llm_fallback_reason: str | None = None


def heading(group: Group) -> str:
    return (f"Session {group.session_id} — {group.topic_hint} "
            f"({group.start:%Y-%m-%d %H:%M}–{group.end:%H:%M} UTC, {len(group.records)} raw records)")


def _sources(group: Group, sanitizer: Sanitizer) -> list[Source]:
    """The text of contributing records, with any credential left in it redacted: a secret
    pasted into an ordinary turn must not be copied into a summary or fact. Tool calls and their
    output are left out when the group has conversation to summarise: a command line or a JSON
    blob says nothing a person would recall; a group of tool I/O alone keeps it."""
    sources = [Source(r.speaker.value, sanitizer.sanitize(r.content.plain_text())[0], r.created_at,
                      tool_io=r.source is RawSource.TOOL_IO or r.speaker is RawSpeaker.TOOL)
               for r in group.contributing() if r.content.plain_text().strip()]
    conversation = [s for s in sources if not s.tool_io]
    return conversation or sources


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


class Summariser:
    """Summaries of topic groups; `llm` is optional (None: extractive only)."""

    def __init__(self, llm: LLMClient | None = None, *, max_chars: int = DEFAULT_MAX_CHARS,
                 sanitizer: Sanitizer | None = None) -> None:
        self.llm = llm
        self.max_chars = max_chars
        self.sanitizer = sanitizer or Sanitizer()

    def _budget(self, group: Group) -> int:
        return max(self.max_chars - len(heading(group)) - len(group.redaction().sentence()) - 2, 80)

    def facts(self, group: Group) -> list[str]:
        """The facts a summary of `group` would promote (extractive in every mode, so no LLM is
        asked): what a dry run counts."""
        return [s.line() for s in extract(_sources(group, self.sanitizer), self._budget(group)).facts]

    def summarise(self, group: Group) -> Summary:
        head = heading(group)
        counts = group.redaction()
        note = counts.sentence()
        budget = self._budget(group)
        sources = _sources(group, self.sanitizer)
        picked = extract(sources, budget)
        facts = [s.line() for s in picked.facts]
        title = headline(group.topic_hint, picked.best)
        if not sources:
            body = (f"{len(group.records)} raw records preserved, {counts.redacted_total} redacted; "
                    "nothing quotable.")
            return Summary(_join(head, body, ""), _cap(head, 160), [], EXTRACTIVE)
        extractive_body = "\n".join(f"- {s.line()}" for s in picked.sentences)
        if self.llm is None:
            return Summary(_join(head, extractive_body, note), title, facts, EXTRACTIVE)
        try:
            text, _ = self.llm.complete(SYSTEM_PROMPT.format(words=max(budget // 7, 20)),
                                        _transcript(sources))
        except LLMError as exc:
            return Summary(_join(head, extractive_body, note), title, facts, EXTRACTIVE, exc.reason)
        body = _cap(" ".join(text.split()), budget)
        return Summary(_join(head, body, note), _cap(f"{group.topic_hint}: {body}", 160), facts,
                       f"llm:{self.llm.name}")


def _join(head: str, body: str, note: str) -> str:
    return "\n".join(part for part in (head, body, note) if part)


def _transcript(sources: list[Source]) -> str:
    lines = [f"[{s.created_at:%Y-%m-%d %H:%M}] {s.speaker}: {' '.join(without_role(s.text, s.speaker).split())}"
             for s in sources]
    text = "\n".join(lines)
    return "Conversation log:\n" + _cap(text, MAX_PROMPT_CHARS)
