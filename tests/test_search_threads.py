"""Work shared between the calling thread and the scan pool: every row is done whatever the
helpers do, nothing is shared while other processes keep the cores busy, and the thread count
follows the BLAS policy."""

from __future__ import annotations

import threading

import pytest

from cerememory.index import threads


@pytest.fixture
def two_idle_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "search_threads", lambda: 2)
    monkeypatch.setattr(threads, "CORES", 2)
    monkeypatch.setattr(threads._others, "cores_busy", lambda: 0.0)


@pytest.mark.usefixtures("two_idle_cores")
def test_every_row_is_done_once_share_returns() -> None:
    out: list[int | None] = [None] * 50

    def work(start: int, stop: int) -> None:
        for row in range(start, stop):
            out[row] = row * row

    for _ in range(20):
        out[:] = [None] * 50
        threads.share(len(out), 4, work)
        assert out == [row * row for row in range(50)]


@pytest.mark.usefixtures("two_idle_cores")
def test_a_piece_a_helper_fails_is_run_by_the_caller() -> None:
    caller = threading.get_ident()
    done: set[int] = set()

    def work(start: int, stop: int) -> None:
        if threading.get_ident() != caller:
            raise RuntimeError("a helper fails")
        done.update(range(start, stop))

    threads.share(30, 3, work)
    assert done == set(range(30))


def test_nothing_is_shared_while_other_processes_keep_the_cores_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "search_threads", lambda: 2)
    monkeypatch.setattr(threads, "CORES", 2)
    monkeypatch.setattr(threads._others, "cores_busy", lambda: 0.9)
    assert threads.helper_threads(10) == 0
    calls: list[tuple[int, int]] = []
    threads.share(100, 10, lambda start, stop: calls.append((start, stop)))
    assert calls == [(0, 100)]  # one call over all rows, on the calling thread
    monkeypatch.setattr(threads._others, "cores_busy", lambda: 0.2)
    assert threads.helper_threads(10) == 1
    assert threads.helper_threads(1) == 0  # one piece: the caller's


def test_an_error_surfaces() -> None:
    def work(start: int, stop: int) -> None:
        raise ValueError("rows")

    with pytest.raises(ValueError, match="rows"):
        threads.share(50, 10, work)


def test_the_busy_cores_of_other_processes_are_read_from_the_machine() -> None:
    others = threads._Others()
    assert others.cores_busy() == 0.0  # the first reading only starts the clock
    others.at = (others.at or 0.0) - threads.LOAD_SAMPLE_S  # as if half a second had passed
    assert 0.0 <= others.cores_busy() <= threads.CORES


def test_a_blas_thread_count_the_user_set_caps_the_search_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in threads.BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "CORES", 4)
    assert threads.search_threads() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.search_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert threads.search_threads() == 3
