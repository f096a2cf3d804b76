"""#44 (point 19): the first search after a start answers at once. The library builds what a search needs (the
encoders, its indexes, the model's vectors) in the background when it opens and again when a job that changed
it ends, and a window that closes meanwhile cancels that work instead of leaving it running."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.gui.conftest import CallLog, indexed_service, replace_call, shown_window
from tests.standins import make_media_folder


def small_folder(path: Path) -> Path:
    return make_media_folder(path, n_images=3, n_gifs=0, video=False, broken=False)


def test_the_search_is_warmed_when_the_library_opens_and_again_after_indexing(qtbot, tmp_path: Path,
                                                                              monkeypatch) -> None:
    service = indexed_service(tmp_path / "fake", small_folder(tmp_path / "a"))
    calls = CallLog(service, monkeypatch, "search.warm", "search.text")
    window = shown_window(qtbot, service)
    try:
        qtbot.waitUntil(lambda: len(calls.named("search.warm")) == 1, timeout=5000)  # on opening, before any query
        assert not calls.named("search.text")
        with qtbot.waitSignal(window.library.indexing_finished, timeout=10000):
            window.library.add_folder(small_folder(tmp_path / "b"))
        qtbot.waitUntil(lambda: len(calls.named("search.warm")) == 2, timeout=5000)  # the job made them stale
    finally:
        window.shutdown()
        service.close()


def test_closing_the_window_cancels_a_warm_up_in_progress(qtbot, tmp_path: Path, monkeypatch) -> None:
    service = indexed_service(tmp_path / "fake", small_folder(tmp_path / "a"))
    gate = threading.Event()  # a warm-up that runs until the gate opens
    replace_call(service, monkeypatch, "search.warm",
                 lambda real: lambda cancel=None: gate.wait(10) and real(cancel))
    calls = CallLog(service, monkeypatch, "search.warm")
    window = shown_window(qtbot, service)
    qtbot.waitUntil(lambda: len(calls.named("search.warm")) == 1, timeout=5000)
    cancel = calls.named("search.warm")[0]["cancel"]
    assert cancel is not None and not cancel.cancelled
    threading.Timer(0.5, gate.set).start()  # the warm-up ends a moment after the close began
    window.shutdown()  # cancels it, then waits for the pool
    assert cancel.cancelled
    service.close()
