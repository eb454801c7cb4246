"""Where a server's CMP calls run (transport/offload.py): a quick read on an idle server on the
event loop's own thread, everything else on a worker thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from cerememory.transport.offload import Placement

where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="unset")


def thread_and_context(pause: float = 0.0) -> tuple[int, str]:
    time.sleep(pause)
    return threading.get_ident(), where.get()


def places(placement: Placement, calls: list[tuple[str, bool, float]], *, gap: float = 0.002) -> list[bool]:
    """For each call (name, inline, seconds it takes), made one after another with `gap` seconds
    between them: whether it ran on the loop's thread."""

    async def scenario() -> list[bool]:
        loop_thread = threading.get_ident()
        where.set("request")
        ran_here = []
        for name, inline, pause in calls:
            await asyncio.sleep(gap)
            thread, seen = await placement.run(name, inline, thread_and_context, pause)
            assert seen == "request"  # the caller's context reaches the call either way
            ran_here.append(thread == loop_thread)
        return ran_here

    return asyncio.run(scenario())


# "Quick" is half a second in these tests, so that a loaded machine never makes a call slow; and
# a server starts calm unless a test is about calm.
QUICK = 0.5


def calm_placement(**options: float) -> Placement:
    return Placement(**{"quick": QUICK, "calm": 1.0, **options})


def test_a_quick_read_on_an_idle_server_runs_on_the_loop_once_it_is_known_to_be_quick():
    assert places(calm_placement(), [("recall.query", True, 0.0)] * 3) == [False, True, True]


def test_a_write_always_runs_on_a_worker():
    assert places(calm_placement(), [("encode.store", False, 0.0)] * 3) == [False, False, False]


def test_a_slow_read_runs_on_a_worker():
    calls = [("recall.query", True, QUICK + 0.1)] * 2 + [("introspect.stats", True, 0.0)] * 2
    assert places(calm_placement(), calls) == [False, False, False, True]


def test_reads_run_on_a_worker_until_the_server_has_been_calm_a_while():
    """With several clients a call now and then finds the server idle: a read runs on the loop
    only once nearly every recent arrival found it so (a server starts out busy)."""
    ran_here = places(Placement(quick=QUICK), [("recall.query", True, 0.0)] * 40)
    assert not any(ran_here[:20]) and all(ran_here[30:])


def test_a_call_arriving_right_after_another_runs_on_a_worker():
    """Requests that waited while a read held the loop start right after it: they go to workers,
    so that concurrent clients are not served one at a time on the loop."""
    placement = calm_placement(idle=0.5)
    assert places(placement, [("recall.query", True, 0.0)] * 3, gap=0.0) == [False, False, False]


def test_a_read_while_another_call_is_under_way_runs_on_a_worker():
    placement = calm_placement()
    places(placement, [("recall.query", True, 0.0)])  # now known to be quick

    async def scenario() -> tuple[bool, bool]:
        await asyncio.sleep(0.002)
        loop_thread = threading.get_ident()
        slow = asyncio.ensure_future(placement.run("encode.store", False, thread_and_context, 0.05))
        await asyncio.sleep(0.01)  # the write is under way on a worker
        (read_thread, _), (write_thread, _) = await asyncio.gather(
            placement.run("recall.query", True, thread_and_context), slow)
        return read_thread == loop_thread, write_thread == loop_thread

    assert asyncio.run(scenario()) == (False, False)


def test_an_error_reaches_the_caller_from_either_place():
    placement = calm_placement()

    def fail() -> None:
        raise ValueError("no")

    async def scenario() -> None:
        for _ in range(3):
            await asyncio.sleep(0.002)
            with pytest.raises(ValueError, match="no"):
                await placement.run("recall.query", True, fail)

    asyncio.run(scenario())
