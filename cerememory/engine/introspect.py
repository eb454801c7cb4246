"""introspect.*: what the engine can say about itself and its records, changing nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..cmp import messages as m
from ..cmp.errors import not_found
from ..dynamics import decay
from ..model import ALL_STORES, MemoryRecord, from_ts, to_ts
from ..security import audit
from ..security.audit import GENESIS, AuditLog
from ..stores.columns import HeadColumns
from ..stores.records import Head
from .core import EngineCore


class Introspection:
    def __init__(self, core: EngineCore) -> None:
        self.core = core

    def stats(self, extra: dict[str, Any]) -> m.StatsResponse:
        """Counts and averages over every record; `extra` are the figures other parts own."""
        core = self.core
        durable = core.records.columns()
        held = HeadColumns.of([(r.id, Head.of(r)) for r in core.working.records()])

        def both(name: str) -> np.ndarray:
            return np.concatenate([getattr(durable, name), getattr(held, name)])

        curve = decay.evaluate_columns(both("codes"), both("last_accessed_at"), both("stability"),
                                       both("emotion_intensity"), both("fidelity_base"), core.clock(), core.params)
        per_store = np.bincount(curve.store_codes, minlength=len(ALL_STORES))
        score_sums = np.bincount(curve.store_codes, weights=curve.score, minlength=len(ALL_STORES))
        counts = {s.value: int(per_store[i]) for i, s in enumerate(ALL_STORES)}
        sums = {s.value: float(score_sums[i]) for i, s in enumerate(ALL_STORES)}
        oldest = newest = None
        created = both("created_at")
        if len(created):
            oldest, newest = from_ts(float(created.min())), from_ts(float(created.max()))
        total = sum(counts.values())
        raw_total, raw_pending = core.journal.counts()
        return m.StatsResponse(
            total_records=total,
            records_by_store=counts,
            total_associations=len(core.graph),
            avg_fidelity=round(sum(sums.values()) / total, 6) if total else 0.0,
            avg_fidelity_by_store={s: round(sums[s] / counts[s], 6) if counts[s] else 0.0 for s in counts},
            oldest_record=oldest,
            newest_record=newest,
            total_recall_count=core.total_recall_count,
            raw_journal_records=raw_total,
            raw_journal_pending_dream=raw_pending,
            vector_index_records=len(core.vectors),
            vector_search_backend=core.vectors.backend,
            embedder=core.embedder.name if core.embedder else None,
            semantic_search=core.embedder is not None,
            semantic_off_reason=core.semantic_off_reason,
            working_capacity=core.working.capacity,
            recall_mode=core.modes[None],
            data_dir=str(core.data_dir),
            undecodable_records=core.undecodable.count,
            evolution_metrics=m.EvolutionMetrics.model_validate(core.evolution.metrics()),
            **extra,
        )

    def record(self, req: m.IntrospectRecordRequest) -> MemoryRecord:
        return self.core.get(req.record_id)

    def decay_forecast(self, req: m.DecayForecastRequest) -> m.DecayForecastResponse:
        """Fidelity now and at `forecast_at`, and when each record will be forgotten, all exact."""
        core = self.core
        now, at = core.clock(), to_ts(req.forecast_at)
        forecasts = []
        for record_id in req.record_ids:
            head = core.head(record_id)
            if head is None:
                raise not_found(record_id)
            p = core.params[head.store]
            crossing = float(decay.seconds_until(p.prune, head.fidelity_base, head.stability, p.exponent,
                                                 head.emotion_intensity))
            forecasts.append(m.DecayForecast(
                record_id=record_id,
                current_fidelity=round(core.state(head, now)[0], 9),
                forecasted_fidelity=round(float(decay.fidelity(
                    head.fidelity_base, at - head.last_accessed_at, head.stability, p.exponent,
                    head.emotion_intensity)), 9),
                estimated_threshold_date=from_ts(head.last_accessed_at + crossing) if np.isfinite(crossing) else None,
            ))
        return m.DecayForecastResponse(forecasts=forecasts)

    def fading(self, req: m.FadingRequest) -> m.FadingResponse:
        """What each horizon will see forgotten, from the closed-form crossing time of every
        record still above its store's threshold, and fidelity now by tenth: vectorised over the
        heads' columns."""
        core = self.core
        now = core.clock()
        columns = core.records.columns()
        ids, codes, stores = columns.ids, columns.codes, ALL_STORES
        base, stability, intensity, last = (columns.fidelity_base, columns.stability, columns.emotion_intensity,
                                            columns.last_accessed_at)
        prune = np.array([core.params[s].prune for s in stores])[codes]
        exponent = np.array([core.params[s].exponent for s in stores])[codes]
        score = decay.fidelity(base, now - last, stability, exponent, intensity)
        alive = score >= prune
        at = last + decay.seconds_until(prune, base, stability, exponent, intensity)
        horizons = []
        for days in req.horizons_days or [7, 30]:
            within = alive & (at <= now + days * 86400.0)
            per_store = np.bincount(codes[within], minlength=len(stores))
            horizons.append(m.FadingHorizon(days=days, total=int(within.sum()),
                                            by_store={s.value: int(per_store[i]) for i, s in enumerate(stores)}))
        finite = np.flatnonzero(alive & np.isfinite(at))
        if 0 < req.limit < len(finite):  # the soonest `limit` without sorting them all
            finite = finite[np.argpartition(at[finite], req.limit - 1)[:req.limit]]
        order = finite[np.argsort(at[finite], kind="stable")[:req.limit]]
        soonest = [m.FadingRecord(record_id=ids[i], store=stores[codes[i]],
                                  current_fidelity=round(float(score[i]), 9), forgotten_at=from_ts(float(at[i])))
                   for i in order]
        tenths = np.minimum((np.clip(score, 0.0, 1.0) * 10).astype(np.int64), 9)
        cells = np.bincount(codes * 10 + tenths, minlength=len(stores) * 10).reshape(len(stores), 10)
        histograms = [m.StoreHistogram(store=s, counts=[int(c) for c in cells[i]]) for i, s in enumerate(stores)]
        return m.FadingResponse(horizons=horizons, soonest=soonest, fidelity_histograms=histograms)

    @staticmethod
    def audit(req: m.AuditRequest, log: AuditLog | None) -> m.AuditResponse:
        """A page of the audit log (newest first) and, when asked, the check of
        the whole chain. A data directory opened without an audit log has an empty one."""
        if log is None:
            return m.AuditResponse(entries=[], verification=m.AuditVerification(ok=True, entries=0, head=GENESIS)
                                   if req.verify else None)
        rows = audit.read_entries(log.lines(), limit=req.limit + 1, before_seq=req.before_seq, op=req.op)
        entries = [m.AuditEntry.model_validate({k: v for k, v in row.items() if k != "prev"})
                   for row in rows[:req.limit]]
        verification = None
        if req.verify:
            checked = log.verify()
            verification = m.AuditVerification(ok=checked.ok, entries=checked.entries, head=checked.head,
                                               first_bad_line=checked.first_bad_line, reason=checked.reason)
        return m.AuditResponse(entries=entries, verification=verification,
                               next_before_seq=entries[-1].seq if len(rows) > req.limit else None)

    def evolution(self, req: m.EvolutionRequest | None = None) -> m.EvolutionResponse:
        return m.EvolutionResponse(
            parameter_adjustments=[
                m.ParameterAdjustment(store=a.store, parameter=a.parameter, original_value=a.original_value,
                                      current_value=a.current_value, reason=a.reason)
                for a in self.core.evolution.adjustments.values()],
            detected_patterns=list(self.core.evolution.patterns),
        )
