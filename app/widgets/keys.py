"""Window shortcuts that keep working while a line edit has the focus.

A focused ``QLineEdit`` claims many key sequences before the window's shortcuts see them: it accepts the
``ShortcutOverride`` event for its standard keys (Ctrl+Z undo, Ctrl+Left / Ctrl+Right word steps) and for the
emacs bindings Qt gives it on Linux (Ctrl+E end of line, Ctrl+A start, ...). The search box holds the focus
most of the time, so the window's actions (Ctrl+E "Caption box", Ctrl+Right "Next item", Ctrl+Z "Undo
reject") silently did line-editing instead. A :class:`WindowKeysEdit` asks the window first: a key sequence
the window wants is left to the window's action (the override is not accepted), everything else edits text.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import QLineEdit, QWidget

KeyClaim = Callable[[QLineEdit, QKeyEvent], bool]  # (the focused edit, the key) -> the window takes it


def _never(_edit: QLineEdit, _event: QKeyEvent) -> bool:
    return False


class WindowKeysEdit(QLineEdit):
    """A line edit that leaves the key sequences its window claims to the window's shortcuts."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._window_claims: KeyClaim = _never

    def leave_keys_to(self, claims: KeyClaim) -> None:
        """``claims(edit, key)`` says whether a key pressed in this edit belongs to the window."""
        self._window_claims = claims

    def event(self, event: QEvent) -> bool:
        if (event.type() == QEvent.Type.ShortcutOverride and isinstance(event, QKeyEvent)
                and self._window_claims(self, event)):
            event.ignore()  # not overriding lets the window's shortcut fire
            return True
        return super().event(event)


def key_sequence(event: QKeyEvent) -> QKeySequence:
    """The key sequence one key press makes (modifiers included)."""
    return QKeySequence(event.keyCombination())
