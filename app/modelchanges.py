"""Changing the library's models from the window (the search bar's picker, Preferences, the models dialog, the
training dialog's "Use it and re-index"): each change is one service call awaited off the GUI thread
(:mod:`app.tasks`); the library state hears of it and the model lists follow, this says it in words."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThreadPool, Signal

from app.tasks import off_thread, start
from app.widgets.library import LibraryPanel

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace


class ModelChanges(QObject):
    """Activate, activate and re-index, rename and delete the models of the library on show (``service``)."""

    status = Signal(str)  # what happened, for the status line
    models_said = Signal(str)  # what a rename or a delete did, for the models dialog too
    activated = Signal()  # another model ranks: the suggestions' order (and reason) changes
    switched = Signal(str)  # a model became active through activate_and_reindex (its re-index has started)
    reindexed = Signal(str, str)  # that model's re-index ended: its name, "done" / "cancelled" / "failed"

    def __init__(self, pool: QThreadPool, library: LibraryPanel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool, self._library = pool, library
        self.service: Workspace | None = None

    def activate(self, name: str | None) -> None:
        """Make ``name`` (None: zero-shot) the active model."""
        if self.service is not None:
            start(self._activate(self.service, name))

    async def _activate(self, service: Workspace, name: str | None) -> None:
        if await self._set_active(service, name, "Cannot switch model"):
            self.status.emit(f"Active model: {name or 'zero-shot'}")
            self.activated.emit()

    async def _set_active(self, service: Workspace, name: str | None, failure: str) -> bool:
        """``service.models.activate(name)`` off the GUI thread; False (and ``failure`` said) when it fails."""
        try:
            await off_thread(self, service.models.activate, name, pool=self._pool, priority=9)
        except Exception as exc:  # noqa: BLE001 - said to the user
            self.status.emit(f"{failure}: {exc}")
            return False
        return True

    def activate_and_reindex(self, name: str) -> None:
        """Make ``name`` the active model, then re-embed the library with it in the background: the engine's one
        switch (:meth:`engine.workspace.models.Models.switch`) run as the library panel's job, so its bar and
        Cancel show the re-index. While the panel is busy, only the switch (the user re-indexes after)."""
        service = self.service
        if service is None:
            return
        if self._library.is_indexing:  # one job at a time
            start(self._activate_only(service, name))
            return
        worker = self._library.run_job(lambda cancel: service.models.switch(name, cancel), f"Switching to {name}")
        switched = False

        def once_active(_record: object = None) -> None:  # the switch's first record comes once the model is active
            nonlocal switched
            if not switched:
                switched = True
                self.status.emit(f"Active model: {name}; re-indexing the library in the background…")
                self._switched(name)

        worker.signals.progress.connect(once_active)
        worker.signals.returned.connect(once_active)
        worker.signals.returned.connect(lambda _result: self.reindexed.emit(name, "done"))
        worker.signals.cancelled.connect(lambda: self.reindexed.emit(name, "cancelled") if switched else None)
        worker.signals.errored.connect(lambda exc: self.reindexed.emit(name, "failed") if switched
                                       else self.status.emit(f"Cannot switch to {name}: {exc}"))

    async def _activate_only(self, service: Workspace, name: str) -> None:
        if await self._set_active(service, name, f"Cannot switch to {name}"):
            self.status.emit(f"Active model: {name}; re-index (File menu) once the current indexing ends.")
            self._switched(name)

    def _switched(self, name: str) -> None:
        self.activated.emit()
        self.switched.emit(name)

    def rename(self, name: str, new_name: str) -> None:
        if self.service is not None:
            start(self._change(f"Renamed {name} to {new_name}", f"Cannot rename {name}", self.service.models.rename,
                               name, new_name))

    def delete(self, name: str) -> None:
        if self.service is not None:
            start(self._change(f"Deleted the model {name}", f"Cannot delete {name}", self.service.models.delete, name))

    async def _change(self, done_text: str, failed_text: str, change: Callable[..., object], *args: str) -> None:
        """Make a change to the registered models, then say so (the model list follows the state)."""
        try:
            await off_thread(self, change, *args, pool=self._pool, priority=9)
            text = done_text
        except Exception as exc:  # noqa: BLE001 - said to the user
            text = f"{failed_text}: {exc}"
        self.status.emit(text)
        self.models_said.emit(text)
