"""The warm-up thread's heavy part waits for the first recall and then for a pause in requests;
closing first means it never runs."""

from __future__ import annotations

import threading
from collections.abc import Callable

from cerememory.engine.warmup import Warmup


class FixedClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_idle_once_no_request_came_for_the_quiet_time():
    clock = FixedClock(100.0)
    stop = threading.Event()
    warmup = Warmup(stop, quiet=1.0, clock=clock)
    clock.now = 101.5
    assert warmup.idle()
    with warmup.serving():  # a request answered at 101.5: not idle until 102.5
        pass
    clock.now = 102.6
    assert warmup.idle()


def test_waiting_for_a_pause_ends_when_closing_begins():
    clock = FixedClock(100.0)
    stop = threading.Event()
    warmup = Warmup(stop, quiet=3600.0, clock=clock)
    stopper = threading.Timer(0.05, stop.set)
    stopper.start()
    assert not warmup.idle()  # would wait an hour of this clock; closing ends it
    stopper.join()


def test_a_running_request_keeps_the_process_busy_however_long_it_takes():
    clock = FixedClock(100.0)
    stop = threading.Event()
    warmup = Warmup(stop, quiet=1.0, clock=clock)
    with warmup.serving():
        clock.now = 200.0  # long past the quiet time, but the request still runs
        stopper = threading.Timer(0.05, stop.set)
        stopper.start()
        assert not warmup.idle()
        stopper.join()


def test_steps_run_in_order_after_the_first_recall_each_given_the_idle_gate():
    stop = threading.Event()
    warmup = Warmup(stop, quiet=0.0)
    ran: list[tuple[str, bool]] = []
    done = threading.Event()

    def step(name: str) -> Callable[[Callable[[], bool]], None]:
        def run(idle: Callable[[], bool]) -> None:
            ran.append((name, idle()))
            if name == "second":
                done.set()
        return run

    warmup.opened(step("first"), step("second"))
    warmup.start()
    with warmup.serving():  # not a recall: the steps still wait
        pass
    assert not ran
    with warmup.serving(recall=True):
        pass
    assert done.wait(60)
    stop.set()
    warmup.join()
    assert ran == [("first", True), ("second", True)]


def test_closing_before_the_first_recall_runs_no_step():
    stop = threading.Event()
    warmup = Warmup(stop, quiet=0.0)
    ran: list[str] = []
    warmup.opened(lambda idle: ran.append("step"))
    warmup.start()
    stop.set()
    warmup.join()
    assert ran == []
