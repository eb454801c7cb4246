"""encode.batch with caller vectors, two source trees side by side in one run.

    python bench/encode_ab.py --before /tmp/base --n 100000 --rounds 2
    python bench/encode_ab.py --before /tmp/base --n 30000 --kinds vec,vec_f32 --over http

Each round runs `bench/scale.py`'s `ingest` (store_batch, chunks of 1000, text plus a caller
384-d unit vector, semantic off) once with the source tree given as `--before` and once with
this checkout, each in a fresh process, alternating, so both see the same machine load. Beside
records per wall-clock second it reports records per CPU second of the process (all its
threads), which other work on a shared machine disturbs far less; the load average is given
for each run.

Kinds: `text` (no vector), `vec` (the vector as a list of floats, `embedding`) and `vec_f32`
(the vectors in the most compact form the tree knows: the batch's as one numpy matrix,
`store_batch(records, embeddings=matrix)`; else each as a numpy float32 row in `embedding_f32`;
else the list, so the row compares what a caller gains by switching). `--over http` sends the
same batches with `cerememory.Client` to a real server of the same tree on loopback
(`cerememory serve`), and the CPU figures are the server's, with the client's beside them.
Writes bench/results/encode_ab.md and encode_ab.json (encode_ab_http.* with `--over http`,
else encode_ab_f32.* when the kinds include `vec_f32`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ab_parser, env_line, environment, git_rev, median_ratio, pick, run_tree  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

CHILD = r"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import cerememory
from scale import CHUNK, make_corpus, unit_rows
n, kind, over = int(sys.argv[2]), sys.argv[3], sys.argv[4]
texts = make_corpus(n)
rows = unit_rows(n, 20260901 + n) if kind != "text" else None
form = "floats" if kind != "text" else "-"
if kind == "vec_f32":
    try:
        from cerememory.cmp.messages import EncodeBatchRequest
        from cerememory.model import ContentBlock
        form = ("matrix" if "embeddings_f32" in EncodeBatchRequest.model_fields
                else "f32" if "embedding_f32" in ContentBlock.model_fields else form)
    except ImportError:
        pass

def batches(lo, hi):
    for start in range(lo, hi, CHUNK):
        records, end = [], min(start + CHUNK, hi)
        for j in range(start, end):
            block = {"modality": "text", "text": texts[j]}
            if form == "f32":
                block["embedding_f32"] = rows[j]
            elif form == "floats":
                block["embedding"] = rows[j].tolist()
            records.append({"content": {"blocks": [block]}, "metadata": {"seq": j}})
        yield records, ({"embeddings": rows[start:end]} if form == "matrix" else {})

def ingest(mem, lo, hi):
    wall = 0.0
    for records, matrix in batches(lo, hi):  # each chunk built before its clock starts, as scale.ingest does
        t0 = time.perf_counter()
        mem.store_batch(records, **matrix)
        wall += time.perf_counter() - t0
    return wall

work = Path(tempfile.mkdtemp())
try:
    if over == "http":
        from transports import cpu_seconds, start_server, wait_quiet
        server, target = start_server(work / "d", Path(sys.argv[5]))
        try:
            with cerememory.Client(target["http"], retries=0, timeout=600) as mem:
                ingest(mem, 0, min(n, 1000))
                wait_quiet(server.pid)
                cpu, server_cpu = time.process_time(), cpu_seconds(server.pid)
                wall = ingest(mem, 1000, n)
                cpu, server_cpu = time.process_time() - cpu, cpu_seconds(server.pid) - server_cpu
        finally:
            server.terminate()
            server.wait()
        m = max(1, n - 1000)
        print(json.dumps({"form": form, "records_per_s": m / wall, "records_per_cpu_s": m / server_cpu,
                          "client_us_per_record": cpu / m * 1e6}))
    else:
        with cerememory.open(work / "warm", semantic="off") as mem:
            ingest(mem, 0, min(n, 1000))
        with cerememory.open(work / "d", semantic="off") as mem:
            cpu = time.process_time()
            wall = ingest(mem, 0, n)
            cpu = time.process_time() - cpu
        print(json.dumps({"form": form, "records_per_s": n / wall, "records_per_cpu_s": n / cpu}))
finally:
    shutil.rmtree(work, ignore_errors=True)
"""


