"""The inspector: why one result matched one query.

It draws what the active model really has (``service.search.explain(query, media_id)``; the words and numbers come from
:mod:`engine.search.readings`): per-head attention only where the model has attention (PVSE / A3VSE heads side by
side, PCME's one map; over a strip of frames for GIFs and videos), the query's words tinted by each head (never
the text encoder's [CLS] / [SEP]), the K x K head-to-head similarity with the matched pair. A model without
attention (VSE, K = 1, and the zero-shot ranking) says so and shows instead which classes seen in the item's
regions match the query's words, and where. Uncertainty only for PCME: the match probability in words, the item's
sigma beside the library's range and its place among the library's items, the 2-D means with 1σ / 2σ ellipses
(magnified by a stated factor when at true size they would be dots).

Queries and captions are user text: everything here paints them as plain text, never as markup.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QThreadPool, Signal
from PySide6.QtGui import QColor, QImage, QPen, QPixmap
from PySide6.QtWidgets import (
    QGraphicsRectItem,
    QGridLayout,
    QGroupBox,
    QLabel,
    QProgressBar,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.widgets.attention import (
    FrameStrip,
    TokenStrip,
    add_head_row,
    draw_gaussian,
    head_colour,
    image_label,
    overlay,
    plot_widget,
    selectable_label,
)
from app.widgets.clips import matched_frame
from app.widgets.images import read_image, read_scaled
from app.widgets.plaintext import plain_tooltip
from app.workers import run_in_background
from engine.terms import (
    ellipse_axes,
    ellipse_magnification,
    sigma_text,
    significant,
    uncertainty_reading,
    word_match_text,
)
from engine.types import Explanation, MediaKind, SearchHit, WordMatch

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

__all__ = ["Inspector", "ellipse_axes", "uncertainty_reading"]  # the engine's reading and ellipse axes, re-exported

log = logging.getLogger(__name__)

MAX_FRAMES = 12
QUERY_BOX = 512  # a query picture is drawn under its attention no larger than this


# a bar whose words sit on its fill as often as beside it: a light fill under the window's own text colour
READABLE_BAR = "QProgressBar { text-align: center; } QProgressBar::chunk { background-color: palette(midlight); }"


@dataclass
class _Loaded:
    """What the background job fetched for one (query, hit)."""

    explanation: Explanation | None
    image: QImage | None
    frames: list[QImage]
    query_image: QImage | None
    error: str | None = None


class Inspector(QScrollArea):
    """Shows the explanation of the current result; rebuilt whenever the result or the query changes.

    A click on a clip's frame in a frame strip asks for the viewer there (``frame_opened``: the hit and the sampled
    frame, 0..T-1, as :attr:`SearchHit.frame` counts them)."""

    frame_opened = Signal(object, int)

    def __init__(self, pool: QThreadPool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pool = pool
        self._service: Workspace | None = None
        self._generation = 0
        self.query: str | Path | None = None
        self.hit: SearchHit | None = None
        self.rank: Any = None  # the grid's Relevance of the hit
        self.explanation: Explanation | None = None
        self.setWidgetResizable(True)
        # The content follows the width; what cannot shrink that far (a narrow inspector) scrolls, never clipped.
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setMinimumWidth(300)
        self._body = QWidget()
        self._layout = QVBoxLayout(self._body)
        self._layout.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.setWidget(self._body)
        self.title = selectable_label("Select a result to see why it matched.")
        self.title.setObjectName("inspectorTitle")
        self._reset()

    def set_service(self, service: Workspace | None) -> None:
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
        self.relevance_label: QLabel | None = None  # the hit's place and match in words
        self.probability_bar: QProgressBar | None = None
        self.uncertainty_plot: pg.PlotWidget | None = None
        self.uncertainty_values: tuple[float | None, float | None] = (None, None)
        self.uncertainty_label: QLabel | None = None
        self.uncertainty_bar: QProgressBar | None = None
        self.ellipse_plot: pg.PlotWidget | None = None
        self.ellipse_scale: float | None = None  # the factor the 1-sigma ellipses are drawn at (None: not drawn)
        self.similarity_plot: pg.PlotWidget | None = None
        self.word_views: list[QWidget] = []  # a model without attention: each query word's match in the item
        self.sigma_label: QLabel | None = None
        self.calibration_label: QLabel | None = None  # PCME: the uncertainty read on the model's validation split
        self.ellipse_label: QLabel | None = None

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

    def set_rank(self, hit: SearchHit | None, rank: Any) -> None:
        """The grid's place of ``hit`` changed (its search's count of items arrived): said, if it is the one shown."""
        if hit is None or self.hit is None or hit.media_id != self.hit.media_id:
            return
        self.rank = rank
        if self.relevance_label is not None and rank is not None:
            self.relevance_label.setText(_place_words(rank))

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
        elif ex.word_matches:
            self._add_word_matches(ex.word_matches, loaded.image)
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
        self.notes_label = selectable_label("\n".join(notes))
        self.notes_label.setObjectName("inspectorNotes")
        self._group("Notes").addWidget(self.notes_label)

    def _add_summary(self, ex: Explanation) -> None:
        layout = self._group("Match")
        if ex.match_probability is not None:
            self.probability_bar = QProgressBar(minimum=0, maximum=1000)
            self.probability_bar.setValue(round(1000 * ex.match_probability))
            by = ex.match_probability_by or "the uncertainty model"
            self.probability_bar.setFormat(f"p(match) by {by} alone: {significant(ex.match_probability, 2)}")
            self.probability_bar.setStyleSheet(READABLE_BAR)
            self.probability_bar.setToolTip("The probabilistic model's own match probability, from its two "
                                            "distributions alone. A result's “strong / good / weak match” "
                                            "percentage is the calibrated estimate the search ranks by, which also "
                                            "weighs the zero-shot semantics and your own words.")
            layout.addWidget(self.probability_bar)
        if ex.similarity.size > 1:  # one column: the item's heads are one (a clip's frames), only the query's differ
            q, i = ex.head_pair
            similarity, one = f"similarity {float(ex.similarity[q, i]):.3f}", ex.similarity.shape[1] == 1
            pair = f"query head {q} ↔ item head {i}"
            layout.addWidget(selectable_label(f"Best query head: {q} ({similarity}; the item's heads read it alike)"
                                              if one else f"Best head pair: {pair} ({similarity})"))
        if self.hit is not None:
            rank = self.rank
            if rank is not None:
                self.relevance_label = selectable_label(_place_words(rank))
                layout.addWidget(self.relevance_label)
            elif self.query is not None:  # opened on its own (What to annotate next): no place, no raw score
                layout.addWidget(selectable_label("Opened on its own, not from this search's results: it has no "
                                                  "place in them to show."))

    def _add_preview(self, image: QImage) -> None:
        picture = QLabel()
        size = 2 * self._cell_size()
        picture.setPixmap(QPixmap.fromImage(image).scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio,
                                                           Qt.TransformationMode.SmoothTransformation))
        picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._group("Preview").addWidget(picture)

    def _add_word_matches(self, matches: tuple[WordMatch, ...], image: QImage | None) -> None:
        """A model without attention: each query word, the class of the item's regions it matches and where
        (a photo's 7 x 7 regions as a heatmap, two a row; a clip's regions over its frames in words only); the
        words nothing in the item comes near are said in one line under them."""
        layout = self._group("The search's words in this item (classes seen in its regions)")
        regions = len(matches[0].regions)
        photo = image is not None and regions == 49
        unit = "regions" if photo else "regions of its frames"
        grid = QGridLayout()
        layout.addLayout(grid)
        found = [m for m in matches if m.class_name is not None]
        for n, match in enumerate(found):
            if photo:
                view = image_label(overlay(image, match.regions.reshape(7, 7)), word_match_text(match, regions, unit),
                                    head_colour(n), False, self._cell_size())
                view.findChildren(QLabel)[-1].setWordWrap(True)
                grid.addWidget(view, n // 2, n % 2)
            else:
                view = selectable_label(word_match_text(match, regions, unit))
                grid.addWidget(view, n, 0)
            self.word_views.append(view)
        missing = [m.word for m in matches if m.class_name is None]
        if missing:
            view = selectable_label(f"Nothing in this item is close to: {', '.join(missing)} (no class of its regions "
                                "comes near these words, so they add nothing here)")
            layout.addWidget(view)
            self.word_views.append(view)

    def _add_item_attention(self, ex: Explanation, loaded: _Loaded) -> None:
        k = ex.item_attention.shape[0]
        matched_item_head = ex.head_pair[1]
        if ex.item_grid is not None and loaded.image is not None:
            layout = self._group(f"Where each of the {k} heads looks" if k > 1 else "Where the model looks")
            grid = QGridLayout()
            layout.addLayout(grid)
            for head in range(k):
                maps = ex.item_attention[head].reshape(ex.item_grid)
                caption = f"head {head}" if k > 1 else "its attention over the picture"  # one map: no head to pick
                view = image_label(overlay(loaded.image, maps), caption, head_colour(head),
                                    k > 1 and head == matched_item_head, self._cell_size())
                grid.addWidget(view, head // 2, head % 2)
                self.head_views.append(view)
        elif loaded.frames:
            layout = self._group(f"The frames each of {k} heads attends to" if k > 1 else "Each sampled frame's match")
            sampled = ex.item_attention.shape[1]
            best = self.matched_sample(ex)
            self.matched_shown = None if best is None else matched_frame(best, len(loaded.frames), sampled)
            if best is not None:
                self.match_label = selectable_label(f"Best match: frame {best + 1} of {sampled} sampled (outlined in "
                                                "red); the viewer (Enter) opens the clip there. Click a frame to "
                                                "open the clip at that frame.")
                self.match_label.setObjectName("inspectorMatchedFrame")
                layout.addWidget(self.match_label)
            strip_frames = loaded.frames
            for head in range(k):
                strip = FrameStrip(loaded.frames, ex.item_attention[head], head_colour(head),
                                   matched=self.matched_shown)
                strip.frame_clicked.connect(lambda shown: self._open_frame(shown, len(strip_frames), sampled))
                if k > 1:
                    add_head_row(layout, head, head == matched_item_head, strip)
                else:  # one vector per frame: no head to name
                    layout.addWidget(strip)
                self.head_views.append(strip)

    def _open_frame(self, shown: int, n_shown: int, sampled: int) -> None:
        """Frame ``shown`` of the ``n_shown`` in the strip was clicked: ask for the viewer at the sampled frame it
        stands for (the strip's frames are spread over the clip like the sampled ones, :func:`matched_frame`)."""
        if self.hit is not None and n_shown > 0 and sampled > 0:
            self.frame_opened.emit(self.hit, min(sampled - 1, int((shown + 0.5) * sampled / n_shown)))

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
            heads = ex.query_attention.shape[0]
            layout = self._group("Query words each head attends to" if heads > 1
                                 else "Query words the model attends to")
            for head in range(heads):
                strip = TokenStrip(ex.query_tokens, ex.query_attention[head], head_colour(head))
                if heads > 1:
                    add_head_row(layout, head, head == matched, strip)
                else:
                    layout.addWidget(strip)
                self.token_strips.append(strip)
        elif query_image is not None and ex.query_attention.shape[1] == 49:
            layout = self._group("Where each head looks in the example")
            grid = QGridLayout()
            layout.addLayout(grid)
            for head in range(ex.query_attention.shape[0]):
                maps = ex.query_attention[head].reshape(7, 7)
                grid.addWidget(image_label(overlay(query_image, maps), f"head {head}", head_colour(head),
                                            head == matched, self._cell_size() * 3 // 4), head // 2, head % 2)

    def _add_similarity(self, ex: Explanation) -> None:
        layout = self._group("Head-to-head similarity")  # a group's title never wraps: short, so a narrow panel fits
        layout.addWidget(selectable_label("Rows: query heads; columns: item heads."))
        plot = plot_widget(150)
        sim = np.asarray(ex.similarity, dtype=np.float32)
        image = pg.ImageItem(sim.T)  # ImageItem is x-major: transpose so rows are query heads
        image.setColorMap(pg.colormap.get("viridis"))
        plot.addItem(image)
        plot.invertY(True)
        plot.setAspectLocked(True)
        low, spread = float(sim.min()), float(np.ptp(sim))
        digits = 2 if spread >= 0.05 else 3  # close values must not all read the same
        for (q, i), value in np.ndenumerate(sim):
            shade = (float(value) - low) / spread if spread > 0 else 1.0  # where the cell is on the colour map
            ink = "w" if shade < 0.6 else "k"  # dark cells get white text
            text = pg.TextItem(f"{value:.{digits}f}", anchor=(0.5, 0.5), color=ink)
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
        plot.setMinimumWidth(90 + 30 * k_item)  # narrower in a narrow inspector, so the frame strips above fit
        plot.setMaximumWidth(90 + 60 * k_item)
        self.similarity_plot = plot
        layout.addWidget(plot)

    def _add_uncertainty(self, ex: Explanation) -> None:
        layout = self._group("Uncertainty")
        if ex.item_uncertainty_percentile is not None and ex.library_items:
            pct = ex.item_uncertainty_percentile
            self.uncertainty_label = selectable_label(uncertainty_reading(pct, ex.library_items))
            self.uncertainty_label.setObjectName("uncertaintyReading")
            font = self.uncertainty_label.font()
            font.setBold(True)
            self.uncertainty_label.setFont(font)
            layout.addWidget(self.uncertainty_label)
            self.uncertainty_bar = QProgressBar(minimum=0, maximum=1000)
            self.uncertainty_bar.setValue(round(10 * pct))
            self.uncertainty_bar.setFormat(f"more uncertain than {pct:.0f} % of this library")
            self.uncertainty_bar.setStyleSheet(READABLE_BAR)
            self.uncertainty_bar.setToolTip(plain_tooltip(
                "Where this item's uncertainty (the geometric mean of its sigma) sits among every item of this "
                "library under the active model: left is the most certain, right the most ambiguous."))
            layout.addWidget(self.uncertainty_bar)
        self.uncertainty_values = (ex.query_uncertainty, ex.item_uncertainty)
        lines = []
        if ex.item_uncertainty is not None:
            lines.append("Item: " + sigma_text(ex.item_uncertainty, ex.library_uncertainty_range))
        if ex.query_uncertainty is not None:
            lines.append(f"Query: σ {significant(ex.query_uncertainty)} (a sentence's own uncertainty, "
                         "not ranked against the library's items)")
        self.sigma_label = selectable_label("\n".join(lines))
        self.sigma_label.setObjectName("sigmaReading")
        layout.addWidget(self.sigma_label)
        self.calibration_label = None
        if ex.uncertainty_calibration:
            self.calibration_label = selectable_label("What this uncertainty meant for this model:\n"
                                                      + "\n".join(ex.uncertainty_calibration))
            self.calibration_label.setObjectName("uncertaintyCalibration")
            layout.addWidget(self.calibration_label)
        if ex.item_uncertainty is not None and ex.library_uncertainty_range is not None:
            self.uncertainty_plot = self._library_strip(ex.item_uncertainty, ex.library_uncertainty_range)
            layout.addWidget(self.uncertainty_plot)

    def _library_strip(self, value: float, spread: tuple[float, float]) -> pg.PlotWidget:
        """The library's sigma range as a bar from its most to its least certain item, the item marked on it:
        the axis spans the library, so a difference of 0.001 between items reads as far as it is among them."""
        low, high = spread
        plot = plot_widget(70)
        pad = (high - low) * 0.05 or abs(low) * 0.05 or 1e-3
        plot.addItem(pg.BarGraphItem(x0=[low], y=[0], width=[max(high - low, pad / 10)], height=0.5,
                                     brush=QColor(127, 127, 127, 70), pen=pg.mkPen("#7f7f7f")))
        plot.plot([value], [0], pen=None, symbol="d", symbolSize=14, symbolBrush=QColor("#ff7f0e"), name="item")
        plot.getAxis("left").setTicks([[(0, "library")]])
        plot.getAxis("bottom").setLabel("σ (geometric mean) under this model")
        plot.getAxis("bottom").enableAutoSIPrefix(False)
        plot.setXRange(min(low, value) - pad, max(high, value) + pad, padding=0)
        plot.setYRange(-0.6, 0.6)
        return plot

    def _add_ellipses(self, ex: Explanation) -> None:
        shapes = [(name, np.asarray(mu, dtype=np.float64), ellipse_axes(sigma, unc), colour) for name, mu, sigma, unc,
                  colour in (("query", ex.query_mu_2d, ex.query_sigma, ex.query_uncertainty, "#1f77b4"),
                             ("item", ex.item_mu_2d, ex.item_sigma, ex.item_uncertainty, "#ff7f0e"))]
        factor = self.ellipse_scale = ellipse_magnification([c for _, c, _, _ in shapes], [a for _, _, a, _ in shapes])
        if factor is None:
            scale = "The two means; σ is too small at this scale to draw."
        elif factor > 1:
            scale = f"Means with 1σ / 2σ ellipses, drawn {factor:g}× larger than they are so they can be seen."
        else:
            scale = "Means with 1σ / 2σ ellipses, at true size."
        layout = self._group("Embeddings in 2-D")
        self.ellipse_label = selectable_label(scale)
        layout.addWidget(self.ellipse_label)
        plot = plot_widget(200)
        plot.setAspectLocked(True)
        plot.addLegend(offset=(5, 5))
        for name, centre, axes, colour in shapes:
            draw_gaussian(plot, name, centre, axes, QColor(colour), factor)
        self.ellipse_plot = plot
        layout.addWidget(plot)


def _load_explanation(service: Workspace, query: str | Path, hit: SearchHit) -> _Loaded:
    """Runs on a worker: the explanation and the pictures it is drawn over."""
    ex = service.search.explain(query, hit.media_id)
    image, frames = None, []
    if ex.item_grid is not None or not ex.item_attention.size:  # a heatmap's base, or a plain preview
        image = read_image(service.library.thumbnail(hit.media_id, 512))
    elif ex.item_attention.size and hit.kind is not MediaKind.IMAGE:
        n = min(MAX_FRAMES, ex.item_attention.shape[1])
        frames = [read_image(p) for p in service.library.preview_frames(hit.media_id, n)]
    query_image = None
    if isinstance(query, Path) and not ex.query_tokens and ex.query_attention.size:
        try:  # HEIC / AVIF too, upright: the picture the engine looked at
            query_image = read_scaled(query, QSize(QUERY_BOX, QUERY_BOX))
        except OSError:
            query_image = None
    return _Loaded(ex, image, frames, query_image)


def _place_words(rank: Any) -> str:
    """A hit's match and place in the results as the inspector says them (a :class:`app.widgets.hittext.Relevance`)."""
    return f"{rank.label} — {rank.explanation}"
