"""Scale benchmark: encode throughput, recall latency against bare primitives, open time, RSS.

    /work/venv/bin/python bench/scale.py            # N = 1k, 10k, 100k (~6-8 min on 2 cores)
    /work/venv/bin/python bench/scale.py --quick    # N = 1k, 10k, fewer queries (~1 min)
    /work/venv/bin/python bench/scale.py --sizes 1000,50000 --embed-sizes 1000

For every N, over the same synthetic records in one run:
- encode.batch (store_batch, chunks of 1000) records/s: text only (semantic off), text plus a
  caller-supplied 384-d unit embedding (semantic off), and text with the local MiniLM embedder
  (semantic on; only at --embed-sizes, embedding is slow on 2 cores).
- recall.query latency p50/p95 over --queries queries: text (BM25), embedding cue (cosine) and
  both, with reconsolidate=False and with the default (True), against a bare tantivy index of
  the same texts (default tokenizer, top 50 = the engine's candidate pool for limit 10) and a
  bare numpy cosine top-k (matrix @ q + argpartition, k = 50) over the same vectors.
- MiniLM query-embedding time (one query at a time), reported apart: recall latencies use
  embedding cues, so they exclude it.
- At the largest N: cerememory.open + close, and open to first recall, in fresh processes
  (median of 3), their peak RSS, and a cProfile of recall.query.

Writes bench/results/scale.md, scale.json, scale_latency.png, scale_throughput.png and
scale_profile.txt.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    RESULTS_DIR,
    LoadMonitor,
    clean_env,
    env_line,
    environment,
    md_table,
    ms_stats,
    now,
    peak_rss_mb,
    pyplot,
    rss_mb,
    verdict,
)

DIM = 384
CHUNK = 1000
LIMIT = 10
BARE_K = 50  # the engine's candidate pool for limit 10: max(limit * 5, 50)
SEED = 20260901
MODEL_LOAD_S: list[float] = []

# ---------------------------------------------------------------- synthetic data

NAMES = ("Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert "
         "Sybil Trent Victor Walter Yusuf Zara Priya Kenji Mateo Ingrid Tomasz Amara Lucas Mei "
         "Omar").split()
TOPICS = ("budget roadmap deploy migration incident review hiring onboarding invoice contract "
          "release backlog sprint outage dashboard pipeline database cache tokenizer embedding "
          "benchmark latency security audit compliance pricing launch design prototype survey "
          "interview vacation conference workshop training refactor vendor partnership forecast "
          "quarterly report retrospective demo feedback rollout experiment").split()
VERBS = ("discussed reviewed postponed approved rejected proposed finished started debugged "
         "planned cancelled shipped estimated questioned summarised documented escalated "
         "measured negotiated celebrated").split()
PLACES = ("Berlin Lisbon Tokyo Nairobi Toronto Austin Oslo Seoul Lima Dublin the office "
          "the cafe home the lab the warehouse").split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
COMMON = ("the a and to of in for with about on we it was that this they after before "
          "because but not very really new old next last first final small large quick slow "
          "team plan idea issue note call meeting email thread decision question answer "
          "problem result number week month year morning evening").split()
TEMPLATES = (
    "{n1} {v} the {t} with {n2} in {p} on {d}",
    "{n1} said the {t} {t2} is {adj} and needs {num} more days",
    "Meeting note: {n1} and {n2} {v} the {t} plan; budget {num} euros",
    "{n1} {v} {num} {t} tickets before the {t2} {w}",
    "On {d} {n1} {v} the {t2} because of the {t} {w} {w2}",
    "Reminder from {n1}: {t} {t2} review at {p} next {d}",
)


def _zipf_words(rng: np.random.Generator, size: int) -> list[str]:
    """A long tail of pseudo-words so the vocabulary and postings look like real text."""
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "ve", "zo", "pa", "shi", "gu", "de", "fo", "ri"]
    return ["".join(rng.choice(syll, size=rng.integers(2, 4))) + str(i % 7 or "")
            for i in range(size)]


def make_corpus(n: int, seed: int = SEED) -> list[str]:
    rng = np.random.default_rng(seed)
    tail = _zipf_words(rng, 5000)
    ranks = np.minimum(rng.zipf(1.3, size=n * 4), len(tail)) - 1
    out = []
    for i in range(n):
        tpl = TEMPLATES[i % len(TEMPLATES)]
        r = rng.integers(0, 1 << 30, size=12)
        text = tpl.format(
            n1=NAMES[r[0] % len(NAMES)], n2=NAMES[r[1] % len(NAMES)], v=VERBS[r[2] % len(VERBS)],
            t=TOPICS[r[3] % len(TOPICS)], t2=TOPICS[r[4] % len(TOPICS)],
            p=PLACES[r[5] % len(PLACES)], d=DAYS[r[6] % len(DAYS)], num=int(r[7] % 5000),
            adj=COMMON[r[8] % len(COMMON)], w=COMMON[r[9] % len(COMMON)],
            w2=COMMON[r[10] % len(COMMON)],
        )
        extra = " ".join(tail[j] for j in ranks[4 * (i % n): 4 * (i % n) + int(r[11] % 4)])
        out.append(f"{text} {extra}".strip() + ".")
    return out


def make_queries(count: int, seed: int = SEED + 1) -> list[str]:
    rng = np.random.default_rng(seed)
    forms = (
        "what did {n} decide about the {t}",
        "{t} {t2} {n}",
        "when is the {t} review",
        "who {v} the {t} in {p}",
        "{n} {t} budget",
        "why was the {t} {v}",
    )
    out = []
    for i in range(count):
        r = rng.integers(0, 1 << 30, size=6)
        out.append(forms[i % len(forms)].format(
            n=NAMES[r[0] % len(NAMES)], t=TOPICS[r[1] % len(TOPICS)], t2=TOPICS[r[2] % len(TOPICS)],
            v=VERBS[r[3] % len(VERBS)], p=PLACES[r[4] % len(PLACES)]))
    return out


def unit_rows(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, DIM), dtype=np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def query_vectors(matrix: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Noisy copies of stored rows, so every query has a true nearest neighbour."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(matrix), size=count)
    q = matrix[picks] + 0.6 * rng.standard_normal((count, DIM), dtype=np.float32) / np.sqrt(DIM)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------- engine and bare primitives


def ingest(mem, texts: list[str], vectors: np.ndarray | None = None, infer: bool = False) -> dict:
    """store_batch in chunks of CHUNK; returns records/s overall and per chunk. `infer` links
    consecutive records (a chain of sequential associations for activation to spread along)."""
    chunk_rates, total = [], 0.0
    for start in range(0, len(texts), CHUNK):
        part = texts[start:start + CHUNK]
        records = []
        for j, text in enumerate(part):
            block = {"modality": "text", "text": text}
            if vectors is not None:
                block["embedding"] = vectors[start + j].tolist()
            records.append({"content": {"blocks": [block]}, "metadata": {"seq": start + j}})
        t0 = now()
        mem.store_batch(records, infer_associations=infer)
        dt = now() - t0
        total += dt
        chunk_rates.append(len(part) / dt)
    return {"records": len(texts), "seconds": total, "records_per_s": len(texts) / total,
            "chunk_rates": chunk_rates,
            "last_chunk_rate": float(np.median(chunk_rates[-max(1, len(chunk_rates) // 10):]))}


class BareTantivy:
    """A plain tantivy index of the same texts: default tokenizer, one field, stored u64 id."""

    def __init__(self, path: Path, texts: list[str]) -> None:
        import tantivy
        b = tantivy.SchemaBuilder()
        b.add_unsigned_field("id", stored=True)
        b.add_text_field("body", stored=False)
        self.schema = b.build()
        self.index = tantivy.Index(self.schema, path=str(path))
        writer = self.index.writer(heap_size=50_000_000, num_threads=1)
        for i, text in enumerate(texts):
            writer.add_document(tantivy.Document(id=i, body=text))
        writer.commit()
        writer.wait_merging_threads()
        self.index.reload()
        self.searcher = self.index.searcher()

    def search(self, text: str, k: int = BARE_K) -> list[tuple[int, float]]:
        import re
        query, _ = self.index.parse_query_lenient(" ".join(re.findall(r"\w+", text)), ["body"])
        searcher = self.searcher
        return [(searcher.doc(a)["id"][0], s) for s, a in searcher.search(query, k).hits]


def bare_cosine(matrix: np.ndarray, q: np.ndarray, k: int = BARE_K) -> list[tuple[int, float]]:
    scores = matrix @ q
    top = np.argpartition(-scores, k - 1)[:k]
    top = top[np.argsort(-scores[top])]
    return [(int(i), float(scores[i])) for i in top]


def interleaved(calls: dict, count: int, seed: int, warmup: int = 10) -> dict[str, dict]:
    """Time every call on query i before moving to query i+1, in a shuffled order per query."""
    rng = np.random.default_rng(seed)
    names = list(calls)
    for i in range(min(warmup, count)):
        for name in names:
            calls[name](i)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(count):
        for j in rng.permutation(len(names)):
            name = names[j]
            t0 = now()
            calls[name](i)
            samples[name].append(now() - t0)
    return {name: {**ms_stats(v), "_samples": v} for name, v in samples.items()}


def timed(fn, args_list, warmup: int = 10) -> list[float]:
    for a in args_list[:warmup]:
        fn(*a)
    out = []
    for a in args_list:
        t0 = now()
        fn(*a)
        out.append(now() - t0)
    return out


# ---------------------------------------------------------------- open time (fresh processes)

OPEN_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import cerememory
import cerememory.engine  # the public names load lazily; count the engine's import here, not in open
t_import = time.perf_counter() - t0
data_dir, query = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
mem = cerememory.open(data_dir, semantic="off")
t_opened = time.perf_counter() - t0
repaired = list(mem.engine.repaired)
mem.close()
t_open_close = time.perf_counter() - t0
t0 = time.perf_counter()
mem = cerememory.open(data_dir, semantic="off")
hits = mem.recall(query, limit=10, reconsolidate=False)
t_first = time.perf_counter() - t0
n = mem.stats().total_records
mem.close()
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork + exec
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
peak = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"import_s": t_import, "open_s": t_opened, "open_close_s": t_open_close,
                  "open_first_recall_s": t_first, "hits": len(hits.memories), "records": n,
                  "repaired": repaired, "peak_rss_mb": peak}))
"""


