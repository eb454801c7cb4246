"""Calls that threads make at once of an operation the engine takes together run as sets
(cmp/gather.py): each caller gets its own answer or error, in its own context."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from cerememory.cmp.gather import Gathered

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


class Answer(BaseModel):
    body: str
    who: str


class SetsSeen:
    """A dispatcher that records the sets it is handed; the first set waits for `release`."""

    def __init__(self) -> None:
        self.sets: list[list[str]] = []
        self.release = threading.Event()

    def call_each(self, name: str, calls: list[tuple[contextvars.Context, Any]]) -> list[BaseModel | BaseException]:
        self.sets.append([body for _, body in calls])
        if len(self.sets) == 1:
            self.release.wait()
        return [ValueError(body) if body == "bad" else Answer(body=body, who=context.run(WHO.get))
                for context, body in calls]


def _until(condition: Callable[[], bool]) -> None:
    event = threading.Event()
    while not condition():
        event.wait(0.005)


def test_calls_arriving_while_a_set_runs_are_the_next_set_each_answered_in_its_own_context() -> None:
    dispatcher = SetsSeen()
    gathered = Gathered(dispatcher, "encode.store")  # type: ignore[arg-type]
    outcomes: dict[str, Any] = {}

    def call(body: str) -> None:
        WHO.set(f"caller of {body}")
        try:
            outcomes[body] = gathered.call(body)  # type: ignore[arg-type]
        except ValueError as exc:
            outcomes[body] = exc

    first = threading.Thread(target=call, args=("first",))
    first.start()
    _until(lambda: bool(dispatcher.sets))
    others = [threading.Thread(target=call, args=(body,)) for body in ("a", "bad", "b")]
    for thread in others:
        thread.start()
    _until(lambda: gathered.waiting() == 3)
    dispatcher.release.set()
    for thread in [first, *others]:
        thread.join()

    assert dispatcher.sets == [["first"], ["a", "bad", "b"]]
    assert outcomes["first"] == Answer(body="first", who="caller of first")
    assert outcomes["a"] == Answer(body="a", who="caller of a")
    assert outcomes["b"] == Answer(body="b", who="caller of b")
    assert isinstance(outcomes["bad"], ValueError)
    assert gathered.waiting() == 0


def test_a_lone_call_is_a_set_of_one() -> None:
    dispatcher = SetsSeen()
    dispatcher.release.set()
    gathered = Gathered(dispatcher, "encode.store")  # type: ignore[arg-type]
    assert gathered.call("alone") == Answer(body="alone", who="nobody")  # type: ignore[arg-type]
    assert gathered.call("again") == Answer(body="again", who="nobody")  # type: ignore[arg-type]
    assert dispatcher.sets == [["alone"], ["again"]]