def run(tree: Path, n: int, kind: str, over: str) -> dict:
    return run_tree(tree, CHILD, str(HERE), str(n), kind, over, str(tree))


NAMES = {"vec": "text + caller 384-d vector (floats)", "vec_f32": "text + caller 384-d vector (float32 bytes)",
         "text": "text only"}


def main() -> None:
    parser = ab_parser(__doc__, rounds=2)
    parser.add_argument("--kinds", default="vec,text")
    parser.add_argument("--over", choices=("embedded", "http"), default="embedded")
    args = parser.parse_args()
    after = HERE.parent
    rows: list[dict] = []
    for kind in args.kinds.split(","):
        for r in range(args.rounds):
            for label, tree in (("before", args.before), ("after", after)):
                load = os.getloadavg()[0]
                result = run(tree, args.n, kind, args.over)
                rows.append({"kind": kind, "round": r, "tree": label, "load1": load, **result})
                print(json.dumps(rows[-1]), flush=True)
    http = args.over == "http"
    cpu = "server rec/CPU-s" if http else "rec/CPU-s"
    title = "# encode.batch, before and after, side by side" + (" (HTTP, real server on loopback)" if http else "")
    lines = [title, "",
             f"`bench/encode_ab.py --n {args.n} --rounds {args.rounds} --kinds {args.kinds} --over {args.over}` — "
             f"{env_line({**environment(), 'before': git_rev(args.before), 'commit': git_rev()})}; "
             f"N = {args.n:,} records, chunks of 1000, semantic off; each figure a fresh process, before and after "
             "alternating. `vec_f32` sends the vectors in the most compact form the tree knows (form column): "
             "matrix (each batch's as one numpy array, `embeddings_f32`), f32 (a numpy float32 row in each "
             "record's `embedding_f32`) or floats. 1-minute load average of the 2-core machine at the start "
             "of each run in the last column."
             + (" Over HTTP the first 1,000 records warm the server and are not counted; client CPU µs per record "
                "(building the request, encoding, the socket) in its own columns." if http else ""), "",
             f"| records | round | form before / after | before rec/s | after rec/s | after / before | before {cpu} | "
             f"after {cpu} | after / before (CPU) |" + (" client µs/rec before / after |" if http else "") + " load |",
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if http else "") + "---|"]
    for kind in args.kinds.split(","):
        for r in range(args.rounds):
            b, a = (pick(rows, kind=kind, round=r, tree=t) for t in ("before", "after"))
            forms = " / ".join(x["form"] for x in (b, a))
            client = (f" {b['client_us_per_record']:,.0f} / {a['client_us_per_record']:,.0f} |" if http else "")
            lines.append(f"| {NAMES[kind]} | {r + 1} | {forms} | {b['records_per_s']:,.0f} | "
                         f"{a['records_per_s']:,.0f} | "
                         f"{a['records_per_s'] / b['records_per_s']:.2f}× | {b['records_per_cpu_s']:,.0f} | "
                         f"{a['records_per_cpu_s']:,.0f} | {a['records_per_cpu_s'] / b['records_per_cpu_s']:.2f}× |"
                         f"{client} {b['load1']:.1f} / {a['load1']:.1f} |")
        ratio = median_ratio(rows, "records_per_s", {"kind": kind, "tree": "after"}, {"kind": kind, "tree": "before"})
        cpu_ratio = median_ratio(rows, "records_per_cpu_s", {"kind": kind, "tree": "after"},
                                 {"kind": kind, "tree": "before"})
        lines.append(f"| {kind}: median ratio | | | | | {ratio:.2f}× | | | {cpu_ratio:.2f}× |" + (" |" if http else "")
                     + " |")
    stem = "encode_ab_http" if http else "encode_ab_f32" if "vec_f32" in args.kinds.split(",") else "encode_ab"
    RESULTS.joinpath(f"{stem}.md").write_text("\n".join(lines) + "\n")
    RESULTS.joinpath(f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
