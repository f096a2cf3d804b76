"""The search loop a user lives, in the window over the real engine (issue #45: GUI tests on the real parts; the
ranking of #40): a search's hits carry calibrated words, the inspector reads the numbers that ranked the item, a
caption typed in the window finds its item at once, and made-up words say there is no good match.

Real ONNX features of six generated pictures (the test assets), zero-shot ranking with its shipped calibration.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.mainwindow import MainWindow
from app.settings import GuiSettings
from tests.gui.fakes import make_media_folder

service_module = pytest.importorskip("engine.workspace")
NAME = "Zorblax"  # a word no encoder knows: what finds the item is the caption the user typed


@pytest.fixture
def real(qtbot, tmp_path: Path, assets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    monkeypatch.setenv("POLYSEEK_ASSETS", str(assets_dir))
    folder = make_media_folder(tmp_path / "media", n_images=6, n_gifs=0, video=False, broken=False)
    service = service_module.Workspace.open("ranking", assets_dir)
    for _ in service.library.index([folder]):
        pass
    window = MainWindow(GuiSettings(), service)
    qtbot.addWidget(window)
    window.show()
    yield window, service
    window.shutdown()
    service.close()


def _search(qtbot, window, text: str) -> None:
    with qtbot.waitSignal(window.results_model.page_loaded, timeout=30000):
        window.search_bar.edit.setText(text)
        qtbot.keyClick(window.search_bar.edit, Qt.Key.Key_Return)


def _hits(window) -> list:
    model = window.results_model
    return [model.hit(row) for row in range(model.rowCount())]


def _explained(qtbot, window, row: int) -> str:
    window.results.setCurrentIndex(window.results_model.index(row))
    qtbot.waitUntil(lambda: window.inspector.explanation is not None and not window.inspector.is_loading,
                    timeout=30000)
    return window.inspector.notes_label.text()


def test_a_caption_typed_in_the_window_finds_its_item_and_the_inspector_says_why(qtbot, real) -> None:
    window, service = real
    _search(qtbot, window, "a red circle")
    hits = _hits(window)
    assert len(hits) == 6 and all(h.match in ("strong", "good", "weak") for h in hits)
    assert all(0.0 <= h.match_probability <= 1.0 for h in hits)
    assert "the chance that this is what the search asks for" in _explained(qtbot, window, 0)

    target = hits[-1].media_id  # the item this search ranks last gets the user's caption
    window.results.setCurrentIndex(window.results_model.index(len(hits) - 1))
    qtbot.waitUntil(lambda: window.annotate.caption_edit.isEnabled(), timeout=10000)
    qtbot.keyClicks(window.annotate.caption_edit, f"{NAME} asleep on the windowsill")
    qtbot.keyClick(window.annotate.caption_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not window.annotate.busy, timeout=10000)
    assert f"{NAME} asleep on the windowsill" in [c.text for c in service.annotations.captions(target)]

    _search(qtbot, window, NAME)
    first = _hits(window)[0]
    assert first.media_id == target and first.match in ("strong", "good")
    notes = _explained(qtbot, window, 0)
    assert "what you wrote on it" in notes


def test_made_up_words_say_there_is_no_good_match(qtbot, real) -> None:
    window, _ = real
    _search(qtbot, window, "blorf quizzle wammo")
    assert _hits(window) and all(h.match == "weak" for h in _hits(window))
    qtbot.waitUntil(lambda: "No good match" in window.statusBar().currentMessage(), timeout=10000)
