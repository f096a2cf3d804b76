"""The main window: composes the library sidebar, search bar, results grid, inspector and annotation panel.

It holds no search or annotation logic; it passes the service to its widgets and connects their signals.
Work that can be slow runs on thread pools owned here (so closing the window can wait for them): ``pool``
for reads (search pages, thumbnails, explanations), ``index_pool`` for indexing jobs, ``write_pool`` (one
thread) for annotation writes, which must keep their order.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QThread, QThreadPool, QUrl
from PySide6.QtGui import QAction, QCloseEvent, QDesktopServices, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMainWindow, QMessageBox, QSplitter, QVBoxLayout, QWidget

from app.search import SearchSession
from app.service_api import SearchServiceLike
from app.settings import GuiSettings
from app.widgets.annotate import AnnotationPanel
from app.widgets.inspector import Inspector
from app.widgets.library import LibraryPanel
from app.widgets.models import ModelsDialog
from app.widgets.plaintext import plain_label, show_message
from app.widgets.results import ResultsModel, ResultsView, ThumbnailCache
from app.widgets.searchbar import SearchBar, local_file
from app.widgets.training import TrainingDialog
from app.workers import run_in_background, serial_pool
from engine import paths
from engine.types import SearchHit

log = logging.getLogger(__name__)

CLOSE_WAIT_MS = 5000


class MainWindow(QMainWindow):
    """Polyseek's window. ``set_service`` shows a library; None shows the "opening…" state."""

    def __init__(self, settings: GuiSettings, service: SearchServiceLike | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.service: SearchServiceLike | None = None
        self.session = SearchSession()
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max(2, QThread.idealThreadCount()))
        self.index_pool = serial_pool("indexing")
        self.write_pool = serial_pool("annotation writes")
        self.training_dialog: TrainingDialog | None = None
        self.models_dialog: ModelsDialog | None = None
        self._models: list[Any] = []
        self.setWindowTitle("Polyseek")
        self.setAcceptDrops(True)
        self._build()
        self._menus()
        self._restore()
        self.set_service(service)

    # --- composition
    def _build(self) -> None:
        self.search_bar = SearchBar()
        self.library = LibraryPanel(self.index_pool)
        self.thumbnails = ThumbnailCache(self.pool, parent=self)
        self.results_model = ResultsModel(self.thumbnails, self.pool, self.settings.page_size, parent=self)
        self.results = ResultsView(self.results_model, self.thumbnails)
        self.inspector = Inspector(self.pool)
        self.annotate = AnnotationPanel(self.write_pool)
        self.empty_label = plain_label("", wrap=True)
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.addWidget(self.empty_label)
        centre_layout.addWidget(self.results, 1)
        self.right_splitter = QSplitter(Qt.Orientation.Vertical)
        self.right_splitter.addWidget(self.inspector)
        self.right_splitter.addWidget(self.annotate)
        self.right_splitter.setStretchFactor(0, 3)
        self.right_splitter.setStretchFactor(1, 1)
        self.right_splitter.setSizes([620, 260])
        self.splitter = QSplitter()
        for widget, stretch in ((self.library, 0), (centre, 1), (self.right_splitter, 0)):
            self.splitter.addWidget(widget)
            self.splitter.setStretchFactor(self.splitter.count() - 1, stretch)
        self.splitter.setSizes([240, 720, 440])
        body = QWidget()
        layout = QVBoxLayout(body)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search_bar)
        layout.addWidget(self.splitter, 1)
        self.setCentralWidget(body)
        self._connect()

    def _connect(self) -> None:
        bar = self.search_bar
        bar.text_search.connect(self.search)
        bar.media_search.connect(self.search)
        bar.cutoff_changed.connect(self._cutoff_changed)
        bar.model_chosen.connect(self.activate_model)
        self.results.current_hit_changed.connect(self._show_hit)
        self.results_model.page_loaded.connect(self._page_loaded)
        self.results_model.search_failed.connect(lambda msg: self._status(f"Search failed: {msg}"))
        self.annotate.next_requested.connect(self.results.select_next)
        self.annotate.previous_requested.connect(self.results.select_previous)
        self.annotate.captions_changed.connect(self.results_model.set_captions)
        self.annotate.error.connect(self._status)
        self.library.status_message.connect(self._status)
        self.library.indexing_finished.connect(self._indexing_finished)

    def _menus(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self._action(file_menu, "&Add folder…", lambda: self.library.add_folder(), "Ctrl+O")
        self._action(file_menu, "Search by &example file…", self._choose_example)
        self._action(file_menu, "&Re-index library", self.library.reindex)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        edit = menu.addMenu("&Edit")
        undo = self.annotate.undo_stack.createUndoAction(self, "&Undo")
        undo.setShortcut(QKeySequence.StandardKey.Undo)
        redo = self.annotate.undo_stack.createRedoAction(self, "&Redo")
        redo.setShortcut(QKeySequence.StandardKey.Redo)
        edit.addActions([undo, redo])
        nav = menu.addMenu("&Navigate")
        self._action(nav, "&Next item", self.results.select_next, "Ctrl+Right")
        self._action(nav, "&Previous item", self.results.select_previous, "Ctrl+Left")
        self._action(nav, "&Search box", self._focus_search, "Ctrl+L")
        self._action(nav, "&Caption box", self.annotate.caption_edit.setFocus, "Ctrl+E")
        models = menu.addMenu("&Models")
        self._action(models, "&Train…", self.open_training, "Ctrl+T")
        self._action(models, "&Manage models…", self.open_models)
        help_menu = menu.addMenu("&Help")
        self._action(help_menu, "Open &log folder", self._open_logs)

    def _action(self, menu: Any, text: str, slot: Any, shortcut: Any = None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(lambda _checked=False: slot())
        menu.addAction(action)
        return action

    # --- service
    def set_service(self, service: SearchServiceLike | None) -> None:
        """Show ``service``'s library in every widget (None: the window waits for one)."""
        self.service = service
        self.session.service = service
        for widget in (self.library, self.thumbnails, self.inspector, self.annotate):
            widget.set_service(service)
        self.results_model.set_fetch(None)
        self.search_bar.setEnabled(service is not None)
        if service is None:
            self.empty_label.setText("Opening the library…")
            return
        self.setWindowTitle(f"Polyseek — {service.name}")
        self.empty_label.setText("Describe what you are looking for and press Enter, or drop a file here.")
        self.refresh_models()

    def show_error(self, title: str, message: str) -> None:
        """A modal error the user must see (e.g. the library could not be opened)."""
        self.empty_label.setText(f"{title}: {message}")
        show_message(self, QMessageBox.Icon.Critical, title, message)

    def refresh_models(self) -> None:
        service = self.service
        if service is not None:
            run_in_background(service.models, on_result=self._show_models, pool=self.pool, priority=5,
                              on_error=lambda exc: self._status(f"Cannot list models: {exc}"))

    def _show_models(self, models: list[Any]) -> None:
        self._models = list(models)
        self.search_bar.set_models(self._models)
        if self.models_dialog is not None:
            self.models_dialog.set_models(self._models)

    # --- searching
    def search(self, query: str | Path) -> None:
        """Run a text or example-file search; the grid fills page by page."""
        self.session.set_query(query)
        self.session.min_probability = self.search_bar.min_probability
        self.inspector.show_hit(None, None)
        self.annotate.set_item(None, None)
        fetch = self.session.page_fetcher()
        self.results_model.set_fetch(fetch)
        if fetch is not None:
            self.empty_label.setText(f"Searching {self.session.describe()}…")

    def _cutoff_changed(self, cutoff: float | None) -> None:
        self.settings.cutoff_percent = self.search_bar.cutoff.value()
        if isinstance(self.session.query, str) and cutoff != self.session.min_probability:
            self.search(self.session.query)

    def _page_loaded(self, added: int) -> None:
        total = self.results_model.rowCount()
        described = self.session.describe()
        self.empty_label.setText(f"{total} results {described}" if total else f"No results {described}")
        if total and not self.results.currentIndex().isValid() and added == total:
            self.results.select_row(0)

    def _show_hit(self, hit: SearchHit | None) -> None:
        self.inspector.show_hit(self.session.query, hit)
        self.annotate.set_item(self.session.query, hit)

    def activate_model(self, name: str | None) -> None:
        """Make ``name`` (None: zero-shot) the active model, then refresh models and results."""
        service = self.service
        if service is None:
            return

        def done(_: object) -> None:
            self._status(f"Active model: {name or 'zero-shot'}")
            self.refresh_models()
            if self.session.query is not None:
                self.search(self.session.query)

        run_in_background(service.set_active_model, name, on_result=done, pool=self.pool, priority=9,
                          on_error=lambda exc: self._status(f"Cannot switch model: {exc}"))

    def _indexing_finished(self, outcome: str) -> None:
        if self.session.query is not None and self.results_model.rowCount() == 0:
            self.search(self.session.query)
        elif outcome == "done" and self.session.query is not None:
            self._status("Library updated: press Enter in the search box to refresh the results.")

    # --- dialogs
    def open_training(self) -> TrainingDialog:
        """Show the training dialog (one per window)."""
        if self.training_dialog is None:
            self.training_dialog = TrainingDialog(self.settings.trainer_command, paths.models_dir(),
                                                  self.settings.last_data_folder, self)
            self.training_dialog.model_trained.connect(self._model_trained)
        self.training_dialog.show()
        self.training_dialog.raise_()
        return self.training_dialog

    def _model_trained(self, model_dir: str) -> None:
        """Register the new model with the library, then offer it in the model list (and the models dialog)."""
        if self.training_dialog is not None:
            self.settings.last_data_folder = self.training_dialog.data.text()
        service = self.service
        if service is None:
            return

        def registered(name: object) -> None:
            self._status(f"New model {name} registered; activate it in Models… to re-index with it.")
            self.refresh_models()

        run_in_background(service.register_model, Path(model_dir), on_result=registered, pool=self.pool,
                          priority=5, on_error=lambda exc: self._status(f"Cannot register the new model: {exc}"))

    def open_models(self) -> ModelsDialog:
        if self.models_dialog is None:
            self.models_dialog = ModelsDialog(self)
            self.models_dialog.activate_requested.connect(self.activate_model)
            self.models_dialog.reindex_requested.connect(self.library.reindex)
            self.models_dialog.train_requested.connect(self.open_training)
        self.models_dialog.set_models(self._models)
        self.models_dialog.show()
        return self.models_dialog

    def _choose_example(self) -> None:
        chosen, _ = QFileDialog.getOpenFileName(self, "Search by an example file")
        if chosen:
            self.search_bar.search_example(Path(chosen))

    def _focus_search(self) -> None:
        self.search_bar.edit.setFocus()
        self.search_bar.edit.selectAll()

    def _open_logs(self) -> None:
        folder = paths.log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def _status(self, message: str) -> None:
        self.statusBar().showMessage(message, 8000)

    # --- drops anywhere on the window search by example
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if self.service is not None and local_file(event.mimeData()) is not None:
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        path = local_file(event.mimeData())
        if path is not None:
            event.acceptProposedAction()
            self.search_bar.search_example(path)

    # --- state
    def _restore(self) -> None:
        if (geometry := self.settings.geometry) is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1320, 820)
        if (state := self.settings.window_state) is not None:
            self.restoreState(state)
        for name, splitter in (("main", self.splitter), ("right", self.right_splitter)):
            if (saved := self.settings.splitter_state(name)) is not None:
                splitter.restoreState(saved)
        self.search_bar.cutoff.blockSignals(True)
        self.search_bar.cutoff.setValue(self.settings.cutoff_percent)
        self.search_bar.cutoff.blockSignals(False)
        self.search_bar._show_cutoff(self.settings.cutoff_percent)

    def save_state(self) -> None:
        """Write geometry, dock and splitter layout to the settings file."""
        self.settings.geometry = self.saveGeometry()
        self.settings.window_state = self.saveState()
        self.settings.set_splitter_state("main", self.splitter.saveState())
        self.settings.set_splitter_state("right", self.right_splitter.saveState())
        self.settings.cutoff_percent = self.search_bar.cutoff.value()
        self.settings.sync()

    def shutdown(self) -> None:
        """Stop background work and wait for it, so no worker outlives the widgets it reports to."""
        self.library.cancel_indexing()
        if self.training_dialog is not None:
            self.training_dialog.close()
        self.pool.clear()  # queued reads that never started are dropped; queued writes are not
        for pool in (self.index_pool, self.write_pool, self.pool):
            if not pool.waitForDone(CLOSE_WAIT_MS):
                log.warning("a background job in %s did not stop within %d ms", pool.objectName() or "pool",
                            CLOSE_WAIT_MS)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_state()
        self.shutdown()
        super().closeEvent(event)

