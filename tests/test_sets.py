"""Calls that threads make at once run as sets (cerememory/sets.py): the calls arriving while a
set runs are the next set, and each caller gets its own outcome or error."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from cerememory.sets import Sets


class SetsSeen:
    """A run that records the sets it is handed; the first set waits for `release`."""

    def __init__(self) -> None:
        self.sets: list[list[str]] = []
        self.release = threading.Event()

    def __call__(self, items: list[str]) -> list[str | BaseException]:
        self.sets.append(items)
        if len(self.sets) == 1:
            self.release.wait()
        return [ValueError(item) if item == "bad" else item.upper() for item in items]


def _until(condition: Callable[[], bool]) -> None:
    event = threading.Event()
    while not condition():
        event.wait(0.005)


def _calls(sets: Sets[str, str], items: tuple[str, ...]) -> tuple[list[threading.Thread], dict[str, Any]]:
    outcomes: dict[str, Any] = {}

    def call(item: str) -> None:
        try:
            outcomes[item] = sets.call(item)
        except Exception as exc:  # noqa: BLE001 - what the caller was told
            outcomes[item] = exc

    threads = [threading.Thread(target=call, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    return threads, outcomes


def test_calls_arriving_while_a_set_runs_are_the_next_set_each_told_its_own_outcome() -> None:
    run = SetsSeen()
    sets: Sets[str, str] = Sets(run)
    first, outcomes = _calls(sets, ("first",))
    _until(lambda: bool(run.sets))
    others, more = _calls(sets, ("a", "bad", "b"))
    _until(lambda: sets.waiting() == 3)
    run.release.set()
    for thread in first + others:
        thread.join()

    assert run.sets == [["first"], ["a", "bad", "b"]]
    assert outcomes == {"first": "FIRST"}
    assert (more["a"], more["b"]) == ("A", "B")
    assert isinstance(more["bad"], ValueError)
    assert sets.waiting() == 0


def test_a_lone_call_is_a_set_of_one() -> None:
    run = SetsSeen()
    run.release.set()
    sets: Sets[str, str] = Sets(run)
    assert sets.call("alone") == "ALONE"
    assert sets.call("again") == "AGAIN"
    assert run.sets == [["alone"], ["again"]]


@pytest.mark.parametrize("broken", [
    lambda items: (_ for _ in ()).throw(OSError("the run failed")),  # raises
    lambda items: ["one outcome too few"][: len(items) - 1],  # loses a call's outcome
])
def test_a_run_that_fails_tells_every_caller_of_its_set_and_the_next_set_still_runs(broken: Any) -> None:
    release = threading.Event()
    seen: list[list[str]] = []

    def run(items: list[str]) -> Any:
        seen.append(items)
        if len(seen) == 1:
            release.wait()
            return ["x"]
        return broken(items) if len(seen) == 2 else [item.upper() for item in items]

    sets: Sets[str, str] = Sets(run)
    first, _ = _calls(sets, ("first",))
    _until(lambda: bool(seen))
    failing, outcomes = _calls(sets, ("a", "b"))
    _until(lambda: sets.waiting() == 2)
    release.set()
    for thread in first + failing:
        thread.join()
    assert all(isinstance(outcomes[item], OSError | RuntimeError) for item in ("a", "b"))
    assert sets.call("after") == "AFTER"
