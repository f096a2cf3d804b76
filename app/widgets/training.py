"""The training dialog: starts the trainer as its own process, plots its JSON progress live, and afterwards
registers the new model and compares it with the active one.

The trainer runs as ``<command> train ... --json-progress`` through :class:`QProcess` (never in the GUI
process: torch stays out of it, and a crash in training never takes the window down). It prints one JSON
object per line::

    {"event": "progress", "stage": "features", "done": 3, "total": 18, "message": "..."}
    {"event": "step", "epoch": 1, "step": 10, "total": 100, "loss": {"total": 0.5, ...}, "lr": 2e-4,
     "eta_s": 12.3}
    {"event": "epoch", "epoch": 1, "val": {"rsum": 123.4, "t2i": {"r1": ...}, ...}}
    {"event": "resumed", "epoch": 3, "step": 40}   (``--resume``: epochs finished and steps of the next done)
    {"event": "stopped", "signal": "SIGTERM", "model_dir": "...", "resumable": true}   (after Cancel)
    {"event": "done", "model_dir": "...", "val": {...}}
    {"event": "error", "message": "..."}

Other lines (warnings, tracebacks) go to the log pane as plain text. A step's ``epoch`` is the epoch it is in
(1-based), ``step``/``total`` its place in that epoch, and ``eta_s`` the trainer's estimate for the rest of the
*whole* run (steps left in all epochs plus the validations left); the number of epochs is the dialog's own
``--epochs``. The progress bar shows the whole run (:class:`RunProgress`), and the trainer runs with
``--low-priority`` so that it yields the CPU to this window.

The data is either a caption folder or "this library's annotations": the library's captions are exported
(``SearchService.export_training_set``) into a caption folder whose ``heldout`` split is kept out of
training, so the old and the new model can be measured on the same held-aside annotations
(``SearchService.evaluate_on``) before the user switches.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QProcess, QProcessEnvironment, Qt, QThreadPool, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import qtcompat  # noqa: F401  (binding work-around, before any signal is emitted)
from app.service_api import ZERO_SHOT, SearchServiceLike, active_model
from app.settings import DEVICES
from app.widgets.plaintext import plain_label, plain_tooltip
from app.workers import run_in_background, while_alive

log = logging.getLogger(__name__)

METHODS = ("vse", "pvse", "pcme", "a3vse", "twobranch-embed", "twobranch-sim", "instance")
# One line per method for the picker, in a user's words. trainer/methods/registry.py holds the technical
# summaries, but importing it would load torch into the GUI; a test keeps both lists naming the same methods.
METHOD_DESCRIPTIONS = {
    "vse": "One vector per item and per sentence, hardest-negative triplet loss (VSE++): fast, a good default.",
    "pvse": "Several vectors per item (PVSE): one photo or clip can match different sentences about different "
            "parts of it.",
    "pcme": "Each item is a probability cloud (PCME): matches come with a probability and an uncertainty, so the "
            "p ≥ cutoff applies.",
    "a3vse": "Attention over regions, learns from a few captions plus your un-captioned items (A3VSE): made for a "
             "library's annotations.",
    "twobranch-embed": "Two-branch embedding network: ranking loss both ways with neighbourhood constraints.",
    "twobranch-sim": "Two-branch similarity network: a small network scores each sentence-item pair (logistic "
                     "loss).",
    "instance": "Dual-path network trained first to tell every item apart (instance loss), then to rank.",
}
# After Cancel the trainer finishes its current step and writes a checkpoint. Niced (--low-priority) on a busy
# machine, with the backbone being fine-tuned, that took well over the 3 s once allowed here, so it was
# killed mid-save and the dialog said no checkpoint existed. A trainer silent this long is killed.
STOP_WAIT_MS = 60_000
CLOSE_WAIT_MS = 15_000  # closing the dialog (or the app) during a run blocks this long at most
TRAINER_STATE_FILE = "trainer_state.json"  # trainer.checkpoint.STATE_FILE (trainer imports torch; not here)
SOURCE_FOLDER = "folder"
SOURCE_LIBRARY = "library"
SOURCES = ((SOURCE_FOLDER, "A caption folder"), (SOURCE_LIBRARY, "This library's annotations"))
# A3VSE learns from a few annotated items plus many un-annotated ones, which is what a library holds.
LIBRARY_METHOD = "a3vse"
HOLDOUT = 0.2  # share of the annotated items kept aside to compare the old and the new model
HOLDOUT_SEED = 0


@dataclass(frozen=True, slots=True)
class SavedCheckpoint:
    """A resumable checkpoint a run left on disk: ``epochs_done`` finished epochs, ``step`` steps of the next."""

    folder: Path
    epochs_done: int
    step: int
    method: str = ""
    options: dict[str, Any] | None = None  # the run's trainer options (data, splits, epochs)

    def describe(self) -> str:
        where = f"epoch {self.epochs_done}" + (f", step {self.step} of the next" if self.step else "")
        return f"a resumable checkpoint (after {where}) is in {self.folder}"


def saved_checkpoint(folder: Path | None) -> SavedCheckpoint | None:
    """What ``--resume`` would continue from in ``folder``, read from the disk, or None.

    ``trainer.checkpoint`` writes ``trainer_state.json`` last, naming the ``last-*.safetensors`` and
    ``optimizer-*.pt`` files of the checkpoint, so a state file whose files exist is a complete checkpoint; a
    finished run has nothing to resume. The trainer's own "stopped" event is not needed (a trainer killed
    while saving never prints it, yet its previous checkpoint is intact).
    """
    if folder is None:
        return None
    try:
        state = json.loads((Path(folder) / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = state.get("resume") if isinstance(state, dict) else None
    if not isinstance(files, dict) or state.get("finished") or not files:
        return None
    if not all(isinstance(name, str) and (Path(folder) / name).is_file() for name in files.values()):
        return None
    options = state.get("options")
    return SavedCheckpoint(Path(folder), int(state.get("epoch", 0)), int(state.get("step", 0)),
                           str(state.get("method", "")), options if isinstance(options, dict) else None)


def find_interrupted_run(models_dir: Path) -> SavedCheckpoint | None:
    """The most recently checkpointed run under ``models_dir`` that did not finish (it can be resumed after
    the app was closed or crashed), if its options say what it trained on."""
    try:
        states = sorted(Path(models_dir).glob(f"*/{TRAINER_STATE_FILE}"), key=lambda p: p.stat().st_mtime,
                        reverse=True)
    except OSError:
        return None
    for state in states:
        saved = saved_checkpoint(state.parent)
        if saved is not None and saved.method and saved.options and saved.options.get("data"):
            return saved
    return None


@dataclass(frozen=True, slots=True)
class TrainingRequest:
    """The arguments of one ``train`` run (the CLI contract of ``polyseek train``)."""

    method: str
    data: Path
    out: Path
    epochs: int = 10
    device: str = "auto"
    train_split: str = "train"
    val_split: str = "dev"
    resume: bool = False
    extra: tuple[str, ...] = ()  # further trainer options, e.g. ("--preset", "test")
    low_priority: bool = True  # the trainer yields the CPU to the GUI (trainer.cli.lower_priority)
    finetune_epochs: int = 0  # phase two: epochs fine-tuning the image backbone (trainer.finetune)
    finetune_blocks: int = 16  # of the backbone's 16 blocks, how many (the last ones) phase two trains

    @property
    def total_epochs(self) -> int:
        """The most epochs the run can have: the warm-up's and the fine-tuning's."""
        return self.epochs + self.finetune_epochs

    def arguments(self) -> list[str]:
        """The trainer's command-line arguments after the program itself."""
        args = ["train", "--method", self.method, "--data", str(self.data), "--out", str(self.out),
                "--epochs", str(self.epochs), "--device", self.device, "--train-split", self.train_split,
                "--val-split", self.val_split]
        if self.resume:
            args.append("--resume")
        if self.finetune_epochs:
            args += ["--finetune-epochs", str(self.finetune_epochs), "--finetune-blocks", str(self.finetune_blocks)]
        if self.low_priority:
            args.append("--low-priority")
        # a killed app must not leave a trainer running on: it stops with a resumable checkpoint
        return [*args, *self.extra, "--stop-with-parent", "--json-progress"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """The new model beside the model that was active, measured on the same validation split."""

    new_name: str
    new: dict[str, Any]  # the trainer's metrics.json
    old_name: str
    old: dict[str, Any] | None  # ``evaluate_on`` of the active model; None when it could not be measured
    old_error: str | None
    data: Path
    split: str
    measured: bool = True  # False: nothing was held aside, so neither model could be measured fairly
    activated: bool = False  # the activation rule's decision (engine.loop.judge.gate, as `polyseek retrain`)
    decision: str = ""


def headline(metrics: dict[str, Any] | None) -> tuple[float | None, float | None, float | None, float | None]:
    """Text-to-item R@1, R@5, R@10 and rsum of a metrics report (the shape of the trainer's metrics.json).

    Text-to-item is the direction a search runs in; rsum sums R@1/5/10 of both directions (the usual summary of
    cross-modal retrieval, ``engine.loop.metrics.retrieval_report``), so it also reflects item-to-text.
    """
    if not metrics:
        return None, None, None, None
    t2i = metrics.get("t2i") if isinstance(metrics.get("t2i"), dict) else {}

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) else None

    return number(t2i.get("r1")), number(t2i.get("r5")), number(t2i.get("r10")), number(metrics.get("rsum"))


