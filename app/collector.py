"""Python's cycle collector, run on the GUI thread only.

CPython runs a collection in whichever thread happens to allocate when a generation's count passes its
threshold. A cycle that holds a Qt object (a widget whose slot is a lambda capturing it, a signals object and
its job) is then destroyed on that thread: a background job's pool thread deleting a window's widgets, while
the GUI thread lays out the same window. That is undefined in Qt, and in this app it showed as a hang: the test
suite stopped for 10 minutes in ``QListView.indexAt`` under ``show()``, with two pool threads in the middle of
their Python (both allocating). Objects freed by their reference count are not concerned: the workers already
hand their last references to the GUI thread (:mod:`app.workers`).

:class:`GuiThreadCollector` turns the automatic collection off and runs the same generational collections from
a timer on the GUI thread, by the thresholds the interpreter itself would use, so every cycle, and every Qt
object in one, is freed there.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QCoreApplication, QObject, QTimer

INTERVAL_MS = 250  # how often the GUI thread looks at the counts (a young collection takes well under 1 ms)


class GuiThreadCollector(QObject):
    """Collects Python's cycles on the thread it lives on (the GUI thread), ``INTERVAL_MS`` apart."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._timer = QTimer(self, interval=INTERVAL_MS)
        self._timer.timeout.connect(self.collect_due)

    def start(self) -> None:
        """Take over from the automatic collection."""
        gc.disable()
        self._timer.start()

    @property
    def running(self) -> bool:
        return self._timer.isActive()

    def stop(self) -> None:
        """Collect what is due now and give the collection back to the interpreter."""
        self._timer.stop()
        self.collect_due()
        gc.enable()

    def collect_due(self) -> int | None:
        """Run the oldest generation whose count passed its threshold (as the interpreter would); the generation
        collected, None when none was due."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self._thresholds[generation]:
                gc.collect(generation)
                return generation
        return None


def collect_on_gui_thread(app: QCoreApplication) -> GuiThreadCollector:
    """The application's collector, started (one per application; a second call returns the first)."""
    collector = app.findChild(GuiThreadCollector)
    if collector is None:
        collector = GuiThreadCollector(app)
    if not collector.running:
        collector.start()
    return collector
