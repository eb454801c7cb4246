"""Human recall: text fades with fidelity, deterministically, so the same memory reads the same."""

from __future__ import annotations

import re

from ..model import ContentBlock, MemoryContent, Modality

_SPACE = re.compile(r"\s+")
ELISION = "..."


def elide(text: str, fidelity: float) -> str:
    """Replace every k-th word (from the first) with "..."; k shrinks as fidelity falls.

    Above 0.9 the text is untouched; k = max(floor(1 / min(1 - F, 0.8)), 2).
    """
    if fidelity >= 0.9:
        return text
    fraction = min(1.0 - fidelity, 0.8)
    step = max(int(1.0 / fraction), 2)
    words = _SPACE.split(text.strip())
    return " ".join(ELISION if i % step == 0 else w for i, w in enumerate(words))


def render(content: MemoryContent, fidelity: float, *, perfect: bool) -> MemoryContent:
    if perfect or fidelity >= 0.9:
        return content
    blocks = [
        ContentBlock(modality=b.modality, format=b.format,
                     data=elide(b.data.decode("utf-8"), fidelity).encode("utf-8"))
        if b.modality is Modality.TEXT else b
        for b in content.blocks
    ]
    return MemoryContent(blocks=blocks, summary=content.summary)