def open_bench(data_dir: Path, query: str, reps: int = 3) -> dict:
    runs = []
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", OPEN_CHILD, str(data_dir), query],
                             capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = ("import_s", "open_s", "open_close_s", "open_first_recall_s", "peak_rss_mb")
    med = {k: float(np.median([r[k] for r in runs])) for k in keys}
    med.update(records=runs[0]["records"], repaired=runs[0]["repaired"], runs=runs)
    return med


# ---------------------------------------------------------------- one size


def warm_up(work: Path) -> None:
    """First use in a process pays one-off costs (schema building, library init): not measured."""
    import cerememory
    with cerememory.open(work / "warmup", semantic="off") as mem:
        ingest(mem, make_corpus(200, seed=1), unit_rows(200, 1))
        for q in make_queries(20, seed=2):
            mem.recall(q, limit=LIMIT)
    shutil.rmtree(work / "warmup", ignore_errors=True)


def run_size(n: int, args, work: Path, queries: list[str]) -> dict:
    import cerememory
    res: dict = {"n": n}
    texts = make_corpus(n)
    vectors = unit_rows(n, SEED + n)
    qvecs = query_vectors(vectors, len(queries), SEED + 7 * n)
    qlists = [q.tolist() for q in qvecs]

    # encode: text only, semantic off
    d_text = work / f"text_{n}"
    with cerememory.open(d_text, semantic="off") as mem:
        res["encode_text"] = ingest(mem, texts)
    print(f"[{n}] encode text only: {res['encode_text']['records_per_s']:,.0f} rec/s", flush=True)
    shutil.rmtree(d_text, ignore_errors=True)

    # encode: text + caller vectors, semantic off; this engine serves the recall series
    d_vec = work / f"vec_{n}"
    mem = cerememory.open(d_vec, semantic="off")
    res["encode_text_vec"] = ingest(mem, texts, vectors)
    print(f"[{n}] encode text+vector: {res['encode_text_vec']['records_per_s']:,.0f} rec/s", flush=True)
    res["rss_after_ingest_mb"] = rss_mb()

    # bare primitives over the same data
    bare_dir = work / f"bare_{n}"
    bare_dir.mkdir()
    t0 = now()
    bare = BareTantivy(bare_dir, texts)
    res["bare_tantivy_build_s"] = now() - t0
    # engine series; each block interleaves the bare primitives with the engine, query by
    # query in a shuffled order, so both see the same machine load and cache state
    def rec(text=None, emb=None, rc=False):
        return mem.recall(text, embedding=emb, limit=LIMIT, reconsolidate=rc)

    lat: dict[str, dict] = {}
    for rc in (False, True):
        tag = "rc" if rc else "norc"
        # reopen, so both blocks start alike: the record-body cache is empty after open (it is
        # filled by writes otherwise), and the first block must not warm it for the second
        mem.close()
        mem = cerememory.open(d_vec, semantic="off")
        calls = {
            f"bare_tantivy_{tag}": lambda i: bare.search(queries[i]),
            f"bare_numpy_{tag}": lambda i: bare_cosine(vectors, qvecs[i]),
            f"text_{tag}": lambda i, rc=rc: rec(text=queries[i], rc=rc),
            f"emb_{tag}": lambda i, rc=rc: rec(emb=qlists[i], rc=rc),
            f"both_{tag}": lambda i, rc=rc: rec(text=queries[i], emb=qlists[i], rc=rc),
        }
        lat.update(interleaved(calls, len(queries), seed=n + rc))
    for key in ("bare_tantivy", "bare_numpy"):  # one figure per primitive: the pooled samples
        lat[key] = ms_stats(lat[f"{key}_norc"]["_samples"] + lat[f"{key}_rc"]["_samples"])
    for v in lat.values():
        v.pop("_samples", None)
    res["latency"] = lat
    res["rss_after_recall_mb"] = rss_mb()  # with the int8 copy a large vector group makes at its second search
    # sanity: the engine's cosine top-1 equals the bare one
    agree = 0
    for v, q in zip(qlists[:50], qvecs[:50], strict=True):
        top = mem.recall(embedding=v, limit=1, reconsolidate=False).memories[0].record.metadata["seq"]
        agree += top == bare_cosine(vectors, q, 1)[0][0]
    res["cosine_top1_agreement"] = agree / 50
    print(f"[{n}] p50 ms: " + ", ".join(f"{k} {v['p50_ms']:.2f}" for k, v in lat.items()), flush=True)

    if n == max(args.sizes):
        res["profile"] = profile_recall(mem, queries, qlists)
        res["decay_tick"] = decay_tick_rate(mem)
        print(f"[{n}] decay_tick: {res['decay_tick']['records_per_s']:,.0f} records/s", flush=True)
    mem.close()
    if n == max(args.sizes):
        res["activation"] = activation_depths(work / f"chain_{n}", texts, queries)
        print(f"[{n}] activation p50 ms: " + ", ".join(
            f"depth {d} {v['p50_ms']:.2f}" for d, v in res["activation"].items()), flush=True)

    if n == max(args.sizes):
        res["open"] = open_bench(d_vec, queries[0])
        print(f"[{n}] open {res['open']['open_s']:.2f}s, open+close {res['open']['open_close_s']:.2f}s, "
              f"open->first recall {res['open']['open_first_recall_s']:.2f}s", flush=True)
    shutil.rmtree(d_vec, ignore_errors=True)
    shutil.rmtree(bare_dir, ignore_errors=True)

    return res


