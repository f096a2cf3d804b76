"""The inspector: why one result matched one query.

For the selected result it draws, from ``service.explain(query, media_id)``: each head's attention as
a heatmap over the image (K heads side by side) or, for GIFs and videos, over a strip of frames; the
query's words tinted by each head's attention; the K x K head-to-head similarity with the matched pair;
the query's and the item's uncertainty, the item's read against the library's ("ambiguous: among the 10 % least
certain items of this library"); the match probability; and the 2-D means with their sigma as
ellipses. When the active model has no heads (zero-shot), it shows the explanation's notes instead.

Queries and captions are user text: everything here paints them as plain text, never as markup.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, QThreadPool
from PySide6.QtGui import QColor, QFontMetrics, QImage, QPainter, QPalette, QPen, QPixmap
from PySide6.QtWidgets import (
    QGraphicsEllipseItem,
    QGraphicsRectItem,
    QGridLayout,
    QGroupBox,
    QLabel,
    QProgressBar,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.service_api import SearchServiceLike
from app.widgets.plaintext import plain_label, plain_tooltip
from app.widgets.results import read_image
from app.widgets.viewer import matched_frame, read_scaled
from app.workers import run_in_background
from engine.types import Explanation, MediaKind, SearchHit

log = logging.getLogger(__name__)

HEAD_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
MAX_FRAMES = 12
QUERY_BOX = 512  # a query picture is drawn under its attention no larger than this
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


AMBIGUOUS_PERCENTILE = 90.0  # the library's 10 % least certain items read "ambiguous"
CLEAR_PERCENTILE = 10.0  # its 10 % most certain read "clear"


def uncertainty_reading(percentile: float, items: int) -> str:
    """The item's uncertainty in words, from where it sits among the library's ``items`` (``percentile``: the
    share of them at most as uncertain, :attr:`engine.types.Explanation.item_uncertainty_percentile`)."""
    one_item = 100.0 / max(1, items)  # never a finer share than one item of the library
    if percentile >= AMBIGUOUS_PERCENTILE:
        share = max(1, math.ceil(100.0 - percentile), math.ceil(one_item))
        return f"Ambiguous: among the {share} % least certain of the {items:,} items in this library"
    if percentile <= CLEAR_PERCENTILE:
        share = max(1, math.ceil(percentile), math.ceil(one_item))
        return f"Clear: among the {share} % most certain of the {items:,} items in this library"
    return f"Typical: more uncertain than {percentile:.0f} % of the {items:,} items in this library"


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


def ellipse_axes(sigma: np.ndarray | None, uncertainty: float | None) -> tuple[float, float] | None:
    """The two half-axes of a 1-sigma ellipse: a 2-D sigma as given, else the scalar uncertainty (or the
    geometric mean of a higher-dimensional sigma) on both axes."""
    if sigma is not None:
        s = np.asarray(sigma, dtype=np.float64).reshape(-1, np.asarray(sigma).shape[-1])[0]
        if s.size == 2:
            return float(s[0]), float(s[1])
        if s.size > 0 and np.all(s > 0):
            g = float(np.exp(np.log(s).mean()))
            return g, g
    if uncertainty is not None:
        return float(uncertainty), float(uncertainty)
    return None


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
    that matched the query best (``matched``, an index into ``frames``) is outlined."""

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

    def _frame_height(self, width: int) -> int:
        return int(width / max(1, len(self.frames)) * self._aspect)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._frame_height(width) + self.GAP + self.BAR

    def sizeHint(self) -> QSize:
        return QSize(320, self.heightForWidth(320))

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


def _image_label(pixmap: QPixmap, caption: str, colour: QColor, matched: bool, size: int) -> QWidget:
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


def _plain_label(text: str = "", wrap: bool = True) -> QLabel:
    label = plain_label(text, wrap)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _add_head_row(layout: QVBoxLayout, head: int, matched: bool, view: QWidget) -> None:
    """A head's name in its colour ("(matched)" for the best pair's head), then its view."""
    title = _plain_label(f"head {head}" + ("  (matched)" if matched else ""))
    title.setStyleSheet(f"color: {head_colour(head).name()}; font-weight: bold;")
    layout.addWidget(title)
    layout.addWidget(view)