def compare_models(service: SearchServiceLike, model_dir: Path, data: Path, split: str,
                   measure: bool = True, library: bool = False) -> Comparison:
    """Register ``model_dir`` with the library and measure the active model on ``data``/``split`` (blocking).

    ``library`` (a retrain on the library's annotations): both models are measured by the engine
    (``judge_model``: the held-aside annotations and the library's pseudo pairs) and the activation rule that
    ``polyseek retrain`` applies decides whether the new one becomes active. Otherwise the new model's figures are
    its own ``metrics.json`` (the trainer's final validation on the same split), so only the old model needs
    evaluating, and the user decides. ``measure=False`` (no held-aside items) only registers.
    """
    old = active_model(list(service.models()))
    old_name = str(old.name) if old is not None else ZERO_SHOT
    name = service.register_model(model_dir)
    if library:
        verdict = service.judge_model(name, data, split if measure else None,
                                      None if old_name == ZERO_SHOT else old_name)
        error = "; ".join(verdict.warnings) or None
        return Comparison(name, verdict.after or {}, old_name, verdict.before, error, data, split, measured=measure,
                          activated=verdict.activated, decision=verdict.decision)
    metrics_file = model_dir / "metrics.json"
    new = json.loads(metrics_file.read_text(encoding="utf-8")) if metrics_file.is_file() else {}
    if not measure:
        return Comparison(name, new, old_name, None, None, data, split, measured=False)
    try:  # evaluate_on's None means zero-shot, so the active model is named
        old_metrics = service.evaluate_on(data, split, None if old_name == ZERO_SHOT else old_name)
        error = None
    except Exception as exc:  # noqa: BLE001 - the new model is registered either way; the gap is shown
        log.warning("could not evaluate the active model on %s/%s: %s", data, split, exc)
        old_metrics, error = None, f"{type(exc).__name__}: {exc}"
    return Comparison(name, new, old_name, old_metrics, error, data, split)


