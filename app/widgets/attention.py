"""Drawing an explanation: heads in their colours, attention as a heatmap over a picture, a query's words or a
clip's frames tinted by a head's weights, and Gaussian embeddings as dots with their sigma ellipses (pyqtgraph).
The inspector (:mod:`app.widgets.inspector`) decides what to draw; this module only draws it."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QImage, QMouseEvent, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import QGraphicsEllipseItem, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.widgets.clips import matched_frame
from app.widgets.plaintext import plain_label
from app.widgets.plots import StillPlot

HEAD_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
_HEATMAP = pg.colormap.get("inferno")


def head_colour(head: int) -> QColor:
    return QColor(HEAD_COLOURS[head % len(HEAD_COLOURS)])


# ---------------------------------------------------------------------------------------------- drawing
def heatmap_image(weights: np.ndarray) -> QImage:
    """A (rows, cols) weight map as an RGBA image, normalised to its own max, alpha rising with weight."""
    w = np.asarray(weights, dtype=np.float32)
    w = w / w.max() if w.size and w.max() > 0 else np.zeros_like(w)
    rgba = _HEATMAP.map(w.ravel(), mode="byte").reshape(w.shape[0], w.shape[1], 4).copy()
    rgba[..., 3] = (20 + 190 * w**1.5).astype(np.uint8)  # clear where the head does not look
    rgba = np.ascontiguousarray(rgba)
    image = QImage(rgba.data, w.shape[1], w.shape[0], 4 * w.shape[1], QImage.Format.Format_RGBA8888)
    return image.copy()  # detach from the numpy buffer


def overlay(base: QImage, weights: np.ndarray) -> QPixmap:
    """``base`` with ``weights`` (a coarse grid) stretched smoothly over it."""
    heat = heatmap_image(weights).scaled(base.size(), Qt.AspectRatioMode.IgnoreAspectRatio,
                                         Qt.TransformationMode.SmoothTransformation)
    canvas = QPixmap.fromImage(base.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied))
    painter = QPainter(canvas)
    painter.drawImage(0, 0, heat)
    painter.end()
    return canvas


def bin_weights(weights: np.ndarray, n_bins: int) -> np.ndarray:
    """Sum a 1-D weight vector over a clip's sampled frames into the ``n_bins`` frames shown (frames shown <
    frames attended: a clip shorter than the sample repeats its frames): each sampled frame goes to the shown frame
    it is (:func:`app.widgets.viewer.matched_frame`, the rule indexing samples by)."""
    w = np.asarray(weights, dtype=np.float32).ravel()
    if n_bins <= 0 or w.size == 0:
        return np.zeros(0, dtype=np.float32)
    if n_bins >= w.size:
        return w
    shown = [matched_frame(k, n_bins, w.size) for k in range(w.size)]
    return np.bincount(shown, weights=w, minlength=n_bins).astype(np.float32)


class TokenStrip(QWidget):
    """Query words laid out in lines, each tinted by one head's attention weight (plain painted text)."""

    def __init__(self, tokens: tuple[str, ...], weights: np.ndarray, colour: QColor,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tokens = tokens
        w = np.asarray(weights, dtype=np.float32).ravel()[: len(tokens)]
        self.weights = w / w.max() if w.size and w.max() > 0 else np.zeros(len(tokens), dtype=np.float32)
        self.colour = colour
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Minimum)

    def _boxes(self, width: int) -> list[QRectF]:
        metrics = QFontMetrics(self.font())
        x = y = 0
        line = metrics.height() + 6
        boxes = []
        for token in self.tokens:
            w = metrics.horizontalAdvance(token) + 10
            if x > 0 and x + w > width:
                x, y = 0, y + line + 2
            boxes.append(QRectF(x, y, w, line))
            x += w + 3
        return boxes

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        boxes = self._boxes(max(40, width))
        return int(boxes[-1].bottom()) + 2 if boxes else 0

    def sizeHint(self) -> QSize:
        return QSize(260, self.heightForWidth(260))

    def paintEvent(self, _event: object) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        text_colour = self.palette().color(QPalette.ColorRole.Text)
        for box, token, weight in zip(self._boxes(self.width()), self.tokens, self.weights, strict=False):
            fill = QColor(self.colour)
            fill.setAlphaF(0.08 + 0.85 * float(weight))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(fill)
            painter.drawRoundedRect(box, 4, 4)
            painter.setPen(QColor("white") if weight > 0.55 else text_colour)
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, token)
        painter.end()


