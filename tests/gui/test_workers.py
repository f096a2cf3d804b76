"""The worker helper: results, progress, errors and cancellation arrive as signals on the GUI thread."""

from __future__ import annotations

import threading
import weakref
from functools import partial

from PySide6.QtCore import QThreadPool

from app.workers import Worker, run_in_background
from engine.progress import CancelToken, Progress


def test_function_result_arrives_on_the_gui_thread(qtbot) -> None:
    seen: list[tuple[int, bool]] = []

    def record(result: int) -> None:
        seen.append((result, threading.current_thread() is threading.main_thread()))

    run_in_background(lambda a, b: a + b, 2, 3, on_result=record)
    qtbot.waitUntil(lambda: bool(seen), timeout=3000)
    assert seen == [(5, True)]


def test_generator_progress_and_return_value(qtbot) -> None:
    def job():
        for i in range(1, 4):
            yield Progress(i, 3, f"item {i}")
        return "all done"

    worker = Worker(job)
    records: list[Progress] = []
    worker.signals.progress.connect(records.append)
    with qtbot.waitSignal(worker.signals.returned, timeout=3000) as returned:
        worker.start(QThreadPool.globalInstance())
    assert returned.args == ["all done"]
    assert records[-1] == Progress(3, 3, "item 3")  # the last record is never coalesced away


def test_errors_become_signals(qtbot) -> None:
    def job():
        raise RuntimeError("no such media 7")

    worker = Worker(job)
    with qtbot.waitSignal(worker.signals.errored, timeout=3000) as errored:
        worker.start()
    assert str(errored.args[0]) == "no such media 7"


def test_cancel_reaches_a_cooperative_job(qtbot) -> None:
    started = threading.Event()

    def job(cancel: CancelToken):
        for i in range(10_000):
            started.set()
            cancel.raise_if_cancelled()
            yield Progress(i, 10_000)
            threading.Event().wait(0.001)

    worker = Worker(job)
    with qtbot.waitSignal(worker.signals.cancelled, timeout=5000):
        worker.start()
        started.wait(2)
        worker.cancel()
    assert worker.is_cancelled


def test_while_alive_drops_results_for_a_deleted_widget(qtbot) -> None:
    from PySide6.QtWidgets import QLabel

    from app.workers import while_alive

    label = QLabel()
    seen: list[int] = []
    alive = while_alive(label, lambda value: (seen.append(value), label.setText(str(value))))
    alive(1)
    import shiboken6

    shiboken6.delete(label)
    alive(2)  # a result arriving after the widget is gone is dropped, not an error
    assert seen == [1]


def test_finished_workers_are_freed(qtbot) -> None:
    """Only the last FINISHED_KEPT finished workers stay alive: a slot capturing the worker, and a runnable
    handed to the pool as a QRunnable, once kept every worker ever started (and its signals) alive."""
    import gc

    from app.workers import FINISHED_KEPT

    def job(n: int) -> int:
        return n

    def ours() -> list[Worker]:
        return [o for o in gc.get_objects() if type(o) is Worker and o._fn is job]

    pool = QThreadPool()
    results: list[int] = []
    workers = [run_in_background(job, i, on_result=results.append, pool=pool) for i in range(FINISHED_KEPT * 3)]
    signals, keys = [weakref.ref(w.signals) for w in workers], {w._key for w in workers}
    del workers
    qtbot.waitUntil(lambda: len(results) == FINISHED_KEPT * 3
                    and not any(w._fn is job for w in Worker._running.values()), timeout=10000)
    pool.waitForDone()
    qtbot.wait(50)
    gc.collect()
    assert len(ours()) <= FINISHED_KEPT
    # their signals objects go with them (deleteLater() left each one's Python side behind in PySide 6.12), and
    # so does what was connected to them
    assert sum(ref() is not None for ref in signals) <= FINISHED_KEPT
    assert sum(type(o) is partial and o.func is Worker._retire and o.args[0] in keys
               for o in gc.get_objects()) <= FINISHED_KEPT


def test_an_expected_failure_is_reported_without_a_traceback(qtbot, caplog) -> None:
    def unreadable() -> None:
        raise OSError("cannot read /photos/broken.jpg")

    def broken() -> None:
        raise ValueError("a bug")

    errors: list[BaseException] = []
    worker = Worker(unreadable)
    worker.expected_errors = (OSError,)
    worker.signals.errored.connect(errors.append)
    with caplog.at_level("DEBUG", logger="app.workers"):
        worker.start()
        qtbot.waitUntil(lambda: len(errors) == 1, timeout=3000)
        run_in_background(broken, on_error=errors.append)
        qtbot.waitUntil(lambda: len(errors) == 2, timeout=3000)
    assert isinstance(errors[0], OSError) and isinstance(errors[1], ValueError)
    expected, bug = (r for r in caplog.records if r.name == "app.workers")
    assert expected.exc_info is None and "broken.jpg" in expected.getMessage()
    assert bug.exc_info is not None  # an unexpected failure keeps its traceback


def test_a_burst_of_finished_jobs_is_delivered_a_slice_at_a_time(qtbot) -> None:
    """A hundred jobs finishing at once (thumbnails, say) were all delivered in one pass of the event loop,
    which then stalled for as long as their slots took; the relay stops after a slice and lets the loop turn."""
    import time

    from PySide6.QtCore import QCoreApplication

    from app.workers import _Relay

    relay = _Relay.instance()
    pool = QThreadPool()
    results: list[int] = []

    def slow_slot(n: int) -> None:  # a slot that costs the GUI thread 2 ms, like drawing a thumbnail
        time.sleep(0.002)
        results.append(n)

    for i in range(100):
        run_in_background(lambda n: n, i, on_result=slow_slot, pool=pool)
    deadline = time.monotonic() + 10
    while (pool.activeThreadCount() or len(relay._posted) < 300) and time.monotonic() < deadline:
        time.sleep(0.01)  # the jobs finish; nothing is delivered while the event loop does not run
    assert len(relay._posted) >= 300  # started, returned, finished for each
    QCoreApplication.processEvents()  # one turn of the event loop
    assert 0 < len(results) <= relay.DISPATCH_SLICE_S / 0.002 + 1
    qtbot.waitUntil(lambda: len(results) == 100, timeout=5000)  # the rest, a slice per turn
    assert sorted(results) == list(range(100))
