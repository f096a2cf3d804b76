"""The annotation panel's undoable actions: each a :class:`QUndoCommand` whose service writes the panel queues
on its one write thread (so they never reorder), the caption ids that survive undo / redo, and the Undo button.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import SignalInstance
from PySide6.QtGui import QUndoCommand, QUndoStack
from PySide6.QtWidgets import QPushButton, QWidget

from app.widgets.plaintext import plain_tooltip

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace


class AnnotationWriter(Protocol):
    """What a command needs of the panel (:class:`app.widgets.annotate.AnnotationPanel`)."""

    ids: CaptionIds
    verdict_changed: SignalInstance  # (media id, label, query)

    def write(self, action: Callable[[Workspace], None] | None, media_id: int,
              done: str | None = None, after: Callable[[], None] | None = None) -> None: ...


class UndoButton(QPushButton):
    """The panel's Undo button; its tooltip names the action it would undo.

    The tooltip follows ``QUndoStack.undoTextChanged`` through a method of the button itself, so Qt drops the
    connection when the button is destroyed. (A lambda holding the button outlived it: the stack, destroyed
    after the button when the window closes, clears itself and emits once more -> "already deleted".)
    """

    def __init__(self, stack: QUndoStack, parent: QWidget | None = None) -> None:
        super().__init__("Undo", parent)
        self.setEnabled(False)
        self.clicked.connect(stack.undo)
        stack.canUndoChanged.connect(self.setEnabled)
        stack.undoTextChanged.connect(self.show_undo_text)

    def show_undo_text(self, text: str) -> None:
        self.setToolTip(plain_tooltip(f"Undo {text} (Ctrl+Z)") if text else "Nothing to undo")


class CaptionIds:
    """Caption ids across undo/redo: re-creating a deleted caption gives it a new id; old ids alias it."""

    def __init__(self) -> None:
        self._alias: dict[int, int] = {}
        self._lock = threading.Lock()

    def resolve(self, caption_id: int) -> int:
        with self._lock:
            while caption_id in self._alias:
                caption_id = self._alias[caption_id]
            return caption_id

    def moved(self, old: int, new: int) -> None:
        with self._lock:
            if old != new:
                self._alias[old] = new


class _ServiceCommand(QUndoCommand):
    """An undoable annotation; ``_do`` and ``_undo`` run on the panel's write thread."""

    def __init__(self, panel: AnnotationWriter, text: str, media_id: int) -> None:
        super().__init__(text)
        self.panel, self.media_id = panel, media_id

    def redo(self) -> None:
        self.panel.write(self._do, self.media_id, f"Saved: {self.text()}")

    def undo(self) -> None:
        self.panel.write(self._undo, self.media_id, f"Undone: {self.text()}")

    def _do(self, service: Workspace) -> None:
        raise NotImplementedError

    def _undo(self, service: Workspace) -> None:
        raise NotImplementedError


class AddCaption(_ServiceCommand):
    """Add a user caption; undo deletes it."""

    def __init__(self, panel: AnnotationWriter, media_id: int, text: str) -> None:
        super().__init__(panel, f"add caption “{text}”", media_id)
        self.caption_text = text
        self.caption_id: int | None = None
        self._first_id: int | None = None

    def _do(self, service: Workspace) -> None:
        self.caption_id = service.annotations.add_caption(self.media_id, self.caption_text)
        if self._first_id is None:
            self._first_id = self.caption_id
        else:  # a redo: later commands know the caption by its first id
            self.panel.ids.moved(self._first_id, self.caption_id)

    def _undo(self, service: Workspace) -> None:
        if self.caption_id is not None:
            service.annotations.delete_caption(self.caption_id)


class EditCaption(_ServiceCommand):
    """Change a caption's text; undo restores the old text."""

    def __init__(self, panel: AnnotationWriter, media_id: int, caption_id: int, old: str, new: str) -> None:
        super().__init__(panel, f"edit caption “{old}” → “{new}”", media_id)
        self.caption_id, self.old, self.new = caption_id, old, new

    def _do(self, service: Workspace) -> None:
        service.annotations.update_caption(self.panel.ids.resolve(self.caption_id), self.new)

    def _undo(self, service: Workspace) -> None:
        service.annotations.update_caption(self.panel.ids.resolve(self.caption_id), self.old)


class DeleteCaption(_ServiceCommand):
    """Delete a caption; undo adds its text back (under a new id, aliased to the old one)."""

    def __init__(self, panel: AnnotationWriter, media_id: int, caption_id: int, text: str) -> None:
        super().__init__(panel, f"delete caption “{text}”", media_id)
        self.caption_id, self.caption_text = caption_id, text

    def _do(self, service: Workspace) -> None:
        service.annotations.delete_caption(self.panel.ids.resolve(self.caption_id))

    def _undo(self, service: Workspace) -> None:
        new_id = service.annotations.add_caption(self.media_id, self.caption_text)
        self.panel.ids.moved(self.panel.ids.resolve(self.caption_id), new_id)


class JudgePair(_ServiceCommand):
    """Accept (+1) or reject (-1) the item for a text query; undo deletes the pair."""

    def __init__(self, panel: AnnotationWriter, media_id: int, query: str, label: int) -> None:
        super().__init__(panel, f"{'accept' if label > 0 else 'reject'} for “{query}”", media_id)
        self.query, self.label = query, label
        self.pair_id: int | None = None

    def _do(self, service: Workspace) -> None:
        judge = service.annotations.accept_pair if self.label > 0 else service.annotations.reject_pair
        self.pair_id = judge(self.query, self.media_id)

    def _undo(self, service: Workspace) -> None:
        if self.pair_id is not None:
            service.annotations.delete_pair(self.pair_id)

    def redo(self) -> None:
        super().redo()
        self.panel.verdict_changed.emit(self.media_id, self.label, self.query)

    def undo(self) -> None:
        # the results take the item back once the pair is gone from the library, not before: restoring it
        # re-reads its state, and a read racing the delete would find it still rejected and drop it again
        self.panel.write(self._undo, self.media_id, f"Undone: {self.text()}",
                         after=lambda: self.panel.verdict_changed.emit(self.media_id, 0, self.query))
