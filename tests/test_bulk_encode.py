"""encode.batch in bulk: the collector's pause, and batches with caller vectors."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

import cerememory
from cerememory import collector
from cerememory.cmp.errors import CMPError


@pytest.fixture
def collecting() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_pauses_nest_across_threads_and_the_last_one_resumes(collecting: None) -> None:
    first_in, second_out = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other() -> None:
        with collector.paused():
            first_in.set()
            second_out.wait(5)
            seen.append(gc.isenabled())  # the main thread's pause ended meanwhile

    thread = threading.Thread(target=other)
    with collector.paused():
        thread.start()
        first_in.wait(5)
        assert not gc.isenabled()
    second_out.set()
    thread.join(5)
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_the_process_turned_off_stays_off(collecting: None) -> None:
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_a_batch_runs_with_the_collector_paused_and_resumes_it(collecting: None, mem: cerememory.Memory) -> None:
    states: list[bool] = []
    encoding = mem.engine.encoding
    build = encoding.build_records

    def spy(*args: object) -> object:
        states.append(gc.isenabled())
        return build(*args)  # type: ignore[arg-type]

    encoding.build_records = spy  # type: ignore[method-assign]
    mem.store_batch([{"content": {"blocks": [{"text": "one"}]}}])
    with pytest.raises(CMPError):  # a bad batch resumes the collector too
        mem.store_batch([{"content": {"blocks": [{"text": " "}]}}])
    mem.store("a single store leaves the collector alone")
    assert states == [False, True]
    assert gc.isenabled()
