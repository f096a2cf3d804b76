"""The model manager: the library's registered models with their metrics; pick the active one."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.service_api import ZERO_SHOT
from app.widgets.plaintext import plain_tooltip

_SHOWN_METRICS = ("rsum", "r1", "r5", "r10", "medr")


def metrics_text(metrics: dict[str, Any]) -> str:
    """The headline metrics of a model, "rsum 301.5 · r1 12.0" (nested i2t/t2i dicts are summarised)."""
    parts = []
    for key in _SHOWN_METRICS:
        value = metrics.get(key)
        if isinstance(value, int | float):
            parts.append(f"{key} {value:.1f}")
    for direction in ("i2t", "t2i"):
        sub = metrics.get(direction)
        if isinstance(sub, dict) and isinstance(sub.get("r10"), int | float):
            parts.append(f"{direction} R@10 {sub['r10']:.1f}")
    return " · ".join(parts) or "—"


class ModelsDialog(QDialog):
    """A table of ``service.models()``; "Make active" and "Re-index" are handed to the window."""

    activate_requested = Signal(object)  # model name, or None for zero-shot
    reindex_requested = Signal()
    train_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Name", "Method", "Metrics", "Active"])
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().hide()
        note = QLabel("After changing the active model, re-index so every item has its embeddings.")
        note.setWordWrap(True)
        self.activate_button = QPushButton("Make active")
        self.reindex_button = QPushButton("Re-index library")
        self.train_button = QPushButton("Train…")
        close = QPushButton("Close")
        self.activate_button.clicked.connect(self._activate)
        self.reindex_button.clicked.connect(self.reindex_requested)
        self.train_button.clicked.connect(self.train_requested)
        close.clicked.connect(self.accept)
        buttons = QHBoxLayout()
        for button in (self.activate_button, self.reindex_button, self.train_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(note)
        layout.addLayout(buttons)
        self.resize(640, 320)

    def set_models(self, models: list[Any]) -> None:
        """Show ``models`` (``ModelInfo`` records)."""
        self.table.setRowCount(len(models))
        for row, model in enumerate(models):
            active = getattr(model, "active", getattr(model, "is_active", False))
            metrics = metrics_text(dict(model.metrics or {}))
            cells = [model.name, str(model.method), metrics, "●" if active else ""]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, model.name)
                if getattr(model, "path", None):
                    item.setToolTip(plain_tooltip(str(model.path)))
                self.table.setItem(row, column, item)
        self.table.resizeColumnsToContents()

    def _activate(self) -> None:
        item = self.table.item(self.table.currentRow(), 0)
        if item is not None:
            name = item.data(Qt.ItemDataRole.UserRole)
            self.activate_requested.emit(None if name == ZERO_SHOT else name)
