"""The main window's menu bar and the keys its actions claim: every action the window offers, with its
shortcut, and which key pressed in a line edit belongs to the window instead of the edit (``app.widgets.keys``).

The menus know the window only through what it passes in: the commands its actions run (:class:`WindowCommands`),
the undo stack the Edit menu offers and the caption line whose text keeps its own undo."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtGui import QAction, QKeyEvent, QKeySequence, QUndoStack
from PySide6.QtWidgets import QLineEdit, QMainWindow, QMenu

from app.widgets.keys import key_sequence

Command = Callable[[], Any]


@dataclass(frozen=True)
class WindowCommands:
    """What the window's menu actions run, by name."""

    add_folder: Command
    search_by_example: Command
    reindex: Command
    purge_missing: Command
    export_annotations: Callable[[str], Any]  # "folder" or "coco"
    import_annotations: Callable[[str], Any]  # "folder" or "coco"
    quit: Command
    judge: Callable[[int], Any]  # +1 accept, -1 reject
    find_similar: Command
    preferences: Command
    next_item: Command
    previous_item: Command
    focus_search: Command
    focus_caption: Command
    focus_results: Command
    open_large: Command
    train: Command
    manage_models: Command
    shortcuts: Command
    open_logs: Command


class WindowMenus:
    """Builds ``window``'s menus; ``actions`` are the ones with a shortcut (Help ▸ Keyboard shortcuts lists them)."""

    def __init__(self, window: QMainWindow, commands: WindowCommands, undo_stack: QUndoStack,
                 caption_edit: QLineEdit) -> None:
        self._window = window
        self._caption_edit = caption_edit
        self.actions: list[QAction] = []  # their shortcuts win over the line edits' own keys
        self._build(window, commands, undo_stack)

    def _build(self, window: QMainWindow, c: WindowCommands, undo_stack: QUndoStack) -> None:
        menu = window.menuBar()
        file_menu = menu.addMenu("&File")
        self._action(file_menu, "&Add folder…", c.add_folder, "Ctrl+O")
        self._action(file_menu, "Search by &example file…", c.search_by_example)
        self._action(file_menu, "&Re-index library", c.reindex)
        self._action(file_menu, "&Purge missing items…", c.purge_missing)
        file_menu.addSeparator()
        self._action(file_menu, "&Export annotations as a caption folder…", lambda: c.export_annotations("folder"))
        self._action(file_menu, "Export annotations as &COCO captions JSON…", lambda: c.export_annotations("coco"))
        self._action(file_menu, "&Import annotations from a caption folder…", lambda: c.import_annotations("folder"))
        self._action(file_menu, "Import annotations from a COCO captions &JSON…",
                     lambda: c.import_annotations("coco"))
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", c.quit, QKeySequence.StandardKey.Quit)
        edit = menu.addMenu("&Edit")
        self.undo_action = undo_stack.createUndoAction(window, "&Undo")
        self.undo_action.setShortcuts(QKeySequence.StandardKey.Undo)
        self.redo_action = undo_stack.createRedoAction(window, "&Redo")
        self.redo_action.setShortcuts(QKeySequence.StandardKey.Redo)
        edit.addActions([self.undo_action, self.redo_action])
        self.actions += [self.undo_action, self.redo_action]
        edit.addSeparator()
        # Judging never moves the selection on by itself, so the next key acts on the item on show (issue #32)
        accept = self._action(edit, "&Accept match", lambda: c.judge(+1), "Alt+A")
        accept.setStatusTip("Accept the selected result(s) for the query; the selection stays where it is "
                            "(Ctrl+Right moves on)")
        reject = self._action(edit, "&Reject match", lambda: c.judge(-1), "Alt+R")
        reject.setStatusTip("Reject the selected result(s) for the query: they leave its results, and the next "
                            "result takes their place, selected")
        edit.addSeparator()
        self._action(edit, "Find &similar", c.find_similar, "Ctrl+Shift+F")
        edit.addSeparator()
        self._action(edit, "&Preferences…", c.preferences, "Ctrl+,")
        nav = menu.addMenu("&Navigate")
        self._action(nav, "&Next item", c.next_item, "Ctrl+Right")
        self._action(nav, "&Previous item", c.previous_item, "Ctrl+Left")
        self._action(nav, "&Search box", c.focus_search, "Ctrl+L")
        self._action(nav, "&Caption box", c.focus_caption, "Ctrl+E")
        self._action(nav, "&Results grid", c.focus_results, "Ctrl+G")
        self._action(nav, "&Open large (Enter on a result)", c.open_large)
        models = menu.addMenu("&Models")
        self._action(models, "&Train…", c.train, "Ctrl+T")
        self._action(models, "&Manage models…", c.manage_models)
        help_menu = menu.addMenu("&Help")
        self._action(help_menu, "&Keyboard shortcuts", c.shortcuts, "F1")
        self._action(help_menu, "Open &log folder", c.open_logs)

    def _action(self, menu: QMenu, text: str, slot: Callable[[], Any], shortcut: Any = None) -> QAction:
        action = QAction(text, self._window)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            self.actions.append(action)
        action.triggered.connect(lambda _checked=False: slot())
        menu.addAction(action)
        return action

    def claims(self, edit: QLineEdit, event: QKeyEvent) -> bool:
        """Whether a key pressed in ``edit`` belongs to one of the window's actions (see ``app.widgets.keys``).

        Ctrl+Z undoes the last annotation (what the Edit menu offers) unless a caption is being typed, whose
        text keeps its own undo.
        """
        pressed = key_sequence(event)
        for action in self.actions:
            if not any(s.matches(pressed) == QKeySequence.SequenceMatch.ExactMatch for s in action.shortcuts()):
                continue
            if action in (self.undo_action, self.redo_action) and edit is self._caption_edit:
                return action.isEnabled() and not edit.text()
            return action.isEnabled()
        return False
