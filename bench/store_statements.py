"""The SQL statements one embedded encode.store runs, and what each costs, two trees side by side.

    python bench/store_statements.py --before /tmp/base --n 10000 --rounds 3

Each round opens a fresh data directory of `--n` records (semantic off) once with the source
tree given as `--before` and once with this checkout, each in a fresh process, alternating.
Each process wraps the writer's DuckDB connection, runs 300 lone stores and counts, per kind of
statement, how many a store runs and the CPU (the calling thread's) and wall time they take,
beside the main thread's whole CPU per store (the rest of it is Python). Wall time includes
the commit's sync to disk, which other work on a shared machine delays far more than CPU.
Writes bench/results/store_statements.md and store_statements.json.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import STORE_CHILD_HEAD, ab_parser, alternate_trees, median_ratio, pick  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

CHILD = STORE_CHILD_HEAD + r"""
calls = 300
rng = random.Random(1)
sentence = lambda: " ".join(rng.choices(WORDS, k=12))
stats = collections.defaultdict(lambda: [0, 0.0, 0.0])
tracing = [False]

prepared = {}  # a prepared statement's name -> what it runs

def kind(sql):
    words = sql.split()
    if words[0].upper() == "PREPARE":
        prepared[words[1]] = kind(" ".join(words[3:]))
    if words[0].upper() == "EXECUTE":
        return "EXECUTE " + prepared.get(words[1].split("(")[0], "?")
    return " ".join(words[:3])[:40]

class Traced:
    def __init__(self, conn):
        self._conn = conn
    def execute(self, sql, *args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        result = self._conn.execute(sql, *args, **kwargs)
        name = kind(sql)
        if tracing[0]:
            s = stats[name]
            s[0] += 1; s[1] += time.thread_time() - cpu; s[2] += time.perf_counter() - wall
        return result
    def __getattr__(self, name):
        return getattr(self._conn, name)

work = Path(tempfile.mkdtemp())
try:
    with cerememory.open(work / "d", semantic="off") as mem:
        database = mem.engine.core.backend.database
        database._conn = Traced(database._conn)  # before any statement is prepared
        for start in range(0, n, 1000):
            mem.store_batch([{"content": {"blocks": [{"text": sentence()}]}} for _ in range(min(1000, n - start))])
        for _ in range(20):
            mem.store(sentence())
        tracing[0] = True
        latencies, main_cpu = [], time.thread_time()
        for _ in range(calls):
            t = time.perf_counter()
            mem.store(sentence())
            latencies.append(time.perf_counter() - t)
        main_cpu = time.thread_time() - main_cpu
finally:
    shutil.rmtree(work, ignore_errors=True)
latencies.sort()
sql_cpu = sum(s[1] for s in stats.values())
print(json.dumps({"p50_ms": latencies[calls // 2] * 1000, "main_cpu_ms": main_cpu / calls * 1000,
                  "sql_cpu_ms": sql_cpu / calls * 1000, "python_cpu_ms": (main_cpu - sql_cpu) / calls * 1000,
                  "statements": {k: {"per_store": c / calls, "cpu_us": u / calls * 1e6, "wall_us": w / calls * 1e6}
                                 for k, (c, u, w) in stats.items()}}))
"""


def main() -> None:
    args = ab_parser(__doc__, rounds=3, n=10_000).parse_args()
    rows = alternate_trees(args.before, HERE.parent, args.rounds, CHILD, str(args.n))
    lines = ["# The statements of one embedded encode.store, before and after, side by side", "",
             f"`bench/store_statements.py --n {args.n} --rounds {args.rounds}`; {args.n:,} records loaded first, "
             "semantic off; 300 lone stores per process, each figure a fresh process, before and after alternating. "
             "CPU is the calling thread's; Python is the main thread's CPU outside the statements. "
             "1-minute load average of the 2-core machine at the start of each run in the last column.", "",
             "| round | p50 ms before / after | main-thread CPU ms/store | of it SQL | of it Python | load |",
             "|---|---|---|---|---|---|"]
    for r in range(args.rounds):
        b, a = (pick(rows, round=r, tree=t) for t in ("before", "after"))
        pair = {m: f"{b[m]:.2f} / {a[m]:.2f}" for m in ("p50_ms", "main_cpu_ms", "sql_cpu_ms", "python_cpu_ms")}
        lines.append(f"| {r + 1} | {pair['p50_ms']} | {pair['main_cpu_ms']} | {pair['sql_cpu_ms']} | "
                     f"{pair['python_cpu_ms']} | {b['load1']:.1f} / {a['load1']:.1f} |")
    ratios = {m: median_ratio(rows, m, {"tree": "after"}, {"tree": "before"})
              for m in ("p50_ms", "main_cpu_ms", "sql_cpu_ms", "python_cpu_ms")}
    lines.append(f"| median after / before | {ratios['p50_ms']:.2f}× | {ratios['main_cpu_ms']:.2f}× | "
                 f"{ratios['sql_cpu_ms']:.2f}× | {ratios['python_cpu_ms']:.2f}× | |")
    lines += ["", "Per kind of statement (median over rounds): statements per store, CPU µs and wall µs per store.", "",
              "| statement | before: per store, CPU µs, wall µs | after: per store, CPU µs, wall µs |", "|---|---|---|"]
    kinds = sorted({k for row in rows for k in row["statements"]})
    for k in kinds:
        cells = []
        for tree in ("before", "after"):
            found = [row["statements"][k] for row in rows if row["tree"] == tree and k in row["statements"]]
            if not found:
                cells.append("–")
                continue
            med = {m: statistics.median(f[m] for f in found) for m in ("per_store", "cpu_us", "wall_us")}
            cells.append(f"{med['per_store']:.2f}, {med['cpu_us']:,.0f}, {med['wall_us']:,.0f}")
        lines.append(f"| `{k}` | {cells[0]} | {cells[1]} |")
    RESULTS.joinpath("store_statements.md").write_text("\n".join(lines) + "\n")
    RESULTS.joinpath("store_statements.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
