"""The main window: composes the library sidebar, search bar, results grid, inspector and annotation panel.

It holds no search or annotation logic (annotation import / export and switching to a newly trained model
are service calls it starts in the background); it passes the service to its widgets and connects their signals.
Work that can be slow runs on thread pools owned here (so closing the window can wait for them): ``pool``
for reads (search pages, thumbnails, explanations), ``index_pool`` for indexing jobs, ``write_pool`` (one
thread) for annotation writes, which must keep their order.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QModelIndex, Qt, QThread, QThreadPool, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDesktopServices,
    QDragEnterEvent,
    QDropEvent,
    QKeyEvent,
    QKeySequence,
    QResizeEvent,
)
from PySide6.QtWidgets import QFileDialog, QLineEdit, QMainWindow, QMessageBox, QSplitter, QVBoxLayout, QWidget

from app.search import BrowseOptions, SearchSession
from app.service_api import ANNOTATION_FORMATS, SearchServiceLike
from app.settings import GuiSettings
from app.state import LibrarySnapshot, LibraryState
from app.widgets.annotate import AnnotationPanel
from app.widgets.browsebar import BrowseBar
from app.widgets.dialogs import PreferencesDialog, ShortcutsDialog
from app.widgets.images import ThumbnailCache
from app.widgets.inspector import Inspector
from app.widgets.keys import key_sequence
from app.widgets.library import LibraryPanel
from app.widgets.models import ModelsDialog
from app.widgets.plaintext import plain_label, plural, show_message
from app.widgets.results import ResultsView
from app.widgets.resultsmodel import RELEVANCE_ROLE, STATE_ROLE, ResultsModel
from app.widgets.searchbar import SearchBar, local_file
from app.widgets.training import TrainingDialog
from app.widgets.viewer import Viewer
from app.workers import Worker, run_in_background, serial_pool, while_alive
from engine import paths
from engine.types import SearchHit

log = logging.getLogger(__name__)

CLOSE_WAIT_MS = 5000
GRID_COLUMNS = 2  # a narrow window makes room for at least this many result columns


def _counted(n: object) -> str:
    """What an annotation transfer moved, in words: the engine's counts say every kind; a plain count is captions."""
    summary = getattr(n, "summary", None)
    return summary() if callable(summary) else f"{n} captions"


def example_filters() -> str:
    """The example picker's filters: every medium, photos, GIFs and animations, videos (what indexing reads)."""
    from engine.media.discover import ANIMATION_SUFFIXES, MEDIA_SUFFIXES, PHOTO_SUFFIXES, VIDEO_SUFFIXES

    def names(suffixes: frozenset[str]) -> str:
        return " ".join(f"*{suffix}" for suffix in sorted(suffixes))

    return ";;".join((f"Photos, GIFs and videos ({names(MEDIA_SUFFIXES)})", f"Photos ({names(PHOTO_SUFFIXES)})",
                      f"GIFs and animations ({names(ANIMATION_SUFFIXES)})", f"Videos ({names(VIDEO_SUFFIXES)})",
                      "All files (*)"))


def _item_hit(service: SearchServiceLike, media_id: int) -> SearchHit:
    """An item of the library as a hit of no search (score 0): its path, kind and captions."""
    from engine.library.browse import split_captions

    record = service.media(media_id)
    captions, guess = split_captions(service.captions(media_id))
    return SearchHit(media_id, str(record.path), record.kind, 0.0, captions, guess=guess)


