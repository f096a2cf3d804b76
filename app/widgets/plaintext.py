"""Showing user text (captions, queries, paths, engine messages) so that Qt never reads it as markup.

Qt guesses: a label, tooltip or message box whose text "might be rich text" (it starts with something that
looks like a tag) is rendered as HTML. Captions and file names are the user's, so everything that shows
them goes through here: labels are set to plain text, tooltips are escaped HTML, message boxes are plain.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget


def plain_tooltip(text: str) -> str:
    """``text`` as a tooltip that shows exactly those characters (line breaks kept)."""
    if not text:
        return ""
    return "<p style='white-space:pre-wrap'>" + html.escape(text) + "</p>"


def plain_label(text: str = "", wrap: bool = False) -> QLabel:
    """A label that never interprets its text as markup."""
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(wrap)
    return label


def show_message(parent: QWidget | None, icon: QMessageBox.Icon, title: str, text: str) -> None:
    """A modal message box with plain ``text`` (exception messages carry paths and user strings)."""
    box = QMessageBox(icon, title, text, QMessageBox.StandardButton.Ok, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.exec()


def ask(parent: QWidget | None, title: str, text: str) -> bool:
    """A Yes / No question with plain ``text``; True for Yes."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    return box.exec() == QMessageBox.StandardButton.Yes


def plural(n: int, noun: str, many: str | None = None) -> str:
    """"1 item", "2 items", "1,024 items" (``many``: an irregular plural, "1 match" / "2 matches")."""
    return f"{n:,} {noun if n == 1 else (many or noun + 's')}"
