"""The trainer's progress events: one typed definition that the trainer writes and the engine reads."""

from __future__ import annotations

import json
import math

import pytest

from engine.trainercontract import events

ONE_OF_EACH = [
    events.StageProgress("features", 3, 18, "extracting"),
    events.Step(2, 10, 100, loss={"total": 0.5, "triplet": 0.4}, lr=2e-4, eta_s=12.5),
    events.EpochEnd(1, {"rsum": 123.4, "t2i": {"r1": 10.0}}, best=True, loss={"total": 0.6}, lr=2e-4),
    events.Phase("finetune", 10, 5, 1e-5),
    events.Resumed(3, 40),
    events.Stopped("SIGTERM", "/models/run", resumable=True),
    events.Done("/models/run", {"rsum": 150.0}),
    events.Done(assets="/assets"),
    events.Error("no captions.tsv"),
]


@pytest.mark.parametrize("event", ONE_OF_EACH, ids=lambda e: type(e).__name__)
def test_every_event_survives_the_wire(event) -> None:
    line = events.dumps(event)
    assert "\n" not in line and json.loads(line)["event"] == events.kind(event)
    assert events.parse(line) == event
    assert events.parse(line.encode()) == event
    assert events.describe(event)


def test_the_wire_format_is_the_documented_one() -> None:
    assert json.loads(events.dumps(events.Phase("finetune", 1, 2, 1e-5))) == {
        "event": "phase", "phase": "finetune", "epoch": 1, "epochs": 2, "lr": 1e-5}
    assert json.loads(events.dumps(events.Done(assets="/a"))) == {"event": "done", "assets": "/a"}
    assert events.kind(events.EpochEnd(1)) == "epoch" and events.kind(events.StageProgress("s", 0, 1)) == "progress"


def test_non_finite_numbers_travel_as_null() -> None:
    line = events.dumps(events.Step(1, 1, 2, loss={"total": math.nan}, lr=math.inf))
    assert json.loads(line) == {"event": "step", "epoch": 1, "step": 1, "total": 2, "loss": {"total": None},
                                "lr": None}
    assert events.parse(line).total_loss is None
    assert events.nan_to_none({"a": [1.0, math.nan], "b": (math.inf,)}) == {"a": [1.0, None], "b": [None]}


def test_other_lines_are_not_events() -> None:
    for line in ("loading data", "", "[1, 2]", '{"no_event": 1}', '{"event": "unheard-of"}', '{"event": "step"}',
                 '{"event": "step", "st'):
        assert events.parse(line) is None, line


def test_a_reader_tolerates_extra_keys_and_loose_types() -> None:
    event = events.parse('{"event": "step", "epoch": "2", "step": 3.0, "total": 5, "new_key": 1, "loss": 7}')
    assert event == events.Step(2, 3, 5, loss={})
    assert events.parse('{"event": "epoch", "epoch": 4}') == events.EpochEnd(4)
