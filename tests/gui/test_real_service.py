"""The window over the real ``engine.workspace.Workspace`` (no prepared model assets needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.mainwindow import MainWindow
from app.settings import GuiSettings
from tests.gui.fakes import make_media_folder

service_module = pytest.importorskip("engine.workspace")


@pytest.fixture
def real_window(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("POLYSEEK_ASSETS", str(tmp_path / "no-assets"))  # never the developer's assets
    service = service_module.Workspace.open("gui-test")
    window = MainWindow(GuiSettings(), service)
    qtbot.addWidget(window)
    yield window, service
    window.shutdown()
    service.close()


def test_library_and_models_come_from_the_real_service(qtbot, real_window, tmp_path: Path) -> None:
    window, service = real_window
    folder = make_media_folder(tmp_path / "media", n_images=2, n_gifs=0, video=False, broken=False)
    service.library.add_root(folder)
    window.library.refresh()
    qtbot.waitUntil(lambda: window.library.roots_list.count() == 1, timeout=5000)
    assert window.library.roots_list.item(0).text() == str(folder.resolve())
    combo = window.search_bar.model_combo
    qtbot.waitUntil(lambda: combo.count() >= 1, timeout=5000)
    assert combo.currentData() == "zero-shot"
    assert window.search_bar.cutoff.isEnabled()  # the shipped calibration (#40): zero-shot results carry a probability


def test_search_without_assets_fails_visibly_not_fatally(qtbot, real_window) -> None:
    window, _ = real_window
    messages: list[str] = []
    window.results_model.search_failed.connect(messages.append)
    window.results_model.page_loaded.connect(lambda n: messages.append(f"loaded {n}"))
    window.search_bar.edit.setText("a dog")
    qtbot.keyClick(window.search_bar.edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(messages), timeout=10000)
    assert window.results_model.rowCount() == 0
    # an empty result ("loaded 0") would hide the missing assets: the search must fail and say how to fix it
    assert len(messages) == 1 and not messages[0].startswith("loaded"), messages
    assert "assets are missing" in messages[0] and "polyseek prepare" in messages[0]
    assert window.statusBar().currentMessage().startswith("Search failed: ")


@pytest.mark.slow
def test_annotation_transfer_and_suggestions_with_the_real_service(qtbot, tmp_path: Path, assets_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Export (caption folder and COCO), import back, and "What to annotate next", all through the window
    over the real engine (real ONNX features of three generated pictures)."""
    import json

    from engine.library.captionfolder import load_caption_folder

    monkeypatch.setenv("POLYSEEK_ASSETS", str(assets_dir))
    folder = make_media_folder(tmp_path / "media", n_images=3, n_gifs=0, video=False, broken=False)
    service = service_module.Workspace.open("transfer")
    window = None
    try:
        service.library.add_root(folder)
        for _ in service.library.index():
            pass
        ids = sorted({h.media_id for h in service.search.text("a shape", top=10)})
        service.annotations.add_caption(ids[0], "a red circle on a white table")
        lost = service.annotations.add_caption(ids[1], "a green square")
        service.annotations.accept_pair("something red", ids[0])
        service.annotations.reject_pair("a blue triangle", ids[1])
        window = MainWindow(GuiSettings(), service)
        qtbot.addWidget(window)
        qtbot.waitUntil(lambda: window.annotate.suggestions.count() > 0, timeout=30000)
        assert window.annotate.suggested_ids() == [ids[2]]  # only the uncaptioned item is suggested
        with qtbot.waitSignal(window.annotations_transferred, timeout=30000) as exported:
            window.export_annotations(tmp_path / "out", "folder")
        assert exported.args == ["export", 2]
        assert sorted(t for _, t in load_caption_folder(tmp_path / "out").captions) == [
            "a green square", "a red circle on a white table"]
        with qtbot.waitSignal(window.annotations_transferred, timeout=30000) as exported:
            window.export_annotations(tmp_path / "out.json", "coco")
        assert exported.args == ["export", 2] and len(json.loads((tmp_path / "out.json").read_text())["images"]) == 2
        assert "Exported 2 captions, 1 accepted and 1 rejected results" in window.statusBar().currentMessage()
        assert sorted((p["query"], p["kind"]) for p in json.loads((tmp_path / "out.json").read_text())["pairs"]) == [
            ("a blue triangle", "reject"), ("something red", "accept")]
        service.annotations.delete_caption(lost)
        with qtbot.waitSignal(window.annotations_transferred, timeout=30000) as imported:
            window.import_annotations(tmp_path / "out.json")
        assert imported.args == ["import", 1]  # the lost caption comes back; the other is not doubled
        assert "a green square" in [c.text for c in service.annotations.captions(ids[1])]
    finally:
        if window is not None:
            window.shutdown()
        service.close()
