"""`bench/locomo.py --cv`: leave-one-conversation-out cross-validation of every tuned recall choice.

Each dev conversation is stored once per analyzer (one memory per turn, `context.session_id` = the
LoCoMo session, `created_at` = the session's date); questions are asked under each configuration
of the knobs (fusion, rrf_k, per-signal weight, activation weight and seeds, session evidence,
neighbour context, pseudo-relevance feedback, question cleanup, temporal weight, analyzer) that
the selection visits, by changing the engine's options between passes
over the same data directory. For each held-out conversation the configuration is selected on
the other four (coordinate ascent from the shipped defaults, see `select`), and its scores on the
held-out one are what count. Rows:

- `bm25-tantivy`, `rank_bm25`, `minilm`: untuned baselines over the same turns and questions
  (`rank_bm25`: BM25Okapi over lowercased words minus scikit-learn's English stop words).
- `defaults`: the engine exactly as shipped (nothing selected, so its CV figure is its figure).
- `cv: <family>`: the settings of that family chosen by cross-validation, the rest at defaults.
- `cv: all`: the whole grid chosen by cross-validation (the figure that counts for tuning).

Embeddings of turns and questions are cached under /tmp/cm-locomo-emb (keyed by a hash of the
model and the text), so variants and reruns reuse them.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import LoadMonitor, env_line, environment, md_table, now, pyplot  # noqa: E402

CACHE = Path("/tmp/cm-locomo-emb")
CV_METRICS = ("recall_any@10", "ndcg@10")
_WORD = re.compile(r"\w+")


class CachedEmbedder:
    """The bundled MiniLM behind an on-disk cache (one .npy per text)."""

    offline = True

    def __init__(self, inner: Any, cache: Path = CACHE) -> None:
        self.inner = inner
        self.name = inner.name
        self.cache = cache
        cache.mkdir(parents=True, exist_ok=True)
        self.misses = 0

    @property
    def dimension(self) -> int | None:
        return 384

    def _path(self, text: str) -> Path:
        return self.cache / (hashlib.sha1(f"{self.name}\0{text}".encode()).hexdigest() + ".npy")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows: dict[int, np.ndarray] = {}
        missing = []
        for n, text in enumerate(texts):
            path = self._path(text)
            if path.exists():
                rows[n] = np.load(path)
            else:
                missing.append(n)
        if missing:
            self.misses += len(missing)
            fresh = self.inner.embed([texts[n] for n in missing])
            for n, row in zip(missing, fresh, strict=True):
                np.save(self._path(texts[n]), row.astype(np.float32))
                rows[n] = row.astype(np.float32)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([rows[n] for n in range(len(texts))]).astype(np.float32)


# ---------------------------------------------------------------- the knobs

Config = tuple[tuple[str, Any], ...]  # every knob's value, in knob order


def knobs_of_engine() -> dict[str, list[Any]]:
    """The knobs this engine has, each with its shipped default first."""
    from cerememory.engine.options import EngineOptions
    from cerememory.index import fulltext
    shipped = {f.name: getattr(EngineOptions(), f.name) for f in fields(EngineOptions)}
    candidates: dict[str, list[Any]] = {
        "fusion": ["rrf", "normalized"],
        "rrf_k": [5, 10, 20],
        "text_weight": [1.0, 1.5, 2.0],
        "activation_weight": [0.3, 0.0, 0.6, 1.0, 1.5],
        "activation_seeds": [3, 10],
        "session_weight": [0.0, 0.1, 0.2, 0.3],
        "context_weight": [0.0, 0.5, 1.0],
        "text_context_weight": [0.0, 0.5, 1.0],
        "feedback": ["off", "vector", "text"],
        "question_cleanup": [False, True],
        "temporal_weight": [0.0, 0.5, 1.0],
    }
    knobs = {name: [shipped[name], *[v for v in values if v != shipped[name]]]
             for name, values in candidates.items() if name in shipped}
    analyzers = list(getattr(fulltext, "ANALYZERS", {}))
    if analyzers:
        default = fulltext.DEFAULT_ANALYZER
        knobs["analyzer"] = [default, *[a for a in analyzers if a != default]]
    return knobs


FAMILIES = {"fusion": ["fusion", "rrf_k"], "weights": ["text_weight"],
            "activation": ["activation_weight", "activation_seeds"], "session evidence": ["session_weight"],
            "neighbour context": ["context_weight"], "text context": ["text_context_weight"],
            "feedback": ["feedback"],
            "question cleanup": ["question_cleanup"], "temporal": ["temporal_weight"], "analyzer": ["analyzer"]}


def code_version() -> str:
    """The engine's source as it is now: cached scores are only reused by the same code."""
    import cerememory
    root = Path(cerememory.__file__).parent
    digest = hashlib.sha1()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def label(config: Config, knobs: dict[str, list[Any]]) -> str:
    return ",".join(f"{k}={v}" for k, v in config if v != knobs[k][0]) or "defaults"


