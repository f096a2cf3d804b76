"""Issue #44 point 9: after "Make active" in the model manager the Active column stays in view (it scrolled out
behind a long figure)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.workspace import Workspace
from tests.gui.test_models_dialog import open_dialog, select

LONG = {"rsum": 250.8, "n_media": 1500, "n_captions": 3500, "split": "a-validation-split-with-a-very-long-name"}


def active_column(dialog) -> int:
    header = dialog.table.horizontalHeaderItem
    return next(c for c in range(dialog.table.columnCount()) if header(c).text() == "Active")


def test_the_active_column_stays_in_view_after_make_active(qtbot, window, service: Workspace, tmp_path) -> None:
    import json
    import shutil

    from tests.gui.conftest import tiny_models

    for name, folder in tiny_models().items():  # the same models, with long figures
        copy = shutil.copytree(folder, tmp_path / name)
        (copy / "metrics.json").write_text(json.dumps(LONG))
        service.models.delete(name)
        service.models.register(copy, name)
    dialog = open_dialog(qtbot, window, service)
    dialog.resize(720, 360)
    qtbot.waitExposed(dialog)
    select(dialog, "tiny-pcme")
    dialog.table.setCurrentCell(dialog.table.currentRow(), 2)  # a click on its figure
    dialog.activate_button.click()
    qtbot.waitUntil(lambda: any(m.active and m.name == "tiny-pcme" for m in window._models), timeout=5000)
    qtbot.wait(50)
    table, column = dialog.table, active_column(dialog)
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "tiny-pcme")
    assert table.item(row, column).text() == "●"
    cell = table.visualItemRect(table.item(row, column))
    assert table.viewport().rect().contains(cell), (cell, table.viewport().rect())
    name = table.visualItemRect(table.item(row, 0))
    assert table.viewport().rect().contains(name)
    assert table.horizontalScrollBar().value() == 0
    assert table.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    dialog.close()