def _plot(height: int) -> pg.PlotWidget:
    plot = pg.PlotWidget(background=None)
    plot.setMinimumHeight(height)
    plot.setMaximumHeight(height + 40)
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    return plot


# ---------------------------------------------------------------------------------------------- inspector
@dataclass
class _Loaded:
    """What the background job fetched for one (query, hit)."""

    explanation: Explanation | None
    image: QImage | None
    frames: list[QImage]
    query_image: QImage | None
    error: str | None = None


class Inspector(QScrollArea):
    """Shows the explanation of the current result; rebuilt whenever the result or the query changes."""

    def __init__(self, pool: QThreadPool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pool = pool
        self._service: SearchServiceLike | None = None
        self._generation = 0
        self.query: str | Path | None = None
        self.hit: SearchHit | None = None
        self.rank: Any = None  # the grid's Relevance of the hit
        self.explanation: Explanation | None = None
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # content follows the width
        self.setMinimumWidth(300)
        self._body = QWidget()
        self._layout = QVBoxLayout(self._body)
        self._layout.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.setWidget(self._body)
        self.title = _plain_label("Select a result to see why it matched.")
        self.title.setObjectName("inspectorTitle")
        self._reset()

    def set_service(self, service: SearchServiceLike | None) -> None:
        self._service = service
        self.show_hit(None, None)

    # --- building blocks (kept as attributes so tests and screenshots can find them)
    def _reset(self) -> None:
        if self._layout.count() == 0:
            self._layout.addWidget(self.title)
        while self._layout.count() > 1:  # everything below the title
            widget = self._layout.takeAt(1).widget()
            if widget is not None:
                widget.hide()  # deleteLater waits for the event loop; the old view must go now
                widget.deleteLater()
        self.head_views: list[QWidget] = []
        self.matched_shown: int | None = None  # a clip: the frame of the strip outlined as the best match
        self.match_label: QLabel | None = None
        self.token_strips: list[TokenStrip] = []
        self.notes_label: QLabel | None = None
        self.probability_bar: QProgressBar | None = None
        self.uncertainty_plot: pg.PlotWidget | None = None
        self.uncertainty_values: tuple[float | None, float | None] = (None, None)
        self.uncertainty_label: QLabel | None = None
        self.uncertainty_bar: QProgressBar | None = None
        self.ellipse_plot: pg.PlotWidget | None = None
        self.similarity_plot: pg.PlotWidget | None = None

    def show_hit(self, query: str | Path | None, hit: SearchHit | None, rank: Any = None) -> None:
        """Explain ``hit`` for ``query`` (None clears); the explanation is computed off the GUI thread.

        ``rank`` is the grid's :class:`app.widgets.results.Relevance` of the hit, said in words above the raw score.
        """
        self._generation += 1
        self.query, self.hit, self.explanation, self.rank = query, hit, None, rank
        self._reset()
        if hit is None or query is None or self._service is None:
            self.title.setText("Select a result to see why it matched." if query else
                               "Search, then select a result to see why it matched.")
            return
        self.title.setText(f"{Path(hit.path).name} — explaining…")
        generation, service = self._generation, self._service
        run_in_background(
            _load_explanation, service, query, hit, pool=self._pool, priority=8,
            on_result=lambda loaded: self._show(generation, loaded),
            on_error=lambda exc: self._show(generation, _Loaded(None, None, [], None, str(exc))),
        )

    @property
    def is_loading(self) -> bool:
        return self.hit is not None and self.explanation is None

    def _show(self, generation: int, loaded: _Loaded) -> None:
        if generation != self._generation or self.hit is None:
            return
        hit, ex = self.hit, loaded.explanation
        path = Path(hit.path)
        self.title.setText(f"{path.name}\n{hit.kind.value} in {path.parent.name or path.parent}")
        self.title.setToolTip(plain_tooltip(str(path)))
        if ex is None:
            self._add_notes((f"No explanation: {loaded.error}",))
            empty = np.zeros((0, 0), dtype=np.float32)
            self.explanation = Explanation((), empty, empty, None, empty, (0, 0))
            return
        self.explanation = ex
        self._add_summary(ex)
        if ex.notes:
            self._add_notes(ex.notes)
        if ex.item_attention.size:
            self._add_item_attention(ex, loaded)
            self._add_query_attention(ex, loaded.query_image)
        elif loaded.image is not None:
            self._add_preview(loaded.image)
        if ex.similarity.size > 1:  # one head each: nothing to compare
            self._add_similarity(ex)
        if ex.query_uncertainty is not None or ex.item_uncertainty is not None:
            self._add_uncertainty(ex)
        if ex.query_mu_2d is not None and ex.item_mu_2d is not None:
            self._add_ellipses(ex)

    def _cell_size(self) -> int:
        """Side of one head's picture: two per row across the panel's width."""
        return max(100, min(240, (self.viewport().width() - 110) // 2))  # room for a scroll bar

    def _group(self, title: str) -> QVBoxLayout:
        group = QGroupBox(title)
        layout = QVBoxLayout(group)
        self._layout.addWidget(group)
        return layout

    def _add_notes(self, notes: tuple[str, ...]) -> None:
        self.notes_label = _plain_label("\n".join(notes))
        self.notes_label.setObjectName("inspectorNotes")
        self._group("Notes").addWidget(self.notes_label)

    def _add_summary(self, ex: Explanation) -> None:
        layout = self._group("Match")
        if ex.match_probability is not None:
            self.probability_bar = QProgressBar(minimum=0, maximum=1000)
            self.probability_bar.setValue(round(1000 * ex.match_probability))
            self.probability_bar.setFormat(f"p(match) = {ex.match_probability:.3f}")
            layout.addWidget(self.probability_bar)
        if ex.similarity.size > 1:
            q, i = ex.head_pair
            layout.addWidget(_plain_label(f"Best head pair: query head {q} ↔ item head {i} "
                                          f"(similarity {float(ex.similarity[q, i]):.3f})"))
        if self.hit is not None:
            rank = self.rank
            if rank is not None:
                self.relevance_label = _plain_label(f"{rank.label} — {rank.explanation}")
                layout.addWidget(self.relevance_label)
            else:
                layout.addWidget(_plain_label(f"Rank score {self.hit.score:.4f}"))

    def _add_preview(self, image: QImage) -> None:
        picture = QLabel()
        size = 2 * self._cell_size()
        picture.setPixmap(QPixmap.fromImage(image).scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio,
                                                           Qt.TransformationMode.SmoothTransformation))
        picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._group("Preview").addWidget(picture)

    def _add_item_attention(self, ex: Explanation, loaded: _Loaded) -> None:
        k = ex.item_attention.shape[0]
        matched_item_head = ex.head_pair[1]
        if ex.item_grid is not None and loaded.image is not None:
            layout = self._group(f"Where each of the {k} heads looks" if k > 1 else "Where the model looks")
            grid = QGridLayout()
            layout.addLayout(grid)
            for head in range(k):
                maps = ex.item_attention[head].reshape(ex.item_grid)
                view = _image_label(overlay(loaded.image, maps), f"head {head}", head_colour(head),
                                    head == matched_item_head, self._cell_size())
                grid.addWidget(view, head // 2, head % 2)
                self.head_views.append(view)
        elif loaded.frames:
            layout = self._group(f"Which frames each of the {k} heads attends to" if k > 1
                                 else "Which frames the model attends to")
            sampled = ex.item_attention.shape[1]
            best = self.matched_sample(ex)
            self.matched_shown = None if best is None else matched_frame(best, len(loaded.frames), sampled)
            if best is not None:
                self.match_label = _plain_label(f"Best match: frame {best + 1} of {sampled} sampled (outlined in "
                                                "red); the viewer (Enter) opens the clip there")
                self.match_label.setObjectName("inspectorMatchedFrame")
                layout.addWidget(self.match_label)
            for head in range(k):
                strip = FrameStrip(loaded.frames, ex.item_attention[head], head_colour(head),
                                   matched=self.matched_shown)
                _add_head_row(layout, head, head == matched_item_head, strip)
                self.head_views.append(strip)

    def matched_sample(self, ex: Explanation) -> int | None:
        """The sampled frame of the clip that matched best: the search's (``SearchHit.frame``), else the frame
        the explanation's heads weigh most."""
        sampled = ex.item_attention.shape[1] if ex.item_attention.ndim == 2 else 0
        if not sampled or ex.item_grid is not None:
            return None
        frame = self.hit.frame if self.hit is not None else None
        if frame is not None and 0 <= frame < sampled:
            return int(frame)
        return int(np.asarray(ex.item_attention).max(axis=0).argmax())

    def _add_query_attention(self, ex: Explanation, query_image: QImage | None) -> None:
        if not ex.query_attention.size:
            return
        matched = ex.head_pair[0]
        if ex.query_tokens:
            layout = self._group("Query words each head attends to")
            for head in range(ex.query_attention.shape[0]):
                strip = TokenStrip(ex.query_tokens, ex.query_attention[head], head_colour(head))
                _add_head_row(layout, head, head == matched, strip)
                self.token_strips.append(strip)
        elif query_image is not None and ex.query_attention.shape[1] == 49:
            layout = self._group("Where each head looks in the example")
            grid = QGridLayout()
            layout.addLayout(grid)
            for head in range(ex.query_attention.shape[0]):
                maps = ex.query_attention[head].reshape(7, 7)
                grid.addWidget(_image_label(overlay(query_image, maps), f"head {head}", head_colour(head),
                                            head == matched, self._cell_size() * 3 // 4), head // 2, head % 2)

    def _add_similarity(self, ex: Explanation) -> None:
        layout = self._group("Head-to-head similarity (rows: query heads, columns: item heads)")
        plot = _plot(150)
        sim = np.asarray(ex.similarity, dtype=np.float32)
        image = pg.ImageItem(sim.T)  # ImageItem is x-major: transpose so rows are query heads
        image.setColorMap(pg.colormap.get("viridis"))
        plot.addItem(image)
        plot.invertY(True)
        plot.setAspectLocked(True)
        for (q, i), value in np.ndenumerate(sim):
            ink = "w" if value < sim.max() * 0.7 else "k"  # dark cells get white text
            text = pg.TextItem(f"{value:.2f}", anchor=(0.5, 0.5), color=ink)
            text.setPos(i + 0.5, q + 0.5)
            plot.addItem(text)
        q, i = ex.head_pair
        frame = QGraphicsRectItem(i, q, 1, 1)  # outlines the matched pair
        pen = QPen(QColor("#ff3b30"), 3)
        pen.setCosmetic(True)
        frame.setPen(pen)
        plot.addItem(frame)
        k_query, k_item = sim.shape
        plot.getAxis("left").setTicks([[(q + 0.5, str(q)) for q in range(k_query)]])
        plot.getAxis("bottom").setTicks([[(i + 0.5, str(i)) for i in range(k_item)]])
        plot.getAxis("left").setLabel("query head")
        plot.getAxis("bottom").setLabel("item head")
        plot.setXRange(0, k_item, padding=0.05)
        plot.setYRange(0, k_query, padding=0.05)
        plot.setFixedWidth(90 + 60 * k_item)
        self.similarity_plot = plot
        layout.addWidget(plot)

    def _add_uncertainty(self, ex: Explanation) -> None:
        layout = self._group("Uncertainty")
        if ex.item_uncertainty_percentile is not None and ex.library_items:
            pct = ex.item_uncertainty_percentile
            self.uncertainty_label = _plain_label(uncertainty_reading(pct, ex.library_items))
            self.uncertainty_label.setObjectName("uncertaintyReading")
            font = self.uncertainty_label.font()
            font.setBold(True)
            self.uncertainty_label.setFont(font)
            layout.addWidget(self.uncertainty_label)
            self.uncertainty_bar = QProgressBar(minimum=0, maximum=1000)
            self.uncertainty_bar.setValue(round(10 * pct))
            self.uncertainty_bar.setFormat(f"uncertainty percentile {pct:.0f} in this library")
            self.uncertainty_bar.setToolTip(plain_tooltip(
                "Where this item's uncertainty (the geometric mean of its sigma) sits among every item of this "
                "library under the active model: left is the most certain, right the most ambiguous."))
            layout.addWidget(self.uncertainty_bar)
        layout.addWidget(_plain_label("Geometric mean of sigma:"))
        values = [ex.query_uncertainty or 0.0, ex.item_uncertainty or 0.0]
        self.uncertainty_values = (ex.query_uncertainty, ex.item_uncertainty)
        plot = _plot(110)
        bars = pg.BarGraphItem(x0=[0, 0], y=[0, 1], width=values, height=0.6,
                               brushes=[QColor("#1f77b4"), QColor("#ff7f0e")])
        plot.addItem(bars)
        plot.getAxis("left").setTicks([[(0, "query"), (1, "item")]])
        plot.setXRange(0, max(values) * 1.15 or 1.0)
        plot.setYRange(-0.6, 1.6)
        self.uncertainty_plot = plot
        layout.addWidget(plot)
        layout.addWidget(_plain_label(
            "  ".join(f"{name} σ = {v:.3f}" for name, v in zip(("query", "item"), values, strict=True))))

    def _add_ellipses(self, ex: Explanation) -> None:
        layout = self._group("Embeddings in 2-D: mean and 1σ / 2σ ellipses")
        plot = _plot(200)
        plot.setAspectLocked(True)
        plot.addLegend(offset=(5, 5))
        for name, mu, sigma, unc, colour in (
            ("query", ex.query_mu_2d, ex.query_sigma, ex.query_uncertainty, "#1f77b4"),
            ("item", ex.item_mu_2d, ex.item_sigma, ex.item_uncertainty, "#ff7f0e"),
        ):
            centre = np.asarray(mu, dtype=np.float64)
            _draw_gaussian(plot, name, centre, ellipse_axes(sigma, unc), QColor(colour))
        self.ellipse_plot = plot
        layout.addWidget(plot)


def _draw_gaussian(plot: pg.PlotWidget, name: str, mu: np.ndarray, axes: tuple[float, float] | None,
                   colour: QColor) -> None:
    centres = mu.reshape(-1, 2)
    plot.plot(centres[:, 0], centres[:, 1], pen=None, symbol="o", symbolBrush=colour, name=name)
    if axes is None:
        return
    for cx, cy in centres:
        for n_sigma, alpha in ((1, 0.35), (2, 0.12)):
            ax, ay = axes[0] * n_sigma, axes[1] * n_sigma
            ellipse = QGraphicsEllipseItem(cx - ax, cy - ay, 2 * ax, 2 * ay)
            fill = QColor(colour)
            fill.setAlphaF(alpha)
            ellipse.setBrush(fill)
            pen = QPen(colour)
            pen.setCosmetic(True)
            ellipse.setPen(pen)
            plot.addItem(ellipse)


def _load_explanation(service: SearchServiceLike, query: str | Path, hit: SearchHit) -> _Loaded:
    """Runs on a worker: the explanation and the pictures it is drawn over."""
    ex = service.explain(query, hit.media_id)
    image, frames = None, []
    if ex.item_grid is not None or not ex.item_attention.size:  # a heatmap's base, or a plain preview
        image = read_image(service.thumbnail(hit.media_id, 512))
    elif ex.item_attention.size and hit.kind is not MediaKind.IMAGE:
        n = min(MAX_FRAMES, ex.item_attention.shape[1])
        frames = [read_image(p) for p in service.preview_frames(hit.media_id, n)]
    query_image = None
    if isinstance(query, Path) and not ex.query_tokens and ex.query_attention.size:
        try:  # HEIC / AVIF too, upright: the picture the engine looked at
            query_image = read_scaled(query, QSize(QUERY_BOX, QUERY_BOX))
        except OSError:
            query_image = None
    return _Loaded(ex, image, frames, query_image)
