"""Annotation: captions are added, edited and deleted through the service; pairs are stored; Undo works."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.widgets.annotate import CAPTION_ID_ROLE, SOURCE_ROLE
from engine.workspace import Workspace
from tests.gui.conftest import user_pairs
from tests.gui.test_search import search


def settle(qtbot, window) -> None:
    """Wait until the annotation write queue is empty and the panel shows the result."""
    qtbot.waitUntil(lambda: not window.annotate.busy, timeout=3000)


def captions_shown(window) -> list[str]:
    """The captions the panel lists, but the model's guess (every indexed item carries one)."""
    lst = window.annotate.captions_list
    return [lst.item(i).text() for i in range(lst.count()) if lst.item(i).data(SOURCE_ROLE) != "pseudo"]


def yours(service: Workspace, media_id: int) -> list[str]:
    """An item's captions in the catalog, but the model's guess."""
    return [c.text for c in service.annotations.captions(media_id) if str(c.source) != "pseudo"]


def test_typing_a_caption_saves_it_and_moves_to_the_next_item(qtbot, window, service: Workspace) -> None:
    search(qtbot, window, "red circle")
    first = window.results.current_hit()
    panel = window.annotate
    qtbot.keyClicks(panel.caption_edit, "a <b>red</b> ball")
    qtbot.keyClick(panel.caption_edit, Qt.Key.Key_Return)
    settle(qtbot, window)
    assert yours(service, first.media_id) == ["a <b>red</b> ball"]
    assert window.results.current_hit().media_id != first.media_id  # moved on
    assert panel.caption_edit.text() == ""
    row = window.results_model.row_of(first.media_id)
    assert window.results_model.hit(row).captions == ("a <b>red</b> ball",)
    tooltip = window.results_model.data(window.results_model.index(row), Qt.ItemDataRole.ToolTipRole)
    assert "&lt;b&gt;red&lt;/b&gt;" in tooltip  # a caption is never markup
    window.results.select_previous()
    settle(qtbot, window)
    assert captions_shown(window) == ["a <b>red</b> ball"]


def test_ctrl_arrows_step_through_results_even_from_the_caption_box(qtbot, window) -> None:
    search(qtbot, window, "square")
    panel = window.annotate
    panel.caption_edit.setFocus()
    qtbot.waitUntil(panel.caption_edit.hasFocus, timeout=1000)
    assert window.results.currentIndex().row() == 0
    qtbot.keyClick(panel.caption_edit, Qt.Key.Key_Right, Qt.KeyboardModifier.ControlModifier)
    assert window.results.currentIndex().row() == 1
    qtbot.keyClick(panel.caption_edit, Qt.Key.Key_Left, Qt.KeyboardModifier.ControlModifier)
    assert window.results.currentIndex().row() == 0


def test_edit_and_delete_a_caption_then_undo_both(qtbot, window, service: Workspace) -> None:
    search(qtbot, window, "green")
    hit = window.results.current_hit()
    caption_id = service.annotations.add_caption(hit.media_id, "green thing")
    panel = window.annotate
    panel.refresh()
    settle(qtbot, window)
    lst = panel.captions_list
    (item,) = [lst.item(i) for i in range(lst.count()) if lst.item(i).data(CAPTION_ID_ROLE) == caption_id]
    item.setText("a green triangle")  # what an in-place edit does
    settle(qtbot, window)
    assert yours(service, hit.media_id) == ["a green triangle"]
    (item,) = lst.findItems("a green triangle", Qt.MatchFlag.MatchExactly)  # the list was read again
    panel.captions_list.setCurrentItem(item)
    panel.delete_button.click()
    settle(qtbot, window)
    assert yours(service, hit.media_id) == []
    assert captions_shown(window) == []
    panel.undo_stack.undo()  # the delete: the caption comes back (with a new id)
    settle(qtbot, window)
    assert yours(service, hit.media_id) == ["a green triangle"]
    panel.undo_stack.undo()  # the edit, applied to the re-created caption
    settle(qtbot, window)
    assert yours(service, hit.media_id) == ["green thing"]
    assert captions_shown(window) == ["green thing"]


def test_accept_and_reject_store_pairs_and_undo_removes_them(qtbot, window, service: Workspace) -> None:
    search(qtbot, window, "blue square")
    first = window.results.current_hit()
    panel = window.annotate
    assert panel.accept_button.isEnabled()
    panel.accept_button.click()
    assert window.results.current_hit().media_id == first.media_id  # judging does not move on by itself
    window.results.select_next()
    second = window.results.current_hit()
    assert second.media_id != first.media_id
    panel.reject_button.click()
    settle(qtbot, window)
    labels = sorted((q, m, label) for q, m, label in user_pairs(service).values())
    assert labels == sorted([("blue square", first.media_id, 1), ("blue square", second.media_id, -1)])
    qtbot.keyClick(window.results, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    settle(qtbot, window)
    assert [(q, m, label) for q, m, label in user_pairs(service).values()] == [("blue square", first.media_id, 1)]
