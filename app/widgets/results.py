"""The results grid: a list model of search hits, lazily loaded thumbnails, hover previews, infinite scroll.

Nothing here decodes media: thumbnails and preview frames are files the service writes (slow the first
time), so they are asked for on worker threads, read into ``QImage`` there, and turned into pixmaps on the
GUI thread.
"""

from __future__ import annotations

import html
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QEvent,
    QItemSelectionModel,
    QMimeData,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    QThreadPool,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QColor,
    QContextMenuEvent,
    QDesktopServices,
    QDrag,
    QFont,
    QGuiApplication,
    QImage,
    QKeyEvent,
    QPainter,
    QPalette,
    QPixmap,
)
from PySide6.QtWidgets import (
    QListView,
    QMenu,
    QMessageBox,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from app.service_api import SearchServiceLike
from app.workers import Worker, run_in_background, while_alive
from engine.types import MediaKind, SearchHit

log = logging.getLogger(__name__)

HIT_ROLE = Qt.ItemDataRole.UserRole + 1
RELEVANCE_ROLE = Qt.ItemDataRole.UserRole + 2  # Relevance | None (None: browsing, no scores)
STATE_ROLE = Qt.ItemDataRole.UserRole + 3  # engine.library.browse.AnnotationState | None (None: not known yet)
PageFetch = Callable[[int, int], list[SearchHit]]  # (offset, top) -> one page of hits
ListingCount = Callable[[], int]  # how many hits a listing's pages hold in all
StatesFetch = Callable[[list[int]], dict[int, Any]]  # media ids -> AnnotationState
# Relevance bands, on the search's own score range (see relevance()): at least this share of the way up
BANDS = ((0.75, 3, "strong match"), (0.4, 2, "good match"), (0.0, 1, "weak match"))


class ThumbnailError(Exception):
    """A thumbnail or preview frame file could not be read."""


def read_image(path: Path) -> QImage:
    """Read an image file into a ``QImage`` (safe on any thread, unlike ``QPixmap``)."""
    image = QImage(str(path))
    if image.isNull():
        raise ThumbnailError(f"cannot read image {path}")
    return image


class ThumbnailCache(QObject):
    """Thumbnails and hover-preview frames by media id, loaded on demand off the GUI thread, LRU-bounded."""

    thumbnail_ready = Signal(int)
    frames_ready = Signal(int)

    def __init__(self, pool: QThreadPool, size: int = 256, capacity: int = 600,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool, self.size, self._capacity = pool, size, capacity
        self._service: SearchServiceLike | None = None
        self._thumbs: OrderedDict[int, QPixmap | None] = OrderedDict()  # None: failed, do not retry
        self._frames: OrderedDict[int, list[QPixmap]] = OrderedDict()
        self._pending: set[tuple[str, int]] = set()

    def set_service(self, service: SearchServiceLike | None) -> None:
        """Forget everything cached: ids belong to the previous library."""
        self._service = service
        self._thumbs.clear()
        self._frames.clear()
        self._pending.clear()

    @property
    def service(self) -> SearchServiceLike | None:
        """The library whose thumbnails this caches (the viewer asks it for an item's details too)."""
        return self._service

    def thumbnail(self, media_id: int) -> QPixmap | None:
        """The cached thumbnail, or None while it loads (``thumbnail_ready`` follows)."""
        if media_id in self._thumbs:
            self._thumbs.move_to_end(media_id)
            return self._thumbs[media_id]
        self._request("thumb", media_id)
        return None

    def frames(self, media_id: int) -> list[QPixmap] | None:
        """The cached preview frames, or None while they load (``frames_ready`` follows)."""
        if media_id in self._frames:
            self._frames.move_to_end(media_id)
            return self._frames[media_id]
        self._request("frames", media_id)
        return None

    def _request(self, what: str, media_id: int) -> None:
        service = self._service
        if service is None or (what, media_id) in self._pending:
            return
        self._pending.add((what, media_id))
        size = self.size
        if what == "thumb":
            def job() -> list[QImage]:
                return [read_image(service.thumbnail(media_id, size))]
        else:
            def job() -> list[QImage]:
                return [read_image(p) for p in service.preview_frames(media_id, 8)]
        from engine.media.errors import MediaError  # loaded with the service already; not at the window's start

        worker = Worker(job)
        # an unreadable file is reported once by _store, not as a traceback per request (a library with many of
        # them logged two tracebacks for each one scrolled past)
        worker.expected_errors = (ThumbnailError, MediaError, OSError)
        worker.signals.returned.connect(lambda images: self._store(service, what, media_id, images))
        worker.signals.errored.connect(lambda exc: self._store(service, what, media_id, None, exc))
        worker.start(self._pool, priority=0 if what == "thumb" else 1)

    def _store(self, service: Any, what: str, media_id: int, images: list[QImage] | None,
               exc: BaseException | None = None) -> None:
        if service is not self._service:  # a reply for a library no longer shown
            return
        self._pending.discard((what, media_id))
        if exc is not None:
            log.warning("no %s for media %d: %s", what, media_id, exc)
        pixmaps = [QPixmap.fromImage(image) for image in images or []]
        if what == "thumb":
            self._thumbs[media_id] = pixmaps[0] if pixmaps else None
            _trim(self._thumbs, self._capacity)
            self.thumbnail_ready.emit(media_id)
        else:
            self._frames[media_id] = pixmaps
            _trim(self._frames, max(8, self._capacity // 20))
            self.frames_ready.emit(media_id)


def _trim(cache: OrderedDict[int, Any], capacity: int) -> None:
    while len(cache) > capacity:
        cache.popitem(last=False)


@dataclass(frozen=True, slots=True)
class Relevance:
    """How well a result matches, in words a person reads: a label, 1-3 dots, and what it is based on."""

    label: str  # "73% match", "strong match"
    dots: int  # 1..3
    explanation: str  # the tooltip's sentence, with the raw number


# How far an item's fused score (a sum of z-scores over the library, engine/search/evidence.py) puts it from the
# library's typical item, in words: at least this many standard deviations above it.
STANDING = ((3.0, "it stands far out from the library's typical item"),
            (1.5, "it stands clearly above the library's typical item"),
            (0.5, "it is somewhat closer than the library's typical item"))


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n:,}{suffix}"


def standing(score: float) -> str:
    """Where a fused score puts an item among the library, in words (no raw number: it is a sum of z-scores)."""
    return next((words for floor, words in STANDING if score >= floor),
                "it is about as close as the library's typical item: a weak match")


def relevance(hit: SearchHit, scale: tuple[float, float] | None, rank: int | None = None,
              searched: int | None = None) -> Relevance:
    """A probabilistic model's match probability as a percentage; otherwise a band on this search's range, said
    as the item's place: its rank (of ``searched`` items when known) and how far it stands from the library's
    typical item.

    Raw scores are not comparable across models and mean nothing to a reader (a fused sum of z-scores), so the
    band places a score between the lowest and the highest of the search's first page (``scale``) and the words
    say the rank and the standing, never the number.
    """
    place = ""
    if rank is not None:
        place = f"ranked {ordinal(rank)}" + (f" of {searched:,} items" if searched else "") + " for this search"
    if hit.match_probability is not None:
        p = hit.match_probability
        dots = 3 if p >= 0.75 else 2 if p >= 0.4 else 1
        return Relevance(f"{p:.0%} match", dots, f"{place + ': ' if place else ''}the model estimates a {p:.0%} "
                                                 "probability that this item fits the query")
    lo, hi = scale if scale is not None else (hit.score, hit.score)
    share = 1.0 if hi <= lo else max(0.0, min(1.0, (hit.score - lo) / (hi - lo)))
    _, dots, label = next(band for band in BANDS if share >= band[0])
    return Relevance(label, dots, f"{place + '; ' if place else ''}{standing(hit.score)}")


# the window's actions the context menu offers too (they judge the selected results)
JUDGE_ACTIONS = ("&Accept match", "&Reject match")


def show_in_folder(path: Path, parent: QWidget | None = None) -> bool:
    """Open the file manager on the folder that holds ``path``; where none opens (no file manager, a bare
    session), say so and show where the file is, its path ready to copy. True when a file manager opened."""
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.parent))):
        return True
    box = QMessageBox(QMessageBox.Icon.Information, "Show in folder",
                      f"No file manager could be opened here. The file is:\n\n{path}\n\nin the folder:\n\n"
                      f"{path.parent}", QMessageBox.StandardButton.Ok, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    copy = box.addButton("Copy path", QMessageBox.ButtonRole.ActionRole)
    copy.clicked.disconnect()  # copying must not close the box
    copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(str(path)))
    _OPEN_NOTES.add(box)  # a box without a parent lives as long as Python holds it: until it is closed
    box.finished.connect(lambda _result: _OPEN_NOTES.discard(box))
    box.open()  # not modal to the whole app: the window keeps working
    return False


