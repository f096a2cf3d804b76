"""The search bar: a sentence, or a dropped / pasted file to search by example; the model and the cutoff."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QMimeData, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QImage, QKeyEvent, QKeySequence, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QSlider,
    QToolButton,
    QWidget,
)

from app.widgets.keys import WindowKeysEdit
from app.widgets.plaintext import plain_tooltip
from engine import paths
from engine.types import ZERO_SHOT, ModelInfo

EXAMPLE_PICTURE = 44  # pixels: the example a search is made by, shown beside the query box
PLACEHOLDER = "Describe what you are looking for, or drop a photo / GIF / video here"
EXAMPLE_PLACEHOLDER = "Searching by the example on the right: type a description to search by words instead"


def example_filters() -> str:
    """The example picker's filters: every medium, photos, GIFs and animations, videos (what indexing reads)."""
    from engine.terms import ANIMATION_SUFFIXES, MEDIA_SUFFIXES, PHOTO_SUFFIXES, VIDEO_SUFFIXES

    def names(suffixes: frozenset[str]) -> str:
        return " ".join(f"*{suffix}" for suffix in sorted(suffixes))

    return ";;".join((f"Photos, GIFs and videos ({names(MEDIA_SUFFIXES)})", f"Photos ({names(PHOTO_SUFFIXES)})",
                      f"GIFs and animations ({names(ANIMATION_SUFFIXES)})", f"Videos ({names(VIDEO_SUFFIXES)})",
                      "All files (*)"))


def pasted_dir() -> Path:
    """Where images pasted from the clipboard are saved so the engine can read them as files."""
    return paths.cache_dir() / "pasted"


def local_file(mime: QMimeData) -> Path | None:
    """The first local file a drag or a clipboard carries (URL list, or a file:// / plain path as text)."""
    urls = list(mime.urls()) if mime.hasUrls() else []
    if not urls and mime.hasText():
        text = mime.text().strip()
        urls = [QUrl(text) if text.startswith("file://") else QUrl.fromLocalFile(text)] if text else []
    for url in urls:
        if url.isLocalFile() and Path(url.toLocalFile()).is_file():
            return Path(url.toLocalFile())
    return None


class QueryEdit(WindowKeysEdit):
    """A line edit that also takes a media file: dropped on it, or pasted (as a file or as an image).

    Down moves into the results (``down_pressed``), Escape clears the query; the window's shortcuts win
    over line-editing keys.
    """

    file_given = Signal(object)  # Path
    down_pressed = Signal()
    escape_pressed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAcceptDrops(True)
        self.setClearButtonEnabled(True)
        self.setPlaceholderText(PLACEHOLDER)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if local_file(event.mimeData()) is not None:
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:
        path = local_file(event.mimeData())
        if path is None:
            super().dropEvent(event)
            return
        event.acceptProposedAction()
        self.file_given.emit(path)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Down and not event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            self.down_pressed.emit()
            return
        if event.key() == Qt.Key.Key_Escape and not event.modifiers():
            self.escape_pressed.emit()
            return
        pasting = event.matches(QKeySequence.StandardKey.Paste)
        if pasting and self.paste_media(QGuiApplication.clipboard().mimeData()):
            return
        super().keyPressEvent(event)

    def paste_media(self, mime: QMimeData | None) -> bool:
        """Search by the file or image in ``mime``; False when it holds neither (text pastes as usual)."""
        if mime is None:
            return False
        path = local_file(mime) if mime.hasUrls() or _looks_like_path(mime) else None
        if path is None and mime.hasImage():
            path = _save_pasted_image(mime.imageData())
        if path is None:
            return False
        self.file_given.emit(path)
        return True


def _looks_like_path(mime: QMimeData) -> bool:
    text = mime.text().strip() if mime.hasText() else ""
    return text.startswith(("file://", "/")) and "\n" not in text


def _save_pasted_image(image: Any) -> Path | None:
    folder = pasted_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"pasted-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 1000:03d}.png"
    return path if image is not None and image.save(str(path), "PNG") else None


