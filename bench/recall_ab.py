"""recall.query latency of two checkouts side by side, on a shared and busy machine.

    /work/venv/bin/python bench/recall_ab.py --a /path/to/old/checkout --b . [--n 100000]

Both checkouts open copies of one data directory (N synthetic records of bench/scale.py, text
plus a caller-supplied 384-d vector each, stored by checkout A; B rebuilds its full-text index on
open if its analyzer differs) in their own worker process, with their default settings. The
workers then answer the same queries (text plus embedding cue, reconsolidate=False, limit 10,
so the query embedding is excluded) in alternating rounds of 20, so that both see the same
load. Reports p50 / p95 of each and the ratio B / A, in wall-clock and in the worker process's
CPU time per query (which load stretches far less); writes nothing unless --out is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import LoadMonitor, clean_env, ms_stats, now  # noqa: E402
from scale import SEED, make_corpus, make_queries, query_vectors, unit_rows  # noqa: E402

ROUND = 20


def worker(data_dir: str, build: int) -> None:
    """Answer the driver's requests, one JSON line each: build, open, run a round, close."""
    import cerememory
    mem = None
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "build":
            texts = make_corpus(build)
            vectors = unit_rows(build, SEED)
            t0 = now()
            with cerememory.open(data_dir, semantic="off") as m:
                for start in range(0, build, 1000):
                    m.store_batch([{"content": {"blocks": [{"modality": "text", "text": t,
                                                            "embedding": vectors[start + j].tolist()}]}}
                                   for j, t in enumerate(texts[start:start + 1000])])
            reply: dict = {"build_s": now() - t0}
        elif req["op"] == "open":
            t0 = now()
            mem = cerememory.open(data_dir, semantic="off")
            reply = {"open_s": now() - t0, "repaired": list(mem.engine.repaired)}
        elif req["op"] == "round":
            assert mem is not None
            times, cpu = [], []
            for text, vec in zip(req["texts"], req["vectors"], strict=True):
                t0, c0 = now(), time.process_time()
                mem.recall(text, embedding=vec, limit=10, reconsolidate=False)
                times.append(now() - t0)
                cpu.append(time.process_time() - c0)
            reply = {"times": times, "cpu": cpu}
        else:
            if mem is not None:
                mem.close()
            reply = {}
        print(json.dumps(reply), flush=True)
        if req["op"] == "close":
            return


class Worker:
    def __init__(self, checkout: Path, data_dir: Path, n: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", str(data_dir), "--n", str(n)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, **req: object) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, help="checkout A (the reference)")
    ap.add_argument("--b", type=Path, help="checkout B (the change)")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--out", type=Path, help="write the figures here as JSON")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.n)
        return
    clean_env()
    work = Path(tempfile.mkdtemp(prefix="cm-recall-ab-"))
    try:
        builder = Worker(args.a, work / "a", args.n)
        built = builder.ask(op="build")
        builder.ask(op="close")
        shutil.copytree(work / "a", work / "b")
        texts = make_queries(args.queries)
        vectors = query_vectors(unit_rows(args.n, SEED), args.queries, SEED + 2).tolist()
        workers = {"A": Worker(args.a, work / "a", args.n), "B": Worker(args.b, work / "b", args.n)}
        opened = {k: w.ask(op="open") for k, w in workers.items()}
        for w in workers.values():  # warm-up
            w.ask(op="round", texts=texts[:ROUND], vectors=vectors[:ROUND])
        load = LoadMonitor()
        times: dict[str, list[float]] = {"A": [], "B": []}
        cpu: dict[str, list[float]] = {"A": [], "B": []}
        for start in range(0, args.queries, ROUND):
            order = ("A", "B") if (start // ROUND) % 2 == 0 else ("B", "A")
            for k in order:
                got = workers[k].ask(op="round", texts=texts[start:start + ROUND],
                                     vectors=vectors[start:start + ROUND])
                times[k] += got["times"]
                cpu[k] += got["cpu"]
        busy = load.others_cores()
        for w in workers.values():
            w.ask(op="close")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stats = {k: ms_stats(v) for k, v in times.items()}
    cpu_stats = {k: ms_stats(v) for k, v in cpu.items()}
    result = {"n": args.n, "queries": args.queries, "build_s": built["build_s"], "open": opened,
              "others_busy_cores": busy, "A": stats["A"], "B": stats["B"],
              "ratio_p50": stats["B"]["p50_ms"] / stats["A"]["p50_ms"],
              "ratio_p95": stats["B"]["p95_ms"] / stats["A"]["p95_ms"],
              # CPU time of the worker process per query (every thread): what load does not stretch
              "cpu_A": cpu_stats["A"], "cpu_B": cpu_stats["B"],
              "cpu_ratio_p50": cpu_stats["B"]["p50_ms"] / cpu_stats["A"]["p50_ms"]}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