_OPEN_NOTES: set[QMessageBox] = set()


def hit_tooltip(hit: SearchHit, rank: Relevance | None = None, state: Any = None) -> str:
    """The hover text of a result; every user string is escaped (captions are never markup)."""
    name = html.escape(Path(hit.path).name)
    lines = [f"<b>{name}</b>", html.escape(str(hit.path)), html.escape(hit.kind.value)]
    if rank is not None:
        lines.append(f"<b>{html.escape(rank.label)}</b>: {html.escape(rank.explanation)}")
    if hit.uncertainty is not None:
        lines.append(f"uncertainty σ = {hit.uncertainty:.3f} (higher: the model finds this item more ambiguous)")
    if state is not None:
        lines += [html.escape(text) for text, _ in annotation_badges(state)]
        lines += [html.escape(text) for text in verdict_lines(state)]
    lines += [f"“{html.escape(c)}”" for c in hit.captions[:5]]
    if hit.guess:  # the model's own words about the item: said as such, never quoted like a caption
        lines.append(f"<i>model's guess (not a caption): {html.escape(hit.guess)}</i>")
    return "<p style='white-space:pre-wrap'>" + "<br>".join(lines) + "</p>"


VERDICT_INK = {True: QColor(20, 110, 45), False: QColor(170, 30, 30)}  # accepted / rejected, as text
BADGE_COLOURS = {"accepted": QColor(30, 140, 60, 220), "rejected": QColor(190, 40, 40, 220),
                 "captioned": QColor(40, 90, 170, 220), "imported": QColor(110, 80, 160, 220),
                 "guess": QColor(120, 120, 120, 200)}


