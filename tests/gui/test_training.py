"""The training dialog runs a trainer process, plots its JSON progress live, and can cancel it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.widgets.training import JsonLines, TrainingDialog, TrainingRequest, format_eta

FAKE_TRAINER = [sys.executable, str(Path(__file__).with_name("fake_trainer.py"))]


@pytest.fixture
def dialog(qtbot, tmp_path: Path):
    dlg = TrainingDialog(FAKE_TRAINER, tmp_path / "models", str(tmp_path / "data"))
    qtbot.addWidget(dlg)
    yield dlg
    dlg.close()


def test_json_lines_buffers_partial_lines_and_passes_text_through() -> None:
    parser = JsonLines()
    assert parser.feed(b'{"event": "step", "st') == []
    assert parser.feed(b'ep": 3}\nplain text\n{"no_event": 1}\n') == [
        {"event": "step", "step": 3}, "plain text", '{"no_event": 1}']
    assert parser.feed(b'{"event": "done"}') == []
    assert parser.flush() == [{"event": "done"}]


def test_request_arguments_follow_the_cli_contract(tmp_path: Path) -> None:
    args = TrainingRequest("pcme", tmp_path / "d", tmp_path / "o", 3, "cpu").arguments()
    assert args[:3] == ["train", "--method", "pcme"] and args[-1] == "--json-progress"
    assert args[args.index("--epochs") + 1] == "3" and args[args.index("--data") + 1] == str(tmp_path / "d")


def test_format_eta() -> None:
    assert format_eta(65) == "1:05" and format_eta(3725) == "1:02:05" and format_eta(None) == "—"


def test_a_run_plots_loss_and_rsum_and_reports_the_model(qtbot, dialog, tmp_path: Path) -> None:
    dialog.epochs.setValue(2)
    with qtbot.waitSignal(dialog.model_trained, timeout=15000) as trained:
        dialog.start_button.click()
        assert dialog.state == "running" and not dialog.start_button.isEnabled()
    assert Path(trained.args[0]).parent == tmp_path / "models"
    assert dialog.state == "done"
    assert len(dialog.losses) == 10  # 2 epochs x 5 steps
    assert dialog.rsums == [(1, 110.0), (2, 120.0)]
    xs, _ = dialog.loss_curve.getData()
    assert len(xs) == 10
    assert "loading data (not JSON)" in dialog.log_view.toPlainText()
    assert dialog.progress.value() == dialog.progress.maximum() == 5


def test_cancel_stops_the_trainer(qtbot, dialog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TRAINER_STEP_S", "0.2")
    dialog.epochs.setValue(50)
    dialog.start()
    qtbot.waitUntil(lambda: len(dialog.losses) >= 1, timeout=15000)
    with qtbot.waitSignal(dialog.state_changed, timeout=10000) as changed:
        dialog.cancel_button.click()
    assert changed.args == ["cancelled"]
    assert not dialog.running and dialog.start_button.isEnabled()
    assert len(dialog.losses) < 250


def test_a_failing_trainer_is_reported_with_its_log(qtbot, dialog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TRAINER_FAIL", "1")
    with qtbot.waitSignal(dialog.state_changed, timeout=15000,
                          check_params_cb=lambda state: state != "running") as changed:
        dialog.start()
    assert changed.args == ["failed"]
    assert "exit code 3" in dialog.status.text()
    assert "something broke" in dialog.log_view.toPlainText()


def test_a_missing_trainer_program_fails_cleanly(qtbot, tmp_path: Path) -> None:
    dlg = TrainingDialog([str(tmp_path / "no-such-program")], tmp_path / "models", str(tmp_path))
    qtbot.addWidget(dlg)
    with qtbot.waitSignal(dlg.state_changed, timeout=5000, check_params_cb=lambda s: s != "running"):
        dlg.start()
    assert dlg.state == "failed" and not dlg.running
