"""Command line of the trainer process: ``python -m trainer {prepare,train,evaluate,export}``.

``polyseek train|evaluate|export`` forward their arguments here unchanged. User errors (a bad option, a
``--set`` naming an unknown field, a missing folder) print one line on stderr and exit with status 2; with
``--json-progress`` they are also reported as an error event on stdout (:mod:`engine.trainercontract.events`). A
training run stopped by SIGINT / SIGTERM writes a resumable checkpoint and exits with 130 / 143.
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine import paths
from engine.features.backbone import AssetsMissing
from engine.library.captionfolder import CaptionFolderError
from engine.trainercontract import events
from engine.trainercontract.metrics import report_lines, rounded
from engine.trainercontract.runfolder import saved_checkpoint
from trainer.checkpoint import CheckpointError, load_model
from trainer.data import DataError, FeatureNeeds, FeatureSource
from trainer.evaluation import (
    SIMILARITIES,
    EvaluationError,
    encode_pairs,
    evaluate_pairs,
    nan_to_none,
    rerank_report,
    similarity_matrix,
)
from trainer.exporting import export_folder
from trainer.finetune import model_pairs
from trainer.methods import ConfigError, ExportError, list_methods
from trainer.methods.registry import PRESETS
from trainer.prepare import prepare
from trainer.pseudocaptions import PSEUDO_SOURCES
from trainer.sparse import SparseSplitError, add_sparse_arguments, sparse_config_from_args
from trainer.splits import split_view
from trainer.startergraphs import prepare_starter_graphs
from trainer.train import Interrupted, Reporter, StopRequest, TrainingError, TrainOptions, resolve_device, train

log = logging.getLogger("trainer")

EXIT_USAGE = 2
EXIT_FAILURE = 1
LOW_PRIORITY_NICE = 10  # nice increment of --low-priority: weight 110 against the GUI's 1024 at nice 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="polyseek", description="Polyseek trainer process")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="export the pretrained backbone and text encoder to ONNX")
    p.add_argument("--force", action="store_true")
    p.add_argument("--json-progress", action="store_true", help="one JSON event per line on stdout")

    p = sub.add_parser("train", help="train a model on a caption folder")
    p.add_argument("--method", required=True, choices=list_methods())
    p.add_argument("--data", required=True, type=Path, help="caption folder")
    p.add_argument("--train-split", default="train")
    p.add_argument("--val-split", default="dev")
    p.add_argument("--out", type=Path, default=None, help="model folder (default: a new one under models/)")
    p.add_argument("--epochs", type=int, default=None, help="default: the method's recipe")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    add_sparse_arguments(p)
    p.add_argument("--json-progress", action="store_true", help="one JSON event per line on stdout")
    p.add_argument("--low-priority", action="store_true",
                   help="run at a lower CPU priority (nice +10), so the app that started it stays responsive")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--stop-with-parent", action="store_true",
                   help="stop with a resumable checkpoint when the process that started this one is gone (the app "
                        "or `polyseek retrain` was killed)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (JSON value or plain string); repeatable")
    p.add_argument("--preset", default="paper", choices=list(PRESETS),
                   help="'test' shrinks every layer (smoke tests)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--patience", type=int, default=None, help="epochs without a better rsum before stopping")
    p.add_argument("--later-ties", action="store_true", help="an epoch whose validation rsum equals the best so far "
                   "becomes the best (the app's retrain: a few held-aside captions soon stop moving the rsum)")
    p.add_argument("--keep-last", action="store_true", help="the last epoch is the model, whatever its validation "
                   "rsum (a stage that cannot move the rsum, e.g. --train-only sigma; the app's warm-started retrain, "
                   "which the held-aside captions judge afterwards)")
    p.add_argument("--train-only", default=None, choices=["sigma"],
                   help="only this part learns: 'sigma', a PCME model's uncertainty side (its means and a, b stay as "
                   "--init-from has them)")
    p.add_argument("--val-items", type=int, default=None, help="items in the per-epoch validation")
    p.add_argument("--epoch-captions", type=int, default=None, metavar="N",
                   help="captions of each item an epoch shows (0: all; default: the method's recipe, 1)")
    p.add_argument("--clip-captions", type=int, default=None, metavar="N",
                   help="captions of each GIF/video an epoch shows (0: all; default: as --epoch-captions)")
    p.add_argument("--schedule", default=None, choices=["plateau", "cosine", "step", "constant"],
                   help="learning-rate schedule (default: the method's recipe)")
    p.add_argument("--no-pseudo-pairs", action="store_true",
                   help="a3vse: leave the un-annotated items out instead of pairing them with pseudo captions")
    p.add_argument("--pseudo-captions", default="regions", choices=list(PSEUDO_SOURCES),
                   help="the un-annotated items' pseudo captions: their regional semantics (A3VSE §3.2), the same "
                        "with each region's colour, or the consensus caption of their nearest annotated look-alikes")
    p.add_argument("--init-from", type=Path, default=None, metavar="DIR",
                   help="start from this model folder's weights and config (same method) instead of random ones; "
                        "its validation score is the one to beat, so the run never ends worse than its start")
    p.add_argument("--l2sp", type=float, default=None, metavar="ALPHA",
                   help="with --init-from: pull the weights toward the starting ones (L2-SP; default: "
                        "the warm-start recipe's)")
    p.add_argument("--finetune-epochs", type=int, default=None, metavar="N",
                   help="after the warm-up, N epochs fine-tuning the image backbone with the head "
                        "(photos only; meant for CUDA)")
    p.add_argument("--finetune-lr", type=float, default=None,
                   help="the backbone's learning rate in fine-tuning (default 1e-5)")
    p.add_argument("--finetune-head-lr", type=float, default=None,
                   help="the head's learning rate in fine-tuning (default 2e-5)")
    p.add_argument("--finetune-blocks", type=int, default=None, metavar="N",
                   help="fine-tune only the last N of the backbone's 16 blocks (and its head convolution; "
                        "default 16); below 16 the frozen part runs once per picture and is cached (fast on a CPU, "
                        "no augmentation); 0: the image side keeps its cached features")
    p.add_argument("--text-layers", type=int, default=None, metavar="N",
                   help="in fine-tuning, the last N of MiniLM's 6 layers learn too (default 0: the cached "
                        "text features); the model then carries its own text encoder")
    p.add_argument("--text-lr", type=float, default=None,
                   help="the text encoder's learning rate in fine-tuning (default 1e-5)")

    p = sub.add_parser("evaluate", help="retrieval metrics of a trained model on a caption folder")
    p.add_argument("--model", required=True, type=Path, help="a model folder written by train --out")
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--split", default=None, help="default: the whole folder")
    p.add_argument("--json", action="store_true")
    p.add_argument("--json-progress", action="store_true", help="progress as JSON lines on stdout, before the report")
    p.add_argument("--similarity", default="default", choices=list(SIMILARITIES),
                   help="PCME test-time similarity (default: match probability)")
    p.add_argument("--rerank", type=int, default=None, metavar="N",
                   help="twobranch-sim: re-score the top N candidates of a first-stage ranking")
    p.add_argument("--candidates", type=Path, default=None,
                   help="model folder whose ranking --rerank re-scores (default: the model's own branches)")
    p.add_argument("--shuffle-frames", action="store_true",
                   help="ablation: shuffle each clip's frames (removes temporal order)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--seed", type=int, default=0, help="seed of --shuffle-frames")

    p = sub.add_parser("export", help="export a trained model's encoders to ONNX with a manifest")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    _configure_logging(args.verbose)
    if args.command == "prepare":
        emit = _json_printer() if args.json_progress else None
        report = None if emit is None else (
            lambda p: emit(events.StageProgress("prepare", p.done, p.total, p.message)))
        # the shipped starter's companions' graphs: in a new set before it looks ready, else beside it
        root = prepare(force=args.force, progress=report,
                       before_ready=lambda folder: prepare_starter_graphs(folder, report))
        prepare_starter_graphs(root, report)
        if emit is not None:
            emit(events.Done(assets=str(root)))
        else:
            print(f"assets ready in {root}")
        return 0
    command: Callable[[argparse.Namespace], int] = {"train": _train, "evaluate": _evaluate,
                                                    "export": _export}[args.command]
    emit_error = _json_printer() if getattr(args, "json_progress", False) else None
    try:
        return command(args)
    except _user_errors() as exc:
        return _fail(str(exc), EXIT_USAGE, emit_error)
    except Exception as exc:  # noqa: BLE001 - the process boundary: report, never a silent death
        log.exception("%s failed", args.command)
        return _fail(f"{type(exc).__name__}: {exc}", EXIT_FAILURE, emit_error)


def _user_errors() -> tuple[type[BaseException], ...]:
    return (AssetsMissing, CaptionFolderError, CheckpointError, ConfigError, DataError, EvaluationError,
            ExportError, SparseSplitError, TrainingError, FileNotFoundError)


def _fail(message: str, status: int, emit: Callable[[events.TrainerEvent], None] | None) -> int:
    print(f"error: {message}", file=sys.stderr)
    if emit is not None:
        emit(events.Error(message))
    return status


def _json_printer() -> Callable[[events.TrainerEvent], None]:
    def emit(event: events.TrainerEvent) -> None:
        try:
            print(events.dumps(event), flush=True)
        except BrokenPipeError:  # the reader is gone; the exit status still says what happened
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115

    return emit


def watch_parent(stop: Any, interval_s: float = 1.0) -> threading.Thread:
    """A daemon thread that asks ``stop`` to stop (SIGTERM) once this process's parent is gone (it is then
    re-parented, so ``os.getppid()`` changes): a killed app or ``polyseek retrain`` leaves no orphan trainer,
    and the trainer leaves a resumable checkpoint."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.requested:
            time.sleep(interval_s)
            if os.getppid() != parent:
                log.warning("the process that started this trainer is gone: stopping with a resumable checkpoint")
                stop.request(signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, daemon=True, name="parent-watch")
    thread.start()
    return thread


