"""The library loop: the user's annotations -> an A3VSE training run -> a new model version -> before/after.

One retraining (:class:`Retrain`, run by ``polyseek retrain`` and by the GUI in a worker) goes:

1. **Training set** (:func:`engine.loop.trainingset.build_training_set`). A caption folder under the
   library's folder whose media are symbolic links to the library's files. Split ``train`` holds the annotated
   items (their user and imported captions, plus the queries of accepted pairs) - A3VSE's annotated corpus D^l -
   and every un-annotated item with no caption at all, which the trainer pairs with its regional-semantics
   pseudo caption: A3VSE's D^u (Huang et al. 2019, §3.2 and §4.1; ``trainer.splits.load_training_data`` with
   ``with_pseudo``). Split ``heldout`` holds the annotated items kept aside, which the run never trains on.
2. **Before**: the model searches use now (a trained one or the zero-shot ranking) is scored on ``heldout``.
3. **Training**: ``python -m trainer train ... --json-progress`` in its own process
   (:mod:`engine.loop.trainerprocess`, the command line :mod:`engine.trainercontract.command`), warm-started from
   the active model when it can be; its typed events (:mod:`engine.trainercontract.events`) go to ``on_event``
   and become progress records.
   When the start has a companion with its trainer weights (:mod:`engine.search.companion`: the shipped starter's
   PVSE model with its heads), a second run warm-starts it on the same training set into the new model's
   ``companion`` folder, and a third the companion's own (the probabilistic one) into that folder's
   (:mod:`engine.loop.companionretrain`).
4. **New model version**: the run's folder is registered under a new name.
5. **After**: the new model is scored on ``heldout`` the same way as in step 2, so the two numbers compare; the
   rule decides whether it should become active (``result.activated``). The job only decides and reports: the
   caller switches (``Workspace.models.adopt(result)``, the one place a model becomes active, which re-indexes).

How items are held aside: :mod:`engine.loop.trainingset`; the activation rule: :mod:`engine.loop.gate`.

A warm start keeps its last epoch (``--keep-last``): the rule asks whether the new model is *better* on ``heldout``,
and an epoch chosen on those same captions would be the luckiest of twenty there. Caveat: a run from random weights
still selects its best epoch on ``heldout``; with a fixed epoch budget that only picks among epochs, but its "after"
number is then slightly optimistic.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from engine import paths
from engine.loop.companionretrain import (
    COMPANION_ARGS,
    CompanionRetrain,
    companion_progress,
    judge_companion,
    keep_untrained_companion,
    retrainable_companion,
)
from engine.loop.compare import compare_models, measure_models
from engine.loop.defaults import DEFAULT_HOLDOUT, DEFAULT_METHOD
from engine.loop.errors import RetrainError
from engine.loop.evaluate import evaluate_on
from engine.loop.gate import GateDecision, ModelComparison
from engine.loop.interval import RsumInterval, intervals_line
from engine.loop.trainerprocess import STOP_WAIT_S, TrainerProcess
from engine.loop.trainingset import MARKER_FILE, TrainingSet, build_training_set, training_set_dir
from engine.progress import Cancelled, CancelToken, Progress, staged
from engine.search.companion import COMPANION_DIR, CompanionSpec, carry_companion
from engine.state import LibraryState
from engine.state.models import model_infos, register_model
from engine.trainercontract import events
from engine.trainercontract.command import TRAINER_PROGRAM, TrainerRequest
from engine.trainercontract.metrics import rounded
from engine.trainercontract.reports import RetrievalReport
from engine.trainercontract.runfolder import (
    TrainerMetrics,
    has_weights,
    read_config_method,
    read_metrics,
    saved_checkpoint,
)
from engine.types import ZERO_SHOT, ModelInfo, active_model

log = logging.getLogger(__name__)



# How a retrain warm-starts from the active model (trainer ``--init-from``; the trainer adds L2-SP toward the
# start, and the last epoch is the new model: the gate then judges it on held-aside captions no epoch was chosen
# on). Chosen on tests/bench/bench_user_loop.py (docs/benchmarks.md, "the user's loop"): with the starter's
# lr of 5e-5 and batches of 128, 100 captions made 1 step an epoch and nothing was learnt; batches of 32 at 1e-4
# for 20 epochs, with the library's pseudo pairs as extra pairs and negatives (VSE), learnt a user's own word.
WARM_START_EPOCHS = 20
WARM_START_ARGS: tuple[str, ...] = ("--lr", "1e-4", "--batch-size", "32", "--patience", "20",
                                    "--schedule", "constant", "--keep-last")
# A library's retrain from random weights (``polyseek retrain --from-scratch``, the training dialog's form): its
# few hundred annotations at most take seconds an epoch, and the gate keeps the old model if the run is worse.
COLD_START_EPOCHS = 10
WARM_START_PSEUDO_WEIGHT = {"vse": 1.0}  # methods whose config has pseudo_weight (A3VSE has its own D^u terms)


def warm_start_from(active: ModelInfo | None, method: str | None, warm_start: bool = True) -> Path | None:
    """The model folder a library retrain of ``method`` (None: the active model's) starts from: the active model's,
    when it is a trained model of that method with its weights on disk; None: random weights."""
    if active is None or active.path is None or not warm_start or method not in (None, active.method):
        return None
    start = Path(active.path)
    return start if has_weights(start) else None


def planned_epochs(active: ModelInfo | None, method: str | None, cold_epochs: int = COLD_START_EPOCHS) -> int:
    """The epochs a library retrain runs unless told otherwise: :data:`WARM_START_EPOCHS` when it warm-starts
    (:func:`warm_start_from`), else ``cold_epochs`` (:data:`COLD_START_EPOCHS`). The CLI's retrain and the training
    dialog both ask it: the form shows this before Start and passes what it shows, so it never says 10 and then
    trains 20."""
    return WARM_START_EPOCHS if warm_start_from(active, method) is not None else cold_epochs


def warm_start_args(method: str) -> list[str]:
    """The trainer arguments of a warm start of ``method`` (after ``--init-from DIR``)."""
    weight = WARM_START_PSEUDO_WEIGHT.get(method)
    return [*WARM_START_ARGS, *(["--set", f"pseudo_weight={weight}"] if weight is not None else [])]


@dataclass(frozen=True)
class RetrainOptions:
    """One retraining's settings; ``trainer_args`` are extra ``python -m trainer train`` options.

    By default the job trains on the library's annotations (exported with a held-aside split) and the activation
    rule decides. ``data`` trains on a caption folder instead (``train_split`` / ``val_split``): both models are
    then measured on its validation split and nothing is activated. ``resume_from`` continues a stopped run in
    that folder (with the ``training_set`` it was exported to, when it trained on the library).
    """

    method: str | None = None  # None: the active model's method, warm-started from it (a3vse from zero-shot)
    warm_start: bool = True  # start from the active model's weights when it has a warm-startable method
    init_from: Path | None = None  # start from this model folder instead (a resume repeats its run's start)
    always_activate: bool = False  # decide for the new model whatever :func:`gate` says (its decision is still given)
    holdout: float = DEFAULT_HOLDOUT
    seed: int = 0
    epochs: int | None = None  # None: WARM_START_EPOCHS for a warm start, else ``cold_epochs``
    cold_epochs: int | None = None  # epochs of a run from random weights (None: COLD_START_EPOCHS on the library's
    # annotations, the method's recipe on a caption folder)
    device: str | None = None  # the trainer's --device (None: its default, auto)
    overrides: tuple[str, ...] = ()  # "key=value", the trainer's --set
    trainer_args: tuple[str, ...] = ()
    name: str | None = None  # the new model's name (default: <method>-<library>-<timestamp>)
    models_dir: Path | None = None  # where the new model's folder goes (default: engine.paths.models_dir())
    dest: Path | None = None  # the training set's folder (default: under the library's folder)
    data: Path | None = None  # a caption folder to train on instead of the library's annotations
    train_split: str = "train"
    val_split: str = "dev"
    training_set: TrainingSet | None = None  # an exported training set to train on again (a resume)
    resume_from: Path | None = None  # continue the stopped run in this folder (``--resume``)
    trainer_command: tuple[str, ...] = TRAINER_PROGRAM  # the program that runs ``train ...``
    stop_wait_s: float = STOP_WAIT_S  # how long a cancelled trainer may take to save its checkpoint


@dataclass
class RetrainResult:
    """What a retraining did: the data it trained on, the new model, and R@K on the held-aside annotations
    (or the folder's validation split) before (the model that was active) and after (the new model), both
    measured by ``evaluate_on``. ``trainer_metrics`` is the trainer's own ``metrics.json`` (None: the run wrote
    none)."""

    training_set: TrainingSet | None  # None: a caption folder (``data``) was the data
    old_model: str | None = None
    model_name: str | None = None
    model_dir: Path | None = None  # known before training starts (a cancelled run's checkpoint is there)
    method: str | None = None
    epochs: int | None = None  # the epochs asked of the trainer (None: its recipe's)
    data: Path | None = None
    val_split: str | None = None
    before: RetrievalReport | None = None
    after: RetrievalReport | None = None
    trainer_metrics: TrainerMetrics | None = None
    warnings: list[str] = field(default_factory=list)
    measure_warnings: list[str] = field(default_factory=list)  # what kept a model from being measured
    init_from: str | None = None  # the model the run started from (None: random weights)
    pseudo_before: RetrievalReport | None = None  # R@K on the library's pseudo pairs (:func:`pseudo_check_set`)
    pseudo_after: RetrievalReport | None = None
    activated: bool = False
    decision: str = ""  # why the new model was or was not activated (:func:`gate`; "activated as asked (...)")
    verdict: GateDecision | None = None  # what the rule found (None: not applied, e.g. a caption folder's run)
    heldout_interval: RsumInterval | None = None  # new - old rsum on the held-aside annotations, how sure
    pseudo_interval: RsumInterval | None = None  # the same on the pseudo pairs (:mod:`engine.loop.interval`)
    companion: CompanionRetrain | None = None  # the start's companion retrained beside it (None: carried or none)

    def interval_line(self) -> str:
        """Both intervals in one line (:func:`engine.loop.interval.intervals_line`; "" when not measured)."""
        return intervals_line(self.heldout_interval, self.pseudo_interval)

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON summary (``polyseek retrain --json``'s last line)."""

        def plain(value: RsumInterval | RetrievalReport | GateDecision | None) -> dict[str, Any] | None:
            return value.as_dict() if value is not None else None

        ts = self.training_set
        return rounded({
            "event": "result", "model": self.model_name, "model_dir": str(self.model_dir) if self.model_dir else None,
            "old_model": self.old_model or ZERO_SHOT, "training_set": None if ts is None else {
                "folder": str(ts.folder), "train_split": ts.train_split, "val_split": ts.val_split,
                "annotated_items": ts.n_annotated_items, "captions": ts.n_captions,
                "heldout_items": ts.n_heldout_items, "unannotated_items": ts.n_unannotated},
            "before": plain(self.before), "after": plain(self.after),
            "trainer_metrics": self.trainer_metrics.as_dict() if self.trainer_metrics is not None else {},
            "init_from": self.init_from, "pseudo_before": plain(self.pseudo_before),
            "pseudo_after": plain(self.pseudo_after), "heldout_interval": plain(self.heldout_interval),
            "pseudo_interval": plain(self.pseudo_interval), "activated": self.activated,
            "decision": self.decision, "gate": plain(self.verdict),
            "companion": self.companion.as_dict() if self.companion is not None else None,
            "warnings": self.warnings})

    def summary_lines(self) -> list[str]:
        """Before/after R@1/5/10 on the held-aside annotations, as lines for a terminal."""
        ts = self.training_set
        if ts is None:
            lines, where = [f"trained {self.model_name} on {self.data}"], f"split {self.val_split!r}"
        else:
            lines = [f"trained {self.model_name} on {ts.n_train_annotated} annotated + {ts.n_unannotated} "
                     f"un-annotated items; {ts.n_heldout_items} held aside"]
            where = "held-aside annotations"
        if self.before is None and self.after is None:
            return (lines + [f"no {where}: before/after cannot be compared"]
                    + ([self.companion.line()] if self.companion is not None else []))
        shown = self.after or self.before
        assert shown is not None
        lines.append(f"{where} ({shown.n_media} items, {shown.n_captions} captions):")
        for label, report, name in (("before", self.before, self.old_model or ZERO_SHOT),
                                    ("after ", self.after, self.model_name)):
            if report is None:
                lines.append(f"  {label} not available ({name})")
                continue
            cells = "  ".join(f"{way} R@1 {recall.r1:5.1f} R@5 {recall.r5:5.1f} R@10 {recall.r10:5.1f}"
                              for way, recall in (("i2t", report.i2t), ("t2i", report.t2i)))
            lines.append(f"  {label} {cells}  rsum {report.rsum:6.1f}  ({name})")
        return (lines + ([self.decision] if self.decision else [])
                + ([self.companion.line()] if self.companion is not None else []))


class Retrain:
    """The whole loop as one job: ``for p in Retrain(state, options).run(cancel): ...``, then ``.result``, whose
    ``activated`` the caller adopts (``Workspace.models.adopt``: the switch and re-index happen there).

    ``polyseek retrain`` and the GUI's training dialog both run it (the dialog in a worker thread). The trainer
    runs as its own process; ``on_event`` receives each of its typed events (:mod:`engine.trainercontract.events`) and
    ``on_output`` every other line it writes (and the command line itself). ``result`` exists from the first
    progress record on and says, before the trainer starts, what it trains on, with which method and epochs,
    and where the model goes. Without a library's ``state`` (only with ``options.data``) the job trains and stops
    there.
    """

    def __init__(self, state: LibraryState | None, options: RetrainOptions | None = None,
                 on_event: Callable[[events.TrainerEvent], None] | None = None,
                 on_output: Callable[[str], None] | None = None) -> None:
        self.state, self.options = state, options or RetrainOptions()
        if state is None and self.options.data is None:
            raise RetrainError("training on a library's annotations needs the library")
        self.on_event = on_event or (lambda _event: None)
        self.on_output = on_output or (lambda line: log.debug("trainer: %s", line))
        self.result: RetrainResult | None = None
        self.trainer: TrainerProcess | None = None  # while the trainer runs

    def run(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Export, train (from the active model when it can), register, measure the old and the new model the
        same way, and decide (``result.activated``) for the new one only when :func:`gate` finds it better, or
        when ``always_activate`` says so. Nothing is activated here (``Workspace.models.adopt``)."""
        cancel = cancel or CancelToken()
        options = self.options
        result = self.result = RetrainResult(None, old_model=self._active_name())
        yield from self._training_data(result)
        method, start = self._method_and_start()
        result.method, result.init_from = method, str(start) if start is not None else None
        cold = options.cold_epochs or (COLD_START_EPOCHS if options.data is None else None)  # a folder: its recipe
        result.epochs = options.epochs or (WARM_START_EPOCHS if start is not None else cold)
        name, out = self._name_and_folder(method)
        try:
            cancel.raise_if_cancelled()
            result.model_dir = out
            yield Progress(0, 0, f"training {method}")
            yield from self._train(result, cancel, start)
            result.trainer_metrics = read_metrics(out)
            companion = retrainable_companion(start)
            if companion is not None:  # the shipped PVSE companion, then its own probabilistic one
                result.companion = yield from self._train_companion(result, cancel, companion, out / COMPANION_DIR)
                further = retrainable_companion(companion.folder) if result.companion is not None else None
                if further is not None and result.companion is not None:
                    result.companion.further = yield from self._train_companion(
                        result, cancel, further, result.companion.folder / COMPANION_DIR)
        except Cancelled:
            self._discard_unresumable(result)
            raise
        if result.companion is None and start is not None and carry_companion(start, out):
            log.info("the new model keeps the companion of %s", start)  # it searches beside it, as beside its start
        if self.state is None:
            if result.companion is not None:
                keep_untrained_companion(result.companion, out)
            yield Progress(1, 1, "done")
            return
        result.model_name = self._register(out, name)
        yield Progress(0, 0, f"comparing {result.model_name} with {result.old_model or 'zero-shot'}")
        comparison = self._compare(result)
        result.warnings.extend(comparison.warnings)
        result.measure_warnings = list(comparison.warnings)
        for name_ in ("before", "after", "pseudo_before", "pseudo_after", "activated", "decision", "verdict",
                      "heldout_interval", "pseudo_interval"):
            setattr(result, name_, getattr(comparison, name_))
        if options.always_activate and not result.activated:
            result.activated, result.decision = True, f"activated as asked ({result.decision})"
        if result.companion is not None:
            yield Progress(0, 0, f"comparing the heads model of {result.model_name} with its start's")
            self._judge_companion(result, start)
        yield Progress(1, 1, "done")

    def _discard_unresumable(self, result: RetrainResult) -> None:
        """A cancelled run that left no resumable checkpoint leaves nothing behind (#44): the training set this job
        exported (up to 5,000 links) and the new run's half-written folder go. With a checkpoint both stay: Resume
        continues the run on that same training set."""
        if saved_checkpoint(result.model_dir) is not None:
            return
        if result.model_dir is not None and self.options.resume_from is None and result.model_dir.is_dir():
            shutil.rmtree(result.model_dir, ignore_errors=True)  # named afresh by this job (_name_and_folder)
        ts = result.training_set
        if ts is not None and self.options.training_set is None and (Path(ts.folder) / MARKER_FILE).is_file():
            shutil.rmtree(ts.folder, ignore_errors=True)  # exported by this job; only a folder Polyseek wrote
            log.info("cancelled before the first checkpoint: removed the training set %s", ts.folder)

    def _training_data(self, result: RetrainResult) -> Iterator[Progress]:
        """The library's annotations as a training set (exported now, or the one given), or the caption folder."""
        options, ts = self.options, self.options.training_set
        if options.data is not None and ts is None:
            result.data, result.val_split = Path(options.data), options.val_split
            return
        if ts is None:
            yield Progress(0, 0, "writing the training set")
            ts = self._export_training_set()
        result.training_set, result.data, result.val_split = ts, Path(ts.folder), ts.val_split
        if ts.warning:
            result.warnings.append(ts.warning)
        yield Progress(0, 0, f"training set: {ts.n_train_annotated} annotated and {ts.n_unannotated} "
                             f"un-annotated items, {ts.n_heldout_items} held aside")  # warnings are shown now
        if ts.n_train_annotated < 1:
            raise RetrainError(f"nothing to train on: {ts.n_annotated_items} annotated items, "
                               f"{ts.n_heldout_items} of them held aside; annotate some items first")
        if not ts.n_heldout_items:
            result.warnings.append("no annotated item is held aside: the trainer validates on a part of the "
                                   "training items and before/after cannot be compared")

    def _export_training_set(self) -> TrainingSet:
        """The library's annotations written as a caption folder with a held-aside split (options ``dest``,
        ``holdout``, ``seed``)."""
        assert self.state is not None
        options = self.options
        dest = Path(options.dest) if options.dest is not None else training_set_dir(self.state.library_dir)
        return build_training_set(self.state.catalog, dest, options.holdout, options.seed)

    def _method_and_start(self) -> tuple[str, Path | None]:
        """The method to train and the model folder to start from: the active model's own method and
        weights when it can warm-start (and the options do not name another method), else random weights."""
        options = self.options
        if options.init_from is not None:
            return options.method or DEFAULT_METHOD, Path(options.init_from)
        active = self._active()
        method = options.method
        start = warm_start_from(active, method, options.warm_start)
        if start is not None:
            return active.method, start
        if active is not None and active.path is not None and options.warm_start and method in (None, active.method):
            assert self.result is not None
            self.result.warnings.append(f"{active.name}: no weights in {active.path}; training from scratch")
        return method or DEFAULT_METHOD, None

    def _name_and_folder(self, method: str) -> tuple[str, Path]:
        options = self.options
        if options.resume_from is not None:
            return options.name or Path(options.resume_from).name, Path(options.resume_from)
        taken = {m.name for m in self._models()}
        models_dir = Path(options.models_dir) if options.models_dir is not None else paths.models_dir()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        library = f"-{self.state.name}" if self.state is not None else ""
        base = options.name or f"{method}{library}-{stamp}"
        if options.name and options.name in taken:
            raise RetrainError(f"a model named {options.name!r} is already registered")
        name, n = base, 1
        while name in taken or (models_dir / name).exists():
            n += 1
            name = f"{base}-{n}"
        return name, models_dir / name

    def _train(self, result: RetrainResult, cancel: CancelToken, start: Path | None) -> Iterator[Progress]:
        """Run ``python -m trainer train`` and turn its events into progress records."""
        options = self.options
        assert result.method is not None and result.data is not None and result.model_dir is not None
        ts = result.training_set
        warm = ["--init-from", str(start), *warm_start_args(result.method)] if start is not None else []
        request = TrainerRequest(
            result.method, result.data, result.model_dir, result.epochs,
            ts.train_split if ts is not None else options.train_split, str(result.val_split),
            resume=options.resume_from is not None,
            options=(*(["--device", options.device] if options.device else []), *warm,
                     *[arg for pair in options.overrides for arg in ("--set", pair)], *options.trainer_args))
        self.trainer = TrainerProcess(options.trainer_command, request, self.on_output, options.stop_wait_s)
        stream = self.trainer.events(cancel)
        try:
            for event in stream:
                self.on_event(event)
                progress = events.to_progress(event)
                if progress is not None:
                    yield staged(progress, "training")
        finally:
            stream.close()  # a consumer that stops early (GeneratorExit here) stops the trainer now
            self.trainer = None

    def _train_companion(self, result: RetrainResult, cancel: CancelToken, start: CompanionSpec,
                         folder: Path) -> Generator[Progress, None, CompanionRetrain | None]:
        """Warm-start the companion ``start`` on the same training set into ``folder`` (:data:`WARM_START_EPOCHS`,
        :func:`warm_start_args` of its method, :data:`COMPANION_ARGS`; the device asked of the model's run);
        :func:`engine.loop.companionretrain.companion_progress` says what happens to its events, a failed or
        cancelled run. Returns the run (None: it failed)."""
        options = self.options
        assert result.model_dir is not None and result.data is not None
        shutil.rmtree(folder, ignore_errors=True)  # a resumed job's half-trained companion: trained again
        method = read_config_method(start.folder)
        ts = result.training_set
        request = TrainerRequest(
            method, result.data, folder, WARM_START_EPOCHS,
            ts.train_split if ts is not None else options.train_split, str(result.val_split),
            options=(*(["--device", options.device] if options.device else []), "--init-from", str(start.folder),
                     *warm_start_args(method), *COMPANION_ARGS))
        self.trainer = trainer = TrainerProcess(options.trainer_command, request, self.on_output, options.stop_wait_s)
        try:
            return (yield from companion_progress(trainer.events(cancel), self.on_event, start, method, folder,
                                                  WARM_START_EPOCHS, result.warnings))
        finally:
            self.trainer = None

    def _judge_companion(self, result: RetrainResult, start: Path | None) -> None:
        assert self.state is not None and result.companion is not None and result.model_name is not None
        assert result.model_dir is not None and result.data is not None
        ts = result.training_set
        split = (ts.folder, ts.val_split if ts.n_heldout_items else None) if ts is not None else None
        result.warnings.extend(judge_companion(self.state, result.companion, result.model_name, result.old_model,
                                               start, result.model_dir, split, (result.data, str(result.val_split)),
                                               self.options.seed))

    def _compare(self, result: RetrainResult) -> ModelComparison:
        """The library's rule on its held-aside annotations, or both models on the folder's validation split."""
        state = self.state
        assert state is not None
        assert result.model_name is not None and result.data is not None and result.val_split is not None
        ts = result.training_set
        if ts is None:
            return measure_models(partial(evaluate_on, state), result.model_name, result.old_model, result.data,
                                  result.val_split)
        return compare_models(state, result.model_name, result.old_model, ts.folder,
                              ts.val_split if ts.n_heldout_items else None, self.options.seed)

    def _register(self, model_dir: Path, name: str) -> str:
        assert self.state is not None
        return register_model(self.state, model_dir, name)

    def _models(self) -> list[ModelInfo]:
        """The library's models (none without a library)."""
        return model_infos(self.state) if self.state is not None else []

    def _active(self) -> ModelInfo | None:
        return active_model(self._models()) if self.state is not None else None

    def _active_name(self) -> str | None:
        active = self._active()
        return active.name if active is not None and active.path is not None else None