class SearchBar(QWidget):
    """Line edit (Enter searches), example-file chip, model picker and the p >= x relevance cutoff."""

    text_search = Signal(str)
    media_search = Signal(object)  # Path
    browse_requested = Signal()  # the query was cleared (Enter on an empty box, Escape, the clear button)
    model_chosen = Signal(object)  # model name, or None for zero-shot
    cutoff_changed = Signal(object)  # float in (0, 1], or None when off

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._example: Path | None = None
        self.edit = QueryEdit()
        self.edit.returnPressed.connect(self.submit)
        self.edit.textEdited.connect(self._edited)
        self.edit.escape_pressed.connect(self.clear_query)
        self.edit.file_given.connect(self.search_example)
        self.example_picture = QLabel()  # the example itself, not only its name (set by the window)
        self.example_picture.setFixedSize(EXAMPLE_PICTURE, EXAMPLE_PICTURE)
        self.example_picture.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.example_picture.setFrameShape(QFrame.Shape.StyledPanel)
        self.example_label = QLabel()
        self.example_label.setTextFormat(Qt.TextFormat.PlainText)
        self.example_clear = QToolButton(text="×", toolTip="Stop searching by this example")
        self.example_clear.clicked.connect(self.clear_example)
        self.model_combo = QComboBox(toolTip="The model that ranks results")
        self.model_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.model_combo.activated.connect(self._model_activated)
        # Reached by clicking only: on Tab's way through the bar, arrow keys would switch the model.
        self.model_combo.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.cutoff = QSlider(Qt.Orientation.Horizontal, minimum=0, maximum=99, singleStep=5, pageStep=10)
        self.cutoff.setFixedWidth(120)
        self.cutoff.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.cutoff_label = QLabel()
        self._cutoff_timer = QTimer(self, singleShot=True, interval=250)
        self._cutoff_timer.timeout.connect(lambda: self.cutoff_changed.emit(self.min_probability))
        self.cutoff.valueChanged.connect(self._cutoff_moved)
        self._layout()
        self._show_example(None)
        self._show_cutoff(0)
        self._update_cutoff_enabled()

    def _layout(self) -> None:
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 6, 6, 6)
        row.addWidget(self.edit, 1)
        row.addWidget(self.example_picture)
        row.addWidget(self.example_label)
        row.addWidget(self.example_clear)
        row.addSpacing(8)
        row.addWidget(QLabel("Model"))
        row.addWidget(self.model_combo)
        row.addSpacing(8)
        row.addWidget(self.cutoff)
        row.addWidget(self.cutoff_label)

    # --- queries
    @property
    def query(self) -> str | Path | None:
        """The current query: the example file, else the text, else None."""
        if self._example is not None:
            return self._example
        text = self.edit.text().strip()
        return text or None

    def submit(self) -> None:
        """Search for the typed text (Enter)."""
        text = self.edit.text().strip()
        self._show_example(None)
        if text:
            self.text_search.emit(text)
        else:
            self.browse_requested.emit()

    def clear_query(self) -> None:
        """Forget the query (text and example): the grid goes back to the library."""
        had_query = self.query is not None
        self.edit.clear()
        self._show_example(None)
        if had_query:
            self.browse_requested.emit()

    def _edited(self, text: str) -> None:
        if not text and self._example is None:  # the clear button, or every letter deleted
            self.browse_requested.emit()

    def search_example(self, path: Path) -> None:
        """Search by an example file (dropped, pasted or chosen). The box lets go of the sentence it held, so that
        it is plain that the example is what is searched (issue #44); a sentence typed next searches by words."""
        self.edit.clear()
        self._show_example(Path(path))
        self.media_search.emit(Path(path))

    def clear_example(self) -> None:
        """Stop searching by the example: the typed text is searched, or the library shown."""
        self._show_example(None)
        self.edit.setFocus()
        self.submit()

    def _show_example(self, path: Path | None) -> None:
        self._example = path
        self.edit.setPlaceholderText(EXAMPLE_PLACEHOLDER if path else PLACEHOLDER)
        self.example_label.setText(f"Example: {path.name}" if path else "")
        self.example_label.setToolTip(plain_tooltip(str(path)) if path else "")
        self.example_label.setVisible(path is not None)
        self.example_picture.setToolTip(plain_tooltip(str(path)) if path else "")
        self.example_picture.clear()
        self.example_picture.setText("…" if path else "")
        self.example_picture.setVisible(path is not None)
        self.example_clear.setVisible(path is not None)

    def set_example_picture(self, path: Path, image: QImage | None) -> None:
        """Show the example ``path``'s picture (None: it cannot be read, which the chip says)."""
        if path != self._example:  # another example (or none) since it was asked for
            return
        if image is None or image.isNull():
            self.example_picture.setText("?")
            return
        pixmap = QPixmap.fromImage(image).scaled(EXAMPLE_PICTURE - 4, EXAMPLE_PICTURE - 4,
                                                 Qt.AspectRatioMode.KeepAspectRatio,
                                                 Qt.TransformationMode.SmoothTransformation)
        self.example_picture.setPixmap(pixmap)

    # --- models
    def set_models(self, models: list[ModelInfo]) -> None:
        """Fill the picker from ``service.models.all()``; the cutoff is enabled for a model whose text searches give a
        match probability (every model where the calibration ships, issue #40)."""
        self.model_combo.blockSignals(True)
        self.model_combo.clear()
        active_index = 0
        for i, model in enumerate(models):
            label = model.name if model.name != ZERO_SHOT else "zero-shot (untrained)"
            self.model_combo.addItem(f"{label}  [{model.method}]" if model.name != ZERO_SHOT else label,
                                     model.name)
            self.model_combo.setItemData(i, model.gives_probability, Qt.ItemDataRole.UserRole + 1)
            if model.active:
                active_index = i
        self.model_combo.setCurrentIndex(active_index)
        self.model_combo.blockSignals(False)
        self._update_cutoff_enabled()

    def _model_activated(self, index: int) -> None:
        name = self.model_combo.itemData(index)
        self._update_cutoff_enabled()
        self.model_chosen.emit(None if name == ZERO_SHOT else name)
        self.edit.setFocus()  # back to typing: arrow keys on the picker would switch the model again

    @property
    def gives_probability(self) -> bool:
        """Whether the picked model's text searches give each result a match probability."""
        return bool(self.model_combo.currentData(Qt.ItemDataRole.UserRole + 1))

    # --- cutoff
    @property
    def min_probability(self) -> float | None:
        """The cutoff to pass to ``Search.text``: None when off or when the model gives no match probability."""
        value = self.cutoff.value()
        return value / 100 if value > 0 and self.gives_probability else None

    def _cutoff_moved(self, value: int) -> None:
        self._show_cutoff(value)
        self._cutoff_timer.start()  # searching on every slider step would flood the engine

    def choose_example(self) -> None:
        """File ▸ Search by example file: pick a file, then search by it."""
        chosen, _ = QFileDialog.getOpenFileName(self.window(), "Search by an example file", "", example_filters())
        if chosen:
            self.search_example(Path(chosen))

    def restore_cutoff(self, value: int) -> None:
        """Set the cutoff slider to ``value`` (percent) without searching: a saved setting coming back."""
        self.cutoff.blockSignals(True)
        self.cutoff.setValue(value)
        self.cutoff.blockSignals(False)
        self._show_cutoff(value)

    def _show_cutoff(self, value: int) -> None:
        self.cutoff_label.setText(f"p ≥ {value / 100:.2f}" if value else "p ≥ off")

    def _update_cutoff_enabled(self) -> None:
        enabled = self.gives_probability
        self.cutoff.setEnabled(enabled)
        self.cutoff_label.setEnabled(enabled)
        tip = ("Hide results whose match probability (the percentage under each result) is below this" if enabled
               else "This model's results carry no match probability (its calibration file is missing)")
        self.cutoff.setToolTip(tip)
        self.cutoff_label.setToolTip(tip)
