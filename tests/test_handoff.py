"""The writer's lock hands work to its holder: the work runs once, under the lock, and what it
raises reaches the thread that handed it, never the holder that happened to run it."""

from __future__ import annotations

import threading

import pytest

from cerememory.engine.handoff import HandoffLock


def _held_elsewhere(lock: HandoffLock) -> bool:
    """Whether another thread holds `lock` now (it cannot take it without waiting)."""
    taken: list[bool] = []

    def probe() -> None:
        taken.append(lock.acquire(blocking=False))
        if taken[0]:
            lock.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return not taken[0]


def _hand_in_thread(lock: HandoffLock, work) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def hand() -> None:
        try:
            lock.hand(work)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=hand)
    thread.start()
    return thread, raised


def test_work_handed_while_the_lock_is_held_runs_once_under_it() -> None:
    lock = HandoffLock()
    runs: list[bool] = []
    lock.acquire()
    thread, raised = _hand_in_thread(lock, lambda: runs.append(_held_elsewhere(lock)))
    lock.release()  # the work runs now, here or in the thread that handed it, once
    thread.join()
    assert runs == [True] and raised == []
    assert lock.acquire(blocking=False)  # and the lock is free again
    lock.release()


def test_what_the_work_raises_reaches_the_thread_that_handed_it() -> None:
    lock = HandoffLock()

    def fail() -> None:
        raise ValueError("the database went away")

    lock.acquire()
    thread, raised = _hand_in_thread(lock, fail)
    lock.release()  # never raises, even when this thread ran the work
    thread.join()
    assert [str(exc) for exc in raised] == ["the database went away"]


def test_the_holder_that_hands_work_runs_it_at_once() -> None:
    lock = HandoffLock()
    runs: list[str] = []
    with lock:
        lock.hand(lambda: runs.append("ran"))
        assert runs == ["ran"]
    with pytest.raises(KeyError), lock:
        lock.hand(lambda: {}["missing"])
    assert lock.acquire(blocking=False)
    lock.release()
