"""The viewer's details panel: what a photo manager's info panel says about a file (digiKam's Properties, Apple
Photos' Info): its name and folder, kind, pixel size, file size, length of a clip, when and with what it was
taken (EXIF) and when the file was last changed. Everything comes from the catalog
(``Library.details``); nothing here reads the file."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFormLayout, QFrame, QLabel, QSizePolicy, QWidget

from app.widgets.plaintext import plain_label
from engine.types import MediaDetails, MediaKind

KIND_NAMES = {MediaKind.IMAGE: "Photo", MediaKind.ANIMATION: "Animation", MediaKind.VIDEO: "Video"}
FIELDS = ("Name", "Folder", "Kind", "Dimensions", "File size", "Duration", "Taken", "Camera", "Modified")


def file_size_text(size: int) -> str:
    """``3.4 MB (3,412,345 bytes)``: decimal units, as the desktop's file managers count them."""
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size >= factor:
            return f"{size / factor:.1f} {unit} ({size:,} bytes)"
    return f"{size:,} bytes"


def dimensions_text(width: int | None, height: int | None) -> str:
    """``4032 × 3024 (12.2 MP)``; empty when unknown."""
    if not width or not height:
        return ""
    megapixels = width * height / 1e6
    return f"{width} × {height}" + (f" ({megapixels:.1f} MP)" if megapixels >= 0.1 else "")


def clock_text(seconds: float) -> str:
    """``1:02:03``, ``2:03`` or ``0:03.4`` (tenths under ten seconds, where they matter)."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"0:{seconds:04.1f}"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def taken_text(taken_at: str | None) -> str:
    """The camera's date as written (``21 Jun 2014, 18:05:09``, its UTC offset when recorded); empty if none."""
    if not taken_at:
        return ""
    try:
        when = datetime.fromisoformat(taken_at)
    except ValueError:
        return taken_at
    text = f"{when.day} {when:%b %Y, %H:%M:%S}"
    offset = when.utcoffset()
    if offset is not None:
        minutes = int(offset.total_seconds() // 60)
        sign = "+" if minutes >= 0 else "-"
        text += f" (UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d})"
    return text


def modified_text(mtime_ns: int) -> str:
    when = datetime.fromtimestamp(mtime_ns / 1e9)
    return f"{when.day} {when:%b %Y, %H:%M:%S}"


def detail_rows(details: MediaDetails) -> dict[str, str]:
    """The panel's rows (see :data:`FIELDS`) for ``details``; a row the file has nothing for is left out."""
    kind = KIND_NAMES.get(details.kind, str(details.kind))
    rows = {
        "Name": details.path.name,
        "Folder": str(details.path.parent),
        "Kind": f"{kind} ({details.format.upper()})" if details.format else kind,
        "Dimensions": dimensions_text(details.width, details.height),
        "File size": file_size_text(details.size_bytes),
        "Taken": taken_text(details.capture.taken_at),
        "Camera": details.capture.camera or "",
        "Modified": modified_text(details.modified_ns),
    }
    if details.kind is not MediaKind.IMAGE and details.duration_s:
        frames = f" · {details.n_frames} frames" if details.n_frames else ""
        rows["Duration"] = clock_text(details.duration_s) + frames
    elif details.kind is not MediaKind.IMAGE and details.n_frames:
        rows["Duration"] = f"{details.n_frames} frames"
    return {name: rows[name] for name in FIELDS if rows.get(name)}


class DetailsPanel(QFrame):
    """The item's details as a two-column form; ``show_details`` fills it, ``show_path`` says what is known
    before (or without) the catalog's record."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(220)
        self.setMaximumWidth(320)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        self._form = QFormLayout(self)
        self._form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self._form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        title = QLabel("Details")
        font = title.font()
        font.setBold(True)
        title.setFont(font)
        self._form.addRow(title)
        self.values: dict[str, QLabel] = {}
        for name in FIELDS:
            value = plain_label("", wrap=True)
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # copy the path, the date
            self.values[name] = value
            self._form.addRow(name, value)
        self.note = plain_label("", wrap=True)
        self.note.setEnabled(False)  # greyed: a remark, not a value
        self._form.addRow(self.note)

    def rows(self) -> dict[str, str]:
        """The rows shown now (name -> text)."""
        return {name: label.text() for name, label in self.values.items() if self._form.isRowVisible(label)}

    def show_details(self, details: MediaDetails) -> None:
        self._fill(detail_rows(details))
        no_date = details.kind is MediaKind.IMAGE and not details.capture.taken_at
        self.note.setText("The file does not say when it was taken; sorting by date taken uses its modification "
                          "date." if no_date else "")

    def show_path(self, path: Path, kind: MediaKind, note: str = "") -> None:
        self._fill({"Name": path.name, "Folder": str(path.parent), "Kind": KIND_NAMES.get(kind, str(kind))})
        self.note.setText(note)

    def _fill(self, rows: dict[str, str]) -> None:
        for name, label in self.values.items():
            label.setText(rows.get(name, ""))
            self._form.setRowVisible(label, name in rows)
