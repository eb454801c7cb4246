"""encode.batch with caller vectors, two source trees side by side in one run.

    python bench/encode_ab.py --before /tmp/base --n 100000 --rounds 2

Each round runs `bench/scale.py`'s `ingest` (store_batch, chunks of 1000, text plus a caller
384-d unit vector, semantic off) once with the source tree given as `--before` and once with
this checkout, each in a fresh process, alternating, so both see the same machine load. Beside
records per wall-clock second it reports records per CPU second of the process (all its
threads), which other work on a shared machine disturbs far less; the load average is given
for each run.
Writes bench/results/encode_ab.md and encode_ab.json.
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
import json, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import cerememory
from scale import ingest, make_corpus, unit_rows
n, vectors = int(sys.argv[2]), sys.argv[3] == "vec"
texts = make_corpus(n)
rows = unit_rows(n, 20260901 + n) if vectors else None
work = Path(tempfile.mkdtemp())
try:
    with cerememory.open(work / "warm", semantic="off") as mem:
        ingest(mem, texts[:1000], None if rows is None else rows[:1000])
    with cerememory.open(work / "d", semantic="off") as mem:
        cpu = time.process_time()
        result = ingest(mem, texts, rows)
        cpu = time.process_time() - cpu
finally:
    shutil.rmtree(work, ignore_errors=True)
print(json.dumps({"records_per_s": result["records_per_s"], "last_chunk_rate": result["last_chunk_rate"],
                  "records_per_cpu_s": n / cpu}))
"""


def run(tree: Path, n: int, kind: str) -> dict:
    return run_tree(tree, CHILD, str(HERE), str(n), kind)


def main() -> None:
    parser = ab_parser(__doc__, rounds=2)
    parser.add_argument("--kinds", default="vec,text")
    args = parser.parse_args()
    after = HERE.parent
    rows: list[dict] = []
    for kind in args.kinds.split(","):
        for r in range(args.rounds):
            for label, tree in (("before", args.before), ("after", after)):
                load = os.getloadavg()[0]
                result = run(tree, args.n, kind)
                rows.append({"kind": kind, "round": r, "tree": label, "load1": load, **result})
                print(json.dumps(rows[-1]), flush=True)
    lines = ["# encode.batch, before and after, side by side", "",
             f"`bench/encode_ab.py --n {args.n} --rounds {args.rounds}`; N = {args.n:,} records, chunks of 1000, "
             "semantic off; each figure a fresh process, before and after alternating. 1-minute load average "
             "of the 2-core machine at the start of each run in the last column.", "",
             "| records | round | before rec/s | after rec/s | after / before | before rec/CPU-s | after rec/CPU-s "
             "| after / before (CPU) | load |", "|---|---|---|---|---|---|---|---|---|"]
    for kind in args.kinds.split(","):
        for r in range(args.rounds):
            b, a = (pick(rows, kind=kind, round=r, tree=t) for t in ("before", "after"))
            name = "text + caller 384-d vector" if kind == "vec" else "text only"
            lines.append(f"| {name} | {r + 1} | {b['records_per_s']:,.0f} | {a['records_per_s']:,.0f} | "
                         f"{a['records_per_s'] / b['records_per_s']:.2f}× | {b['records_per_cpu_s']:,.0f} | "
                         f"{a['records_per_cpu_s']:,.0f} | {a['records_per_cpu_s'] / b['records_per_cpu_s']:.2f}× | "
                         f"{b['load1']:.1f} / {a['load1']:.1f} |")
        ratio = median_ratio(rows, "records_per_s", {"kind": kind, "tree": "after"}, {"kind": kind, "tree": "before"})
        lines.append(f"| {kind}: median ratio | | | | {ratio:.2f}× | | | | |")
    RESULTS.joinpath("encode_ab.md").write_text("\n".join(lines) + "\n")
    RESULTS.joinpath("encode_ab.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
