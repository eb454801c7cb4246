"""`kill -9` of a real `cerememory` process right after a consolidation or a dream committed part
of its work and before the operation returned: every record the kill left deleted, created or
changed is named by an audit entry (the intent written inside the change's transaction), and
the chain still verifies.

The kill lands at a named crash point (tests/crashpoint.py), never after a delay.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import cerememory
from cerememory.security.audit import AUDIT_FILE

from .conftest import clean_env
from .crashpoint import kill_at

DUPLICATED = 40  # texts, each stored three times: 80 merges, then 40 promotions
T0 = datetime(2025, 3, 4, 9, 0, tzinfo=UTC)


def audited(data_dir: Path) -> tuple[list[dict], set[str]]:
    entries = [json.loads(line) for line in (data_dir / AUDIT_FILE).read_text().splitlines()]
    return entries, {i for e in entries for i in e["record_ids"]}


def record_ids(data_dir: Path) -> set[str]:
    with cerememory.open(data_dir, semantic="off") as mem:
        return {str(r.id) for store in ("episodic", "semantic")
                for r in mem.list_records(store, limit=1000).records}


def raw_state(data_dir: Path) -> dict[str, list[uuid.UUID]]:
    with cerememory.open(data_dir, semantic="off") as mem:
        return {str(r.id): r.derived_memory_ids for r in mem.raw_recall(limit=1000).records}


def run_cli(tmp_path: Path, data_dir: Path, point: str, *args: str) -> None:
    env = clean_env(tmp_path, CEREMEMORY_DATA_DIR=str(data_dir))
    kill_at(point, [sys.executable, "-m", "cerememory", *args], env)


def assert_chain_verifies(cli) -> None:
    verified = cli("audit-verify", "--json")
    assert verified.code == 0 and verified.json()["ok"] is True, verified.stdout


@pytest.mark.parametrize("point", ["consolidate.merged", "consolidate.promoted"])
def test_kill_9_during_consolidate_leaves_every_change_audited(tmp_path, data_dir, cli, point):
    with cerememory.open(data_dir, semantic="off") as mem:
        for _ in range(3):
            mem.store_batch([{"content": {"blocks": [{"text": f"the heron {n} nests by the weir"}]},
                              "store": "episodic"} for n in range(DUPLICATED)])
    before = record_ids(data_dir)
    run_cli(tmp_path, data_dir, point, "consolidate", "--json")

    after = record_ids(data_dir)
    deleted, created = before - after, after - before
    assert len(deleted) == 2 * DUPLICATED  # the merges committed
    assert len(created) == (DUPLICATED if point == "consolidate.promoted" else 0)
    entries, named = audited(data_dir)
    assert deleted <= named and created <= named
    consolidation = [e["phase"] for e in entries if e["op"] == "lifecycle.consolidate"]
    assert consolidation == ["intent"] * (2 if point == "consolidate.promoted" else 1)  # killed: no outcome
    assert_chain_verifies(cli)

    done = cli("consolidate", "--json")  # a rerun finishes the work and logs it whole
    assert done.code == 0, done.stderr
    assert_chain_verifies(cli)
    entries, named = audited(data_dir)
    assert record_ids(data_dir) - before <= named
    assert entries[-1]["op"] == "lifecycle.consolidate" and entries[-1]["phase"] == "done"


def test_kill_9_during_a_dream_leaves_every_change_audited(tmp_path, data_dir, cli):
    with cerememory.open(data_dir, semantic="off") as mem:
        for group in range(4):
            for i in range(3):
                mem.store_raw(f"Alice: topic {group} falcon launch step {i} on Monday", session_id=f"s{group}",
                              created_at=T0 + timedelta(minutes=i))
    before = record_ids(data_dir)
    run_cli(tmp_path, data_dir, "dream.group_committed:2", "dream-tick", "--json")

    created = record_ids(data_dir) - before
    changed = [raw_id for raw_id, derived in raw_state(data_dir).items() if derived]
    assert len(created) == 4 and len(changed) == 6  # two groups: a summary and a fact each
    entries, named = audited(data_dir)
    assert created <= named and set(changed) <= named
    phases = [e["phase"] for e in entries if e["op"] == "lifecycle.dream_tick"]
    assert phases.count("intent") == 2 and phases[-1] == "intent"  # the CLI ticks a group at a time
    assert_chain_verifies(cli)
