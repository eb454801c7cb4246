"""encode.store embedded with the prepared INSERT and without it, in one process, alternating.

    python bench/store_prepared.py --n 10000 --rounds 20

Fresh processes differ from each other (warm-up, text-index merges, where the data lands) by
more than a lone write's INSERT costs, so this compares within one process: after loading
`--n` records it runs blocks of 50 lone stores, switching the storage between the prepared
INSERT (storage/duckdb/prepared.py) and planning the INSERT with parameters every time, block
by block. It reports the p50 of each, the main thread's CPU per store, and the CPU of the
storage's insert call alone. Writes bench/results/store_prepared.md and store_prepared.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import cerememory  # noqa: E402
from cerememory.storage.duckdb import tables  # noqa: E402

WORDS = ("deploy key rotate monday budget review meeting river mountain lunch pasta team roadmap release "
         "incident database migration latency cache token schema index vector memory agent").split()
BLOCK = 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(1)

    def sentence() -> str:
        return " ".join(rng.choices(WORDS, k=12))

    prepared = tables._Rows._insert_prepared
    planned = lambda self, table, columns, rows: False  # noqa: E731 - always the planned statement
    insert = tables._Rows._insert
    spent = [0.0]

    def timed(self, *a, **k):  # the storage's insert call, timed
        started = time.thread_time()
        try:
            return insert(self, *a, **k)
        finally:
            spent[0] += time.thread_time() - started

    tables._Rows._insert = timed
    latencies: dict[str, list[float]] = {"planned": [], "prepared": []}
    cpu: dict[str, list[float]] = {"planned": [], "prepared": []}
    insert_cpu: dict[str, list[float]] = {"planned": [], "prepared": []}
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp())
    try:
        with cerememory.open(work / "d", semantic="off") as mem:
            for start in range(0, args.n, 1000):
                mem.store_batch([{"content": {"blocks": [{"text": sentence()}]}}
                                 for _ in range(min(1000, args.n - start))])
            for _ in range(20):
                mem.store(sentence())
            for _ in range(args.rounds):
                for mode in ("planned", "prepared"):
                    tables._Rows._insert_prepared = prepared if mode == "prepared" else planned
                    mem.store(sentence())
                    spent[0], started = 0.0, time.thread_time()
                    for _ in range(BLOCK):
                        t = time.perf_counter()
                        mem.store(sentence())
                        latencies[mode].append(time.perf_counter() - t)
                    cpu[mode].append((time.thread_time() - started) / BLOCK * 1000)
                    insert_cpu[mode].append(spent[0] / BLOCK * 1000)
    finally:
        tables._Rows._insert, tables._Rows._insert_prepared = insert, prepared
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    row = {mode: {"p50_ms": statistics.median(latencies[mode]) * 1000, "cpu_ms": statistics.median(cpu[mode]),
                  "insert_cpu_ms": statistics.median(insert_cpu[mode])} for mode in latencies}
    ratios = {m: statistics.median(a / b for a, b in zip(*(series[k] for k in ("prepared", "planned")), strict=True))
              for m, series in (("cpu_ms", cpu), ("insert_cpu_ms", insert_cpu))}
    ratios["p50_ms"] = row["prepared"]["p50_ms"] / row["planned"]["p50_ms"]
    lines = ["# encode.store embedded: the prepared INSERT against the planned one, in one process", "",
             f"`bench/store_prepared.py --n {args.n} --rounds {args.rounds}`; {args.n:,} records loaded first, "
             f"semantic off; {args.rounds} rounds of {BLOCK} lone stores each way, alternating block by block. "
             "CPU is the main thread's per store (medians of the blocks); the insert column is the storage's "
             "insert call alone. "
             f"1-minute load average of the 2-core machine {load:.1f} at the start, {load_after:.1f} at the end.", "",
             "| INSERT | p50 ms | main-thread CPU ms/store | insert CPU ms/store |", "|---|---|---|---|"]
    for mode in ("planned", "prepared"):
        r = row[mode]
        lines.append(f"| {mode} | {r['p50_ms']:.2f} | {r['cpu_ms']:.2f} | {r['insert_cpu_ms']:.2f} |")
    lines.append(f"| prepared / planned | {ratios['p50_ms']:.2f}× | {ratios['cpu_ms']:.2f}× | "
                 f"{ratios['insert_cpu_ms']:.2f}× |")
    results = HERE / "results"
    results.joinpath("store_prepared.md").write_text("\n".join(lines) + "\n")
    results.joinpath("store_prepared.json").write_text(
        json.dumps({"load1": [load, load_after], **row, "ratios": ratios}, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
