"""The results grid: the view and its delegate (thumbnail, badges, name and relevance of each result), hover
previews of clips, infinite scroll. The model is :mod:`app.widgets.resultsmodel`, the words and badges
:mod:`app.widgets.hittext`, the thumbnails :mod:`app.widgets.images`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import (
    QEvent,
    QItemSelectionModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import (
    QAction,
    QColor,
    QContextMenuEvent,
    QDrag,
    QFont,
    QKeyEvent,
    QPainter,
    QPalette,
    QPixmap,
)
from PySide6.QtWidgets import (
    QListView,
    QMenu,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from app.widgets.desktop import show_in_folder
from app.widgets.hittext import (
    BADGE_GAP,
    BADGE_PADDING,
    VERDICT_INK,
    Relevance,
    annotation_badges,
    browse_line,
    compact_verdict,
    fit_badges,
    relevance_line,
)
from app.widgets.images import ThumbnailCache
from app.widgets.resultsmodel import HIT_ROLE, RELEVANCE_ROLE, STATE_ROLE, ResultsModel
from engine.types import MediaKind, SearchHit

log = logging.getLogger(__name__)


# the window's actions the context menu offers too (they judge the selected results)
JUDGE_ACTIONS = ("&Accept match", "&Reject match")


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
            # three significant digits: sigmas of one model differ in the third (0.0191-0.0287), never "0.02" on all
            self._badge(painter, rect, f"σ {hit.uncertainty:.3g}", colour, right=False)

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
            second = relevance_line(rank, metrics.horizontalAdvance, rect.width() - 8)
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
    current_place_changed = Signal(object, object)  # (SearchHit, Relevance): its count of items arrived late

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
        model.modelAboutToBeReset.connect(self._before_reset)
        self._scroll_kept: int | None = None  # where a re-run found the user (ResultsModel.replacing)
        model.rows_filled.connect(self._rows_filled)
        model.dataChanged.connect(self._places_changed)
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

    def _before_reset(self) -> None:
        """A re-run replaces the rows on show (the library changed under them): the grid stays where the user
        was, once the new rows are laid out, instead of jumping back to the top (#44)."""
        if getattr(self.results(), "replacing", False):
            self._scroll_kept = self.verticalScrollBar().value()
            QTimer.singleShot(0, self._restore_scroll)

    def _restore_scroll(self) -> None:
        kept, self._scroll_kept = self._scroll_kept, None
        if kept is not None:
            self.verticalScrollBar().setValue(kept)
            if self.currentIndex().isValid():
                self.scrollTo(self.currentIndex(), QListView.ScrollHint.EnsureVisible)

    def doItemsLayout(self) -> None:
        # A batched layout starts again from the first row, and until its last batch the scroll bar only
        # covers the rows laid out so far: remember where the user was, to come back there (updateGeometries).
        # Only a grid scrolled away from its top has a place to come back to: the lookup (indexAt) runs on the
        # layout that is about to be replaced, so it is not made when there is nothing to keep.
        if (self.layoutMode() is QListView.LayoutMode.Batched and self._anchor is None
                and self.verticalScrollBar().value() > 0):
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

    def _places_changed(self, top: QModelIndex, bottom: QModelIndex, roles: list[int]) -> None:
        """The places learnt their count ("of 11 items") after the current one was shown: say it again."""
        current = self.currentIndex()
        if RELEVANCE_ROLE in roles and current.isValid() and top.row() <= current.row() <= bottom.row():
            self.current_place_changed.emit(current.data(HIT_ROLE), current.data(RELEVANCE_ROLE))

    def cell_width(self) -> int:
        """The width one result takes in the grid, spacing included (:meth:`ResultDelegate.sizeHint`'s)."""
        delegate = self.itemDelegate()
        icon = delegate.icon_size if isinstance(delegate, ResultDelegate) else self.iconSize().width()
        return icon + 12 + 2 * self.spacing()

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
        self.executeDelayedItemsLayout()  # a page that just arrived may not be laid out yet: "above" needs places
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
