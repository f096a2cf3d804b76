"""Windows and dialogs sized to the screen they are on: never larger than its available area (a 2x scale factor
halves it, issue #44), a saved geometry brought back onto it, and panels that scroll rather than hold the window
wide or tall."""

from __future__ import annotations

from PySide6.QtCore import QRect
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


def available(widget: QWidget | None = None) -> QRect | None:
    """The available area (without panels and docks) of ``widget``'s screen, else the primary screen's."""
    screen = widget.screen() if widget is not None else None
    screen = screen or QGuiApplication.primaryScreen()
    return screen.availableGeometry() if screen is not None else None


def fit_to_screen(widget: QWidget, width: int, height: int) -> None:
    """Resize ``widget`` to ``width`` x ``height``, or to what its screen has room for when that is less."""
    area = available(widget)
    if area is not None:
        width, height = min(width, area.width()), min(height, area.height())
    widget.resize(width, height)


def clamp_to_screen(widget: QWidget) -> None:
    """Keep a top-level ``widget`` inside its screen's available area: smaller where it is larger, moved back
    where it hangs over an edge (a geometry saved at another scale factor or on a screen that is gone)."""
    area = available(widget)
    if area is None or area.isEmpty():
        return
    frame = widget.frameGeometry()
    extra_w, extra_h = frame.width() - widget.width(), frame.height() - widget.height()  # the window frame
    width = min(widget.width(), area.width() - extra_w)
    height = min(widget.height(), area.height() - extra_h)
    if (width, height) != (widget.width(), widget.height()):
        widget.resize(width, height)
    x = min(max(frame.x(), area.left()), area.right() + 1 - (width + extra_w))
    y = min(max(frame.y(), area.top()), area.bottom() + 1 - (height + extra_h))
    if (x, y) != (frame.x(), frame.y()):
        widget.move(x, y)


def scrolled(widget: QWidget) -> QScrollArea:
    """``widget`` in a frameless scroll area: it shrinks below its own minimum height (and width) and scrolls, so
    the window's minimum size stays small (at a 2x scale it must fit a 1920x1080 screen, issue #44)."""
    area = QScrollArea()
    area.setWidget(widget)
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    return area
