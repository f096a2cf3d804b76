"""A picture fitted to its window or zoomed, as photo viewers do it: Ctrl+wheel zooms at the pointer, a
double-click toggles between the whole picture and 1:1 (one file pixel per screen pixel) where it was clicked,
and a zoomed picture is panned by dragging it (or with the wheel and the scroll bars).

The zoom is kept in the picture's own pixels (``source``), not in those of the pixmap shown, so a picture read
scaled to the window and then again at full size (or a video's frames decoded at another size) stays where it
was on the screen; :attr:`PictureView.wants_full_size` says when the shown pixmap has fewer pixels than the
zoom draws, for the viewer to read more.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QMouseEvent, QPainter, QPaintEvent, QPixmap, QResizeEvent, QWheelEvent
from PySide6.QtWidgets import QAbstractScrollArea, QFrame, QWidget

ZOOM_STEP = 1.25  # one wheel notch or one +/- press, as in digiKam
MAX_ZOOM = 16.0  # 1,600 %: single pixels are squares a finger wide
WHEEL_NOTCH = 120  # QWheelEvent.angleDelta of one notch


class PictureView(QAbstractScrollArea):
    """Shows one pixmap: fitted (``zoom`` None) or at ``zoom`` screen pixels per picture pixel, centred when it
    is smaller than the view. ``setText`` shows a message instead (loading, an error)."""

    zoom_changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.viewport().setMouseTracking(False)
        self._pixmap: QPixmap | None = None
        self._source = QSize()
        self._text = ""
        self._zoom: float | None = None
        self._grabbed: QPoint | None = None  # where a pan began (viewport coordinates)

    # --- content
    def pixmap(self) -> QPixmap | None:
        """The pixmap shown (None: a message, or nothing)."""
        return self._pixmap

    @property
    def source(self) -> QSize:
        """The shown picture's size in its own pixels (the file's, upright)."""
        return QSize(self._source)

    def setPixmap(self, pixmap: QPixmap, source: QSize | None = None) -> None:
        """Show ``pixmap``, which draws a picture of ``source`` pixels (default: the pixmap's own size). The zoom
        and the position stay: the next frame of a video, or the same photo read at a higher resolution."""
        self._pixmap, self._text = pixmap, ""
        before, self._source = self._source, QSize(source) if source is not None and source.isValid() else pixmap.size()
        self._relayout()
        if self._source != before:
            self.zoom_changed.emit()  # another picture: another fitted scale (or the same zoom, more pixels)

    def setText(self, text: str) -> None:
        """Show a message instead of a picture; the next picture starts fitted."""
        self._pixmap, self._text, self._source, self._zoom = None, text, QSize(), None
        self._relayout()
        self.zoom_changed.emit()

    def text(self) -> str:
        return self._text

    # --- zoom
    @property
    def fitted(self) -> bool:
        """Whether the whole picture is fitted to the view (not zoomed by the user)."""
        return self._zoom is None

    def fit_scale(self) -> float:
        """Screen pixels per picture pixel that show the whole picture (a small one is enlarged, as before)."""
        if self._source.isEmpty():
            return 1.0
        area = self.viewport().size()
        return max(1e-3, min(area.width() / self._source.width(), area.height() / self._source.height()))

    def scale(self) -> float:
        """Screen pixels per picture pixel now: 1.0 is 1:1 (actual pixels)."""
        return self.fit_scale() if self._zoom is None else self._zoom

    def set_zoom(self, zoom: float | None, anchor: QPointF | None = None) -> None:
        """Fit (None) or zoom to ``zoom`` screen pixels per picture pixel, keeping the picture point under
        ``anchor`` (viewport coordinates; default: the view's centre) where it is."""
        if zoom is not None:
            zoom = min(MAX_ZOOM, max(min(self.fit_scale(), 1.0), zoom))  # never below the whole picture or 1:1
        anchor = anchor if anchor is not None else QPointF(self.viewport().rect().center())
        picture_point = self._to_picture(anchor)
        self._zoom = zoom
        self._relayout()
        if zoom is not None:  # scroll so that the picture point is under the anchor again
            origin = self._origin()
            here = QPointF(origin.x() + picture_point.x() * zoom, origin.y() + picture_point.y() * zoom)
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() + round(here.x() - anchor.x()))
            self.verticalScrollBar().setValue(self.verticalScrollBar().value() + round(here.y() - anchor.y()))
        self.viewport().update()
        self.zoom_changed.emit()

    def zoom_by(self, steps: float, anchor: QPointF | None = None) -> None:
        """Zoom in (``steps`` > 0) or out by :data:`ZOOM_STEP` per step; out past the whole picture fits it."""
        target = self.scale() * ZOOM_STEP ** steps
        self.set_zoom(None if steps < 0 and target <= self.fit_scale() else target, anchor)

    def toggle_actual_pixels(self, anchor: QPointF | None = None) -> None:
        """1:1 where the picture is fitted, the whole picture where it is zoomed (Lightroom's Z, a double-click)."""
        self.set_zoom(1.0 if self.fitted else None, anchor)

    @property
    def wants_full_size(self) -> bool:
        """Whether the zoom draws more pixels than the pixmap has (a photo read scaled to the window)."""
        pixmap = self._pixmap
        if pixmap is None or pixmap.isNull() or self._source.isEmpty():
            return False
        drawn = self.scale() * self._source.width()
        return pixmap.width() < self._source.width() and drawn > pixmap.width() * 1.05

    # --- geometry
    def _content_size(self) -> QSize:
        scale = self.scale()
        return QSize(round(self._source.width() * scale), round(self._source.height() * scale))

    def _origin(self) -> QPointF:
        """The picture's top-left corner in viewport coordinates."""
        content, area = self._content_size(), self.viewport().size()
        x = (area.width() - content.width()) / 2 if content.width() <= area.width() else \
            -self.horizontalScrollBar().value()
        y = (area.height() - content.height()) / 2 if content.height() <= area.height() else \
            -self.verticalScrollBar().value()
        return QPointF(x, y)

    def _to_picture(self, point: QPointF) -> QPointF:
        origin, scale = self._origin(), self.scale()
        return QPointF((point.x() - origin.x()) / scale, (point.y() - origin.y()) / scale)

    def picture_rect(self) -> QRectF:
        """Where the picture is drawn, in viewport coordinates."""
        return QRectF(self._origin(), QSize(self._content_size()).toSizeF())

    def _relayout(self) -> None:
        content, area = self._content_size(), self.viewport().size()
        for bar, extent, page in ((self.horizontalScrollBar(), content.width(), area.width()),
                                  (self.verticalScrollBar(), content.height(), area.height())):
            bar.setRange(0, max(0, extent - page))
            bar.setPageStep(max(1, page))
            bar.setSingleStep(max(1, page // 20))
        self.viewport().setCursor(Qt.CursorShape.OpenHandCursor if self.pannable else Qt.CursorShape.ArrowCursor)
        self.viewport().update()

    @property
    def pannable(self) -> bool:
        """Whether the picture is larger than the view (dragging it moves it)."""
        content, area = self._content_size(), self.viewport().size()
        return content.width() > area.width() or content.height() > area.height()

    # --- events
    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._relayout()
        if self._zoom is None:
            self.zoom_changed.emit()  # the fitted scale changed

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        self.viewport().update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self.viewport())
        pixmap = self._pixmap
        if pixmap is None or pixmap.isNull():
            painter.drawText(self.viewport().rect(), Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap,
                             self._text)
            return
        # smooth when shrinking or gently enlarging; sharp pixels when zoomed far in, as photo tools show them
        if self.scale() * self._source.width() / max(1, pixmap.width()) < 3:
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        painter.drawPixmap(self.picture_rect(), pixmap, QRectF(pixmap.rect()))

    def wheelEvent(self, event: QWheelEvent) -> None:
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom_by(event.angleDelta().y() / WHEEL_NOTCH, event.position())
            event.accept()
        elif self.pannable:
            super().wheelEvent(event)
        else:
            event.ignore()

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        if event.button() is Qt.MouseButton.LeftButton and self._pixmap is not None:
            self.toggle_actual_pixels(event.position())

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() is Qt.MouseButton.LeftButton and self.pannable:
            self._grabbed = event.position().toPoint()
            self.viewport().setCursor(Qt.CursorShape.ClosedHandCursor)
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self._grabbed is not None:
            here = event.position().toPoint()
            delta, self._grabbed = here - self._grabbed, here
            self.horizontalScrollBar().setValue(self.horizontalScrollBar().value() - delta.x())
            self.verticalScrollBar().setValue(self.verticalScrollBar().value() - delta.y())
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if self._grabbed is not None:
            self._grabbed = None
            self._relayout()  # the open hand again
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event) -> None:  # noqa: ANN001 - the window's keys (arrows step), not scrolling
        event.ignore()