def run_minilm(res: dict, args, work: Path, queries: list[str]) -> None:
    """The semantic-on series for one size. Run after every other series: once torch is loaded
    in a process, plain encodes in it measured ~30% slower on this 2-core machine."""
    import cerememory
    n = res["n"]
    texts = make_corpus(n)
    d_emb = work / f"emb_{n}"
    with cerememory.open(d_emb, semantic="on") as mem:
        t0 = now()
        mem.engine.core.embedder.load()  # model load is reported apart, not as throughput
        MODEL_LOAD_S.append(now() - t0)
        res["encode_minilm"] = ingest(mem, texts)
        print(f"[{n}] encode with MiniLM: {res['encode_minilm']['records_per_s']:,.0f} rec/s",
              flush=True)
        res["latency"]["text_e2e_minilm"] = ms_stats(timed(
            lambda q: mem.recall(q, limit=LIMIT, reconsolidate=False),
            [(q,) for q in queries[: args.e2e_queries]], warmup=5))
    shutil.rmtree(d_emb, ignore_errors=True)


def decay_tick_rate(mem, reps: int = 5) -> dict:
    """lifecycle.decay_tick over every record; time moves between ticks, so each tick rewrites
    every record's fidelity (the worst case)."""
    n = mem.stats().total_records
    seconds = []
    for _ in range(reps):
        t0 = now()
        out = mem.decay_tick()
        seconds.append(now() - t0)
    median = float(np.median(seconds))
    return {"records": n, "median_s": median, "records_per_s": n / median, "updated": out.records_updated}


