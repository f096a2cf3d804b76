"""The library loop: the user's annotations -> an A3VSE training run -> a new model version -> before/after.

One retraining (:class:`Retrain`, run by ``polyseek retrain`` and by the GUI in a worker) goes:

1. **Training set** (:func:`engine.loop.trainingset.build_training_set`). A caption folder under the
   library's folder whose media are symbolic links to the library's files. Split ``train`` holds the annotated
   items (their user and imported captions, plus the queries of accepted pairs) - A3VSE's annotated corpus D^l -
   and every un-annotated item with no caption at all, which the trainer pairs with its regional-semantics
   pseudo caption: A3VSE's D^u (Huang et al. 2019, §3.2 and §4.1; ``trainer.data.load_training_data`` with
   ``with_pseudo``). Split ``heldout`` holds the annotated items kept aside, which the run never trains on.
2. **Before**: the model searches use now (a trained one or the zero-shot ranking) is scored on ``heldout``.
3. **Training**: ``python -m trainer train --method a3vse ... --json-progress`` in its own process; the
   method's recipe is the paper's schedule unless ``--epochs`` / ``--set`` say otherwise.
4. **New model version**: the run's folder is registered under a new name and made active; the library is
   re-indexed, which embeds every item with it.
5. **After**: the new model is scored on ``heldout`` the same way as in step 2, so the two numbers compare.

How items are held aside: :mod:`engine.loop.trainingset`; the activation rule: :mod:`engine.loop.judge`.

Caveat: the trainer selects its best epoch on the validation split, which is ``heldout``; with a fixed
epoch budget that only picks among epochs, but the "after" number is then slightly optimistic.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.loop.errors import RetrainError
from engine.loop.judge import judge
from engine.loop.service_api import LoopService
from engine.loop.trainingset import DEFAULT_HOLDOUT, TrainingSet
from engine.progress import Cancelled, CancelToken, Progress
from engine.types import ZERO_SHOT

log = logging.getLogger(__name__)


DEFAULT_METHOD = "a3vse"


# How a retrain warm-starts from the active model (trainer ``--init-from``; the trainer adds L2-SP toward the
# start and keeps the start unless an epoch beats it on the held-aside captions searched among un-annotated
# items). Chosen on tests/bench/bench_user_loop.py (docs/benchmarks.md, "the user's loop"): with the starter's
# lr of 5e-5 and batches of 128, 100 captions made 1 step an epoch and nothing was learnt; batches of 32 at 1e-4
# for 20 epochs, with the library's pseudo pairs as extra pairs and negatives (VSE), learnt a user's own word.
WARM_START_EPOCHS = 20
WARM_START_ARGS: tuple[str, ...] = ("--lr", "1e-4", "--batch-size", "32", "--patience", "20",
                                    "--schedule", "constant")
WARM_START_PSEUDO_WEIGHT = {"vse": 1.0}  # methods whose config has pseudo_weight (A3VSE has its own D^u terms)


def warm_start_args(method: str) -> list[str]:
    """The trainer arguments of a warm start of ``method`` (after ``--init-from DIR``)."""
    weight = WARM_START_PSEUDO_WEIGHT.get(method)
    return [*WARM_START_ARGS, *(["--set", f"pseudo_weight={weight}"] if weight is not None else [])]


@dataclass(frozen=True)
class RetrainOptions:
    """One retraining's settings; ``trainer_args`` are extra ``python -m trainer train`` options."""

    method: str | None = None  # None: the active model's method, warm-started from it (a3vse from zero-shot)
    warm_start: bool = True  # start from the active model's weights when it has a warm-startable method
    always_activate: bool = False  # activate the new model whatever :func:`gate` says (the decision is still given)
    holdout: float = DEFAULT_HOLDOUT
    seed: int = 0
    epochs: int | None = None
    overrides: tuple[str, ...] = ()  # "key=value", the trainer's --set
    trainer_args: tuple[str, ...] = ()
    name: str | None = None  # the new model's name (default: <method>-<library>-<timestamp>)
    out: Path | None = None  # the new model's folder (default: under engine.paths.models_dir())
    dest: Path | None = None  # the training set's folder (default: under the library's folder)


