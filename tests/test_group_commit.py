"""Group commit: stores that arrive together share one transaction, each caller is answered
for its own write, and one write's fault never fails another's."""

from __future__ import annotations

import contextvars
import json
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cerememory
from cerememory import CMPError
from cerememory.cmp.errors import ErrorCode
from cerememory.engine import group as group_module
from cerememory.engine.group import GroupCommit, Pending


def _until(condition: Callable[[], bool]) -> None:
    """Wait for `condition` (set by other threads); a bound only against a hang, never asserted."""
    event = threading.Event()
    while not condition():
        event.wait(0.005)


def test_stores_queued_behind_a_commit_go_in_as_one_group(tmp_path: Path) -> None:
    """Stores from threads that arrive while one commits run as the next set (cerememory/sets.py),
    which commits as one group, each audited in its own thread's context; a store whose
    association target is gone fails alone."""
    from cerememory.cmp.context import bound

    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        writer = mem.engine.writer
        groups_before = writer.group.groups
        outcome: dict[str, uuid.UUID | ErrorCode] = {}

        def store(name: str, **kwargs: object) -> None:
            try:
                with bound(transport="embedded", request_id=f"req-{name}"):
                    outcome[name] = mem.store(f"note {name}", embedding=[1.0, 0.5, 0.25], **kwargs).record_id
            except CMPError as exc:
                outcome[name] = exc.code

        missing = {"associations": [{"target_id": str(uuid.uuid4()), "association_type": "semantic"}]}
        first = threading.Thread(target=store, args=("n0",))
        threads = [threading.Thread(target=store, args=(f"n{i}",)) for i in range(1, 4)]
        threads.append(threading.Thread(target=store, args=("dangling",), kwargs=missing))
        with writer.lock:  # a commit in progress: everything arriving meanwhile queues up
            first.start()
            _until(lambda: writer.group.pending() == 1)
            for thread in threads:
                thread.start()
            _until(lambda: mem.dispatcher.waiting("encode.store") == len(threads))
        for thread in [first, *threads]:
            thread.join()

        assert writer.group.groups - groups_before == 2
        assert outcome["dangling"] is ErrorCode.RECORD_NOT_FOUND
        stored = [outcome[f"n{i}"] for i in range(4)]
        assert all(isinstance(rid, uuid.UUID) for rid in stored)
        assert all(rid in mem.engine.core.vectors for rid in stored)
        hits = mem.recall(embedding=[1.0, 0.5, 0.25], limit=10, reconsolidate=False).memories
        assert {hit.record.id for hit in hits} == set(stored)
        assert {hit.record.id for hit in mem.recall("note", limit=10, reconsolidate=False).memories} == set(stored)
    entries = [json.loads(line) for line in (tmp_path / "d" / "audit.jsonl").read_text().splitlines()]
    for i, record_id in enumerate(stored):
        assert {e["request_id"] for e in entries if e["record_ids"] == [str(record_id)]} == {f"req-n{i}"}


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
    assert (group_commit.commits, group_commit.committed) == (2, 2)  # "a" and "b", each alone


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