def _configure_logging(verbose: bool) -> None:
    """stderr for the person (or the GUI's log pane), plus a rotating file in the user log folder."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(message)s",
                        stream=sys.stderr)

    try:
        paths.log_dir().mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(paths.log_dir() / "trainer.log", maxBytes=2_000_000,
                                                       backupCount=2, encoding="utf-8")
    except OSError:
        return  # a read-only home must not stop training
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)


# ------------------------------------------------------------------------------------------ train


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``--set key=value`` pairs: the value is read as JSON (numbers, true/false, lists), else as a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set: expected KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def lower_priority(increment: int = LOW_PRIORITY_NICE) -> str | None:
    """Lower this process's CPU priority by ``increment`` nice levels; returns what was done, None if nothing.

    Why it works for the app: on Linux with autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``)
    CFS first divides the CPU between autogroups, one per session, and nice values only weigh tasks *within* an
    autogroup. QProcess starts the trainer in the GUI's own session, so both share one autogroup and renicing
    the child is what makes the GUI win against it (without it, the trainer's busy threads get most of that
    autogroup's share and the GUI thread waits). Against other sessions' work it changes nothing: autogroup
    already keeps sessions apart.

    On Linux nice is per thread (new threads inherit their creator's), and importing torch has already
    started threads, so every thread of the process is reniced, not only the calling one. Windows has no
    nice: there the process gets the below-normal priority class through psutil when it is installed.
    Failing to lower the priority never stops training: it is logged and None returned.
    """
    if increment <= 0:
        raise ValueError(f"lower_priority: increment must be positive, got {increment}")
    if not hasattr(os, "nice"):
        return _lower_priority_windows()
    try:
        niceness = os.nice(increment)  # the calling thread; every POSIX system has this
        tasks = Path("/proc/self/task")
        for tid in (int(t.name) for t in tasks.iterdir()) if tasks.is_dir() else ():
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                    os.setpriority(os.PRIO_PROCESS, tid, niceness)
            except ProcessLookupError:
                continue  # a thread that ended meanwhile
    except OSError as exc:
        log.warning("could not lower the trainer's CPU priority: %s", exc)
        return None
    return f"nice {niceness}"


def _lower_priority_windows() -> str | None:
    try:
        import psutil  # not a dependency: used where the installer brought it
    except ImportError:
        log.info("--low-priority: psutil is not installed, so the priority is left as it is")
        return None
    try:
        psutil.Process().nice(psutil.BELOW_NORMAL_PRIORITY_CLASS)
    except (OSError, psutil.Error) as exc:
        log.warning("could not lower the trainer's CPU priority: %s", exc)
        return None
    return "below-normal priority class"


def _train(args: argparse.Namespace) -> int:
    if args.low_priority:  # first, so every thread training starts inherits it
        applied = lower_priority()
        if applied:
            log.info("running at a lower CPU priority (%s) so the app stays responsive", applied)

    out = args.out or paths.models_dir() / f"{args.method}-{time.strftime('%Y%m%d-%H%M%S')}"
    options = TrainOptions(
        method=args.method, data=args.data, out=out, train_split=args.train_split, val_split=args.val_split,
        epochs=args.epochs, device=args.device, sparse=sparse_config_from_args(args),
        json_progress=args.json_progress, resume=args.resume, overrides=parse_overrides(args.set),
        preset=args.preset, seed=args.seed, batch_size=args.batch_size, lr=args.lr, patience=args.patience,
        later_ties=args.later_ties, keep_last=args.keep_last, train_only=args.train_only,
        pseudo_pairs=not args.no_pseudo_pairs, pseudo_captions=args.pseudo_captions, val_items=args.val_items,
        schedule=args.schedule,
        epoch_captions=args.epoch_captions, clip_captions=args.clip_captions, finetune_epochs=args.finetune_epochs,
        finetune_lr=args.finetune_lr,
        finetune_head_lr=args.finetune_head_lr, finetune_blocks=args.finetune_blocks, init_from=args.init_from,
        l2sp=args.l2sp, text_layers=args.text_layers, text_lr=args.text_lr)
    if not (args.data / "captions.tsv").is_file():
        raise DataError(f"--data: {args.data} is not a caption folder (no captions.tsv)")
    stop = StopRequest()
    previous = _install_stop_handlers(stop)
    if args.stop_with_parent:
        watch_parent(stop)
    try:
        report = train(options, stop)
    except Interrupted as exc:
        stopped = stopped_event(out, signal.Signals(exc.signum).name)
        if args.json_progress:
            _json_printer()(stopped)
        return 128 + exc.signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not args.json_progress:
        print(f"model written to {out} (validation rsum {report.get('rsum', float('nan')):.1f})")
    return 0


def stopped_event(out: Path, signal_name: str) -> events.Stopped:
    """What a run stopped by ``signal_name`` left, read from the disk and logged (trainer.log too): the folder of
    its resumable checkpoint, or that nothing can be resumed (a stop while the data was loading, before the
    first checkpoint, leaves none: #44 said "a resumable checkpoint is in" a folder that did not exist)."""
    saved = saved_checkpoint(out)
    if saved is not None:
        log.warning("training stopped by %s: %s (continue with --resume)", signal_name, saved.describe())
        return events.Stopped(signal_name, str(saved.folder), resumable=True)
    log.warning("training stopped by %s before its first checkpoint: nothing can be resumed (start it again)",
                signal_name)
    return events.Stopped(signal_name, str(out), resumable=False)


def _install_stop_handlers(stop: Any) -> dict[int, Any]:
    """SIGINT / SIGTERM ask the loop to stop after its current step; a second signal acts at once."""
    previous = {}

    def handler(signum: int, _frame: object) -> None:
        stop.request(signum)
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, handler)
    return previous


# ------------------------------------------------------------------------------------------ evaluate


def _model_dir(path: Path) -> Path:
    """A model folder, or the name of one under the models folder."""
    if path.is_dir():
        return path
    named = paths.models_dir() / str(path)
    if not path.is_absolute() and named.is_dir():
        return named
    raise CheckpointError(f"--model: {path} is not a model folder")


def _evaluate(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    rng = np.random.default_rng(args.seed) if args.shuffle_frames else None
    report = evaluate_folder(_model_dir(args.model), args.data, args.split, device, args.similarity,
                             args.rerank, _model_dir(args.candidates) if args.candidates else None, rng,
                             json_progress=args.json_progress)
    report = nan_to_none(report)
    if args.json:
        print(json.dumps(rounded(report), indent=2))
    else:
        print("\n".join(report_lines(report)))
    return 0


def evaluate_folder(model_dir: Path, data: Path, split: str | None, device: Any, similarity: str = "default",
                    rerank: int | None = None, candidates: Path | None = None, shuffle_frames: Any = None,
                    json_progress: bool = False) -> dict[str, Any]:
    """The ``evaluate`` report of a model folder on one split of a caption folder."""
    model = load_model(model_dir, device)
    view = split_view(data, split)
    source = FeatureSource.open(progress=Reporter(json_progress).progress("features"))  # else log lines on stderr
    try:
        pairs = model_pairs(model_dir, source.pairs(view.item_captions(), FeatureNeeds.of(model)), data, device)
        if not pairs.captions:
            raise DataError(f"--data: {data} has no captions in split {split or 'all'!r}")
        if rerank is not None:
            first = None
            if candidates is not None:
                first_model = load_model(candidates, device)
                first_pairs = model_pairs(candidates, source.pairs(view.item_captions(),
                                                                   FeatureNeeds.of(first_model)), data, device)
                first = similarity_matrix(first_model, encode_pairs(first_model, first_pairs, device))
            report = rerank_report(model, pairs, device, rerank, first)
        else:
            report = evaluate_pairs(model, pairs, device, similarity, shuffle_frames)
    finally:
        source.close()
    report.update(model=str(model_dir), method=model.config.method, split=split or "all",
                  n_failed=len(view.items) - pairs.n_items)
    return report



# ------------------------------------------------------------------------------------------ export


def _export(args: argparse.Namespace) -> int:
    model_dir = _model_dir(args.model)
    manifest = export_folder(model_dir, load_model(model_dir), args.out)
    print(f"exported {manifest['method']} encoders ({', '.join(manifest['encoders'])}) to {args.out}")
    return 0
