"""The window's searches: a query (or a listing of the library) run into the results grid page by page, the
header that says what it found, and the verdicts and "Find similar" that act on its results.

The window passes in the widgets a search drives (the search and browse bars, the grid and its model, the
inspector and annotation panel, the header label) and the status line it speaks on; :class:`app.search.SearchSession`
holds the query itself and the service it runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QThreadPool
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QLabel, QStatusBar

from app.heldsearch import HeldSearch
from app.search import BrowseOptions, SearchSession
from app.settings import GuiSettings
from app.state import LibraryState
from app.tasks import off_thread, start
from app.widgets.annotate import AnnotationPanel
from app.widgets.browsebar import BrowseBar
from app.widgets.images import read_image
from app.widgets.inspector import Inspector
from app.widgets.plaintext import plain_tooltip
from app.widgets.results import ResultsView
from app.widgets.resultsmodel import ResultsModel
from app.widgets.searchbar import SearchBar
from engine.types import SearchHit

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace


class WindowSearch(QObject):
    """Runs ``session``'s searches into ``results_model``; ``owner`` (the window) is what an example picture's
    thumbnail job reports back to."""

    def __init__(self, owner: QObject, session: SearchSession, settings: GuiSettings, pool: QThreadPool,
                 state: LibraryState, *, search_bar: SearchBar, browse_bar: BrowseBar, results: ResultsView,
                 results_model: ResultsModel, inspector: Inspector, annotate: AnnotationPanel, header: QLabel,
                 status: Callable[[str], None], status_bar: Callable[[], QStatusBar]) -> None:
        super().__init__(owner)
        self._owner, self.session, self._settings, self._pool, self._state = owner, session, settings, pool, state
        self._search_bar, self._browse_bar, self._results, self._model = search_bar, browse_bar, results, results_model
        self._inspector, self._annotate, self._header = inspector, annotate, header
        self._status, self._status_bar = status, status_bar
        self.held: HeldSearch  # set by the window once it is built (it runs a held query through the window)
        self._keep_media: int | None = None  # the item to select again when a re-run's first page arrives
        self._searched = False  # example queries are offered until the first search
        self._no_good_match = ""  # the status bar's last "No good match" (taken back by a search with a good one)

    def search(self, query: str | Path | None, keep: int | None = None, rerun: bool = False) -> None:
        """Run a text or example-file search (None: list the library); the grid fills page by page. ``keep``: the
        media id to select again when the first page holds it; ``rerun``: the same query again, in place."""
        self.session.set_query(query)
        self.session.min_probability = self._search_bar.min_probability
        if query is not None:
            self._searched = True
        self._browse_bar.set_browsing(self.session.browsing, show_examples=not self._searched)
        self._keep_media = keep
        if keep is None:  # a re-run leaves the item on show (and a caption being typed) alone
            self._inspector.show_hit(None, None)
            self._annotate.set_item(None, None)
        fetch = None if self.held.hold(query) else self.session.page_fetcher()
        text = self.session.query if isinstance(self.session.query, str) else None
        service = self.session.service
        states = (lambda ids: service.annotations.states(ids, text)) if service is not None else None
        self._model.searched = self.session.searched(self._state.snapshot.indexed)
        self._model.set_fetch(fetch, scored=not self.session.browsing, states=states,
                                     hide_rejected=text is not None, count=self.session.listing_counter(),
                                     keep_rows=rerun)
        self._header.setToolTip(plain_tooltip(self.session.full_query()))  # the header shows it on one line
        if fetch is not None and not self._model.replacing:
            verb = "Listing" if self.session.browsing else "Searching"
            self._header.setText(f"{verb} {self.session.describe()}…")
        elif self.held.query is not None:
            self.rows_changed()
        if isinstance(query, Path):
            self._read_left_out(query)
            if keep is None:
                self._load_example_picture(query)

    def _read_left_out(self, path: Path) -> None:
        """Learn whether the example is one of the library's items, which its search leaves out: its places then
        count the items it ranked ("ranked 1st of 11 items" under "11 results like …")."""
        service = self.session.service
        if service is not None:
            start(self._set_left_out(service, path))

    async def _set_left_out(self, service: Workspace, path: Path) -> None:
        try:  # a catalog read: not on the GUI thread
            left_out = await off_thread(self._owner, service.search.leaves_out, path, pool=self._pool, priority=10)
        except Exception:  # noqa: BLE001 - the places go on without a count
            return
        if self.session.service is service and self.session.query == path:  # not another search's since
            self.session.left_out = int(left_out)
            self._model.set_searched(self.session.searched(self._state.snapshot.indexed))

    def _load_example_picture(self, path: Path) -> None:
        """Show the example a search is made by (its thumbnail, made off the GUI thread like the results')."""
        service = self.session.service
        if service is not None:
            start(self._show_example_picture(service, path))

    async def _show_example_picture(self, service: Workspace, path: Path) -> None:
        def load() -> QImage:
            return read_image(service.library.file_thumbnail(path, 128))

        try:
            image: QImage | None = await off_thread(self._owner, load, pool=self._pool, priority=9)
        except Exception:  # noqa: BLE001 - the search goes on without the picture
            image = None
        self._search_bar.set_example_picture(path, image)

    def browse_options_changed(self, options: BrowseOptions) -> None:
        old, self.session.browse = self.session.browse, options
        self._settings.browse_sort = options.sort  # the next start lists the library the same way
        narrowed = (old.kind, old.folder) != (options.kind, options.folder)
        if self.session.browsing or narrowed:  # kind and folder narrow a search too
            self.search(self.session.query)

    def search_example_query(self, text: str) -> None:
        self._search_bar.edit.setText(text)
        self._search_bar.submit()
        self._search_bar.edit.setFocus()

    def cutoff_changed(self, cutoff: float | None) -> None:
        self._settings.cutoff_percent = self._search_bar.cutoff.value()
        if isinstance(self.session.query, str) and cutoff != self.session.min_probability:
            self.search(self.session.query)

    def page_loaded(self, added: int) -> None:
        total = self._model.rowCount()
        self._header.setText(self._summary(total))
        if self._model.pages_loaded != 1:
            return
        self._say_no_good_match(total)
        keep, self._keep_media = self._keep_media, None
        kept = self._model.row_of(keep) if keep is not None else None
        if kept is not None:
            self._results.select_row(kept)
        elif total and not self._results.currentIndex().isValid() and keep is None:
            self._results.select_row(0)

    def judge(self, label: int) -> None:
        """Accept (+1) / reject (-1) the selected results for the query: several at once, or the current one."""
        selected = self._results.selected_hits()
        if len(selected) > 1:
            self._annotate.judge_many([hit.media_id for hit in selected], label)
        else:
            self._annotate.judge(label)

    def verdict_changed(self, media_id: int, label: int, query: str) -> None:
        """A rejected item leaves the results of its query; undoing the verdict brings it back."""
        if self.session.query != query:
            return
        if label < 0:
            current = self._results.current_hit()
            row = self._model.row_of(media_id)
            self._model.drop(media_id)
            if row is not None and current is not None and current.media_id == media_id:
                self._results.select_row(row)  # the next result takes its place, and is the one selected
            return
        row = self._model.restore(media_id)
        if row is not None:
            self._results.select_row(row)
        else:
            self._model.refresh_states([media_id])

    def find_similar(self, hit: SearchHit | None = None) -> None:
        """Search by the current (or given) result as an example."""
        hit = hit or self._results.current_hit()
        if hit is None:
            self._status("Select a result first: Find similar searches by it.")
            return
        self._search_bar.search_example(Path(hit.path))

    def rows_changed(self) -> None:
        if not self._model.is_loading:
            self._header.setText(self._summary(self._model.rowCount()))

    def _summary(self, total: int) -> str:
        if self.held.query is not None:
            return self.held.describe(self.session.describe())
        best = self._model.hit(0) if total else None
        return self.session.summary(total, more=self._model.canFetchMore(), busy=self._state.activity,
                                    best=best)

    def search_failed(self, message: str) -> None:
        """A search that failed because a first start is still preparing the assets waits for them instead."""
        if self.held.hold(self.session.query):
            self.rows_changed()
        else:
            self._status(f"Search failed: {message}")

    def _say_no_good_match(self, total: int) -> None:
        """The status bar repeats a search's "No good match" (a search with a good one takes it back)."""
        if self.session.no_good_match(self._model.hit(0) if total else None):
            self._no_good_match = self._summary(total)
            self._status(self._no_good_match)
        elif self._no_good_match and self._status_bar().currentMessage() == self._no_good_match:
            self._status_bar().clearMessage()
