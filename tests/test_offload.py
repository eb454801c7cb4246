"""Where a server's CMP calls run (transport/offload.py): a quick read on the event loop's own
thread, everything else on a worker thread. The CPU a call takes is a test clock that moves only
when a test says so, not timed."""

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


def placement_on(clock: Clock) -> Placement:
    """A placement that reads the CPU calls take from `clock`."""
    return Placement(quick=QUICK, cpu_clock=clock)


def places(placement: Placement, clock: Clock, calls: list[tuple[str, bool, float]]) -> list[bool]:
    """For each call (name, inline, CPU seconds it takes), made one after another: whether it
    ran on the loop's thread."""

    def call(takes: float) -> tuple[int, str]:
        clock.now += takes
        return threading.get_ident(), where.get()

    async def scenario() -> list[bool]:
        loop_thread = threading.get_ident()
        where.set("request")
        ran_here = []
        for name, inline, takes in calls:
            thread, seen = await placement.run(name, inline, call, takes)
            assert seen == "request"  # the caller's context reaches the call either way
            ran_here.append(thread == loop_thread)
        return ran_here

    return asyncio.run(scenario())


def test_a_quick_read_runs_on_the_loop_once_it_is_known_to_be_quick():
    clock = Clock()
    assert places(placement_on(clock), clock, [("recall.query", True, 0.001)] * 3) == [False, True, True]


def test_a_write_always_runs_on_a_worker():
    clock = Clock()
    assert places(placement_on(clock), clock, [("encode.store", False, 0.0)] * 3) == [False, False, False]


def test_a_slow_read_runs_on_a_worker_and_a_quick_one_beside_it_on_the_loop():
    clock = Clock()
    calls = [("recall.query", True, 0.01)] * 2 + [("introspect.stats", True, 0.0)] * 2
    assert places(placement_on(clock), clock, calls) == [False, False, False, True]


def test_a_quick_read_runs_on_the_loop_while_a_write_is_under_way_on_a_worker():
    """However busy the server: the work of all calls shares one interpreter lock, so a worker
    would only add hand-offs to a quick read."""
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
        writing = asyncio.ensure_future(placement.run("encode.store", False, write))
        # the write is under way on a worker (waited for off the loop, and not for ever)
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 60)
        read_thread = await placement.run("recall.query", True, threading.get_ident)
        release.set()
        return read_thread == loop_thread, await writing == loop_thread

    assert asyncio.run(scenario()) == (True, False)


def test_a_read_on_the_loop_lets_what_is_waiting_run_first():
    """Every connection's requests take their turn: a read does not hold the loop ahead of the
    work already waiting on it (a request read before it)."""
    clock = Clock()
    placement = placement_on(clock)
    places(placement, clock, [("recall.query", True, 0.0)])  # now known to be quick
    order: list[str] = []

    async def waiting() -> None:
        order.append("waiting")

    async def scenario() -> None:
        asyncio.ensure_future(waiting())
        await placement.run("recall.query", True, order.append, "read")

    asyncio.run(scenario())
    assert order == ["waiting", "read"]


def test_a_read_that_grows_slow_goes_back_to_a_worker():
    clock = Clock()
    calls = [("recall.query", True, 0.0)] * 2 + [("recall.query", True, 0.05)] + [("recall.query", True, 0.0)]
    assert places(placement_on(clock), clock, calls) == [False, True, True, False]


def test_what_a_read_waits_for_on_a_worker_does_not_make_it_slow():
    """The thread's own CPU is counted, not the time it waited (here, for an event): a read that
    waited on a busy server still runs on the loop next time."""
    placement = Placement(quick=QUICK)
    waited = threading.Event()

    def read() -> int:
        waited.wait(0.05)  # a wait, not work
        return threading.get_ident()

    async def scenario() -> list[bool]:
        loop_thread = threading.get_ident()
        return [await placement.run("recall.query", True, read) == loop_thread for _ in range(2)]

    assert asyncio.run(scenario()) == [False, True]


def test_an_error_reaches_the_caller_from_either_place():
    clock = Clock()
    placement = placement_on(clock)

    def fail() -> None:
        raise ValueError("no")

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(ValueError, match="no"):
                await placement.run("recall.query", True, fail)

    asyncio.run(scenario())