class JsonLines:
    """Splits a byte stream into JSON events; partial lines wait for the rest, other lines pass as text."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[dict[str, Any] | str]:
        """Every complete line so far: a dict for each JSON event, the text for anything else."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        return [_parse_line(line) for line in lines if line.strip()]

    def flush(self) -> list[dict[str, Any] | str]:
        """What is left in the buffer once the stream has ended (a last line without a newline)."""
        rest, self._buffer = self._buffer, b""
        return [_parse_line(rest)] if rest.strip() else []


def _parse_line(line: bytes) -> dict[str, Any] | str:
    text = line.decode("utf-8", errors="replace").rstrip("\r")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if isinstance(value, dict) and "event" in value else text


@dataclass(slots=True)
class RunProgress:
    """Where a training run stands over all its epochs, from the trainer's events (the dialog's progress bar).

    The bar's value is ``epochs_done * steps_per_epoch + step`` of ``epochs * steps_per_epoch``, so it fills
    once over the whole run instead of once per epoch. The epoch length is learnt from the first step event and
    kept across a resume; until it is known every epoch counts as one step (a resume shows its finished epochs).
    """

    epochs: int
    epochs_done: int = 0
    step: int = 0  # steps done in the epoch after ``epochs_done``
    steps_per_epoch: int = 0  # 0: no step event seen yet
    known: bool = False  # whether any event has placed the run (the feature stage has the bar until then)

    def at_step(self, epoch: int, step: int, steps_per_epoch: int) -> None:
        """A "step" event: ``step`` of ``steps_per_epoch`` done in the 1-based ``epoch``."""
        self.epochs_done, self.step = max(0, epoch - 1), max(0, step)
        self.steps_per_epoch, self.known = max(1, steps_per_epoch), True

    def at_epoch_end(self, epoch: int) -> None:
        """An "epoch" event: ``epoch`` epochs are finished (and validated)."""
        self.epochs_done, self.step, self.known = max(0, epoch), 0, True

    def at_resume(self, epochs_done: int, step: int) -> None:
        """A "resumed" event: the checkpoint's finished epochs and the steps done of the next one."""
        self.epochs_done, self.step, self.known = max(0, epochs_done), max(0, step), True

    @property
    def epoch_count(self) -> int:
        """Epochs of the run: those asked for, or those already done by a resumed run that was asked for fewer."""
        return max(1, self.epochs, self.epochs_done)

    @property
    def total(self) -> int:
        """Steps of the whole run."""
        return self.epoch_count * max(1, self.steps_per_epoch)

    @property
    def done(self) -> int:
        """Steps done over the whole run."""
        per_epoch = max(1, self.steps_per_epoch)
        return min(self.total, self.epochs_done * per_epoch + min(self.step, per_epoch))

    @property
    def epoch(self) -> int:
        """The 1-based epoch being trained (after an epoch's end, that epoch until the next one starts)."""
        current = self.epochs_done + (1 if self.step > 0 or self.epochs_done == 0 else 0)
        return max(1, min(current, self.epoch_count))

    def label(self) -> str:
        """The bar's text, e.g. "epoch 3/12 · 41%" (``%p`` is QProgressBar's percentage)."""
        return f"epoch {self.epoch}/{self.epoch_count} · %p%"


