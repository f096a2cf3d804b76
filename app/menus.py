"""The main window's menu bar and the keys its actions claim: every action the window offers, with its
shortcut, and which key pressed in a line edit belongs to the window instead of the edit (``app.widgets.keys``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from PySide6.QtGui import QAction, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QLineEdit, QMenu

from app.widgets.keys import key_sequence

if TYPE_CHECKING:
    from app.mainwindow import MainWindow


class WindowMenus:
    """Builds ``window``'s menus; ``actions`` are the ones with a shortcut (Help ▸ Keyboard shortcuts lists them)."""

    def __init__(self, window: MainWindow) -> None:
        self._window = window
        self.actions: list[QAction] = []  # their shortcuts win over the line edits' own keys
        self._build(window)

    def _build(self, w: MainWindow) -> None:
        menu = w.menuBar()
        file_menu = menu.addMenu("&File")
        self._action(file_menu, "&Add folder…", lambda: w.library.add_folder(), "Ctrl+O")
        self._action(file_menu, "Search by &example file…", w.search_bar.choose_example)
        self._action(file_menu, "&Re-index library", w.library.reindex)
        self._action(file_menu, "&Purge missing items…", w.transfer.confirm_purge_missing)
        file_menu.addSeparator()
        transfer = w.transfer
        self._action(file_menu, "&Export annotations as a caption folder…", lambda: transfer.choose_export("folder"))
        self._action(file_menu, "Export annotations as &COCO captions JSON…", lambda: transfer.choose_export("coco"))
        self._action(file_menu, "&Import annotations from a caption folder…", lambda: transfer.choose_import("folder"))
        self._action(file_menu, "Import annotations from a COCO captions &JSON…",
                     lambda: transfer.choose_import("coco"))
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", w.request_quit, QKeySequence.StandardKey.Quit)
        edit = menu.addMenu("&Edit")
        self.undo_action = w.annotate.undo_stack.createUndoAction(w, "&Undo")
        self.undo_action.setShortcuts(QKeySequence.StandardKey.Undo)
        self.redo_action = w.annotate.undo_stack.createRedoAction(w, "&Redo")
        self.redo_action.setShortcuts(QKeySequence.StandardKey.Redo)
        edit.addActions([self.undo_action, self.redo_action])
        self.actions += [self.undo_action, self.redo_action]
        edit.addSeparator()
        # Judging never moves the selection on by itself, so the next key acts on the item on show (issue #32)
        accept = self._action(edit, "&Accept match", lambda: w.judge(+1), "Alt+A")
        accept.setStatusTip("Accept the selected result(s) for the query; the selection stays where it is "
                            "(Ctrl+Right moves on)")
        reject = self._action(edit, "&Reject match", lambda: w.judge(-1), "Alt+R")
        reject.setStatusTip("Reject the selected result(s) for the query: they leave its results, and the next "
                            "result takes their place, selected")
        edit.addSeparator()
        self._action(edit, "Find &similar", w.find_similar, "Ctrl+Shift+F")
        edit.addSeparator()
        self._action(edit, "&Preferences…", w.open_preferences, "Ctrl+,")
        nav = menu.addMenu("&Navigate")
        self._action(nav, "&Next item", w.results.select_next, "Ctrl+Right")
        self._action(nav, "&Previous item", w.results.select_previous, "Ctrl+Left")
        self._action(nav, "&Search box", w.focus_search, "Ctrl+L")
        self._action(nav, "&Caption box", w.focus_caption, "Ctrl+E")
        self._action(nav, "&Results grid", w.focus_results, "Ctrl+G")
        self._action(nav, "&Open large (Enter on a result)", w.open_viewer)
        models = menu.addMenu("&Models")
        self._action(models, "&Train…", w.open_training, "Ctrl+T")
        self._action(models, "&Manage models…", w.open_models)
        help_menu = menu.addMenu("&Help")
        self._action(help_menu, "&Keyboard shortcuts", w.open_shortcuts, "F1")
        self._action(help_menu, "Open &log folder", w.open_logs)

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
            if action in (self.undo_action, self.redo_action) and edit is self._window.annotate.caption_edit:
                return action.isEnabled() and not edit.text()
            return action.isEnabled()
        return False
