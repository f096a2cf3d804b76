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
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QRect,
    QSize,
    Qt,
    QThreadPool,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QListView, QStyle, QStyledItemDelegate, QStyleOptionViewItem, QWidget

from app.service_api import SearchServiceLike
from app.workers import Worker, run_in_background
from engine.types import MediaKind, SearchHit

log = logging.getLogger(__name__)

HIT_ROLE = Qt.ItemDataRole.UserRole + 1
PageFetch = Callable[[int, int], list[SearchHit]]  # (offset, top) -> one page of hits


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
        worker = Worker(job)
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


def hit_tooltip(hit: SearchHit) -> str:
    """The hover text of a result; every user string is escaped (captions are never markup)."""
    name = html.escape(Path(hit.path).name)
    lines = [f"<b>{name}</b>", html.escape(str(hit.path)), html.escape(hit.kind.value)]
    lines.append(score_text(hit))
    if hit.uncertainty is not None:
        lines.append(f"uncertainty σ = {hit.uncertainty:.3f}")
    lines += [f"“{html.escape(c)}”" for c in hit.captions[:5]]
    return "<p style='white-space:pre-wrap'>" + "<br>".join(lines) + "</p>"


def score_text(hit: SearchHit) -> str:
    """"p 0.73" for probabilistic models, "score 0.412" otherwise."""
    if hit.match_probability is not None:
        return f"p {hit.match_probability:.2f}"
    return f"score {hit.score:.3f}"


