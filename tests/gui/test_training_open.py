"""How the training dialog opens: on this library's annotations, each method described in a line, and clean after
an earlier run (only an unfinished run on disk is offered, for Resume) (issue #20)."""

from __future__ import annotations

import sys
from pathlib import Path

from app.widgets.training import METHOD_DESCRIPTIONS, METHODS, SOURCE_FOLDER, SOURCE_LIBRARY, TrainingDialog
from engine.workspace import Workspace
from tests.gui.conftest import media_ids

FAKE_TRAINER = [sys.executable, str(Path(__file__).with_name("fake_trainer.py"))]


def test_with_a_library_the_dialog_opens_on_its_annotations(qtbot, tmp_path: Path, service: Workspace) -> None:
    with_library = TrainingDialog(FAKE_TRAINER, tmp_path / "models", "/some/folder", service=service)
    without = TrainingDialog(FAKE_TRAINER, tmp_path / "models", "/some/folder")
    late = TrainingDialog(FAKE_TRAINER, tmp_path / "models", "/some/folder")  # the library opened afterwards
    for dialog in (with_library, without, late):
        qtbot.addWidget(dialog)
    late.set_service(service)
    assert with_library.source_key() == SOURCE_LIBRARY and not with_library.data.isEnabled()
    assert late.source_key() == SOURCE_LIBRARY
    assert without.source_key() == SOURCE_FOLDER and without.data.isEnabled()


def test_each_method_is_described_under_the_picker(qtbot, tmp_path: Path) -> None:
    dialog = TrainingDialog(FAKE_TRAINER, tmp_path / "models", "")
    qtbot.addWidget(dialog)
    seen = set()
    for method in METHODS:
        dialog.method.setCurrentText(method)
        text = dialog.method_description.text()
        assert text == METHOD_DESCRIPTIONS[method] and text not in seen
        seen.add(text)


def test_the_gui_describes_exactly_the_trainers_methods() -> None:
    from trainer.methods.registry import list_methods  # torch: in the test process only, never in the GUI

    assert list(METHODS) == list_methods() and set(METHOD_DESCRIPTIONS) == set(METHODS)


def test_a_reopened_dialog_starts_clean(qtbot, window, service: Workspace) -> None:
    for media_id in media_ids(service)[:3]:
        service.annotations.add_caption(media_id, f"item {media_id}")
    window.settings.trainer_command = FAKE_TRAINER
    dialog = window.open_training()
    assert dialog.source_key() == SOURCE_LIBRARY
    dialog.epochs.setValue(1)
    with qtbot.waitSignal(dialog.comparison_ready, timeout=20000):
        dialog.start()
    assert dialog.losses and dialog.result_box.isVisible() and dialog.log_view.toPlainText()
    dialog.set_source(SOURCE_FOLDER)
    dialog.close()

    again = window.open_training()
    assert again is dialog and again.state == "idle"
    assert again.source_key() == SOURCE_LIBRARY and again.data.text() == ""  # not the exported folder
    assert not again.losses and not again.rsums and not again.result_box.isVisible()
    assert again.loss_curve.getData()[0] is None or len(again.loss_curve.getData()[0]) == 0
    assert again.progress.value() == 0 and not again.log_view.toPlainText()
    assert not again.resume_button.isEnabled() and again.start_button.isEnabled()
    assert again.model_dir is None and again.comparison is None


def test_a_reopened_dialog_offers_an_unfinished_run(qtbot, window, service: Workspace, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.2")
    for media_id in media_ids(service)[:3]:
        service.annotations.add_caption(media_id, f"item {media_id}")
    window.settings.trainer_command = FAKE_TRAINER
    dialog = window.open_training()
    dialog.epochs.setValue(50)
    dialog.start()
    qtbot.waitUntil(lambda: len(dialog.losses) >= 6, timeout=30000)  # into epoch 2: epoch 1 is checkpointed
    with qtbot.waitSignal(dialog.state_changed, timeout=10000):
        dialog.cancel_button.click()
    folder = dialog.resumable_dir
    dialog.close()
    again = window.open_training()
    assert not again.losses and again.resumable_dir == folder and again.resume_button.isEnabled()
    assert "unfinished" in again.status.text()