ACTIVATION_DEPTHS = (0, 2, 4)


def activation_depths(data_dir: Path, texts: list[str], queries: list[str]) -> dict:
    """recall.query (text cue) at activation depth 0, 2 and 4, interleaved, over records linked
    in a chain of sequential associations (store_batch with infer_associations)."""
    import cerememory
    with cerememory.open(data_dir, semantic="off") as mem:
        ingest(mem, texts, infer=True)
        calls = {d: (lambda i, d=d: mem.recall(queries[i], limit=LIMIT, activation_depth=d,
                                                reconsolidate=False)) for d in ACTIVATION_DEPTHS}
        lat = interleaved(calls, len(queries), seed=len(texts))
        traces = [mem.recall(q, limit=LIMIT, activation_depth=4, reconsolidate=False).activation_trace
                  for q in queries[:50]]
        reached = sum(len(t.gains) for t in traces if t is not None) / 50
    shutil.rmtree(data_dir, ignore_errors=True)
    for v in lat.values():
        v.pop("_samples", None)
    lat[4]["activated_results_per_query"] = reached
    return lat


def profile_recall(mem, queries: list[str], qlists: list[list[float]]) -> dict:
    prof = cProfile.Profile()
    prof.enable()
    for q, v in zip(queries, qlists, strict=True):
        mem.recall(q, embedding=v, limit=LIMIT, reconsolidate=False)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(45)
    (RESULTS_DIR / "scale_profile.txt").write_text(
        f"cProfile of {len(queries)} recall.query calls (text + embedding cue, limit {LIMIT}, "
        f"reconsolidate=False) at the largest N\n\n" + text.getvalue())
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append({"func": f"{Path(file).name}:{line}({func})", "calls": nc,
                     "tottime_ms_per_query": tt / len(queries) * 1000,
                     "cumtime_ms_per_query": ct / len(queries) * 1000})
    total = sum(r["tottime_ms_per_query"] for r in rows)
    rows.sort(key=lambda r: -r["cumtime_ms_per_query"])
    return {"total_ms_per_query": total, "top_cumulative": rows[:40],
            "top_tottime": sorted(rows, key=lambda r: -r["tottime_ms_per_query"])[:15]}