class ResultsModel(QAbstractListModel):
    """Search hits, one page at a time; the next page loads when the view scrolls to the end."""

    page_loaded = Signal(int)  # hits added by the page that just arrived
    search_failed = Signal(str)

    def __init__(self, cache: ThumbnailCache, pool: QThreadPool, page_size: int = 60,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._cache, self._pool, self.page_size = cache, pool, page_size
        self._hits: list[SearchHit] = []
        self._rows: dict[int, int] = {}  # media id -> row
        self._fetch: PageFetch | None = None
        self._generation = 0  # replies from an older search are dropped
        self._loading = False
        self._exhausted = True
        self._hover: tuple[int, QPixmap] | None = None
        cache.thumbnail_ready.connect(self._media_changed)

    # --- searching
    def set_fetch(self, fetch: PageFetch | None) -> None:
        """Start a new search: clear, then load the first page of ``fetch(offset, top)``."""
        self.beginResetModel()
        self._hits, self._rows = [], {}
        self._generation += 1
        self._fetch = fetch
        self._loading, self._exhausted = False, fetch is None
        self.endResetModel()
        if fetch is not None:
            self._load_page()

    @property
    def is_loading(self) -> bool:
        return self._loading

    def _load_page(self) -> None:
        fetch, generation, offset, top = self._fetch, self._generation, len(self._hits), self.page_size
        if fetch is None:
            return
        self._loading = True
        run_in_background(
            fetch, offset, top, pool=self._pool, priority=10,
            on_result=lambda hits: self._append(generation, hits),
            on_error=lambda exc: self._failed(generation, exc),
        )

    def _append(self, generation: int, hits: list[SearchHit]) -> None:
        if generation != self._generation:
            return
        self._loading = False
        self._exhausted = len(hits) < self.page_size
        fresh = [h for h in hits if h.media_id not in self._rows]  # the index may shift between pages
        if fresh:
            start = len(self._hits)
            self.beginInsertRows(QModelIndex(), start, start + len(fresh) - 1)
            for row, hit in enumerate(fresh, start=start):
                self._rows[hit.media_id] = row
                self._hits.append(hit)
            self.endInsertRows()
        elif hits:
            self._exhausted = True  # a page of only repeats: nothing new will come
        self.page_loaded.emit(len(fresh))

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

    def hit(self, row: int) -> SearchHit:
        return self._hits[row]

    def row_of(self, media_id: int) -> int | None:
        return self._rows.get(media_id)

    def data(self, index: QModelIndex | QPersistentModelIndex,
             role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._hits):
            return None
        hit = self._hits[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return Path(hit.path).name
        if role == Qt.ItemDataRole.DecorationRole:
            if self._hover is not None and self._hover[0] == hit.media_id:
                return self._hover[1]
            return self._cache.thumbnail(hit.media_id)
        if role == Qt.ItemDataRole.ToolTipRole:
            return hit_tooltip(hit)
        if role == HIT_ROLE:
            return hit
        return None

    def set_captions(self, media_id: int, captions: tuple[str, ...]) -> None:
        """Keep a hit's captions current after the user edits them."""
        row = self._rows.get(media_id)
        if row is not None:
            self._hits[row] = replace(self._hits[row], captions=captions)
            self._media_changed(media_id)

    def set_hover_frame(self, media_id: int | None, frame: QPixmap | None) -> None:
        """Show ``frame`` instead of the thumbnail of ``media_id`` (None: back to thumbnails)."""
        previous = self._hover[0] if self._hover else None
        self._hover = (media_id, frame) if media_id is not None and frame is not None else None
        for changed in {previous, media_id} - {None}:
            self._media_changed(changed)

    def _media_changed(self, media_id: int) -> None:
        row = self._rows.get(media_id)
        if row is not None:
            index = self.index(row)
            self.dataChanged.emit(index, index, [Qt.ItemDataRole.DecorationRole])


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
        if hit is None:
            return
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
        self._paint_thumbnail(painter, icon_rect, index.data(Qt.ItemDataRole.DecorationRole), palette)
        self._paint_badges(painter, icon_rect, hit)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        text_colour = palette.color(role)
        self._paint_text(painter, rect, icon_rect, hit, text_colour)
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

    @staticmethod
    def _badge(painter: QPainter, rect: QRect, text: str, background: QColor, right: bool) -> None:
        font = QFont(painter.font())
        font.setPointSizeF(max(6.0, font.pointSizeF() * 0.8))
        font.setBold(True)
        painter.setFont(font)
        width = painter.fontMetrics().horizontalAdvance(text) + 10
        height = painter.fontMetrics().height() + 2
        x = rect.right() - width - 4 if right else rect.left() + 4
        badge = QRect(x, rect.top() + 4, width, height)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(background)
        painter.drawRoundedRect(badge, 4, 4)
        painter.setPen(QColor("white"))
        painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, text)

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
    def _paint_text(painter: QPainter, rect: QRect, icon_rect: QRect, hit: SearchHit, colour: QColor) -> None:
        painter.setFont(QFont(painter.font().family()))
        metrics = painter.fontMetrics()
        line = metrics.height()
        name = metrics.elidedText(Path(hit.path).name, Qt.TextElideMode.ElideMiddle, rect.width() - 8)
        top = icon_rect.bottom() + 4
        painter.setPen(colour)
        centred = Qt.AlignmentFlag.AlignHCenter
        painter.drawText(QRect(rect.left() + 4, top, rect.width() - 8, line), centred, name)
        painter.drawText(QRect(rect.left() + 4, top + line, rect.width() - 8, line),
                         centred, score_text(hit))


class ResultsView(QListView):
    """An icon grid over a :class:`ResultsModel`; GIFs and videos play their preview frames on hover."""

    current_hit_changed = Signal(object)  # SearchHit | None

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
        self.setSelectionMode(QListView.SelectionMode.SingleSelection)
        self.setItemDelegate(ResultDelegate(icon_size, self))
        self.setModel(model)
        self.selectionModel().currentChanged.connect(self._current_changed)
        self.entered.connect(self._hover)
        self._hovered: int | None = None
        self._frame = 0
        self._timer = QTimer(self, interval=140)
        self._timer.timeout.connect(self._next_frame)
        cache.frames_ready.connect(self._frames_arrived)

    def results(self) -> ResultsModel:
        model = self.model()
        assert isinstance(model, ResultsModel)
        return model

    def current_hit(self) -> SearchHit | None:
        index = self.currentIndex()
        return index.data(HIT_ROLE) if index.isValid() else None

    def _current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self.current_hit_changed.emit(current.data(HIT_ROLE) if current.isValid() else None)

    def select_row(self, row: int) -> None:
        """Make ``row`` current and selected, loading the next page when it is the last one."""
        model = self.results()
        if model.rowCount() == 0:
            return
        row = max(0, min(row, model.rowCount() - 1))
        index = model.index(row)
        self.setCurrentIndex(index)
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
