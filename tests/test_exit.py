"""A process that exits without closing what it opened still exits cleanly, with its data kept.

Interpreter teardown used to catch a background thread (the recall-statistics flusher, a
scheduled decay tick) inside DuckDB and abort the process with exit 134 after its work was done.
The child below keeps those threads busy on purpose: a flush every millisecond and a decay tick
every millisecond on the engine it leaves open.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import cerememory

from .conftest import clean_env

ENGINES = 10
RECORDS = 200
RECALLS = 20

CHILD = textwrap.dedent(f"""
    import sys
    from cerememory.api import Memory
    from cerememory.dynamics.scheduler import Scheduler
    from cerememory.embed import EmbedSettings
    from cerememory.engine import Engine, EngineOptions

    base = sys.argv[1]
    for i in range({ENGINES}):
        options = EngineOptions(flush_interval=0.001, embed=EmbedSettings(semantic="off"))
        mem = Memory(Engine(f"{{base}}/d{{i}}", options))
        mem.store_batch([{{"content": {{"blocks": [{{"text": f"engine {{i}} note {{j}}"}}]}}}}
                         for j in range({RECORDS})])
        for _ in range({RECALLS}):
            mem.recall(f"engine {{i}} note", limit=50)  # strengthens: the flusher has work
        if i < {ENGINES - 1}:
            mem.close()
    Scheduler(mem.engine, decay_interval=0.001).start()  # left running too
    print("done")
""")


def test_exit_without_close_is_clean_and_keeps_the_data(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    base = tmp_path / "dirs"
    proc = subprocess.run([sys.executable, str(script), str(base)], capture_output=True, text=True,
                          env=clean_env(tmp_path), timeout=300)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "done\n", "")
    for i in range(ENGINES):
        with cerememory.open(base / f"d{i}", semantic="off") as mem:  # the lock was released too
            stats = mem.stats()
            assert stats.records_by_store["episodic"] == RECORDS
            assert stats.total_recall_count == RECALLS  # the last engine was flushed at exit
            assert len(mem.recall(f"engine {i} note", limit=RECORDS).memories) == RECORDS
