"""What people expect of a photo viewer (issue #32): zoom and 1:1, video controls, the file's details, sorting by date
taken, dragging results out to other applications."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt, QThreadPool, QUrl
from PySide6.QtGui import QDrag, QMovie, QWheelEvent
from PySide6.QtWidgets import QApplication

from app.widgets.clips import FULL_SIZE, matched_frame
from app.widgets.images import ThumbnailCache
from app.widgets.viewer import Viewer
from app.widgets.zoomview import ZOOM_STEP
from engine.types import MediaKind, SearchHit
from engine.workspace import Workspace
from tests import mediagen as mg
from tests.standins import make_media_folder

PHOTO_SIZE = (1600, 1200)


def gradient(size: tuple[int, int]) -> np.ndarray:
    """A picture whose every pixel says where it is (red grows to the right, green downwards)."""
    width, height = size
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :].repeat(height, 0)
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None].repeat(width, 1)
    return np.stack([x, y, np.full_like(x, 60)], axis=-1).astype(np.uint8)


@pytest.fixture
def library(tmp_path: Path) -> Workspace:
    from tests.gui.conftest import open_workspace

    folder = make_media_folder(tmp_path / "media", n_images=2, n_gifs=1, video=False, broken=False)
    mg.make_jpeg_with_exif(folder / "camera.jpg", pixels=gradient(PHOTO_SIZE))
    service = open_workspace("viewer", models=False)
    service.library.add_root(folder)
    for _ in service.library.index():
        pass
    yield service
    service.close()


@pytest.fixture
def viewer(qtbot, library: Workspace) -> Viewer:
    pool = QThreadPool.globalInstance()
    cache = ThumbnailCache(pool)
    cache.set_service(library)
    viewer = Viewer(cache, pool)
    qtbot.addWidget(viewer)
    viewer.resize(1000, 700)
    viewer.show()
    return viewer


def hit_of(service: Workspace, name: str, frame: int | None = None) -> SearchHit:
    from tests.gui.conftest import by_name

    media_id = by_name(service, name)
    media = service.library.media(media_id)
    return SearchHit(media_id, str(media.path), media.kind, 0.0, frame=frame)


def key(qtbot, viewer: Viewer, which: Qt.Key, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
    viewer.picture.setFocus()
    qtbot.keyClick(viewer.picture, which, modifiers)


def open_photo(qtbot, viewer: Viewer, library: Workspace) -> None:
    viewer.show_hit(hit_of(library, "camera"))
    qtbot.waitUntil(lambda: viewer.picture.pixmap() is not None, timeout=5000)


# --- zoom


def test_a_photo_opens_fitted_and_1_shows_actual_pixels_read_at_full_size(qtbot, viewer, library) -> None:
    open_photo(qtbot, viewer, library)
    picture = viewer.picture
    assert picture.fitted and picture.source.width() == PHOTO_SIZE[0]
    assert picture.pixmap().width() <= picture.viewport().width()  # read scaled to the window first
    assert picture.scale() < 1 and not picture.pannable
    assert viewer.zoom_label.text() == f"Fit ({round(100 * picture.scale())} %)"
    key(qtbot, viewer, Qt.Key.Key_1)
    assert picture.scale() == 1.0 and viewer.zoom_label.text() == "100 %" and picture.pannable
    qtbot.waitUntil(lambda: picture.pixmap().width() == PHOTO_SIZE[0], timeout=5000)  # the file's own pixels
    assert picture.picture_rect().width() == PHOTO_SIZE[0]
    assert picture.horizontalScrollBar().maximum() == PHOTO_SIZE[0] - picture.viewport().width()
    key(qtbot, viewer, Qt.Key.Key_0)
    assert picture.fitted and picture.picture_rect().width() <= picture.viewport().width()


def test_plus_and_minus_zoom_by_steps_and_out_past_the_whole_picture_fits_it(qtbot, viewer, library) -> None:
    open_photo(qtbot, viewer, library)
    picture = viewer.picture
    fit = picture.scale()
    key(qtbot, viewer, Qt.Key.Key_Plus)
    assert picture.scale() == pytest.approx(fit * ZOOM_STEP) and not picture.fitted
    key(qtbot, viewer, Qt.Key.Key_Plus)
    assert picture.scale() == pytest.approx(fit * ZOOM_STEP**2)
    key(qtbot, viewer, Qt.Key.Key_Minus)
    key(qtbot, viewer, Qt.Key.Key_Minus)
    key(qtbot, viewer, Qt.Key.Key_Minus)
    assert picture.fitted and picture.scale() == pytest.approx(fit)


def wheel(widget, position: QPointF, notches: int, modifiers: Qt.KeyboardModifier) -> None:
    event = QWheelEvent(position, widget.mapToGlobal(position), QPoint(), QPoint(0, 120 * notches),
                        Qt.MouseButton.NoButton, modifiers, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_ctrl_wheel_zooms_at_the_pointer_and_a_drag_pans(qtbot, viewer, library) -> None:
    open_photo(qtbot, viewer, library)
    picture = viewer.picture
    rect = picture.picture_rect()
    pointer = QPointF(rect.left() + rect.width() * 0.8, rect.top() + rect.height() * 0.3)
    under = picture._to_picture(pointer)
    wheel(picture.viewport(), pointer, 3, Qt.KeyboardModifier.NoModifier)
    assert picture.fitted  # a plain wheel over a fitted picture zooms nothing
    wheel(picture.viewport(), pointer, 3, Qt.KeyboardModifier.ControlModifier)
    assert picture.scale() == pytest.approx(picture.fit_scale() * ZOOM_STEP**3)
    after = picture._to_picture(pointer)
    assert abs(after.x() - under.x()) < 2 and abs(after.y() - under.y()) < 2  # the same spot under the pointer
    bars = picture.horizontalScrollBar(), picture.verticalScrollBar()
    before = [bar.value() for bar in bars]
    viewport = picture.viewport()
    qtbot.mousePress(viewport, Qt.MouseButton.LeftButton, pos=QPoint(300, 300))
    qtbot.mouseMove(viewport, QPoint(200, 250))
    qtbot.mouseRelease(viewport, Qt.MouseButton.LeftButton, pos=QPoint(200, 250))
    assert [bar.value() for bar in bars] == [before[0] + 100, before[1] + 50]  # the picture follows the hand


def test_a_double_click_toggles_the_whole_picture_and_1_to_1(qtbot, viewer, library) -> None:
    open_photo(qtbot, viewer, library)
    picture = viewer.picture
    qtbot.mouseDClick(picture.viewport(), Qt.MouseButton.LeftButton, pos=picture.viewport().rect().center())
    assert picture.scale() == 1.0
    key(qtbot, viewer, Qt.Key.Key_Z)  # Lightroom's key: back to the whole picture
    assert picture.fitted


def test_the_next_photo_opens_fitted_again(qtbot, viewer, library) -> None:
    open_photo(qtbot, viewer, library)
    key(qtbot, viewer, Qt.Key.Key_1)
    viewer.show_hit(hit_of(library, "red"))
    qtbot.waitUntil(lambda: viewer.picture.pixmap() is not None, timeout=5000)
    assert viewer.picture.fitted


# --- details


def test_the_details_panel_says_what_the_file_is_and_when_and_with_what_it_was_taken(qtbot, viewer, library) -> None:
    open_photo(qtbot, viewer, library)
    qtbot.waitUntil(lambda: viewer.details_data is not None, timeout=5000)
    rows = viewer.details.rows()
    path = Path(hit_of(library, "camera").path)
    size = path.stat().st_size
    assert rows["Name"] == "camera.jpg" and rows["Folder"] == str(path.parent)
    assert rows["Kind"] == "Photo (JPEG)"
    assert rows["Dimensions"] == "1600 × 1200 (1.9 MP)"
    assert rows["File size"] == f"{size / 1000:.1f} KB ({size:,} bytes)"
    assert rows["Taken"] == "21 Jun 2014, 18:05:09 (UTC+02:00)"
    assert rows["Camera"] == "Canon EOS 5D Mark III"
    assert "Modified" in rows and "Duration" not in rows and viewer.details.note.text() == ""
    assert viewer.details.isVisible()
    key(qtbot, viewer, Qt.Key.Key_I)
    assert not viewer.details.isVisible() and not viewer.details_button.isChecked()
    key(qtbot, viewer, Qt.Key.Key_I)
    assert viewer.details.isVisible()


def test_a_photo_without_exif_says_so_and_a_clip_has_a_duration(qtbot, viewer, library) -> None:
    viewer.show_hit(hit_of(library, "red"))
    qtbot.waitUntil(lambda: viewer.details_data is not None, timeout=5000)
    rows = viewer.details.rows()
    assert "Taken" not in rows and "Camera" not in rows and "Modified" in rows
    assert "modification date" in viewer.details.note.text()
    viewer.show_hit(hit_of(library, "bouncing"))
    qtbot.waitUntil(lambda: viewer.details_data is not None, timeout=5000)
    rows = viewer.details.rows()
    assert rows["Kind"] == "Animation (GIF)" and rows["Duration"].endswith("· 7 frames")


# --- clips


def colour_at_centre(viewer: Viewer) -> tuple[int, int, int]:
    image = viewer.picture.pixmap().toImage()
    colour = image.pixelColor(image.width() // 2, image.height() // 2)
    return colour.red(), colour.green(), colour.blue()


def shows_frame(viewer: Viewer, index: int) -> bool:
    return all(abs(a - b) <= 24 for a, b in zip(colour_at_centre(viewer), mg.video_color(index), strict=True))


def open_video(qtbot, viewer: Viewer, folder: Path, frame: int | None = None) -> None:
    """A real MP4 (OpenCV writes it; the fake service cannot index it, so it is shown as a hit of its own)."""
    path = mg.make_video(folder / "clip.mp4", 40, size=(64, 48), fps=10.0)
    viewer.show_hit(SearchHit(999, str(path), MediaKind.VIDEO, 0.0, frame=frame))
    assert viewer.clip_controls.isVisible()
    qtbot.waitUntil(lambda: viewer._clip_length == 40 and viewer.picture.pixmap() is not None, timeout=5000)


def test_space_pauses_a_video_the_slider_seeks_and_the_text_says_where(qtbot, viewer, tmp_path) -> None:
    open_video(qtbot, viewer, tmp_path)
    assert viewer.playing and viewer.play_button.text() == "Pause"
    assert viewer.position_label.text().endswith(" / 0:04.0")  # 40 frames at 10 per second
    key(qtbot, viewer, Qt.Key.Key_Space)
    assert not viewer.playing and viewer.play_button.text() == "Play"
    viewer.seek_slider.setValue(30)  # as a drag or a click on the slider does
    qtbot.waitUntil(lambda: viewer.position == 30 and shows_frame(viewer, 30), timeout=5000)
    assert viewer.position_label.text() == "0:03.0 / 0:04.0"
    qtbot.wait(300)  # three frames' time: paused, it stays
    assert viewer.position == 30 and shows_frame(viewer, 30)
    key(qtbot, viewer, Qt.Key.Key_Space)
    assert viewer.playing
    qtbot.waitUntil(lambda: viewer.position > 30, timeout=5000)
    # a video stops at its end, as players do (the button changes when the reader's "ended" reaches the window,
    # after its last frame)
    qtbot.waitUntil(lambda: viewer.play_button.text() == "Play", timeout=5000)
    assert not viewer.playing and viewer.position == 39 and viewer.seek_slider.value() == 39
    key(qtbot, viewer, Qt.Key.Key_Space)  # and plays again from the start
    qtbot.waitUntil(lambda: viewer.playing and viewer.position < 30, timeout=5000)


def test_a_video_still_opens_at_its_matched_frame_and_space_keeps_it_there(qtbot, viewer, tmp_path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.widgets.clipplayback.MATCH_HOLD_MS", 200)
    monkeypatch.setattr("app.widgets.clips.MATCH_HOLD_MS", 200)  # the video decoding thread holds it too
    path = mg.make_video(tmp_path / "clip.mp4", 40, size=(64, 48), fps=10.0)
    viewer.show_hit(SearchHit(999, str(path), MediaKind.VIDEO, 0.0, frame=5))
    key(qtbot, viewer, Qt.Key.Key_Space)  # paused at once: the matched frame still comes, and it stays there
    target = matched_frame(5, 40)
    qtbot.waitUntil(lambda: viewer.opened_at == target and shows_frame(viewer, target), timeout=5000)
    qtbot.wait(400)  # past the hold: it does not play on
    assert not viewer.playing and viewer.position == target and shows_frame(viewer, target)
    key(qtbot, viewer, Qt.Key.Key_Space)
    qtbot.waitUntil(lambda: viewer.position > target, timeout=5000)


def test_zooming_a_video_past_the_window_decodes_its_frames_at_full_size(qtbot, viewer, tmp_path) -> None:
    path = mg.make_video(tmp_path / "big.mp4", 20, size=(640, 480), fps=10.0)
    viewer.resize(500, 400)
    viewer.show_hit(SearchHit(999, str(path), MediaKind.VIDEO, 0.0))
    qtbot.waitUntil(lambda: viewer.picture.pixmap() is not None, timeout=5000)
    key(qtbot, viewer, Qt.Key.Key_Space)
    assert viewer.picture.source.width() == 640 and viewer.picture.pixmap().width() < 640  # decoded to the window
    key(qtbot, viewer, Qt.Key.Key_1)
    assert viewer._video.box == FULL_SIZE
    qtbot.waitUntil(lambda: viewer.picture.pixmap().width() == 640, timeout=5000)  # the paused frame, redrawn
    assert not viewer.playing


def test_a_gif_pauses_and_seeks_both_ways(qtbot, viewer, library) -> None:
    viewer.show_hit(hit_of(library, "bouncing"))
    movie = viewer._movie
    assert movie is not None and movie.frameCount() == 7 and viewer.playing
    key(qtbot, viewer, Qt.Key.Key_Space)
    assert movie.state() is QMovie.MovieState.Paused and viewer.play_button.text() == "Play"
    viewer.seek_slider.setValue(5)
    assert movie.currentFrameNumber() == 5 and viewer.position_label.text() == "frame 6 of 7"
    viewer.seek_slider.setValue(1)
    assert movie.currentFrameNumber() == 1 and viewer.position == 1
    key(qtbot, viewer, Qt.Key.Key_Space)
    assert movie.state() is QMovie.MovieState.Running


# --- the grid: sort by date taken, drag out


@pytest.fixture
def dated(tmp_path: Path) -> Workspace:
    """Three photos modified in the order a, b, c; taken: a in 2014, c (no EXIF: its mtime, 2019), b in 2022."""
    import os
    from datetime import datetime

    folder = tmp_path / "dated"
    folder.mkdir()
    for name, taken, when in (("a", "2014:06:21 18:05:09", 2023), ("b", "2022:03:04 05:06:07", 2018),
                              ("c", None, 2019)):
        path = mg.make_jpeg_with_exif(folder / f"{name}.jpg", taken=taken, offset=None, colour=(40 * len(name), 90, 9))
        stamp = datetime(when, 1, 1).timestamp()
        os.utime(path, (stamp, stamp))
    from tests.gui.conftest import indexed_service

    return indexed_service(tmp_path / "fake-dated", folder)


def test_the_library_sorts_by_date_taken(qtbot, dated: Workspace, monkeypatch) -> None:
    from tests.gui.conftest import CallLog, shown_window
    from tests.gui.test_browse import choose, names, wait_listed

    calls = CallLog(dated, monkeypatch, "library.browse")
    window = shown_window(qtbot, dated)
    try:
        wait_listed(qtbot, window)
        assert window.browse_bar.sort.currentText() == "Newest first"
        assert names(window) == ["b.jpg", "c.jpg", "a.jpg"]  # newest taken first (issue #44: it was the file date)
        choose(qtbot, window, window.browse_bar.sort, "oldest")
        assert names(window) == ["a.jpg", "c.jpg", "b.jpg"]
        choose(qtbot, window, window.browse_bar.sort, "modified")
        assert names(window) == ["a.jpg", "c.jpg", "b.jpg"]  # the newest file first
        assert calls.has("library.browse", top=60, offset=0, sort="modified", folder=None, kind=None,
                         annotation="all")
        choose(qtbot, window, window.browse_bar.sort, "modified-oldest")
        assert names(window) == ["b.jpg", "c.jpg", "a.jpg"]
    finally:
        window.shutdown()


def test_the_sort_chosen_is_the_sort_of_the_next_start(qtbot, dated: Workspace, monkeypatch) -> None:
    """Issue #44: the order picked in the browse bar was forgotten at a restart."""
    from app.settings import settings_file
    from tests.gui.conftest import CallLog, shown_window

    calls = CallLog(dated, monkeypatch, "library.browse")
    from tests.gui.test_browse import choose, names, wait_listed

    first = shown_window(qtbot, dated)
    try:
        wait_listed(qtbot, first)
        choose(qtbot, first, first.browse_bar.sort, "modified-oldest")
    finally:
        first.save_state()  # what closing the window does
        first.shutdown()
    assert "modified-oldest" in settings_file().read_text(encoding="utf-8")  # in the INI file, not only in memory
    calls.clear()
    second = shown_window(qtbot, dated)
    try:
        wait_listed(qtbot, second)
        assert second.browse_bar.sort.currentData() == "modified-oldest"
        assert names(second) == ["b.jpg", "c.jpg", "a.jpg"]
        assert [args["sort"] for args in calls.named("library.browse")] == ["modified-oldest"]  # listed once so
    finally:
        second.shutdown()