def verdict_text(query: str, label: int) -> str:
    """One verdict in words: "✓ accepted for “a dog on a beach”"."""
    return f"{'✓ accepted' if label > 0 else '✗ rejected'} for “{query}”"


def verdict_lines(state: Any) -> list[str]:
    """Every query the item was accepted or rejected for (its latest verdict each), the most recent first."""
    return [verdict_text(query, label) for query, label in getattr(state, "verdicts", ())]


def browse_line(state: Any) -> str:
    """A browsed item's second line: the query it was last accepted or rejected for ("+2 more" when there are
    others), else whether a person captioned it (the model's guesses do not count)."""
    if state is None:
        return ""
    verdicts = getattr(state, "verdicts", ())
    if verdicts:
        more = f"  +{len(verdicts) - 1} more" if len(verdicts) > 1 else ""
        return verdict_text(*verdicts[0]) + more
    return "captioned" if state.captioned else "not captioned yet"


def compact_verdict(verdicts: Any, elide: Callable[[str, int], str], advance: Callable[[str], int],
                    width: int) -> str:
    """The latest verdict in ``width`` pixels: "✓ “a dog on a be…”  +1", the query shortened, the mark (its colour
    says accepted or rejected) and the count of the others kept."""
    query, label = verdicts[0]
    mark, more = ("✓ " if label > 0 else "✗ "), (f"  +{len(verdicts) - 1}" if len(verdicts) > 1 else "")
    room = width - advance(mark) - advance(more) - advance("”")
    quoted = elide(f"“{query}", room)
    return f"{mark}{quoted}”{more}"


