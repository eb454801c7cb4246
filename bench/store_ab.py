"""encode.store embedded, two source trees side by side in one run.

    python bench/store_ab.py --before /tmp/base --n 10000 --rounds 3

Each round opens a fresh data directory of `--n` records (loaded with store_batch) once with the
source tree given as `--before` and once with this checkout, each in a fresh process,
alternating, so both see the same machine load. Each process measures 300 single stores from one
caller (p50, and the process's CPU per store, all its threads, which other work on a shared
machine disturbs far less than wall time), 300 single journal writes (encode.store_raw, p50)
and then 32 threads storing at once, whose writes the
group commit shares out over transactions (writes per second, CPU per write, writes per
transaction). The 1-minute load average is given for each run.
Writes bench/results/store_ab.md and store_ab.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import STORE_CHILD_HEAD, ab_parser, alternate_trees, median_ratio, pick  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

CHILD = STORE_CHILD_HEAD + r"""
calls, writers, per = 300, 32, 20
rng = random.Random(1)
sentence = lambda r: " ".join(r.choices(WORDS, k=12))
work = Path(tempfile.mkdtemp())
try:
    with cerememory.open(work / "d", semantic="off") as mem:
        for start in range(0, n, 1000):
            mem.store_batch([{"content": {"blocks": [{"text": sentence(rng)}]}} for _ in range(min(1000, n - start))])
        for _ in range(5):
            mem.store(sentence(rng))
        latencies, cpu = [], time.process_time()
        for _ in range(calls):
            t = time.perf_counter()
            mem.store(sentence(rng))
            latencies.append(time.perf_counter() - t)
        cpu = time.process_time() - cpu
        latencies.sort()
        raw = []  # lone journal writes (encode.store_raw), one conversation's turns
        for _ in range(calls):
            t = time.perf_counter()
            mem.store_raw(sentence(rng), session_id="s")
            raw.append(time.perf_counter() - t)
        raw.sort()
        group = mem.engine.writer.group
        groups_before = group.groups

        def write(seed):
            r = random.Random(seed)
            for _ in range(per):
                mem.store(sentence(r))

        threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
        many_cpu, wall = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall, many_cpu = time.perf_counter() - wall, time.process_time() - many_cpu
        groups = group.groups - groups_before
finally:
    shutil.rmtree(work, ignore_errors=True)
print(json.dumps({"p50_ms": latencies[len(latencies) // 2] * 1000,
                  "p95_ms": latencies[int(len(latencies) * 0.95)] * 1000, "raw_p50_ms": raw[len(raw) // 2] * 1000,
                  "cpu_ms": cpu / calls * 1000, "many_per_s": writers * per / wall,
                  "many_cpu_ms": many_cpu / (writers * per) * 1000, "per_group": writers * per / max(groups, 1)}))
"""


def main() -> None:
    args = ab_parser(__doc__, rounds=3, n=10_000).parse_args()
    rows = alternate_trees(args.before, HERE.parent, args.rounds, CHILD, str(args.n))
    lines = ["# encode.store embedded, before and after, side by side", "",
             f"`bench/store_ab.py --n {args.n} --rounds {args.rounds}`; {args.n:,} records loaded first, semantic off; "
             "each figure a fresh process, before and after alternating. One caller: 300 stores, p50 and the "
             "process's CPU per store, then 300 journal writes (encode.store_raw), p50. 32 threads: 20 stores "
             "each at once, shared out over group commits. 1-minute load average of the 2-core machine at the "
             "start of each run in the last column.", "",
             "| round | before p50 ms | after p50 ms | before CPU ms/store | after CPU ms/store "
             "| journal p50 ms before / after "
             "| 32 threads before writes/s | after writes/s | before CPU ms/write | after CPU ms/write "
             "| writes per commit before / after | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in range(args.rounds):
        b, a = (pick(rows, round=r, tree=t) for t in ("before", "after"))
        lines.append(f"| {r + 1} | {b['p50_ms']:.2f} | {a['p50_ms']:.2f} | {b['cpu_ms']:.2f} | {a['cpu_ms']:.2f} | "
                     f"{b['raw_p50_ms']:.2f} / {a['raw_p50_ms']:.2f} | "
                     f"{b['many_per_s']:,.0f} | {a['many_per_s']:,.0f} | {b['many_cpu_ms']:.2f} | "
                     f"{a['many_cpu_ms']:.2f} | {b['per_group']:.1f} / {a['per_group']:.1f} | "
                     f"{b['load1']:.1f} / {a['load1']:.1f} |")
    ratios = {m: median_ratio(rows, m, {"tree": "after"}, {"tree": "before"})
              for m in ("p50_ms", "cpu_ms", "raw_p50_ms", "many_per_s", "many_cpu_ms")}
    lines.append(f"| median after / before | {ratios['p50_ms']:.2f}× | | {ratios['cpu_ms']:.2f}× | | "
                 f"{ratios['raw_p50_ms']:.2f}× | {ratios['many_per_s']:.2f}× | | {ratios['many_cpu_ms']:.2f}× | | |")
    RESULTS.joinpath("store_ab.md").write_text("\n".join(lines) + "\n")
    RESULTS.joinpath("store_ab.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
