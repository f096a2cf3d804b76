"""Python's cycles are collected on the GUI thread only (app/collector.py).

CI hung for 10 minutes in ``QListView.indexAt`` under a window's ``show()`` while two pool threads ran Python:
a collection that a pool thread runs frees the Qt objects in the cycles it finds on that thread.
"""

from __future__ import annotations

import gc
import threading

from PySide6.QtCore import QObject, Qt

from app.collector import GuiThreadCollector, collect_on_gui_thread
from app.workers import run_in_background


class _Held(QObject):
    pass


def _a_cycle_that_holds_a_qt_object(freed_on: list[str]) -> None:
    held = _Held()
    held.itself = held  # only the cycle collector can free it
    held.destroyed.connect(lambda *_: freed_on.append(threading.current_thread().name),
                           Qt.ConnectionType.DirectConnection)


_kept: list[list] = []


def _allocate(n: int = 50_000) -> None:
    _kept.extend([] for _ in range(n))  # kept: the youngest generation's count goes far past its threshold


def test_a_pool_thread_that_allocates_does_not_free_the_gui_threads_qt_objects(qtbot, qapp) -> None:
    collect_on_gui_thread(qapp)
    freed_on: list[str] = []
    _a_cycle_that_holds_a_qt_object(freed_on)
    with qtbot.waitSignal(run_in_background(_allocate).signals.finished, timeout=10_000):
        pass
    assert freed_on == []  # the pool thread allocated far past the threshold, and collected nothing
    qtbot.waitUntil(lambda: bool(freed_on), timeout=5000)  # the GUI thread's timer did
    assert freed_on == [threading.main_thread().name]
    _kept.clear()


def test_there_is_one_collector_per_application_and_it_collects_what_is_due(qapp) -> None:
    first = collect_on_gui_thread(qapp)
    assert collect_on_gui_thread(qapp) is first
    assert first.running and not gc.isenabled()
    assert len(qapp.findChildren(GuiThreadCollector)) == 1
    _allocate()
    assert first.collect_due() is not None  # the youngest generation passed its threshold
    assert [first.collect_due() for _ in range(3)][-1] is None  # an older generation at most, then none
    _kept.clear()
