"""What the user annotated shows on the results, rejects leave the results, batch verdicts, Find similar,
relevance a person can read (issue #20)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.widgets.hittext import relevance, relevance_line
from app.widgets.resultsmodel import HIT_ROLE, RELEVANCE_ROLE, STATE_ROLE
from engine.library.catalog import MediaStatus
from engine.types import CaptionSource, MediaKind, SearchHit, percent
from engine.workspace import Workspace
from tests.gui.conftest import PVSE, user_pairs
from tests.gui.test_keyboard import ALT, CTRL, focused, press, settle, start_typing_a_query

SHIFT = Qt.KeyboardModifier.ShiftModifier


def ids(window) -> list[int]:
    model = window.results_model
    return [model.hit(r).media_id for r in range(model.rowCount())]


def state_of(window, media_id: int):
    model = window.results_model
    r = model.row_of(media_id)
    return None if r is None else model.data(model.index(r), STATE_ROLE)


def test_a_rejected_item_leaves_the_results_and_undo_brings_it_back(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "red")
    before = ids(window)
    rejected = before[0]
    press(qtbot, Qt.Key.Key_R, ALT)
    settle(qtbot, window)
    assert ids(window) == before[1:]  # gone from this query's results
    assert window.empty_label.text().startswith(f"{len(before) - 1} results")
    assert window.results.current_hit().media_id == before[1]  # the selection moved on once, not twice
    assert "Saved: reject for “red”" in window.annotate.status.text()  # the write is confirmed
    press(qtbot, Qt.Key.Key_Z, CTRL)
    settle(qtbot, window)
    assert ids(window) == before and window.results.current_hit().media_id == rejected
    press(qtbot, Qt.Key.Key_R, ALT)  # reject again, then search again: it stays out
    settle(qtbot, window)
    with qtbot.waitSignal(window.results_model.page_loaded, timeout=3000):
        press(qtbot, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: rejected not in ids(window), timeout=3000)
    assert sorted(ids(window)) == sorted(before[1:])


def test_badges_follow_captions_and_verdicts(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "green")
    first = window.results.current_hit().media_id
    press(qtbot, Qt.Key.Key_E, CTRL)
    qtbot.keyClicks(focused(), "a green thing")
    press(qtbot, Qt.Key.Key_Return)
    settle(qtbot, window)
    qtbot.waitUntil(lambda: state_of(window, first) is not None and state_of(window, first).captioned,
                    timeout=3000)
    second = window.results.current_hit().media_id
    press(qtbot, Qt.Key.Key_A, ALT)
    settle(qtbot, window)
    qtbot.waitUntil(lambda: state_of(window, second) is not None and state_of(window, second).judgement == 1,
                    timeout=3000)
    model = window.results_model
    tooltip = model.data(model.index(model.row_of(second)), Qt.ItemDataRole.ToolTipRole)
    assert "✓ accepted" in tooltip
    assert "✎ captioned" in model.data(model.index(model.row_of(first)), Qt.ItemDataRole.ToolTipRole)


def test_caption_provenance_is_visibly_different(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "blue")
    hit = window.results.current_hit()
    service.annotations.add_caption(hit.media_id, "mine")
    service.state.catalog.add_caption(hit.media_id, "from a file", CaptionSource.IMPORTED)  # as an import writes it
    guess = service.library.item(hit.media_id).guess  # indexing gave the item its guess
    window.annotate.refresh()
    settle(qtbot, window)
    items = {window.annotate.captions_list.item(i).text(): window.annotate.captions_list.item(i)
             for i in range(window.annotate.captions_list.count())}
    assert guess and set(items) == {"mine", "from a file", guess}
    colours = {text: item.foreground().color().name() for text, item in items.items()}
    assert len(set(colours.values())) == 3  # three origins, three looks
    assert items[guess].font().italic() and not items["mine"].font().italic()
    assert "guess (not yours" in items[guess].toolTip() and "imported" in items["from a file"].toolTip()
    assert window.annotate.heading.text().endswith("1 yours · 1 imported · 1 model's guess")
    assert QColor(colours["mine"]) != QColor(colours[guess])


def test_select_several_and_reject_them_at_once_one_undo(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "circle")
    first_three = ids(window)[:3]
    press(qtbot, Qt.Key.Key_Down)  # into the grid
    press(qtbot, Qt.Key.Key_Right, SHIFT)
    press(qtbot, Qt.Key.Key_Right, SHIFT)
    assert sorted(h.media_id for h in window.results.selected_hits()) == sorted(first_three)
    press(qtbot, Qt.Key.Key_R, ALT)
    settle(qtbot, window)
    assert sorted(m for _, m, label in user_pairs(service).values() if label == -1) == sorted(first_three)
    assert not set(first_three) & set(ids(window))
    press(qtbot, Qt.Key.Key_Z, CTRL)  # one step undoes the batch
    settle(qtbot, window)
    assert user_pairs(service) == {}
    assert set(first_three) <= set(ids(window))


def test_find_similar_searches_by_the_current_result(qtbot, window, service: Workspace, calls) -> None:
    start_typing_a_query(qtbot, window, "yellow")
    press(qtbot, Qt.Key.Key_Right, CTRL)
    hit = window.results.current_hit()
    with qtbot.waitSignal(window.results_model.page_loaded, timeout=3000):
        press(qtbot, Qt.Key.Key_F, CTRL | SHIFT)
    name, args = calls.last("search.text", "search.example")
    assert name == "search.example" and str(args["path"]) == hit.path
    assert window.search_bar.example_label.text() == f"Example: {Path(hit.path).name}"
    shown = [window.results_model.hit(r).media_id for r in range(window.results_model.rowCount())]
    assert shown and hit.media_id not in shown  # the item is not its own similar result


def test_relevance_is_a_calibrated_word_and_percentage_or_a_band_never_a_raw_score(qtbot, window,
                                                                                    service: Workspace,
                                                                                    monkeypatch) -> None:
    qtbot.waitUntil(lambda: bool(window.state.snapshot.indexed), timeout=3000)  # "of N items": the count is read
    start_typing_a_query(qtbot, window, "red circle")
    model = window.results_model
    hits: list[SearchHit] = [model.hit(r) for r in range(model.rowCount())]
    labels = [model.data(model.index(r), RELEVANCE_ROLE).label for r in range(model.rowCount())]
    assert labels == [f"{h.match} match · {percent(h.match_probability)}" for h in hits]
    # the red circles first, with a word better than weak; the probability falls with the rank
    assert hits[0].match in ("strong", "good") and Path(hits[0].path).name.startswith("red_circle")
    assert hits[-1].match == "weak" and labels[-1].startswith("weak match · ")
    probabilities = [h.match_probability for h in hits]
    assert probabilities == sorted(probabilities, reverse=True)
    tip = model.data(model.index(0), Qt.ItemDataRole.ToolTipRole)
    assert labels[0] in tip and "ranked 1st of" in tip and "score" not in tip
    assert "probability that this item is what the search asks for (calibrated on held-aside photos and videos)" in tip
    with qtbot.waitSignal(model.page_loaded, timeout=3000):
        window.find_similar(hits[0])  # a picture search carries no probability: its place and standing in words
    first = model.data(model.index(0), RELEVANCE_ROLE)
    assert first.label.endswith("match") and "%" not in first.label and "typical item" in first.explanation
    from engine.search import calibration

    monkeypatch.setattr(calibration, "load", lambda kind: None)  # no calibration file: a PCME model's own
    service.models.activate("tiny-pcme")  # probability, said as before
    window.search_bar.edit.setText("red circle")
    window.search_bar.submit()
    qtbot.waitUntil(lambda: model.rowCount() > 0 and model.hit(0).match_probability is not None, timeout=3000)
    hit: SearchHit = model.data(model.index(0), HIT_ROLE)
    assert hit.match is None
    assert model.data(model.index(0), RELEVANCE_ROLE).label == f"{hit.match_probability:.0%} match"
    with qtbot.waitSignal(model.page_loaded, timeout=3000):
        press(qtbot, Qt.Key.Key_Escape)  # browsing: no scores to show
    assert model.data(model.index(0), RELEVANCE_ROLE) is None


def test_find_similar_says_an_identical_picture_stands_out(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "red circle")
    model = window.results_model
    with qtbot.waitSignal(model.page_loaded, timeout=3000):
        window.find_similar(model.hit(0))
    first = model.data(model.index(0), RELEVANCE_ROLE)
    assert Path(model.hit(0).path).name.startswith("red_circle")  # the other red circle: the very same picture
    # its band and its words say the same standing (issue #44)
    assert first.label != "weak match" and "above the library's typical item" in first.explanation


def test_find_similar_with_a_model_reads_each_item_against_the_other_items(service: Workspace) -> None:
    service.models.activate(PVSE)  # two sources, the model and the backbone's look: each z-scored over the library
    indexed = [Path(m.path) for m in service.state.catalog.iter_media() if m.status == MediaStatus.OK]
    example = indexed[0]  # without the example, whose own perfect match is no typical item (it swelled both
    hits = service.search.example(example, top=100, exclude_example=True)  # spreads and sank every other item:
    scores = np.array([h.score for h in hits])  # all of them read "weak match")
    assert len(hits) == len(indexed) - 1 and example.name not in {Path(h.path).name for h in hits}
    assert abs(scores.mean()) < 1e-4  # the typical item stands at 0, as a hit's standing reads it


def test_a_calibrated_match_says_its_word_and_its_percentage() -> None:
    def hit(p: float, word: str) -> SearchHit:
        return SearchHit(1, "/x.png", MediaKind.IMAGE, 3.0, match_probability=p, match=word)

    strong = relevance(hit(0.62, "strong"), rank=1, searched=40)
    assert (strong.label, strong.dots) == ("strong match · 62%", 3)
    assert strong.explanation == ("ranked 1st of 40 items for this search: an estimated 62% probability that this "
                                  "item is what the search asks for (calibrated on held-aside photos and videos)")
    assert (relevance(hit(0.04, "good")).label, relevance(hit(0.04, "good")).dots) == ("good match · 4%", 2)
    assert (relevance(hit(0.003, "weak")).label, relevance(hit(0.003, "weak")).dots) == (
        "weak match · 0.3%", 1)
    assert relevance(hit(0.0004, "weak")).label == "weak match · <0.1%"
    assert [percent(p) for p in (0.999, 0.62, 0.04, 0.0096, 0.003, 0.0004)] == [">99%", "62%", "4%", "1%", "0.3%",
                                                                             "<0.1%"]


def test_a_narrow_thumbnail_keeps_the_percentage() -> None:
    rank = relevance(SearchHit(1, "/x.png", MediaKind.IMAGE, 3.0, match_probability=0.04, match="good"))
    assert relevance_line(rank, len, 100) == "●●○  good match · 4%"
    assert relevance_line(rank, len, 15) == "●●○ good · 4%"


def test_relevance_bands_by_the_standing_over_the_library() -> None:
    """Without a probability the band is how far the item stands from the library's typical item (its fused
    z-score), the measure its words say, so the two agree (issue #44)."""
    def hit(score: float) -> SearchHit:
        return SearchHit(1, "/x.png", MediaKind.IMAGE, score)

    assert relevance(hit(12.3)).dots == 3 and "stands far out" in relevance(hit(12.3)).explanation
    assert relevance(hit(2.0)).label == "good match" and "clearly above" in relevance(hit(2.0)).explanation
    assert relevance(hit(0.8)).label == "weak match" and "somewhat closer" in relevance(hit(0.8)).explanation
    assert relevance(hit(0.1)).label == "weak match" and "about as close" in relevance(hit(0.1)).explanation


def test_the_inspector_says_the_relevance_in_words(qtbot, window) -> None:
    qtbot.waitUntil(lambda: bool(window.state.snapshot.indexed), timeout=3000)  # the library's count, read off thread
    start_typing_a_query(qtbot, window, "red circle")
    qtbot.waitUntil(lambda: window.inspector.explanation is not None, timeout=3000)
    text = window.inspector.relevance_label.text()
    hit = window.results_model.hit(0)
    said = percent(hit.match_probability)
    assert text.startswith(f"{hit.match} match · {said} — ranked 1st of ")
    assert f"an estimated {said} probability" in text


def test_the_models_guess_has_no_badge_but_stays_in_the_tooltip(qtbot, window, service: Workspace,
                                                                monkeypatch) -> None:
    """Issue #44 (#10): every item carries the model's guess, so a "model's guess" badge said nothing and covered
    the picture; the badges a person's work earns stay."""
    from app.widgets.results import ResultDelegate

    start_typing_a_query(qtbot, window, "blue")
    guessed, captioned = ids(window)[:2]
    service.annotations.add_caption(captioned, "my blue thing")
    with qtbot.waitSignal(window.results_model.page_loaded, timeout=3000):
        press(qtbot, Qt.Key.Key_Return)  # the search again: its hits carry the guess
    qtbot.waitUntil(lambda: state_of(window, guessed) is not None and "pseudo" in state_of(window, guessed).sources
                    and state_of(window, captioned) is not None and state_of(window, captioned).captioned,
                    timeout=3000)
    painted: list[str] = []
    badge = ResultDelegate._badge
    monkeypatch.setattr(ResultDelegate, "_badge", staticmethod(
        lambda painter, rect, text, *args, **kwargs: painted.append(text) or badge(painter, rect, text, *args,
                                                                                      **kwargs)))
    window.results.grab()  # paints every visible thumbnail with its badges
    assert "✎ captioned" in painted or "✎" in painted
    assert not {"model's guess", "guess"} & set(painted)
    model = window.results_model
    tooltip = model.data(model.index(model.row_of(guessed)), Qt.ItemDataRole.ToolTipRole)
    assert f"model's guess (not a caption): {service.library.item(guessed).guess}" in tooltip
