"""Issue #44 point 1: a search typed while a first start prepares the pretrained assets waits for them (the header
says so, with the preparation's progress) and runs by itself once they are there: no "Search failed … run
`polyseek prepare` first"; and the Model box names the starter the library will search with from the start."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.main import DEMO_ACTIVITY
from tests.gui.conftest import CallLog, open_workspace, shown_window
from tests.standins import StandinEncoders


@pytest.fixture
def first_start(qtbot, tmp_path: Path, media_folder: Path, monkeypatch):
    """A fresh home: the assets are missing until the next index run has prepared them, once ``gate`` is set."""
    encoders = StandinEncoders(prepared=False)
    encoders.gate = gate = threading.Event()
    service = open_workspace("first", encoders, models=False)
    service.library.add_root(media_folder)
    calls = CallLog(service, monkeypatch, "search.text")
    win = shown_window(qtbot, service)
    failures: list[str] = []
    win.results_model.search_failed.connect(failures.append)
    yield win, calls, gate, failures
    gate.set()
    win.shutdown()
    service.close()


def type_query(qtbot, win, text: str) -> None:
    win.search_bar.edit.setText(text)
    qtbot.keyClick(win.search_bar.edit, Qt.Key.Key_Return)


def test_a_search_typed_while_the_assets_are_prepared_runs_when_they_are_ready(qtbot, first_start) -> None:
    win, calls, gate, failures = first_start
    win.library.index()
    qtbot.waitUntil(lambda: win.library.last_progress is not None and win.library.last_progress.done == 40,
                    timeout=5000)
    type_query(qtbot, win, "red circle")
    qtbot.waitUntil(lambda: "runs when ready" in win.empty_label.text(), timeout=5000)
    header = win.empty_label.text()
    assert "40 %" in header and "“red circle”" in header, header
    assert win.library.progress.isVisible()  # the preparation's progress in view
    qtbot.wait(200)
    assert not failures and not win.statusBar().currentMessage().startswith("Search failed")
    assert not calls.named("search.text")  # held, not tried and failed
    gate.set()
    qtbot.waitUntil(lambda: win.results_model.rowCount() > 0 and not win.results_model.is_loading, timeout=10000)
    assert win.session.query == "red circle"
    assert "runs when ready" not in win.empty_label.text()
    assert not failures and not win.statusBar().currentMessage().startswith("Search failed")


def test_a_search_typed_before_the_first_index_run_starts_waits_too(qtbot, first_start) -> None:
    """The demo library is being set up: the index run (and the preparation) has not started yet."""
    win, calls, gate, failures = first_start
    qtbot.waitUntil(lambda: win.results_model.rowCount() > 0 or not win.results_model.is_loading, timeout=5000)
    win.state.set_activity(DEMO_ACTIVITY)
    type_query(qtbot, win, "blue square")
    qtbot.waitUntil(lambda: "runs when ready" in win.empty_label.text(), timeout=5000)
    win.library.index()
    win.state.set_activity("")
    gate.set()
    qtbot.waitUntil(lambda: win.results_model.rowCount() > 0 and win.session.query == "blue square"
                    and "runs when ready" not in win.empty_label.text(), timeout=10000)
    assert not failures and not win.statusBar().currentMessage().startswith("Search failed")


def test_with_nothing_preparing_the_assets_a_search_still_fails_and_says_why(qtbot, first_start) -> None:
    win, _calls, _gate, failures = first_start
    type_query(qtbot, win, "red circle")
    qtbot.waitUntil(lambda: bool(failures), timeout=5000)
    assert "polyseek prepare" in failures[0]
    assert win.statusBar().currentMessage().startswith("Search failed")


def test_the_model_box_names_the_starter_while_the_assets_are_prepared(qtbot, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh home over the real service: the starter waits for the assets to be registered, and the Model box
    names it (not "zero-shot (untrained)") from the first moment, as the library will search with it."""
    workspace = pytest.importorskip("engine.workspace")
    from engine.search.starter import shipped_starter

    if shipped_starter() is None:
        pytest.skip("this installation ships no starter model")
    monkeypatch.setenv("POLYSEEK_ASSETS", str(tmp_path / "no-assets-yet"))
    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    service = workspace.Workspace.open("first-start")
    try:
        win = shown_window(qtbot, service)
        combo = win.search_bar.model_combo
        qtbot.waitUntil(lambda: combo.count() >= 2, timeout=5000)
        assert combo.currentData() == "starter", combo.currentText()
        assert win.state.snapshot.active_model == "starter"
        win.shutdown()
    finally:
        service.close()
