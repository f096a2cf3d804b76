"""The results' list model: search hits or the library's listing, a page at a time, with what the user wrote
about each item (its annotation state). Pages and states are read off the GUI thread; thumbnails come from
:class:`app.widgets.images.ThumbnailCache`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QMimeData,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QThreadPool,
    QUrl,
    Signal,
)
from PySide6.QtGui import QPixmap

from app.widgets.hittext import Relevance, hit_tooltip, relevance
from app.widgets.images import ThumbnailCache
from app.workers import run_in_background, while_alive
from engine.types import SearchHit

log = logging.getLogger(__name__)

HIT_ROLE = Qt.ItemDataRole.UserRole + 1
RELEVANCE_ROLE = Qt.ItemDataRole.UserRole + 2  # Relevance | None (None: browsing, no scores)
STATE_ROLE = Qt.ItemDataRole.UserRole + 3  # engine.library.browse.AnnotationState | None (None: not known yet)
PageFetch = Callable[[int, int], list[SearchHit]]  # (offset, top) -> one page of hits
ListingCount = Callable[[], int]  # how many hits a listing's pages hold in all
StatesFetch = Callable[[list[int]], dict[int, Any]]  # media ids -> AnnotationState


class ResultsModel(QAbstractListModel):
    """Search hits or the library's listing, one page at a time.

    A search grows when the view scrolls to its end (``canFetchMore``/``fetchMore``): its length is known only
    when its pages run out. A listing (browsing, ``set_fetch(..., count=...)``) is counted first, so all its
    rows exist from the start, empty until the page that holds them is fetched, which happens when one of them
    is first painted. Scrolling a listing never inserts rows: a ``QListView`` lays every row out again after
    each insert, asking this Python model about each one, which is far too slow per page at 100,000 rows.
    A listing holds the hits (and annotation states) of the ``KEPT_PAGES`` pages painted last: the rest go
    back to empty rows, fetched again if they are painted again, so what a long scroll leaves alive (and what
    each of Python's full garbage collections walks) stays bounded, however big the library.
    """

    page_loaded = Signal(int)  # hits added by the page that just arrived
    rows_filled = Signal(int, int)  # a listing's page arrived: its first and last row now hold their hits
    search_failed = Signal(str)
    WANTED_PAGES = 16  # a listing fetches the pages painted last; older wishes (scrolled past) are forgotten
    KEPT_PAGES = 50  # a listing's fetched pages kept (3,000 rows at the default page size)

    def __init__(self, cache: ThumbnailCache, pool: QThreadPool, page_size: int = 60,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._cache, self._pool, self.page_size = cache, pool, page_size
        self._hits: list[SearchHit | None] = []  # None: a listing's row whose page is not fetched yet
        self._rows: dict[int, int] = {}  # media id -> row
        self._fetch: PageFetch | None = None
        self._count: ListingCount | None = None  # set: a listing, every row up front
        self._wanted: OrderedDict[int, None] = OrderedDict()  # a listing's pages to fetch, latest wish last
        self._fetching: int | None = None  # the listing's page being fetched
        self._kept: OrderedDict[int, None] = OrderedDict()  # a listing's fetched pages, least recently painted first
        self._painted_page = -1  # the page of the row last painted (most rows painted follow one another)
        self._pinned_page = -1  # the page of the view's current row: never let go
        self.pages_loaded = 0
        self._generation = 0  # replies from an older search are dropped
        self._loading = False
        self._exhausted = True
        self._hover: tuple[int, QPixmap] | None = None
        self._scored = True  # False while browsing: the hits carry no scores
        self._states_fetch: StatesFetch | None = None
        self._states: dict[int, Any] = {}  # media id -> AnnotationState
        self._hide_rejected = False
        self._dropped: dict[int, tuple[int, SearchHit]] = {}  # rejected for this query: media id -> (row, hit)
        self.searched: int | None = None  # how many items a search ranks (its place says "of N"); None: unknown
        self.replacing = False  # a re-run's first page is on its way while the old rows stay (set_fetch keep_rows)
        cache.thumbnail_ready.connect(self._media_changed)

    # --- searching
    def set_fetch(self, fetch: PageFetch | None, scored: bool = True, states: StatesFetch | None = None,
                  hide_rejected: bool = False, count: ListingCount | None = None, keep_rows: bool = False,
                  first: tuple[int, list[SearchHit]] | None = None) -> None:
        """Start a new search: clear, then load the first page of ``fetch(offset, top)``.

        ``scored`` False: browsing (no relevance shown). ``states(ids)`` gives the annotation state of the
        items each page brings (badges); with ``hide_rejected`` the items rejected for the query are dropped.
        ``count()``: how many hits all the pages hold; with it the results are a listing (see the class).
        ``keep_rows``: a re-run of what is shown (the library changed under it): the rows on show stay until the
        new first page is there, then change in one go, never an empty grid between (#44). ``first``: that
        first page, ``(count, hits)``, already read.
        """
        if keep_rows and fetch is not None and self._hits:
            self._replace(fetch, scored, states, hide_rejected, count)
            return
        self.beginResetModel()
        self._hits, self._rows = [], {}
        self._generation += 1
        self._fetch, self._count = fetch, count if fetch is not None and not hide_rejected else None
        self._wanted, self._fetching, self.pages_loaded = OrderedDict(), None, 0
        self._kept, self._painted_page, self._pinned_page = OrderedDict(), -1, -1
        self._loading, self._exhausted = False, fetch is None
        self._scored = scored
        self._states_fetch, self._states, self._hide_rejected, self._dropped = states, {}, hide_rejected, {}
        self.endResetModel()
        if first is not None:  # a re-run's first page, read while the old rows stayed (_replace)
            if self._count is not None:
                self._start_listing(self._generation, *first)
            else:
                self._append(self._generation, first[1])
        elif self._count is not None:
            self._load_listing()
        elif fetch is not None:
            self._load_page()
        self.replacing = False

    def _replace(self, fetch: PageFetch, scored: bool, states: StatesFetch | None, hide_rejected: bool,
                 count: ListingCount | None) -> None:
        """Read the new first page (and count) while the old rows stay on show; then :meth:`set_fetch` with it."""
        self._generation += 1  # the old search's late pages are dropped
        generation, top, counted = self._generation, self.page_size, None if hide_rejected else count  # as _count
        self._loading, self._wanted, self.replacing = True, OrderedDict(), True

        def first_page() -> tuple[int, list[SearchHit]]:
            return (counted() if counted is not None else 0), fetch(0, top)

        def arrived(first: tuple[int, list[SearchHit]]) -> None:
            if generation == self._generation:
                self.set_fetch(fetch, scored, states, hide_rejected, count, first=first)

        def failed(exc: BaseException) -> None:
            self.replacing = False
            self._failed(generation, exc)
        run_in_background(first_page, pool=self._pool, priority=10, on_result=while_alive(self, arrived),
                          on_error=while_alive(self, failed))

    @property
    def is_loading(self) -> bool:
        """A page is on its way (or a listing has pages still to fetch for the rows painted)."""
        return self._loading or self._fetching is not None or bool(self._wanted)

    @property
    def is_listing(self) -> bool:
        """The rows are a counted listing, all there from the start (see the class)."""
        return self._count is not None

    def _load_page(self) -> None:
        fetch, generation, offset, top = self._fetch, self._generation, len(self._hits), self.page_size
        if fetch is None:
            return
        self._loading = True
        run_in_background(
            fetch, offset, top, pool=self._pool, priority=10,
            on_result=while_alive(self, lambda hits: self._append(generation, hits)),
            on_error=while_alive(self, lambda exc: self._failed(generation, exc)),
        )

    def _append(self, generation: int, hits: list[SearchHit]) -> None:
        if generation != self._generation:
            return
        self._loading = False
        self.pages_loaded += 1
        self._exhausted = len(hits) < self.page_size
        fresh = [h for h in hits if h.media_id not in self._rows and h.media_id not in self._dropped]
        if fresh:
            start = len(self._hits)
            self.beginInsertRows(QModelIndex(), start, start + len(fresh) - 1)
            for row, hit in enumerate(fresh, start=start):
                self._rows[hit.media_id] = row
                self._hits.append(hit)
            self.endInsertRows()
            self.refresh_states([h.media_id for h in fresh])
        elif hits:
            self._exhausted = True  # a page of only repeats: nothing new will come
        self.page_loaded.emit(len(fresh))

    # --- a listing: counted first, then its pages fetched for the rows painted
    def _load_listing(self) -> None:
        fetch, count, generation, top = self._fetch, self._count, self._generation, self.page_size
        if fetch is None or count is None:
            return

        def first_page() -> tuple[int, list[SearchHit]]:
            return count(), fetch(0, top)
        self._loading = True
        run_in_background(
            first_page, pool=self._pool, priority=10,
            on_result=while_alive(self, lambda result: self._start_listing(generation, *result)),
            on_error=while_alive(self, lambda exc: self._failed(generation, exc)),
        )

    def _start_listing(self, generation: int, total: int, hits: list[SearchHit]) -> None:
        if generation != self._generation:
            return
        self._loading, self._exhausted = False, True
        self.pages_loaded += 1
        total = len(hits) if len(hits) < self.page_size else max(total, len(hits))
        if total:
            self.beginInsertRows(QModelIndex(), 0, total - 1)
            self._hits = [*hits, *[None] * (total - len(hits))]
            self._rows = {hit.media_id: row for row, hit in enumerate(hits)}
            self.endInsertRows()
            self._keep(0)
            self.refresh_states([h.media_id for h in hits])
        self.page_loaded.emit(len(hits))

    def _want(self, page: int) -> None:
        """A row of ``page`` is being painted: fetch it soon (the latest wish first)."""
        if page == self._fetching or self._loading:
            return
        self._wanted[page] = None
        self._wanted.move_to_end(page)
        while len(self._wanted) > self.WANTED_PAGES:
            self._wanted.popitem(last=False)
        self._fetch_wanted()

    def _fetch_wanted(self) -> None:
        fetch, generation, size = self._fetch, self._generation, self.page_size
        if fetch is None or self._fetching is not None or not self._wanted:
            return
        page, _ = self._wanted.popitem(last=True)
        self._fetching = page
        run_in_background(
            fetch, page * size, size, pool=self._pool, priority=10,
            on_result=while_alive(self, lambda hits: self._fill(generation, page, hits)),
            on_error=while_alive(self, lambda exc: self._fill_failed(generation, page, exc)),
        )

    def _fill(self, generation: int, page: int, hits: list[SearchHit]) -> None:
        if generation != self._generation:
            return
        self._fetching = None
        first = page * self.page_size
        hits = hits[:max(0, len(self._hits) - first)]
        end = first + len(hits)
        for row, hit in enumerate(hits, start=first):
            self._hits[row] = hit
            self._rows[hit.media_id] = row
        if len(hits) < self.page_size and end < len(self._hits):  # the listing shrank since it was counted
            self.beginRemoveRows(QModelIndex(), end, len(self._hits) - 1)
            del self._hits[end:]
            self._rows = {m: r for m, r in self._rows.items() if r < end}
            self.endRemoveRows()
        self.pages_loaded += 1
        if hits:
            self._keep(page)
            self.dataChanged.emit(self.index(first), self.index(end - 1))
            self.rows_filled.emit(first, end - 1)
            self.refresh_states([h.media_id for h in hits])
        self.page_loaded.emit(len(hits))
        self._fetch_wanted()

    def _keep(self, page: int) -> None:
        """``page`` was fetched or painted: keep it, and let go of the pages painted longest ago."""
        self._kept[page] = None
        self._kept.move_to_end(page)
        while len(self._kept) > self.KEPT_PAGES:
            old, _ = self._kept.popitem(last=False)
            if old == self._pinned_page:
                self._kept[old] = None  # the current row's: painted or not, it stays
                continue
            first = old * self.page_size
            for row in range(first, min(first + self.page_size, len(self._hits))):
                hit = self._hits[row]
                if hit is not None:
                    self._rows.pop(hit.media_id, None)
                    self._states.pop(hit.media_id, None)
                    self._hits[row] = None

    def pin_row(self, row: int) -> None:
        """The view's current row: its page is kept while it is current (see :meth:`_keep`)."""
        self._pinned_page = row // self.page_size if row >= 0 else -1

    def _fill_failed(self, generation: int, page: int, exc: BaseException) -> None:
        if generation != self._generation:
            return
        self._fetching = None
        log.warning("listing page %d: %s", page, exc)  # its rows ask again when they are painted again
        self._fetch_wanted()

    # --- annotation states (badges; items rejected for the query drop out)
    def refresh_states(self, media_ids: list[int]) -> None:
        """Ask (off the GUI thread) what the user wrote about ``media_ids``; badges follow."""
        fetch, generation = self._states_fetch, self._generation
        if fetch is None or not media_ids:
            return
        run_in_background(fetch, list(media_ids), pool=self._pool, priority=4,
                          on_result=while_alive(self, lambda states: self._set_states(generation, states)),
                          on_error=lambda exc: log.warning("annotation states: %s", exc))

    def _set_states(self, generation: int, states: dict[int, Any]) -> None:
        if generation != self._generation:
            return
        if self.is_listing:  # not the rows let go of meanwhile
            states = {media_id: state for media_id, state in states.items() if media_id in self._rows}
        self._states.update(states)
        for media_id, state in states.items():
            if self._hide_rejected and state.judgement < 0:
                self.drop(media_id)
            else:
                self._media_changed(media_id, [STATE_ROLE, Qt.ItemDataRole.ToolTipRole])

    def set_searched(self, searched: int | None) -> None:
        """How many items the search ranks, learnt after its pages (the library's count is read off the GUI
        thread): every shown place then says "of N"."""
        if searched == self.searched:
            return
        self.searched = searched
        if self.rowCount():
            self.dataChanged.emit(self.index(0), self.index(self.rowCount() - 1), [RELEVANCE_ROLE])

    def refresh_loaded_states(self) -> None:
        """Read again what the user wrote about every item the results hold (the annotations changed)."""
        self.refresh_states([hit.media_id for hit in self._hits if hit is not None])

    def state(self, media_id: int) -> Any:
        return self._states.get(media_id)

    def drop(self, media_id: int) -> None:
        """Take an item out of the results (rejected for this query); :meth:`restore` puts it back."""
        row = self._rows.get(media_id)
        if row is None or self.is_listing:  # a listing shows every item (a verdict belongs to a query)
            return
        self.beginRemoveRows(QModelIndex(), row, row)
        self._dropped[media_id] = (row, self._hits.pop(row))
        self._rows = {h.media_id: r for r, h in enumerate(self._hits)}
        self.endRemoveRows()

    def restore(self, media_id: int) -> int | None:
        """Put a dropped item back where it was (its verdict was undone); returns its row."""
        if media_id not in self._dropped or self.is_listing:
            return None
        row, hit = self._dropped.pop(media_id)
        row = min(row, len(self._hits))
        self.beginInsertRows(QModelIndex(), row, row)
        self._hits.insert(row, hit)
        self._rows = {h.media_id: r for r, h in enumerate(self._hits)}
        self.endInsertRows()
        self.refresh_states([media_id])
        return row

    def _failed(self, generation: int, exc: BaseException) -> None:
        if generation == self._generation:
            self._loading, self._exhausted = False, True
            self.search_failed.emit(str(exc))

    def canFetchMore(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> bool:  # noqa: B008
        return not parent.isValid() and self._fetch is not None and not self._loading and not self._exhausted

    def fetchMore(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> None:  # noqa: B008
        if self.canFetchMore(parent):
            self._load_page()

    # --- rows
    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._hits)

    def hit(self, row: int) -> SearchHit | None:
        """The hit of ``row`` (None: a listing's row whose page is still on its way)."""
        return self._hits[row]

    def row_of(self, media_id: int) -> int | None:
        return self._rows.get(media_id)

    def data(self, index: QModelIndex | QPersistentModelIndex,
             role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._hits):
            return None
        hit = self._hits[index.row()]
        if hit is None:
            self._want(index.row() // self.page_size)
            return None
        if self._count is not None and index.row() // self.page_size != self._painted_page:
            self._painted_page = index.row() // self.page_size
            self._keep(self._painted_page)
        if role == Qt.ItemDataRole.DisplayRole:
            return Path(hit.path).name
        if role == Qt.ItemDataRole.DecorationRole:
            if self._hover is not None and self._hover[0] == hit.media_id:
                return self._hover[1]
            return self._cache.thumbnail(hit.media_id)
        if role == Qt.ItemDataRole.ToolTipRole:
            return hit_tooltip(hit, self._relevance(hit), self._states.get(hit.media_id))
        if role == HIT_ROLE:
            return hit
        if role == RELEVANCE_ROLE:
            return self._relevance(hit)
        if role == STATE_ROLE:
            return self._states.get(hit.media_id)
        return None

    def _relevance(self, hit: SearchHit) -> Relevance | None:
        if not self._scored:
            return None
        row = self._rows.get(hit.media_id)
        return relevance(hit, row + 1 if row is not None else None, self.searched)

    def set_captions(self, media_id: int, captions: tuple[str, ...]) -> None:
        """Keep a hit's captions current after the user edits them."""
        row = self._rows.get(media_id)
        if row is not None:
            self._hits[row] = replace(self._hits[row], captions=captions)
            self._media_changed(media_id)
            self.refresh_states([media_id])

    def set_hover_frame(self, media_id: int | None, frame: QPixmap | None) -> None:
        """Show ``frame`` instead of the thumbnail of ``media_id`` (None: back to thumbnails)."""
        previous = self._hover[0] if self._hover else None
        self._hover = (media_id, frame) if media_id is not None and frame is not None else None
        for changed in {previous, media_id} - {None}:
            self._media_changed(changed)

    # --- dragging results out to other applications (a file manager, a mail, an editor)
    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        flags = super().flags(index)
        if index.isValid() and 0 <= index.row() < len(self._hits) and self._hits[index.row()] is not None:
            flags |= Qt.ItemFlag.ItemIsDragEnabled
        return flags

    def mimeTypes(self) -> list[str]:
        return ["text/uri-list", "text/plain"]

    def supportedDragActions(self) -> Qt.DropAction:
        return Qt.DropAction.CopyAction | Qt.DropAction.LinkAction  # never Move: the file stays in the library

    def mimeData(self, indexes: list[QModelIndex]) -> QMimeData:  # type: ignore[override]
        """The dragged items' files as ``file://`` URLs (and their paths as text, for a terminal or an editor)."""
        rows = sorted({index.row() for index in indexes if index.isValid()})
        paths = [Path(hit.path) for hit in (self._hits[row] for row in rows) if hit is not None]
        mime = QMimeData()
        mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
        mime.setText("\n".join(str(path) for path in paths))
        return mime

    def _media_changed(self, media_id: int, roles: list[int] | None = None) -> None:
        row = self._rows.get(media_id)
        if row is not None:
            index = self.index(row)
            self.dataChanged.emit(index, index, roles or [Qt.ItemDataRole.DecorationRole])

