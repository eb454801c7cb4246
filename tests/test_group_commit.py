"""Group commit: stores that arrive together share one transaction, each caller is answered
for its own write, and one write's fault never fails another's."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import cerememory
from cerememory import CMPError
from cerememory.cmp.errors import ErrorCode
from cerememory.engine.group import GroupCommit, Pending


def _until(condition: Callable[[], bool]) -> None:
    """Wait for `condition` (set by other threads); a bound only against a hang, never asserted."""
    event = threading.Event()
    while not condition():
        event.wait(0.005)


def test_stores_queued_behind_a_commit_go_in_as_one_group(tmp_path: Path) -> None:
    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        writer = mem.engine.writer
        groups_before = writer.group.groups
        outcome: dict[str, uuid.UUID | ErrorCode] = {}

        def store(name: str, **kwargs: object) -> None:
            try:
                outcome[name] = mem.store(f"note {name}", embedding=[1.0, 0.5, 0.25], **kwargs).record_id
            except CMPError as exc:
                outcome[name] = exc.code

        missing = {"associations": [{"target_id": str(uuid.uuid4()), "association_type": "semantic"}]}
        threads = [threading.Thread(target=store, args=(f"n{i}",)) for i in range(4)]
        threads.append(threading.Thread(target=store, args=("dangling",), kwargs=missing))
        with writer.lock:  # a commit in progress: everything arriving meanwhile queues up
            for thread in threads:
                thread.start()
            _until(lambda: writer.group.pending() == len(threads))
        for thread in threads:
            thread.join()

        assert writer.group.groups - groups_before == 1
        assert outcome["dangling"] is ErrorCode.RECORD_NOT_FOUND
        stored = [outcome[f"n{i}"] for i in range(4)]
        assert all(isinstance(rid, uuid.UUID) for rid in stored)
        assert all(rid in mem.engine.core.vectors for rid in stored)
        hits = mem.recall(embedding=[1.0, 0.5, 0.25], limit=10, reconsolidate=False).memories
        assert {hit.record.id for hit in hits} == set(stored)
        assert {hit.record.id for hit in mem.recall("note", limit=10, reconsolidate=False).memories} == set(stored)


def test_a_group_that_fails_is_committed_one_write_at_a_time() -> None:
    release = threading.Event()
    committed: list[str] = []

    def commit(take: Callable[[], list[Pending[str]]]) -> None:
        release.wait()
        group = [p.write for p in take()]
        if "bad" in group:
            raise ValueError(f"cannot commit {group}")
        committed.extend(group)

    group_commit: GroupCommit[str] = GroupCommit(commit)
    errors: dict[str, BaseException | None] = {}

    def submit(write: str) -> None:
        try:
            group_commit.submit(write)
            errors[write] = None
        except ValueError as exc:
            errors[write] = exc

    threads = [threading.Thread(target=submit, args=(w,)) for w in ("a", "bad", "b")]
    for thread in threads:
        thread.start()
    _until(lambda: group_commit.pending() == 3)
    release.set()
    for thread in threads:
        thread.join()

    assert sorted(committed) == ["a", "b"]
    assert errors["a"] is None and errors["b"] is None
    assert str(errors["bad"]) == "cannot commit ['bad']"


@pytest.mark.parametrize("writes", [1, 3])
def test_every_caller_is_answered_after_its_own_commit(writes: int) -> None:
    committed: list[str] = []
    group_commit: GroupCommit[str] = GroupCommit(lambda take: committed.extend(p.write for p in take()))
    threads = [threading.Thread(target=group_commit.submit, args=(f"w{i}",)) for i in range(writes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(committed) == [f"w{i}" for i in range(writes)]
    assert group_commit.pending() == 0
