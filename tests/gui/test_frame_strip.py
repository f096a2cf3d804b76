"""Issue #44 (points 13 and 16): the inspector's frame strip shows every frame in a narrow inspector, and a frame
clicked there opens the viewer at that frame."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QMovie

from app.widgets.clips import matched_frame
from engine.types import MediaKind
from tests.gui.test_search import wait_explained
from tests.gui.test_state_visible import clip_hit


def frame_count(path) -> int:
    import cv2

    capture = cv2.VideoCapture(str(path))
    try:
        return int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    finally:
        capture.release()


def explained_strips(qtbot, window, service, query: str, kind: MediaKind):
    hit = clip_hit(qtbot, window, service, query, kind)
    wait_explained(qtbot, window)
    seen: list[tuple] = []

    def settled() -> bool:  # the inspector may lay out (or rebuild) its strips again on a busy machine: use them
        qtbot.wait(20)       # once they rest
        strips = window.inspector.head_views
        seen.append(tuple((id(s), s.width()) for s in strips if s.isVisible()))
        return bool(seen[-1]) and len(seen[-1]) == len(strips) and len(seen) > 3 and len(set(seen[-4:])) == 1

    qtbot.waitUntil(settled, timeout=15000)  # a hang guard: a loaded machine lays out slowly
    return hit, window.inspector.head_views


def test_every_frame_of_the_strip_is_visible_in_a_narrow_inspector(qtbot, window, service) -> None:
    _, strips = explained_strips(qtbot, window, service, "bouncing ball", MediaKind.ANIMATION)
    inspector = window.inspector
    inspector.setFixedWidth(inspector.minimumWidth())  # the narrowest the panel goes
    viewport = inspector.viewport()
    qtbot.waitUntil(lambda: inspector._body.width() <= viewport.width(), timeout=15000)  # a hang guard
    for strip in strips:
        left = strip.mapTo(viewport, QPoint(0, 0)).x()
        right = strip.mapTo(viewport, QPoint(strip.width() - 1, 0)).x()
        assert 0 <= left and right < viewport.width()  # the whole strip, so each of its frames, in sight
        assert strip.width() / len(strip.frames) >= 20  # and each frame wide enough to see


def test_clicking_a_frame_of_the_strip_opens_the_viewer_at_that_frame(qtbot, window, service) -> None:
    hit, strips = explained_strips(qtbot, window, service, "bouncing ball", MediaKind.ANIMATION)
    strip = strips[0]
    sampled = window.inspector.explanation.item_attention.shape[1]
    clicked = (strip.matched + 2) % len(strip.frames)  # not the best match: the viewer goes where it is told
    sample = int((clicked + 0.5) * sampled / len(strip.frames))
    assert sample != hit.frame
    cell = strip.width() / len(strip.frames)
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=QPoint(int((clicked + 0.5) * cell), strip.height() // 2))
    viewer = window.viewer
    assert viewer is not None and viewer.isVisible() and viewer.hit.media_id == hit.media_id
    n_total = QMovie(hit.path).frameCount()
    assert viewer.opened_at == viewer.position == matched_frame(sample, n_total)
    assert f"Opened at sampled frame {sample + 1} of 8" in viewer.caption.text()
    window._show_hit(hit)  # the same item selected again (a results page read again under it): it stays there
    assert viewer.opened_at == matched_frame(sample, n_total) and viewer.start_sample == sample
    window.results.select_row(window.results_model.row_of(hit.media_id))
    viewer.show_hit(hit)  # Enter on the result again: back to the best match
    assert viewer.opened_at == matched_frame(hit.frame, n_total)


def test_clicking_a_frame_of_a_video_opens_the_viewer_at_that_frame(qtbot, window, service) -> None:
    hit, strips = explained_strips(qtbot, window, service, "sliding blue square", MediaKind.VIDEO)
    strip = strips[0]
    sampled = window.inspector.explanation.item_attention.shape[1]
    clicked = (strip.matched + 1) % len(strip.frames)
    sample = int((clicked + 0.5) * sampled / len(strip.frames))
    assert sample != hit.frame
    cell = strip.width() / len(strip.frames)
    qtbot.mouseClick(strip, Qt.MouseButton.LeftButton, pos=QPoint(int((clicked + 0.5) * cell), strip.height() // 2))
    viewer = window.viewer
    # decoded by OpenCV, or (when it cannot read the file) its preview frames: either way the clicked one first, of
    # the frames that source has (OpenCV's count of the file's frames, or the previews')
    qtbot.waitUntil(lambda: viewer.opened_at is not None and viewer._clip_length > 0, timeout=5000)
    assert viewer._clip_length in (len(service.library.preview_frames(hit.media_id)), frame_count(hit.path))
    assert viewer.opened_at == matched_frame(sample, viewer._clip_length)
