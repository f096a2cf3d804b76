"""Inspector drawing helpers and the hover preview of animations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontMetrics, QImage

from app.widgets.attention import TokenStrip, bin_weights, heatmap_image, overlay
from app.widgets.inspector import ellipse_axes
from app.widgets.resultsmodel import RELEVANCE_ROLE
from engine.workspace import Workspace
from tests.gui.test_search import search

REPO = Path(__file__).resolve().parents[2]


def test_heatmap_is_brightest_and_most_opaque_where_the_head_looks(qapp) -> None:
    weights = np.zeros((7, 7), dtype=np.float32)
    weights[2, 5] = 1.0
    image = heatmap_image(weights)
    assert (image.width(), image.height()) == (7, 7)
    hot, cold = image.pixelColor(5, 2), image.pixelColor(0, 0)  # pixelColor takes (x=col, y=row)
    assert hot.alpha() > cold.alpha() and hot.lightness() > cold.lightness()


def test_overlay_keeps_the_base_size(qapp) -> None:
    base = QImage(64, 48, QImage.Format.Format_RGB32)
    base.fill(QColor("white"))
    assert overlay(base, np.eye(7)).size() == base.size()


def test_bin_weights_sums_frames_into_bins() -> None:
    np.testing.assert_allclose(bin_weights(np.array([1, 2, 3, 4]), 2), [3, 7])
    np.testing.assert_allclose(bin_weights(np.array([1, 2]), 8), [1, 2])
    assert bin_weights(np.zeros(0), 3).size == 0


def test_ellipse_axes_from_2d_sigma_or_scalars() -> None:
    assert ellipse_axes(np.array([0.3, 0.2]), None) == (0.3, 0.2)
    g = ellipse_axes(np.array([0.1, 0.4, 1.6]), None)
    assert g == pytest.approx((0.4, 0.4))  # geometric mean of a higher-dimensional sigma
    assert ellipse_axes(None, 0.5) == (0.5, 0.5)
    assert ellipse_axes(None, None) is None


def _ink_columns(strip: TokenStrip) -> int:
    """How many pixels wide the dark (text-coloured) ink of a painted strip is."""
    image = strip.grab().toImage()
    dark = [x for x in range(image.width())
            if any(image.pixelColor(x, y).lightness() < 110 for y in range(image.height()))]
    return max(dark) - min(dark) + 1 if dark else 0


@pytest.mark.parametrize("token,parsed", [("<b>bold</b>", "bold"), ("&amp;", "&")])
def test_token_strip_paints_markup_as_text(qtbot, token: str, parsed: str) -> None:
    """A query word is drawn as the characters typed: markup in it is never parsed as rich text."""
    strips = {}
    for text in (token, parsed):
        strip = TokenStrip((text,), np.zeros(1), QColor("red"))  # weight 0: pale fill, text in palette colour
        qtbot.addWidget(strip)
        strip.resize(400, 40)
        strips[text] = strip
    assert strips[token].palette().color(strips[token].palette().ColorRole.Text).lightness() < 110
    metrics = QFontMetrics(strips[token].font())
    literal, rendered = metrics.horizontalAdvance(token), metrics.horizontalAdvance(parsed)
    assert literal > rendered + 10  # the two readings are told apart by the ink's width
    assert strips[token].heightForWidth(400) > 0
    assert _ink_columns(strips[token]) >= literal - 4  # every character of the markup was painted
    assert _ink_columns(strips[parsed]) < literal - 4


def test_hovering_an_animation_cycles_its_preview_frames(qtbot, window, service: Workspace) -> None:
    search(qtbot, window, "bouncing ball")
    model, view = window.results_model, window.results
    row = next(r for r in range(model.rowCount()) if model.hit(r).kind.value == "animation")
    index = model.index(row)
    qtbot.waitUntil(lambda: model.data(index, Qt.ItemDataRole.DecorationRole) is not None, timeout=3000)
    thumbnail = model.data(index, Qt.ItemDataRole.DecorationRole).toImage()
    view.entered.emit(index)
    frames_seen: set[int] = set()

    def cycled() -> bool:
        shown = model.data(index, Qt.ItemDataRole.DecorationRole).toImage()
        frames_seen.add(hash(bytes(shown.constBits())))
        return len(frames_seen) >= 3

    qtbot.waitUntil(cycled, timeout=3000)
    view._stop_hover()
    assert model.data(index, Qt.ItemDataRole.DecorationRole).toImage() == thumbnail


def test_signal_emits_do_not_exhaust_true_refcount() -> None:
    """PySide6 6.12.0 leaks a reference to True per emit(); app.qtcompat must keep the process alive."""
    code = ("import app.qtcompat\n"
            "from PySide6.QtCore import QObject, Signal\n"
            "class O(QObject):\n    s = Signal(object)\n"
            "o = O()\n"
            "for _ in range(200_000):\n    o.s.emit(1)\n"
            "print('alive')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.strip() == "alive"


def test_void_qt_calls_do_not_exhaust_none_refcount() -> None:
    """PySide6 6.12.0 leaks a reference to None per call of a void C++ method (setText, setValue,
    processEvents...); a training run's live plots make hundreds of thousands. app.qtcompat must keep the
    process alive (without it this aborts with "none_dealloc")."""
    code = ("import sys\n"
            "n = sys.getrefcount(None) + 50_000  # more calls than None has references (before the fix)\n"
            "import app.qtcompat\n"
            "from PySide6.QtWidgets import QApplication, QLabel\n"
            "a = QApplication([])\n"
            "label = QLabel()\n"
            "for _ in range(n):\n    label.setText('x')\n"
            "print('alive')\n")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.strip() == "alive"


def test_a_search_by_example_without_a_model_is_not_explained_by_its_file_name(service: Workspace) -> None:
    """Zero-shot ranking of a picture query compares the two pictures' looks; the file's path is no query words
    (the inspector once listed "tmp, home, demo, library, cup, coffee, jpg" as words not found in the item)."""
    from tests.gui.conftest import by_name

    item = by_name(service, "green_square_1")
    example = service.library.media(item).path
    explained = service.search.explain(example, item)
    assert explained.word_matches == () and explained.query_tokens == ()
    assert "search by example" in explained.notes[0]
    sentence = service.search.explain("a green square", item)  # a sentence still shows its words
    assert [m.word for m in sentence.word_matches] == ["green", "square"]


def test_find_similar_says_each_place_among_the_items_it_searched(qtbot, window) -> None:
    """Find similar leaves its example out of its results: the places count the items it ranked, as the header
    does ("11 results like cup-of-coffee.jpg" once stood above "ranked 1st of 12 items for this search"), and the
    first result shown is the 1st."""
    qtbot.waitUntil(lambda: bool(window.state.snapshot.indexed), timeout=3000)  # the library's count, read off thread
    others = window.state.snapshot.indexed - 1
    search(qtbot, window, "red circle")
    model, inspector = window.results_model, window.inspector
    example = model.hit(0)
    with qtbot.waitSignal(model.page_loaded, timeout=3000):
        window.find_similar(example)
    qtbot.waitUntil(lambda: not model.is_loading, timeout=3000)
    assert window.empty_label.text() == f"{others} results like {Path(example.path).name}"
    assert model.rowCount() == others and example.media_id not in {model.hit(r).media_id for r in range(others)}
    first = model.hit(0)
    qtbot.waitUntil(lambda: inspector.hit == first and inspector.explanation is not None
                    and " of " in inspector.relevance_label.text(), timeout=3000)
    assert f"ranked 1st of {others} items for this search" in inspector.relevance_label.text()
    last = model.data(model.index(others - 1), RELEVANCE_ROLE).explanation
    assert last.startswith(f"ranked {others}th of {others} items for this search")