# A badge's short form, for thumbnails too narrow for the words (the tooltip says them in full)
BADGE_SHORT = {"✓ accepted": "✓", "✗ rejected": "✗", "✎ captioned": "✎", "⇩ imported": "⇩", "model's guess": "guess"}
BADGE_PADDING, BADGE_GAP = 10, 4  # pixels around a badge's text, and between two badges


def fit_badges(labels: list[str], advance: Callable[[str], int], width: int) -> list[str]:
    """The badge texts that fit side by side in ``width`` pixels: in full when they all fit, else their short
    forms, else as many short ones as fit (a 120 px thumbnail cannot hold "✓ accepted" and "✎ captioned")."""
    def room(texts: list[str]) -> int:
        return sum(advance(t) + BADGE_PADDING + BADGE_GAP for t in texts)

    if room(labels) <= width:
        return labels
    short = [BADGE_SHORT.get(t, t) for t in labels]
    while short and room(short) > width:
        short.pop()
    return short


def annotation_badges(state: Any) -> list[tuple[str, QColor]]:
    """What a thumbnail's badges say about an ``AnnotationState``: its verdict, then its captions' origin."""
    badges = []
    if state.judgement > 0:
        badges.append(("✓ accepted", BADGE_COLOURS["accepted"]))
    elif state.judgement < 0:
        badges.append(("✗ rejected", BADGE_COLOURS["rejected"]))
    if "user" in state.sources:
        badges.append(("✎ captioned", BADGE_COLOURS["captioned"]))
    elif "imported" in state.sources:
        badges.append(("⇩ imported", BADGE_COLOURS["imported"]))
    elif "pseudo" in state.sources:
        badges.append(("model's guess", BADGE_COLOURS["guess"]))
    return badges


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
        self._scale: tuple[float, float] | None = None  # the first page's (lowest, best) score
        self._states_fetch: StatesFetch | None = None
        self._states: dict[int, Any] = {}  # media id -> AnnotationState
        self._hide_rejected = False
        self._dropped: dict[int, tuple[int, SearchHit]] = {}  # rejected for this query: media id -> (row, hit)
        self.searched: int | None = None  # how many items a search ranks (its place says "of N"); None: unknown
        cache.thumbnail_ready.connect(self._media_changed)

    # --- searching
    def set_fetch(self, fetch: PageFetch | None, scored: bool = True, states: StatesFetch | None = None,
                  hide_rejected: bool = False, count: ListingCount | None = None) -> None:
        """Start a new search: clear, then load the first page of ``fetch(offset, top)``.

        ``scored`` False: browsing (no relevance shown). ``states(ids)`` gives the annotation state of the
        items each page brings (badges); with ``hide_rejected`` the items rejected for the query are dropped.
        ``count()``: how many hits all the pages hold; with it the results are a listing (see the class).
        """
        self.beginResetModel()
        self._hits, self._rows = [], {}
        self._generation += 1
        self._fetch, self._count = fetch, count if fetch is not None and not hide_rejected else None
        self._wanted, self._fetching, self.pages_loaded = OrderedDict(), None, 0
        self._kept, self._painted_page, self._pinned_page = OrderedDict(), -1, -1
        self._loading, self._exhausted = False, fetch is None
        self._scored, self._scale = scored, None
        self._states_fetch, self._states, self._hide_rejected, self._dropped = states, {}, hide_rejected, {}
        self.endResetModel()
        if self._count is not None:
            self._load_listing()
        elif fetch is not None:
            self._load_page()

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
        if self._scored and self._scale is None and hits:
            self._scale = (min(h.score for h in hits), max(h.score for h in hits))
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
        return relevance(hit, self._scale, row + 1 if row is not None else None, self.searched)

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


