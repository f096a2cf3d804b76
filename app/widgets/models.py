"""The model manager: the library's registered models, each with its own figure and the set it was measured on
(:mod:`engine.loop.figures`, the definition the training dialog uses too); make one active, revert to the one
before, rename or delete one. Figures on different sets are never set side by side as if they compared."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.plaintext import plain_label, plain_tooltip
from engine.terms import model_figure
from engine.types import ZERO_SHOT, ModelInfo, active_model


def metrics_text(metrics: dict[str, Any]) -> str:
    """A model's own figure with its set ("rsum 250.8 on 1,500 items (3,500 captions) of its validation split
    “starter-val”, model alone"), "not meaningful yet: ..." under the floor, "—" when it has none."""
    figure = model_figure(metrics)
    return figure.text() if figure is not None else "—"


def comparable_groups(models: list[ModelInfo]) -> dict[str, int]:
    """Each model's group: models whose figures were measured the same way on the same set share a number
    (only those compare); a model with no figure, or one under the floor, is in none."""
    groups: dict[str, int] = {}
    seen: list[Any] = []
    for model in models:
        figure = model_figure(dict(model.metrics or {}))
        if figure is None or not figure.meaningful:
            continue
        match = next((n for n, other in enumerate(seen) if figure.same_measure(other)), None)
        if match is None:
            seen.append(figure)
            match = len(seen) - 1
        groups[model.name] = match
    return groups


STARTER = "starter"  # engine.search.starter.STARTER_NAME: offered again to a library without it, so it stays


def revert_target(models: list[ModelInfo]) -> str | None:
    """The model "Revert" activates: the one registered before the active model (a retrain's predecessor,
    the starter before the first retrain), or zero-shot; None when zero-shot is already active."""
    names = [m.name for m in models if m.name != ZERO_SHOT]
    active = active_model(models)
    if active is None or active.name == ZERO_SHOT:
        return None
    index = names.index(active.name) if active.name in names else 0
    return names[index - 1] if index > 0 else ZERO_SHOT


