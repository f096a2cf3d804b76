"""Labelling from the keyboard, as a person does it (issue #20): every key goes to the widget that has the
focus where the app put it (``QApplication.focusWidget()``), never to a widget the test picked."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QWidget

from engine.workspace import Workspace
from tests.gui.conftest import user_pairs

CTRL = Qt.KeyboardModifier.ControlModifier
ALT = Qt.KeyboardModifier.AltModifier


def focused() -> QWidget:
    widget = QApplication.focusWidget()
    assert widget is not None, "nothing has the keyboard focus"
    return widget


def press(qtbot, key: Qt.Key, modifier: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier) -> None:
    qtbot.keyClick(focused(), key, modifier)


def type_text(qtbot, text: str) -> None:
    qtbot.keyClicks(focused(), text)


def settle(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.annotate.busy, timeout=3000)


def start_typing_a_query(qtbot, window, text: str) -> None:
    """The window opens with the focus in the search box: type, Enter, wait for the first page."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.search_bar.edit, timeout=3000)
    type_text(qtbot, text)
    with qtbot.waitSignal(window.results_model.page_loaded, timeout=3000):
        press(qtbot, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.results.currentIndex().isValid(), timeout=3000)


def row(window) -> int:
    return window.results.currentIndex().row()


def test_ctrl_arrows_step_through_results_from_the_search_box(qtbot, window) -> None:
    start_typing_a_query(qtbot, window, "square")
    assert focused() is window.search_bar.edit and row(window) == 0
    press(qtbot, Qt.Key.Key_Right, CTRL)
    assert row(window) == 1
    press(qtbot, Qt.Key.Key_Right, CTRL)
    press(qtbot, Qt.Key.Key_Left, CTRL)
    assert row(window) == 1
    assert window.search_bar.edit.text() == "square"


def test_ctrl_e_then_enter_captions_the_current_item_not_the_query(qtbot, window, service: Workspace,
                                                                   calls) -> None:
    start_typing_a_query(qtbot, window, "red")
    first = window.results.current_hit()
    press(qtbot, Qt.Key.Key_E, CTRL)
    assert focused() is window.annotate.caption_edit
    type_text(qtbot, "a red ball")
    press(qtbot, Qt.Key.Key_Return)
    settle(qtbot, window)
    assert calls.has("annotations.add_caption", media_id=first.media_id, text="a red ball")
    assert window.search_bar.edit.text() == "red"  # the caption never became part of the query
    assert len(calls.named("search.text")) == 1  # and never ran as a search
    assert row(window) == 1  # Enter moved on
    assert focused() is window.annotate.caption_edit  # ready for the next caption


def test_reject_then_ctrl_z_in_the_search_box_undoes_the_reject(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "blue")
    first = window.results.current_hit()
    press(qtbot, Qt.Key.Key_R, ALT)
    settle(qtbot, window)
    assert list(user_pairs(service).values()) == [("blue", first.media_id, -1)]
    assert focused() is window.search_bar.edit
    assert window.undo_action.text() == "&Undo reject for “blue”"
    press(qtbot, Qt.Key.Key_Z, CTRL)
    settle(qtbot, window)
    assert user_pairs(service) == {}
    assert window.search_bar.edit.text() == "blue"  # the query text was not what got undone


def test_accept_and_reject_keys_act_on_the_item_on_show_and_f1_says_how(qtbot, window, service: Workspace) -> None:
    """Issue #32, point 5: Alt+A used to move the selection on, so the next Alt+R rejected a photo the user had
    not looked at. Now a verdict never moves on by itself: Alt+A then Alt+R judge the same item; a rejected item
    leaves the results and the one that takes its place is selected; Ctrl+Right moves on; F1 says all this."""
    start_typing_a_query(qtbot, window, "green")
    press(qtbot, Qt.Key.Key_Right, CTRL)  # the second result
    first = window.results.current_hit()
    press(qtbot, Qt.Key.Key_A, ALT)
    settle(qtbot, window)
    assert window.results.current_hit().media_id == first.media_id
    assert window.annotate.hit.media_id == first.media_id  # what the panel shows is what the next key judges
    after = window.results_model.hit(row(window) + 1)
    press(qtbot, Qt.Key.Key_R, ALT)  # the user changes their mind about the item on show
    settle(qtbot, window)
    assert [(q, m, label) for q, m, label in user_pairs(service).values()] == [
        ("green", first.media_id, +1), ("green", first.media_id, -1)]
    qtbot.waitUntil(lambda: window.results_model.row_of(first.media_id) is None, timeout=3000)  # it left
    assert window.results.current_hit().media_id == after.media_id  # the next one took its place, selected
    rows = dict(window.open_shortcuts().rows())
    assert "stays" in rows["Alt+A"] and "next result takes their place" in rows["Alt+R"]


def test_ctrl_z_while_typing_a_caption_undoes_the_typing(qtbot, window, service: Workspace) -> None:
    start_typing_a_query(qtbot, window, "red")
    press(qtbot, Qt.Key.Key_R, ALT)  # something the annotation undo could take back
    settle(qtbot, window)
    press(qtbot, Qt.Key.Key_E, CTRL)
    type_text(qtbot, "oops")
    press(qtbot, Qt.Key.Key_Z, CTRL)
    assert window.annotate.caption_edit.text() == ""
    assert len(user_pairs(service)) == 1  # the reject stays


def test_down_and_tab_leave_the_search_box_for_the_grid(qtbot, window) -> None:
    # the walk below needs two results side by side: on the 800-px test screen the settled panels leave the grid one
    # column wide (a fast machine pressed the keys before they settled, a busy one after)
    window.resize(1320, 820)
    start_typing_a_query(qtbot, window, "circle")
    model, view = window.results_model, window.results
    qtbot.waitUntil(lambda: view.visualRect(model.index(1, 0)).top() == view.visualRect(model.index(0, 0)).top(),
                    timeout=3000)
    press(qtbot, Qt.Key.Key_Down)
    assert focused() is window.results
    press(qtbot, Qt.Key.Key_Right)  # arrow keys now walk the grid
    assert row(window) == 1
    press(qtbot, Qt.Key.Key_Up)  # the top row: Up goes back to the query
    assert focused() is window.search_bar.edit
    press(qtbot, Qt.Key.Key_Down)
    assert focused() is window.results and row(window) == 1  # where it was
    press(qtbot, Qt.Key.Key_Down)  # a row down in the grid, then Up comes back to the row, not the query
    below = row(window)
    assert below > 1
    press(qtbot, Qt.Key.Key_Up)
    assert focused() is window.results and row(window) == 1
    press(qtbot, Qt.Key.Key_L, CTRL)
    assert focused() is window.search_bar.edit
    press(qtbot, Qt.Key.Key_Tab)
    assert focused() is window.results  # not the model picker
    model_before = window.search_bar.model_combo.currentIndex()
    press(qtbot, Qt.Key.Key_Down)
    assert window.search_bar.model_combo.currentIndex() == model_before
