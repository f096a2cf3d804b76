"""A caption's provenance as the annotation panel shows it: who wrote it (you, a caption file, the model's
guess), its coloured mark in the caption list and a heading's count of each."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPainter, QPixmap

# How a caption's origin shows in the list: (what the tooltip calls it, text colour, italic)
PROVENANCE = {
    "user": ("written by you", None, False),
    "imported": ("imported from a caption file", "#5b3fa0", False),
    "pseudo": ("the model's guess (not yours; training weighs it less)", "#808080", True),
}


def _mark(colour: str) -> QPixmap:
    """A small coloured dot in front of a caption: its origin at a glance."""
    pixmap = QPixmap(10, 10)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(colour))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, 8, 8)
    painter.end()
    return pixmap


class _Marks(dict):
    """Provenance dots, made on first use (a QPixmap needs the QApplication)."""

    COLOURS = {"user": "#2858aa", "imported": "#7a5cc0", "pseudo": "#a0a0a0"}

    def get(self, source: str, default: Any = None) -> Any:  # type: ignore[override]
        if source not in self and source in self.COLOURS:
            self[source] = _mark(self.COLOURS[source])
        return super().get(source, default)


PROVENANCE_MARK = _Marks()


def provenance_summary(captions: list[Any]) -> str:
    """" — 1 yours · 2 imported · 1 model's guess" for a heading ("" without captions)."""
    names = {"user": "yours", "imported": "imported", "pseudo": "model's guess"}
    counts = [(names[src], sum(1 for c in captions if str(getattr(c, "source", "")) == src)) for src in names]
    parts = [f"{n} {name}" for name, n in counts if n]
    return f" — {' · '.join(parts)}" if parts else ""
