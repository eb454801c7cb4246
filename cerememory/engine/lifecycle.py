"""lifecycle.forget, lifecycle.set_mode and lifecycle.decay_tick: the changes that are not encodes."""

from __future__ import annotations

import uuid

import numpy as np

from ..cmp import messages as m
from ..cmp.errors import CMPError, ErrorCode, not_found
from ..dynamics import decay
from ..model import ALL_STORES, to_ts
from .core import EngineCore
from .writer import Writer


class Lifecycle:
    def __init__(self, core: EngineCore, writer: Writer) -> None:
        self.core = core
        self.writer = writer

    def set_mode(self, req: m.SetModeRequest) -> None:
        self.writer.set_mode(req.mode, req.scope or [])

    def forget(self, req: m.ForgetRequest) -> m.ForgetResponse:
        if not req.confirm:
            raise CMPError(ErrorCode.FORGET_UNCONFIRMED, "forget deletes records permanently; confirm it",
                           hint="send confirm: true (CLI: --confirm)")
        core = self.core
        with self.writer.lock:
            targets: list[uuid.UUID] = []
            if req.record_ids:
                missing = [i for i in req.record_ids if not core.exists(i)]
                if missing:
                    raise not_found(missing[0])
                targets.extend(req.record_ids)
            if req.store is not None:
                targets.extend(core.candidate_ids([req.store]))
            if req.temporal_range is not None:
                start, end = to_ts(req.temporal_range.start), to_ts(req.temporal_range.end)
                targets.extend(i for i in core.candidate_ids(ALL_STORES) if start <= core.created(i) <= end)
            if req.cascade:
                targets.extend(e.target for i in list(targets) for e in core.graph.out_edges(i))
            ids = [i for i in dict.fromkeys(targets) if core.exists(i)]
            self.writer.delete(ids)
        return m.ForgetResponse(records_deleted=len(ids))

    def decay_tick(self, req: m.DecayTickRequest | None = None) -> m.DecayTickResponse:
        """Materialise every record's fidelity and noise at this instant (vectorised), and count
        the records below their prune threshold. Reads never wait for it: they use the curve."""
        core = self.core
        with self.writer.lock:
            now = core.clock()
            items = core.records.items()
            if not items:
                return m.DecayTickResponse()
            heads = [h for _, h in items]
            curve = decay.evaluate(heads, now, core.params)
            score, noise = curve.score, curve.noise
            old_score = np.fromiter((h.fidelity_score for h in heads), dtype=np.float64, count=len(heads))
            old_noise = np.fromiter((h.noise_level for h in heads), dtype=np.float64, count=len(heads))
            core.evolution.observe_fidelity(curve.store_codes, score, ALL_STORES)
            if core.evolution.adapt(now):
                core.params = core.evolution.params()
            below = score < curve.prune
            forgotten = below & (old_score >= curve.prune)
            changed = np.flatnonzero((np.abs(score - old_score) > 1e-12) | (np.abs(noise - old_noise) > 1e-12))
            anchor = decay.emotion_factor(curve.intensity)
            for row in changed:
                head = heads[row]
                head.fidelity_score, head.noise_level = float(score[row]), float(noise[row])
                head.emotional_anchor, head.last_decay_tick = float(anchor[row]), now
            self.writer.write_decay([items[row][0] for row in changed], [heads[row] for row in changed])
        return m.DecayTickResponse(records_updated=len(changed), records_below_threshold=int(below.sum()),
                                   records_forgotten=int(forgotten.sum()))