@dataclass
class RetrainResult:
    """What a retraining did: the set it trained on, the new model, and R@K on the held-aside annotations
    before (the model that was active) and after (the new model), both measured by :func:`evaluate_trained`
    or the zero-shot evaluation. ``trainer_metrics`` is the trainer's own ``metrics.json``."""

    training_set: TrainingSet
    old_model: str | None = None
    model_name: str | None = None
    model_dir: Path | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    trainer_metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    init_from: str | None = None  # the model the run started from (None: random weights)
    pseudo_before: dict[str, Any] | None = None  # R@K on the library's pseudo pairs (:func:`pseudo_check_set`)
    pseudo_after: dict[str, Any] | None = None
    activated: bool = False
    decision: str = ""  # why the new model was or was not activated (:func:`gate`)

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON summary (``polyseek retrain --json``'s last line)."""
        from engine.loop.metrics import rounded

        ts = self.training_set
        return rounded({
            "event": "result", "model": self.model_name, "model_dir": str(self.model_dir) if self.model_dir else None,
            "old_model": self.old_model or ZERO_SHOT, "training_set": {
                "folder": str(ts.folder), "train_split": ts.train_split, "val_split": ts.val_split,
                "annotated_items": ts.n_annotated_items, "captions": ts.n_captions,
                "heldout_items": ts.n_heldout_items, "unannotated_items": ts.n_unannotated},
            "before": self.before, "after": self.after, "trainer_metrics": self.trainer_metrics,
            "init_from": self.init_from, "pseudo_before": self.pseudo_before, "pseudo_after": self.pseudo_after,
            "activated": self.activated, "decision": self.decision, "warnings": self.warnings})

    def summary_lines(self) -> list[str]:
        """Before/after R@1/5/10 on the held-aside annotations, as lines for a terminal."""
        ts = self.training_set
        lines = [f"trained {self.model_name} on {ts.n_train_annotated} annotated + {ts.n_unannotated} "
                 f"un-annotated items; {ts.n_heldout_items} held aside"]
        if self.before is None and self.after is None:
            return lines + ["no held-aside annotations: before/after cannot be compared"]
        shown = self.after or self.before
        assert shown is not None
        lines.append(f"held-aside annotations ({shown['n_media']} items, {shown['n_captions']} captions):")
        for label, report, name in (("before", self.before, self.old_model or ZERO_SHOT),
                                    ("after ", self.after, self.model_name)):
            if report is None:
                lines.append(f"  {label} not available ({name})")
                continue
            cells = "  ".join(f"{way} R@1 {report[way]['r1']:5.1f} R@5 {report[way]['r5']:5.1f} "
                              f"R@10 {report[way]['r10']:5.1f}" for way in ("i2t", "t2i"))
            lines.append(f"  {label} {cells}  rsum {report['rsum']:6.1f}  ({name})")
        return lines + ([self.decision] if self.decision else [])


class Retrain:
    """The whole loop as one job: ``for p in Retrain(service, options).run(cancel): ...``, then ``.result``.

    The trainer runs as its own process; ``on_event`` receives each of its ``--json-progress`` events
    (the CLI prints them with ``--json``). The GUI runs :meth:`run` in a worker like any other job.
    """

    def __init__(self, service: LoopService, options: RetrainOptions | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.service, self.options = service, options or RetrainOptions()
        self.on_event = on_event or (lambda _event: None)
        self.result: RetrainResult | None = None

    def run(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Export, evaluate the old model, train from it, register, evaluate the new one, and activate it
        only when :func:`gate` finds it not worse (then re-index with it)."""
        cancel = cancel or CancelToken()
        service, options = self.service, self.options
        yield Progress(0, 0, "writing the training set")
        ts = service.export_training_set(options.dest, options.holdout, options.seed)
        result = self.result = RetrainResult(ts, old_model=_active_name(service))
        if ts.warning:
            result.warnings.append(ts.warning)
        yield Progress(0, 0, f"training set: {ts.n_train_annotated} annotated and {ts.n_unannotated} "
                             f"un-annotated items, {ts.n_heldout_items} held aside")  # warnings are shown now
        if ts.n_train_annotated < 1:
            raise RetrainError(f"nothing to train on: {ts.n_annotated_items} annotated items, "
                               f"{ts.n_heldout_items} of them held aside; annotate some items first")
        method, start = self._method_and_start()
        result.init_from = str(start) if start is not None else None
        cancel.raise_if_cancelled()
        if not ts.n_heldout_items:
            result.warnings.append("no annotated item is held aside: the trainer validates on a part of the "
                                   "training items and before/after cannot be compared")
        name, out = self._name_and_folder(method)
        yield from self._train(ts, out, cancel, method, start)
        metrics_file = out / "metrics.json"
        result.trainer_metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        result.model_name = service.register_model(out, name)
        result.model_dir = out
        yield Progress(0, 0, f"comparing {result.model_name} with {result.old_model or 'zero-shot'} on the "
                             "held-aside annotations and the library's pseudo pairs")
        verdict = judge(service, result.model_name, result.old_model, ts.folder,
                        ts.val_split if ts.n_heldout_items else None, options.seed)
        result.warnings.extend(verdict.warnings)
        for name_ in ("before", "after", "pseudo_before", "pseudo_after", "activated", "decision"):
            setattr(result, name_, getattr(verdict, name_))
        if options.always_activate and not result.activated:
            result.activated, result.decision = True, f"activated as asked ({result.decision})"
        if result.activated:
            service.set_active_model(result.model_name)
            yield from _staged(service.reindex(cancel), f"re-indexing with {result.model_name}")
        yield Progress(1, 1, "done")

    def _method_and_start(self) -> tuple[str, Path | None]:
        """The method to train and the model folder to start from: the active model's own method and
        weights when it can warm-start (and the options do not name another method), else random weights."""
        active = self.service.catalog.active_model()
        method = self.options.method
        if active is not None and self.options.warm_start and method in (None, active.method):
            start = Path(active.path)
            if (start / "model.safetensors").is_file() and (start / "config.json").is_file():
                return active.method, start
            self.result.warnings.append(f"{active.name}: no weights in {start}; training from scratch")
        return method or DEFAULT_METHOD, None

    def _name_and_folder(self, method: str) -> tuple[str, Path]:
        from engine import paths

        options = self.options
        taken = {m.name for m in self.service.models()}
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = options.name or f"{method}-{self.service.name}-{stamp}"
        if options.name and options.name in taken:
            raise RetrainError(f"a model named {options.name!r} is already registered")
        name, n = base, 1
        while name in taken or (options.out is None and (paths.models_dir() / name).exists()):
            n += 1
            name = f"{base}-{n}"
        return name, Path(options.out) if options.out else paths.models_dir() / name

    def _train(self, ts: TrainingSet, out: Path, cancel: CancelToken, method: str,
               start: Path | None) -> Iterator[Progress]:
        """Run ``python -m trainer train`` and turn its JSON events into progress records."""
        options = self.options
        warm = ["--init-from", str(start), *warm_start_args(method)] if start is not None else []
        epochs = options.epochs or (WARM_START_EPOCHS if start is not None else None)
        command = [sys.executable, "-m", "trainer", "train", "--method", method, "--data", str(ts.folder),
                   "--train-split", ts.train_split, "--val-split", ts.val_split, "--out", str(out),
                   "--json-progress", "--stop-with-parent", *warm, *(["--epochs", str(epochs)] if epochs else []),
                   *[arg for pair in options.overrides for arg in ("--set", pair)], *options.trainer_args]
        log.info("running %s", " ".join(command))
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
            error: str | None = None
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, encoding="utf-8",
                                  errors="replace", env={**os.environ, "PYTHONUNBUFFERED": "1"}) as process:
                try:
                    for event in _events(process, cancel):
                        self.on_event(event)
                        if event.get("event") == "error":
                            error = str(event.get("message"))
                        progress = _event_progress(event)
                        if progress is not None:
                            yield progress
                except BaseException:  # cancelled, or the consumer closed the generator: no orphan trainer
                    _stop(process)
                    raise
                status = process.wait()
            if status != 0:
                stderr.seek(0)
                tail = error or (stderr.read().strip().splitlines() or ["no message"])[-1]
                raise RetrainError(f"training failed (trainer exit status {status}): {tail}")


def _active_name(service: LoopService) -> str | None:
    active = service.catalog.active_model()
    return active.name if active is not None else None


def _events(process: subprocess.Popen, cancel: CancelToken) -> Iterator[dict[str, Any]]:
    """The trainer's stdout events; a reader thread lets cancellation act while the trainer is quiet."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        try:
            for line in process.stdout or ():
                lines.put(line)
        except (OSError, ValueError):  # the pipe was closed under us: the job is over either way
            pass
        lines.put(None)

    threading.Thread(target=read, daemon=True, name="trainer-stdout").start()
    while True:
        if cancel.cancelled:
            raise Cancelled()
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if line is None:
            return
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            log.debug("trainer: %s", line.rstrip())
            continue
        if isinstance(event, dict):
            yield event


def _event_progress(event: dict[str, Any]) -> Progress | None:
    kind = event.get("event")
    if kind == "step":
        loss = event.get("loss", {}).get("total")
        text = f", loss {loss:.3f}" if isinstance(loss, (int, float)) else ""
        return Progress(int(event.get("step", 0)), int(event.get("total", 0)),
                        f"training epoch {event.get('epoch')}{text}")
    if kind == "progress":
        return Progress(int(event.get("done", 0)), int(event.get("total", 0)),
                        f"training: {event.get('message') or event.get('stage')}")
    if kind == "epoch":
        rsum = (event.get("val") or {}).get("rsum")
        text = f" (held-aside rsum {rsum:.1f})" if isinstance(rsum, (int, float)) else ""
        return Progress(1, 1, f"epoch {event.get('epoch')} done{text}")
    return None


def _stop(process: subprocess.Popen) -> None:
    """Ask the trainer to stop (SIGINT: it writes a resumable checkpoint), then make sure it has."""
    if process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def _staged(progress: Iterator[Progress], stage: str) -> Iterator[Progress]:
    for p in progress:
        yield Progress(p.done, p.total, f"{stage}: {p.message}" if p.message else stage)
