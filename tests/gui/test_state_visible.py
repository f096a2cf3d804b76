"""The state is visible (issue #31) and a clip opens where it matched (issue #30): the queries an item was accepted
or rejected for, in the grid and the viewer; the matched frame of a GIF or video in the viewer and the inspector."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QMovie

from app.widgets.clips import MATCH_HOLD_MS, SAMPLED_FRAMES, matched_frame
from app.widgets.hittext import browse_line, compact_verdict, verdict_lines
from app.widgets.resultsmodel import STATE_ROLE
from engine.library.browse import AnnotationState
from engine.media.sampling import FRAMES_PER_ITEM, frame_indices
from engine.types import MediaKind
from engine.workspace import Workspace
from tests.gui.conftest import media_ids
from tests.gui.test_browse import choose, wait_listed
from tests.gui.test_search import search, wait_explained


def by_name(service: Workspace, prefix: str) -> int:
    return next(m for m in media_ids(service) if service.library.media(m).path.name.startswith(prefix))


# --- which query an item was accepted or rejected for
def test_browse_line_names_the_latest_query_and_counts_the_others() -> None:
    state = AnnotationState(frozenset({"user"}), 0, True, (("a dog on a beach", 1), ("a cat", -1)))
    assert browse_line(state) == "✓ accepted for “a dog on a beach”  +1 more"
    assert verdict_lines(state) == ["✓ accepted for “a dog on a beach”", "✗ rejected for “a cat”"]
    assert browse_line(AnnotationState(frozenset({"user"}))) == "captioned"  # never judged: as before
    chars = compact_verdict(state.verdicts, lambda text, width: text[:width - 1] + "…" if len(text) > width else text,
                            len, 16)  # a cell 16 characters wide
    assert chars == "✓ “a dog o…”  +1"


def test_the_judged_filter_says_which_query_each_item_was_judged_for(qtbot, window, service: Workspace) -> None:
    ball, square = by_name(service, "red_circle"), by_name(service, "blue_")
    service.annotations.accept_pair("a red <b>ball</b>", ball)
    service.annotations.reject_pair("a green square", square)
    wait_listed(qtbot, window)
    choose(qtbot, window, window.browse_bar.annotation, "judged")
    model = window.results_model
    qtbot.waitUntil(lambda: model.rowCount() == 2 and all(model.state(m) is not None for m in (ball, square)),
                    timeout=3000)
    lines = {model.hit(r).media_id: browse_line(model.index(r).data(STATE_ROLE)) for r in range(2)}
    assert lines == {ball: "✓ accepted for “a red <b>ball</b>”", square: "✗ rejected for “a green square”"}
    tooltip = model.index(model.row_of(square)).data(Qt.ItemDataRole.ToolTipRole)
    assert "rejected for “a green square”" in tooltip
    assert "&lt;b&gt;" in model.index(model.row_of(ball)).data(Qt.ItemDataRole.ToolTipRole)  # a query is no markup
    window.results.select_row(model.row_of(ball))
    viewer = window.open_viewer()
    assert "✓ accepted for “a red <b>ball</b>”" in viewer.caption.text()
    window.results.select_row(model.row_of(square))  # the viewer follows the selection, and says its verdicts
    assert "✗ rejected for “a green square”" in viewer.caption.text()
    assert "accepted for" not in viewer.caption.text()


def test_a_verdict_given_in_the_viewer_shows_there_once_saved(qtbot, window, service: Workspace) -> None:
    search(qtbot, window, "red circle")
    viewer = window.open_viewer()
    first = viewer.hit
    service.annotations.accept_pair("red circle", first.media_id)  # as Alt+A would, then the grid re-reads the state
    window.results_model.refresh_states([first.media_id])
    qtbot.waitUntil(lambda: "accepted for “red circle”" in viewer.caption.text(), timeout=3000)


# --- the part of a clip that matched
@pytest.mark.parametrize("n_total", [1, 2, 5, 7, 8, 9, 16, 300])
def test_matched_frame_is_the_frame_indexing_sampled(n_total: int) -> None:
    assert SAMPLED_FRAMES == FRAMES_PER_ITEM
    assert [matched_frame(k, n_total) for k in range(SAMPLED_FRAMES)] == frame_indices(n_total)


def clip_hit(qtbot, window, service: Workspace, query: str, kind: MediaKind):
    """A clip of ``kind`` the tiny model matched by one of its sampled frames (not the first, so opening there is
    not opening at the start), selected. The untrained model's best frames are arbitrary, but fixed."""
    service.models.activate("tiny-pvse")
    search(qtbot, window, query)
    model = window.results_model
    row = next(r for r in range(model.rowCount()) if model.hit(r).kind is kind and (model.hit(r).frame or 0) > 0)
    window.results.select_row(row)
    hit = model.hit(row)
    assert 0 < hit.frame < FRAMES_PER_ITEM  # the sampled frame the model matched best
    return hit