def test_closing_neither_waits_for_a_commit_delay_nor_warms_a_cache_it_will_not_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A short command (cm) opens, answers and closes: close() wakes the text indexes'
    committers, which then exit at once rather than wait out the delay meant to batch a burst
    of writes (an hour here, so waiting would leave them running); `warm_cache=False` starts
    no background cache warming."""
    from cerememory.api import open_config
    from cerememory.config import load_config
    from cerememory.index import fulltext

    monkeypatch.setattr(fulltext, "COMMIT_DELAY", 3600.0)
    before = set(threading.enumerate())
    mem = open_config(load_config(None, {"data_dir": str(tmp_path / "d"), "embed.semantic": "off"}),
                      warm_cache=False)
    started = set(threading.enumerate()) - before
    committers = [t for t in started if t.name.startswith("cerememory-commit-")]
    assert len(committers) == 2 and "cerememory-warm" not in {t.name for t in started}
    mem.store("a note to make the close commit something")
    mem.close()
    assert not any(t.is_alive() for t in committers)
    with cerememory.open(tmp_path / "d", semantic="off") as reopened:  # the note was committed
        assert [m.record.id for m in reopened.recall("note").memories]


def _committing_first() -> tuple[GroupCommit[str], list[list[str]], threading.Event, threading.Thread]:
    """A group commit whose thread `first` is committing its write until `release` is set;
    `groups` lists what each commit took."""
    release = threading.Event()
    groups: list[list[str]] = []

    def commit(take: Callable[[], list[Pending[str]]]) -> None:
        group = [p.write for p in take()]
        groups.append(group)
        if group == ["first"]:
            release.wait()

    group_commit: GroupCommit[str] = GroupCommit(commit)
    first = threading.Thread(target=group_commit.submit, args=("first",))
    first.start()
    _until(lambda: bool(groups))
    return group_commit, groups, release, first


def test_writes_queued_behind_a_commit_are_the_next_group_led_by_the_oldest() -> None:
    """The leader answers the writes it committed and hands the lead to the oldest write still
    queued, which takes everything queued meanwhile as one group."""
    group_commit, groups, release, first = _committing_first()
    queued = [threading.Thread(target=group_commit.submit, args=(f"w{i}",)) for i in range(3)]
    for thread in queued:
        thread.start()
    _until(lambda: group_commit.pending() == 3)
    release.set()
    for thread in [first, *queued]:
        thread.join()
    assert groups[0] == ["first"]
    assert sorted(groups[1]) == ["w0", "w1", "w2"] and len(groups) == 2
    assert group_commit.pending() == 0


def test_writes_handed_in_together_by_one_thread_commit_as_one_group_each_refused_alone() -> None:
    groups: list[list[str]] = []

    def commit(take: Callable[[], list[Pending[str]]]) -> None:
        group = take()
        for pending in group:
            if pending.write == "dangling":  # refused, as a write whose association target is gone
                pending.error = LookupError(pending.write)
        groups.append([p.write for p in group if p.error is None])

    group_commit: GroupCommit[str] = GroupCommit(commit)
    errors = group_commit.submit_each([(w, contextvars.copy_context()) for w in ("a", "dangling", "b")])

    assert groups == [["a", "b"]]
    assert errors[0] is None and errors[2] is None and isinstance(errors[1], LookupError)
    assert (group_commit.commits, group_commit.committed) == (1, 2)  # the refused write is not counted
    assert group_commit.pending() == 0


def test_more_writes_handed_in_than_a_group_holds_behind_another_leader_all_commit_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread handing in writes follows the one committing; when the lead comes to its own
    writes it takes it, group after group, and hands it on once all of them are committed."""
    monkeypatch.setattr(group_module, "MAX_GROUP", 2)
    group_commit, groups, release, first = _committing_first()
    outcome: list[list[BaseException | None]] = []
    many = threading.Thread(target=lambda: outcome.append(
        group_commit.submit_each([(f"w{i}", contextvars.copy_context()) for i in range(5)])))
    many.start()
    _until(lambda: group_commit.pending() == 5)
    release.set()
    first.join()
    many.join()

    assert groups == [["first"], ["w0", "w1"], ["w2", "w3"], ["w4"]]
    assert outcome == [[None] * 5]
    assert (group_commit.commits, group_commit.committed) == (4, 6)
    assert group_commit.pending() == 0


def test_calls_handed_in_together_are_each_validated_audited_and_answered_as_their_own(tmp_path: Path) -> None:
    """Dispatcher.call_each: every call in the context it came from (its request id and key),
    a bad one failing alone, the good ones committed as one group."""
    from cerememory.cmp.context import bound

    def in_context(request_id: str) -> contextvars.Context:
        with bound(transport="http", request_id=request_id, key_id="k-" + request_id):
            return contextvars.copy_context()

    dangling = {"content": {"blocks": [{"text": "points nowhere"}]},
                "associations": [{"target_id": str(uuid.uuid4()), "association_type": "semantic"}]}
    calls = [(in_context("r-1"), {"content": {"blocks": [{"text": "the deploy key rotates on Mondays"}]}}),
             (in_context("r-2"), {"content": "not a content object"}),
             (in_context("r-3"), dangling),
             (in_context("r-4"), {"content": {"blocks": [{"text": "lunch is at noon"}]}})]
    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        before = mem.stats()
        outcomes = mem.dispatcher.call_each("encode.store", calls)
        after = mem.stats()
        assert (after.write_commits - before.write_commits, after.writes_committed - before.writes_committed) == (1, 2)
        assert isinstance(outcomes[1], CMPError) and outcomes[1].code is ErrorCode.VALIDATION_ERROR
        assert isinstance(outcomes[2], CMPError) and outcomes[2].code is ErrorCode.RECORD_NOT_FOUND
        stored = {outcomes[0].record_id: "r-1", outcomes[3].record_id: "r-4"}
        assert {m.record.id for m in mem.recall("deploy lunch", limit=10, reconsolidate=False).memories} == set(stored)
    lines = (tmp_path / "d" / "audit.jsonl").read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    for record_id, request_id in stored.items():
        mine = [e for e in entries if e["record_ids"] == [str(record_id)]]
        assert [(e["op"], e["phase"], e["request_id"], e["key_id"]) for e in mine] == [
            ("encode.store", "intent", request_id, "k-" + request_id),
            ("encode.store", "done", request_id, "k-" + request_id)]
    assert not [e for e in entries if e["request_id"] in ("r-2", "r-3")]  # refused before any change