def query_embedding_time(queries: list[str]) -> dict:
    from cerememory.embed import LocalEmbedder
    emb = LocalEmbedder()
    t0 = now()
    emb.load()
    load = MODEL_LOAD_S[0] if MODEL_LOAD_S else now() - t0  # the first load in this process
    times = timed(lambda q: emb.embed([q]), [(q,) for q in queries], warmup=5)
    t0 = now()
    emb.embed(queries)
    batch = now() - t0
    from cerememory.embed.local import _bundled_model_path
    from cerememory.embed.minilm import MiniLM

    t0 = now()
    MiniLM(Path(_bundled_model_path()))  # what a query pays: numpy forward pass, no torch
    numpy_load = now() - t0
    return {"model_load_s": load, "numpy_load_s": numpy_load, **ms_stats(times),
            "batch_queries_per_s": len(queries) / batch}


# ---------------------------------------------------------------- report


SERIES = [("text", "text (BM25)"), ("emb", "embedding (cosine)"), ("both", "text + embedding")]


def bare_p(lat: dict, kind: str, key: str, tag: str) -> float:
    """The bare figure measured in the same interleaved block as the engine series."""
    t, v = lat[f"bare_tantivy_{tag}"][key], lat[f"bare_numpy_{tag}"][key]
    return t if kind == "text" else v if kind == "emb" else t + v


