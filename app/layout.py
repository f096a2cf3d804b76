"""The main window's panels and how they share its width: the search bar above three columns (the folders, the
results under their summary line, the inspector over the annotation panel), in splitters the user drags, saved
and restored with the settings; and the rule that keeps a narrow window's grid usable."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter, QVBoxLayout, QWidget

from app.settings import GuiSettings
from app.widgets.screen import scrolled

GRID_COLUMNS = 2  # a narrow window makes room for at least this many result columns


def column(*widgets: QWidget, stretch_last: bool = True) -> QWidget:
    """``widgets`` one above the other, without margins (the last one takes the spare height)."""
    box = QWidget()
    layout = QVBoxLayout(box)
    layout.setContentsMargins(0, 0, 0, 0)
    for i, widget in enumerate(widgets):
        layout.addWidget(widget, 1 if stretch_last and i == len(widgets) - 1 else 0)
    return box


class WindowLayout:
    """``top`` above ``left`` | ``centre`` | ``upper`` over ``lower``; ``body`` is the window's central widget."""

    def __init__(self, top: QWidget, left: QWidget, centre: QWidget, upper: QWidget, lower: QWidget) -> None:
        self.right_splitter = QSplitter(Qt.Orientation.Vertical)
        self.right_splitter.addWidget(upper)
        self.right_splitter.addWidget(scrolled(lower))
        self.right_splitter.setStretchFactor(0, 3)
        self.right_splitter.setStretchFactor(1, 1)
        self.right_splitter.setSizes([470, 410])
        self.splitter = QSplitter()
        for widget, stretch in ((scrolled(left), 0), (centre, 1), (self.right_splitter, 0)):
            self.splitter.addWidget(widget)
            self.splitter.setStretchFactor(self.splitter.count() - 1, stretch)
        self.splitter.setSizes([240, 720, 440])
        self.body = column(top, self.splitter)
        self._left = left
        self._library_collapsed = False  # the folders panel was folded away to make room for the grid

    def restore(self, settings: GuiSettings) -> None:
        """The splitters as the user left them."""
        for name, splitter in (("main", self.splitter), ("right", self.right_splitter)):
            if (saved := settings.splitter_state(name)) is not None:
                splitter.restoreState(saved)

    def save(self, settings: GuiSettings) -> None:
        settings.set_splitter_state("main", self.splitter.saveState())
        settings.set_splitter_state("right", self.right_splitter.saveState())

    def keep_grid_usable(self, cell_width: int) -> None:
        """Give the grid room for ``GRID_COLUMNS`` cells of ``cell_width``: the folders panel collapses first (its
        splitter handle brings it back), then the inspector side shrinks to its minimum."""
        sizes = self.splitter.sizes()
        if len(sizes) != 3 or sum(sizes) == 0:
            return
        need = GRID_COLUMNS * cell_width + 24  # + the scroll bar and frame
        if sizes[1] >= need:
            library = self._left.sizeHint().width()  # the panel's own width, not its scroll area's
            if self._library_collapsed and sizes[0] == 0 and sizes[1] - library >= need:  # wide again
                self._library_collapsed = False
                self.splitter.setSizes([library, sizes[1] - library, sizes[2]])
            return
        total = sum(sizes)
        self._library_collapsed = self._library_collapsed or sizes[0] > 0
        sizes[0] = 0
        deficit = need - (total - sizes[2])
        right_min = self.right_splitter.minimumSizeHint().width()
        sizes[2] -= max(0, min(sizes[2] - right_min, deficit))
        sizes[1] = total - sizes[0] - sizes[2]
        self.splitter.setSizes(sizes)
