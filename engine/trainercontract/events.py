"""The trainer's progress events: the one definition of what ``python -m trainer ... --json-progress`` prints.

The trainer (``trainer.reporting.Reporter``, ``trainer.cli``) builds these records and writes them with
:func:`dumps`, one JSON object per line on stdout; the engine (the retraining job, ``polyseek train``'s bar,
asset preparation) reads them back with :func:`parse`. The wire format, as the README documents it::

    {"event": "progress", "stage": "features", "done": 3, "total": 18, "message": "..."}
    {"event": "step", "epoch": 1, "step": 10, "total": 100, "loss": {"total": 0.5, ...}, "lr": 2e-4, "eta_s": 12.3}
    {"event": "epoch", "epoch": 1, "val": {"rsum": 123.4, ...}, "best": true, "loss": {...}, "lr": 2e-4}
    {"event": "phase", "phase": "finetune", "epoch": 10, "epochs": 5, "lr": 1e-5}
    {"event": "resumed", "epoch": 3, "step": 40}
    {"event": "stopped", "signal": "SIGTERM", "model_dir": "...", "resumable": true}
    {"event": "done", "model_dir": "...", "val": {...}}        (``prepare``: {"event": "done", "assets": "..."})
    {"event": "error", "message": "..."}

A step's ``epoch`` is 1-based, ``step``/``total`` its place in that epoch, ``eta_s`` the estimate for the rest of
the whole run. An epoch event's ``epoch`` counts the finished epochs (0: the start's own validation of a warm
start). Non-finite numbers travel as ``null``. Part of the trainer contract (:mod:`engine.trainercontract`):
the engine may not import the trainer, while the trainer may import the engine. :func:`to_progress` and
:func:`describe` are the one translation of events for a progress display (the CLI's bar, the retraining job).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from engine.progress import Progress


@dataclass(frozen=True, slots=True)
class StageProgress:
    """Work before training (feature extraction, asset preparation): ``done`` of ``total`` in ``stage``."""

    stage: str
    done: int
    total: int
    message: str = ""


@dataclass(frozen=True, slots=True)
class Step:
    """One optimisation step: ``step`` of ``total`` in the 1-based ``epoch``; ``loss`` holds the named terms."""

    epoch: int
    step: int
    total: int
    loss: dict[str, float | None] = field(default_factory=dict)
    lr: float | None = None
    eta_s: float | None = None

    @property
    def total_loss(self) -> float | None:
        value = self.loss.get("total")
        return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class EpochEnd:
    """``epoch`` epochs are finished and validated: ``val`` is the validation report (rsum, i2t, t2i, ...)."""

    epoch: int
    val: dict[str, Any] = field(default_factory=dict)
    best: bool = False
    loss: dict[str, float | None] = field(default_factory=dict)
    lr: float | None = None

    @property
    def rsum(self) -> float | None:
        value = self.val.get("rsum")
        return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class Phase:
    """A new phase begins after ``epoch`` finished epochs: ``finetune`` trains the last ``blocks`` backbone blocks
    and the last ``text_layers`` MiniLM layers (0: that side reads its cached features) with the head for
    ``epochs``."""

    phase: str
    epoch: int
    epochs: int
    lr: float | None = None
    blocks: int | None = None
    text_layers: int | None = None


@dataclass(frozen=True, slots=True)
class Resumed:
    """``--resume`` continues after ``epoch`` finished epochs and ``step`` steps of the next."""

    epoch: int
    step: int = 0


@dataclass(frozen=True, slots=True)
class Stopped:
    """The run was asked to stop (``signal``) and left a checkpoint in ``model_dir`` (``resumable``)."""

    signal: str
    model_dir: str
    resumable: bool = True


@dataclass(frozen=True, slots=True)
class Done:
    """The run finished: the model is in ``model_dir`` with its final validation ``val``; ``prepare`` names its
    ``assets`` folder instead."""

    model_dir: str | None = None
    val: dict[str, Any] | None = None
    assets: str | None = None


@dataclass(frozen=True, slots=True)
class Error:
    """The trainer failed; ``message`` says why (it is also on stderr)."""

    message: str


TrainerEvent = StageProgress | Step | EpochEnd | Phase | Resumed | Stopped | Done | Error

KINDS: dict[str, type] = {"progress": StageProgress, "step": Step, "epoch": EpochEnd, "phase": Phase,
                          "resumed": Resumed, "stopped": Stopped, "done": Done, "error": Error}
_KIND_OF = {cls: kind for kind, cls in KINDS.items()}


def kind(event: TrainerEvent) -> str:
    """The ``"event"`` name of a record on the wire."""
    return _KIND_OF[type(event)]


def nan_to_none(value: Any) -> Any:
    """``value`` with every NaN or infinity (also inside dicts, lists and tuples) replaced by None, as JSON has
    no spelling for them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nan_to_none(v) for v in value]
    return value