def write_report(results: list[dict], qemb: dict | None, args, env: dict) -> str:
    big = results[-1]
    lines = ["# Scale benchmark", "",
             f"`{' '.join(['bench/scale.py', *sys.argv[1:]])}` — {env_line(env)}", "",
             f"Synthetic records (templated sentences with names, topics, numbers and a Zipf tail "
             f"of pseudo-words, ~12 words each, seed {SEED}); recall limit {LIMIT}; "
             f"{args.queries} queries per series after 10 warm-up queries; numpy BLAS threads: "
             f"{args.blas_threads or 'library default'}; bare primitives return "
             f"the top {BARE_K} (the engine's candidate pool). Embedding cues are caller-supplied "
             f"random 384-d unit vectors (query = a stored row plus noise), so latencies exclude "
             f"query embedding.", ""]

    # targets
    t = []
    n_big = big["n"]
    at = f"N={n_big:,}"
    for rc, rc_name in ((False, "reconsolidate=False"), (True, "reconsolidate=True (default)")):
        tag = "rc" if rc else "norc"
        for kind, name in SERIES:
            eng = big["latency"][f"{kind}_{tag}"]["p50_ms"]
            ratio = eng / bare_p(big["latency"], kind, "p50_ms", tag)
            t.append((f"recall.query {name}, {rc_name}: p50 / bare p50", at, f"{ratio:.1f}×", "≤ 2×",
                      verdict(ratio <= 2)))
    for rc, rc_name in ((False, "reconsolidate=False"), (True, "reconsolidate=True (default)")):
        tag = "rc" if rc else "norc"
        for kind, name in SERIES:
            eng = big["latency"][f"{kind}_{tag}"]["p50_ms"]
            ok = eng <= 10 if n_big >= 100_000 else None
            t.append((f"recall.query {name}, {rc_name}: p50", at, f"{eng:.2f} ms", "≤ 10 ms at 100k",
                      verdict(ok) if ok is not None else "n/a (N < 100k)"))
    for r in results:
        rate = r["encode_text"]["records_per_s"]
        t.append(("encode.batch records/s, no embedder (text only)", f"N={r['n']:,}", f"{rate:,.0f}",
                  "≥ 10,000/s", verdict(rate >= 10_000)))
    if "decay_tick" in big:
        rate = big["decay_tick"]["records_per_s"]
        t.append(("lifecycle.decay_tick records/s (every record rewritten)", at, f"{rate:,.0f}",
                  "≥ 200,000/s at 100k", verdict(rate >= 200_000) if n_big >= 100_000 else "n/a (N < 100k)"))
    if "activation" in big:
        act = big["activation"]
        for depth in ACTIVATION_DEPTHS[1:]:
            ratio = act[depth]["p50_ms"] / act[0]["p50_ms"]
            t.append((f"recall.query text, activation depth {depth}: p50 / depth 0 p50", at, f"{ratio:.2f}×",
                      "reported", "—"))
    if "open" in big:
        o = big["open"]
        ok = o["open_close_s"] <= 2 if n_big >= 100_000 else None
        t.append((f"open + close a {o['records']:,}-record dir (median of 3)", at,
                  f"{o['open_close_s']:.2f} s", "≤ 2 s at 100k",
                  verdict(ok) if ok is not None else "n/a (N < 100k)"))
    lines += ["## Targets", "", md_table(["measure", "at", "value", "target", "result"], t), ""]

    # latency table
    rows = []
    for r in results:
        lat = r["latency"]
        for key, label in [("bare_tantivy", "bare tantivy top-50"), ("bare_numpy", "bare numpy cosine top-50")]:
            rows.append((f"{r['n']:,}", label, lat[key]["p50_ms"], lat[key]["p95_ms"], "", ""))
        for kind, name in SERIES:
            for tag, rc_name in (("norc", "rc=False"), ("rc", "rc=True")):
                s = lat[f"{kind}_{tag}"]
                rows.append((f"{r['n']:,}", f"engine {name}, {rc_name}", s["p50_ms"], s["p95_ms"],
                             f"{s['p50_ms'] / bare_p(lat, kind, 'p50_ms', tag):.1f}×",
                             f"{s['p95_ms'] / bare_p(lat, kind, 'p95_ms', tag):.1f}×"))
        if "text_e2e_minilm" in lat:
            s = lat["text_e2e_minilm"]
            rows.append((f"{r['n']:,}", "engine text, semantic on (MiniLM query embedding included)",
                         s["p50_ms"], s["p95_ms"], "", ""))
    lines += ["## recall.query latency", "",
              "Ratios are engine / bare (for text + embedding: / (tantivy + numpy)), measured in the "
              "same process over the same data; each block (rc=False, rc=True) interleaves the bare "
              "primitives with the engine query by query, and ratios use the bare figures of the "
              "same block. Bare rows pool both blocks. The engine is reopened before each block, "
              "so its record-body cache starts empty and is warmed only by the 10 warm-up queries "
              "and the block itself.", "",
              md_table(["N", "series", "p50 ms", "p95 ms", "p50 ratio", "p95 ratio"], rows), "",
              "![latency](scale_latency.png)", ""]
    if qemb:
        lines += [f"MiniLM query embedding (cerememory.embed.LocalEmbedder, one query per call, "
                  f"{qemb['n']} queries): p50 {qemb['p50_ms']:.1f} ms, p95 {qemb['p95_ms']:.1f} ms; "
                  f"batched {qemb['batch_queries_per_s']:.0f} queries/s. Loading, once per process: "
                  f"{qemb.get('numpy_load_s', 0):.2f} s for the numpy forward pass that embeds queries "
                  f"and batches of up to 16 texts, {qemb['model_load_s']:.1f} s for sentence-transformers "
                  f"(torch), used for larger batches. Add the per-query time to the text-query "
                  f"latencies above for a semantic-on engine.", ""]
    agree = ", ".join(f"N={r['n']:,}: {r['cosine_top1_agreement']:.0%}" for r in results)
    lines += [f"Engine cosine top-1 = bare numpy top-1 on 50 queries: {agree}.", ""]

    # throughput
    rows = []
    for r in results:
        for key, label in [("encode_text", "text, semantic off"),
                           ("encode_text_vec", "text + caller 384-d vector, semantic off"),
                           ("encode_minilm", "text, semantic on (MiniLM embeds on store)")]:
            if key in r:
                e = r[key]
                rows.append((f"{r['n']:,}", label, e["records_per_s"], e["last_chunk_rate"], e["seconds"]))
    lines += ["## encode.batch throughput (store_batch, chunks of 1000)", "",
              md_table(["N", "records", "records/s", "records/s, last 10% of chunks", "seconds"], rows),
              "", "![throughput](scale_throughput.png)", ""]

    if "activation" in big:
        act = big["activation"]
        lines += ["## Dynamics", "",
                  f"decay_tick over {big['decay_tick']['records']:,} records: median "
                  f"{big['decay_tick']['median_s'] * 1000:.0f} ms of 5 ticks = "
                  f"{big['decay_tick']['records_per_s']:,.0f} records/s (numpy over the RAM heads, one "
                  f"DuckDB batch write of the changed rows).", "",
                  "recall.query with a text cue at activation depth 0, 2 and 4 (interleaved, "
                  "reconsolidate=False), over the same records stored with infer_associations, so each "
                  f"record has a sequential link to its neighbours; at depth 4 activation reached "
                  f"{act[4]['activated_results_per_query']:.1f} of the {LIMIT} results per query "
                  "(neighbours in this synthetic corpus are unrelated sentences, so activation rarely "
                  "lifts one into the top 10: these rows measure its cost; bench/locomo.py measures "
                  "its effect on linked conversation turns).", "",
                  md_table(["activation depth", "p50 ms", "p95 ms", "p50 / depth 0"],
                           [(d, act[d]["p50_ms"], act[d]["p95_ms"], f"{act[d]['p50_ms'] / act[0]['p50_ms']:.2f}×")
                            for d in ACTIVATION_DEPTHS]), ""]
    if "open" in big:
        o = big["open"]
        lines += ["## Opening a data dir", "",
                  f"Fresh process per run, {o['records']:,} records with text and 384-d vectors, "
                  f"median of 3 (semantic off, so no model load):", "",
                  md_table(["measure", "value"], [
                      ("import cerememory", f"{o['import_s']:.2f} s"),
                      ("cerememory.open", f"{o['open_s']:.2f} s"),
                      ("cerememory.open + close", f"{o['open_close_s']:.2f} s"),
                      ("open to first recall returned", f"{o['open_first_recall_s']:.2f} s"),
                      ("peak RSS of that process", f"{o['peak_rss_mb']:.0f} MB"),
                      ("indexes repaired on open", ", ".join(o["repaired"]) or "none"),
                  ]), ""]
    lines += ["## Memory", "", md_table(["N", "RSS after ingest (MB)", "RSS after the recall series (MB)"],
                                        [(f"{r['n']:,}", r["rss_after_ingest_mb"], r.get("rss_after_recall_mb", ""))
                                         for r in results]),
              "", "From 32,768 vectors the index keeps an int8 copy of them beside the float32 rows, made at "
              "the second vector search (N=100,000, 384-d: 38 MB, against 154 MB of float32). The recall "
              "series column includes it, and also the bare tantivy index, the engine reopened twice and "
              "its record-body cache.",
              "", f"Peak RSS of the benchmark process (everything, including MiniLM): "
              f"{peak_rss_mb():.0f} MB.", ""]
    if "profile" in big:
        p = big["profile"]
        rows = [(r["func"], r["calls"] // args.queries if r["calls"] >= args.queries else r["calls"],
                 r["tottime_ms_per_query"], r["cumtime_ms_per_query"])
                for r in p["top_tottime"][:12]]
        lines += ["## Profile of recall.query at the largest N", "",
                  f"cProfile, text + embedding cue, reconsolidate=False, {args.queries} queries; "
                  f"ms per query (profiling overhead inflates the total: "
                  f"{p['total_ms_per_query']:.1f} ms/query). Full listing: scale_profile.txt.", "",
                  md_table(["function (by own time)", "calls/query", "tottime ms", "cumtime ms"], rows), ""]
    return "\n".join(lines)


