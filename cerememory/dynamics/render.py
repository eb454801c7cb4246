"""Human recall: text fades with fidelity and noise, deterministically, so the same memory reads
the same each time it is recalled."""

from __future__ import annotations

import re
import zlib

from ..model import ContentBlock, MemoryContent, Modality

_SPACE = re.compile(r"\s+")
ELISION = "..."
VERBATIM_ABOVE = 0.9


def lost_share(fidelity: float, noise: float = 0.0) -> float:
    """The share of words a person would no longer recall: none above fidelity 0.9, then the
    lost fidelity, raised by noise, at most 80%."""
    if fidelity >= VERBATIM_ABOVE:
        return 0.0
    return min((1.0 - fidelity) * (1.0 + noise), 0.8)


def elide(text: str, fidelity: float, noise: float = 0.0, seed: int = 0) -> str:
    """Replace the forgotten share of words with "...". Which words go depends only on the
    record (`seed`) and the word's position, so recall is repeatable."""
    share = lost_share(fidelity, noise)
    if share == 0.0:
        return text
    words = _SPACE.split(text.strip())
    cut = int(share * 1000)
    return " ".join(
        ELISION if zlib.crc32(f"{seed}:{i}".encode()) % 1000 < cut else word for i, word in enumerate(words)
    )


def render(content: MemoryContent, fidelity: float, noise: float = 0.0, *, seed: int = 0,
           perfect: bool) -> MemoryContent:
    if perfect or fidelity >= VERBATIM_ABOVE:
        return content
    blocks = [
        ContentBlock(modality=b.modality, format=b.format,
                     data=elide(b.data.decode("utf-8"), fidelity, noise, seed).encode("utf-8"))
        if b.modality is Modality.TEXT else b
        for b in content.blocks
    ]
    return MemoryContent(blocks=blocks, summary=content.summary)