def test_a_saved_sort_this_version_does_not_offer_lists_newest_first(qtbot, dated: Workspace) -> None:
    from app.settings import GuiSettings
    from tests.gui.conftest import shown_window
    from tests.gui.test_browse import names, wait_listed

    settings = GuiSettings()
    settings.browse_sort = "taken"  # a name an earlier build offered
    settings.sync()
    window = shown_window(qtbot, dated)
    try:
        wait_listed(qtbot, window)
        assert window.browse_bar.sort.currentData() == "newest" and window.session.browse.sort == "newest"
        assert names(window) == ["b.jpg", "c.jpg", "a.jpg"]
    finally:
        window.shutdown()


def test_results_drag_out_as_files(qtbot, window, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.gui.test_browse import wait_listed

    wait_listed(qtbot, window)
    view, model = window.results, window.results_model
    hits = [model.hit(0), model.hit(2)]
    assert all(model.flags(model.index(r)) & Qt.ItemFlag.ItemIsDragEnabled for r in (0, 2))
    assert not model.supportedDragActions() & Qt.DropAction.MoveAction  # the file stays in the library
    mime = model.mimeData([model.index(0), model.index(2)])
    assert [Path(url.toLocalFile()) for url in mime.urls()] == [Path(h.path) for h in hits]
    assert all(url.scheme() == "file" for url in mime.urls())
    assert mime.text().splitlines() == [h.path for h in hits]
    dragged: list[tuple[list[QUrl], Qt.DropAction]] = []
    monkeypatch.setattr(QDrag, "exec", lambda drag, actions, default=None: dragged.append(
        (drag.mimeData().urls(), actions)) or Qt.DropAction.CopyAction)
    view.select_row(0)
    view.selectionModel().select(model.index(2), view.selectionModel().SelectionFlag.Select)
    view.startDrag(Qt.DropAction.CopyAction | Qt.DropAction.MoveAction)
    urls, actions = dragged[0]
    assert [Path(u.toLocalFile()) for u in urls] == [Path(h.path) for h in hits]
    assert actions & Qt.DropAction.CopyAction and not actions & Qt.DropAction.MoveAction
    assert view.dragEnabled()
