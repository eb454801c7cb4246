"""Vector search p50 with numpy's default BLAS threads against BLAS pinned to one thread.

    python bench/vector_threads.py --before /tmp/base --n 100000 --rounds 3

The engine scans a large matrix in slices, one per core, itself; BLAS threads of its own then
compete with those slices for the same cores. For each round, fresh processes search the same
N 384-d unit vectors (`VectorIndex.search`, top 50, 200 queries after 20 warm-up ones) three
ways: the `--before` source tree with the library's default thread count, the same tree with
BLAS pinned to one thread (threadpoolctl), and this checkout with its default (the engine's own
policy). Writes bench/results/vector_threads.md and vector_threads.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_parser, median_ratio, pick, run_tree  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

CHILD = r"""
import json, sys, time, uuid
import numpy as np

n, pin = int(sys.argv[1]), sys.argv[2] == "pin"
if pin:
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")
from cerememory.index.vectors import VectorIndex
rng = np.random.default_rng(20260901)
matrix = rng.standard_normal((n, 384)).astype(np.float32)
matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
index = VectorIndex()
index.add([uuid.UUID(int=i + 1) for i in range(n)], [0] * n, matrix)
queries = matrix[rng.integers(0, n, 220)] + 0.05 * rng.standard_normal((220, 384)).astype(np.float32)
for q in queries[:20]:
    index.search(q, 50)
lat = []
for q in queries[20:]:
    t = time.perf_counter()
    index.search(q, 50)
    lat.append(time.perf_counter() - t)
from threadpoolctl import threadpool_info
blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
print(json.dumps({"p50_ms": 1000 * float(np.median(lat)), "p95_ms": 1000 * float(np.percentile(lat, 95)),
                  "blas_threads": blas}))
"""

WAYS = (("before, default threads", "before", "default"), ("before, pinned to 1", "before", "pin"),
        ("after, default (engine policy)", "after", "default"))


def run(tree: Path, n: int, pin: str) -> dict:
    return run_tree(tree, CHILD, str(n), pin, drop=[k for k in os.environ if k.endswith("_NUM_THREADS")])


def main() -> None:
    parser = ab_parser(__doc__, rounds=3)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": HERE.parent}
    rows = []
    for r in range(args.rounds):
        for label, tree, pin in WAYS:
            load = os.getloadavg()[0]
            rows.append({"round": r, "way": label, "load1": load, **run(trees[tree], args.n, pin)})
            print(json.dumps(rows[-1]), flush=True)
    lines = ["# Vector search and BLAS threads", "",
             f"`bench/vector_threads.py --n {args.n} --rounds {args.rounds}`; {args.n:,} 384-d unit vectors, "
             f"{os.cpu_count()} cores shared with other work (1-minute load average per run in the last column); "
             "`VectorIndex.search` top 50, 200 queries per run, fresh process per run, the three ways "
             "alternating.", "",
             "| round | way | BLAS threads | p50 ms | p95 ms | p50 / pinned p50 | load |",
             "|---|---|---|---|---|---|---|"]
    for r in range(args.rounds):
        pinned = pick(rows, round=r, way=WAYS[1][0])["p50_ms"]
        for label, _, _ in WAYS:
            x = pick(rows, round=r, way=label)
            lines.append(f"| {r + 1} | {label} | {x['blas_threads']} | {x['p50_ms']:.2f} | {x['p95_ms']:.2f} | "
                         f"{x['p50_ms'] / pinned:.2f}× | {x['load1']:.1f} |")
    for label, _, _ in WAYS:
        ratio = median_ratio(rows, "p50_ms", {"way": label}, {"way": WAYS[1][0]})
        lines.append(f"| median | {label} | | | | {ratio:.2f}× | |")
    RESULTS.joinpath("vector_threads.md").write_text("\n".join(lines) + "\n")
    RESULTS.joinpath("vector_threads.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
