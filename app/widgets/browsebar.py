"""The strip above the results: how the library is listed when there is no query (the kind and folder filters
hold for searches too), example queries to try, and how much of the library is captioned."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.search import BrowseOptions
from app.state import LibrarySnapshot, LibraryState

# Newest / oldest go by the date taken: the photo's EXIF date (the file's modification date where it has none), as
# photo managers sort; "modified" by the file's modification date alone.
SORTS = (("newest", "Newest first"), ("oldest", "Oldest first"), ("modified", "Modified, newest"),
         ("modified-oldest", "Modified, oldest"), ("name", "By name"))
DEFAULT_SORT = SORTS[0][0]
KINDS = ((None, "Every kind"), ("image", "Photos"), ("animation", "GIFs"), ("video", "Videos"))
ANNOTATIONS = (("all", "Captioned or not"), ("captioned", "Captioned"), ("uncaptioned", "Not captioned yet"),
               ("judged", "Accepted / rejected"))
# What the demo library answers well (each finds its item first with the shipped starter); shown while the demo folder
# is one of the library's and the user has not searched yet (on the user's own photos they would be about nothing).
# Not "a rocket on the launch pad": the starter read few rockets and ranks that photo 10th of 12
# (docs/benchmarks.md, "Caption harm and calibration").
EXAMPLE_QUERIES = ("a cat lying on a rug", "a cup of coffee", "a man with a camera on a tripod",
                   "a bouncing red ball", "sunset over the sea")


def _demo_folder() -> Path | None:
    """Where the first start puts the demo library (None where the demo is not installed)."""
    try:
        from resources.demo import demo_dir
    except ImportError:
        return None
    return demo_dir()


def _combo(choices: tuple[tuple[Any, str], ...], tip: str) -> QComboBox:
    combo = QComboBox(toolTip=tip)
    for value, label in choices:
        combo.addItem(label, value)
    # as wide as its choice where there is room, down to a few letters (elided) where there is not: the bar's
    # four pickers once made the window at least 1,048 px wide, too wide for a 2x screen (issue #44)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(5)
    return combo


class BrowseBar(QWidget):
    """Sort / kind / folder / annotation pickers, example queries, caption progress.

    Kind and folder narrow searches as well as the listing, so they stay while searching; sort and the
    annotation filter belong to the listing (a search is ordered by how well items match).
    """

    options_changed = Signal(object)  # BrowseOptions
    example_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sort = _combo(SORTS, "Order of the library: the dates the photos were taken (where a photo does not "
                                  "say, its file's date), the files' modification dates, or their names")
        self.kind = _combo(KINDS, "Show one kind of media")
        self.folder = _combo(((None, "All folders"),), "Show one library folder")
        self.annotation = _combo(ANNOTATIONS, "Show items by what you wrote about them")
        for combo in (self.sort, self.kind, self.folder, self.annotation):
            combo.currentIndexChanged.connect(lambda _i: self.options_changed.emit(self.options()))
        self.progress = QLabel()
        self.progress.setTextFormat(Qt.TextFormat.PlainText)
        self.progress.setWordWrap(True)  # a narrow window keeps its grid: the line folds rather than widen the column
        self.progress.setMinimumWidth(self.progress.fontMetrics().horizontalAdvance("00,000 of 00,000"))
        self.progress.setToolTip("Items with a caption you wrote or imported (the model's guesses do not count)")
        self.examples = QLabel()
        self.examples.setTextFormat(Qt.TextFormat.RichText)
        self.examples.setWordWrap(True)
        self.examples.setText("Try: " + " · ".join(
            f"<a href='{html.escape(q, quote=True)}'>{html.escape(q)}</a>" for q in EXAMPLE_QUERIES))
        self.examples.linkActivated.connect(self.example_chosen.emit)
        self._examples_wanted, self._demo_here = True, False
        self.pickers = QWidget()
        row = QHBoxLayout(self.pickers)
        row.setContentsMargins(0, 0, 0, 0)
        self.pickers_label = QLabel("Library:")
        row.addWidget(self.pickers_label)
        for combo in (self.sort, self.kind, self.folder, self.annotation):
            row.addWidget(combo)
        row.addStretch(1)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.pickers, 1)
        top.addWidget(self.progress)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.addLayout(top)
        layout.addWidget(self.examples)

    def options(self) -> BrowseOptions:
        folder = self.folder.currentData()
        return BrowseOptions(self.sort.currentData(), self.kind.currentData(),
                             Path(folder) if folder else None, self.annotation.currentData())

    def restore_sort(self, sort: str) -> None:
        """Show the order chosen in an earlier session (one this version does not offer: the default), silently:
        the window reads :meth:`options` when it lists the library."""
        index = self.sort.findData(sort)
        self.sort.blockSignals(True)
        self.sort.setCurrentIndex(index if index >= 0 else self.sort.findData(DEFAULT_SORT))
        self.sort.blockSignals(False)

    def set_folders(self, roots: list[Path]) -> None:
        """Offer the library's folders (the choice is kept when it is still one of them)."""
        current = self.folder.currentData()
        self.folder.blockSignals(True)
        self.folder.clear()
        self.folder.addItem("All folders", None)
        for root in roots:
            self.folder.addItem(Path(root).name or str(root), str(root))
            self.folder.setItemData(self.folder.count() - 1, str(root), Qt.ItemDataRole.ToolTipRole)
        index = self.folder.findData(current) if current else 0
        self.folder.setCurrentIndex(max(0, index))
        self.folder.blockSignals(False)
        demo = _demo_folder()
        self._demo_here = demo is not None and any(Path(root) == demo for root in roots)
        self.examples.setVisible(self._examples_wanted and self._demo_here)
        if current and index < 0:
            self.options_changed.emit(self.options())

    def set_browsing(self, browsing: bool, show_examples: bool) -> None:
        """Sort and the annotation filter only mean something without a query; kind and folder narrow a
        search too; the examples are offered until the first search, in a library with the demo folder."""
        self.sort.setVisible(browsing)
        self.annotation.setVisible(browsing)
        self.pickers_label.setText("Library:" if browsing else "Only:")
        self.kind.setToolTip("Show one kind of media" if browsing else "Search only this kind of media")
        self.folder.setToolTip("Show one library folder" if browsing else "Search only this library folder")
        self._examples_wanted = show_examples
        self.examples.setVisible(show_examples and self._demo_here)

    def set_progress(self, captioned: int, total: int) -> None:
        # of the indexed items, the set the listing's header counts (#44: "12 items" beside "0 of 108 captioned")
        self.progress.setText(f"{captioned:,} of {total:,} indexed items captioned" if total else "")

    def follow(self, state: LibraryState) -> None:
        """Show ``state``'s folders and caption progress, and keep them current."""
        state.changed.connect(self._show_snapshot)

    def _show_snapshot(self, snapshot: LibrarySnapshot, aspects: frozenset[str]) -> None:
        if "items" in aspects:
            self.set_folders(list(snapshot.roots))
        if aspects & {"items", "annotations"}:
            self.set_progress(snapshot.captioned, snapshot.indexed)
