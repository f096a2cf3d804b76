"""The annotation panel: the current item's captions, Accept / Reject for the current query, Undo, and a
"What to annotate next" list (``Annotations.suggest``) whose items the user can pick.

Labelling is keyboard-first: type a caption, Enter saves it and moves to the next result (Enter on an empty
line just moves on); Ctrl+Right / Ctrl+Left step through results even while typing; Ctrl+Z undoes the last
annotation action. After an item picked from the suggestions, Enter moves to the next suggestion
instead of the next result. The suggestions are thumbnails; Enter or a double-click on one opens it large, and
the heading says why they come in that order (the policy ``Annotations.suggestion_policy`` chose). Every
action is a :class:`QUndoCommand`; its service writes run, in order, on one worker thread, so a slow catalog
never freezes the window and the writes never reorder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSize, Qt, QThreadPool, Signal
from PySide6.QtGui import QColor, QIcon, QKeyEvent, QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListView,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.widgets.annotationcommands import AddCaption, CaptionIds, DeleteCaption, EditCaption, JudgePair, UndoButton
from app.widgets.images import ThumbnailCache
from app.widgets.keys import WindowKeysEdit
from app.widgets.plaintext import plain_tooltip
from app.widgets.provenance import PROVENANCE, PROVENANCE_MARK, provenance_summary
from app.workers import Worker, while_alive
from engine.types import SearchHit

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

log = logging.getLogger(__name__)

CAPTION_ID_ROLE = Qt.ItemDataRole.UserRole + 1
MEDIA_ID_ROLE = Qt.ItemDataRole.UserRole + 2
SOURCE_ROLE = Qt.ItemDataRole.UserRole + 3  # a caption's provenance: "user", "imported", "pseudo"
DELETABLE = frozenset({"user", "imported"})  # the model's guess is not a caption a person can take back
GUESS_NOT_DELETABLE = ("The model's guess is not a caption: there is nothing of yours to delete. Write your own "
                       "caption above; what you write outranks the guess.")
SUGGESTIONS = 20  # how many "what to annotate next" items to ask for
SUGGESTION_POLICY = "auto"
TICK = "✓ "  # a suggestion annotated since the list was loaded reads "✓ annotated"
SUGGESTION_ICON = 84  # side of a suggestion's thumbnail
# Why the suggestions come in their order, by the policy that chose them (engine.loop.suggest)
SUGGESTION_HEADINGS = {
    "uncertainty": ("What to annotate next: the model is least sure of these",
                    "Ordered by the active model's uncertainty (its sigma), most uncertain first: a caption on "
                    "one of these teaches it the most."),
    "disagreement": ("What to annotate next: the model is least sure of these (its heads disagree)",
                     "Ordered by how much the active model's heads disagree about each item, most first: a caption "
                     "on one of these teaches it the most."),
    "random": ("What to annotate next: a random sample of uncaptioned items",
               "In no particular order: the zero-shot ranking (or a model with one head and no uncertainty) cannot "
               "tell which items a caption would help most. A trained PCME or multi-head model ranks them."),
}


class CaptionEdit(WindowKeysEdit):
    """The caption line; the window's shortcuts (Ctrl+Right / Ctrl+Left next / previous item...) win over
    its line-editing keys (see :mod:`app.widgets.keys`)."""


class AnnotationPanel(QWidget):
    """Captions of the current result (add, edit in place, delete), Accept / Reject, Undo."""

    next_requested = Signal()
    previous_requested = Signal()
    captions_changed = Signal(int, tuple)  # media id, caption texts
    pair_judged = Signal(int, int)  # media id, +1 / -1
    verdict_changed = Signal(int, int, str)  # media id, +1 / -1 (0: undone), query: results drop / restore it
    saved = Signal(str)  # an annotation reached the library: "Saved: add caption “…”"
    suggestion_chosen = Signal(int)  # media id picked from "What to annotate next"
    suggestion_open_requested = Signal(int)  # media id to show large (Enter / double-click on a suggestion)
    suggestions_loaded = Signal(int)  # how many suggestions the list now shows
    error = Signal(str)
    writes_done = Signal()  # the write queue drained (tests and the status bar listen)

    def __init__(self, pool: QThreadPool, parent: QWidget | None = None,
                 thumbnails: ThumbnailCache | None = None) -> None:
        super().__init__(parent)
        self._pool = pool  # must run one job at a time: writes keep their order
        self._thumbnails = thumbnails  # the suggestions' pictures (the results grid's cache)
        self.suggestion_policy: str | None = None  # the policy that ordered the suggestions shown
        self._service: Workspace | None = None
        self._in_flight = 0
        self._populating = False
        self.query: str | Path | None = None
        self.hit: SearchHit | None = None
        self.from_suggestion = False  # the current item was picked from "What to annotate next"
        # the item last picked there: it stays picked whenever it is shown again (the results refreshing, the
        # viewer following it, a row reselected), whatever was shown in between
        self._picked: int | None = None
        self._suggestion_generation = 0
        self.ids = CaptionIds()
        self._last_texts: dict[int, str] = {}  # caption id -> text as last read, to tell edits apart
        self.undo_stack = QUndoStack(self)
        self._build()
        self.set_item(None, None)

    def _build(self) -> None:
        self.heading = QLabel("Captions")
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        self.captions_list = QListWidget()
        self.captions_list.setWordWrap(True)  # long captions wrap instead of scrolling sideways
        self.captions_list.setToolTip("Double-click (or F2) to edit a caption; Delete removes it")
        self.captions_list.itemChanged.connect(self._caption_edited)
        self.caption_edit = CaptionEdit()
        self.caption_edit.setPlaceholderText("Type a caption, Enter saves and moves to the next item")
        self.caption_edit.returnPressed.connect(self.save_caption_and_advance)
        self.delete_button = QPushButton("Delete caption")
        self.delete_button.clicked.connect(self.delete_selected_caption)
        self.captions_list.currentItemChanged.connect(lambda *_: self._update_delete())
        self.accept_button = QPushButton("Accept match")
        self.reject_button = QPushButton("Reject match")
        self.accept_button.setToolTip("This result matches the query (Alt+A); the selection stays on it")
        self.reject_button.setToolTip("This result does not match the query (Alt+R); it leaves this query's "
                                      "results and the next result takes its place")
        self.accept_button.clicked.connect(lambda: self.judge(+1))
        self.reject_button.clicked.connect(lambda: self.judge(-1))
        self.undo_button = UndoButton(self.undo_stack)
        self.status = QLabel("")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.suggest_heading = QLabel("What to annotate next")
        self.suggest_heading.setTextFormat(Qt.TextFormat.PlainText)
        self.suggest_heading.setWordWrap(True)
        self.suggest_heading.setToolTip("Items whose captions would teach a trained model the most; "
                                        "click one to annotate it")
        self.suggestions = QListWidget()
        self.suggestions.setViewMode(QListView.ViewMode.IconMode)  # thumbnails, a grid that wraps
        self.suggestions.setIconSize(QSize(SUGGESTION_ICON, SUGGESTION_ICON))
        line = self.suggestions.fontMetrics().height()  # room for "✓ annotated" under a picture
        self.suggestions.setGridSize(QSize(SUGGESTION_ICON + 16, SUGGESTION_ICON + line + 10))
        self.suggestions.setMinimumHeight(SUGGESTION_ICON + line + 16)  # one row of pictures, whole
        self.suggestions.setResizeMode(QListView.ResizeMode.Adjust)
        self.suggestions.setMovement(QListView.Movement.Static)
        self.suggestions.setUniformItemSizes(True)
        self.suggestions.itemClicked.connect(self._suggestion_clicked)
        self.suggestions.itemActivated.connect(self._suggestion_activated)
        if self._thumbnails is not None:
            self._thumbnails.thumbnail_ready.connect(self._thumbnail_arrived)
        self.suggest_refresh = QPushButton("Refresh")
        self.suggest_refresh.clicked.connect(self.refresh_suggestions)
        self._layout()

    def _layout(self) -> None:
        judge_row = QHBoxLayout()
        judge_row.addWidget(self.accept_button)
        judge_row.addWidget(self.reject_button)
        edit_row = QHBoxLayout()
        edit_row.addWidget(self.delete_button)
        edit_row.addStretch(1)
        edit_row.addWidget(self.undo_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.heading)
        layout.addWidget(self.captions_list, 1)
        layout.addWidget(self.caption_edit)
        layout.addLayout(edit_row)
        layout.addLayout(judge_row)
        layout.addWidget(self.status)
        suggest_row = QHBoxLayout()
        suggest_row.addWidget(self.suggest_heading, 1)
        suggest_row.addWidget(self.suggest_refresh)
        layout.addLayout(suggest_row)
        layout.addWidget(self.suggestions, 1)

    def set_service(self, service: Workspace | None) -> None:
        """Annotate ``service``'s library; the undo history belongs to the previous one and is dropped."""
        self._service = service
        self.undo_stack.clear()
        self.set_item(None, None)
        self.suggestions.clear()
        self.suggest_refresh.setEnabled(service is not None)
        if service is not None:
            self.refresh_suggestions()

    # --- what to annotate next
    def refresh_suggestions(self) -> None:
        """Ask the library which items to annotate next (on the write thread, so queued captions count)."""
        service = self._service
        if service is None:
            return
        self._suggestion_generation += 1
        generation = self._suggestion_generation

        def job() -> tuple[str | None, list[tuple[int, float, str]]]:
            policy = service.annotations.suggestion_policy(SUGGESTION_POLICY)
            picks = service.annotations.suggest(SUGGESTIONS, SUGGESTION_POLICY)
            return policy, [(int(media_id), float(score), Path(service.library.media(int(media_id)).path).name)
                            for media_id, score in picks]

        self.suggest_heading.setText("What to annotate next (asking…)")
        worker = Worker(job)
        worker.signals.returned.connect(
            while_alive(self, lambda result: self._show_suggestions(generation, *result)))
        worker.signals.errored.connect(while_alive(self, lambda exc: self._suggestions_failed(generation, exc)))
        worker.start(self._pool)

    def _show_suggestions(self, generation: int, policy: str | None, rows: list[tuple[int, float, str]]) -> None:
        if generation != self._suggestion_generation:
            return
        self.suggestion_policy = policy
        self.suggestions.clear()
        ranked = len({score for _, score, _ in rows}) > 1  # equal scores (e.g. a random pick) say nothing
        for rank, (media_id, score, name) in enumerate(rows, start=1):
            item = QListWidgetItem("")  # the picture says it; the name is in the tooltip
            item.setData(MEDIA_ID_ROLE, media_id)
            why = f"how much a caption would help: {score:.3f}" if ranked else "picked at random"
            item.setToolTip(plain_tooltip(f"{rank}. {name}\n{why}\nclick: annotate it; Enter or double-click: "
                                          "open it large"))
            item.setSizeHint(self.suggestions.gridSize())  # a cell as big before its picture arrives as after
            self._set_thumbnail(item)
            self.suggestions.addItem(item)
        heading, tip = SUGGESTION_HEADINGS.get(policy or "", (None, None))
        if not rows:
            heading, tip = ("What to annotate next: nothing to suggest",  # an empty library is not "done"
                            "Every indexed item has a caption, or nothing is indexed yet.")
        elif heading is None:  # a service that does not say its policy
            heading = ("What to annotate next" if ranked or len(rows) == 1 else
                       "What to annotate next (in no particular order until a trained model ranks them)")
            tip = "Items whose captions would teach a trained model the most"
        self.suggest_heading.setText(heading)
        self.suggest_heading.setToolTip(plain_tooltip(f"{tip}\nClick one to annotate it; Enter or a double-click "
                                                      "opens it large."))
        self.suggestions_loaded.emit(len(rows))

    def _set_thumbnail(self, item: QListWidgetItem) -> None:
        cache = self._thumbnails
        pixmap = cache.thumbnail(int(item.data(MEDIA_ID_ROLE))) if cache is not None else None
        if pixmap is not None and not pixmap.isNull():
            item.setIcon(QIcon(pixmap))

    def _thumbnail_arrived(self, media_id: int) -> None:
        for row in range(self.suggestions.count()):
            item = self.suggestions.item(row)
            if item.data(MEDIA_ID_ROLE) == media_id:
                self._set_thumbnail(item)

    def suggestion_shows_thumbnail(self, row: int) -> bool:
        """Whether the suggestion at ``row`` shows its picture yet (tests)."""
        item = self.suggestions.item(row)
        return item is not None and not item.icon().isNull()

    def _suggestions_failed(self, generation: int, exc: BaseException) -> None:
        if generation == self._suggestion_generation:
            self.suggest_heading.setText("What to annotate next: unavailable")
            self.suggest_heading.setToolTip(plain_tooltip(str(exc)))
            self.error.emit(f"Suggestions unavailable: {exc}")

    def suggested_ids(self) -> list[int]:
        """The media ids the suggestion list shows, in order."""
        return [int(self.suggestions.item(row).data(MEDIA_ID_ROLE)) for row in range(self.suggestions.count())]

    def _suggestion_clicked(self, item: QListWidgetItem) -> None:
        self._choose(int(item.data(MEDIA_ID_ROLE)))

    def _suggestion_activated(self, item: QListWidgetItem) -> None:
        """Enter or a double-click: pick it, and show it large."""
        media_id = int(item.data(MEDIA_ID_ROLE))
        self._picked = media_id  # picked before anything shows it: the viewer may show it first
        if self.hit is not None and self.hit.media_id == media_id:
            # already on show (e.g. the first result, selected when the library listed): picked now as well, or
            # Enter in the caption box would move on to the next result instead of the next suggestion
            self.from_suggestion = True
        else:
            self._choose(media_id)
        self.suggestion_open_requested.emit(media_id)

    def _choose(self, media_id: int) -> None:
        """A suggestion picked: remembered as picked, then shown (``suggestion_chosen``)."""
        self._picked = media_id
        self.suggestion_chosen.emit(media_id)

    def _advance(self) -> None:
        """Move on: to the next suggestion after a suggested item, else to the next result."""
        if self.from_suggestion and self.hit is not None:
            ids = self.suggested_ids()
            later = ids[ids.index(self.hit.media_id) + 1:] if self.hit.media_id in ids else ids
            later = [i for i in later if i != self.hit.media_id]
            if later:
                self._choose(later[0])
                return
        self.next_requested.emit()

    # --- current item
    def set_item(self, query: str | Path | None, hit: SearchHit | None, from_suggestion: bool = False) -> None:
        """Show the captions of ``hit``; Accept / Reject need a text ``query``. The item last picked from the
        suggestions stays picked whenever it is shown again (the results refreshed or re-selected it)."""
        if from_suggestion and hit is not None:
            self._picked = hit.media_id
        self.query, self.hit = query, hit
        self.from_suggestion = hit is not None and hit.media_id == self._picked
        if self.from_suggestion:
            for row in range(self.suggestions.count()):
                if self.suggestions.item(row).data(MEDIA_ID_ROLE) == hit.media_id:
                    self.suggestions.setCurrentRow(row)
        has_item = hit is not None and self._service is not None
        can_judge = has_item and isinstance(query, str) and bool(query.strip())
        for widget in (self.caption_edit, self.captions_list):
            widget.setEnabled(has_item)
        self.accept_button.setEnabled(can_judge)
        self.reject_button.setEnabled(can_judge)
        self.heading.setText(f"Captions of {Path(hit.path).name}" if hit else "Captions (no item selected)")
        judge_tip = "" if can_judge or not has_item else "Accept / Reject need a text query."
        self.status.setText(judge_tip)
        self._show_captions([])
        if hit is not None:
            self.refresh()

    def refresh(self) -> None:
        """Reload the current item's captions (after any queued writes)."""
        if self.hit is not None and self._service is not None:
            self.write(None, self.hit.media_id)

    def _show_captions(self, captions: list[Any]) -> None:
        self._populating = True
        self.captions_list.clear()
        for caption in captions:
            source = str(getattr(caption, "source", ""))
            item = QListWidgetItem(caption.text)
            item.setData(CAPTION_ID_ROLE, int(caption.id))
            item.setData(SOURCE_ROLE, source)
            label, colour, italic = PROVENANCE.get(source, (source, None, False))
            item.setToolTip(plain_tooltip(f"{label}: {caption.text}") if source else "")
            if colour is not None:
                item.setForeground(QColor(colour))
            if italic:
                font = item.font()
                font.setItalic(True)
                item.setFont(font)
            item.setData(Qt.ItemDataRole.DecorationRole, PROVENANCE_MARK.get(source))
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.captions_list.addItem(item)
        mine = [row for row in range(self.captions_list.count())
                if self.captions_list.item(row).data(SOURCE_ROLE) in DELETABLE]
        if len(mine) == 1:  # the one caption Delete would take: ready for it
            self.captions_list.setCurrentRow(mine[0])
        self._populating = False
        self._update_delete()
        if self.hit is not None:
            self.heading.setText(f"Captions of {Path(self.hit.path).name}{provenance_summary(captions)}")

    # --- actions
    def save_caption_and_advance(self) -> None:
        """Enter in the caption line: save the typed caption (if any), then go to the next item."""
        text = self.caption_edit.text().strip()
        if text and self.hit is not None:
            self.undo_stack.push(AddCaption(self, self.hit.media_id, text))
            self.caption_edit.clear()
        self._advance()

    def _update_delete(self) -> None:
        """Delete caption is enabled for a caption a person wrote or imported; otherwise it says why not."""
        item = self.captions_list.currentItem()
        source = item.data(SOURCE_ROLE) if item is not None else None
        has_item = self.hit is not None and self._service is not None
        self.delete_button.setEnabled(has_item and source in DELETABLE)
        if not has_item:
            why = ""
        elif source in DELETABLE:
            why = "Delete the selected caption (Delete; Ctrl+Z undoes it)"
        elif source == "pseudo" or (self.captions_list.count() and not any(
                self.captions_list.item(r).data(SOURCE_ROLE) in DELETABLE for r in range(self.captions_list.count()))):
            why = GUESS_NOT_DELETABLE
        elif self.captions_list.count():
            why = "Select the caption to delete in the list above"
        else:
            why = "This item has no caption to delete"
        self.delete_button.setToolTip(why)

    def delete_selected_caption(self) -> None:
        item = self.captions_list.currentItem()
        if item is None or self.hit is None:
            self.status.setText(self.delete_button.toolTip() or "Select a caption to delete first.")
            return
        if item.data(SOURCE_ROLE) not in DELETABLE:
            self.status.setText(GUESS_NOT_DELETABLE)
            return
        caption_id = int(item.data(CAPTION_ID_ROLE))
        self.undo_stack.push(DeleteCaption(self, self.hit.media_id, caption_id, item.text()))

    def judge(self, label: int) -> None:
        """Accept (+1) or reject (-1) the current item for the current text query. The selection does not move
        on by itself: the next key acts on the item the user is looking at (a rejected item leaves the results
        and the window selects the one that takes its place; Ctrl+Right moves on). F1 says so."""
        if self.hit is None or not isinstance(self.query, str) or not self.query.strip():
            return
        self.pair_judged.emit(self.hit.media_id, label)
        self.undo_stack.push(JudgePair(self, self.hit.media_id, self.query, label))

    def judge_many(self, media_ids: list[int], label: int) -> None:
        """Accept or reject several items at once (one undo step); the selection stays where it is."""
        if not media_ids or not isinstance(self.query, str) or not self.query.strip():
            return
        verb = "accept" if label > 0 else "reject"
        self.undo_stack.beginMacro(f"{verb} {len(media_ids)} items for “{self.query}”")
        for media_id in media_ids:
            self.undo_stack.push(JudgePair(self, media_id, self.query, label))
            self.pair_judged.emit(media_id, label)
        self.undo_stack.endMacro()

    def _caption_edited(self, item: QListWidgetItem) -> None:
        if self._populating or self.hit is None:
            return
        caption_id = int(item.data(CAPTION_ID_ROLE))
        new = item.text().strip()
        old = self._known_text(caption_id)
        if not new:  # an emptied caption is a delete
            self.undo_stack.push(DeleteCaption(self, self.hit.media_id, caption_id, old or ""))
        elif old is not None and new != old:
            self.undo_stack.push(EditCaption(self, self.hit.media_id, caption_id, old, new))

    def _known_text(self, caption_id: int) -> str | None:
        return self._last_texts.get(caption_id)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.matches(QKeySequence.StandardKey.Delete) and self.captions_list.hasFocus():
            self.delete_selected_caption()
            return
        super().keyPressEvent(event)

    # --- the write queue
    def write(self, action: Callable[[Workspace], None] | None, media_id: int,
              done: str | None = None, after: Callable[[], None] | None = None) -> None:
        """Queue ``action(service)`` (None: only re-read) and then a re-read of ``media_id``'s captions;
        ``done`` is said (status line, ``saved``) and ``after()`` called (GUI thread) once the write has reached
        the library."""
        service = self._service
        if service is None:
            return

        def job() -> list[Any]:
            if action is not None:
                action(service)
            return list(service.annotations.captions(media_id))

        self._in_flight += 1
        worker = Worker(job)
        wrote = action is not None
        worker.signals.returned.connect(
            while_alive(self, lambda captions: self._written(media_id, captions, wrote, done, after)))
        worker.signals.errored.connect(while_alive(self, self._write_failed))
        worker.signals.finished.connect(while_alive(self, self._write_finished))
        worker.start(self._pool)

    def _written(self, media_id: int, captions: list[Any], wrote: bool = False, done: str | None = None,
                 after: Callable[[], None] | None = None) -> None:
        if done:
            self.status.setText(done)
            self.saved.emit(done)
        if after is not None:
            after()
        texts = tuple(c.text for c in captions if str(getattr(c, "source", "")) != "pseudo")  # a hit's captions
        self.captions_changed.emit(media_id, texts)
        if wrote:  # annotated now: ticked off (kept, so "next suggestion" keeps its place)
            self._tick_suggestion(media_id)
        if self.hit is not None and self.hit.media_id == media_id:
            self._last_texts = {int(c.id): c.text for c in captions}
            self._show_captions(captions)

    def _tick_suggestion(self, media_id: int) -> None:
        for row in range(self.suggestions.count()):
            item = self.suggestions.item(row)
            if item.data(MEDIA_ID_ROLE) == media_id and not item.text().startswith(TICK):
                item.setText(TICK + "annotated")

    def _write_failed(self, exc: BaseException) -> None:
        self.status.setText(f"Could not save: {exc}")
        self.error.emit(f"Annotation failed: {exc}")

    def _write_finished(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self.writes_done.emit()

    @property
    def busy(self) -> bool:
        """Whether writes are still queued."""
        return self._in_flight > 0
