"""A search typed while a fresh home's pretrained assets are being prepared (issue #44).

On a first start the library's first index run prepares the pretrained models (about a minute); a search before
they are there cannot run, and the engine says so in words meant for the command line ("run `polyseek prepare`
first"), which is wrong advice while the app is preparing them itself. So the window holds such a query here: the
header says what is happening and how far it is ("Preparing the pretrained models… 40 % — your search for “a cat”
runs when ready"), the sidebar shows the preparation's progress, and the query runs by itself once the assets are
there. Nothing is held when nothing prepares them (the search then fails and says why).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject


class HeldSearch(QObject):
    """The query waiting for the pretrained assets (None: none), and when it runs."""

    def __init__(self, window: Any, run: Callable[[str | Path], None]) -> None:
        super().__init__(window)
        self._window, self._run = window, run
        self.query: str | Path | None = None
        window.state.activity_changed.connect(lambda _text: self._check())
        window.library.indexing_finished.connect(lambda _outcome: self._check())

    def _preparing(self) -> bool:
        """The assets are missing and the library is busy (the demo being set up, or an index run, whose first
        stage prepares them)."""
        window = self._window  # asked at every search: the disk only while the library is busy
        if not (window.library.is_indexing or window.state.activity) or window.service is None:
            return False
        return not window.service.library.assets_ready()

    def hold(self, query: str | Path | None) -> bool:
        """Hold ``query`` when it cannot run yet (True); a new query replaces a held one, None drops it."""
        self.query = query if query is not None and self._preparing() else None
        return self.query is not None

    def _check(self) -> None:
        """Run the held query once the assets are there, or once nothing prepares them any more (its failure is
        then the true one)."""
        if self.query is None or self._preparing():
            return
        query, self.query = self.query, None
        self._run(query)

    def describe(self, described: str) -> str:
        """The header's line while a query is held (``described``: the query as the header says it)."""
        record = self._window.library.last_progress
        percent = f" {round(100 * record.fraction)} %" if record is not None and record.total > 0 else ""
        return (f"Preparing the pretrained models (once, about a minute)…{percent} — your search {described} "
                "runs when ready.")
