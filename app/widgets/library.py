"""The library sidebar: the folders indexed, live indexing progress with Cancel (and Resume), counts and failures.

Folders, counts and failures are the :class:`app.state.LibraryState`'s: the panel shows whatever the library
holds after any change, whoever made it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import shiboken6
from PySide6.QtCore import QStandardPaths, Qt, QThreadPool, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.state import LibrarySnapshot, LibraryState
from app.tasks import off_thread, start
from app.widgets.plaintext import ask, plain_label, plain_tooltip, plural, show_message
from app.workers import Worker, lower_this_thread, while_alive
from engine.progress import Progress

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

log = logging.getLogger(__name__)

_COUNT_LABELS = (  # key, one, many
    ("image", "image", "images"), ("animation", "animation", "animations"), ("video", "video", "videos"),
    ("pending", "pending", "pending"), ("failed", "failed", "failed"),
    ("missing", "missing or offline (kept)", "missing or offline (kept)"),  # files gone or drive unplugged
)


def format_counts(counts: dict[str, int]) -> str:
    """``{"image": 10, "video": 1, ...}`` as "10 images · 1 video · ..." (kinds with zero are left out)."""
    parts = [f"{counts[key]} {one if counts[key] == 1 else many}"
             for key, one, many in _COUNT_LABELS if counts.get(key)]
    return " · ".join(parts) if parts else "no media indexed yet"


RESUMING = "Resuming indexing"  # the job that finishes what an earlier session left pending

# Where a snapshot of annotations is read back in the app (app/menus.py; Annotations.import_file restores a
# snapshot file as one)
RESTORE_MENU = ("File", "Import annotations from a COCO captions JSON…")


def removal_question(folder: Path, items: int, captions: int, pairs: int) -> str:
    """What the user is asked before ``folder`` leaves the library: how many items go, and how many captions and
    accepted/rejected verdicts (theirs and imported ones) go with them, kept in a snapshot first."""
    if items:
        gone = f"Its {plural(items, 'item')} {'leaves' if items == 1 else 'leave'} the library"
    else:
        gone = "None of its files is in the library yet"
    question = f"Stop indexing {folder}?\n{gone} (the files are not touched)."
    if not captions and not pairs:
        return question
    written = " and ".join(part for part in (plural(captions, "caption") if captions else "",
                                             plural(pairs, "accepted/rejected verdict") if pairs else "") if part)
    goes = "goes" if captions + pairs == 1 else "go"
    return (f"{question}\n\n{written} you wrote or imported {goes} with them. A snapshot of your annotations is "
            f"saved first: {' ▸ '.join(RESTORE_MENU)} puts them back.")


def removed_message(folder: Path, items: int, snapshot: Path | None) -> str:
    """The status line after ``folder`` left the library: where its annotations' snapshot went, if it had any."""
    message = f"Removed {folder} from the library ({plural(items, 'item')}; the files are not touched)"
    if snapshot is None:
        return message + "."
    return (f"{message}. Your captions and verdicts are saved in {snapshot} "
            f"({' ▸ '.join(RESTORE_MENU)} restores them).")