def test_the_viewer_opens_a_gif_at_its_matched_frame_holds_it_then_plays(qtbot, window, service) -> None:
    hit = clip_hit(qtbot, window, service, "bouncing ball", MediaKind.ANIMATION)
    viewer = window.open_viewer()
    n_total = QMovie(hit.path).frameCount()
    assert viewer.opened_at == matched_frame(hit.frame, n_total) > 0
    assert viewer._movie.state() is QMovie.MovieState.NotRunning  # held on the matched frame
    assert viewer.picture.pixmap() is not None and not viewer.picture.pixmap().isNull()
    assert f"sampled frame {hit.frame + 1} of 8" in viewer.caption.text()
    qtbot.waitUntil(lambda: viewer._movie.state() is QMovie.MovieState.Running, timeout=MATCH_HOLD_MS + 2000)


def test_a_search_without_a_model_opens_the_gif_at_its_start(qtbot, window, service) -> None:
    search(qtbot, window, "bouncing ball")
    model = window.results_model
    row = next(r for r in range(model.rowCount()) if model.hit(r).kind is MediaKind.ANIMATION)
    window.results.select_row(row)
    viewer = window.open_viewer()
    assert model.hit(row).frame is None and viewer.opened_at is None
    assert viewer._movie.state() is QMovie.MovieState.Running and "Best match" not in viewer.caption.text()


def test_the_viewer_opens_a_video_at_its_matched_frame(qtbot, window, service) -> None:
    hit = clip_hit(qtbot, window, service, "sliding blue square", MediaKind.VIDEO)
    viewer = window.open_viewer()
    # decoded by OpenCV, or (when it cannot read the file) its preview frames: either way the matched one first
    n_total = service.library.details(hit.media_id).n_frames
    qtbot.waitUntil(lambda: viewer.opened_at is not None, timeout=5000)
    assert viewer.opened_at == matched_frame(hit.frame, n_total)


def test_the_inspector_outlines_the_matched_frame(qtbot, window, service) -> None:
    hit = clip_hit(qtbot, window, service, "bouncing ball", MediaKind.ANIMATION)
    wait_explained(qtbot, window)
    inspector = window.inspector
    sampled = inspector.explanation.item_attention.shape[1]
    strips = inspector.head_views
    assert strips and all(strip.matched == matched_frame(hit.frame, len(strip.frames), sampled) for strip in strips)
    assert f"frame {hit.frame + 1} of {sampled}" in inspector.match_label.text()
    strip = strips[0]
    strip.resize(560, strip.heightForWidth(560))
    image = strip.grab().toImage()
    cell = strip.width() / len(strip.frames)
    left = int(strip.matched * cell + 2)  # the outline's left edge, in the matched frame's cell
    assert image.pixelColor(left, strip.height() // 2).name() == strip.MATCH_INK.name()
    other = (strip.matched + 2) % len(strip.frames)
    assert image.pixelColor(int(other * cell + 2), strip.height() // 2).name() != strip.MATCH_INK.name()


def test_the_inspector_of_a_photo_outlines_no_frame(qtbot, window, service) -> None:
    service.models.activate("tiny-pvse")
    search(qtbot, window, "red circle")
    wait_explained(qtbot, window)
    assert window.inspector.matched_shown is None and window.inspector.match_label is None
    assert Path(window.inspector.hit.path).suffix == ".png"