class _CountingEmbedder:
    """A stand-in embedder (a cloud model, say) that counts its calls: 3-d unit vectors."""

    name, offline, dimension = "counting", True, 3

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = np.array([[1.0, float(len(text)), 0.5] for text in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _stores_handed_in_together(mem: cerememory.Memory, texts: list[str]) -> list[Any]:
    return mem.dispatcher.call_each("encode.store", [
        (contextvars.copy_context(), {"content": {"blocks": [{"text": text}]}}) for text in texts])


def _assert_stored_with_vectors(mem: cerememory.Memory, outcomes: list[Any]) -> None:
    for outcome in outcomes:
        assert not isinstance(outcome, BaseException)
        assert outcome.record_id in mem.engine.core.vectors


def test_texts_of_calls_handed_in_together_are_embedded_in_one_batch(tmp_path: Path) -> None:
    texts = ["the deploy key rotates", "lunch at noon", "standup moved to ten"]
    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        embedder = mem.engine.core.embedder = _CountingEmbedder()
        outcomes = _stores_handed_in_together(mem, texts)
        assert embedder.calls == [texts]
        _assert_stored_with_vectors(mem, outcomes)


class _PoisonedEmbedder(_CountingEmbedder):
    """Fails any batch that holds the text "poison", as a backend refusing one input would."""

    def embed(self, texts: list[str]) -> np.ndarray:
        if "poison" in texts:
            raise ValueError("the backend refused an input")
        return super().embed(texts)


def test_a_text_the_embedder_refuses_fails_only_its_own_call_of_a_set(tmp_path: Path) -> None:
    texts = ["the deploy key rotates", "poison", "lunch at noon"]
    with cerememory.open(tmp_path / "d", semantic="off") as mem:
        embedder = mem.engine.core.embedder = _PoisonedEmbedder()
        outcomes = _stores_handed_in_together(mem, texts)
        assert isinstance(outcomes[1], ValueError)
        assert embedder.calls == [["the deploy key rotates"], ["lunch at noon"]]  # the batch failed, then each
        _assert_stored_with_vectors(mem, [outcomes[0], outcomes[2]])
        assert mem.stats().total_records == 2


def test_a_set_handed_in_by_one_thread_leads_without_waiting_for_writes_that_cannot_come(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader waits for as many submissions as the last group held, not as many writes: after
    a set of five from one thread, a set of three is all there is to take (a transport gathers
    stores upstream), so it commits without waiting. With the wait this long, a leader that
    waited for five writes would still be waiting when the bound below gives up."""
    monkeypatch.setattr(group_module, "MAX_WAIT", 3600.0)
    monkeypatch.setattr(group_module, "WAIT_SHARE", 1e6)
    ticks = iter(range(10**6))
    groups: list[list[str]] = []

    def commit(take: Callable[[], list[Pending[str]]]) -> None:
        groups.append([pending.write for pending in take()])

    group_commit: GroupCommit[str] = GroupCommit(commit, clock=lambda: float(next(ticks)))
    group_commit.submit_each([(f"a{i}", contextvars.copy_context()) for i in range(5)])
    second = threading.Thread(target=group_commit.submit_each,
                              args=([(f"b{i}", contextvars.copy_context()) for i in range(3)],))
    second.start()
    second.join(60)
    waited = second.is_alive()
    if waited:  # let it go: the writes it waits for, each from a thread of its own
        for i in range(2):
            threading.Thread(target=group_commit.submit, args=(f"c{i}",), daemon=True).start()
        second.join()
    assert not waited
    assert groups == [[f"a{i}" for i in range(5)], ["b0", "b1", "b2"]]
