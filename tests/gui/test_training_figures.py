"""The training dialog and the model manager say what runs and what their numbers mean (issue #32, point 3): the
epochs shown are the epochs trained; one figure definition (rsum on a named set of a stated size) in both views;
no comparison under the floor; the curve's measure named apart from the table's; whole epochs on the chart."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from app.widgets.models import ModelsDialog
from app.widgets.training import SOURCE_LIBRARY, TrainingDialog
from app.widgets.trainingform import TrainingForm
from app.widgets.trainingview import Comparison, ComparisonBox, RunProgress
from engine.trainercontract import events
from engine.trainercontract.metrics import retrieval_report
from engine.types import ModelInfo
from engine.workspace import Workspace

FAKE_TRAINER = [sys.executable, str(Path(__file__).with_name("fake_trainer.py"))]
FLOOR = 30  # held-aside items under which a figure is "not meaningful yet" (engine/loop/figures.py says why)


def _report(items: int, right: int, captions_per_item: int = 5, seed: int = 0) -> dict:
    """A retrieval report of ``items`` items where the first ``right`` are ranked first for their captions."""
    rng = np.random.default_rng(seed)
    owners = np.repeat(np.arange(items), captions_per_item)
    scores = rng.random((items, len(owners)))
    scores[owners[owners < right], np.flatnonzero(owners < right)] += 2.0
    return retrieval_report(scores, owners)


def _comparison(items: int) -> Comparison:
    old, new = _report(items, items // 3), _report(items, items // 2, seed=1)
    return Comparison("vse-new", new, "starter", old, None, Path("/lib/training-set"), "heldout",
                      measured=True, activated=False, decision="not activated: ...", library=True)


def _box(qtbot, comparison: Comparison) -> ComparisonBox:
    box = ComparisonBox()
    qtbot.addWidget(box)
    box.show_comparison(comparison)
    return box


def _cells(box: ComparisonBox, row: int) -> list[str]:
    return [box.table.item(row, c).text() for c in range(1, 5)]


def test_the_form_shows_the_epochs_a_warm_start_trains(qtbot, tmp_path: Path, service: Workspace) -> None:
    import shutil

    from tests.gui.conftest import PVSE, tiny_models

    folder = shutil.copytree(tiny_models()[PVSE], tmp_path / "trained-pvse")  # a trained model with weights:
    (folder / "model.safetensors").write_bytes(b"weights")  # a retrain warm-starts from it
    service.models.activate(str(folder))
    dlg = TrainingDialog(FAKE_TRAINER, tmp_path / "models", "", service=service)
    qtbot.addWidget(dlg)
    dlg.set_source(SOURCE_LIBRARY)
    from engine.loop.retrain import WARM_START_EPOCHS

    assert dlg.method.currentText() == "pvse"
    assert dlg.epochs.value() == WARM_START_EPOCHS  # before Start: what the run will take
    assert dlg.job_options().epochs == WARM_START_EPOCHS  # ... and what it is given
    dlg.epochs.setValue(3)  # a number the user types is what runs
    assert dlg.job_options().epochs == 3
    dlg.method.setCurrentText("a3vse")  # another method starts from random weights: the form keeps the user's 3
    assert dlg.epochs.value() == 3 and dlg.job_options().epochs == 3
    dlg.close()


def test_three_held_aside_items_are_not_meaningful_yet(qtbot) -> None:
    comparison = _comparison(3)
    box = _box(qtbot, comparison)
    # no 533 -> 533 side by side: each row says why in place of its numbers (issue #44)
    why = "too few held-aside items (3): not meaningful yet"
    assert _cells(box, 0)[0].startswith(why) and _cells(box, 1)[0].startswith(why)
    assert not any(any(ch.isdigit() for ch in cell) for cell in _cells(box, 0)[1:] + _cells(box, 1)[1:])
    note = box.note.text()
    assert "Not meaningful yet" in note and "3 items (15 captions)" in note and f"Under {FLOOR}" in note
    assert "3 items (15 captions) of the held-aside annotations of this library" in box.where.text()


def test_thirty_held_aside_items_are_compared_on_the_named_set(qtbot) -> None:
    comparison = _comparison(FLOOR)
    box = _box(qtbot, comparison)
    assert _cells(box, 0)[3] == f"{comparison.old['rsum']:.1f}" and _cells(box, 1)[3] == f"{comparison.new['rsum']:.1f}"
    note = box.note.text()
    assert f"rsum {comparison.old['rsum']:.1f} → {comparison.new['rsum']:.1f}" in note
    assert f"{FLOOR} items (150 captions) of the held-aside annotations of this library" in note
    assert "Not meaningful" not in note


def test_the_curve_and_the_table_name_their_different_measures(qtbot) -> None:
    box = _box(qtbot, _comparison(FLOOR))
    assert "curve above is the trainer's own check" in box.note.text() and "model alone" in box.note.text()
    form = TrainingForm()
    qtbot.addWidget(form)
    assert "model alone" in form.val_plot.getPlotItem().titleLabel.text


def test_the_validation_axis_reads_whole_epochs(qtbot) -> None:
    form = TrainingForm()
    qtbot.addWidget(form)
    form.show()
    form._clear_plots(RunProgress(epochs=20))
    form._on_epoch(events.EpochEnd(0, {"rsum": 566.7}))  # a warm start's first point: the model it starts from
    axis = form.val_plot.getAxis("bottom")
    assert "x0.001" not in axis.labelString() and axis.autoSIPrefixScale == 1.0
    (low, high), _ = form.val_plot.getViewBox().viewRange()
    assert -1.0 <= low <= 0.0 and 20.0 <= high <= 21.5  # the whole run's epochs, not -0.5 .. 0.5
    for epoch in (1, 2):
        form._on_epoch(events.EpochEnd(epoch, {"rsum": 500.0 + epoch}))
    (low, high), _ = form.val_plot.getViewBox().viewRange()
    assert -1.0 <= low <= 0.0 and 20.0 <= high <= 21.5
    ticks = axis.tickValues(low, high, 400)
    assert all(float(v).is_integer() for _, values in ticks for v in values)


def test_the_model_manager_shows_each_figure_with_its_set_and_compares_none_across_sets(qtbot) -> None:
    starter = {**_report(1500, 700), "split": "starter-val", "method": "vse"}
    retrained = {**_report(3, 3), "split": "heldout", "method": "vse"}
    other = {**_report(1500, 650, seed=2), "split": "starter-val", "method": "vse"}
    dialog = ModelsDialog()
    qtbot.addWidget(dialog)
    dialog.set_models([ModelInfo("zero-shot", "zero-shot", None, {}, False),
                       ModelInfo("starter", "vse", Path("/m/starter"), starter, False),
                       ModelInfo("vse-new", "vse", Path("/m/vse-new"), retrained, True),
                       ModelInfo("vse-big", "vse", Path("/m/vse-big"), other, False)])
    cells = {dialog.table.item(r, 0).text(): dialog.table.item(r, 3).text() for r in range(dialog.table.rowCount())}
    assert f"rsum {starter['rsum']:.1f} on 1,500 items" in cells["starter"] and "starter-val" in cells["starter"]
    assert cells["vse-new"].startswith("not meaningful yet") and "3 items" in cells["vse-new"]
    assert f"{retrained['rsum']:.1f}" not in cells["vse-new"]  # no 566.7 beside 347.6 reading as a gain
    note = dialog.figures_note.text()
    assert "do not compare" in note and "starter, vse-big" in note and "vse-new" not in note


@pytest.mark.parametrize("items", [3, FLOOR])
def test_one_definition_in_both_views(qtbot, items: int) -> None:
    """The dialog's figure for the new model and the manager's for a model measured the same way read alike."""
    from engine.loop.figures import report_figure

    comparison = _comparison(items)
    figure = report_figure(comparison.new, comparison.set_name)
    assert comparison.figures()[1] == figure
    assert figure.meaningful is (items >= FLOOR)
