"""The main window: composes the library sidebar, search bar, results grid, inspector and annotation panel.

It holds no search or annotation logic: it passes the workspace (:mod:`engine.workspace`) to its widgets and
connects their signals. Its menus are :mod:`app.menus`, its panels :mod:`app.layout`, annotation transfers
:mod:`app.transfer`, model changes :mod:`app.modelchanges`; calls it waits for are coroutines off the GUI thread
(:mod:`app.tasks`). Slow work runs on pools owned here (closing the window waits for them): ``pool`` for reads,
``index_pool`` for indexing, ``write_pool`` (one thread) for annotation writes, which must keep their order.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QThread, QThreadPool, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QCloseEvent,
    QDesktopServices,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QKeyEvent,
    QResizeEvent,
)
from PySide6.QtWidgets import QLineEdit, QMainWindow, QMessageBox, QWidget

from app import itemopen as items
from app.follow import ResultsFollow
from app.heldsearch import HeldSearch
from app.layout import WindowLayout, column
from app.menus import WindowCommands, WindowMenus
from app.modelchanges import ModelChanges
from app.search import SearchSession
from app.settings import GuiSettings
from app.state import LibrarySnapshot, LibraryState
from app.transfer import AnnotationTransfer
from app.widgets.annotate import AnnotationPanel
from app.widgets.browsebar import BrowseBar
from app.widgets.dialogs import PreferencesDialog, ShortcutsDialog
from app.widgets.images import ThumbnailCache
from app.widgets.inspector import Inspector
from app.widgets.library import LibraryPanel
from app.widgets.models import ModelsDialog
from app.widgets.plaintext import plain_label, show_message
from app.widgets.results import ResultsView
from app.widgets.resultsmodel import RELEVANCE_ROLE, ResultsModel
from app.widgets.screen import clamp_to_screen, fit_to_screen
from app.widgets.searchbar import SearchBar, local_file
from app.widgets.training import TrainingDialog
from app.widgets.viewer import Viewer
from app.windowsearch import WindowSearch
from app.workers import serial_pool
from engine import paths
from engine.types import SearchHit

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

log = logging.getLogger(__name__)

CLOSE_WAIT_MS = 5000


class MainWindow(QMainWindow):
    """Polyseek's window. ``set_service`` shows a library; None shows the "opening…" state."""

    annotations_transferred = Signal(str, int)  # "export" / "import", how many captions
    model_switched = Signal(str)  # a newly trained model became active (its re-index has started)

    def __init__(self, settings: GuiSettings, service: Workspace | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.service: Workspace | None = None
        self.session = SearchSession()
        self.pool = QThreadPool(self)
        self.pool.setMaxThreadCount(max(2, QThread.idealThreadCount()))
        self.index_pool = serial_pool("indexing")
        self.write_pool = serial_pool("annotation writes")
        # the one view of the library's folders, counts and models that every widget follows (app/state.py)
        self.state = LibraryState(self.pool, self)
        self.follow = ResultsFollow(self._rerun, lambda: self.library.is_indexing, lambda: self.session.browsing,
                                    lambda: self.results_model.rowCount(), self)  # when the results re-run (#44)
        self.training_dialog: TrainingDialog | None = None
        self.models_dialog: ModelsDialog | None = None
        self.viewer: Viewer | None = None
        self._models: list[Any] = []
        self._quit_requested = False  # File > Quit: the close asks first while indexing (closeEvent)
        self.setWindowTitle("Polyseek")
        self.setAcceptDrops(True)
        self._build()
        self.menus = WindowMenus(self, self._commands(), self.annotate.undo_stack, self.annotate.caption_edit)
        self.undo_action, self.redo_action = self.menus.undo_action, self.menus.redo_action
        self.held = HeldSearch(self, self.search)  # a query typed while a first start prepares the assets
        self.searching.held = self.held
        self._restore()
        self.set_service(service)

    # --- composition
    def _build(self) -> None:
        self.search_bar = SearchBar()
        self.library = LibraryPanel(self.index_pool, state=self.state, writes=self.write_pool)
        self.thumbnails = ThumbnailCache(self.pool, parent=self)
        self.results_model = ResultsModel(self.thumbnails, self.pool, self.settings.page_size, parent=self)
        self.results = ResultsView(self.results_model, self.thumbnails, self.settings.thumbnail_size)
        self.inspector = Inspector(self.pool)
        self.annotate = AnnotationPanel(self.write_pool, thumbnails=self.thumbnails)
        self.transfer = AnnotationTransfer(self, self.write_pool, self.pool)
        self.model_changes = ModelChanges(self.pool, self.library, self)
        self.empty_label = plain_label("", wrap=True)
        self.browse_bar = BrowseBar()
        self.browse_bar.follow(self.state)
        centre = column(self.empty_label, self.browse_bar, self.results)
        self.panels = WindowLayout(self.search_bar, self.library, centre, self.inspector, self.annotate)
        self.splitter, self.right_splitter = self.panels.splitter, self.panels.right_splitter
        self.setCentralWidget(self.panels.body)
        self.searching = WindowSearch(
            self, self.session, self.settings, self.pool, self.state, search_bar=self.search_bar,
            browse_bar=self.browse_bar, results=self.results, results_model=self.results_model,
            inspector=self.inspector, annotate=self.annotate, header=self.empty_label, status=self._status,
            status_bar=self.statusBar)
        self._connect()

    def _connect(self) -> None:
        app = QGuiApplication.instance()
        if app is not None:  # back from another program (a terminal's `polyseek models --activate`): read again
            app.applicationStateChanged.connect(self._application_state_changed)
        bar = self.search_bar
        bar.text_search.connect(self.search)
        bar.media_search.connect(self.search)
        bar.browse_requested.connect(lambda: self.search(None))
        self.browse_bar.options_changed.connect(self.searching.browse_options_changed)
        self.browse_bar.example_chosen.connect(self.searching.search_example_query)
        self.state.changed.connect(self._library_changed)
        self.state.activity_changed.connect(lambda _text: self.searching.rows_changed())
        self.annotate.verdict_changed.connect(self.searching.verdict_changed)
        self.annotate.saved.connect(self._status)
        self.results.find_similar_requested.connect(self.find_similar)
        self.results.open_requested.connect(self.open_viewer)
        self.inspector.frame_opened.connect(lambda hit, frame: self.open_viewer(hit, start=frame))
        bar.cutoff_changed.connect(self.searching.cutoff_changed)
        bar.model_chosen.connect(self.activate_model)
        self.results.current_hit_changed.connect(self._show_hit)
        self.results.current_place_changed.connect(self.inspector.set_rank)
        self.results_model.page_loaded.connect(self.searching.page_loaded)
        self.results_model.rowsRemoved.connect(self.searching.rows_changed)  # a rejected item left the results
        self.results_model.rowsInserted.connect(self.searching.rows_changed)  # ... and came back (undo)
        self.results_model.search_failed.connect(self.searching.search_failed)
        self.annotate.next_requested.connect(self.results.select_next)
        self.annotate.previous_requested.connect(self.results.select_previous)
        self.annotate.captions_changed.connect(self.results_model.set_captions)
        self.annotate.error.connect(self._status)
        self.annotate.suggestion_chosen.connect(self.select_media)
        self.annotate.suggestion_open_requested.connect(self.open_media)
        self.library.status_message.connect(self._status)
        self.transfer.status.connect(self._status)
        self.model_changes.status.connect(self._status)
        self.model_changes.activated.connect(self.annotate.refresh_suggestions)
        self.model_changes.switched.connect(self.model_switched)
        self.transfer.transferred.connect(self.annotations_transferred)
        self.transfer.imported.connect(self.annotate.refresh)
        self.transfer.imported.connect(self.annotate.refresh_suggestions)
        self.transfer.purged.connect(self.annotate.refresh_suggestions)
        self.library.indexing_finished.connect(self._indexing_finished)
        bar.edit.down_pressed.connect(self.focus_results)
        self.results.up_from_top.connect(self.search_bar.edit.setFocus)
        for edit in (bar.edit, self.annotate.caption_edit):
            edit.leave_keys_to(self._window_claims)
        # Tab goes from the query to the results and on to the caption line (not to the model picker)
        QWidget.setTabOrder(bar.edit, self.results)
        QWidget.setTabOrder(self.results, self.annotate.caption_edit)

    def _commands(self) -> WindowCommands:
        """What the menus' actions run (:mod:`app.menus`)."""
        return WindowCommands(
            add_folder=lambda: self.library.add_folder(), search_by_example=self.search_bar.choose_example,
            reindex=self.library.reindex, purge_missing=self.transfer.confirm_purge_missing,
            export_annotations=self.transfer.choose_export, import_annotations=self.transfer.choose_import,
            quit=self.request_quit, judge=self.judge, find_similar=self.find_similar,
            preferences=self.open_preferences, next_item=self.results.select_next,
            previous_item=self.results.select_previous, focus_search=self.focus_search,
            focus_caption=self.focus_caption, focus_results=self.focus_results, open_large=self.open_viewer,
            train=self.open_training, manage_models=self.open_models, shortcuts=self.open_shortcuts,
            open_logs=self.open_logs)

    def _window_claims(self, edit: QLineEdit, event: QKeyEvent) -> bool:
        return self.menus.claims(edit, event)

    # --- service
    def set_service(self, service: Workspace | None) -> None:
        """Show ``service``'s library in every widget (None: the window waits for one)."""
        self.service = service
        self.session.service = service
        self.transfer.service = service
        self.model_changes.service = service
        self.state.set_service(service)
        for widget in (self.library, self.thumbnails, self.inspector, self.annotate):
            widget.set_service(service)
        if self.training_dialog is not None:
            self.training_dialog.set_service(service)
        self.results_model.set_fetch(None)
        self.search_bar.setEnabled(service is not None)
        if service is not None and not self.annotate.caption_edit.hasFocus():
            self.search_bar.edit.setFocus()  # where typing starts
        if service is None:
            self.empty_label.setText("Opening the library…")
            return
        self.setWindowTitle(f"Polyseek — {service.name}")
        self.search(None)  # the library itself until the user asks for something (the state reads the rest)

    def show_error(self, title: str, message: str) -> None:
        """A modal error the user must see (e.g. the library could not be opened)."""
        self.empty_label.setText(f"{title}: {message}")
        show_message(self, QMessageBox.Icon.Critical, title, message)

    def _application_state_changed(self, state: Qt.ApplicationState) -> None:
        """Back to the front: the library may have changed (another process switched its model, #44): read it."""
        if state == Qt.ApplicationState.ApplicationActive:
            self.state.refresh()

    def refresh_models(self) -> None:
        """Read the library again (the models with it); the views follow the state."""
        self.state.refresh()

    def _library_changed(self, snapshot: LibrarySnapshot, aspects: frozenset[str]) -> None:
        """The library changed (whoever changed it): counts, folders and models follow in their widgets; the
        results follow here: new or removed items, another model or new embeddings run the query again, in place
        and when :class:`app.follow.ResultsFollow` says; captions and verdicts update the badges in place and
        re-list a listing filtered by them, but do not re-rank a search under the keyboard (the item after the
        one just judged stays the next one)."""
        if aspects & {"models", "opened"}:
            self._show_models(list(snapshot.models))
        self.results_model.set_searched(self.session.searched(snapshot.indexed))  # "ranked 2nd of 11 items"
        if "opened" in aspects:
            return  # set_service has just listed the library
        if "annotations" in aspects:
            self.results_model.refresh_loaded_states()
        if bool(aspects & {"items", "models", "index"}) or (
                "annotations" in aspects and self.session.browsing and self.session.browse.annotation != "all"):
            self.follow.changed()

    def _rerun(self) -> None:
        """Run the current query (or listing) again in place, the current item kept (:mod:`app.follow`)."""
        current = self.results.current_hit()
        self.search(self.session.query, keep=current.media_id if current is not None else None, rerun=True)

    def _show_models(self, models: list[Any]) -> None:
        self._models = list(models)
        self.search_bar.set_models(self._models)
        if self.models_dialog is not None:
            self.models_dialog.set_models(self._models)
        if self.training_dialog is not None:  # its result table says which model is active now
            self.training_dialog.model_switched(next((m.name for m in self._models if m.active), ""))

    # --- searching
    def search(self, query: str | Path | None, keep: int | None = None, rerun: bool = False) -> None:
        """Run a text or example-file search (None: list the library); see :meth:`WindowSearch.search`."""
        self.searching.search(query, keep, rerun)

    def judge(self, label: int) -> None:
        """Accept (+1) / reject (-1) the selected results for the query: several at once, or the current one."""
        self.searching.judge(label)

    def find_similar(self, hit: SearchHit | None = None) -> None:
        """Search by the current (or given) result as an example."""
        self.searching.find_similar(hit)

    def _show_hit(self, hit: SearchHit | None) -> None:
        index = self.results.currentIndex()
        rank = index.data(RELEVANCE_ROLE) if hit is not None and index.isValid() else None
        self.inspector.show_hit(self.session.query, hit, rank)
        self.annotate.set_item(self.session.query, hit)
        if self.viewer is not None and self.viewer.isVisible() and hit is not None:
            self.viewer.follow(hit, self.results_model.state(hit.media_id))

    def open_viewer(self, hit: SearchHit | None = None, state: Any = None, start: int | None = None) -> Viewer | None:
        """Show the current (or given) result large; the viewer follows the selection while it is open.
        ``state``: the item's annotation state, for an item the results do not hold; ``start``: a clip's sampled
        frame to open at (None: where the search matched it)."""
        hit = hit or self.results.current_hit()
        if hit is None:
            return None
        if self.viewer is None:
            self.viewer = Viewer(self.thumbnails, self.pool, self)
            self.viewer.step_requested.connect(
                lambda step: self.results.select_next() if step > 0 else self.results.select_previous())
            self.viewer.judge_requested.connect(self.judge)
            self.viewer.follow_states(self.results_model)
        self.viewer.show_hit(hit, self.results_model.state(hit.media_id) if state is None else state, start)
        self.viewer.show()
        self.viewer.raise_()
        self.viewer.activateWindow()
        self.viewer.picture.setFocus()
        return self.viewer

    def activate_model(self, name: str | None) -> None:
        """Make ``name`` (None: zero-shot) the active model; models and results follow the state."""
        self.model_changes.activate(name)

    def select_media(self, media_id: int) -> None:  # picked from "What to annotate next" (app/itemopen.py)
        items.select_media(self, media_id)

    def open_media(self, media_id: int) -> None:  # opened from "What to annotate next"
        items.open_media(self, media_id)

    # --- annotation import / export (app/transfer.py), here for the menus and the tests
    def export_annotations(self, dest: Path, fmt: str = "folder") -> asyncio.Task[None]:
        """Write the library's annotations to ``dest`` (``fmt`` "folder" or "coco") in the background."""
        return self.transfer.export(dest, fmt)

    def import_annotations(self, path: Path) -> asyncio.Task[None]:
        """Add the captions of a caption folder or COCO captions JSON at ``path`` to the library."""
        return self.transfer.import_(path)

    def _confirm_purge_missing(self) -> asyncio.Task[None] | None:
        return self.transfer.confirm_purge_missing()

    def _indexing_finished(self, outcome: str) -> None:
        """What changed during the job reaches the results now (see :meth:`_library_changed`)."""
        self.annotate.refresh_suggestions()  # new items (or a re-index under another model) change the picks
        self.follow.indexing_finished()
        self.searching.rows_changed()

    # --- dialogs
    def open_training(self) -> TrainingDialog:
        """Show the training dialog (one per window)."""
        if self.training_dialog is None:
            self.training_dialog = TrainingDialog(self.settings.trainer_command, paths.models_dir(),
                                                  self.settings.last_data_folder, self, service=self.service)
            self.training_dialog.model_trained.connect(self._model_trained)
            self.training_dialog.model_registered.connect(self._model_registered)
            self.training_dialog.use_model_requested.connect(self.activate_and_reindex)
            self.model_changes.reindexed.connect(self.training_dialog.reindex_ended)
        elif not self.training_dialog.isVisible():
            self.training_dialog.reset()  # a closed dialog opens clean, not on the last run's numbers
        if not self.training_dialog.busy:
            self.training_dialog.device.setCurrentText(self.settings.training_device)  # Preferences
        self.training_dialog.show()
        self.training_dialog.raise_()
        return self.training_dialog

    def _model_trained(self, _model_dir: str) -> None:
        """Remember the caption folder for next time (the dialog registers the model with the library)."""
        dialog = self.training_dialog
        if dialog is not None and dialog.training_set is None:
            self.settings.last_data_folder = dialog.data.text()

    def _model_registered(self, name: str) -> None:
        self._status(f"New model {name} registered; “Use it and re-index” in the training dialog switches to it.")

    def activate_and_reindex(self, name: str) -> None:
        """Make ``name`` the active model, then re-embed the library with it (the training dialog's "Use it and
        re-index"); ``model_switched`` follows."""
        self.model_changes.activate_and_reindex(name)

    def open_models(self) -> ModelsDialog:
        if self.models_dialog is None:
            self.models_dialog = ModelsDialog(self)
            self.models_dialog.activate_requested.connect(self.activate_model)
            self.models_dialog.rename_requested.connect(self.model_changes.rename)
            self.models_dialog.delete_requested.connect(self.model_changes.delete)
            self.model_changes.models_said.connect(self.models_dialog.show_status)
            self.models_dialog.reindex_requested.connect(self.library.reindex)
            self.models_dialog.train_requested.connect(self.open_training)
        self.models_dialog.set_models(self._models)
        self.models_dialog.show()
        return self.models_dialog

    def open_shortcuts(self) -> ShortcutsDialog:
        """Help > Keyboard shortcuts (built from the menus' actions)."""
        dialog = ShortcutsDialog(self.menus.actions, self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        return dialog

    def open_preferences(self) -> PreferencesDialog:
        """Edit > Preferences; OK applies the choices at once."""
        dialog = PreferencesDialog(self.settings, self, library=self.library if self.service else None,
                                   models=self._models)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.model_chosen.connect(self.activate_model)
        dialog.accepted.connect(self.apply_preferences)
        dialog.show()
        return dialog

    def apply_preferences(self) -> None:
        if self.results_model.page_size != self.settings.page_size:  # pages of one size only: read them again
            self.results_model.page_size = self.settings.page_size
            current = self.results.current_hit()
            self.search(self.session.query, keep=current.media_id if current else None, rerun=True)
        self.results.set_icon_size(self.settings.thumbnail_size)
        self.keep_grid_usable()
        if self.search_bar.cutoff.value() != self.settings.cutoff_percent:
            self.search_bar.cutoff.setValue(self.settings.cutoff_percent)  # searches again like the slider
        if self.training_dialog is not None and not self.training_dialog.busy:
            self.training_dialog.device.setCurrentText(self.settings.training_device)

    def focus_search(self) -> None:
        self.search_bar.edit.setFocus()
        self.search_bar.edit.selectAll()

    def focus_caption(self) -> None:
        if self.annotate.caption_edit.isEnabled():
            self.annotate.caption_edit.setFocus()
        else:
            self._status("Select a result first: its captions are edited in the caption box.")

    def focus_results(self) -> None:
        """Move the keyboard into the grid (Down from the search box), on the current result or the first."""
        self.results.setFocus()
        if not self.results.currentIndex().isValid():
            self.results.select_row(0)

    def open_logs(self) -> None:
        folder = paths.log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def _status(self, message: str) -> None:
        self.statusBar().showMessage(message, 8000)

    # --- drops anywhere on the window search by example
    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        # a result dragged out of the grid and let go over the window is not a search (the search box takes it)
        if event.source() is self.results:
            return
        if self.service is not None and local_file(event.mimeData()) is not None:
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        path = local_file(event.mimeData())
        if path is not None:
            event.acceptProposedAction()
            self.search_bar.search_example(path)

    # --- state
    def _restore(self) -> None:
        # a geometry saved at another scale factor (a 2x session) is not this one's: the default size instead
        # (it came back at 1182x675); either way within the screen (app/widgets/screen.py)
        geometry, scale = self.settings.geometry, self.settings.geometry_scale
        if geometry is not None and (scale is None or abs(scale - self.devicePixelRatioF()) < 0.01):
            self.restoreGeometry(geometry)
            clamp_to_screen(self)
        else:
            fit_to_screen(self, 1320, 820)
        if (state := self.settings.window_state) is not None:
            self.restoreState(state)
        self.panels.restore(self.settings)
        self.search_bar.restore_cutoff(self.settings.cutoff_percent)
        self.browse_bar.restore_sort(self.settings.browse_sort)
        self.session.browse = self.browse_bar.options()

    def save_state(self) -> None:
        """Write geometry, dock and splitter layout to the settings file."""
        self.settings.geometry = self.saveGeometry()
        self.settings.geometry_scale = self.devicePixelRatioF()
        self.settings.window_state = self.saveState()
        self.panels.save(self.settings)
        self.settings.cutoff_percent = self.search_bar.cutoff.value()
        self.settings.browse_sort = self.session.browse.sort
        self.settings.sync()

    def shutdown(self) -> None:
        """Stop background work and wait for it, so no worker outlives the widgets it reports to."""
        self.state.close()  # writers still running must not call back into this window
        self.library.cancel_indexing()
        if self.viewer is not None:
            self.viewer.close()  # stops a playing video's decoding thread
        if self.training_dialog is not None:
            self.training_dialog.close()
        self.pool.clear()  # queued reads that never started are dropped; queued writes are not
        for pool in (self.index_pool, self.write_pool, self.pool):
            if not pool.waitForDone(CLOSE_WAIT_MS):
                log.warning("a background job in %s did not stop within %d ms", pool.objectName() or "pool",
                            CLOSE_WAIT_MS)

    # --- a narrow window keeps a usable grid
    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        QTimer.singleShot(0, self.keep_grid_usable)  # once the splitter has laid out the new width

    def keep_grid_usable(self) -> None:
        """Give the grid room for at least two result columns (:meth:`app.layout.WindowLayout.keep_grid_usable`)."""
        self.panels.keep_grid_usable(self.results.cell_width())

    def request_quit(self) -> None:
        """File > Quit: close the window, asking first while indexing runs (:meth:`LibraryPanel.confirm_quit`)."""
        self._quit_requested = True
        self.close()

    def closeEvent(self, event: QCloseEvent) -> None:
        asked, self._quit_requested = event.spontaneous() or self._quit_requested, False  # the user, not a test
        if asked and not self.library.confirm_quit(self):
            event.ignore()
            return
        self.save_state()
        self.shutdown()
        super().closeEvent(event)
