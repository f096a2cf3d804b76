"""The training dialog with the real trainer process (``python -m trainer train``) on a tiny generated folder.

The ``test`` preset shrinks every layer, so a run is a few seconds (mostly feature extraction with the
prepared ONNX assets); the engine's retraining job, the trainer's events, plots, cancel with a resumable
checkpoint, resume, registration and the comparison are all the real thing. So is the library: a workspace over
the prepared assets (the features the trainer's model reads), which measures both models on the same split.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from app.widgets.training import SOURCE_FOLDER, TrainingDialog
from engine.workspace import Workspace
from tests.synthetic import make_toy_photo_folder

pytestmark = pytest.mark.slow

TRAINER = [sys.executable, "-m", "trainer"]
# tiny layers, a constant learning rate and no early stop, so the run length is exactly what we ask for
TINY = ("--preset", "test", "--batch-size", "6", "--patience", "1000", "--schedule", "constant")
# Bounds on waiting, not timings: a run takes ~15 s on a quiet 2-core machine, but far longer when the
# machine is shared with training benchmarks, and a bound hit there would be a false failure.
WAIT_MS = 240_000


@pytest.fixture
def toy(tmp_path: Path, assets_dir: Path) -> Path:
    folder = tmp_path / "toy"
    make_toy_photo_folder(folder, 24, seed=1, dev_fraction=0.25)
    return folder


@pytest.fixture
def service(assets_dir: Path):
    """An empty library over the real assets: the trainer's model reads the real backbone's features."""
    ws = Workspace.open("real-training", assets_dir)
    yield ws
    ws.close()


@pytest.fixture
def real_dialog(qtbot, tmp_path: Path, toy: Path, service: Workspace):
    dlg = TrainingDialog(TRAINER, tmp_path / "models", str(toy), extra_args=TINY, service=service)
    dlg.set_source(SOURCE_FOLDER)  # with a library the dialog opens on its annotations
    dlg.device.setCurrentText("cpu")
    dlg.method.setCurrentText("vse")
    qtbot.addWidget(dlg)
    yield dlg
    dlg.close()


def test_real_training_plots_live_progress_and_compares_with_the_active_model(
        qtbot, real_dialog: TrainingDialog, service: Workspace, toy: Path) -> None:
    dlg = real_dialog
    dlg.epochs.setValue(2)
    updates: list[bool] = []  # whether the trainer was still running at each loss-plot update
    dlg.loss_curve.sigPlotChanged.connect(lambda *_: updates.append(dlg.running))
    statuses: list[str] = []
    dlg.status.setText = lambda text, _set=dlg.status.setText: (statuses.append(text), _set(text))[1]
    bar: list[tuple[int, int, str]] = []  # (value, maximum, text) at each change of the progress bar
    dlg.progress.valueChanged.connect(lambda v: bar.append((v, dlg.progress.maximum(), dlg.progress.text())))
    with qtbot.waitSignal(dlg.comparison_ready, timeout=WAIT_MS) as ready:
        dlg.start_button.click()
    assert dlg.state == "done", dlg.log_view.toPlainText()[-2000:]
    assert any(s.startswith("features:") for s in statuses)  # feature-extraction progress events
    assert any(s.startswith("epoch 1/2 · step") and "loss" in s for s in statuses)
    # the bar: feature extraction on its own, then one fill over both epochs, half full after the first
    assert any(text.startswith("features · ") for _, _, text in bar)
    training = [(value / maximum, text) for value, maximum, text in bar if text.startswith("epoch ")]
    fractions = [fraction for fraction, _ in training]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert ("epoch 1/2 · 50%" in {text for _, text in training}) and dlg.progress.text() == "epoch 2/2 · 100%"
    assert len(dlg.losses) >= 2 and [e for e, _ in dlg.rsums] == [1, 2]
    assert updates and all(updates[1:])  # [0] is the clearing at start; every loss point arrived live
    xs, _ = dlg.val_curve.getData()
    assert list(xs) == [1, 2]
    model_dir = Path(dlg.model_dir)
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert dict(dlg.rsums)[metrics["best_epoch"]] == pytest.approx(metrics["rsum"])  # the kept epoch's figures
    comparison = ready.args[0]
    assert comparison.split == "dev" and comparison.data == toy
    # both models measured by the one evaluation path (the workspace's) on the same dev split
    assert comparison.new == service.models.evaluate(toy, "dev", comparison.new_name).as_dict()
    assert comparison.old["n_media"] == comparison.new["n_media"] == metrics["n_media"] == 6
    assert comparison.new_name == model_dir.name and comparison.new_name in {m.name for m in service.models.all()}
    # six dev items are under the floor of engine.loop.figures: no numbers set side by side, the reason instead
    assert dlg.result_table.item(1, 4).text() == "—" and "Not meaningful yet: only 6 items" in dlg.result_note.text()
    assert dlg.use_button.isEnabled()


def test_real_training_cancels_to_a_resumable_checkpoint_and_resumes(qtbot, real_dialog: TrainingDialog) -> None:
    dlg = real_dialog
    dlg.epochs.setValue(500)
    dlg.start()
    qtbot.waitUntil(lambda: len(dlg.losses) >= 1, timeout=WAIT_MS)
    if hasattr(os, "getpriority"):  # --low-priority: the trainer runs 10 nice levels below this process
        trainer_nice = os.getpriority(os.PRIO_PROCESS, dlg.trainer_pid)
        assert trainer_nice == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
    with qtbot.waitSignal(dlg.state_changed, timeout=WAIT_MS // 4) as changed:
        dlg.cancel_button.click()
    assert changed.args == ["cancelled"], dlg.log_view.toPlainText()[-2000:]
    out = Path(dlg.resumable_dir)
    state = json.loads((out / "trainer_state.json").read_text())
    assert not state["finished"] and state["epoch"] < 500
    assert "resumable checkpoint" in dlg.status.text() and dlg.resume_button.isEnabled()
    dlg.epochs.setValue(state["epoch"] + 1)  # finish the epoch it stopped in, and stop there
    values: list[int] = []
    dlg.progress.valueChanged.connect(values.append)
    with qtbot.waitSignal(dlg.model_trained, timeout=WAIT_MS) as trained:
        dlg.resume_button.click()
        # the bar starts where the run stopped (the trainer resumes at the very step it checkpointed)
        assert dlg.progress.value() == dlg.run_progress.done > 0
        assert dlg.progress.maximum() == (state["epoch"] + 1) * dlg.run_progress.steps_per_epoch
    # never backwards, and full at the end (no change at all is possible when the run was cancelled right at the
    # end of its last epoch: the bar then already stands at the resumed position, which is the maximum)
    assert values == sorted(values) and dlg.progress.value() == dlg.progress.maximum()
    assert trained.args == [str(out)] and dlg.state == "done"
    assert "resumed at epoch" in dlg.log_view.toPlainText()
    final = json.loads((out / "trainer_state.json").read_text())
    assert final["finished"] and final["epoch"] == state["epoch"] + 1
