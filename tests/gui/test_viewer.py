"""The viewer: Enter (or a double-click) on a result shows it large; arrows step; GIFs play (issue #20)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QMovie
from PySide6.QtWidgets import QApplication

from engine.types import MediaKind
from engine.workspace import Workspace
from tests.gui.conftest import user_pairs
from tests.gui.test_keyboard import ALT, press, settle, start_typing_a_query


def open_from_the_grid(qtbot, window) -> None:
    press(qtbot, Qt.Key.Key_Down)  # search box -> grid
    press(qtbot, Qt.Key.Key_Return)  # the current result, large
    qtbot.waitUntil(lambda: window.viewer is not None and window.viewer.isVisible(), timeout=3000)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is not None
                    and window.viewer.isAncestorOf(QApplication.focusWidget()) or
                    QApplication.focusWidget() is window.viewer, timeout=3000)


def shown(window) -> bool:
    pixmap = window.viewer.picture.pixmap()
    return pixmap is not None and not pixmap.isNull()


def test_enter_opens_the_result_large_and_arrows_step(qtbot, window) -> None:
    start_typing_a_query(qtbot, window, "square")
    first = window.results.current_hit()
    open_from_the_grid(qtbot, window)
    assert window.viewer.hit == first
    qtbot.waitUntil(lambda: shown(window), timeout=3000)
    assert window.viewer.picture.picture_rect().width() > 160  # drawn larger than a grid thumbnail
    press(qtbot, Qt.Key.Key_Right)
    second = window.results.current_hit()
    assert second != first and window.viewer.hit == second
    press(qtbot, Qt.Key.Key_Left)
    assert window.viewer.hit == first


def test_a_gif_plays_in_the_viewer(qtbot, window) -> None:
    start_typing_a_query(qtbot, window, "bouncing ball")
    assert window.results.current_hit().kind is MediaKind.ANIMATION
    open_from_the_grid(qtbot, window)
    movie = window.viewer._movie
    assert movie is not None and movie.state() == QMovie.MovieState.Running and movie.frameCount() > 1
    qtbot.waitUntil(lambda: movie.currentFrameNumber() > 0, timeout=3000)  # it moves
    assert shown(window)


def test_a_video_plays_and_stops_when_the_viewer_closes(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "a blue square")  # the sliding square (a video)
    assert window.results.current_hit().kind is MediaKind.VIDEO
    open_from_the_grid(qtbot, window)
    assert window.viewer.playing_video
    frames: list[int] = []
    window.viewer._video.frame_ready.connect(lambda image: frames.append(image.cacheKey()))
    qtbot.waitUntil(lambda: len(frames) >= 3 and shown(window), timeout=5000)  # decoded frame after frame
    press(qtbot, Qt.Key.Key_Escape)
    assert not window.viewer.isVisible() and not window.viewer.playing_video


def test_a_stuck_video_decoder_does_not_freeze_closing_the_viewer(qtbot, window, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from app.widgets import viewer

    release = threading.Event()
    monkeypatch.setattr(viewer, "VIDEO_STOP_WAIT_MS", 50)
    monkeypatch.setattr(viewer.VideoReader, "run", lambda self: release.wait(20))  # deaf to interruption
    start_typing_a_query(qtbot, window, "a blue square")  # the sliding square (a video)
    open_from_the_grid(qtbot, window)
    assert window.viewer.playing_video
    press(qtbot, Qt.Key.Key_Escape)  # returns after the bounded wait, not when the decoder lets go
    assert not window.viewer.isVisible() and not window.viewer.playing_video
    assert "did not stop within 50 ms" in caplog.text and len(viewer._unstopped) == 1
    release.set()
    qtbot.waitUntil(lambda: not viewer._unstopped, timeout=5000)  # it ends, and is let go, on its own


def test_an_unreadable_video_falls_back_to_its_preview_frames(qtbot, window, service: Workspace,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.widgets.viewer.VideoReader.run", lambda self: self.failed.emit())
    start_typing_a_query(qtbot, window, "a blue square")  # the sliding square (a video)
    open_from_the_grid(qtbot, window)
    qtbot.waitUntil(lambda: len(window.viewer._frames) > 1 and window.viewer._timer.isActive(), timeout=3000)


def test_judge_from_the_viewer_and_show_in_folder(qtbot, window, service: Workspace,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[QUrl] = []
    monkeypatch.setattr("app.widgets.desktop.QDesktopServices.openUrl", lambda url: opened.append(url) or True)
    start_typing_a_query(qtbot, window, "red")
    first = window.results.current_hit()
    open_from_the_grid(qtbot, window)
    press(qtbot, Qt.Key.Key_R, ALT)
    settle(qtbot, window)
    assert ("red", first.media_id, -1) in user_pairs(service).values()
    assert window.viewer.hit is not None and window.viewer.hit.media_id != first.media_id  # moved on
    window.viewer.folder_button.click()
    assert [Path(u.toLocalFile()) for u in opened] == [Path(window.viewer.hit.path).parent]