def to_json(event: TrainerEvent) -> dict[str, Any]:
    """The record as a JSON object: ``{"event": kind, ...fields}``; fields that are None are left out."""
    body = {name: value for name, value in asdict(event).items() if value is not None}
    return nan_to_none({"event": kind(event), **body})


def dumps(event: TrainerEvent) -> str:
    """The record as one line of JSON (without the newline)."""
    return json.dumps(to_json(event), allow_nan=False)


def from_json(data: Any) -> TrainerEvent | None:
    """The record a decoded JSON object stands for, or None when it is not a trainer event. Unknown keys are
    ignored and missing ones take their defaults, so a reader copes with a trainer one version apart."""
    if not isinstance(data, dict):
        return None
    cls = KINDS.get(str(data.get("event")))
    if cls is None:
        return None
    values: dict[str, Any] = {}
    for spec in fields(cls):
        if spec.name in data:
            values[spec.name] = _coerce(spec.type, data[spec.name])
    try:
        return cls(**values)
    except TypeError:  # a required field is missing
        return None


def parse(line: str | bytes) -> TrainerEvent | None:
    """The record one line of the trainer's stdout holds, or None for any other line (a warning, a report)."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    try:
        return from_json(json.loads(line))
    except ValueError:
        return None


def _coerce(annotation: str, value: Any) -> Any:
    """A JSON value as the field's type (annotations are strings here: ``from __future__ import annotations``)."""
    if value is None:
        return None
    try:
        if annotation == "int":
            return int(value)
        if annotation == "bool":
            return bool(value)
        if annotation == "str":
            return str(value)
        if annotation.startswith("float"):
            return float(value)
        if annotation.startswith("str"):
            return str(value)
    except (TypeError, ValueError):
        return None
    if annotation.startswith("dict"):
        return value if isinstance(value, dict) else {}
    return value


def to_progress(event: TrainerEvent) -> Progress | None:
    """The progress record of an event that measures work: a step (``epoch E loss L``, ``step`` of ``total``) or
    work before training (``stage: message``, ``done`` of ``total``); a finished epoch as its whole (1 of 1, the
    line :func:`describe` writes). None for the others (a phase, a resume, the end), which are lines only."""
    if isinstance(event, Step):
        loss = event.total_loss
        return Progress(event.step, event.total, f"epoch {event.epoch}" + (f" loss {loss:.4f}" if loss is not None
                                                                          else ""))
    if isinstance(event, StageProgress):
        return Progress(event.done, event.total, f"{event.stage}: {event.message}" if event.message else event.stage)
    if isinstance(event, EpochEnd):
        return Progress(1, 1, describe(event))
    return None


def describe(event: TrainerEvent) -> str:
    """One readable line for a log or a terminal."""
    if isinstance(event, Step):
        loss = event.total_loss
        return (f"epoch {event.epoch} step {event.step}/{event.total}"
                + (f" loss {loss:.4f}" if loss is not None else "")
                + (f" lr {event.lr:.2e}" if event.lr is not None else "")
                + (f" eta {event.eta_s:.0f}s" if event.eta_s is not None else ""))
    if isinstance(event, EpochEnd):
        return f"epoch {event.epoch}: validation rsum {_number(event.rsum)}{' (best so far)' if event.best else ''}"
    if isinstance(event, Phase):
        return f"phase: {event.phase} after epoch {event.epoch}, for {event.epochs} epochs"
    if isinstance(event, Resumed):
        return f"resumed at epoch {event.epoch}, step {event.step}"
    if isinstance(event, StageProgress):
        return f"{event.stage}: {event.message} ({event.done}/{event.total})"
    if isinstance(event, Done):
        if event.assets is not None:
            return f"assets ready in {event.assets}"
        rsum = (event.val or {}).get("rsum")
        return f"model written to {event.model_dir} (validation rsum {_number(rsum)})"
    if isinstance(event, Stopped):
        resumable = "a resumable checkpoint is in" if event.resumable else "nothing to resume in"
        return f"stopped by {event.signal}: {resumable} {event.model_dir}"
    return f"error: {event.message}"


def _number(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) and math.isfinite(value) else "n/a"