class ResultDelegate(QStyledItemDelegate):
    """Paints one result: thumbnail, kind badge, uncertainty badge, file name and score."""

    def __init__(self, icon_size: int = 160, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.icon_size = icon_size

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        line = option.fontMetrics.height()
        return QSize(self.icon_size + 12, self.icon_size + 2 * line + 16)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        hit: SearchHit | None = index.data(HIT_ROLE)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        rect, palette = option.rect.adjusted(3, 3, -3, -3), option.palette
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        hovered = bool(option.state & QStyle.StateFlag.State_MouseOver)
        if selected or hovered:
            colour = palette.color(QPalette.ColorRole.Highlight)
            colour.setAlpha(255 if selected else 60)
            painter.setBrush(colour)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawRoundedRect(rect, 6, 6)
        icon_rect = QRect(rect.left() + 3, rect.top() + 3, rect.width() - 6, self.icon_size)
        if hit is None:  # a listing's row whose page is on its way: an empty frame where its picture goes
            self._paint_thumbnail(painter, icon_rect, None, palette)
            painter.restore()
            return
        self._paint_thumbnail(painter, icon_rect, index.data(Qt.ItemDataRole.DecorationRole), palette)
        self._paint_badges(painter, icon_rect, hit)
        state = index.data(STATE_ROLE)
        if state is not None:
            self._paint_state(painter, icon_rect, state)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        text_colour = palette.color(role)
        self._paint_text(painter, rect, icon_rect, hit, index.data(RELEVANCE_ROLE), state, text_colour)
        painter.restore()

    @staticmethod
    def _paint_thumbnail(painter: QPainter, rect: QRect, pixmap: QPixmap | None, palette: QPalette) -> None:
        if pixmap is None or pixmap.isNull():
            painter.setBrush(palette.color(QPalette.ColorRole.AlternateBase))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawRoundedRect(rect.adjusted(8, 8, -8, -8), 4, 4)
            return
        scaled = pixmap.scaled(rect.size(), Qt.AspectRatioMode.KeepAspectRatio,
                               Qt.TransformationMode.SmoothTransformation)
        x = rect.left() + (rect.width() - scaled.width()) // 2
        y = rect.top() + (rect.height() - scaled.height()) // 2
        painter.drawPixmap(x, y, scaled)

    def _paint_state(self, painter: QPainter, rect: QRect, state: Any) -> None:
        """Verdict and caption badges along the thumbnail's bottom edge, short forms where the words do not fit."""
        badges = annotation_badges(state)
        painter.setFont(self.badge_font(painter.font()))
        texts = fit_badges([text for text, _ in badges], painter.fontMetrics().horizontalAdvance, rect.width() - 8)
        x = rect.left() + 4
        for text, (_, colour) in zip(texts, badges, strict=False):
            x = self._badge(painter, rect, text, colour, right=False, left=x, bottom=True) + BADGE_GAP

    @staticmethod
    def badge_font(base: QFont) -> QFont:
        """The badges' font: bold, a little smaller than the text's."""
        font = QFont(base)
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.8))
        font.setBold(True)
        return font

    @staticmethod
    def _badge(painter: QPainter, rect: QRect, text: str, background: QColor, right: bool,
               left: int | None = None, bottom: bool = False) -> int:
        """Paint a rounded label in a corner of ``rect`` (or at ``left``); returns its right edge."""
        painter.setFont(ResultDelegate.badge_font(QFont(painter.font().family())))
        width = painter.fontMetrics().horizontalAdvance(text) + BADGE_PADDING
        height = painter.fontMetrics().height() + 2
        x = rect.right() - width - 4 if right else (left if left is not None else rect.left() + 4)
        y = rect.bottom() - height - 4 if bottom else rect.top() + 4
        badge = QRect(x, y, width, height)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(background)
        painter.drawRoundedRect(badge, 4, 4)
        painter.setPen(QColor("white"))
        painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, text)
        return badge.right()

    def _paint_badges(self, painter: QPainter, rect: QRect, hit: SearchHit) -> None:
        if hit.kind is not MediaKind.IMAGE:
            label = "GIF" if hit.kind is MediaKind.ANIMATION else "VIDEO"
            self._badge(painter, rect, label, QColor(30, 30, 30, 200), right=True)
        if hit.uncertainty is not None:
            # Red grows with sigma; the badge is a cue to open the inspector, not a calibrated scale.
            level = max(0.0, min(1.0, hit.uncertainty))
            colour = QColor.fromHsvF((1 - level) * 0.33, 0.8, 0.75, 0.9)
            self._badge(painter, rect, f"σ {hit.uncertainty:.2f}", colour, right=False)

    @staticmethod
    def _paint_text(painter: QPainter, rect: QRect, icon_rect: QRect, hit: SearchHit, rank: Relevance | None,
                    state: Any, colour: QColor) -> None:
        painter.setFont(QFont(painter.font().family()))
        metrics = painter.fontMetrics()
        line = metrics.height()
        name = metrics.elidedText(Path(hit.path).name, Qt.TextElideMode.ElideMiddle, rect.width() - 8)
        top = icon_rect.bottom() + 4
        painter.setPen(colour)
        centred = Qt.AlignmentFlag.AlignHCenter
        painter.drawText(QRect(rect.left() + 4, top, rect.width() - 8, line), centred, name)
        if rank is not None:
            second = "●" * rank.dots + "○" * (3 - rank.dots) + "  " + rank.label
        else:  # browsing: what the user wrote matters more than a score there is none of
            second = browse_line(state)
            verdicts = getattr(state, "verdicts", ())
            if verdicts and colour.lightness() < 128:  # dark text on a light cell: the verdict in its own colour
                painter.setPen(VERDICT_INK[verdicts[0][1] > 0])
            if verdicts and metrics.horizontalAdvance(second) > rect.width() - 8:
                second = compact_verdict(verdicts, lambda text, width: metrics.elidedText(
                    text, Qt.TextElideMode.ElideRight, width), metrics.horizontalAdvance, rect.width() - 8)
        second = metrics.elidedText(second, Qt.TextElideMode.ElideRight, rect.width() - 8)
        painter.drawText(QRect(rect.left() + 4, top + line, rect.width() - 8, line), centred, second)


