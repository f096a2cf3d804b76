"""#44 (point 12): quitting during indexing asks first and says the rest resumes at the next start; at the next
start the items left pending are indexed by themselves, with progress (they sat as "1752 pending" in the sidebar,
with no progress and no Resume, until File > Re-index)."""

from __future__ import annotations

from pathlib import Path

import pytest

import app.widgets.library as library_module
from engine.workspace import Workspace
from tests.gui.conftest import open_workspace, shown_window
from tests.standins import StandinEncoders, make_media_folder

RESUMING = "Resuming indexing"  # app.widgets.library.RESUMING


def interrupted_library(tmp_path: Path, qtbot, n: int = 70) -> tuple[Workspace, Path]:
    """A library whose indexing stopped part way (as a quit leaves it): some items indexed, the rest pending (the
    indexer commits batches of 32)."""
    service = open_workspace("interrupted", StandinEncoders(delay_s=0.01), models=False)
    folder = make_media_folder(tmp_path / "media", n_images=n, n_gifs=0, video=False, broken=False)
    service.library.add_root(folder)
    run = service.library.index()
    for _ in run:
        if service.library.counts().get("image", 0):
            break
    run.close()  # stopped mid-run, as the app's quit cancels it
    assert 0 < service.library.counts()["pending"] < n
    return service, folder


def test_a_restart_resumes_the_items_left_pending_with_progress(qtbot, tmp_path: Path) -> None:
    service, _ = interrupted_library(tmp_path, qtbot)
    pending = service.library.counts()["pending"]
    window = shown_window(qtbot, service)  # the next start opens the same library
    try:
        qtbot.waitUntil(lambda: window.library.is_indexing, timeout=5000)
        assert window.library.progress.isVisible() and window.library.cancel_button.isVisible()
        assert window.state.activity.startswith(RESUMING)  # the grid and the sidebar say what runs
        assert f"{pending} items were left to index" in window.statusBar().currentMessage()
        with qtbot.waitSignal(window.library.indexing_finished, timeout=20000) as finished:
            pass
        assert finished.args == ["done"]
        assert service.library.counts().get("pending", 0) == 0
        qtbot.waitUntil(lambda: "pending" not in window.library.counts_label.text(), timeout=5000)
    finally:
        window.shutdown()


def test_a_library_with_nothing_pending_does_not_index_at_start(qtbot, tmp_path: Path) -> None:
    service = open_workspace("three", models=False)
    service.library.add_root(make_media_folder(tmp_path / "media", n_images=3, n_gifs=0, video=False, broken=False))
    for _ in service.library.index():
        pass
    window = shown_window(qtbot, service)
    try:
        qtbot.waitUntil(lambda: window.state.snapshot.indexed == 3, timeout=5000)
        qtbot.wait(200)
        assert not window.library.is_indexing
    finally:
        window.shutdown()


def test_quitting_while_indexing_asks_and_says_it_resumes_next_start(
        qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    service, _ = interrupted_library(tmp_path, qtbot, n=100)
    asked: list[str] = []
    answer = [False]
    monkeypatch.setattr(library_module, "ask", lambda _parent, _title, text: (asked.append(text), answer[0])[1])
    window = shown_window(qtbot, service)
    try:
        qtbot.waitUntil(lambda: window.library.is_indexing, timeout=5000)
        window.request_quit()  # File > Quit (Ctrl+Q)
        assert len(asked) == 1 and "still indexing" in asked[0]
        assert "resumes by itself the next time Polyseek starts" in asked[0]
        assert window.isVisible() and window.library.is_indexing  # "No": it goes on
        answer[0] = True
        window.request_quit()
        assert len(asked) == 2 and not window.isVisible()
    finally:
        window.shutdown()
    assert service.library.counts()["pending"] > 0  # stopped; the next start resumes it (the test above)