class FrameStrip(QWidget):
    """Frames side by side, each with a bar under it as tall as one head's attention on that frame; the frame
    that matched the query best (``matched``, an index into ``frames``) is outlined. A click on a frame says which
    (``frame_clicked``, an index into ``frames``)."""

    frame_clicked = Signal(int)

    BAR = 24
    GAP = 3
    MATCH_INK = QColor("#ff3b30")  # as the matched head pair's outline

    def __init__(self, frames: list[QImage], weights: np.ndarray, colour: QColor,
                 parent: QWidget | None = None, matched: int | None = None) -> None:
        super().__init__(parent)
        self.frames = frames
        self.matched = matched if matched is not None and 0 <= matched < len(frames) else None
        w = bin_weights(weights, len(frames))
        self.weights = w / w.max() if w.size and w.max() > 0 else w
        self.colour = colour
        first = frames[0] if frames else None
        self._aspect = first.height() / first.width() if first is not None and first.width() else 1.0
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("Click a frame to open the clip there in the viewer")

    def _frame_height(self, width: int) -> int:
        return int(width / max(1, len(self.frames)) * self._aspect)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._frame_height(width) + self.GAP + self.BAR

    def sizeHint(self) -> QSize:
        return QSize(320, self.heightForWidth(320))

    def frame_at(self, x: float) -> int | None:
        """The frame (index into ``frames``) drawn at ``x`` (None: no frames)."""
        if not self.frames or self.width() < 1:
            return None
        return max(0, min(len(self.frames) - 1, int(x * len(self.frames) / self.width())))

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        frame = self.frame_at(event.position().x())
        if event.button() is Qt.MouseButton.LeftButton and frame is not None and self.rect().contains(
                event.position().toPoint()):
            self.frame_clicked.emit(frame)
        super().mouseReleaseEvent(event)

    def paintEvent(self, _event: object) -> None:
        if not self.frames:
            return
        painter = QPainter(self)
        cell = self.width() / len(self.frames)
        frame_h = min(self._frame_height(self.width()), self.height() - self.GAP - self.BAR)
        bar_bottom = frame_h + self.GAP + self.BAR
        for i, (frame, weight) in enumerate(zip(self.frames, self.weights, strict=False)):
            target = QRectF(i * cell + 1, 0, cell - 2, frame_h)
            scaled = frame.scaled(target.size().toSize(), Qt.AspectRatioMode.KeepAspectRatio,
                                  Qt.TransformationMode.SmoothTransformation)
            painter.setOpacity(0.35 + 0.65 * float(weight))  # frames the head ignores fade out
            painter.drawImage(int(target.center().x() - scaled.width() / 2), 0, scaled)
            painter.setOpacity(1.0)
            bar_h = max(1.0, self.BAR * float(weight))
            painter.fillRect(QRectF(target.left() + 2, bar_bottom - bar_h, target.width() - 4, bar_h),
                             self.colour)
            if i == self.matched:
                pen = QPen(self.MATCH_INK, 3)
                pen.setJoinStyle(Qt.PenJoinStyle.MiterJoin)
                painter.setPen(pen)
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawRect(QRectF(target.left() + 1.5, 1.5, target.width() - 3, bar_bottom - 3))
        painter.end()


def image_label(pixmap: QPixmap, caption: str, colour: QColor, matched: bool, size: int) -> QWidget:
    box = QWidget()
    layout = QVBoxLayout(box)
    layout.setContentsMargins(2, 2, 2, 2)
    picture = QLabel()
    picture.setPixmap(pixmap.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio,
                                    Qt.TransformationMode.SmoothTransformation))
    picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
    border = 3 if matched else 1
    picture.setStyleSheet(f"border: {border}px solid {colour.name()}; padding: 1px;")
    text = QLabel(caption + ("  (matched)" if matched else ""))
    text.setTextFormat(Qt.TextFormat.PlainText)
    text.setAlignment(Qt.AlignmentFlag.AlignCenter)
    text.setStyleSheet(f"color: {colour.name()}; font-weight: bold;")
    layout.addWidget(picture)
    layout.addWidget(text)
    return box


def selectable_label(text: str = "", wrap: bool = True) -> QLabel:
    label = plain_label(text, wrap)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def add_head_row(layout: QVBoxLayout, head: int, matched: bool, view: QWidget) -> None:
    """A head's name in its colour ("(matched)" for the best pair's head), then its view."""
    title = selectable_label(f"head {head}" + ("  (matched)" if matched else ""))
    title.setStyleSheet(f"color: {head_colour(head).name()}; font-weight: bold;")
    layout.addWidget(title)
    layout.addWidget(view)


def plot_widget(height: int) -> pg.PlotWidget:
    plot = StillPlot(background=None)
    plot.setMinimumHeight(height)
    plot.setMaximumHeight(height + 40)
    return plot


def draw_gaussian(plot: pg.PlotWidget, name: str, mu: np.ndarray, axes: tuple[float, float] | None,
                   colour: QColor, factor: float | None) -> None:
    """A mean as a dot and, unless ``factor`` is None, its 1- and 2-sigma ellipses ``factor`` times their size."""
    centres = mu.reshape(-1, 2)
    plot.plot(centres[:, 0], centres[:, 1], pen=None, symbol="o", symbolBrush=colour, name=name)
    if axes is None or factor is None:
        return
    for cx, cy in centres:
        for n_sigma, alpha in ((1, 0.35), (2, 0.12)):
            ax, ay = axes[0] * n_sigma * factor, axes[1] * n_sigma * factor
            ellipse = QGraphicsEllipseItem(cx - ax, cy - ay, 2 * ax, 2 * ay)
            fill = QColor(colour)
            fill.setAlphaF(alpha)
            ellipse.setBrush(fill)
            pen = QPen(colour)
            pen.setCosmetic(True)
            ellipse.setPen(pen)
            plot.addItem(ellipse)
