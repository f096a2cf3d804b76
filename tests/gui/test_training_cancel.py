"""#44 (point 18): a retrain cancelled before its first checkpoint leaves nothing behind (its training set of up
to 5,000 links went on lying in the library's folder), and the trainer's log never names a resumable checkpoint
that is not there."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from app.widgets.training import SOURCE_LIBRARY, TrainingDialog
from engine.workspace import Workspace

FAKE_TRAINER = [sys.executable, str(Path(__file__).with_name("fake_trainer.py"))]


def caption_some(service: Workspace, n: int) -> None:
    for i, media_id in enumerate(sorted(h.media_id for h in service.search.text("x", top=100))[:n]):
        service.annotations.add_caption(media_id, f"a picture number {i}")


def started_retrain(qtbot, tmp_path: Path, service: Workspace, epochs: int) -> TrainingDialog:
    """A retrain of the library's captions (5 of them) for ``epochs`` epochs, started from the dialog."""
    caption_some(service, 5)
    dlg = TrainingDialog(FAKE_TRAINER, tmp_path / "models", "", service=service)
    qtbot.addWidget(dlg)
    dlg.set_source(SOURCE_LIBRARY)
    dlg.epochs.setValue(epochs)
    dlg.start()
    return dlg


def test_a_retrain_cancelled_before_its_first_checkpoint_removes_its_training_set(
        qtbot, tmp_path: Path, service: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TRAINER_LOAD_S", "60")  # still loading its data when Cancel comes
    dlg = started_retrain(qtbot, tmp_path, service, epochs=3)
    qtbot.waitUntil(lambda: "loading data" in dlg.log_view.toPlainText(), timeout=30000)
    folder = Path(dlg.training_set.folder)
    assert folder.is_dir()  # exported, handed to the trainer
    with qtbot.waitSignal(dlg.state_changed, timeout=20000, check_params_cb=lambda s: s == "cancelled"):
        dlg.cancel_button.click()
    assert "before the first checkpoint" in dlg.status.text() and not dlg.resume_button.isEnabled()
    assert not folder.exists()  # the training set went with the run
    models = tmp_path / "models"
    assert not models.exists() or not any(models.iterdir())  # no half-written run folder either
    dlg.close()


def test_a_retrain_cancelled_with_a_checkpoint_keeps_what_resume_needs(
        qtbot, tmp_path: Path, service: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.1")
    dlg = started_retrain(qtbot, tmp_path, service, epochs=50)
    qtbot.waitUntil(lambda: len(dlg.losses) >= 2, timeout=30000)
    with qtbot.waitSignal(dlg.state_changed, timeout=20000, check_params_cb=lambda s: s == "cancelled"):
        dlg.cancel_button.click()
    assert dlg.resume_button.isEnabled() and "Resume continues it" in dlg.status.text()
    assert Path(dlg.training_set.folder).is_dir() and Path(dlg.resumable_dir).is_dir()
    dlg.close()


def test_the_trainer_log_names_a_checkpoint_only_where_there_is_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.gui.fake_trainer import checkpoint
    from trainer.cli import stopped_event

    empty = tmp_path / "vse-run"  # stopped while loading its data: the folder was never made
    with caplog.at_level(logging.WARNING, logger="trainer"):
        event = stopped_event(empty, "SIGTERM")
    assert not event.resumable and "nothing can be resumed" in caplog.text
    assert "resumable checkpoint is in" not in caplog.text
    caplog.clear()
    checkpoint(empty, "vse", 1)
    with caplog.at_level(logging.WARNING, logger="trainer"):
        event = stopped_event(empty, "SIGTERM")
    assert event.resumable and event.model_dir == str(empty)
    assert f"a resumable checkpoint (after epoch 1) is in {empty}" in caplog.text
