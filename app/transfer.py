"""Moving annotations in and out of a library from the window: export (caption folder or COCO captions JSON),
import, and purging the items whose files are missing (issue #21). Each is one service call, awaited off the
GUI thread on the annotation write thread, so every caption typed before it is part of it (:mod:`app.tasks`)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QThreadPool, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from app.tasks import off_thread, start
from app.widgets.plaintext import plural

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

ANNOTATION_FORMATS = {"folder": "caption folder", "coco": "COCO captions JSON"}  # Workspace.annotations.export's fmt


def counted(n: object) -> str:
    """What an annotation transfer moved, in words: the engine's counts say every kind; a plain count is captions."""
    summary = getattr(n, "summary", None)
    return summary() if callable(summary) else f"{n} captions"


class AnnotationTransfer(QObject):
    """The File menu's annotation transfers for the library on show (``service``), asked for in ``window``."""

    status = Signal(str)  # what happened, for the status line
    transferred = Signal(str, int)  # "export" / "import", how many captions
    imported = Signal()  # the current item's captions and the suggestions may have changed
    purged = Signal()  # items left the library: the suggestions may have changed

    def __init__(self, window: QWidget, write_pool: QThreadPool, reads: QThreadPool) -> None:
        super().__init__(window)
        self._window, self._writes, self._reads = window, write_pool, reads
        self.service: Workspace | None = None

    def export(self, dest: Path, fmt: str = "folder") -> asyncio.Task[None]:
        """Write the library's annotations to ``dest`` (``fmt`` "folder" or "coco") in the background."""
        service = self.service
        if service is None:
            raise RuntimeError("no library is open to export annotations from")
        if fmt not in ANNOTATION_FORMATS:
            raise ValueError(f"unknown annotation format {fmt!r} (use one of {sorted(ANNOTATION_FORMATS)})")
        self.status.emit(f"Exporting annotations to {dest}…")
        return start(self._export(service, Path(dest), fmt))

    async def _export(self, service: Workspace, dest: Path, fmt: str) -> None:
        try:
            n = await off_thread(self, service.annotations.export, dest, fmt, pool=self._writes)
        except Exception as exc:  # noqa: BLE001 - said to the user
            self.status.emit(f"Export failed: {exc}")
            return
        self._done("export", n, f"Exported {counted(n)} to {dest}")

    def import_(self, path: Path) -> asyncio.Task[None]:
        """Add the captions of a caption folder or COCO captions JSON at ``path`` to the library."""
        service = self.service
        if service is None:
            raise RuntimeError("no library is open to import annotations into")
        self.status.emit(f"Importing annotations from {path}…")
        return start(self._import(service, Path(path)))

    async def _import(self, service: Workspace, path: Path) -> None:
        try:
            n = await off_thread(self, service.annotations.import_file, path, pool=self._writes)
        except Exception as exc:  # noqa: BLE001 - said to the user
            self.status.emit(f"Import failed: {exc}")
            return
        self._done("import", n, f"Imported {counted(n)} from {path}")
        self.imported.emit()

    def _done(self, what: str, n: Any, message: str) -> None:
        self.status.emit(message)
        self.transferred.emit(what, int(n))

    def confirm_purge_missing(self) -> asyncio.Task[None] | None:
        """Delete the items whose files are missing or offline, with their annotations, once the user has seen
        the counts and agreed; a snapshot of every annotation is written first (issue #21)."""
        service = self.service
        return None if service is None else start(self._purge_missing(service))

    async def _purge_missing(self, service: Workspace) -> None:
        try:  # counting reads the catalog: not on the GUI thread
            items, captions, pairs = await off_thread(self, service.library.missing_summary, pool=self._reads,
                                                      priority=9)
        except Exception as exc:  # noqa: BLE001 - said to the user
            self.status.emit(f"Cannot count the missing items: {exc}")
            return
        if not items:
            self.status.emit("No missing or offline items to purge.")
            return
        answer = QMessageBox.question(
            self._window, "Purge missing items",
            f"Delete {plural(items, 'item')} whose files are missing or on an unplugged drive, with their "
            f"{plural(captions, 'caption')} and {plural(pairs, 'accepted/rejected pair')}?\n\n"
            "Kept items get their annotations back when their "
            "files return. A snapshot of every annotation is saved first; importing it restores them.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return
        try:
            n, c, p, snapshot = await off_thread(self, service.library.purge_missing, pool=self._writes)
        except Exception as exc:  # noqa: BLE001 - said to the user
            self.status.emit(f"Purge failed: {exc}")
            return
        saved = f"; their annotations are saved in {snapshot}" if snapshot else ""
        self.status.emit(f"Deleted {plural(n, 'missing item')} with {plural(c, 'caption')} and "
                         f"{plural(p, 'pair')}{saved}")
        self.purged.emit()

    def choose_export(self, fmt: str) -> None:
        """Ask where to export (a folder, or a JSON file for COCO), then export there."""
        if self.service is None:
            return
        if fmt == "folder":
            chosen = QFileDialog.getExistingDirectory(self._window, "Folder to export the annotations into")
        else:
            chosen, _ = QFileDialog.getSaveFileName(self._window, "Export annotations as COCO captions JSON",
                                                    "captions.json", "JSON (*.json)")
        if chosen:
            self.export(Path(chosen), fmt)

    def choose_import(self, fmt: str) -> None:
        """Ask for a caption folder or a COCO captions JSON, then import it."""
        if self.service is None:
            return
        if fmt == "folder":
            chosen = QFileDialog.getExistingDirectory(self._window, "Caption folder to import")
        else:
            chosen, _ = QFileDialog.getOpenFileName(self._window, "COCO captions JSON to import", "",
                                                    "JSON (*.json)")
        if chosen:
            self.import_(Path(chosen))