class ModelsDialog(QDialog):
    """A table of ``service.models.all()``; "Make active", "Revert", "Rename…", "Delete…" and "Re-index" are handed to
    the window as requests (it calls the service off the GUI thread and sends the new list back)."""

    activate_requested = Signal(object)  # model name, or None for zero-shot
    rename_requested = Signal(str, str)  # old name, new name
    delete_requested = Signal(str)
    reindex_requested = Signal()
    train_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self._models: list[ModelInfo] = []
        # Active beside the name and the long figure last, elided (its tooltip has it whole): the table never
        # scrolls sideways, so "Make active" cannot scroll the Active column out of view (issue #44)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Name", "Active", "Method",
                                              "Its own figure (and the set it was measured on)"])
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.table.setWordWrap(False)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        for column in (0, 1, 2):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().hide()
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _item: self._activate())
        self.figures_note = plain_label("", wrap=True)
        note = QLabel("After changing the active model, re-index so every item has its embeddings.")
        note.setWordWrap(True)
        self.status = plain_label("", wrap=True)
        self.activate_button = QPushButton("Make active")
        self.revert_button = QPushButton("Revert")
        self.rename_button = QPushButton("Rename…")
        self.delete_button = QPushButton("Delete…")
        self.reindex_button = QPushButton("Re-index library")
        self.train_button = QPushButton("Train…")
        close = QPushButton("Close")
        self.activate_button.clicked.connect(self._activate)
        self.revert_button.clicked.connect(self._revert)
        self.rename_button.clicked.connect(self._rename)
        self.delete_button.clicked.connect(self._delete)
        self.reindex_button.clicked.connect(self.reindex_requested)
        self.train_button.clicked.connect(self.train_requested)
        close.clicked.connect(self.accept)
        on_selection = QHBoxLayout()
        for button in (self.activate_button, self.rename_button, self.delete_button):
            on_selection.addWidget(button)
        on_selection.addStretch(1)
        on_selection.addWidget(self.revert_button)
        buttons = QHBoxLayout()
        for button in (self.reindex_button, self.train_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.figures_note)
        layout.addLayout(on_selection)
        layout.addWidget(note)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        self.resize(720, 360)
        self._update_buttons()

    def set_models(self, models: list[ModelInfo]) -> None:
        """Show ``models`` (``ModelInfo`` records); the selected model stays selected."""
        selected = self.selected_name()
        self._models = list(models)
        self.table.setRowCount(len(models))
        for row, model in enumerate(models):
            active = model.active
            metrics = metrics_text(dict(model.metrics or {}))
            cells = [model.name, "●" if active else "", str(model.method), metrics]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, model.name)
                where = str(model.path) if getattr(model, "path", None) else ""
                tip = f"{metrics}\n{where}".strip() if column == 3 else where
                if tip:
                    item.setToolTip(plain_tooltip(tip))
                if column == 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                self.table.setItem(row, column, item)
            if model.name == selected:
                self.table.selectRow(row)
        self.figures_note.setText(self._figures_note(models))
        self._update_buttons()

    @staticmethod
    def _figures_note(models: list[ModelInfo]) -> str:
        """Which figures compare: those on the same set, measured the same way; the rest say nothing of each
        other (the training dialog measures a new model beside the active one on the same items)."""
        groups = comparable_groups(models)
        shared = [[name for name, g in groups.items() if g == group] for group in sorted(set(groups.values()))]
        shared = [names for names in shared if len(names) > 1]
        text = ("Each figure is the model's own, on the set named beside it (rsum: R@1+R@5+R@10 both ways, 0-600). "
                "Figures on different sets do not compare; the training dialog measures a new model and the "
                "active one on the same held-aside items.")
        if shared:
            text += " Measured alike, so comparable: " + "; ".join(", ".join(names) for names in shared) + "."
        return text

    def selected_name(self) -> str | None:
        item = self.table.item(self.table.currentRow(), 0) if self.table.selectedItems() else None
        return None if item is None else str(item.data(Qt.ItemDataRole.UserRole))

    def show_status(self, text: str) -> None:
        """A line under the table: what the last rename / delete / switch did, or why it failed."""
        self.status.setText(text)

    def _update_buttons(self) -> None:
        name = self.selected_name()
        active = active_model(self._models)
        is_active = active is not None and name == active.name
        fixed = name in (ZERO_SHOT, STARTER)
        self.activate_button.setEnabled(name is not None and not is_active)
        self.rename_button.setEnabled(name is not None and not fixed)
        self.delete_button.setEnabled(name is not None and not fixed and not is_active)
        if name == ZERO_SHOT:
            why = "Zero-shot ranking is built in: it cannot be renamed or deleted."
        elif name == STARTER:
            why = "The starter model ships with Polyseek and stays (switch to another model instead)."
        elif is_active:
            why = "This is the active model: make another one active (or Revert) before deleting it."
        else:
            why = ""
        for button in (self.rename_button, self.delete_button):
            button.setToolTip(why if not button.isEnabled() else "")
        target = revert_target(self._models)
        self.revert_button.setEnabled(target is not None)
        self.revert_button.setText(f"Revert to {target}" if target is not None else "Revert")
        self.revert_button.setToolTip("Make the model before the active one active again"
                                      if target is not None else "Zero-shot ranking is active: nothing to revert")

    def _activate(self) -> None:
        name = self.selected_name()
        if name is not None:
            self.activate_requested.emit(None if name == ZERO_SHOT else name)

    def _revert(self) -> None:
        target = revert_target(self._models)
        if target is not None:
            self.activate_requested.emit(None if target == ZERO_SHOT else target)

    def _rename(self) -> None:
        name = self.selected_name()
        if name is None or name in (ZERO_SHOT, STARTER):
            return
        new_name, ok = QInputDialog.getText(self, "Rename model", f"New name for {name}:", text=name)
        new_name = " ".join(new_name.split())
        if not ok or not new_name or new_name == name:
            return
        taken = {m.name for m in self._models}
        if new_name in taken:
            self.show_status(f"A model named {new_name} exists already; choose another name.")
            return
        self.rename_requested.emit(name, new_name)

    def _delete(self) -> None:
        name = self.selected_name()
        if name is None or not self.delete_button.isEnabled():
            return
        model = next(m for m in self._models if m.name == name)
        folder = getattr(model, "path", None)
        kept = f"\n\nIts folder on disk is kept: {folder}" if folder else ""
        answer = QMessageBox.question(
            self, "Delete model",
            f"Delete the model {name} from this library, with its embeddings of your items?{kept}",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_requested.emit(name)