def format_eta(seconds: float | None) -> str:
    """Seconds as "m:ss" or "h:mm:ss"; "—" when unknown."""
    if seconds is None or seconds < 0:
        return "—"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class TrainingDialog(QDialog):
    """Choose the data and a method, train, watch loss and validation rsum, cancel / resume, then compare.

    With a service set (:meth:`set_service`), a finished run is registered with the library, its validation
    metrics are shown beside the active model's on the same split, and "Use it and re-index" asks the window
    (``use_model_requested``) to activate it and re-embed the library in the background.
    """

    model_trained = Signal(str)  # the model directory the trainer wrote
    model_registered = Signal(str)  # the name the library registered it under
    comparison_ready = Signal(object)  # Comparison
    use_model_requested = Signal(str)  # model name: activate it and re-index
    state_changed = Signal(str)  # "preparing", "running", "done", "cancelled", "failed"

    def __init__(self, command: list[str], models_dir: Path, data_folder: str = "",
                 parent: QWidget | None = None, *, extra_args: tuple[str, ...] = (),
                 service: SearchServiceLike | None = None, pool: QThreadPool | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a model")
        self.command = list(command)
        self.models_dir = models_dir
        self.extra_args = tuple(extra_args)
        self.state = "idle"
        self.model_dir: str | None = None
        self.resumable_dir: str | None = None  # set by a "stopped" event: Resume continues from there
        self.training_set: Any = None  # the library's exported TrainingSet of the current run
        self.comparison: Comparison | None = None
        self.final_metrics: dict[str, Any] | None = None
        self.losses: list[tuple[int, float]] = []  # (global step, total loss)
        self.rsums: list[tuple[int, float]] = []  # (epoch, validation rsum)
        self.run_progress = RunProgress(epochs=1)  # the whole run's position, shown by the progress bar
        self._phase_marker: pg.InfiniteLine | None = None  # where fine-tuning began, on the rsum plot
        self._service: SearchServiceLike | None = None
        self._pool = pool
        self._generation = 0  # bumped by cancel / close, so a late background result is ignored
        self._last_request: TrainingRequest | None = None
        self._error: str | None = None
        self._parser = JsonLines()
        self._cancelling = False
        self._process: QProcess | None = None
        self.stop_wait_ms = STOP_WAIT_MS  # how long Cancel waits for the trainer's checkpoint before killing it
        self._kill_timer = QTimer(self, singleShot=True, interval=STOP_WAIT_MS)
        self._kill_timer.timeout.connect(self._kill)
        self._data_folder = data_folder
        self._build(data_folder)
        self.set_service(service)
        self._offer_interrupted_run()

    def reset(self) -> None:
        """Start clean, as a new dialog would: the last run's plots, numbers, log and result are gone, the data
        is this library's annotations again; an unfinished run on disk is offered for Resume. Not while busy."""
        if self.busy:
            return
        self._generation += 1
        for attribute in ("model_dir", "resumable_dir", "training_set", "comparison", "final_metrics",
                          "_last_request", "_error", "_process"):
            setattr(self, attribute, None)
        self.losses.clear()
        self.rsums.clear()
        self.loss_curve.setData([], [])
        self.val_curve.setData([], [])
        self._clear_phase_marker()
        self.run_progress = RunProgress(epochs=1)
        self.progress.setFormat("%p%")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        for widget in (self.result_box, self.data_summary, self.data_warning):
            widget.hide()
        self.log_view.clear()
        self.data.setText(self._data_folder)
        self.train_split.setText("train")
        self.val_split.setText("dev")
        self._set_state("idle", "Not started")
        if self._service is not None:
            self.set_source(SOURCE_LIBRARY)
            self._source_changed()  # the method follows the active model again
        self._offer_interrupted_run()

    def _offer_interrupted_run(self) -> None:
        """A run that was stopped before it finished (Cancel, the app closed, a crash) left its checkpoint on
        disk: offer to resume it, as after a Cancel in this session."""
        saved = find_interrupted_run(self.models_dir)
        if saved is None or saved.options is None:
            return
        options = saved.options
        self._last_request = TrainingRequest(
            saved.method, Path(str(options["data"])), saved.folder, int(options.get("epochs") or self.epochs.value()),
            self.device.currentText(), str(options.get("train_split") or "train"),
            str(options.get("val_split") or "dev"), extra=tuple(self.extra_args))
        self.resumable_dir = str(saved.folder)
        self.epochs.setValue(self._last_request.epochs)
        self.data.setText(str(self._last_request.data))
        if self.method.findText(saved.method) >= 0:
            self.method.setCurrentText(saved.method)
        self._set_state("cancelled", f"An unfinished {saved.method} run: {saved.describe()}; Resume continues it, "
                                     "Start begins a new one.")

    # --- layout
    def _build(self, data_folder: str) -> None:
        self.source = QComboBox()
        for key, text in SOURCES:
            self.source.addItem(text, key)
        self.source.currentIndexChanged.connect(self._source_changed)
        self.method = QComboBox()
        self.method.addItems(METHODS)
        self.method_description = plain_label("", wrap=True)
        self.method.currentTextChanged.connect(lambda name: self.method_description.setText(
            METHOD_DESCRIPTIONS.get(name, "")))
        self.method_description.setText(METHOD_DESCRIPTIONS[self.method.currentText()])
        method_column = QVBoxLayout()
        method_column.addWidget(self.method)
        method_column.addWidget(self.method_description)
        self.data = QLineEdit(data_folder, placeholderText="A caption folder (images/ + captions.tsv)")
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self._browse)
        data_row = QHBoxLayout()
        data_row.addWidget(self.data, 1)
        data_row.addWidget(self.browse_button)
        self.train_split = QLineEdit("train")
        self.val_split = QLineEdit("dev")
        self.val_split.setToolTip("The split of the caption folder measured after every epoch")
        split_row = QHBoxLayout()
        split_row.addWidget(QLabel("train"))
        split_row.addWidget(self.train_split)
        split_row.addWidget(QLabel("validation"))
        split_row.addWidget(self.val_split)
        self.epochs = QSpinBox(minimum=1, maximum=1000, value=10)
        self.finetune = QSpinBox(minimum=0, maximum=100, value=0, suffix=" epochs", specialValueText="off")
        self.finetune.setToolTip("After the epochs above, fine-tune the image backbone itself with the best model "
                                 "for this many epochs (photos only). The whole backbone is meant for a GPU: on a "
                                 "CPU an epoch over 6,000 photos takes about a quarter of an hour.")
        self.finetune_blocks = QSpinBox(minimum=1, maximum=16, value=16, prefix="last ", suffix=" of 16 blocks")
        self.finetune_blocks.setToolTip("Fine-tune only the backbone's last blocks: below 16 the frozen part runs "
                                        "once per picture and is cached (no augmentation), fast enough for a CPU "
                                        "(5 blocks: about 1.5 minutes an epoch over 6,000 photos)")
        self.finetune_blocks.setEnabled(False)  # until fine-tuning is on
        self.finetune.valueChanged.connect(lambda _v: self._enable_form(not self.busy))
        finetune_row = QHBoxLayout()
        finetune_row.addWidget(self.finetune, 1)
        finetune_row.addWidget(self.finetune_blocks, 1)
        self.device = QComboBox()
        self.device.addItems(DEVICES)
        form = QFormLayout()
        form.addRow("Train on", self.source)
        form.addRow("Method", method_column)
        form.addRow("Data", data_row)
        form.addRow("Splits", split_row)
        form.addRow("Epochs", self.epochs)
        form.addRow("Fine-tune backbone", finetune_row)
        form.addRow("Device", self.device)
        self.data_summary = plain_label("", wrap=True)
        self.data_warning = plain_label("", wrap=True)
        self.data_warning.setStyleSheet("color: #b35900;")
        self.progress = QProgressBar(minimum=0, maximum=1, value=0)
        self.status = plain_label("Not started", wrap=True)  # messages carry paths
        self.loss_plot = self._plot("training loss", "step")
        self.loss_curve = self.loss_plot.plot(pen=pg.mkPen("#1f77b4", width=2))
        self.val_plot = self._plot("validation rsum", "epoch")
        self.val_curve = self.val_plot.plot(pen=pg.mkPen("#d62728", width=2), symbol="o", symbolSize=6)
        self.log_view = QPlainTextEdit(readOnly=True, maximumBlockCount=2000)
        self.log_view.setMaximumHeight(110)
        self._build_result()
        self.start_button = QPushButton("Start")
        self.resume_button = QPushButton("Resume", enabled=False)
        self.resume_button.setToolTip("Continue the cancelled run from its last checkpoint")
        self.cancel_button = QPushButton("Cancel", enabled=False)
        self.close_button = QPushButton("Close")
        self.start_button.clicked.connect(lambda: self.start())
        self.resume_button.clicked.connect(self.resume)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)
        self._layout(form)

    def _build_result(self) -> None:
        self.result_box = QGroupBox("New model beside the active one")
        self.result_note = plain_label("", wrap=True)
        self.result_table = QTableWidget(2, 5)
        self.result_table.setHorizontalHeaderLabels(["Model", "R@1", "R@5", "R@10", "rsum"])
        self.result_table.horizontalHeaderItem(1).setToolTip("Text → item recall at 1 (%)")
        self.result_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.result_table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.result_table.verticalHeader().hide()
        self.result_table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.result_table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.use_button = QPushButton("Use it and re-index")
        self.use_button.setToolTip("Make the new model active and re-embed the library in the background")
        self.use_button.clicked.connect(self._use_model)
        row = QHBoxLayout()
        row.addWidget(self.result_note, 1)
        row.addWidget(self.use_button)
        box = QVBoxLayout(self.result_box)
        box.addWidget(self.result_table)
        box.addLayout(row)
        self.result_box.hide()

    def _plot(self, title: str, x_label: str) -> pg.PlotWidget:
        plot = pg.PlotWidget(background=None, title=title)
        plot.setLabel("bottom", x_label)
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.setMinimumHeight(160)
        return plot

    def _layout(self, form: QFormLayout) -> None:
        plots = QHBoxLayout()
        plots.addWidget(self.loss_plot)
        plots.addWidget(self.val_plot)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.start_button, self.resume_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.data_summary)
        layout.addWidget(self.data_warning)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(plots, 1)
        layout.addWidget(self.result_box)
        layout.addWidget(self.log_view)
        layout.addLayout(buttons)
        self.data_summary.hide()
        self.data_warning.hide()
        self.resize(860, 640)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Caption folder to train on", self.data.text())
        if folder:
            self.data.setText(folder)

    # --- the library
    def set_service(self, service: SearchServiceLike | None) -> None:
        """The library a finished model is registered with (and whose annotations can be the data)."""
        had_one, self._service = self._service is not None, service
        item = self.source.model().item(1)  # "This library's annotations" needs a library
        item.setEnabled(service is not None)
        if service is None and self.source_key() == SOURCE_LIBRARY:
            self.source.setCurrentIndex(0)
        elif service is not None and not had_one and not self.busy:
            self.set_source(SOURCE_LIBRARY)  # what a user trains on first: the captions written here

    def source_key(self) -> str:
        """``"folder"`` or ``"library"``."""
        return str(self.source.currentData())

    def set_source(self, key: str) -> None:
        """Choose the data source by key (``SOURCE_FOLDER`` / ``SOURCE_LIBRARY``)."""
        index = self.source.findData(key)
        if index < 0:
            raise ValueError(f"unknown training data source {key!r}")
        self.source.setCurrentIndex(index)

    def _source_changed(self) -> None:
        library = self.source_key() == SOURCE_LIBRARY
        if library:  # the active model's method, so the new version can start from it; a3vse from zero-shot
            start = active_model(list(self._service.models())) if self._service is not None else None
            self.method.setCurrentText(start.method if start is not None and start.path else LIBRARY_METHOD)
            self.status.setText("The library's captions are exported; a fifth of the annotated items is held "
                                "aside to compare the new model with the active one.")
        self._enable_form(self.state not in {"preparing", "running"})

    # --- running
    def request(self) -> TrainingRequest:
        """The run the form describes for a caption folder; the output is a new folder under the models folder."""
        method = self.method.currentText()
        out = self.models_dir / f"{method}-{time.strftime('%Y%m%d-%H%M%S')}"
        return TrainingRequest(method, Path(self.data.text().strip()), out, self.epochs.value(),
                               self.device.currentText(), self.train_split.text().strip() or "train",
                               self.val_split.text().strip() or "dev", extra=self.extra_args,
                               finetune_epochs=self.finetune.value(), finetune_blocks=self.finetune_blocks.value())

    @property
    def busy(self) -> bool:
        """Whether a run is being prepared or is running."""
        return self.state in {"preparing", "running"}

    def start(self, request: TrainingRequest | None = None) -> None:
        """Start a run (one at a time): export the library's annotations first when that is the source."""
        if self.busy:
            return
        if request is None and self.source_key() == SOURCE_LIBRARY:
            self._prepare_library_set()
            return
        request = request or self.request()
        if not str(request.data) or str(request.data) == ".":
            self.status.setText("Choose a caption folder to train on first.")
            return
        self.training_set = None
        self.data_summary.hide()
        self.data_warning.hide()
        self._launch(request, fresh=True)

    def resume(self) -> None:
        """Continue the last cancelled run from its checkpoint (with the epochs and device now in the form)."""
        if self.busy or self._last_request is None or self.resumable_dir is None:
            return
        request = replace(self._last_request, out=Path(self.resumable_dir), resume=True,
                          epochs=self.epochs.value(), device=self.device.currentText(),
                          finetune_epochs=self.finetune.value(), finetune_blocks=self.finetune_blocks.value())
        self._launch(request, fresh=False)

    def _launch(self, request: TrainingRequest, fresh: bool) -> None:
        if fresh:
            self.losses.clear()
            self.rsums.clear()
            self.loss_curve.setData([], [])
            self.val_curve.setData([], [])
            self._clear_phase_marker()
            self.run_progress = RunProgress(epochs=request.total_epochs)
            self.progress.setFormat("%p%")
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
        else:  # a resume starts where the cancelled run stopped (the epoch budget may have changed)
            self.run_progress.epochs = request.total_epochs
            self._show_run_progress()
        self.result_box.hide()
        self._parser = JsonLines()
        self._cancelling = False
        self._error = None
        self.model_dir = None
        self.resumable_dir = None
        self.comparison = None
        self.final_metrics = None
        self._last_request = request
        self._process = self._spawn(request)
        self._set_state("running", f"{'Resuming' if request.resume else 'Starting'} {request.method}…")

    def _prepare_library_set(self) -> None:
        service = self._service
        if service is None:
            self.status.setText("Open a library first: its annotations are the training data.")
            return
        self._generation += 1
        generation = self._generation
        self.data_summary.hide()
        self.data_warning.hide()
        self._set_state("preparing", "Exporting this library's annotations…")
        run_in_background(service.export_training_set, pool=self._pool, dest=None, holdout=HOLDOUT,
                          seed=HOLDOUT_SEED,
                          on_result=while_alive(self, lambda ts: self._training_set_ready(generation, ts)),
                          on_error=while_alive(self, lambda exc: self._training_set_failed(generation, exc)))

    def _training_set_ready(self, generation: int, training_set: Any) -> None:
        if generation != self._generation or self.state != "preparing":
            return
        self.training_set = training_set
        self.data_summary.setText(describe_training_set(training_set))
        self.data_summary.show()
        warning = getattr(training_set, "warning", None)
        self.data_warning.setText(str(warning or ""))
        self.data_warning.setVisible(bool(warning))
        self.data.setText(str(training_set.folder))
        self.train_split.setText(str(training_set.train_split))
        self.val_split.setText(str(training_set.val_split))
        method, epochs, extra = self.method.currentText(), self.epochs.value(), self.extra_args
        start = active_model(list(self._service.models())) if self._service is not None else None
        if start is not None and start.path and start.method == method:
            # the engine's warm-start recipe (engine.loop.retrain): the new version starts from the active one
            from engine.loop.retrain import WARM_START_EPOCHS, warm_start_args

            epochs, extra = WARM_START_EPOCHS, [*extra, "--init-from", str(start.path), *warm_start_args(method)]
            self.epochs.setValue(epochs)  # the form shows what runs
        out = self.models_dir / f"{method}-library-{time.strftime('%Y%m%d-%H%M%S')}"
        request = TrainingRequest(method, Path(training_set.folder), out, epochs,
                                  self.device.currentText(), str(training_set.train_split),
                                  str(training_set.val_split), extra=extra,
                                  finetune_epochs=self.finetune.value(),
                                  finetune_blocks=self.finetune_blocks.value())
        self.state = "idle"  # _launch moves it on to "running"
        self._launch(request, fresh=True)

    def _training_set_failed(self, generation: int, exc: BaseException) -> None:
        if generation == self._generation and self.state == "preparing":
            self._set_state("failed", f"Could not export this library's annotations: {exc}")

    def _spawn(self, request: TrainingRequest) -> QProcess:
        process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONUNBUFFERED", "1")  # progress lines must arrive as they are printed
        process.setProcessEnvironment(env)
        process.readyReadStandardOutput.connect(self._read_stdout)
        process.readyReadStandardError.connect(self._read_stderr)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._process_error)
        arguments = self.command[1:] + request.arguments()
        self._append_log("$ " + " ".join([self.command[0], *arguments]))
        process.start(self.command[0], arguments)
        return process

    def cancel(self) -> None:
        """Stop the run: the trainer gets SIGTERM (it writes a resumable checkpoint), and is killed if it
        has not stopped after a few seconds; an export still being prepared is abandoned."""
        if self.state == "preparing":
            self._generation += 1
            self._set_state("cancelled", "Cancelled before training started")
            return
        if self._process is None:
            return
        self._cancelling = True
        self.status.setText("Cancelling… the trainer finishes its step and saves a checkpoint to resume from")
        self.cancel_button.setEnabled(False)
        self._process.terminate()
        self._kill_timer.start(self.stop_wait_ms)

    def _kill(self) -> None:
        if self._process is not None:
            self._append_log(f"the trainer did not stop within {self._kill_timer.interval() // 1000} s; killed it")
            self._process.kill()

    @property
    def running(self) -> bool:
        """Whether a trainer process is alive."""
        return self._process is not None

    # --- output
    def _read_stdout(self) -> None:
        if self._process is not None:
            self._handle(self._parser.feed(bytes(self._process.readAllStandardOutput().data())))

    def _read_stderr(self) -> None:
        if self._process is not None:
            text = bytes(self._process.readAllStandardError().data()).decode("utf-8", errors="replace")
            self._append_log(text.rstrip("\n"))

    def _handle(self, events: list[dict[str, Any] | str]) -> None:
        for event in events:
            if isinstance(event, str):
                self._append_log(event)
                continue
            kind = event["event"]
            if kind == "step":
                self._on_step(event)
            elif kind == "epoch":
                self._on_epoch(event)
            elif kind == "progress":
                self._on_progress(event)
            elif kind == "done":
                self.model_dir = str(event.get("model_dir", ""))
                if self.run_progress.known:  # an early stop (patience) ends the run before its last epoch
                    self.progress.setValue(self.progress.maximum())
                val = event.get("val")
                self.final_metrics = dict(val) if isinstance(val, dict) else None
            elif kind == "stopped":
                if event.get("resumable"):
                    self.resumable_dir = str(event.get("model_dir", "")) or None
            elif kind == "resumed":
                self._on_resumed(event)
            elif kind == "phase":
                self._on_phase(event)
            elif kind == "error":
                self._error = str(event.get("message", ""))
                self._append_log(f"error: {self._error}")

    def _on_phase(self, event: dict[str, Any]) -> None:
        """Fine-tuning begins after the warm-up's last epoch (an early stop may have cut the warm-up short)."""
        epoch, epochs = int(event.get("epoch", 0)), int(event.get("epochs", 0))
        self.run_progress.epochs = epoch + epochs
        self.run_progress.at_epoch_end(epoch)
        self._show_run_progress()
        self._clear_phase_marker()
        self._phase_marker = pg.InfiniteLine(pos=epoch + 0.5, angle=90, label="fine-tuning",
                                             pen=pg.mkPen("#7f7f7f", width=1, style=Qt.PenStyle.DashLine),
                                             labelOpts={"position": 0.9, "color": "#7f7f7f"})
        self.val_plot.addItem(self._phase_marker)
        plural = "" if epochs == 1 else "s"
        self._append_log(f"epoch {epoch}: fine-tuning the image backbone for {epochs} epoch{plural}")

    def _clear_phase_marker(self) -> None:
        if self._phase_marker is not None:
            self.val_plot.removeItem(self._phase_marker)
            self._phase_marker = None

    def _on_progress(self, event: dict[str, Any]) -> None:
        done, total = int(event.get("done", 0)), int(event.get("total", 0))
        stage = str(event.get("stage", ""))
        # a stage before training (feature extraction) has the bar to itself; once the run's position is
        # known (a resume) the bar keeps it, so it never jumps back
        if total > 0 and not self.run_progress.known:
            self.progress.setFormat(f"{stage} · %p%" if stage else "%p%")
            self.progress.setRange(0, total)
            self.progress.setValue(min(done, total))
        self.status.setText(f"{stage}: {event.get('message', '')}" if stage else str(event.get("message", "")))

    def _show_run_progress(self) -> None:
        run = self.run_progress
        self.progress.setFormat(run.label())  # first, so that valueChanged listeners read the new text
        self.progress.setRange(0, run.total)
        self.progress.setValue(run.done)

    def _on_step(self, event: dict[str, Any]) -> None:
        step, total = int(event.get("step", 0)), max(1, int(event.get("total", 1)))
        self.run_progress.at_step(int(event.get("epoch", 1)), step, total)
        self._show_run_progress()
        loss = event.get("loss", {})
        total_loss = loss.get("total") if isinstance(loss, dict) else loss
        if total_loss is not None:
            self.losses.append((self.run_progress.done, float(total_loss)))  # x: the step of the whole run
            self._plot_losses()
        lr = event.get("lr")
        parts = [f"epoch {self.run_progress.epoch}/{self.run_progress.epoch_count}", f"step {step}/{total}"]
        if total_loss is not None:
            parts.append(f"loss {float(total_loss):.4f}")
        if lr is not None:
            parts.append(f"lr {float(lr):.2e}")
        # eta_s already covers the whole run: trainer.train._Eta counts the steps of every epoch left plus
        # the validations left, so it needs no scaling here
        parts.append(f"ETA {format_eta(event.get('eta_s'))}")
        self.status.setText(" · ".join(parts))

    def _plot_losses(self) -> None:
        if self.losses:
            xs, ys = zip(*self.losses, strict=True)
            self.loss_curve.setData(list(xs), list(ys))
        else:
            self.loss_curve.setData([], [])

    def _on_resumed(self, event: dict[str, Any]) -> None:
        epoch, step = int(event.get("epoch", 0)), int(event.get("step", 0))
        self._append_log(f"resumed at epoch {epoch}, step {step}")
        self.run_progress.at_resume(epoch, step)
        self._show_run_progress()
        # steps after the checkpoint are trained again: their old losses make way for the new ones
        self.losses = [(x, y) for x, y in self.losses if x <= self.run_progress.done]
        self._plot_losses()

    def _on_epoch(self, event: dict[str, Any]) -> None:
        if isinstance(event.get("epoch"), int):
            self.run_progress.at_epoch_end(int(event["epoch"]))
            self._show_run_progress()
        val = event.get("val") or {}
        if "rsum" in val and isinstance(val["rsum"], int | float):
            self.rsums.append((int(event.get("epoch", len(self.rsums) + 1)), float(val["rsum"])))
            xs, ys = zip(*self.rsums, strict=True)
            self.val_curve.setData(list(xs), list(ys))
            self._append_log(f"epoch {event.get('epoch')}: validation rsum {float(val['rsum']):.1f}")

    def _append_log(self, text: str) -> None:
        if text:
            self.log_view.appendPlainText(text)

    def _process_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._append_log(f"could not start {self.command[0]}")
            self._cleanup()
            self._set_state("failed", f"Could not start the trainer ({self.command[0]})")

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._handle(self._parser.flush())
        self._kill_timer.stop()
        self._cleanup()
        stopped = self._cancelling or self.resumable_dir is not None
        saved: SavedCheckpoint | None = None
        if stopped or status != QProcess.ExitStatus.NormalExit or code != 0:
            # what Resume would continue from is on the disk, whatever the trainer managed to say
            request = self._last_request
            saved = saved_checkpoint(Path(self.resumable_dir) if self.resumable_dir
                                     else request.out if request is not None else None)
            self.resumable_dir = str(saved.folder) if saved is not None else None
        if stopped:
            if saved is not None:
                message = f"Cancelled: {saved.describe()}; Resume continues it."
            else:
                message = "Cancelled before the first checkpoint was written; Start begins again."
            self._set_state("cancelled", message)
        elif status == QProcess.ExitStatus.NormalExit and code == 0 and self.model_dir:
            self._set_state("done", f"Done: model written to {self.model_dir}")
            self.model_trained.emit(self.model_dir)
            self._compare(Path(self.model_dir))
        else:
            reason = f": {self._error}" if self._error else "; see the log below"
            resume = " Resume continues from its last checkpoint." if self.resumable_dir else ""
            self._set_state("failed", f"The trainer stopped with exit code {code}{reason}.{resume}")

    def _cleanup(self) -> None:
        if self._process is not None:
            self._process.deleteLater()
            self._process = None

    # --- after training
    def _compare(self, model_dir: Path) -> None:
        """Register the model and measure the active one on the same split, in the background."""
        service, request = self._service, self._last_request
        if service is None or request is None:
            return
        self.status.setText(f"Done: registering {model_dir.name} and measuring the active model…")
        generation = self._generation
        # a library set with nothing held aside validated on training data: no fair comparison exists
        measure = self.training_set is None or int(self.training_set.n_heldout_items) > 0
        run_in_background(compare_models, service, model_dir, request.data, request.val_split, measure,
                          self.training_set is not None, pool=self._pool,
                          on_result=while_alive(self, lambda result: self._show_comparison(generation, result)),
                          on_error=while_alive(self, lambda exc: self._comparison_failed(generation, exc)))

    def _show_comparison(self, generation: int, comparison: Comparison) -> None:
        if generation != self._generation:
            return
        self.comparison = comparison
        was = "was active" if comparison.activated else "active"
        rows = ((f"{comparison.old_name} ({was})", comparison.old, comparison.old_error),
                (f"{comparison.new_name} (new)", comparison.new, None))
        for row, (label, metrics, error) in enumerate(rows):
            shown = metrics if comparison.measured else None
            cells = [label, *(f"{v:.1f}" if v is not None else "—" for v in headline(shown))]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if error:
                    item.setToolTip(plain_tooltip(f"not measured: {error}"))
                self.result_table.setItem(row, column, item)
        where = ("the held-aside annotations of this library" if self.training_set is not None
                 else f"split “{comparison.split}” of {comparison.data.name}")
        if comparison.measured:
            self.result_note.setText(f"Text → item recall (%) on {where}; rsum adds both directions."
                                     + (f" The active model could not be measured: {comparison.old_error}"
                                        if comparison.old_error else ""))
        else:
            self.result_note.setText("Nothing was held aside (too few annotations), so the two models cannot be "
                                     "compared yet: annotate more items and train again.")
        table = self.result_table
        table.resizeRowsToContents()
        table.setFixedHeight(table.horizontalHeader().height() + sum(table.rowHeight(r) for r in range(2))
                             + 2 * table.frameWidth())
        self.use_button.setEnabled(not comparison.activated)
        self.result_box.show()
        self.status.setText(f"Done: {comparison.new_name} is registered with the library.")
        if comparison.decision:  # a library retrain: the rule `polyseek retrain` applies has decided
            self.result_note.setText(f"{self.result_note.text()}\n{comparison.decision[0].upper()}"
                                     f"{comparison.decision[1:]}.")
            self.status.setText(f"Done: {comparison.new_name} is active; the library re-indexes with it."
                                if comparison.activated else
                                f"Done: {comparison.new_name} is kept but not active (worse than "
                                f"{comparison.old_name}); “Use this model” switches anyway.")
        self.model_registered.emit(comparison.new_name)
        if comparison.activated:
            self.use_model_requested.emit(comparison.new_name)
        self.comparison_ready.emit(comparison)

    def _comparison_failed(self, generation: int, exc: BaseException) -> None:
        if generation == self._generation:
            self.status.setText(f"Trained, but the library could not register the model: {exc}")

    def _use_model(self) -> None:
        if self.comparison is not None:
            self.use_button.setEnabled(False)
            self.status.setText(f"Switching to {self.comparison.new_name}; the library re-indexes in the "
                                "background (see the library panel).")
            self.use_model_requested.emit(self.comparison.new_name)

    # --- state
    def _set_state(self, state: str, message: str) -> None:
        self.state = state
        self.status.setText(message)
        busy = self.busy
        self.start_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)
        self.resume_button.setEnabled(state in {"cancelled", "failed"} and self.resumable_dir is not None)
        self._enable_form(not busy)
        self.state_changed.emit(state)

    def _enable_form(self, enabled: bool) -> None:
        folder = self.source_key() == SOURCE_FOLDER
        for widget in (self.source, self.method, self.epochs, self.finetune, self.device):
            widget.setEnabled(enabled)
        self.finetune_blocks.setEnabled(enabled and self.finetune.value() > 0)
        for widget in (self.data, self.browse_button, self.train_split, self.val_split):
            widget.setEnabled(enabled and folder)

    def closeEvent(self, event: Any) -> None:
        if self.state == "preparing":
            self.cancel()
        if self._process is not None:
            self.cancel()
            self._process.waitForFinished(CLOSE_WAIT_MS)
            if self._process is not None:
                self._process.kill()
                self._process.waitForFinished(1000)
        super().closeEvent(event)


def describe_training_set(training_set: Any) -> str:
    """"42 annotated items with 97 captions · 9 of them held aside to compare models · 120 without captions"."""
    annotated, captions = int(training_set.n_annotated_items), int(training_set.n_captions)
    heldout, unannotated = int(training_set.n_heldout_items), int(training_set.n_unannotated)
    return (f"{annotated} annotated item{'s' if annotated != 1 else ''} with {captions} caption"
            f"{'s' if captions != 1 else ''} · {heldout} of them held aside to compare models · "
            f"{unannotated} item{'s' if unannotated != 1 else ''} without captions (used as un-annotated data)")
