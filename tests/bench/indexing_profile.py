"""Where one indexing run spends its CPU: per stage, per thread, lock waits, bytes written.

Used by ``bench_indexing.py --profile``. Wraps the functions of each stage (hash, decode, backbone, finishing,
feature-store write, catalog writes, the active model's embedding) with per-thread CPU clocks
(``time.thread_time``), times every wait on the SQLite stores' locks, and reads every thread's CPU from
``/proc/self/task`` at the end: the threads that never ran Python are ONNX Runtime's intra-op workers, so the
backbone's CPU is its calling thread's share plus theirs.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path


class Stages:
    """Per-stage CPU seconds (thread CPU of the caller) and calls, collected from patched functions."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.python_tids: dict[int, str] = {}
        self._mutex = threading.Lock()
        self._undo: list[Callable[[], None]] = []

    def patch(self, owner: object, name: str, stage: str) -> None:
        original = getattr(owner, name)
        stages = self

        def timed(*args, **kwargs):
            tid = threading.get_native_id()
            stages.python_tids.setdefault(tid, threading.current_thread().name.split("_")[0])
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                stages.add(stage, time.thread_time() - cpu, time.perf_counter() - wall)

        def timed_generator(*args, **kwargs):
            steps = original(*args, **kwargs)
            while True:
                cpu, wall = time.thread_time(), time.perf_counter()
                try:
                    step = next(steps)
                except StopIteration:
                    return
                finally:
                    stages.add(stage, time.thread_time() - cpu, time.perf_counter() - wall)
                yield step

        setattr(owner, name, timed_generator if inspect.isgeneratorfunction(original) else timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def add(self, stage: str, cpu: float, wall: float) -> None:
        with self._mutex:
            self.cpu[stage] += cpu
            self.wall[stage] += wall
            self.calls[stage] += 1

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


class TimedLock:
    """An RLock that adds up how long acquiring it waited (the SQLite stores' one lock around their connection)."""

    def __init__(self, inner, waits: dict[str, float], name: str) -> None:
        self._inner, self._waits, self._name = inner, waits, name

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._inner.acquire(blocking=False):
            return True
        start = time.perf_counter()
        got = self._inner.acquire(blocking, timeout)
        self._waits[self._name] += time.perf_counter() - start
        return got

    def release(self) -> None:
        self._inner.release()

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()


def thread_cpu() -> dict[int, float]:
    """CPU seconds of every thread of this process, by native thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


@contextmanager
def profiled(service):
    """Patch the pipeline's stages (and the service's store locks) for one run; yields the collected figures."""
    import engine.features.extract as extract
    import engine.library.indexer as indexer
    from engine.features.backbone import Backbone
    from engine.features.featurestore import FeatureStore
    from engine.search.trained import TrainedSearch

    stages = Stages()
    stages.patch(indexer, "content_hash", "hash")
    stages.patch(extract, "decode_for_backbone", "decode")
    stages.patch(Backbone, "__call__", "backbone (calling thread)")
    stages.patch(extract.FeatureExtractor, "_finish", "finish (semantics, record)")
    stages.patch(FeatureStore, "put_many", "feature store write")
    stages.patch(indexer.Indexer, "_store", "store (catalog + feature store)")
    stages.patch(TrainedSearch, "sync", "active model embeds new items")
    waits: dict[str, float] = defaultdict(float)
    locks = {"catalog": service.state.catalog, "features": service.state.features}
    for name, store in locks.items():
        store._lock = TimedLock(store._lock, waits, name)
    figures = {"stages": stages, "waits": waits}
    before = thread_cpu()
    stages.python_tids[threading.get_native_id()] = "main"
    try:
        yield figures
    finally:
        after = thread_cpu()
        stages.restore()
        for store in locks.values():
            store._lock = store._lock._inner
        per_thread: dict[str, float] = defaultdict(float)
        for tid, cpu in after.items():
            per_thread[stages.python_tids.get(tid, "native (ONNX Runtime)")] += cpu - before.get(tid, 0.0)
        figures["threads"] = dict(per_thread)


def report(figures: dict, n: int, process_cpu_s: float, wall_s: float, store_bytes: int) -> dict:
    """Per-item figures in ms (and bytes), with the backbone's CPU as its calling thread's plus the native
    threads', and what is left of the process CPU as "other"."""
    stages: Stages = figures["stages"]
    cpu = dict(stages.cpu)
    store = cpu.pop("store (catalog + feature store)", 0.0)
    cpu["catalog writes"] = store - cpu.get("feature store write", 0.0)
    native = figures["threads"].get("native (ONNX Runtime)", 0.0)
    cpu["backbone (all threads)"] = cpu.pop("backbone (calling thread)", 0.0) + native
    cpu["other (scan, plan, hand-offs)"] = process_cpu_s - sum(cpu.values())
    ms = {k: round(1000 * v / n, 3) for k, v in sorted(cpu.items())}
    return {"n": n, "wall_s": wall_s, "process_cpu_ms_per_item": round(1000 * process_cpu_s / n, 3),
            "stage_cpu_ms_per_item": ms,
            "stage_wall_ms_per_item": {k: round(1000 * v / n, 3) for k, v in sorted(stages.wall.items())},
            "thread_cpu_ms_per_item": {k: round(1000 * v / n, 3) for k, v in sorted(figures["threads"].items())},
            "lock_wait_ms_per_item": {k: round(1000 * v / n, 3) for k, v in figures["waits"].items()},
            "feature_store_bytes_per_item": round(store_bytes / n)}
