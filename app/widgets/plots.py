"""Charts that are read, not handled: the mouse wheel over one scrolls the panel or dialog it sits in."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QWheelEvent


class StillPlot(pg.PlotWidget):
    """A pyqtgraph chart without zoom, pan or context menu. pyqtgraph's view takes every wheel event (it zooms, or
    with the mouse disabled does nothing) so a dialog that scrolls stopped scrolling wherever the pointer crossed a
    chart, and one wheel turn zoomed a chart out of its data (seen in the training dialog); here the event goes on
    to the widget around it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()

    def wheelEvent(self, event: QWheelEvent) -> None:
        event.ignore()