class Evaluator:
    """Per-question scores of a configuration on every conversation, computed once: one data
    directory per conversation and analyzer, the query-time knobs set between passes."""

    def __init__(self, convs: dict[str, tuple[list, list]], knobs: dict[str, list[Any]],
                 embedder: CachedEmbedder, work: Path, score_fn: Any) -> None:
        self.convs, self.knobs, self.embedder, self.work, self.score_fn = convs, knobs, embedder, work, score_fn
        self.engines: dict[tuple[str, Any], Any] = {}
        self.cache: dict[Config, dict[str, list]] = {}
        self.disk = CACHE.parent / "cm-locomo-cv-rows"  # per-question scores, reused by a rerun of the same code
        self.disk.mkdir(exist_ok=True)
        self.version = code_version()
        self.stack = ExitStack()

    def default(self) -> Config:
        return tuple((k, v[0]) for k, v in self.knobs.items())

    def _memory(self, sid: str, analyzer: Any) -> Any:
        key = (sid, analyzer)
        if key not in self.engines:
            import cerememory
            from cerememory.index import fulltext
            previous = getattr(fulltext, "DEFAULT_ANALYZER", None)
            if analyzer is not None:
                fulltext.DEFAULT_ANALYZER = analyzer
            try:
                mem = self.stack.enter_context(cerememory.open(tempfile.mkdtemp(prefix="cv-", dir=self.work),
                                                               semantic="on"))
            finally:
                if analyzer is not None:
                    fulltext.DEFAULT_ANALYZER = previous
            mem.engine.core.embedder = self.embedder
            turns = self.convs[sid][0]
            records = [{"content": {"blocks": [{"modality": "text", "text": t.text}]},
                        "created_at": t.created_at, "context": {"session_id": f"{sid}-s{t.session}"},
                        "metadata": {"dia_id": t.dia_id, "session": t.session}} for t in turns]
            for start in range(0, len(records), 1000):
                mem.store_batch(records[start:start + 1000])
            self.engines[key] = mem
        return self.engines[key]

    def rows(self, config: Config) -> dict[str, list]:
        if dict(config).get("fusion") == "normalized":  # rrf_k means nothing to it
            config = tuple((k, self.knobs[k][0] if k == "rrf_k" else v) for k, v in config)
        path = self.disk / (hashlib.sha1(repr((self.version, sorted(self.convs), config)).encode()).hexdigest()
                            + ".json")
        if config not in self.cache and path.exists():
            self.cache[config] = {sid: [(c, r) for c, r in rows] for sid, rows in json.loads(path.read_text()).items()}
        if config not in self.cache:
            t0 = now()
            values = dict(config)
            out = {}
            for sid, (_, questions) in self.convs.items():
                mem = self._memory(sid, values.get("analyzer"))
                options = mem.engine.core.options
                for name, value in values.items():
                    if name != "analyzer":
                        setattr(options, name, value)
                ranked = []
                for q in questions:
                    res = mem.recall(q.text, limit=20, reconsolidate=False, mode="perfect")
                    ids = [h.record.metadata.get("dia_id") for h in res.memories]
                    ranked.append(list(dict.fromkeys(i for i in ids if i)))
                out[sid] = per_question(ranked, questions, self.score_fn)
            self.cache[config] = out
            path.write_text(json.dumps(out))
            pooled = [r for rows in out.values() for r in rows]
            print(f"[cv] {label(config, self.knobs)}: recall_any@10 {mean(pooled, 'recall_any@10'):.3f} "
                  f"ndcg@10 {mean(pooled, 'ndcg@10'):.3f} ({now() - t0:.0f} s)", flush=True)
        return self.cache[config]

    def close(self) -> None:
        self.stack.close()


