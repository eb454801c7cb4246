"""Work shared between the calling thread and the scan pool: every piece runs, whatever the
helpers do, and the thread count follows the BLAS policy."""

from __future__ import annotations

import threading

import pytest

from cerememory.index import threads


def test_every_piece_is_done_once_share_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "search_threads", lambda: 2)
    out: list[int | None] = [None] * 50
    for _ in range(20):
        out[:] = [None] * 50

        def piece(p: int) -> None:
            out[p] = p * p

        threads.share(len(out), piece)
        assert out == [p * p for p in range(50)]


def test_a_piece_a_helper_fails_is_run_by_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "search_threads", lambda: 2)
    caller = threading.get_ident()
    done: set[int] = set()

    def piece(p: int) -> None:
        if threading.get_ident() != caller:
            raise RuntimeError("a helper fails")
        done.add(p)

    threads.share(30, piece)
    assert done == set(range(30))


def test_an_error_on_the_calling_thread_surfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "search_threads", lambda: 1)

    def piece(p: int) -> None:
        if p == 3:
            raise ValueError("piece 3")

    with pytest.raises(ValueError, match="piece 3"):
        threads.share(5, piece)


def test_a_blas_thread_count_the_user_set_caps_the_search_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in threads.BLAS_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    assert threads.search_threads() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads.search_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert threads.search_threads() == 3
