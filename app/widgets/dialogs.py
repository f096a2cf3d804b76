"""Small dialogs of the Help and Edit menus: the keyboard shortcuts, and Preferences."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHeaderView,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.settings import MAX_THUMBNAIL, MIN_THUMBNAIL, GuiSettings
from app.widgets.plaintext import plain_label

# Keys that are not menu actions: they act where the focus is.
CONTEXT_KEYS = (
    ("Down (in the search box)", "Move into the results"),
    ("Tab (in the search box)", "Move into the results"),
    ("Escape (in the search box)", "Clear the query: the grid shows the library again"),
    ("Arrow keys (in the results)", "Move between results"),
    ("Shift+arrows, Ctrl+click (in the results)", "Select several results, to accept or reject them at once"),
    ("Enter / double-click (on a result)", "Show it large (the viewer)"),
    ("Left / Right (in the viewer)", "Previous / next result"),
    ("Enter (in the caption box)", "Save the caption and move to the next item"),
    ("F2 / double-click (on a caption)", "Edit the caption"),
    ("Delete (on a caption)", "Delete the caption"),
)


def action_rows(actions: list[QAction]) -> list[tuple[str, str]]:
    """(keys, what) for every action that has a shortcut, as the menus name them."""
    rows = []
    for action in actions:
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)  # the first: F14 is noise
        if keys:
            rows.append((keys, action.text().replace("&", "").removesuffix("…")))
    return rows


class ShortcutsDialog(QDialog):
    """Help > Keyboard shortcuts: the window's actions (read from the menus, so it never drifts) and the keys
    that act where the focus is."""

    def __init__(self, actions: list[QAction], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        rows = action_rows(actions) + list(CONTEXT_KEYS)
        self.table = QTableWidget(len(rows), 2)
        self.table.setHorizontalHeaderLabels(["Keys", "What it does"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for row, (keys, what) in enumerate(rows):
            for column, text in enumerate((keys, what)):
                self.table.setItem(row, column, QTableWidgetItem(text))
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(plain_label("Window shortcuts work wherever the focus is, the search box included."))
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        self.resize(620, 560)

    def rows(self) -> list[tuple[str, str]]:
        return [(self.table.item(r, 0).text(), self.table.item(r, 1).text()) for r in range(self.table.rowCount())]


class PreferencesDialog(QDialog):
    """Edit > Preferences: results per page and thumbnail size (applied on OK, kept in the settings file)."""

    def __init__(self, settings: GuiSettings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preferences")
        self.settings = settings
        self.page_size = QSpinBox(minimum=12, maximum=500, singleStep=12, value=settings.page_size)
        self.page_size.setToolTip("How many results one page asks for; more load as you scroll")
        self.thumbnail_size = QSpinBox(minimum=MIN_THUMBNAIL, maximum=MAX_THUMBNAIL, singleStep=16,
                                       value=settings.thumbnail_size, suffix=" px")
        self.thumbnail_size.setToolTip("The size of a result's picture in the grid")
        form = QFormLayout()
        form.addRow("Results per page", self.page_size)
        form.addRow("Thumbnail size", self.thumbnail_size)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)
        self.setWindowModality(Qt.WindowModality.WindowModal)

    def accept(self) -> None:
        self.settings.page_size = self.page_size.value()
        self.settings.thumbnail_size = self.thumbnail_size.value()
        self.settings.sync()
        super().accept()