def rank_bm25_baseline(turns: list, questions: list) -> list[list[str]]:
    from rank_bm25 import BM25Okapi
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    def tokens(text: str) -> list[str]:
        return [w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS]
    bm25 = BM25Okapi([tokens(t.text) for t in turns])
    out = []
    for q in questions:
        scores = bm25.get_scores(tokens(q.text))
        top = np.argsort(-scores, kind="stable")[:20]
        out.append([turns[i].dia_id for i in top if scores[i] > 0])
    return out


# ---------------------------------------------------------------- selection


def per_question(ranked: list[list[str]], questions: list, score_fn: Any) -> list[tuple[int, dict[str, float]]]:
    return [(q.category, score_fn(r, q.evidence)) for q, r in zip(questions, ranked, strict=True)]


def mean(rows: list[tuple[int, dict[str, float]]], metric: str) -> float:
    return float(np.mean([r[metric] for _, r in rows])) if rows else float("nan")


def fitness(ev: Evaluator, config: Config, train: list[str]) -> tuple[float, float]:
    pooled = [r for sid in train for r in ev.rows(config)[sid]]
    return round(mean(pooled, "recall_any@10"), 9), round(mean(pooled, "ndcg@10"), 9)


def select(ev: Evaluator, train: list[str], allowed: list[str], passes: int = 1) -> Config:
    """Coordinate ascent from the shipped defaults over the allowed knobs, judged on `train`
    only: each knob in turn takes the value with the best recall_any@10 (ties: nDCG@10, then
    the current value); `passes` sweeps at most, fewer if one changes nothing."""
    current = ev.default()
    for _ in range(passes):
        changed = False
        for knob in allowed:
            best, best_fit = current, fitness(ev, current, train)
            for value in ev.knobs[knob]:
                candidate = tuple((k, value if k == knob else v) for k, v in current)
                fit = fitness(ev, candidate, train)
                if fit > best_fit:
                    best, best_fit = candidate, fit
            if best != current:
                current, changed = best, True
        if not changed:
            break
    return current


def cross_validate(ev: Evaluator, samples: list[str], allowed: list[str]) -> tuple[list, dict[str, str]]:
    held: list[tuple[int, dict[str, float]]] = []
    picks = {}
    for sid in samples:
        config = select(ev, [t for t in samples if t != sid], allowed)
        picks[sid] = label(config, ev.knobs)
        held += ev.rows(config)[sid]
    return held, picks


def by_category(rows: list[tuple[int, dict[str, float]]], categories: dict[int, str], metric: str) -> list[float]:
    return [mean([(c, r) for c, r in rows if c == cat], metric) for cat in categories] + [mean(rows, metric)]


# ---------------------------------------------------------------- main


def cv_main(args: Any, data: list[dict], load_sample: Any, score_fn: Any, bm25_tantivy: Any,
            minilm: Any, categories: dict[int, str]) -> None:
    from cerememory.embed import LocalEmbedder
    env = environment()
    started = now()
    load = LoadMonitor()
    embedder = CachedEmbedder(LocalEmbedder())
    knobs = knobs_of_engine()
    families = args.cv_families.split(",") if args.cv_families else list(FAMILIES)
    unknown = set(families) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown --cv-families {sorted(unknown)}; known: {sorted(FAMILIES)}")
    print(f"[cv] knobs {knobs}", flush=True)
    convs: dict[str, tuple[list, list]] = {}
    table: dict[str, dict[str, Any]] = {name: {"rows": [], "picks": {}} for name in ("bm25-tantivy", "rank_bm25",
                                                                                        "minilm")}
    for sample in data:
        turns, questions, _ = load_sample(sample, args.captions)
        convs[sample["sample_id"]] = (turns, questions)
        table["bm25-tantivy"]["rows"] += per_question(bm25_tantivy(turns, questions)[0], questions, score_fn)
        table["rank_bm25"]["rows"] += per_question(rank_bm25_baseline(turns, questions), questions, score_fn)
        table["minilm"]["rows"] += per_question(minilm(turns, questions, embedder)[0], questions, score_fn)
    samples = list(convs)
    work = Path(tempfile.mkdtemp(prefix="cm-locomo-cv-"))
    ev = Evaluator(convs, knobs, embedder, work, score_fn)
    try:
        table["defaults"] = {"rows": [r for sid in samples for r in ev.rows(ev.default())[sid]], "picks": {}}
        for family, members in FAMILIES.items():
            allowed = [k for k in members if k in knobs and len(knobs[k]) > 1]
            if allowed and family in families:
                held, picks = cross_validate(ev, samples, allowed)
                table[f"cv: {family}"] = {"rows": held, "picks": picks}
        if len(families) == len(FAMILIES):  # the whole grid: only worth it when every family runs
            held, picks = cross_validate(ev, samples, list(knobs))
            table["cv: all"] = {"rows": held, "picks": picks}
            chosen = select(ev, samples, list(knobs))
            table["chosen on all five (in-sample)"] = {"rows": [r for sid in samples for r in ev.rows(chosen)[sid]],
                                                       "picks": {"all": label(chosen, knobs)}}
    finally:
        ev.close()
        shutil.rmtree(work, ignore_errors=True)
    busy = load.others_cores()
    stem = "locomo_cv" if len(families) == len(FAMILIES) else "locomo_cv_" + "_".join(
        f.replace(" ", "_") for f in families)
    write_cv_report(args, env, table, categories, samples, sum(len(q) for _, q in convs.values()), knobs,
                    busy, now() - started, embedder.misses, len(ev.cache), stem)


