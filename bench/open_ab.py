"""Opening a large data directory, two source trees side by side in one run.

    python bench/open_ab.py --before /tmp/base --n 100000 --rounds 3

One data directory of N records is made once, by the `--before` tree (this checkout opens, and
migrates, an older format; the reverse is refused), then opened once by this checkout, outside
the rounds, so a migration is not timed: `bench/scale.py`'s corpus with a
caller 384-d unit vector each, stored as conversations (sessions of 20 turns, each turn linked
to the one before, as `encode.batch` links them: about two association rows a record). Each
round then opens it in a fresh process of the `--before` tree and of this checkout, alternating,
and reports: the wall and CPU time of `cerememory.open`, the RSS right after it, and the time
from the start of opening to the first recall.query answered (text, semantic off), then the time
(and CPU) of a first vector query after it and the RSS after that. CPU time and
RSS move far less with other work on a shared machine than wall time; the load average is
given for each run. Both trees' modules are byte-compiled first, as an installed package's are:
a fresh tree (`git archive`) run with PYTHONDONTWRITEBYTECODE would otherwise compile every
module opening imports, in every process (about 0.1 s here), which no installed copy does.
Writes bench/results/open_ab.md and open_ab.json.
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_parser, median_ratio, pick, run_tree  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SESSION = 20

MAKE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import cerememory
from scale import make_corpus, unit_rows
data_dir, n, session = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
texts, rows = make_corpus(n), unit_rows(n, 20261202 + n)
with cerememory.open(data_dir, semantic="off") as mem:
    for start in range(0, n, 1000):
        mem.store_batch([{"content": {"blocks": [{"text": texts[i], "embedding": rows[i].tolist()}]},
                          "context": {"session_id": f"s{i // session}"}} for i in range(start, min(n, start + 1000))])
    print(json.dumps({"records": mem.stats().total_records}))
"""

OPEN = r"""
import json, math, sys, time
import cerememory, cerememory.engine  # the engine's import is not part of opening

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

wall, cpu = time.perf_counter(), time.process_time()
mem = cerememory.open(sys.argv[1], semantic="off")
opened, opened_cpu, rss = time.perf_counter() - wall, time.process_time() - cpu, rss_mb()
hits = mem.recall("budget review with the team", limit=10, reconsolidate=False)
first = time.perf_counter() - wall
cue = [math.sin(i) for i in range(384)]
start, start_cpu = time.perf_counter(), time.process_time()
mem.recall(embedding=cue, limit=10, reconsolidate=False)
vector, vector_cpu = time.perf_counter() - start, time.process_time() - start_cpu
rss_vector = rss_mb()
mem.close()
print(json.dumps({"open_s": opened, "open_cpu_s": opened_cpu, "rss_after_open_mb": rss,
                  "open_to_first_query_s": first, "first_vector_query_s": vector,
                  "first_vector_query_cpu_s": vector_cpu,
                  "rss_after_vector_query_mb": rss_vector, "hits": len(hits.memories)}))
"""


def main() -> None:
    parser = ab_parser(__doc__, rounds=3)
    parser.add_argument("--data-dir", type=Path, help="an existing data directory made by an earlier run")
    args = parser.parse_args()
    after = HERE.parent
    work = Path(tempfile.mkdtemp())
    try:
        data_dir = args.data_dir or work / "d"
        if args.data_dir is None:  # by the older tree: the newer one opens (migrates) its format, not the reverse
            made = run_tree(args.before, MAKE, str(HERE), str(data_dir), str(args.n), str(SESSION))
            print(json.dumps(made), flush=True)
        # each tree opens its own copy: a format either writes on open stays out of the other's way
        copies = {label: work / label for label in ("before", "after")}
        for copy in copies.values():
            shutil.copytree(data_dir, copy)
        run_tree(after, OPEN, str(copies["after"]))  # a schema migration, if any, is not part of a round
        rows: list[dict] = []
        for tree in (args.before, after):
            compileall.compile_dir(tree / "cerememory", quiet=1)
        for r in range(args.rounds):
            for label, tree in (("before", args.before), ("after", after)):
                load = os.getloadavg()[0]
                result = run_tree(tree, OPEN, str(copies[label]))
                rows.append({"round": r, "tree": label, "load1": load, **result})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    metrics = (("open_s", "open, wall s"), ("open_cpu_s", "open, CPU s"), ("rss_after_open_mb", "RSS after open, MB"),
               ("open_to_first_query_s", "open → first query, s"),
               ("first_vector_query_s", "then the first vector query, s"),
               ("first_vector_query_cpu_s", "its CPU, s"),
               ("rss_after_vector_query_mb", "RSS after it, MB"))
    lines = ["# Opening a large data directory, before and after, side by side", "",
             f"`bench/open_ab.py --n {args.n} --rounds {args.rounds}`: {args.n:,} records with 384-d caller vectors, "
             f"in sessions of {SESSION} linked turns; each figure a fresh process, before and after alternating. "
             "Both trees byte-compiled first (as installed). "
             "1-minute load average of the 2-core machine at the start of each run in the last column.", "",
             "| measure | round | before | after | after / before | load |", "|---|---|---|---|---|---|"]
    for key, name in metrics:
        for r in range(args.rounds):
            b, a = (pick(rows, round=r, tree=t) for t in ("before", "after"))
            lines.append(f"| {name} | {r + 1} | {b[key]:,.2f} | {a[key]:,.2f} | {a[key] / b[key]:.2f}× | "
                         f"{b['load1']:.1f} / {a['load1']:.1f} |")
        ratio = median_ratio(rows, key, {"tree": "after"}, {"tree": "before"})
        lines.append(f"| {name}: median ratio | | | | {ratio:.2f}× | |")
    RESULTS.joinpath("open_ab.md").write_text("\n".join(lines) + "\n")
    RESULTS.joinpath("open_ab.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
