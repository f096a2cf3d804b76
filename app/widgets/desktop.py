"""The desktop around the app: showing a file in the file manager, or saying where it is when none opens."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QMessageBox, QWidget


def show_in_folder(path: Path, parent: QWidget | None = None) -> bool:
    """Open the file manager on the folder that holds ``path``; where none opens (no file manager, a bare
    session), say so and show where the file is, its path ready to copy. True when a file manager opened."""
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path.parent))):
        return True
    box = QMessageBox(QMessageBox.Icon.Information, "Show in folder",
                      f"No file manager could be opened here. The file is:\n\n{path}\n\nin the folder:\n\n"
                      f"{path.parent}", QMessageBox.StandardButton.Ok, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    copy = box.addButton("Copy path", QMessageBox.ButtonRole.ActionRole)
    copy.clicked.disconnect()  # copying must not close the box
    copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(str(path)))
    box.setEscapeButton(QMessageBox.StandardButton.Ok)  # with a second button Qt picks no escape button itself
    _OPEN_NOTES.add(box)  # a box without a parent lives as long as Python holds it: until it is closed
    box.finished.connect(lambda _result: _OPEN_NOTES.discard(box))
    box.open()  # not modal to the whole app: the window keeps working
    return False


_OPEN_NOTES: set[QMessageBox] = set()