def write_cv_report(args: Any, env: dict, table: dict, categories: dict[int, str], samples: list[str],
                    n_questions: int, knobs: dict[str, list[Any]], busy: float, elapsed: float,
                    misses: int, configs: int, stem: str = "locomo_cv") -> None:
    header = ["system", *[f"{c} {n}" for c, n in categories.items()], "overall"]
    lines = ["# LoCoMo, leave-one-conversation-out cross-validation", "",
             f"`{' '.join(['bench/locomo.py', *sys.argv[1:]])}` — {env_line(env)}", "",
             f"Conversations {', '.join(samples)}; {n_questions} questions of categories 1-4. Every "
             "tuned choice is selected on four conversations and scored on the fifth; the tables pool "
             "the five held-out scores. Selection is coordinate ascent from the shipped defaults "
             "(each knob in turn takes its best value on the four training conversations by "
             "recall_any@10, ties by nDCG@10, then the current value; one pass). `cv: <family>` "
             "tunes only that family's knobs, `cv: all` every knob (run only with every family). "
             "Knobs and values (first = shipped default): "
             + "; ".join(f"`{k}` {v}" for k, v in knobs.items())
             + f". {configs} configurations were evaluated in all.", ""]
    for metric in CV_METRICS:
        lines += [f"**{metric}, cross-validated**", "",
                  md_table(header, [(name, *(f"{v:.3f}" for v in by_category(t["rows"], categories, metric)))
                                    for name, t in table.items()]), ""]
    lines += ["**Settings chosen per held-out conversation**", ""]
    for name, t in table.items():
        if t["picks"]:
            lines.append(f"- {name}: " + "; ".join(f"{s}: `{p}`" for s, p in t["picks"].items()))
    lines += ["", f"Machine: 2 cores shared; other processes kept {busy:.2f} cores busy on average during "
              f"the run. Wall-clock {elapsed:.0f} s; {misses} texts embedded (the rest from the cache).", ""]
    report = "\n".join(lines)
    (args.out / f"{stem}.md").write_text(report)
    (args.out / f"{stem}.json").write_text(json.dumps({
        "env": env, "samples": samples, "questions": n_questions, "knobs": knobs,
        "others_busy_cores": busy, "elapsed_s": elapsed,
        "table": {name: {"picks": t["picks"],
                         **{m: dict(zip([*map(str, categories), "overall"],
                                        by_category(t["rows"], categories, m), strict=True))
                            for m in CV_METRICS}} for name, t in table.items()},
    }, indent=1, default=str))
    plot_cv(table, categories, args.out / f"{stem}.png")
    print(report)


def plot_cv(table: dict, categories: dict[int, str], path: Path) -> None:
    plt = pyplot()
    names = list(table)
    cats = [*categories.values(), "overall"]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(names)
    for n, name in enumerate(names):
        vals = by_category(table[name]["rows"], categories, "recall_any@10")
        ax.bar(np.arange(len(cats)) + n * width, vals, width, label=name)
    ax.set_xticks(np.arange(len(cats)) + 0.4 - width / 2, cats)
    ax.set_ylim(0, 1)
    ax.set_ylabel("recall_any@10 (cross-validated)")
    ax.set_title("LoCoMo dev, leave-one-conversation-out")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