def plots(results: list[dict]) -> None:
    plt = pyplot()
    ns = [r["n"] for r in results]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"bare_tantivy": ("bare tantivy", "k--"), "bare_numpy": ("bare numpy cosine", "k:"),
              "text_norc": ("engine text", "C0-o"), "emb_norc": ("engine embedding", "C1-o"),
              "both_norc": ("engine text+embedding", "C2-o"), "text_rc": ("engine text, rc", "C0-.x"),
              "emb_rc": ("engine embedding, rc", "C1-.x"), "both_rc": ("engine text+emb, rc", "C2-.x")}
    for key, (label, style) in styles.items():
        ax.plot(ns, [r["latency"][key]["p50_ms"] for r in results], style, label=label)
    ax.axhline(10, color="red", lw=0.8, alpha=0.6, label="10 ms target")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records (N)")
    ax.set_ylabel("p50 latency (ms)")
    ax.set_title("recall.query p50 vs N (rc = reconsolidate=True)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "scale_latency.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = [("encode_text", "text, semantic off"), ("encode_text_vec", "text + caller vector"),
            ("encode_minilm", "semantic on (MiniLM)")]
    width = 0.8 / len(keys)
    for j, (key, label) in enumerate(keys):
        xs = [i + j * width for i, r in enumerate(results) if key in r]
        ys = [r[key]["records_per_s"] for r in results if key in r]
        if xs:
            bars = ax.bar(xs, ys, width, label=label)
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.axhline(10_000, color="red", lw=0.8, alpha=0.6, label="10,000/s target (no embedder)")
    ax.set_xticks([i + width for i in range(len(results))], [f"N={n:,}" for n in ns])
    ax.set_yscale("log")
    ax.set_ylabel("records/s")
    ax.set_title("encode.batch throughput (chunks of 1000)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=4)
    fig.tight_layout()
    fig.savefig(RESULTS_DIR / "scale_throughput.png", dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", help="comma-separated N (default 1000,10000,100000; --quick 1000,10000)")
    ap.add_argument("--embed-sizes", help="N at which to measure MiniLM encode (default 1000,10000; "
                    "--quick 1000; 'none' to skip)")
    ap.add_argument("--queries", type=int, help="queries per latency series (default 200; --quick 100)")
    ap.add_argument("--e2e-queries", type=int, default=50,
                    help="text queries for the semantic-on end-to-end series")
    ap.add_argument("--quick", action="store_true", help="smoke run, about a minute")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS threads for numpy, engine and bare alike (default 1: stable on a shared "
                    "2-core machine; 0 = the library default)")
    ap.add_argument("--workdir", help="where to create data dirs (default: a temp dir)")
    args = ap.parse_args()
    clean_env()
    default_sizes = "1000,10000" if args.quick else "1000,10000,100000"
    args.sizes = sorted(int(x) for x in (args.sizes or default_sizes).split(","))
    if args.blas_threads > 0:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=args.blas_threads, user_api="blas")
    embed = args.embed_sizes or ("1000" if args.quick else "1000,10000")
    embed_sizes = set() if embed == "none" else {int(x) for x in embed.split(",")}
    args.queries = args.queries or (100 if args.quick else 200)
    if args.quick:
        args.e2e_queries = min(args.e2e_queries, 30)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    env = environment()
    queries = make_queries(args.queries)
    work = Path(tempfile.mkdtemp(prefix="cm-scale-", dir=args.workdir))
    started = now()
    load = LoadMonitor()
    try:
        warm_up(work)
        results = []
        for n in args.sizes:
            load_n = LoadMonitor()
            results.append(run_size(n, args, work, queries))
            results[-1]["other_load_cores"] = load_n.others_cores()
        for res in results:
            if res["n"] in embed_sizes:
                run_minilm(res, args, work, queries)
        qemb = query_embedding_time(queries[:100]) if embed_sizes else None
        other = load.others_cores()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    plots(results)
    report = write_report(results, qemb, args, env)
    per_n = ", ".join(f"N={r['n']:,}: {r['other_load_cores']:.2f}" for r in results)
    report += (f"\nWall-clock for the whole run: {now() - started:.0f} s. CPU used by other processes "
               f"during the run (cores, of {env['cpus']}): {other:.2f} on average ({per_n}); figures "
               f"measured under load are noisier, ratios less so (interleaved).\n")
    (RESULTS_DIR / "scale.md").write_text(report)
    for r in results:
        for key in ("encode_text", "encode_text_vec", "encode_minilm"):
            if key in r:
                r[key]["chunk_rates"] = [round(x, 1) for x in r[key]["chunk_rates"]]
    (RESULTS_DIR / "scale.json").write_text(json.dumps(
        {"env": env, "args": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
         "results": results, "query_embedding": qemb}, indent=1, default=str))
    print(report)


if __name__ == "__main__":
    main()
