"""Edit > Preferences: library folders, the model searches use, where training runs, the match-probability cutoff
(issue #20)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

import app.widgets.library as library_module
from app.settings import GuiSettings, settings_file
from engine.workspace import Workspace
from tests.gui.conftest import media_ids
from tests.standins import make_media_folder


def test_the_training_device_is_typed_and_kept(qapp) -> None:
    settings = GuiSettings()
    assert settings.training_device == "auto"
    settings.training_device = "cpu"
    settings.sync()
    assert GuiSettings().training_device == "cpu"
    with pytest.raises(ValueError, match="training device"):
        settings.training_device = "tpu"
    settings._qs.setValue("training/device", "gpu0")  # a hand-edited file
    assert settings.training_device == "auto"
    assert settings_file().is_file()


def test_folders_are_listed_added_and_removed(qtbot, window, service: Workspace, tmp_path: Path,
                                              monkeypatch) -> None:
    dialog = window.open_preferences()
    qtbot.waitUntil(lambda: dialog.folder_names() == [str(p) for p in service.library.roots()], timeout=3000)
    assert len(dialog.folder_names()) == 1
    extra = make_media_folder(tmp_path / "more", n_images=2, n_gifs=0, video=False, broken=False)
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(extra))
    dialog.add_folder_button.click()
    qtbot.waitUntil(lambda: str(extra) in dialog.folder_names(), timeout=3000)
    assert extra in service.library.roots()
    qtbot.waitUntil(lambda: window.library.roots_list.count() == 2, timeout=3000)  # the side panel too
    qtbot.waitUntil(lambda: not window.library.is_indexing, timeout=5000)  # and it was indexed
    assert any(extra.resolve() in service.library.media(m).path.parents for m in media_ids(service))

    asked: list[str] = []
    monkeypatch.setattr(library_module, "ask", lambda parent, title, text: asked.append(text) or False)
    dialog.folders.setCurrentRow(dialog.folder_names().index(str(extra)))
    dialog.remove_folder_button.click()
    qtbot.waitUntil(lambda: len(asked) == 1, timeout=3000)  # asked once the folder's items are counted
    assert str(extra) in asked[0] and extra in service.library.roots()  # No keeps it
    monkeypatch.setattr(library_module, "ask", lambda parent, title, text: True)
    dialog.remove_folder_button.click()
    qtbot.waitUntil(lambda: str(extra) not in dialog.folder_names(), timeout=3000)
    assert extra not in service.library.roots()


def test_the_model_device_and_cutoff_apply_on_ok(qtbot, window, service: Workspace) -> None:
    window.refresh_models()
    qtbot.waitUntil(lambda: len(window._models) == 3, timeout=3000)
    dialog = window.open_preferences()
    assert dialog.model.currentData() == "zero-shot"
    dialog.model.setCurrentIndex(dialog.model.findData("tiny-pcme"))
    dialog.device.setCurrentIndex(dialog.device.findData("cpu"))
    dialog.cutoff.setValue(0.4)
    dialog.accept()
    qtbot.waitUntil(lambda: [m.name for m in service.models.all() if m.active] == ["tiny-pcme"], timeout=3000)
    assert GuiSettings().training_device == "cpu" and GuiSettings().cutoff_percent == 40
    assert window.search_bar.cutoff.value() == 40
    training = window.open_training()
    assert training.device.currentText() == "cpu"
    assert training.job_options().device == "cpu"
    training.close()


def test_cancel_changes_nothing(qtbot, window, service: Workspace, calls) -> None:
    dialog = window.open_preferences()
    dialog.device.setCurrentIndex(dialog.device.findData("cuda"))
    dialog.cutoff.setValue(0.9)
    dialog.reject()
    assert GuiSettings().training_device == "auto" and GuiSettings().cutoff_percent == 0
    assert not calls.named("models.activate")


def test_add_folder_opens_beside_the_librarys_folders_not_where_the_app_was_started(
        qtbot, window, service: Workspace, tmp_path: Path, monkeypatch) -> None:
    """The new-user pass (#44): "Add folder..." opened the directory the app was started from (the repository)."""
    qtbot.waitUntil(lambda: bool(window.library.state.snapshot.roots), timeout=3000)
    shown: list[str] = []
    monkeypatch.setattr(QFileDialog, "getExistingDirectory",
                        lambda parent, title, folder="", *a: shown.append(folder) or "")
    window.library.add_folder()
    assert shown == [str(service.library.roots()[-1].parent)]
    window.library.state.set_service(None)  # a library without folders: the user's Pictures or home
    shown.clear()
    window.library.add_folder()
    assert shown and Path(shown[0]) != Path.cwd() and Path(shown[0]).is_dir()


def test_the_selected_folder_stays_selected_when_the_library_is_read_again(qtbot, window, service: Workspace,
                                                                          tmp_path: Path) -> None:
    """test_folders_are_listed_added_and_removed failed about one run in three: a read of the library rebuilt the
    list between the user's pick and the click on Remove, which then found nothing selected and did nothing."""
    dialog = window.open_preferences()
    extra = make_media_folder(tmp_path / "more", n_images=1, n_gifs=0, video=False, broken=False)
    dialog.show_folders([*service.library.roots(), extra])
    dialog.folders.setCurrentRow(dialog.folder_names().index(str(extra)))
    dialog.show_folders([*service.library.roots(), extra])  # read again, nothing changed
    assert dialog.folders.currentItem().text() == str(extra) and dialog.remove_folder_button.isEnabled()
    third = tmp_path / "third"
    dialog.show_folders([*service.library.roots(), extra, third])  # a folder more: the pick stays
    assert dialog.folders.currentItem().text() == str(extra) and dialog.remove_folder_button.isEnabled()
