"""The CLI's progress display (rich): drawn only on a terminal, fed by Progress records or trainer events."""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from engine.progress import Progress
from engine.progressbar import ProgressBar, drain
from engine.trainerrun import run_with_progress


def terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120, color_system=None), out


def test_the_bar_draws_counts_and_messages_on_a_terminal() -> None:
    console, out = terminal()
    with ProgressBar(console=console) as bar:
        assert bar.live
        bar(Progress(0, 0, "counting files"))  # unknown size: a pulsing bar
        bar(Progress(3, 8, "indexing [odd] name.jpg"))  # brackets are not rich markup
        bar.log("a line above the bar")
    text = out.getvalue()
    assert "3/8" in text and "indexing [odd] name.jpg" in text and "a line above the bar" in text


def test_no_bar_off_a_terminal_or_when_quiet(capsys) -> None:
    drain([Progress(1, 2, "half")])  # stderr is not a terminal under pytest
    drain([Progress(1, 2, "half")], quiet=True)
    assert capsys.readouterr() == ("", "")


def fake_trainer(tmp_path: Path, events: list[dict], stderr: str = "", status: int = 0) -> list[str]:
    script = tmp_path / "fake_trainer.py"
    script.write_text(textwrap.dedent(f"""
        import json, sys
        print({stderr!r}, file=sys.stderr, flush=True)
        print("a plain line")
        for event in {events!r}:
            print(json.dumps(event), flush=True)
        sys.exit({status})
    """))
    return [sys.executable, str(script)]


def test_train_events_become_a_bar_and_the_plain_summary(tmp_path: Path, capsys) -> None:
    events = [
        {"event": "progress", "stage": "features", "done": 5, "total": 10, "message": "photos"},
        {"event": "step", "epoch": 1, "step": 2, "total": 4, "loss": {"total": 0.5}, "lr": 1e-3, "eta_s": 3},
        {"event": "epoch", "epoch": 1, "val": {"rsum": 123.45}, "best": True},
        {"event": "done", "model_dir": "/models/m1", "val": {"rsum": 123.45}},
    ]
    console, out = terminal()
    status = run_with_progress([], ProgressBar(console=console),
                               fake_trainer(tmp_path, events, stderr="WARNING something to know"))
    assert status == 0
    drawn = out.getvalue()
    assert "2/4" in drawn and "epoch 1 loss 0.5000" in drawn  # the last state (earlier ones may be skipped)
    assert "epoch 1: validation rsum 123.5 (best so far)" in drawn
    assert "WARNING something to know" in drawn  # the trainer's stderr, above the bar
    stdout = capsys.readouterr().out
    assert stdout.splitlines() == ["a plain line", "model written to /models/m1 (validation rsum 123.5)"]
    assert not any(line.startswith("{") for line in stdout.splitlines())


def test_a_failing_trainer_keeps_its_exit_status_and_message(tmp_path: Path) -> None:
    console, out = terminal()
    error = json.dumps({"event": "error", "message": "no captions"})
    status = run_with_progress([], ProgressBar(console=console),
                               fake_trainer(tmp_path, [json.loads(error)], stderr="polyseek: error: no captions",
                                            status=2))
    assert status == 2 and "polyseek: error: no captions" in out.getvalue()
