"""File > Purge missing items: the confirmation shows the counts; No deletes nothing; Yes deletes the missing items
and their annotations after writing a snapshot (issue #21). Real service, catalog rows made directly."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox

from app.mainwindow import MainWindow
from app.settings import GuiSettings

service_module = pytest.importorskip("engine.workspace")


@pytest.fixture
def window_and_service(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("POLYSEEK_ASSETS", str(tmp_path / "no-assets"))  # never the developer's assets
    service = service_module.Workspace.open("purge-test")
    catalog = service.state.catalog
    root = catalog.add_root(tmp_path / "drive")
    gone, _ = catalog.upsert_media(tmp_path / "drive" / "gone.jpg", 10, 1, "hash-gone", root)
    here, _ = catalog.upsert_media(tmp_path / "drive" / "here.jpg", 11, 1, "hash-here", root)
    catalog.add_caption(gone, "a caption of a file that is gone", "user")
    catalog.add_pair(gone, "gone", 1, "user")
    catalog.add_caption(here, "still here", "user")
    catalog.mark_missing([tmp_path / "drive" / "gone.jpg"])
    window = MainWindow(GuiSettings(), service)
    qtbot.addWidget(window)
    yield window, service
    window.shutdown()
    service.close()


def test_purge_asks_with_the_counts_and_no_keeps_everything(qtbot, window_and_service, monkeypatch):
    window, service = window_and_service
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or QMessageBox.StandardButton.No)
    task = window._confirm_purge_missing()
    qtbot.waitUntil(task.done, timeout=10000)  # the counts are read off the GUI thread, then the question asked
    assert len(asked) == 1 and "Delete 1 item " in asked[0] and "1 caption and 1 accepted/rejected pair?" in asked[0]
    assert service.library.missing_summary() == (1, 1, 1) and service.annotations.snapshots() == []


def test_purge_yes_deletes_the_missing_items_after_a_snapshot(qtbot, window_and_service, monkeypatch):
    window, service = window_and_service
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    window._confirm_purge_missing()
    qtbot.waitUntil(lambda: service.library.missing_summary() == (0, 0, 0), timeout=10000)
    assert [c.text for c in service.state.catalog.iter_captions()] == ["still here"]
    assert len(service.annotations.snapshots()) == 1
