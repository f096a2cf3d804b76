"""A burst of finished background calls reaching the GUI thread: app.workers' pool-and-relay vs app.tasks (qasync).

    QT_QPA_PLATFORM=offscreen python tests/bench/bench_gui_burst.py [--n 2000] [--repeats 3] [--out FILE]

``--n`` calls of a 0.5 ms function on a two-thread pool, all asked for in one pass of the event loop (as a page of
thumbnails is), each result appended on the GUI thread; the 5 ms probe of ``bench_gui.py`` measures the event
loop's stalls meanwhile. ``submit_ms``: the asking pass itself (the relay makes a signals object and three
connections per job; a coroutine is a task and a future). Mechanisms alternate, ``--repeats`` times each.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def work(i: int) -> int:
    time.sleep(0.0005)
    return i


def burst(app, kind: str, n: int) -> dict:  # noqa: ANN001 - the QApplication
    from PySide6.QtCore import QThreadPool
    from PySide6.QtWidgets import QWidget

    from app.tasks import off_thread, start
    from app.workers import run_in_background
    from tests.bench.bench_gui import StallProbe

    owner, pool, done = QWidget(), QThreadPool(), []
    pool.setMaxThreadCount(2)
    settle = time.perf_counter() + 0.3
    while time.perf_counter() < settle:
        app.processEvents()
        time.sleep(0.001)
    probe = StallProbe()
    t0 = time.perf_counter()
    if kind == "relay":
        for i in range(n):
            run_in_background(work, i, pool=pool, on_result=done.append)
    else:
        async def one(i: int) -> None:
            done.append(await off_thread(owner, work, i, pool=pool))
        for i in range(n):
            start(one(i))
    submitted = time.perf_counter() - t0
    while len(done) < n:
        app.processEvents()
        time.sleep(0.001)
    elapsed = time.perf_counter() - t0
    stalls = probe.stop()
    pool.waitForDone()
    return {"kind": kind, "n": n, "submit_ms": round(submitted * 1000, 1), "all_delivered_s": round(elapsed, 3),
            **{k: stalls[k] for k in ("worst_stall_ms", "p99_stall_ms", "worst_gui_busy_ms", "p99_gui_busy_ms")}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench-results" / "gui-h33-burst.json")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    import app.qtcompat  # noqa: F401

    app = QApplication.instance() or QApplication([])
    runs = [burst(app, kind, args.n) for _ in range(args.repeats) for kind in ("relay", "qasync")]
    for run in runs:
        print(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs, "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
                                   indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