class ResultsView(QListView):
    """An icon grid over a :class:`ResultsModel`; GIFs and videos play their preview frames on hover."""

    current_hit_changed = Signal(object)  # SearchHit | None
    find_similar_requested = Signal(object)  # SearchHit
    up_from_top = Signal()  # Up on the first row: back to the search box
    open_requested = Signal(object)  # SearchHit: show it large (the viewer)

    def __init__(self, model: ResultsModel, cache: ThumbnailCache, icon_size: int = 160,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._cache = cache
        self.setViewMode(QListView.ViewMode.IconMode)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setMovement(QListView.Movement.Static)
        self.setUniformItemSizes(True)
        self.setSpacing(4)
        self.setWordWrap(False)
        self.setMouseTracking(True)
        self.setSelectionMode(QListView.SelectionMode.ExtendedSelection)  # Shift / Ctrl pick several to judge
        # setMovement(Static) turned dragging off: items may not move in the grid, but may be dragged out
        self.setDragEnabled(True)
        self.setDragDropMode(QListView.DragDropMode.DragOnly)
        self.setDefaultDropAction(Qt.DropAction.CopyAction)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.DefaultContextMenu)
        self.activated.connect(lambda index: self.open_requested.emit(index.data(HIT_ROLE)))
        self.setItemDelegate(ResultDelegate(icon_size, self))
        self.setModel(model)
        model.modelReset.connect(self._choose_layout)
        model.rows_filled.connect(self._rows_filled)
        self.selectionModel().currentChanged.connect(self._current_changed)
        self.entered.connect(self._hover)
        self._hovered: int | None = None
        self._frame = 0
        self._anchor: QPersistentModelIndex | None = None  # the first row shown when a batched layout began
        self._timer = QTimer(self, interval=140)
        self._timer.timeout.connect(self._next_frame)
        cache.frames_ready.connect(self._frames_arrived)

    LISTING_BATCH = 2000  # rows laid out per event-loop pass in a listing (a few ms at any library size)

    def _choose_layout(self) -> None:
        """A listing's rows all arrive at once (100,000 of them, say): lay them out a batch per pass so the
        event loop keeps running; a search's pages come a few dozen at a time and lay out in one pass."""
        if self.results().is_listing:
            self.setLayoutMode(QListView.LayoutMode.Batched)
            self.setBatchSize(self.LISTING_BATCH)
        else:
            self.setLayoutMode(QListView.LayoutMode.SinglePass)

    def doItemsLayout(self) -> None:
        # A batched layout starts again from the first row, and until its last batch the scroll bar only
        # covers the rows laid out so far: remember where the user was, to come back there (updateGeometries).
        if self.layoutMode() is QListView.LayoutMode.Batched and self._anchor is None:
            top = self.first_row_shown()
            if top.isValid() and top.row() > 0:
                self._anchor = QPersistentModelIndex(top)
        super().doItemsLayout()

    def updateGeometries(self) -> None:
        super().updateGeometries()
        anchor, model = self._anchor, self.model()
        if anchor is None or model is None:
            return
        if not anchor.isValid():
            self._anchor = None
        elif not self.visualRect(model.index(model.rowCount() - 1, 0)).isEmpty():  # the last batch is done
            self._anchor = None
            self.scrollTo(model.index(anchor.row(), 0), QListView.ScrollHint.PositionAtTop)

    def first_row_shown(self) -> QModelIndex:
        """The first row at the top of the viewport (invalid when none is)."""
        x = self.spacing() + 8
        for y in range(0, self.viewport().height(), 8):  # past the gap between two rows of the grid
            index = self.indexAt(QPoint(x, y))
            if index.isValid():
                return index
        return QModelIndex()

    def _rows_filled(self, first: int, last: int) -> None:
        current = self.currentIndex()
        if current.isValid() and first <= current.row() <= last:  # the current row's hit has just arrived
            self.current_hit_changed.emit(current.data(HIT_ROLE))

    def set_icon_size(self, size: int) -> None:
        """Draw the results' pictures ``size`` pixels big (Preferences)."""
        delegate = self.itemDelegate()
        if isinstance(delegate, ResultDelegate) and delegate.icon_size != size:
            delegate.icon_size = size
            self.results().layoutChanged.emit()  # the grid re-measures its (uniform) cells

    def results(self) -> ResultsModel:
        model = self.model()
        assert isinstance(model, ResultsModel)
        return model

    def current_hit(self) -> SearchHit | None:
        index = self.currentIndex()
        return index.data(HIT_ROLE) if index.isValid() else None

    def selected_hits(self) -> list[SearchHit]:
        """The selected results in grid order."""
        rows = sorted(index.row() for index in self.selectionModel().selectedIndexes())
        hits = (self.results().hit(row) for row in rows)
        return [hit for hit in hits if hit is not None]  # a listing's rows still loading are not picked

    def keyPressEvent(self, event: QKeyEvent) -> None:
        current = self.currentIndex()
        up = QListView.CursorAction.MoveUp
        on_top = not current.isValid() or self.moveCursor(up, Qt.KeyboardModifier.NoModifier) == current
        if event.key() == Qt.Key.Key_Up and not event.modifiers() and on_top:
            self.up_from_top.emit()
            return
        super().keyPressEvent(event)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        index = self.indexAt(event.pos())
        hit: SearchHit | None = index.data(HIT_ROLE) if index.isValid() else None
        if hit is None:
            return
        if not self.selectionModel().isSelected(index):
            self.setCurrentIndex(index)
        menu = QMenu(self)
        menu.addAction("Open", lambda: self.open_requested.emit(hit))
        menu.addAction("Find similar", lambda: self.find_similar_requested.emit(hit))
        menu.addAction("Show in folder", lambda: show_in_folder(Path(hit.path), self))
        window = self.window()
        if window is not None:
            judge_actions = [a for a in window.findChildren(QAction) if a.text() in JUDGE_ACTIONS]
            if judge_actions:
                menu.addSeparator()
                for action in judge_actions:
                    menu.addAction(action)
        menu.exec(event.globalPos())

    def startDrag(self, supportedActions: Qt.DropAction) -> None:
        """Drag the selected results out as files, their first thumbnail under the pointer."""
        indexes = [i for i in self.selectionModel().selectedIndexes() if i.flags() & Qt.ItemFlag.ItemIsDragEnabled]
        if not indexes:
            return
        drag = QDrag(self)
        drag.setMimeData(self.results().mimeData(indexes))
        current = self.currentIndex() if self.currentIndex() in indexes else indexes[0]
        hit = current.data(HIT_ROLE)
        pixmap = self._cache.thumbnail(hit.media_id) if hit is not None else None
        if pixmap is not None and not pixmap.isNull():
            drag.setPixmap(pixmap.scaled(96, 96, Qt.AspectRatioMode.KeepAspectRatio,
                                         Qt.TransformationMode.SmoothTransformation))
        drag.exec(supportedActions & self.results().supportedDragActions(), Qt.DropAction.CopyAction)

    def _current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self.results().pin_row(current.row() if current.isValid() else -1)
        self.current_hit_changed.emit(current.data(HIT_ROLE) if current.isValid() else None)

    def select_row(self, row: int) -> None:
        """Make ``row`` current and selected, loading the next page when it is the last one."""
        model = self.results()
        if model.rowCount() == 0:
            return
        row = max(0, min(row, model.rowCount() - 1))
        index = model.index(row)
        flag = QItemSelectionModel.SelectionFlag.ClearAndSelect  # stepping drops a multi-selection
        self.selectionModel().setCurrentIndex(index, flag)
        self.scrollTo(index)
        if row == model.rowCount() - 1 and model.canFetchMore():
            model.fetchMore()

    def select_next(self) -> None:
        self.select_row(self.currentIndex().row() + 1 if self.currentIndex().isValid() else 0)

    def select_previous(self) -> None:
        self.select_row(self.currentIndex().row() - 1 if self.currentIndex().isValid() else 0)

    # --- hover previews
    def _hover(self, index: QModelIndex) -> None:
        hit: SearchHit | None = index.data(HIT_ROLE)
        media_id = hit.media_id if hit is not None and hit.kind is not MediaKind.IMAGE else None
        if media_id == self._hovered:
            return
        self._stop_hover()
        if media_id is not None:
            self._hovered, self._frame = media_id, 0
            if self._cache.frames(media_id) is not None:
                self._timer.start()

    def _frames_arrived(self, media_id: int) -> None:
        if media_id == self._hovered and not self._timer.isActive():
            self._timer.start()

    def _next_frame(self) -> None:
        frames = self._cache.frames(self._hovered) if self._hovered is not None else None
        if not frames:
            self._timer.stop()
            return
        self._frame = (self._frame + 1) % len(frames)
        self.results().set_hover_frame(self._hovered, frames[self._frame])

    def _stop_hover(self) -> None:
        self._timer.stop()
        if self._hovered is not None:
            self._hovered = None
            self.results().set_hover_frame(None, None)

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Leave:
            self._stop_hover()
        return super().viewportEvent(event)
