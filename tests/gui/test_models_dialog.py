"""Models > Manage models: make active, revert to the model before, rename, delete (asked first; never the active
one, the starter or zero-shot) (issue #20)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from PySide6.QtWidgets import QInputDialog, QMessageBox

from app.widgets.models import revert_target
from engine.workspace import Workspace
from tests.gui.test_search import search


def info(name: str, active: bool = False) -> SimpleNamespace:
    return SimpleNamespace(name=name, method="vse", path=None, metrics={}, active=active)


@pytest.mark.parametrize(("names", "active", "target"), [
    (["zero-shot", "starter", "vse-1", "vse-2"], "vse-2", "vse-1"),
    (["zero-shot", "starter", "vse-1"], "vse-1", "starter"),
    (["zero-shot", "starter", "vse-1"], "starter", "zero-shot"),
    (["zero-shot", "vse-1"], "zero-shot", None),
])
def test_revert_goes_to_the_model_registered_before_the_active_one(names, active, target) -> None:
    assert revert_target([info(n, n == active) for n in names]) == target


def open_dialog(qtbot, window, service: Workspace):
    window.refresh_models()
    qtbot.waitUntil(lambda: [(m.name, m.active) for m in window._models]
                    == [(m.name, m.active) for m in service.models.all()], timeout=3000)
    dialog = window.open_models()
    assert dialog.table.rowCount() == len(service.models.all())
    return dialog


def select(dialog, name: str) -> None:
    row = next(r for r in range(dialog.table.rowCount()) if dialog.table.item(r, 0).text() == name)
    dialog.table.selectRow(row)


def names(dialog) -> list[str]:
    return [dialog.table.item(r, 0).text() for r in range(dialog.table.rowCount())]


def active(service: Workspace) -> str:
    return next(m.name for m in service.models.all() if m.active)


def test_rename_keeps_the_model_active_and_refuses_a_taken_name(qtbot, window, service: Workspace,
                                                                monkeypatch, calls) -> None:
    service.models.activate("tiny-pvse")
    search(qtbot, window, "red")
    dialog = open_dialog(qtbot, window, service)
    select(dialog, "tiny-pvse")
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("  holiday   photos ", True))
    searches = len(calls.named("search.text"))
    dialog.rename_button.click()
    qtbot.waitUntil(lambda: "holiday photos" in names(dialog), timeout=3000)
    qtbot.waitUntil(lambda: len(calls.named("search.text")) > searches, timeout=3000)
    assert active(service) == "holiday photos" and "tiny-pvse" not in names(dialog)
    assert dialog.selected_name() == "holiday photos"  # the selection follows the model
    # the rename is awaited off the GUI thread (app/tasks.py): its message may follow the refreshed list
    qtbot.waitUntil(lambda: "Renamed tiny-pvse to holiday photos" in dialog.status.text(), timeout=3000)
    before = len(calls)
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("tiny-pcme", True))
    dialog.rename_button.click()
    assert "exists already" in dialog.status.text() and len(calls) == before
    assert {"holiday photos", "tiny-pcme"} <= {m.name for m in service.models.all()}
    select(dialog, "zero-shot")
    assert not dialog.rename_button.isEnabled() and not dialog.delete_button.isEnabled()


def test_delete_asks_first_and_the_active_model_cannot_be_deleted(qtbot, window, service: Workspace,
                                                                 monkeypatch) -> None:
    service.models.activate("tiny-pcme")
    dialog = open_dialog(qtbot, window, service)
    select(dialog, "tiny-pcme")
    assert not dialog.delete_button.isEnabled() and "active model" in dialog.delete_button.toolTip()
    select(dialog, "tiny-pvse")
    assert dialog.delete_button.isEnabled()
    asked: list[str] = []

    def answer(button):
        return lambda *a, **k: asked.append(a[2]) or button

    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.No))
    dialog.delete_button.click()
    assert len(asked) == 1 and "tiny-pvse" in asked[0] and "folder on disk is kept" in asked[0]
    assert "tiny-pvse" in [m.name for m in service.models.all()]
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Yes))
    dialog.delete_button.click()
    qtbot.waitUntil(lambda: "tiny-pvse" not in names(dialog), timeout=3000)
    assert [m.name for m in service.models.all()] == ["zero-shot", "tiny-pcme"] and active(service) == "tiny-pcme"
    assert window.search_bar.model_combo.count() == 2  # the search bar's picker follows


def test_revert_steps_back_to_the_previous_model_then_zero_shot(qtbot, window, service: Workspace) -> None:
    service.models.activate("tiny-pcme")
    dialog = open_dialog(qtbot, window, service)
    assert dialog.revert_button.text() == "Revert to tiny-pvse"
    dialog.revert_button.click()
    qtbot.waitUntil(lambda: dialog.revert_button.text() == "Revert to zero-shot", timeout=3000)
    assert active(service) == "tiny-pvse"
    dialog.revert_button.click()
    qtbot.waitUntil(lambda: not dialog.revert_button.isEnabled(), timeout=3000)
    assert active(service) == "zero-shot"


def test_the_starter_stays(qtbot, window, service: Workspace, tmp_path) -> None:
    import shutil

    from tests.gui.conftest import PVSE, tiny_models

    service.models.register(shutil.copytree(tiny_models()[PVSE], tmp_path / "starter-abc"), "starter")
    dialog = open_dialog(qtbot, window, service)
    select(dialog, "starter")
    assert dialog.activate_button.isEnabled()
    assert not dialog.rename_button.isEnabled() and not dialog.delete_button.isEnabled()
    assert "ships with Polyseek" in dialog.rename_button.toolTip()


def test_a_model_switched_by_another_process_shows_when_the_window_comes_back(qtbot, window,
                                                                            service: Workspace) -> None:
    """#44 (15): `polyseek models --activate` in a terminal while the app runs; the Model box kept the old one."""
    from PySide6.QtCore import Qt

    qtbot.waitUntil(lambda: window.search_bar.model_combo.count() > 0, timeout=3000)
    assert window.search_bar.model_combo.currentData() != "tiny-pcme"
    from engine.library.catalog import Catalog

    other = Catalog(service.state.catalog.path)  # another process wrote the catalog: this process is not told
    other.set_active_model("tiny-pcme")
    other.close()
    window._application_state_changed(Qt.ApplicationState.ApplicationInactive)  # away: nothing read
    window._application_state_changed(Qt.ApplicationState.ApplicationActive)  # back to the window
    qtbot.waitUntil(lambda: window.search_bar.model_combo.currentData() == "tiny-pcme", timeout=3000)
