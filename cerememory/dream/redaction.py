"""Which raw records may lend their words to derived memories.

Only normal-visibility records below `secret` contribute text. Secret records (any visibility),
sealed and private scratchpads are counted, never quoted: not in summaries, facts, topic hints,
segmentation, the full-text index or the embeddings of what a dream writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..model import RawJournalRecord, RawVisibility, SecrecyLevel


def contributes(record: RawJournalRecord) -> bool:
    return record.visibility is RawVisibility.NORMAL and record.secrecy_level is not SecrecyLevel.SECRET


@dataclass(frozen=True)
class RedactionCounts:
    normal_records: int = 0
    private_scratch_redacted: int = 0
    sealed_redacted: int = 0
    secret_redacted: int = 0

    @property
    def redacted_total(self) -> int:
        return self.private_scratch_redacted + self.sealed_redacted + self.secret_redacted

    @classmethod
    def of(cls, records: Iterable[RawJournalRecord]) -> RedactionCounts:
        normal = scratch = sealed = secret = 0
        for r in records:
            if r.secrecy_level is SecrecyLevel.SECRET:
                secret += 1
            elif r.visibility is RawVisibility.SEALED:
                sealed += 1
            elif r.visibility is RawVisibility.PRIVATE_SCRATCH:
                scratch += 1
            else:
                normal += 1
        return cls(normal, scratch, sealed, secret)

    def as_dict(self) -> dict[str, int]:
        return {"normal_records": self.normal_records,
                "private_scratch_redacted": self.private_scratch_redacted,
                "sealed_redacted": self.sealed_redacted, "secret_redacted": self.secret_redacted,
                "redacted_total": self.redacted_total}

    def sentence(self) -> str:
        """A note for the summary text: how many records were kept out of it, and why."""
        if not self.redacted_total:
            return ""
        parts = [f"{n} {label}" for n, label in ((self.secret_redacted, "secret"),
                                                  (self.sealed_redacted, "sealed"),
                                                  (self.private_scratch_redacted, "private scratch")) if n]
        noun = "record" if self.redacted_total == 1 else "records"
        return f"({self.redacted_total} redacted {noun} not quoted: {', '.join(parts)}.)"
