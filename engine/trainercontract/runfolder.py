"""What a training run leaves in its output folder, as the trainer writes it and the engine reads it back.

``OUT/`` holds ``config.json`` (the resolved method config), ``model.safetensors`` (the best epoch's weights),
``trainer_state.json`` (:class:`TrainerState`, written last so that it always names complete checkpoint files),
``last-<step>.safetensors`` / ``optimizer-<step>.pt`` (the resumable checkpoint), and once the run has finished
``metrics.json`` and the ONNX export in ``onnx/``. ``trainer.checkpoint`` writes these files;
:func:`saved_checkpoint` reads a resumable checkpoint back from the disk, which is where the truth is: a trainer
killed while saving never says "stopped", yet its previous checkpoint is intact.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.trainercontract.metrics import UncertaintyCurve
from engine.trainercontract.reports import ReportError, RetrievalReport

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
METRICS_FILE = "metrics.json"
ONNX_DIR = "onnx"
STATE_FILE = "trainer_state.json"  # written last by trainer.checkpoint, naming a complete checkpoint
STATE_VERSION = 1


class CheckpointError(RuntimeError):
    """A model folder or checkpoint is missing, unreadable or does not fit the model; names the file."""


@dataclass
class TrainerState:
    """Progress of a run (``trainer_state.json``).

    ``epoch`` counts finished epochs; ``step`` the steps already done in the next one (non-zero only after an
    interruption mid-epoch). ``lr_scale`` and ``plateau_epochs`` are the halving-on-plateau schedule's state,
    ``bad_epochs`` the early-stopping counter. ``history`` has one record per finished epoch; ``options`` the
    run's resolved settings and data (what a resume keeps); ``resume`` names the files of the last checkpoint.
    ``finetune_from`` is set when phase two (``trainer.finetune``) starts; the checkpoint then holds the
    backbone and the head together.
    """

    method: str
    epoch: int = 0
    step: int = 0
    global_step: int = 0
    best_rsum: float | None = None
    best_epoch: int | None = None
    bad_epochs: int = 0
    lr_scale: float = 1.0
    plateau_epochs: int = 0
    finished: bool = False
    stopped_early: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    resume: dict[str, str] | None = None
    finetune_from: int | None = None  # the epoch count when backbone fine-tuning began (None: not begun)
    version: int = STATE_VERSION

    def to_json(self) -> str:
        """The state file's text (NaN and infinities are refused: they are not JSON)."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, where: str = STATE_FILE) -> TrainerState:
        """The state a state file's text holds; :class:`CheckpointError` (naming ``where``) when it is not one or
        has another version."""
        try:
            data = json.loads(text)
            if data.get("version") != STATE_VERSION:
                raise CheckpointError(f"{where}: state version {data.get('version')!r}, expected {STATE_VERSION}")
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in known})
        except (json.JSONDecodeError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{where}: not a trainer state: {exc}") from exc


def load_state(out: Path) -> TrainerState | None:
    """``trainer_state.json`` of a run, or None when the folder has none."""
    path = Path(out) / STATE_FILE
    if not path.is_file():
        return None
    return TrainerState.from_json(path.read_text(encoding="utf-8"), str(path))


DEFAULT_METHOD_OF_CONFIG = "vse"  # a config.json that names no method (the first exports): VSE


@dataclass(frozen=True, slots=True)
class TrainerMetrics:
    """A finished run's ``metrics.json``: its best epoch's retrieval report on the whole validation split
    (:class:`~engine.trainercontract.metrics.RetrievalReport`, the model alone) and what the run adds.

    The trainer writes it (``trainer/train.py``: :func:`engine.trainercontract.metrics.retrieval_report` plus
    ``method``, ``split``, ``best_epoch``, ``epochs``, ``similarity``, ``r_precision``, PCME's
    ``r1_by_uncertainty_decile``, GPU peaks...); every engine reader parses it here. ``report`` is None for a record
    without the figures (a partial or foreign file); ``raw`` is the record as written (the catalog stores it,
    ``polyseek models --json`` and ``retrain --json`` show it unchanged).
    """

    report: RetrievalReport | None
    method: str | None = None
    split: str | None = None
    best_epoch: int | None = None
    epochs: int | None = None
    similarity: str | None = None
    uncertainty: Mapping[str, UncertaintyCurve] = field(default_factory=dict)  # "i2t" / "t2i": R@1 per sigma decile
    raw: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rsum(self) -> float | None:
        return self.report.rsum if self.report is not None else None

    @classmethod
    def from_dict(cls, data: Any, where: str = METRICS_FILE) -> TrainerMetrics:
        """Parse a decoded ``metrics.json`` (or the copy a catalog stored); :class:`CheckpointError` names
        ``where`` when it is not an object. Figures that do not have a report's shape leave ``report`` None; an
        unreadable uncertainty curve is left out (it only adds a reading)."""
        if not isinstance(data, Mapping):
            raise CheckpointError(f"{where}: expected a JSON object of metrics, got {type(data).__name__}")
        try:
            report = RetrievalReport.from_dict(data, where) if "rsum" in data else None
        except ReportError:
            report = None
        curves: dict[str, UncertaintyCurve] = {}
        decile = data.get("r1_by_uncertainty_decile")
        for way in ("i2t", "t2i"):
            if isinstance(decile, Mapping) and way in decile:
                try:
                    curves[way] = UncertaintyCurve.from_dict(decile[way], f"{where}: r1_by_uncertainty_decile.{way}")
                except ReportError:
                    pass

        def text(key: str) -> str | None:
            value = data.get(key)
            return str(value) if isinstance(value, str) and value else None

        def whole(key: str) -> int | None:
            value = data.get(key)
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None

        return cls(report, text("method"), text("split"), whole("best_epoch"), whole("epochs"), text("similarity"),
                   curves, dict(data))

    def as_dict(self) -> dict[str, Any]:
        """The record as written (what the catalog stores)."""
        return dict(self.raw)


def read_metrics(out: Path) -> TrainerMetrics | None:
    """The finished run's final validation report (``metrics.json``), or None when the folder has none;
    :class:`CheckpointError` naming the file when it is not JSON or not a record of metrics."""
    path = Path(out) / METRICS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read the metrics: {exc}") from exc
    return TrainerMetrics.from_dict(data, str(path))


def read_config_method(model_dir: Path) -> str:
    """The method a model folder's ``config.json`` names (:data:`DEFAULT_METHOD_OF_CONFIG` where it names none or
    cannot be read: a folder the engine lists before it opens the model)."""
    try:
        data = json.loads((Path(model_dir) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return DEFAULT_METHOD_OF_CONFIG
    method = data.get("method") if isinstance(data, dict) else None
    return method if isinstance(method, str) and method else DEFAULT_METHOD_OF_CONFIG


def has_weights(model_dir: Path) -> bool:
    """Whether ``model_dir`` holds a trained model's config and weights (what a warm start reads)."""
    return (Path(model_dir) / WEIGHTS_FILE).is_file() and (Path(model_dir) / CONFIG_FILE).is_file()


@dataclass(frozen=True, slots=True)
class SavedCheckpoint:
    """A resumable checkpoint a run left on disk: ``epochs_done`` finished epochs, ``step`` steps of the next."""

    folder: Path
    epochs_done: int
    step: int
    method: str = ""
    options: dict[str, Any] | None = None  # the run's trainer options (data, splits, epochs)

    def describe(self) -> str:
        """One line for a status bar or a terminal."""
        where = f"epoch {self.epochs_done}" + (f", step {self.step} of the next" if self.step else "")
        return f"a resumable checkpoint (after {where}) is in {self.folder}"


def saved_checkpoint(folder: Path | None) -> SavedCheckpoint | None:
    """What ``--resume`` would continue from in ``folder``, read from the disk, or None.

    The state file is written last, naming the ``last-*.safetensors`` and ``optimizer-*.pt`` files of the
    checkpoint, so a state file whose files exist is a complete checkpoint; a finished run has nothing to resume.
    """
    if folder is None:
        return None
    try:
        state = load_state(Path(folder))
    except (OSError, CheckpointError):
        return None
    if state is None or state.finished or not isinstance(state.resume, dict) or not state.resume:
        return None
    if not all(isinstance(name, str) and (Path(folder) / name).is_file() for name in state.resume.values()):
        return None
    options = state.options if isinstance(state.options, dict) else None
    return SavedCheckpoint(Path(folder), int(state.epoch), int(state.step), str(state.method), options)


def find_interrupted_run(models_dir: Path) -> SavedCheckpoint | None:
    """The most recently checkpointed run under ``models_dir`` that did not finish (it can be resumed after
    the app was closed or crashed), if its options say what it trained on."""
    try:
        states = sorted(Path(models_dir).glob(f"*/{STATE_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for state in states:
        saved = saved_checkpoint(state.parent)
        if saved is not None and saved.method and saved.options and saved.options.get("data"):
            return saved
    return None
