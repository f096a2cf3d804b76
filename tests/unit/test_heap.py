"""``engine.heap.trim``: what a burst of work on another thread freed goes back to the system (#44 point 19)."""

from __future__ import annotations

import sys
import threading

import pytest

from engine.heap import trim


def resident_mb() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux only")
def test_memory_a_worker_thread_freed_is_returned() -> None:
    survivors: list[bytearray] = []

    def burst() -> None:  # ~180 MB of small buffers in this thread's malloc arena; a few survive, as after indexing
        buffers = [bytearray(600) for _ in range(300_000)]
        survivors.extend(buffers[::1000])

    worker = threading.Thread(target=burst)
    worker.start()
    worker.join()
    before = resident_mb()
    assert trim() is True
    assert resident_mb() < before - 100  # the freed buffers were still counted until now
    assert len(survivors) == 300
