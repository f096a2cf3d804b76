"""What to annotate next (pick, annotate, move on), annotation import / export from the File menu, and
switching to a newly trained model (the real workspace)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.mainwindow import MainWindow
from app.settings import GuiSettings
from app.widgets.annotate import TICK
from engine.library.captionfolder import load_caption_folder
from tests.gui.conftest import active_model, by_path, media_ids, open_workspace, replace_call
from tests.gui.test_annotate import captions_shown, settle
from tests.gui.test_search import search


def loaded_suggestions(qtbot, window) -> list[int]:
    qtbot.waitUntil(lambda: window.annotate.suggestions.count() > 0, timeout=5000)
    return window.annotate.suggested_ids()


def test_suggestions_list_the_uncaptioned_items_the_service_ranks_first(qtbot, window, service, calls) -> None:
    ids = loaded_suggestions(qtbot, window)
    # no model active: a random sample (drawn afresh each time), of every uncaptioned item
    assert sorted(ids) == sorted(media_id for media_id, _ in service.annotations.suggest(20, "auto"))
    assert sorted(ids) == media_ids(service)
    assert calls.has("annotations.suggest", n=20, policy="auto")
    panel = window.annotate
    first = panel.suggestions.item(0)
    assert Path(service.library.media(ids[0]).path).name in first.toolTip()  # the name is in the tooltip, not the list
    assert first.text() == ""
    qtbot.waitUntil(lambda: all(panel.suggestion_shows_thumbnail(r) for r in range(len(ids))), timeout=5000)
    # no model active: a random sample, and the heading says so
    assert panel.suggestion_policy == "random" and "random sample" in panel.suggest_heading.text()


def test_clicking_a_suggestion_selects_it_and_enter_moves_to_the_next_one(qtbot, window, service, calls) -> None:
    ids = loaded_suggestions(qtbot, window)
    panel = window.annotate
    item = panel.suggestions.item(0)
    rect = panel.suggestions.visualItemRect(item)
    qtbot.mouseClick(panel.suggestions.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: panel.hit is not None and panel.hit.media_id == ids[0], timeout=5000)
    assert panel.from_suggestion and panel.caption_edit.isEnabled()
    assert window.inspector.hit.media_id == ids[0]  # not among the results (no search yet): shown on its own
    qtbot.keyClicks(panel.caption_edit, "a novel thing")
    qtbot.keyClick(panel.caption_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: panel.hit is not None and panel.hit.media_id == ids[1], timeout=5000)
    settle(qtbot, window)
    assert calls.has("annotations.add_caption", media_id=ids[0], text="a novel thing")
    assert "a novel thing" in [c.text for c in service.annotations.captions(ids[0])]
    assert panel.suggestions.item(0).text().startswith(TICK)
    assert panel.suggestions.currentRow() == 1


def test_a_suggestion_among_the_results_selects_its_row(qtbot, window, service) -> None:
    ids = loaded_suggestions(qtbot, window)
    search(qtbot, window, "ball")
    row = window.results_model.row_of(ids[0])
    assert row is not None
    window.select_media(ids[0])
    assert window.results.currentIndex().row() == row and window.annotate.from_suggestion


def test_an_unknown_suggestion_policy_is_reported_not_fatal(qtbot, window, service, monkeypatch) -> None:
    monkeypatch.setattr("app.widgets.annotate.SUGGESTION_POLICY", "telepathy")
    with qtbot.waitSignal(window.annotate.error, timeout=5000) as error:
        window.annotate.refresh_suggestions()
    assert "telepathy" in error.args[0] and "unavailable" in window.annotate.suggest_heading.text()


@pytest.mark.parametrize("fmt", ["folder", "coco"])
def test_annotations_export_and_import_into_another_library(qtbot, window, service, tmp_path: Path,
                                                            media_folder: Path, fmt: str) -> None:
    search(qtbot, window, "red circle")
    hit = window.results.current_hit()
    service.annotations.add_caption(hit.media_id, "a red ball on a table")
    service.annotations.add_caption(hit.media_id, "something round and red")
    dest = tmp_path / ("export" if fmt == "folder" else "export.json")
    with qtbot.waitSignal(window.annotations_transferred, timeout=5000) as done:
        window.export_annotations(dest, fmt)
    assert done.args == ["export", 2] and "Exported 2 captions" in window.statusBar().currentMessage()
    if fmt == "folder":
        folder = load_caption_folder(dest)
        assert [t for _, t in folder.captions] == ["a red ball on a table", "something round and red"]
        assert folder.items[0].file == Path(hit.path).name
    else:
        data = json.loads(dest.read_text())
        assert len(data["images"]) == 1 and len(data["annotations"]) == 2
    # a second library over the same files gets the captions back
    other = open_workspace("other", models=False)
    other.library.add_root(media_folder)
    for _ in other.library.index():
        pass
    win2 = MainWindow(GuiSettings(), other)
    qtbot.addWidget(win2)
    try:
        with qtbot.waitSignal(win2.annotations_transferred, timeout=5000) as done:
            win2.import_annotations(dest)
        assert done.args == ["import", 2]
        same = by_path(other, hit.path)
        assert sorted(c.text for c in other.annotations.captions(same) if str(c.source) != "pseudo") == [
            "a red ball on a table", "something round and red"]
        with qtbot.waitSignal(win2.annotations_transferred, timeout=5000) as again:
            win2.import_annotations(dest)
        assert again.args == ["import", 0]  # nothing is doubled
    finally:
        win2.shutdown()
        other.close()


def test_import_refreshes_the_current_items_captions(qtbot, window, service, tmp_path: Path) -> None:
    search(qtbot, window, "red circle")
    hit = window.results.current_hit()
    source = open_workspace("src", models=False)
    source.library.add_root(Path(hit.path).parent)
    for _ in source.library.index():
        pass
    source.annotations.add_caption(by_path(source, hit.path), "imported!")
    source.annotations.export(tmp_path / "cf", "folder")
    source.close()
    with qtbot.waitSignal(window.annotations_transferred, timeout=5000):
        window.import_annotations(tmp_path / "cf")
    settle(qtbot, window)
    qtbot.waitUntil(lambda: captions_shown(window) == ["imported!"], timeout=3000)


def test_failed_transfers_are_reported(qtbot, window, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="xml"):
        window.export_annotations(tmp_path / "x", "xml")
    task = window.import_annotations(tmp_path / "nothing-here.txt")
    qtbot.waitUntil(task.done, timeout=5000)
    qtbot.waitUntil(lambda: "Import failed" in window.statusBar().currentMessage(), timeout=3000)


def test_the_file_menu_offers_the_transfers(window) -> None:
    file_menu = window.menuBar().actions()[0].menu()
    texts = [a.text() for a in file_menu.actions()]
    assert "&Export annotations as a caption folder…" in texts
    assert "Export annotations as &COCO captions JSON…" in texts
    assert any(t.startswith("&Import annotations") for t in texts)


def test_use_model_activates_it_and_reindexes(qtbot, window, service, calls) -> None:
    with qtbot.waitSignal(window.model_switched, timeout=5000) as switched:
        window.activate_and_reindex("tiny-pvse")
    assert switched.args == ["tiny-pvse"] and active_model(service) == "tiny-pvse"
    assert window.library.is_indexing or calls.named("models.activate")
    qtbot.waitUntil(lambda: not window.library.is_indexing, timeout=5000)
    qtbot.waitUntil(lambda: window.search_bar.model_combo.currentData() == "tiny-pvse", timeout=5000)
    # the engine's one switch (Models.switch), not a second spelling of it in the window
    assert calls.has("models.switch", name="tiny-pvse")


def test_the_window_training_dialog_registers_and_switches(qtbot, window, service, tmp_path: Path) -> None:
    import sys

    from app.widgets.training import SOURCE_LIBRARY

    for media_id in media_ids(service)[:3]:
        service.annotations.add_caption(media_id, f"item {media_id}")
    window.settings.trainer_command = [sys.executable, str(Path(__file__).with_name("fake_trainer.py"))]
    dialog = window.open_training()
    dialog.set_source(SOURCE_LIBRARY)
    dialog.epochs.setValue(1)
    with qtbot.waitSignal(dialog.comparison_ready, timeout=20000) as ready:
        dialog.start()
    name = ready.args[0].new_name
    qtbot.waitUntil(lambda: window.search_bar.model_combo.findData(name) >= 0, timeout=5000)
    with qtbot.waitSignal(window.model_switched, timeout=5000):
        dialog.use_button.click()
    assert active_model(service) == name
    assert window.settings.last_data_folder == ""  # an exported library set is not a folder to remember


def test_unranked_suggestions_say_so_and_show_no_scores(qtbot, window, service, monkeypatch) -> None:
    ids = media_ids(service)[:3]
    replace_call(service, monkeypatch, "annotations.suggest", lambda real: lambda n=20, policy="auto": [
        (i, 0.0) for i in ids])
    with qtbot.waitSignal(window.annotate.suggestions_loaded, timeout=5000):
        window.annotate.refresh_suggestions()
    panel = window.annotate
    assert panel.suggested_ids() == ids
    assert all(panel.suggestions.item(r).text() == "" for r in range(3))
    assert "random sample" in panel.suggest_heading.text()
    assert "no particular order" in panel.suggest_heading.toolTip()
    assert all("picked at random" in panel.suggestions.item(r).toolTip() for r in range(3))


def test_the_heading_says_why_this_order_and_follows_the_active_model(qtbot, window, service, calls) -> None:
    loaded_suggestions(qtbot, window)
    panel = window.annotate
    assert panel.suggestion_policy == "random"
    for model, policy, words in (("tiny-pcme", "uncertainty", "least sure"),
                                 ("tiny-pvse", "disagreement", "heads disagree")):
        with qtbot.waitSignal(panel.suggestions_loaded, timeout=5000):  # switching the model refreshes the list
            window.activate_model(model)
        assert panel.suggestion_policy == policy and words in panel.suggest_heading.text()
    assert calls.has("annotations.suggestion_policy", policy="auto")


def test_suggestions_refresh_when_the_library_changes(qtbot, window, service, tmp_path) -> None:
    before = loaded_suggestions(qtbot, window)
    from tests.standins import make_media_folder

    more = make_media_folder(tmp_path / "more", n_images=3, n_gifs=0, video=False, broken=False)
    with qtbot.waitSignal(window.annotate.suggestions_loaded, timeout=10000):
        window.library.add_folder(more)  # indexes it; the list follows once indexing is done
    after = window.annotate.suggested_ids()
    assert len(after) == len(before) + 3


def test_enter_on_the_suggestion_already_on_show_picks_it(qtbot, window, service) -> None:
    """The race behind a flaky run: the library's first page selected its first result before Enter reached the
    suggestion of that same item, so nothing showed it again and it stayed "not picked"."""
    ids = loaded_suggestions(qtbot, window)
    panel = window.annotate
    qtbot.waitUntil(lambda: window.results_model.row_of(ids[1]) is not None, timeout=5000)
    window.results.select_row(window.results_model.row_of(ids[1]))  # on show before it is picked
    qtbot.waitUntil(lambda: panel.hit is not None and panel.hit.media_id == ids[1], timeout=5000)
    assert not panel.from_suggestion
    panel.suggestions.setFocus()
    panel.suggestions.setCurrentRow(1)
    qtbot.keyClick(panel.suggestions, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.viewer is not None and window.viewer.isVisible(), timeout=5000)
    assert panel.hit.media_id == ids[1] and panel.from_suggestion


def test_enter_on_a_suggestion_opens_it_large(qtbot, window, service) -> None:
    ids = loaded_suggestions(qtbot, window)
    panel = window.annotate
    panel.suggestions.setFocus()
    panel.suggestions.setCurrentRow(1)
    qtbot.keyClick(panel.suggestions, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.viewer is not None and window.viewer.isVisible(), timeout=5000)
    assert window.viewer.hit.media_id == ids[1]
    qtbot.waitUntil(lambda: panel.hit is not None and panel.hit.media_id == ids[1], timeout=5000)
    assert panel.from_suggestion  # picked too: Enter in the caption box moves on to the next suggestion
