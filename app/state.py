"""The library as every view sees it: one object holding its folders, counts, caption progress and models,
and saying what changed (docs/contributing.md: widgets receive it and subscribe to it).

Why one object: each view used to read its own numbers when some writer remembered to tell it, and the ones
nobody told went stale ("0 of 2346 captioned" with 346 items left after removing a folder; the grid's old results
after a model switch). Here nothing has to remember: the service calls back after every change it commits
(``Workspace.subscribe``: folders, items, captions, verdicts, models, embeddings), this object reads a fresh
:class:`LibrarySnapshot` off the GUI thread (at most one read at a time; changes that arrive meanwhile are read
once more after it), and ``changed`` tells every listener which aspects moved:

- ``"items"``: folders or item counts (indexing, removing a folder, purging);
- ``"annotations"``: captions or accepted / rejected pairs;
- ``"models"``: the registered models or the active one;
- ``"index"``: something else the searches read (a model's embeddings after a re-index);
- ``"opened"``: the first snapshot of a library (everything is new).

``activity`` says what the library is busy with (preparing the demo, indexing), for the views that would
otherwise call an empty library empty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QThreadPool, QTimer, Signal

from app.workers import Worker, run_in_background, while_alive
from engine.types import ModelInfo

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

log = logging.getLogger(__name__)

# Commits come in bursts (indexing writes one item at a time): they are read at most this often.
COALESCE_MS = 150


@dataclass(frozen=True)
class LibrarySnapshot:
    """What the library holds at one moment, as the views show it."""

    roots: tuple[Path, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # Library.counts()
    failures: tuple[tuple[str, str], ...] = ()
    captioned: int = 0  # indexed items with a caption a person wrote or imported
    indexed: int = 0  # indexed items
    models: tuple[ModelInfo, ...] = ()
    annotations: Any = None  # Annotations.version()
    version: Any = None  # anything else the searches read (changes with every commit)

    @property
    def active_model(self) -> str | None:
        """The active model's name (None: zero-shot ranking)."""
        return next((m.name for m in self.models if m.active and m.path is not None), None)


def read_snapshot(service: Workspace) -> LibrarySnapshot:
    """Read a :class:`LibrarySnapshot` (on a worker thread)."""
    progress = service.annotations.progress()
    library = service.library
    return LibrarySnapshot(tuple(library.roots()), dict(library.counts()), tuple(library.failures()),
                           int(progress.captioned), int(progress.total), tuple(service.models.all()),
                           service.annotations.version(), service.version())


def aspects_changed(old: LibrarySnapshot | None, new: LibrarySnapshot) -> frozenset[str]:
    """Which aspects (see the module) differ between two snapshots."""
    if old is None:
        return frozenset({"opened", "items", "annotations", "models"})
    out = set()
    if (old.roots, old.counts, old.failures, old.indexed) != (new.roots, new.counts, new.failures, new.indexed):
        out.add("items")
    if (old.annotations, old.captioned) != (new.annotations, new.captioned):
        out.add("annotations")
    if old.models != new.models:
        out.add("models")
    if not out and old.version != new.version:
        out.add("index")
    return frozenset(out)


class LibraryState(QObject):
    """The open library's :class:`LibrarySnapshot`, kept current, and what it is busy with."""

    changed = Signal(object, object)  # LibrarySnapshot, frozenset of aspects
    activity_changed = Signal(str)  # "" when idle
    _poked = Signal()  # a commit happened (emitted on the writing thread; delivered on the GUI thread)

    def __init__(self, pool: QThreadPool, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool = pool
        self._service: Workspace | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.snapshot = LibrarySnapshot()
        self._read_once = False  # the open library's first snapshot arrived
        self._reading = False
        self._again = False  # changes arrived while a read was on its way
        self._generation = 0
        self._warming: Worker | None = None  # the background warm-up of the next search (_warm_search)
        self.activity = ""
        self._timer = QTimer(self, singleShot=True, interval=COALESCE_MS)
        self._timer.timeout.connect(self.refresh)
        self._poked.connect(self._schedule)

    @property
    def service(self) -> Workspace | None:
        return self._service

    def set_service(self, service: Workspace | None) -> None:
        """Follow ``service``'s library (None: none); the first snapshot comes with the aspect "opened"."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._warming is not None:  # the library it warms is going (the window closes, another opens)
            self._warming.cancel()
            self._warming = None
        self._service, self.snapshot, self._read_once = service, LibrarySnapshot(), False
        self._generation += 1
        self._reading = self._again = False
        self.set_activity("")
        if service is None:
            return
        subscribe = getattr(service, "subscribe", None)
        if callable(subscribe):
            self._unsubscribe = subscribe(self._poked.emit)
        self.refresh()

    def close(self) -> None:
        """Stop following the library (before the window goes: writers must not call into a deleted object)."""
        self.set_service(None)

    def _schedule(self) -> None:
        if not self._timer.isActive():
            self._timer.start()

    def refresh(self) -> None:
        """Read the library now (after a read already on its way, when there is one)."""
        service = self._service
        if service is None:
            return
        if self._reading:
            self._again = True
            return
        self._reading, self._again = True, False
        generation = self._generation
        run_in_background(read_snapshot, service, pool=self._pool, priority=5,
                          on_result=while_alive(self, lambda snap: self._read(generation, snap)),
                          on_error=while_alive(self, lambda exc: self._failed(generation, exc)))

    def _read(self, generation: int, snapshot: LibrarySnapshot) -> None:
        if generation != self._generation:
            return
        self._reading = False
        opened = not self._read_once
        aspects = aspects_changed(self.snapshot if self._read_once else None, snapshot)
        self.snapshot, self._read_once = snapshot, True
        if opened:
            self._warm_search()
        if aspects:
            self.changed.emit(snapshot, aspects)
        if self._again:
            self.refresh()

    def _failed(self, generation: int, exc: BaseException) -> None:
        if generation != self._generation:
            return
        self._reading = False
        log.warning("reading the library's state: %s", exc)
        if self._again:
            self.refresh()

    def set_activity(self, text: str) -> None:
        """Say what the library is busy with ("" when idle)."""
        if text != self.activity:
            self.activity = text
            self.activity_changed.emit(text)
            if not text:  # a job ended (indexing, a re-index under another model): its indexes are stale
                self._warm_search()

    def _warm_search(self) -> None:
        """While the library is idle, build what its next search needs in the background (the encoders, its
        indexes, the model's vectors: seconds at 10,000 items), so the user's first query answers at once."""
        service = self._service
        if service is None or self.activity:
            return
        if self._warming is not None:  # an earlier one built what is now stale (or has not begun): this one counts
            self._warming.cancel()
        self._warming = run_in_background(service.search.warm, pool=self._pool, priority=-5,
                                          on_error=lambda exc: log.debug("warming the search: %s", exc))