class LibraryPanel(QWidget):
    """Roots, "Add folder…", the indexing progress bar with Cancel, counts and the failures list.

    The panel runs indexing jobs itself (one at a time; a folder added while one runs is indexed next) and
    says when one ends, so the window can refresh the results.
    """

    indexing_started = Signal()
    indexing_finished = Signal(str)  # "done", "cancelled" or "failed"
    status_message = Signal(str)
    roots_shown = Signal(list)  # the library's folders (Path), each time they are read

    def __init__(self, pool: QThreadPool, parent: QWidget | None = None, state: LibraryState | None = None,
                 writes: QThreadPool | None = None) -> None:
        super().__init__(parent)
        self._pool = pool
        self._writes = writes or QThreadPool.globalInstance()  # the window's annotation write thread
        self._service: Workspace | None = None
        self._job: Worker | None = None
        self.last_progress: Progress | None = None  # the running job's last record (None: none yet, or no job)
        self._queued: list[list[Path] | None] = []
        self._last_job: tuple[Callable[[Any], Iterator[Progress]], str] | None = None  # what Resume runs again
        # the window shares its state with every view; a panel on its own follows the library itself (reads
        # on the global pool: ``pool`` runs the indexing jobs one at a time)
        self._owns_state = state is None
        self.state = state if state is not None else LibraryState(QThreadPool.globalInstance(), self)
        self.state.changed.connect(self._show_snapshot)
        self._build()
        self.setEnabled(False)

    def _build(self) -> None:
        self.title = QLabel("Library")
        self.title.setObjectName("libraryTitle")
        self.title.setTextFormat(Qt.TextFormat.PlainText)
        self.roots_list = QListWidget()
        self.roots_list.setToolTip("Folders this library indexes")
        self.roots_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # keep both ends of long paths
        self.roots_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.add_button = QPushButton("Add folder…")
        self.remove_button = QPushButton("Remove")
        self.remove_button.setEnabled(False)
        self.add_button.clicked.connect(lambda: self.add_folder())
        self.remove_button.clicked.connect(self._remove_selected)
        self.roots_list.currentRowChanged.connect(lambda row: self.remove_button.setEnabled(row >= 0))
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.progress_label = QLabel("")
        self.progress_label.setTextFormat(Qt.TextFormat.PlainText)  # messages carry file names
        self.progress_label.setWordWrap(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel_indexing)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("Index the rest: what was indexed before Cancel is kept "
                                      "(File ▸ Re-index library does the same)")
        self.resume_button.clicked.connect(self.resume)
        self.resume_button.setVisible(False)
        self.counts_label = plain_label(format_counts({}), wrap=True)
        self.failures = QTreeWidget()
        self.failures.setHeaderLabels(["File", "Reason"])
        self.failures.setRootIsDecorated(False)
        self.failures.header().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.failures_label = plain_label("Skipped files")
        self._layout()
        self._show_progress(False)

    def _layout(self) -> None:
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        progress_row = QHBoxLayout()
        progress_row.addWidget(self.progress, 1)
        progress_row.addWidget(self.cancel_button)
        progress_row.addWidget(self.resume_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.title)
        layout.addWidget(self.roots_list, 1)
        layout.addLayout(buttons)
        layout.addLayout(progress_row)
        layout.addWidget(self.progress_label)
        layout.addWidget(self.counts_label)
        layout.addWidget(self.failures_label)
        layout.addWidget(self.failures, 2)

    # --- service
    def set_service(self, service: Workspace | None) -> None:
        """Show ``service``'s library (None: nothing open)."""
        self._service = service
        self.setEnabled(service is not None)
        self.resume_button.setVisible(False)
        if self._owns_state:
            self.state.set_service(service)
        if service is not None:
            self.title.setText(f"Library: {service.name}")

    def refresh(self) -> None:
        """Show the folders known now (``roots_shown``), and re-read roots, counts and failures (off the GUI
        thread; every view of the state follows what changed)."""
        if self._service is not None and self.state.snapshot.roots:
            self.roots_shown.emit(list(self.state.snapshot.roots))
        self.state.refresh()

    def _show_snapshot(self, snapshot: LibrarySnapshot, aspects: frozenset[str]) -> None:
        if "items" not in aspects:
            return
        pending = snapshot.counts.get("pending", 0)
        if "opened" in aspects and pending and self._job is None:
            self.resume_interrupted(pending)
        roots, counts, failures = snapshot.roots, snapshot.counts, snapshot.failures
        self.roots_shown.emit(list(roots))
        self.roots_list.clear()
        for root in roots:
            self.roots_list.addItem(str(root))
            self.roots_list.item(self.roots_list.count() - 1).setToolTip(plain_tooltip(str(root)))
        self.counts_label.setText(format_counts(counts))
        self.failures.clear()
        for path, reason in failures:
            item = QTreeWidgetItem([Path(path).name, str(reason)])
            full = plain_tooltip(f"{path}\n\nskipped: {reason}")  # the reason column is too narrow to read
            item.setToolTip(0, full)
            item.setToolTip(1, full)
            self.failures.addTopLevelItem(item)
        self.failures_label.setText(f"Skipped files ({len(failures)})" if failures else "Skipped files: none")

    # --- roots
    def add_folder(self, folder: Path | None = None) -> None:
        """Add ``folder`` (asks for one when None) as a root and index it."""
        if self._service is None:
            return
        if folder is None:
            chosen = QFileDialog.getExistingDirectory(self, "Add a folder to the library", str(self.folder_to_browse()))
            if not chosen:
                return
            folder = Path(chosen)
        try:
            self._service.library.add_root(folder)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the app goes on
            show_message(self, QMessageBox.Icon.Warning, "Cannot add folder", str(exc))
            return
        self.refresh()
        self.index([folder])

    def folder_to_browse(self) -> Path:
        """Where "Add folder" opens: beside the library's last folder, else the user's Pictures, else their home
        (not the directory the app happened to be started from)."""
        roots = self.state.snapshot.roots
        if roots and roots[-1].parent.is_dir():
            return roots[-1].parent
        pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
        return Path(pictures) if pictures and Path(pictures).is_dir() else Path.home()

    def _remove_selected(self) -> None:
        item = self.roots_list.currentItem()
        if item is not None:
            self.remove_folder(Path(item.text()))

    def remove_folder(self, folder: Path, parent: QWidget | None = None) -> asyncio.Task[None] | None:
        """Stop indexing ``folder``: its items leave the library, with the captions and verdicts on them, once the
        user, asked over ``parent`` with the counts, agreed (issue #44). None when no library is open."""
        service = self._service
        return None if service is None else start(self._remove_folder(service, Path(folder), parent))

    async def _remove_folder(self, service: Workspace, folder: Path, parent: QWidget | None) -> None:
        # counted and removed on the annotation write thread: after every caption typed before, so all are counted
        try:
            items, captions, pairs = await off_thread(self, service.library.root_summary, folder, pool=self._writes)
        except Exception as exc:  # noqa: BLE001 - shown to the user, the folder stays
            show_message(self, QMessageBox.Icon.Warning, "Cannot remove folder", str(exc))
            return
        over = parent if parent is not None and shiboken6.isValid(parent) else self  # a dialog closed meanwhile
        if not ask(over, "Remove folder", removal_question(folder, items, captions, pairs)):
            return
        try:
            snapshot = await off_thread(self, service.library.remove_root, folder, pool=self._writes)
        except Exception as exc:  # noqa: BLE001 - e.g. no room for the snapshot: nothing was removed
            show_message(self, QMessageBox.Icon.Warning, "Cannot remove folder", str(exc))
            return
        # the state hears of it: counts, folders and results follow
        self.status_message.emit(removed_message(folder, items, snapshot))

    # --- indexing
    @property
    def is_indexing(self) -> bool:
        return self._job is not None

    def index(self, paths: list[Path] | None = None, what: str = "Indexing") -> None:
        """Index ``paths`` (all roots when None) in the background; queued if a job is running (``what``: the
        job's name in the panel and the status line)."""
        if self._service is None:
            return
        if self._job is not None:
            self._queued.append(paths)
            return
        service = self._service
        self.run_job(lambda cancel: service.library.index(paths, cancel=cancel), what)

    def reindex(self) -> None:
        """Re-embed the whole library with the active model (after switching models)."""
        service = self._service
        if service is not None and self._job is None:
            self.run_job(lambda cancel: service.models.reindex(cancel=cancel), "Re-indexing")

    def run_job(self, job: Callable[[Any], Iterator[Progress]], what: str) -> Worker:
        """Run a progress generator ``job(cancel)`` with this panel's bar and Cancel button."""
        self._last_job = (job, what)
        self.resume_button.setVisible(False)
        def at_low_priority(cancel: Any) -> Iterator[Progress]:
            lower_this_thread()  # the indexing pool's own thread: the GUI thread gets a core first
            return job(cancel)

        worker = Worker(at_low_priority)
        worker.signals.progress.connect(self._show_progress_record)
        worker.signals.returned.connect(while_alive(self, lambda _: self._job_ended("done", what)))
        worker.signals.cancelled.connect(while_alive(self, lambda: self._job_ended("cancelled", what)))
        worker.signals.errored.connect(while_alive(self, lambda exc: self._job_ended("failed", what, exc)))
        self._job, self.last_progress = worker, None
        self.progress.setRange(0, 0)  # busy until the first record says how much there is
        self.progress_label.setText(f"{what}…")
        self.state.set_activity(f"{what} the library…")
        self._show_progress(True)
        self.indexing_started.emit()
        return worker.start(self._pool)

    def cancel_indexing(self) -> None:
        """Ask the running job to stop and drop the queued ones."""
        self._queued.clear()
        if self._job is not None:
            self._job.cancel()
            self.cancel_button.setEnabled(False)
            self.progress_label.setText("Cancelling…")

    def _show_progress_record(self, record: Progress) -> None:
        self.last_progress = record
        self.progress.setRange(0, max(1, record.total))
        self.progress.setValue(min(record.done, max(1, record.total)))
        self.progress.setFormat(f"{record.done} / {record.total}")
        self.progress_label.setText(record.message)
        what = self._last_job[1] if self._last_job is not None else "Indexing"
        self.state.set_activity(f"{what}: {record.message} ({record.done} of {record.total})")

    def _job_ended(self, outcome: str, what: str, exc: BaseException | None = None) -> None:
        self._job, self.last_progress = None, None
        self._show_progress(False)
        self.state.set_activity("")
        message = f"{what} {outcome}" + (f": {exc}" if exc is not None else "")
        if outcome == "cancelled":  # a stopped job says how to go on, and offers it
            message = (f"{what} cancelled: what was indexed is kept. Resume indexes the rest "
                       "(File ▸ Re-index library does the same).")
        self.resume_button.setVisible(outcome in ("cancelled", "failed") and self._last_job is not None)
        self.progress_label.setText(message if outcome != "done" else "")
        self.status_message.emit(message)
        self.refresh()
        self.indexing_finished.emit(outcome)
        if self._queued:
            self.index(self._queued.pop(0))

    def resume_interrupted(self, pending: int) -> None:
        """Index what an earlier session left pending (it quit, or was stopped, mid-index), with progress, as soon
        as the library opens (issue #44: "1752 pending" sat in the sidebar and nothing resumed or said so)."""
        if self._service is None or self._job is not None:
            return
        log.info("resuming indexing: %d items pending", pending)
        self.index(None, RESUMING)
        self.status_message.emit(f"{RESUMING}: {plural(pending, 'item')} {'was' if pending == 1 else 'were'} "
                                 "left to index when Polyseek last stopped.")

    def confirm_quit(self, parent: QWidget) -> bool:
        """Whether to quit now: yes when no indexing runs, else the user's answer, told that what is indexed is kept
        and that the rest resumes at the next start (:meth:`resume_interrupted`)."""
        if self._job is None:
            return True
        pending = self.state.snapshot.counts.get("pending", 0)
        left = f" ({plural(pending, 'item')} left)" if pending else ""
        return ask(parent, "Quit while indexing?",
                   f"Polyseek is still indexing the library{left}.\nWhat is indexed is kept, and indexing resumes by "
                   "itself the next time Polyseek starts.\n\nQuit now?")

    def resume(self) -> None:
        """Run the job that was cancelled (or failed) again: interrupted work resumes where it stopped."""
        if self._last_job is not None and self._job is None and self._service is not None:
            self.run_job(*self._last_job)

    def _show_progress(self, visible: bool) -> None:
        self.progress.setVisible(visible)
        self.cancel_button.setVisible(visible)
        self.cancel_button.setEnabled(visible)
