"""When the results on show follow a change of the library (#44: results and counts must not change under the user).

The window asks :class:`ResultsFollow` after every change the state reports that a search would see (new or
removed items, another model, new embeddings, or annotations under an annotation filter). Outside an indexing job
the query runs again at once. During one, the library listing follows what is indexed, in place, at most once every
:data:`FOLLOW_MS`; a search is not re-ranked under the user, it runs again once the job ends. A re-run is always in
place (``MainWindow.search(..., rerun=True)``): the rows on show stay until the new ones are there, and the current
item stays selected when it is still among them.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

FOLLOW_MS = 1000  # while indexing, the library listing shows the new items at most this often


class ResultsFollow(QObject):
    """Decides when to call ``rerun()``: ``indexing()`` says whether a job runs, ``browsing()`` whether the grid
    lists the library, ``shown()`` how many rows it holds."""

    def __init__(self, rerun: Callable[[], None], indexing: Callable[[], bool], browsing: Callable[[], bool],
                 shown: Callable[[], int], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rerun, self._indexing, self._browsing, self._shown = rerun, indexing, browsing, shown
        self.stale = False  # the library changed during an indexing job: the results follow (see the module)
        self._timer = QTimer(self, singleShot=True, interval=FOLLOW_MS)
        self._timer.timeout.connect(lambda: self.rerun() if self._browsing() else None)

    def changed(self) -> None:
        """The library changed in a way the results show."""
        if not self._indexing() or (self._browsing() and not self._shown()):
            self.rerun()  # an empty grid fills at once (the first folder being indexed)
            return
        self.stale = True
        if self._browsing() and not self._timer.isActive():
            self._timer.start()

    def indexing_finished(self) -> None:
        """A job ended: what changed during it reaches the results now."""
        if self.stale or not self._shown():
            self.rerun()

    def rerun(self) -> None:
        self.stale = False
        self._rerun()
