"""Scaffolding shared by the trainer's phase-two tests: scripted validation rsums and an interrupted run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from trainer.train import Interrupted, Reporter, StopRequest, TrainOptions, train


def scripted_rsums(monkeypatch: pytest.MonkeyPatch, values: list[float]) -> None:
    """Validation reports the real metrics but the given rsums, so a test chooses which epoch is best."""
    import trainer.train as loop

    real, rsums = loop.quick_rsum, iter(values)
    monkeypatch.setattr(loop, "quick_rsum", lambda model, pairs, device, distractors=None: {
        **real(model, pairs, device, distractors), "rsum": next(rsums)})


def straight_and_interrupted(make_options: Callable[[Path], TrainOptions], source, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The run ``make_options(out)`` trained twice: straight through into ``tmp_path/straight``, and into
    ``tmp_path/interrupted`` stopped (as by SIGTERM) at the first step of epoch 2, not yet resumed. Validation
    scores the warm-up 50 and the two later epochs 80 and 90 both times."""
    monkeypatch.setattr("trainer.reporting.STEP_EVENT_INTERVAL_S", 0.0)
    scripted_rsums(monkeypatch, [50.0, 80.0, 90.0, 50.0, 80.0, 90.0])
    straight, out, stop = tmp_path / "straight", tmp_path / "interrupted", StopRequest()
    train(make_options(straight), source=source, reporter=Reporter(True, enabled=False))

    def write(line: str) -> None:
        event = json.loads(line)
        if event["event"] == "step" and event["epoch"] == 2 and event["step"] == 1:
            stop.request(15)

    with pytest.raises(Interrupted):
        train(make_options(out), stop=stop, source=source, reporter=Reporter(True, write=write))
    return straight, out
