"""The indexing job runs at a lower CPU priority than the GUI thread (app.workers.lower_this_thread): as an index
run started, its threads (ONNX Runtime's, the decoders', the hashers') took both cores and the event loop waited
60-80 ms (bench_gui.py --only indexing); at nice 10 the worst wait was 42-48 ms, the indexing as fast."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from app.workers import BACKGROUND_NICE, lower_this_thread

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities: Linux only")


def niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux
def test_only_the_calling_thread_and_the_threads_it_starts_are_lowered() -> None:
    seen: dict[str, int] = {}

    def job() -> None:
        assert lower_this_thread()
        seen["job"] = niceness()
        child = threading.Thread(target=lambda: seen.__setitem__("started by it", niceness()))
        child.start()
        child.join()

    before = niceness()
    worker = threading.Thread(target=job)
    worker.start()
    worker.join()
    assert seen == {"job": max(before, BACKGROUND_NICE), "started by it": max(before, BACKGROUND_NICE)}
    assert niceness() == before  # the GUI thread keeps its priority


@linux
def test_the_library_panel_runs_its_jobs_at_the_lower_priority(qtbot, window) -> None:
    seen: list[int] = []

    def job(cancel):
        seen.append(niceness())
        yield from ()

    before = niceness()
    with qtbot.waitSignal(window.library.indexing_finished, timeout=5000):
        window.library.run_job(job, "Indexing")
    assert seen == [max(before, BACKGROUND_NICE)]
    assert niceness() == before  # the GUI thread's own priority is untouched
