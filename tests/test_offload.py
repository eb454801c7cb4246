"""Where a server's CMP calls run (transport/offload.py): a quick read on a calm server on the
event loop's own thread, everything else on a worker thread. Time is a test clock that moves only
when a test says so: how long a call takes and how far apart calls arrive are given, not timed."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from cerememory.transport.offload import Placement

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")

QUICK = 0.003


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def placement_on(clock: Clock, **options: float) -> Placement:
    """A placement on `clock`; calm from the start unless `calm` is given."""
    return Placement(clock=clock, **{"quick": QUICK, "calm": 1.0, **options})


def places(placement: Placement, clock: Clock, calls: list[tuple[str, bool, float]], *,
           gap: float = 0.002) -> list[bool]:
    """For each call (name, inline, seconds it takes), made one after another `gap` seconds
    apart: whether it ran on the loop's thread."""

    def call(takes: float) -> tuple[int, str]:
        clock.now += takes
        return threading.get_ident(), where.get()

    async def scenario() -> list[bool]:
        loop_thread = threading.get_ident()
        where.set("request")
        ran_here = []
        for name, inline, takes in calls:
            clock.now += gap
            thread, seen = await placement.run(name, inline, call, takes)
            assert seen == "request"  # the caller's context reaches the call either way
            ran_here.append(thread == loop_thread)
        return ran_here

    return asyncio.run(scenario())


def test_a_quick_read_on_a_calm_server_runs_on_the_loop_once_it_is_known_to_be_quick():
    clock = Clock()
    assert places(placement_on(clock), clock, [("recall.query", True, 0.001)] * 3) == [False, True, True]


def test_a_write_always_runs_on_a_worker():
    clock = Clock()
    assert places(placement_on(clock), clock, [("encode.store", False, 0.0)] * 3) == [False, False, False]


def test_a_slow_read_runs_on_a_worker_and_a_quick_one_beside_it_on_the_loop():
    clock = Clock()
    calls = [("recall.query", True, 0.01)] * 2 + [("introspect.stats", True, 0.0)] * 2
    assert places(placement_on(clock), clock, calls) == [False, False, False, True]


def test_reads_run_on_a_worker_until_the_server_has_been_calm_a_while():
    """With several clients a call now and then finds the server idle: a read runs on the loop
    only once nearly every recent arrival found it so (a server starts out busy)."""
    clock = Clock()
    ran_here = places(Placement(quick=QUICK, clock=clock), clock, [("recall.query", True, 0.0)] * 40)
    assert not any(ran_here[:20]) and all(ran_here[30:])


def test_a_call_arriving_right_after_another_runs_on_a_worker():
    """Requests that waited while a read held the loop start right after it: they go to workers,
    so that concurrent clients are not served one at a time on the loop."""
    clock = Clock()
    placement = placement_on(clock)
    places(placement, clock, [("recall.query", True, 0.0)])  # now known to be quick
    assert places(placement, clock, [("recall.query", True, 0.0)] * 3, gap=0.0) == [False, False, False]


def test_a_read_while_another_call_is_under_way_runs_on_a_worker():
    clock = Clock()
    placement = placement_on(clock)
    places(placement, clock, [("recall.query", True, 0.0)])  # now known to be quick
    started, release = threading.Event(), threading.Event()

    def write() -> int:
        started.set()
        release.wait(60)
        return threading.get_ident()

    async def scenario() -> tuple[bool, bool]:
        loop_thread = threading.get_ident()
        clock.now += 1.0
        writing = asyncio.ensure_future(placement.run("encode.store", False, write))
        # the write is under way on a worker (waited for off the loop, and not for ever)
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
        read_thread = await placement.run("recall.query", True, threading.get_ident)
        release.set()
        return read_thread == loop_thread, await writing == loop_thread

    assert asyncio.run(scenario()) == (False, False)


def test_an_error_reaches_the_caller_from_either_place():
    clock = Clock()
    placement = placement_on(clock)

    def fail() -> None:
        raise ValueError("no")

    async def scenario() -> None:
        for _ in range(3):
            clock.now += 1.0
            with pytest.raises(ValueError, match="no"):
                await placement.run("recall.query", True, fail)

    asyncio.run(scenario())
