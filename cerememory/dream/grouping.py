"""Topic groups of raw journal records, the unit a dream summarises and commits.

- A record with an explicit `topic_id` joins the group (UTC day, session, topic).
- The others are taken per (UTC day, session) in time order and split into segments when the
  gap to the previous record is > 45 min, or > 10 min while the token-set Jaccard overlap of
  the segment so far and the next record is < 0.08. Exactly 45 (or 10) minutes does not split.
- Only records that may contribute text (see `redaction`) lend tokens to segmentation and to
  the inferred topic hint: the 3 most frequent tokens joined by "+", or `auto-YYYYMMDD-N` when
  the segment has none.
Groups come out oldest first (first timestamp, then session, then hint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime

from ..model import RawJournalRecord
from .redaction import RedactionCounts, contributes
from .tokens import jaccard, strip_speaker, tokens, top_terms

HARD_GAP_SECS = 45 * 60
SOFT_GAP_SECS = 10 * 60
MIN_OVERLAP = 0.08


@dataclass
class Group:
    session_id: str
    day: date
    topic_id: str | None
    topic_hint: str
    records: list[RawJournalRecord] = field(default_factory=list)

    @property
    def inferred(self) -> bool:
        return self.topic_id is None

    @property
    def start(self) -> datetime:
        return self.records[0].created_at

    @property
    def end(self) -> datetime:
        return self.records[-1].created_at

    @property
    def has_topic_signal(self) -> bool:
        return self.topic_id is not None or not self.topic_hint.startswith("auto-")

    def redaction(self) -> RedactionCounts:
        return RedactionCounts.of(self.records)

    def contributing(self) -> list[RawJournalRecord]:
        return [r for r in self.records if contributes(r)]


def utc_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def _record_tokens(record: RawJournalRecord) -> list[str]:
    return tokens(strip_speaker(record.content.plain_text())[1]) if contributes(record) else []


def segment(records: list[RawJournalRecord], *, hard_gap: float = HARD_GAP_SECS,
            soft_gap: float = SOFT_GAP_SECS, min_overlap: float = MIN_OVERLAP) -> list[list[RawJournalRecord]]:
    """Split time-ordered records of one (day, session) into topic segments."""
    segments: list[list[RawJournalRecord]] = []
    seen: set[str] = set()
    for record in records:
        toks = set(_record_tokens(record))
        if segments:
            gap = (record.created_at - segments[-1][-1].created_at).total_seconds()
            if gap > hard_gap or (gap > soft_gap and jaccard(seen, toks) < min_overlap):
                segments.append([])
                seen = set()
        else:
            segments.append([])
        segments[-1].append(record)
        seen |= toks
    return segments


def group_records(records: list[RawJournalRecord]) -> list[Group]:
    """All candidate records as topic groups, oldest first."""
    ordered = sorted(records, key=lambda r: (r.created_at, r.id))
    explicit: dict[tuple[date, str, str], Group] = {}
    inferred: dict[tuple[date, str], list[RawJournalRecord]] = {}
    for r in ordered:
        day = utc_day(r.created_at)
        topic = (r.topic_id or "").strip()
        if topic:
            key = (day, r.session_id, topic)
            if key not in explicit:
                explicit[key] = Group(r.session_id, day, topic, topic)
            explicit[key].records.append(r)
        else:
            inferred.setdefault((day, r.session_id), []).append(r)
    groups = list(explicit.values())
    for (day, session), items in inferred.items():
        for index, seg in enumerate(segment(items), 1):
            terms = top_terms(_record_tokens(r) for r in seg)
            hint = "+".join(terms) if terms else f"auto-{day:%Y%m%d}-{index}"
            groups.append(Group(session, day, None, hint, seg))
    groups.sort(key=lambda g: (g.start, g.session_id, g.topic_hint))
    return groups
