"""Issue #44 point 4 (and 20's filtered grid): a result's band and the inspector's words about its standing never
contradict each other ("weak match" beside "stands far out from the library's typical item", a filtered grid's
"strong match" beside "somewhat closer than the library's typical item"); an item opened from "What to annotate
next" shows no "Rank score 0.0000"."""

from __future__ import annotations

from pathlib import Path

from app.widgets.resultsmodel import RELEVANCE_ROLE
from tests.gui.conftest import media_ids

WORDS = {"strong match": ("stands far out",), "good match": ("stands clearly above",),
         "weak match": ("somewhat closer", "about as close")}


def agree(label: str, explanation: str) -> bool:
    return any(words in explanation for words in WORDS[label])


def similar_results(qtbot, window, kind: str | None = None) -> list:
    model = window.results_model
    if kind is not None:
        window.browse_bar.kind.setCurrentIndex(window.browse_bar.kind.findData(kind))
    qtbot.waitUntil(lambda: model.rowCount() > 0, timeout=3000)
    with qtbot.waitSignal(model.page_loaded, timeout=3000):
        window.find_similar(model.hit(0))
    qtbot.waitUntil(lambda: not model.is_loading and model.rowCount() > 0, timeout=3000)
    return [model.data(model.index(r), RELEVANCE_ROLE) for r in range(model.rowCount())]


def test_a_find_similar_band_agrees_with_its_standing(qtbot, window) -> None:
    ranks = similar_results(qtbot, window)
    assert all(agree(rank.label, rank.explanation) for rank in ranks), [(r.label, r.explanation) for r in ranks]


def test_a_filtered_grid_band_agrees_with_its_standing(qtbot, window) -> None:
    ranks = similar_results(qtbot, window, kind="animation")
    assert ranks and all(agree(rank.label, rank.explanation) for rank in ranks), [
        (r.label, r.explanation) for r in ranks]


def test_an_item_opened_from_what_to_annotate_next_shows_no_rank_score(qtbot, window, service) -> None:
    window.search_bar.edit.setText("zzz nothing")  # a query whose results the item is not among
    window.search_bar.submit()
    qtbot.waitUntil(lambda: not window.results_model.is_loading, timeout=3000)
    media_id = max(media_ids(service))
    window.results_model.drop(media_id)
    window.select_media(media_id)
    qtbot.waitUntil(lambda: window.inspector.hit is not None and window.inspector.hit.media_id == media_id,
                    timeout=3000)
    qtbot.waitUntil(lambda: window.inspector.explanation is not None, timeout=3000)
    qtbot.wait(50)
    texts = [label.text() for label in window.inspector.findChildren(type(window.empty_label))]
    assert not any("Rank score" in text for text in texts), [t for t in texts if "Rank" in t]
    assert Path(window.inspector.hit.path).exists()
