"""A text query runs its small numerical products on its own thread (engine/search/threads.py): the BLAS pools are
held to one thread while a query runs, also when queries overlap, and given back after the last one."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from threadpoolctl import threadpool_info

from engine.search import threads
from engine.search.zeroshot import ZeroShotIndex
from engine.workspace import Workspace
from tests.mediagen import make_jpeg


def _blas_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


@pytest.fixture
def two_threads():
    """The BLAS pools at two threads around the test (a one-core machine would show nothing)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=2, user_api="blas"):
        assert _blas_threads() == {2}
        yield


def test_overlapping_queries_hold_the_pools_at_one_thread_until_the_last_ends(two_threads):
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, set[int]] = {}

    def first() -> None:
        with threads.one_thread():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    worker = threading.Thread(target=first)
    with threads.one_thread():
        worker.start()
        first_in.wait(5)
        second_in.set()
        first_out.wait(5)
        seen["after the first ended"] = _blas_threads()
    worker.join()
    assert seen["after the first ended"] == {1}
    assert _blas_threads() == {2}


def test_a_text_query_computes_on_one_thread_and_gives_the_pools_back(two_threads, assets_dir: Path,
                                                                      tmp_path: Path, monkeypatch):
    folder = tmp_path / "media"
    folder.mkdir()
    for i, colour in enumerate([(200, 30, 30), (30, 200, 30), (30, 30, 200)]):
        make_jpeg(folder / f"photo{i}.jpg", (48, 40), colour)
    service = Workspace.open("threads", assets_dir)
    list(service.library.index([folder]))
    during: list[set[int]] = []
    real = ZeroShotIndex.query_columns
    monkeypatch.setattr(ZeroShotIndex, "query_columns",
                        lambda self, *a, **k: (during.append(_blas_threads()), real(self, *a, **k))[1])
    assert service.search.text("a red square")  # the first query also imports the libraries it needs
    during.clear()
    assert service.search.text("a green square")
    service.close()
    assert during and all(seen == {1} for seen in during)
    assert _blas_threads() == {2}
