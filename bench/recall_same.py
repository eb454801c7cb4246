"""Whether two source trees rank recall.query alike: same ids, same order, same scores.

    python bench/recall_same.py --before /tmp/base [--records 3000] [--queries 300]

One data directory is built (texts from a small vocabulary, so hits tie and the tie-breaks
matter; 32-d caller vectors; sessions of linked turns; emotions; creation times spread over two
years under a fixed clock, so old memories have decayed below their store's threshold) and
each tree answers the same queries over its own copy (opened once by this tree first, so
that an index one tree rebuilds for its schema is rebuilt by both): text only, vector only, hybrid,
with emotion and time cues, a time named in the text, store filters, decayed records asked for,
a fidelity floor, with and without activation spreading, emotion only and no cue at all; under
the default settings and under rrf fusion with text and vector feedback. Every answer is
compared whole: each memory's id, relevance score, score breakdown and activation path, the
candidate count, the query metadata and the activation trace. Exits 1 on the first difference.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 6, 1, tzinfo=UTC)
DIM = 32
WORDS = ("deploy key rotate monday budget review meeting river mountain lunch pasta team roadmap "
         "release incident database migration latency cache token schema index vector memory agent "
         "alice bob carol dave tokyo berlin lisbon paris q3 q4 sprint retro design").split()
STORES = ("episodic", "semantic", "procedural", "emotional")
SETTINGS = ({}, {"fusion": "rrf", "recall__feedback": "text"}, {"recall__feedback": "vector"})


def vector(rng: random.Random) -> list[float]:
    return [rng.gauss(0.0, 1.0) for _ in range(DIM)]


def build(data_dir: str, records: int) -> None:
    """A quarter of the records stored (so last accessed) three years before the queries' clock:
    those of the stores that forget have decayed below their threshold by then."""
    import cerememory

    rng = random.Random(11)
    items: list[list[dict]] = [[], []]
    for n in range(records):
        item: dict = {"content": {"blocks": [{"text": " ".join(rng.choices(WORDS, k=8)),
                                              "embedding": vector(rng)}]},
                      "store": STORES[n % len(STORES)],
                      "created_at": (NOW - timedelta(days=rng.uniform(0, 730))).isoformat()}
        if n % 3:
            item["context"] = {"session_id": f"s{n // 6}"}  # runs of linked turns
        if n % 5 == 0:
            item["emotion"] = {"joy": rng.random(), "fear": rng.random(), "intensity": rng.random()}
        items[n % 4 != 0].append(item)
    for old, batch in zip((True, False), items, strict=True):
        stamp = (NOW - timedelta(days=1100 if old else 0)).timestamp()
        with cerememory.open(data_dir, semantic="off", clock=lambda stamp=stamp: stamp) as mem:
            for start in range(0, len(batch), 500):
                mem.store_batch(batch[start:start + 500])


def queries(count: int) -> list[dict]:
    rng = random.Random(5)
    out = []
    for n in range(count):
        kind = n % 12
        q: dict = {"limit": rng.choice((5, 10, 30)), "reconsolidate": False,
                   "activation_depth": rng.choice((0, 2, 2))}
        text = " ".join(rng.choices(WORDS, k=rng.choice((1, 2, 3))))
        if kind in (0, 1, 2, 5, 6, 7, 8, 9, 10):
            q["query"] = text
        if kind in (1, 2, 3, 6, 9):
            q["embedding"] = vector(rng)
        if kind in (4, 6):
            q["emotion"] = {"joy": rng.random(), "intensity": rng.random()}
        if kind in (5, 9):
            start = NOW - timedelta(days=rng.uniform(30, 700))
            q["start"], q["end"] = start.isoformat(), (start + timedelta(days=90)).isoformat()
        if kind == 7:
            q["query"] = f"{text} in May 2025"
        if kind == 8:
            q["stores"] = rng.sample(STORES, 2)
        if kind == 10:
            q["include_decayed"] = True
        if kind == 2:
            q["min_fidelity"] = 0.5
        out.append(q)
    return out


def answer(data_dir: str, settings: dict, asked: list[dict]) -> list[dict]:
    import cerememory

    out = []
    with cerememory.open(data_dir, semantic="off", clock=lambda: NOW.timestamp(), **settings) as mem:
        for q in asked:
            q = dict(q)
            for key in ("start", "end"):
                if key in q:
                    q[key] = datetime.fromisoformat(q[key])
            got = mem.recall(**q).model_dump(mode="json")
            for memory in got["memories"]:
                memory["record"] = memory["record"]["id"]  # the record itself is not ranking
            out.append(got)
    return out


def run_tree(tree: Path, data_dir: Path, settings: dict, asked: list[dict], out: Path) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
    env["PYTHONPATH"] = str(tree)
    job = out.with_suffix(".job")
    job.write_text(json.dumps({"data_dir": str(data_dir), "settings": settings, "queries": asked, "out": str(out)}))
    subprocess.run([sys.executable, __file__, "--answer", str(job)], env=env, check=True, cwd=tree)
    return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--build")
    parser.add_argument("--answer")
    args = parser.parse_args()
    if args.build:
        build(args.build, args.records)
        return 0
    if args.answer:
        job = json.loads(Path(args.answer).read_text())
        Path(job["out"]).write_text(json.dumps(answer(job["data_dir"], job["settings"], job["queries"])))
        return 0
    if args.before is None:
        parser.error("--before is required")
    asked = queries(args.queries)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "data"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CEREMEMORY_")}
        env["PYTHONPATH"] = str(args.before.resolve())
        subprocess.run([sys.executable, __file__, "--build", str(source), "--records", str(args.records)],
                       env=env, check=True, cwd=args.before)
        # opened once by this tree: an index it would rebuild (its schema changed) is rebuilt
        # now, so that the before tree, meeting a schema not its own, rebuilds it alike
        env["PYTHONPATH"] = str(REPO)
        subprocess.run([sys.executable, "-c", f"import cerememory; cerememory.open({str(source)!r}, "
                        "semantic='off').close()"], env=env, check=True, cwd=REPO)
        compared = 0
        for settings in SETTINGS:
            answers = {}
            for label, tree in (("before", args.before.resolve()), ("after", REPO)):
                copy = Path(tmp) / label
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(source, copy)
                answers[label] = run_tree(tree, copy, settings, asked, Path(tmp) / f"{label}.json")
            for n, (before, after) in enumerate(zip(answers["before"], answers["after"], strict=True)):
                if before != after:
                    print(f"differ: settings {settings}, query {n}: {asked[n]}")
                    print("before:", json.dumps(before)[:2000])
                    print("after: ", json.dumps(after)[:2000])
                    return 1
                compared += 1
            hits = sum(len(a["memories"]) for a in answers["after"])
            signals = Counter(s for a in answers["after"] for s in a["query_metadata"]["signals"])
            hidden = sum(a["query_metadata"]["fidelity_filtered"] for a in answers["after"])
            print(f"settings {settings or 'default'}: {len(asked)} answers alike ({hits} memories, "
                  f"{hidden} decayed hits hidden; signals {dict(signals)})")
    print(f"same: {compared} answers compared")
    return 0


if __name__ == "__main__":
    sys.exit(main())
