"""Small dialogs of the Help and Edit menus: the keyboard shortcuts, and Preferences."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QListWidget,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.settings import DEVICES, MAX_THUMBNAIL, MIN_THUMBNAIL, GuiSettings
from app.widgets.plaintext import plain_label, plain_tooltip
from app.widgets.screen import fit_to_screen
from engine.types import ZERO_SHOT

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
            # the status tip, where an action has one, says more than its menu name (what the key does exactly)
            rows.append((keys, action.statusTip() or action.text().replace("&", "").removesuffix("…")))
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
        # a long description wraps onto a taller row instead of being cut ("Alt+R" was, issue #44)
        self.table.setWordWrap(True)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(plain_label("Window shortcuts work wherever the focus is, the search box included.",
                                     wrap=True))
        layout.addWidget(self.table, 1)
        layout.addWidget(buttons)
        fit_to_screen(self, 620, 560)  # its Close button stays on a small (or 2x) screen

    def rows(self) -> list[tuple[str, str]]:
        return [(self.table.item(r, 0).text(), self.table.item(r, 1).text()) for r in range(self.table.rowCount())]


class PreferencesDialog(QDialog):
    """Edit > Preferences: the library's folders (added and removed at once, as in the side panel), the model
    searches use, where training runs, the match-probability cutoff, results per page and thumbnail size (these
    applied on OK and kept in the settings file; the model is the library's active one)."""

    model_chosen = Signal(object)  # on OK, when the model changed: its name, or None for zero-shot

    def __init__(self, settings: GuiSettings, parent: QWidget | None = None, *, library: Any = None,
                 models: list[Any] | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preferences")
        self.settings = settings
        self.library = library  # app.widgets.library.LibraryPanel: its add / remove are the folder actions
        self.folders = QListWidget()
        self.folders.setToolTip("The folders this library indexes")
        self.add_folder_button = QPushButton("Add folder…")
        self.remove_folder_button = QPushButton("Remove", enabled=False)
        self.folders.currentRowChanged.connect(lambda row: self.remove_folder_button.setEnabled(row >= 0))
        self.add_folder_button.clicked.connect(lambda: self.library.add_folder())
        self.remove_folder_button.clicked.connect(self._remove_folder)
        if library is not None:
            library.roots_shown.connect(self.show_folders)
            library.refresh()
        else:
            for widget in (self.folders, self.add_folder_button, self.remove_folder_button):
                widget.setEnabled(False)
        self.model = QComboBox()
        self.model.setToolTip("The library's active model: searches rank with it")
        self._initial_model: str | None = None
        for model in models or []:
            label = "zero-shot (untrained)" if model.name == ZERO_SHOT else f"{model.name}  [{model.method}]"
            self.model.addItem(label, model.name)
            if model.active:
                self._initial_model = model.name
                self.model.setCurrentIndex(self.model.count() - 1)
        self.model.setEnabled(self.model.count() > 0)
        self.device = QComboBox()
        for key, text in (("auto", "GPU when there is one, else CPU"), ("cpu", "CPU only"), ("cuda", "GPU (CUDA)")):
            self.device.addItem(text, key)
        self.device.setCurrentIndex(DEVICES.index(settings.training_device))
        self.device.setToolTip("Where the trainer runs (its --device); searching always runs here, on the CPU")
        self.cutoff = QDoubleSpinBox(minimum=0.0, maximum=0.99, singleStep=0.05, decimals=2, prefix="p ≥ ",
                                     specialValueText="off", value=settings.cutoff_percent / 100)
        self.cutoff.setToolTip("Hide results of a text search whose match probability (the percentage under each "
                               "result) is below this; the slider right of the search box changes it too, and is "
                               "remembered")
        self.page_size = QSpinBox(minimum=12, maximum=500, singleStep=12, value=settings.page_size)
        self.page_size.setToolTip("How many results one page asks for; more load as you scroll")
        self.thumbnail_size = QSpinBox(minimum=MIN_THUMBNAIL, maximum=MAX_THUMBNAIL, singleStep=16,
                                       value=settings.thumbnail_size, suffix=" px")
        self.thumbnail_size.setToolTip("The size of a result's picture in the grid")
        self._layout()
        self.setWindowModality(Qt.WindowModality.WindowModal)

    def _layout(self) -> None:
        folder_buttons = QVBoxLayout()
        folder_buttons.addWidget(self.add_folder_button)
        folder_buttons.addWidget(self.remove_folder_button)
        folder_buttons.addStretch(1)
        folders = QHBoxLayout()
        folders.addWidget(self.folders, 1)
        folders.addLayout(folder_buttons)
        folder_box = QGroupBox("Library folders (added or removed at once)")
        folder_box.setLayout(folders)
        form = QFormLayout()
        form.addRow("Model searches use", self.model)
        form.addRow("Train on", self.device)
        form.addRow("Match-probability cutoff", self.cutoff)
        form.addRow("Results per page", self.page_size)
        form.addRow("Thumbnail size", self.thumbnail_size)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(folder_box, 1)
        layout.addLayout(form)
        layout.addWidget(buttons)
        self.resize(560, 480)

    def show_folders(self, roots: list[Path]) -> None:
        """List ``roots``; the folder the user selected stays selected (the library is read again whenever it
        changes, every second while indexing: a rebuilt list lost the selection and Remove then did nothing)."""
        names = [str(root) for root in roots]
        if names == self.folder_names():
            return
        chosen = self.folders.currentItem().text() if self.folders.currentItem() is not None else None
        self.folders.clear()
        for name in names:
            self.folders.addItem(name)
            self.folders.item(self.folders.count() - 1).setToolTip(plain_tooltip(name))
        if chosen in names:
            self.folders.setCurrentRow(names.index(chosen))

    def folder_names(self) -> list[str]:
        return [self.folders.item(row).text() for row in range(self.folders.count())]

    def _remove_folder(self) -> None:
        item = self.folders.currentItem()
        if item is not None and self.library is not None:
            self.library.remove_folder(Path(item.text()), parent=self)

    def accept(self) -> None:
        self.settings.page_size = self.page_size.value()
        self.settings.thumbnail_size = self.thumbnail_size.value()
        self.settings.training_device = str(self.device.currentData())
        self.settings.cutoff_percent = round(self.cutoff.value() * 100)
        self.settings.sync()
        chosen = self.model.currentData()
        if chosen is not None and chosen != self._initial_model:
            self.model_chosen.emit(None if chosen == ZERO_SHOT else str(chosen))
        super().accept()