class MainWindow(QMainWindow):
    """Polyseek's window. ``set_service`` shows a library; None shows the "opening…" state."""

    annotations_transferred = Signal(str, int)  # "export" / "import", how many captions
    model_switched = Signal(str)  # a newly trained model became active (its re-index has started)

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
        # the one view of the library's folders, counts and models that every widget follows (app/state.py)
        self.state = LibraryState(self.pool, self)
        self._stale = False  # the library changed during an indexing job: the results follow once it ends
        self._keep_media: int | None = None  # the item to select again when a re-run's first page arrives
        self.training_dialog: TrainingDialog | None = None
        self.models_dialog: ModelsDialog | None = None
        self.viewer: Viewer | None = None
        self._models: list[Any] = []
        self._window_actions: list[QAction] = []  # their shortcuts win over the line edits' own keys
        self._searched = False  # example queries are offered until the first search
        self._library_collapsed = False  # the folders panel was folded away to make room for the grid
        self.setWindowTitle("Polyseek")
        self.setAcceptDrops(True)
        self._build()
        self._menus()
        self._restore()
        self.set_service(service)

    # --- composition
    def _build(self) -> None:
        self.search_bar = SearchBar()
        self.library = LibraryPanel(self.index_pool, state=self.state)
        self.thumbnails = ThumbnailCache(self.pool, parent=self)
        self.results_model = ResultsModel(self.thumbnails, self.pool, self.settings.page_size, parent=self)
        self.results = ResultsView(self.results_model, self.thumbnails, self.settings.thumbnail_size)
        self.inspector = Inspector(self.pool)
        self.annotate = AnnotationPanel(self.write_pool, thumbnails=self.thumbnails)
        self.empty_label = plain_label("", wrap=True)
        self.browse_bar = BrowseBar()
        self.browse_bar.follow(self.state)
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.addWidget(self.empty_label)
        centre_layout.addWidget(self.browse_bar)
        centre_layout.addWidget(self.results, 1)
        self.right_splitter = QSplitter(Qt.Orientation.Vertical)
        self.right_splitter.addWidget(self.inspector)
        self.right_splitter.addWidget(self.annotate)
        self.right_splitter.setStretchFactor(0, 3)
        self.right_splitter.setStretchFactor(1, 1)
        self.right_splitter.setSizes([470, 410])
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
        bar.browse_requested.connect(lambda: self.search(None))
        self.browse_bar.options_changed.connect(self._browse_options_changed)
        self.browse_bar.example_chosen.connect(self._search_example_query)
        self.state.changed.connect(self._library_changed)
        self.state.activity_changed.connect(lambda _text: self._rows_changed())
        self.annotate.verdict_changed.connect(self._verdict_changed)
        self.annotate.saved.connect(self._status)
        self.results.find_similar_requested.connect(self.find_similar)
        self.results.open_requested.connect(self.open_viewer)
        bar.cutoff_changed.connect(self._cutoff_changed)
        bar.model_chosen.connect(self.activate_model)
        self.results.current_hit_changed.connect(self._show_hit)
        self.results_model.page_loaded.connect(self._page_loaded)
        self.results_model.rowsRemoved.connect(self._rows_changed)  # a rejected item left the results
        self.results_model.rowsInserted.connect(self._rows_changed)  # ... and came back (undo)
        self.results_model.search_failed.connect(lambda msg: self._status(f"Search failed: {msg}"))
        self.annotate.next_requested.connect(self.results.select_next)
        self.annotate.previous_requested.connect(self.results.select_previous)
        self.annotate.captions_changed.connect(self.results_model.set_captions)
        self.annotate.error.connect(self._status)
        self.annotate.suggestion_chosen.connect(self.select_media)
        self.annotate.suggestion_open_requested.connect(self.open_media)
        self.library.status_message.connect(self._status)
        self.library.indexing_finished.connect(self._indexing_finished)
        bar.edit.down_pressed.connect(self._focus_results)
        self.results.up_from_top.connect(self.search_bar.edit.setFocus)
        for edit in (bar.edit, self.annotate.caption_edit):
            edit.leave_keys_to(self._window_claims)
        # Tab goes from the query to the results and on to the caption line (not to the model picker)
        QWidget.setTabOrder(bar.edit, self.results)
        QWidget.setTabOrder(self.results, self.annotate.caption_edit)

    def _window_claims(self, edit: QLineEdit, event: QKeyEvent) -> bool:
        """Whether a key pressed in ``edit`` belongs to one of the window's actions (see ``app.widgets.keys``).

        Ctrl+Z undoes the last annotation (what the Edit menu offers) unless a caption is being typed, whose
        text keeps its own undo.
        """
        pressed = key_sequence(event)
        for action in self._window_actions:
            if not any(s.matches(pressed) == QKeySequence.SequenceMatch.ExactMatch for s in action.shortcuts()):
                continue
            if action in (self.undo_action, self.redo_action) and edit is self.annotate.caption_edit:
                return action.isEnabled() and not edit.text()
            return action.isEnabled()
        return False

    def _menus(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        self._action(file_menu, "&Add folder…", lambda: self.library.add_folder(), "Ctrl+O")
        self._action(file_menu, "Search by &example file…", self._choose_example)
        self._action(file_menu, "&Re-index library", self.library.reindex)
        self._action(file_menu, "&Purge missing items…", self._confirm_purge_missing)
        file_menu.addSeparator()
        self._action(file_menu, "&Export annotations as a caption folder…", lambda: self._choose_export("folder"))
        self._action(file_menu, "Export annotations as &COCO captions JSON…", lambda: self._choose_export("coco"))
        self._action(file_menu, "&Import annotations from a caption folder…", lambda: self._choose_import("folder"))
        self._action(file_menu, "Import annotations from a COCO captions &JSON…",
                     lambda: self._choose_import("coco"))
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        edit = menu.addMenu("&Edit")
        self.undo_action = self.annotate.undo_stack.createUndoAction(self, "&Undo")
        self.undo_action.setShortcuts(QKeySequence.StandardKey.Undo)
        self.redo_action = self.annotate.undo_stack.createRedoAction(self, "&Redo")
        self.redo_action.setShortcuts(QKeySequence.StandardKey.Redo)
        edit.addActions([self.undo_action, self.redo_action])
        self._window_actions += [self.undo_action, self.redo_action]
        edit.addSeparator()
        # Judging never moves the selection on by itself, so the next key acts on the item on show (issue #32)
        accept = self._action(edit, "&Accept match", lambda: self.judge(+1), "Alt+A")
        accept.setStatusTip("Accept the selected result(s) for the query; the selection stays where it is "
                            "(Ctrl+Right moves on)")
        reject = self._action(edit, "&Reject match", lambda: self.judge(-1), "Alt+R")
        reject.setStatusTip("Reject the selected result(s) for the query: they leave its results, and the next "
                            "result takes their place, selected")
        edit.addSeparator()
        self._action(edit, "Find &similar", self.find_similar, "Ctrl+Shift+F")
        edit.addSeparator()
        self._action(edit, "&Preferences…", self.open_preferences, "Ctrl+,")
        nav = menu.addMenu("&Navigate")
        self._action(nav, "&Next item", self.results.select_next, "Ctrl+Right")
        self._action(nav, "&Previous item", self.results.select_previous, "Ctrl+Left")
        self._action(nav, "&Search box", self._focus_search, "Ctrl+L")
        self._action(nav, "&Caption box", self._focus_caption, "Ctrl+E")
        self._action(nav, "&Results grid", self._focus_results, "Ctrl+G")
        self._action(nav, "&Open large (Enter on a result)", self.open_viewer)
        models = menu.addMenu("&Models")
        self._action(models, "&Train…", self.open_training, "Ctrl+T")
        self._action(models, "&Manage models…", self.open_models)
        help_menu = menu.addMenu("&Help")
        self._action(help_menu, "&Keyboard shortcuts", self.open_shortcuts, "F1")
        self._action(help_menu, "Open &log folder", self._open_logs)

    def _action(self, menu: Any, text: str, slot: Any, shortcut: Any = None) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            self._window_actions.append(action)
        action.triggered.connect(lambda _checked=False: slot())
        menu.addAction(action)
        return action

    # --- service
    def set_service(self, service: SearchServiceLike | None) -> None:
        """Show ``service``'s library in every widget (None: the window waits for one)."""
        self.service = service
        self.session.service = service
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

    def refresh_models(self) -> None:
        """Read the library again (the models with it); the views follow the state."""
        self.state.refresh()

    def _library_changed(self, snapshot: LibrarySnapshot, aspects: frozenset[str]) -> None:
        """The library changed (whoever changed it): counts, folders and models follow in their widgets; the
        results follow here. New or removed items, another model or new embeddings run the query again (after
        an indexing job, unless the grid is still empty); captions and verdicts update the badges in place and
        re-list a listing filtered by them, but do not re-rank a search under the keyboard (the item after the
        one just judged stays the next one)."""
        if aspects & {"models", "opened"}:
            self._show_models(list(snapshot.models))
        if "opened" in aspects:
            return  # set_service has just listed the library
        if "annotations" in aspects:
            self.results_model.refresh_loaded_states()
        rerun = bool(aspects & {"items", "models", "index"}) or (
            "annotations" in aspects and self.session.browsing and self.session.browse.annotation != "all")
        if not rerun:
            return
        if self.library.is_indexing and not (self.session.browsing and self.results_model.rowCount() == 0):
            self._stale = True
            return
        self._rerun()

    def _rerun(self) -> None:
        """Run the current query (or listing) again, keeping the current item selected when it is still there."""
        self._stale = False
        current = self.results.current_hit()
        self.search(self.session.query, keep=current.media_id if current is not None else None)

    def _show_models(self, models: list[Any]) -> None:
        self._models = list(models)
        self.search_bar.set_models(self._models)
        if self.models_dialog is not None:
            self.models_dialog.set_models(self._models)

    # --- searching
    def search(self, query: str | Path | None, keep: int | None = None) -> None:
        """Run a text or example-file search (None: list the library); the grid fills page by page. ``keep``: the
        media id to select again when the first page holds it (a re-run of the same query)."""
        self.session.set_query(query)
        self.session.min_probability = self.search_bar.min_probability
        if query is not None:
            self._searched = True
        self.browse_bar.set_browsing(self.session.browsing, show_examples=not self._searched)
        self._keep_media = keep
        if keep is None:  # a re-run leaves the item on show (and a caption being typed) alone
            self.inspector.show_hit(None, None)
            self.annotate.set_item(None, None)
        fetch = self.session.page_fetcher()
        text = self.session.query if isinstance(self.session.query, str) else None
        service = self.service
        states = (lambda ids: service.annotation_states(ids, text)) if service is not None else None
        self.results_model.searched = (self.state.snapshot.indexed or None) if not self.session.scope() else None
        self.results_model.set_fetch(fetch, scored=not self.session.browsing, states=states,
                                     hide_rejected=text is not None, count=self.session.listing_counter())
        if fetch is not None:
            verb = "Listing" if self.session.browsing else "Searching"
            self.empty_label.setText(f"{verb} {self.session.describe()}…")
        if isinstance(query, Path) and keep is None:
            self._load_example_picture(query)

    def _load_example_picture(self, path: Path) -> None:
        """Show the example a search is made by (its thumbnail, made off the GUI thread like the results')."""
        service = self.service
        if service is None:
            return

        def load() -> Any:
            from app.widgets.images import read_image

            return read_image(service.file_thumbnail(path, 128))

        run_in_background(load, pool=self.pool, priority=9,
                          on_result=while_alive(self, lambda image: self.search_bar.set_example_picture(path, image)),
                          on_error=while_alive(self, lambda _exc: self.search_bar.set_example_picture(path, None)))

    def _browse_options_changed(self, options: BrowseOptions) -> None:
        old, self.session.browse = self.session.browse, options
        narrowed = (old.kind, old.folder) != (options.kind, options.folder)
        if self.session.browsing or narrowed:  # kind and folder narrow a search too
            self.search(self.session.query)

    def _search_example_query(self, text: str) -> None:
        self.search_bar.edit.setText(text)
        self.search_bar.submit()
        self.search_bar.edit.setFocus()

    def refresh_library(self) -> None:
        """Read the library's folders, counts and caption progress again (the views follow the state)."""
        self.state.refresh()

    def _cutoff_changed(self, cutoff: float | None) -> None:
        self.settings.cutoff_percent = self.search_bar.cutoff.value()
        if isinstance(self.session.query, str) and cutoff != self.session.min_probability:
            self.search(self.session.query)

    def _page_loaded(self, added: int) -> None:
        total = self.results_model.rowCount()
        self.empty_label.setText(self._results_summary(total))
        if self.results_model.pages_loaded != 1:
            return
        keep, self._keep_media = self._keep_media, None
        kept = self.results_model.row_of(keep) if keep is not None else None
        if kept is not None:
            self.results.select_row(kept)
        elif total and not self.results.currentIndex().isValid() and keep is None:
            self.results.select_row(0)

    def judge(self, label: int) -> None:
        """Accept (+1) / reject (-1) the selected results for the query: several at once, or the current one."""
        selected = self.results.selected_hits()
        if len(selected) > 1:
            self.annotate.judge_many([hit.media_id for hit in selected], label)
        else:
            self.annotate.judge(label)

    def _verdict_changed(self, media_id: int, label: int, query: str) -> None:
        """A rejected item leaves the results of its query; undoing the verdict brings it back."""
        if self.session.query != query:
            return
        if label < 0:
            current = self.results.current_hit()
            row = self.results_model.row_of(media_id)
            self.results_model.drop(media_id)
            if row is not None and current is not None and current.media_id == media_id:
                self.results.select_row(row)  # the next result takes its place, and is the one selected
            return
        row = self.results_model.restore(media_id)
        if row is not None:
            self.results.select_row(row)
        else:
            self.results_model.refresh_states([media_id])

    def find_similar(self, hit: SearchHit | None = None) -> None:
        """Search by the current (or given) result as an example."""
        hit = hit or self.results.current_hit()
        if hit is None:
            self._status("Select a result first: Find similar searches by it.")
            return
        self.search_bar.search_example(Path(hit.path))

    def _rows_changed(self) -> None:
        if not self.results_model.is_loading:
            self.empty_label.setText(self._results_summary(self.results_model.rowCount()))

    def _results_summary(self, total: int) -> str:
        described = self.session.describe()
        more = "+" if self.results_model.canFetchMore() else ""
        busy = self.state.activity
        if self.session.browsing:
            if total:
                return f"{total:,}{more} items {described}; type a description above to search"
            if busy:  # not empty: on its way (the demo being made, the first folder being indexed)
                return f"{busy} The items appear here as they are indexed."
            if self.session.browse != BrowseOptions():
                return "Nothing in the library matches these filters."
            return "The library is empty: add a folder (File ▸ Add folder…) or drop files here."
        if total:
            return f"{total:,}{more} results {described}"
        if busy:
            return f"No results {described} yet: {busy[0].lower()}{busy[1:]}"
        cutoff = self.session.min_probability
        if cutoff is not None and isinstance(self.session.query, str):
            service = self.session.service
            if service is not None and not service.query_carries_evidence(self.session.query):
                return (f"No results {described}: the model knows none of its words, so it has no evidence "
                        "for any item at any cutoff. Try other words.")
            return (f"No result {described} reaches a match probability of {cutoff:.2f}: "
                    "lower the p ≥ cutoff (right of the search box) to see weaker matches.")
        return f"No results {described}"

    def _show_hit(self, hit: SearchHit | None) -> None:
        index = self.results.currentIndex()
        rank = index.data(RELEVANCE_ROLE) if hit is not None and index.isValid() else None
        self.inspector.show_hit(self.session.query, hit, rank)
        self.annotate.set_item(self.session.query, hit)
        if self.viewer is not None and self.viewer.isVisible() and hit is not None:
            self.viewer.show_hit(hit, self.results_model.state(hit.media_id))

    def _viewer_state_changed(self, first: QModelIndex, last: QModelIndex, roles: list[int]) -> None:
        """What the user wrote about the item the viewer shows has arrived or changed: say it there too."""
        viewer = self.viewer
        if viewer is None or viewer.hit is None or not viewer.isVisible() or (roles and STATE_ROLE not in roles):
            return
        row = self.results_model.row_of(viewer.hit.media_id)
        if row is not None and first.row() <= row <= last.row():
            viewer.set_state(self.results_model.state(viewer.hit.media_id))

    def open_viewer(self, hit: SearchHit | None = None, state: Any = None) -> Viewer | None:
        """Show the current (or given) result large; the viewer follows the selection while it is open.
        ``state``: the item's annotation state, for an item the results do not hold."""
        hit = hit or self.results.current_hit()
        if hit is None:
            return None
        if self.viewer is None:
            self.viewer = Viewer(self.thumbnails, self.pool, self)
            self.viewer.step_requested.connect(
                lambda step: self.results.select_next() if step > 0 else self.results.select_previous())
            self.viewer.judge_requested.connect(self.judge)
            self.results_model.dataChanged.connect(self._viewer_state_changed)
        self.viewer.show_hit(hit, self.results_model.state(hit.media_id) if state is None else state)
        self.viewer.show()
        self.viewer.raise_()
        self.viewer.activateWindow()
        self.viewer.picture.setFocus()
        return self.viewer

    def activate_model(self, name: str | None) -> None:
        """Make ``name`` (None: zero-shot) the active model, then refresh models and results."""
        service = self.service
        if service is None:
            return

        def done(_: object) -> None:  # the state hears of the switch: the model list and the results follow
            self._status(f"Active model: {name or 'zero-shot'}")
            self.annotate.refresh_suggestions()  # another model, another order (and reason)

        run_in_background(service.set_active_model, name, on_result=done, pool=self.pool, priority=9,
                          on_error=lambda exc: self._status(f"Cannot switch model: {exc}"))

    def select_media(self, media_id: int) -> None:
        """Show ``media_id`` in the inspector and annotation panel (picked from "What to annotate next"):
        its row when the results hold it, else the item on its own."""
        service = self.service
        if service is None:
            return
        row = self.results_model.row_of(media_id)
        if row is not None:
            self.results.select_row(row)
            self.annotate.set_item(self.session.query, self.results_model.hit(row), from_suggestion=True)
            return

        def load() -> SearchHit:
            return _item_hit(service, media_id)

        def show(hit: SearchHit) -> None:
            self.results.setCurrentIndex(QModelIndex())  # the item is not one of the results
            self.inspector.show_hit(self.session.query, hit)
            self.annotate.set_item(self.session.query, hit, from_suggestion=True)

        run_in_background(load, on_result=while_alive(self, show), pool=self.pool, priority=9,
                          on_error=while_alive(self, lambda exc: self._status(f"Cannot show item {media_id}: {exc}")))

    def open_media(self, media_id: int) -> None:
        """Show ``media_id`` large (Enter / double-click on "What to annotate next"): as a result when the
        results hold it, else the item on its own, with what the user wrote about it."""
        service = self.service
        if service is None:
            return
        row = self.results_model.row_of(media_id)
        if row is not None and self.results_model.hit(row) is not None:
            self.open_viewer(self.results_model.hit(row))
            return

        def load() -> tuple[SearchHit, Any]:
            return _item_hit(service, media_id), service.annotation_states([media_id]).get(media_id)

        run_in_background(load, on_result=while_alive(self, lambda loaded: self.open_viewer(*loaded)),
                          pool=self.pool, priority=9,
                          on_error=while_alive(self, lambda exc: self._status(f"Cannot open item {media_id}: {exc}")))

    # --- annotation import / export
    def export_annotations(self, dest: Path, fmt: str = "folder") -> Worker:
        """Write the library's annotations to ``dest`` (``fmt`` "folder" or "coco") in the background.

        It runs on the annotation write thread, so every caption typed before it is in the export.
        """
        service = self.service
        if service is None:
            raise RuntimeError("no library is open to export annotations from")
        if fmt not in ANNOTATION_FORMATS:
            raise ValueError(f"unknown annotation format {fmt!r} (use one of {sorted(ANNOTATION_FORMATS)})")
        self._status(f"Exporting annotations to {dest}…")
        return run_in_background(
            service.export_annotations, Path(dest), fmt, pool=self.write_pool,
            on_result=while_alive(
                self, lambda n: self._transferred("export", int(n), f"Exported {_counted(n)} to {dest}")),
            on_error=while_alive(self, lambda exc: self._status(f"Export failed: {exc}")))

    def import_annotations(self, path: Path) -> Worker:
        """Add the captions of a caption folder or COCO captions JSON at ``path`` to the library."""
        service = self.service
        if service is None:
            raise RuntimeError("no library is open to import annotations into")
        self._status(f"Importing annotations from {path}…")

        def imported(n: object) -> None:
            self._transferred("import", int(n), f"Imported {_counted(n)} from {path}")
            self.annotate.refresh()
            self.annotate.refresh_suggestions()

        return run_in_background(service.import_annotations, Path(path), pool=self.write_pool,
                                 on_result=while_alive(self, imported),
                                 on_error=while_alive(self, lambda exc: self._status(f"Import failed: {exc}")))

    def _confirm_purge_missing(self) -> None:
        """Delete the items whose files are missing or offline, with their annotations, once the user has seen
        the counts and agreed; a snapshot of every annotation is written first (issue #21)."""
        service = self.service
        if service is None:
            return
        items, captions, pairs = service.missing_summary()
        if not items:
            self._status("No missing or offline items to purge.")
            return
        answer = QMessageBox.question(
            self, "Purge missing items",
            f"Delete {plural(items, 'item')} whose files are missing or on an unplugged drive, with their "
            f"{plural(captions, 'caption')} and {plural(pairs, 'accepted/rejected pair')}?\n\n"
            "Kept items get their annotations back when their "
            "files return. A snapshot of every annotation is saved first; importing it restores them.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        if answer != QMessageBox.StandardButton.Yes:
            return

        def purged(result: Any) -> None:
            n, c, p, snapshot = result
            saved = f"; their annotations are saved in {snapshot}" if snapshot else ""
            self._status(f"Deleted {plural(n, 'missing item')} with {plural(c, 'caption')} and "
                         f"{plural(p, 'pair')}{saved}")
            self.annotate.refresh_suggestions()

        run_in_background(service.purge_missing, pool=self.write_pool, on_result=while_alive(self, purged),
                          on_error=while_alive(self, lambda exc: self._status(f"Purge failed: {exc}")))

    def _transferred(self, what: str, count: int, message: str) -> None:
        self._status(message)
        self.annotations_transferred.emit(what, count)

    def _choose_export(self, fmt: str) -> None:
        if self.service is None:
            return
        if fmt == "folder":
            chosen = QFileDialog.getExistingDirectory(self, "Folder to export the annotations into")
        else:
            chosen, _ = QFileDialog.getSaveFileName(self, "Export annotations as COCO captions JSON",
                                                    "captions.json", "JSON (*.json)")
        if chosen:
            self.export_annotations(Path(chosen), fmt)

    def _choose_import(self, fmt: str) -> None:
        if self.service is None:
            return
        if fmt == "folder":
            chosen = QFileDialog.getExistingDirectory(self, "Caption folder to import")
        else:
            chosen, _ = QFileDialog.getOpenFileName(self, "COCO captions JSON to import", "", "JSON (*.json)")
        if chosen:
            self.import_annotations(Path(chosen))

    def _indexing_finished(self, outcome: str) -> None:
        """What changed during the job reaches the results now (see :meth:`_library_changed`)."""
        self.annotate.refresh_suggestions()  # new items (or a re-index under another model) change the picks
        if self._stale or self.results_model.rowCount() == 0:
            self._rerun()
        self._rows_changed()

    # --- dialogs
    def open_training(self) -> TrainingDialog:
        """Show the training dialog (one per window)."""
        if self.training_dialog is None:
            self.training_dialog = TrainingDialog(self.settings.trainer_command, paths.models_dir(),
                                                  self.settings.last_data_folder, self, service=self.service)
            self.training_dialog.model_trained.connect(self._model_trained)
            self.training_dialog.model_registered.connect(self._model_registered)
            self.training_dialog.use_model_requested.connect(self.use_model)
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

    def use_model(self, name: str) -> None:
        """Make ``name`` the active model, then re-embed the library with it in the background."""
        service = self.service
        if service is None:
            return

        def switched(_: object) -> None:  # the model list and the results follow the state
            if self.library.is_indexing:  # one job at a time: the user re-indexes once this one is done
                self._status(f"Active model: {name}; re-index (File menu) once the current indexing ends.")
            else:
                self._status(f"Active model: {name}; re-indexing the library in the background…")
                self.library.reindex()
            self.annotate.refresh_suggestions()
            self.model_switched.emit(name)

        failed = while_alive(self, lambda exc: self._status(f"Cannot switch to {name}: {exc}"))
        run_in_background(service.set_active_model, name, on_result=while_alive(self, switched), pool=self.pool,
                          priority=9, on_error=failed)

    def open_models(self) -> ModelsDialog:
        if self.models_dialog is None:
            self.models_dialog = ModelsDialog(self)
            self.models_dialog.activate_requested.connect(self.activate_model)
            self.models_dialog.rename_requested.connect(self.rename_model)
            self.models_dialog.delete_requested.connect(self.delete_model)
            self.models_dialog.reindex_requested.connect(self.library.reindex)
            self.models_dialog.train_requested.connect(self.open_training)
        self.models_dialog.set_models(self._models)
        self.models_dialog.show()
        return self.models_dialog

    def rename_model(self, name: str, new_name: str) -> None:
        self._change_models(f"Renamed {name} to {new_name}", f"Cannot rename {name}", "rename_model", name, new_name)

    def delete_model(self, name: str) -> None:
        self._change_models(f"Deleted the model {name}", f"Cannot delete {name}", "delete_model", name)

    def _change_models(self, done_text: str, failed_text: str, method: str, *args: str) -> None:
        """Call a service method that changes the registered models, then show the new list (and say so)."""
        service = self.service
        if service is None:
            return

        def say(text: str) -> None:
            self._status(text)
            if self.models_dialog is not None:
                self.models_dialog.show_status(text)

        def done(_: object) -> None:  # the model list (and the results, naming the model) follow the state
            say(done_text)

        run_in_background(getattr(service, method), *args, pool=self.pool, priority=9,
                          on_result=while_alive(self, done),
                          on_error=while_alive(self, lambda exc: say(f"{failed_text}: {exc}")))

    def open_shortcuts(self) -> ShortcutsDialog:
        """Help > Keyboard shortcuts (built from the menus' actions)."""
        dialog = ShortcutsDialog(self._window_actions, self)
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
        self.results_model.page_size = self.settings.page_size
        self.results.set_icon_size(self.settings.thumbnail_size)
        self.keep_grid_usable()
        if self.search_bar.cutoff.value() != self.settings.cutoff_percent:
            self.search_bar.cutoff.setValue(self.settings.cutoff_percent)  # searches again like the slider
        if self.training_dialog is not None and not self.training_dialog.busy:
            self.training_dialog.device.setCurrentText(self.settings.training_device)

    def _choose_example(self) -> None:
        chosen, _ = QFileDialog.getOpenFileName(self, "Search by an example file", "", example_filters())
        if chosen:
            self.search_bar.search_example(Path(chosen))

    def _focus_search(self) -> None:
        self.search_bar.edit.setFocus()
        self.search_bar.edit.selectAll()

    def _focus_caption(self) -> None:
        if self.annotate.caption_edit.isEnabled():
            self.annotate.caption_edit.setFocus()
        else:
            self._status("Select a result first: its captions are edited in the caption box.")

    def _focus_results(self) -> None:
        """Move the keyboard into the grid (Down from the search box), on the current result or the first."""
        self.results.setFocus()
        if not self.results.currentIndex().isValid():
            self.results.select_row(0)

    def _open_logs(self) -> None:
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
        """Give the grid room for ``GRID_COLUMNS`` columns: the folders panel collapses first (its splitter
        handle brings it back), then the inspector side shrinks to its minimum."""
        sizes = self.splitter.sizes()
        if len(sizes) != 3 or sum(sizes) == 0:
            return
        cell = self.settings.thumbnail_size + 12 + 2 * self.results.spacing()  # ResultDelegate.sizeHint's width
        need = GRID_COLUMNS * cell + 24  # + the scroll bar and frame
        if sizes[1] >= need:
            library = self.library.sizeHint().width()
            if self._library_collapsed and sizes[0] == 0 and sizes[1] - library >= need:  # wide again
                self._library_collapsed = False
                self.splitter.setSizes([library, sizes[1] - library, sizes[2]])
            return
        total = sum(sizes)
        self._library_collapsed = self._library_collapsed or sizes[0] > 0
        sizes[0] = 0
        deficit = need - (total - sizes[2])
        right_min = self.right_splitter.minimumSizeHint().width()
        sizes[2] -= max(0, min(sizes[2] - right_min, deficit))
        sizes[1] = total - sizes[0] - sizes[2]
        self.splitter.setSizes(sizes)

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_state()
        self.shutdown()
        super().closeEvent(event)

