"""The training loop: cached features in, a checkpointed, validated, exported model folder out.

One run (``python -m trainer train``) resolves a recipe (:data:`trainer.recipes.RECIPES`: the method's config overrides,
optimizer, learning rate, schedule, epochs, batch size) plus the user's ``--set`` overrides, loads the
caption folder's features (:mod:`trainer.data`), and trains with gradient clipping (2.0), AMP on CUDA,
early stopping on the validation rsum and a checkpoint after every epoch (:mod:`trainer.checkpoint`).
At the end the best epoch's weights are evaluated on the whole validation split (``metrics.json``) and
exported to ONNX (``onnx/``) for the engine.

Every method trains on frozen backbone features and, by default, MiniLM text features: the sentence vector
gives the global text feature and, where a method attends over words, MiniLM's token vectors are the words.
A3VSE reads token vectors only (MiniLM's).
``--finetune-epochs N`` adds the papers' second phase: N epochs in which the image backbone reads pixels and
is fine-tuned with the head (:mod:`trainer.finetune`; meant for CUDA). Its epochs follow the warm-up's in the
same history, checkpoints and early stopping; the best epoch of either phase is the model.

Interruption: SIGINT / SIGTERM set a :class:`StopRequest`; the loop finishes its current step, writes a
resumable checkpoint (including how far into the epoch it got) and raises :class:`Interrupted`, which the
CLI turns into exit status 130 / 143. ``--resume`` continues from the last checkpoint, mid-epoch included.

Distributed data parallel: started by ``torchrun`` (``WORLD_SIZE`` > 1) the loop joins a process group
(gloo on CPU, NCCL on CUDA); every rank walks the same seeded batch order and takes every WORLD_SIZE-th
batch; rank 0 validates, checkpoints and reports, and broadcasts its decisions.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from engine.progress import Progress
from engine.trainercontract import events
from trainer import checkpoint as ckpt
from trainer.data import FeatureNeeds, FeatureSource, PairSet, TrainingData, load_training_data
from trainer.evaluation import evaluate_pairs, nan_to_none, quick_rsum
from trainer.finetune import (
    NUM_BLOCKS,
    FineTuned,
    PixelFeed,
    Pixels,
    TorchBackbone,
    Trunk,
    backbone_features,
    decode_for_eval,
    export_folder,
    finetuned_backbone,
    item_paths,
    load_backbone,
    model_pairs,
    optimizer_groups,
    require_photos,
    save_best,
    to_pixels,
    trunk_outputs,
    with_visual,
)
from trainer.methods import (
    MethodConfig,
    PairBatch,
    RetrievalModel,
    build_loss,
    build_model,
)
from trainer.recipes import (  # noqa: F401 - re-exported: the trainer's callers import them from here
    FEATURE_DIM_FIELDS,
    FINETUNE_DEFAULTS,
    RECIPES,
    SCHEDULES,
    TEXT_LAYERS,
    Recipe,
    TrainingError,
    TrainOptions,
    jsonable,
    learning_rate,
    load_optimizer,
    make_optimizer,
    resolve_config,
    resolve_settings,
    update_after_validation,
)
from trainer.textencoder import (
    Tokenized,
    TorchMiniLM,
    encode_captions,
    finetuned_text,
    load_text_encoder,
    with_text,
)

log = logging.getLogger(__name__)

GRAD_CLIP = 2.0
STEP_EVENT_INTERVAL_S = 0.25  # at most ~4 step events a second (plus every epoch's last step)


class Interrupted(Exception):
    """Training stopped on a signal after writing a resumable checkpoint; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopRequest:
    """Set from a signal handler; the loop polls it between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def request(self, signum: int) -> None:
        self.signum = signum

    @property
    def requested(self) -> bool:
        return self.signum is not None


# ------------------------------------------------------------------------------------------ reporting


class Reporter:
    """Progress events: JSON lines on stdout (``--json-progress``), or readable log lines on stderr.
    Only rank 0 reports."""

    def __init__(self, json_lines: bool, enabled: bool = True,
                 write: Callable[[str], None] | None = None) -> None:
        self.json_lines, self.enabled = json_lines, enabled
        self._write = write or (lambda line: print(line, flush=True))
        self._last_step = 0.0
        self.on_reader_gone: Callable[[], None] | None = None  # train() asks the loop to stop

    def emit(self, event: events.TrainerEvent) -> None:
        if not self.enabled:
            return
        if self.json_lines:
            try:
                self._write(events.dumps(event))
            except BrokenPipeError:  # whoever read the events (the app, `polyseek retrain`) is gone
                self._reader_gone()
        else:
            log.info("%s", events.describe(event))

    def _reader_gone(self) -> None:
        self.enabled = False
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - no flush at exit may fail on the dead pipe
        except OSError:
            pass
        log.warning("the events' reader is gone: stopping with a resumable checkpoint")
        if self.on_reader_gone is not None:
            self.on_reader_gone()

    def step(self, event: events.Step, last: bool) -> None:
        """A step event, throttled to :data:`STEP_EVENT_INTERVAL_S` except for an epoch's last step."""
        now = time.monotonic()
        interval = STEP_EVENT_INTERVAL_S if self.json_lines else 5.0
        if last or now - self._last_step >= interval:
            self._last_step = now
            self.emit(event)

    def progress(self, stage: str) -> Callable[[Progress], None]:
        """A :class:`Progress` callback that reports :class:`events.StageProgress`."""
        last = {"t": 0.0}

        def report(p: Progress) -> None:
            now = time.monotonic()
            if p.done >= p.total or now - last["t"] >= 1.0:
                last["t"] = now
                self.emit(events.StageProgress(stage, p.done, p.total, p.message))

        return report


# ------------------------------------------------------------------------------------------ distributed


@dataclass(frozen=True)
class Dist:
    """This process's place in a (possibly single-process) data-parallel run."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def init_distributed(device: torch.device) -> Dist:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1), else a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL binds each rank to its own GPU
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def resolve_device(name: str) -> torch.device:
    """'auto' is CUDA when available, else the CPU; 'cuda' without CUDA is an error naming --device."""
    if name not in ("auto", "cpu", "cuda"):
        raise TrainingError(f"--device: expected auto, cpu or cuda, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("--device cuda: CUDA is not available on this machine")
    if name == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.backends.cudnn.benchmark = True  # fixed 224 x 224 pictures: cuDNN picks its fastest kernels once
    return torch.device("cuda", local)


# ------------------------------------------------------------------------------------------ batches


def epoch_batches(pairs: PairSet, epoch: int, seed: int, batch_size: int, group: int = 1,
                  per_item: int | None = None, min_units: int = 0) -> list[np.ndarray]:
    """Caption indices of each batch of one epoch, the order seeded by (seed, epoch) so that a resumed run
    replays it. An epoch takes ``per_item`` random captions of every item (None: every caption once);
    ``group`` captions of one item sit side by side in a batch; photos and clips are never mixed. Batches of
    fewer than 2 captions are dropped (no negatives, and batch norm needs 2).

    ``min_units`` > the epoch's units repeats the draw (fresh shuffles) until there are at least that many:
    a sparse corpus then gets as many steps per epoch as the fully annotated one would (A3VSE §4.2 keeps
    the baselines' iteration count comparable instead of letting 10 % of the pairs make 10 % of the steps)."""
    rng = np.random.default_rng([seed, epoch])
    clip_of_caption = pairs.visual.is_clip[pairs.caption_item]
    n_units = len(pairs.captions) if per_item is None else pairs.n_items * per_item
    repeats = max(1, math.ceil(min_units / max(1, n_units // max(1, group))))
    batches: list[np.ndarray] = []
    for kind in (False, True):
        units = [u for _ in range(repeats)
                 for u in _units(np.flatnonzero(clip_of_caption == kind), pairs.caption_item, group, per_item, rng)]
        per_batch = max(1, batch_size // max(1, group))
        n_batches = math.ceil(len(units) / per_batch)
        for part in np.array_split(np.arange(len(units)), n_batches) if n_batches else []:
            rows = np.concatenate([units[i] for i in part])
            if len(rows) >= 2:
                batches.append(rows)
    return [batches[i] for i in rng.permutation(len(batches))]


def _units(captions: np.ndarray, caption_item: np.ndarray, group: int, per_item: int | None,
           rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled groups of up to ``group`` captions of one item, ``per_item`` captions drawn per item."""
    if group <= 1 and per_item is None:
        return [np.array([c]) for c in rng.permutation(captions)]
    by_item: dict[int, list[int]] = {}
    for c in captions:
        by_item.setdefault(int(caption_item[c]), []).append(int(c))
    units = []
    for item in sorted(by_item):
        own = rng.permutation(by_item[item])[:per_item]
        units += [own[i:i + max(1, group)] for i in range(0, len(own), max(1, group))]
    return [units[i] for i in rng.permutation(len(units))]


def make_batch(data: TrainingData, rows: np.ndarray, device: torch.device, progress: float,
               pseudo_rng: np.random.Generator | None, visual: Pixels | Trunk | None = None,
               tokens: Tokenized | None = None) -> PairBatch:
    """The :class:`PairBatch` of caption ``rows``; for A3VSE also as many pseudo pairs of the same kind.
    ``visual`` (phase two) is the rows' items as pixels or trunk outputs, in place of their cached features;
    ``tokens`` (phase two with the text encoder) gives the rows' captions as token ids in place of theirs."""
    train = data.train
    items = train.caption_item[rows]
    visual = visual if visual is not None else train.visual.batch(items, device)
    text = tokens.batch(rows, device) if tokens is not None else train.text.batch(rows, device)
    batch = PairBatch(visual, text,
                      visual_ids=torch.as_tensor(items, device=device), progress=min(1.0, max(0.0, progress)))
    pseudo = data.pseudo
    if pseudo is not None and pseudo_rng is not None:
        kind = bool(train.visual.is_clip[items[0]])
        same = np.flatnonzero(pseudo.visual.is_clip == kind)
        if len(same) >= 2:
            chosen = pseudo_rng.choice(same, size=len(rows), replace=len(same) < len(rows))
            batch.unlabelled_visual = pseudo.visual.batch(chosen, device)
            batch.pseudo_text = pseudo.text.batch(chosen, device)
    return batch


# ------------------------------------------------------------------------------------------ the run


@dataclass
class Run:
    """Everything one training process holds."""

    options: TrainOptions
    recipe: Recipe
    settings: dict[str, Any]  # resolved lr, batch_size, epochs, patience, seed, group, val_items
    config: MethodConfig
    model: RetrievalModel
    wrapped: nn.Module  # the model, or its DDP wrapper
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    data: TrainingData
    state: ckpt.TrainerState
    device: torch.device
    dist: Dist
    reporter: Reporter
    stop: StopRequest
    val_subset: PairSet
    backbone: TorchBackbone | None = None  # phase two: the backbone being fine-tuned
    text: TorchMiniLM | None = None  # phase two: the text encoder being fine-tuned
    train_tokens: Tokenized | None = None  # phase two with the text encoder: the captions, tokenised once
    val_tokens: Tokenized | None = None
    trainable: nn.Module | None = None  # what checkpoints hold: the model, or FineTuned(backbone, model)
    feed: PixelFeed | None = None
    val_pixels: np.ndarray | None = None  # phase two: the validation subset's pictures, decoded once
    train_trunk: np.ndarray | None = None  # phase two on part of the backbone: the frozen trunk's outputs
    val_trunk: np.ndarray | None = None
    anchor: list[tuple[nn.Parameter, torch.Tensor]] = field(default_factory=list)  # warm start: L2-SP's w0
    l2sp: float = 0.0
    distractors: PairSet | None = None  # warm start: un-annotated items the validation captions also search
    kept_text: tuple[str, Path] | None = None  # warm start from a model with its own text encoder: (id, file), kept

    @property
    def checkpointed(self) -> nn.Module:
        return self.trainable if self.trainable is not None else self.model


def train(options: TrainOptions, stop: StopRequest | None = None, source: FeatureSource | None = None,
          reporter: Reporter | None = None) -> dict[str, Any]:
    """Run a training job end to end; returns the final validation report of the best epoch.

    Raises :class:`Interrupted` after a signal (a resumable checkpoint is written), :class:`TrainingError`,
    :class:`ConfigError` or :class:`trainer.data.DataError` for bad options or data.
    """
    stop = stop or StopRequest()
    device = resolve_device(options.device)
    world = init_distributed(device)
    reporter = reporter or Reporter(options.json_progress)
    reporter.enabled = reporter.enabled and world.main
    reporter.on_reader_gone = lambda: stop.request(signal.SIGTERM)
    own_source = source is None
    source = source or FeatureSource.open(options.assets, reporter.progress("features"))
    try:
        run = _setup(options, device, world, reporter, stop, source)
        _loop(run)
        return _finish(run) if world.main else {}
    finally:
        if own_source:
            source.close()
        if world.active and dist.is_initialized():
            dist.destroy_process_group()


def _setup(options: TrainOptions, device: torch.device, world: Dist, reporter: Reporter, stop: StopRequest,
           source: FeatureSource) -> Run:
    out = Path(options.out)
    if world.main and out.is_dir():
        ckpt.remove_temporaries(out)  # left by a run killed while writing
    saved = _resumable(options, out)
    if saved:
        config = ckpt.load_config(out)
    elif options.init_from is not None:
        config = _warm_start_config(options)
    else:
        config = resolve_config(options.method, options.overrides, options.preset, options.assets)
    settings = resolve_settings(options, RECIPES[options.method], saved)
    recipe = dataclasses.replace(RECIPES[options.method], schedule=settings["schedule"])
    torch.manual_seed(settings["seed"])
    data = _load_data(options, config, world, source, stop)
    if settings["finetune_epochs"] and settings["finetune_blocks"] and (saved is None or saved.finetune_from is None):
        require_photos(data.train, "training")  # refused before the warm-up, not after it
        require_photos(data.val, "validation")
    if settings["text_layers"] and not config.text_encoder.startswith("minilm"):
        raise TrainingError(f"--text-layers: this {config.method} model reads {config.text_encoder} word vectors, "
                            "not MiniLM; fine-tuning MiniLM needs text_encoder=minilm or minilm-sentence")
    if config.method == "instance" and not saved:
        config = dataclasses.replace(config, num_classes=data.train.n_items)  # type: ignore[call-arg]
    model = build_model(config).to(device)
    backbone = trainable = text = None
    if saved is not None and saved.finetune_from is not None:  # resuming inside phase two
        backbone, text = _phase_two_parts(settings, device)
        trainable = FineTuned(backbone, model, text)
        optimizer = make_optimizer(recipe, optimizer_groups(backbone, model, settings["finetune_lr"],
                                                            settings["finetune_head_lr"], text, settings["text_lr"]),
                                   settings["lr"])
    else:
        optimizer = make_optimizer(recipe, model.parameter_groups(settings["lr"]), settings["lr"])
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
    state = ckpt.TrainerState(method=config.method, options=jsonable(settings, options))
    if saved:
        state = _restore(out, trainable or model, optimizer, scaler, settings)
        reporter.emit(events.Resumed(state.epoch, state.step))
    elif world.main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.save_config(out, config)
    val_subset = _validation_subset(data.val, settings["val_items"], settings["seed"])
    run = Run(options, recipe, settings, config, model, _wrap(trainable or model, world, device),
              build_loss(config).to(device), optimizer, scaler, data, state, device, world, reporter, stop,
              val_subset, backbone, text, trainable=trainable)
    if options.init_from is not None:
        _warm_start(run, Path(options.init_from), saved is None)
    if trainable is not None:
        _open_pixels(run)
    return run


def _phase_two_parts(settings: dict[str, Any], device: torch.device) -> tuple[TorchBackbone | None, TorchMiniLM | None]:
    """The backbone and the text encoder phase two fine-tunes (None: that side reads its cached features)."""
    backbone = text = None
    if settings["finetune_blocks"]:
        backbone = load_backbone(trainable_from=NUM_BLOCKS - settings["finetune_blocks"]).to(device)
    if settings["text_layers"]:
        text = load_text_encoder(settings["text_layers"]).to(device)
    return backbone, text


# L2-SP strength of a warm start (Li, Grandvalet & Davoine 2018: alpha/2 * ||w - w0||^2 on the weights the
# starting model had), chosen on tests/bench/bench_user_loop.py (see docs/benchmarks.md).
WARM_START_L2SP = 1.0
# Validating a warm start: its few held-aside captions rank their items among this many un-annotated ones too.
WARM_START_DISTRACTORS = 1000


def _warm_start_config(options: TrainOptions) -> MethodConfig:
    """The starting model's config (``--set`` may change what does not change a weight's shape)."""
    start = Path(options.init_from)  # type: ignore[arg-type]
    config = ckpt.load_config(start)
    if config.method != options.method:
        raise TrainingError(f"--init-from: {start} is a {config.method!r} model, not {options.method!r}")
    if finetuned_backbone(start):
        raise TrainingError(f"--init-from: {start} has its own fine-tuned backbone; warm starts read the stock "
                            "backbone's cached features, so they cannot start from it")
    if finetuned_text(start) and options.text_layers:
        raise TrainingError(f"--init-from: {start} has its own fine-tuned text encoder; a warm start keeps it as it "
                            "is, so --text-layers cannot be used with it")
    if options.overrides:
        try:
            config = dataclasses.replace(config, **options.overrides)
        except TypeError as exc:
            raise TrainingError(f"--set: {exc}") from exc
    return config


def _warm_start(run: Run, start: Path, fresh: bool) -> None:
    """Load the starting weights (a fresh run), keep them as the L2-SP anchor, and score them on the
    validation subset as epoch 0: an epoch is kept only if it beats the model the run started from."""
    kept = _start_text(run.options)
    run.kept_text = kept[:2] if kept is not None else None  # the new model keeps the start's text encoder
    anchor_model = build_model(run.config).to(run.device)  # the start's weights, read once
    ckpt.load_weights(start / ckpt.WEIGHTS_FILE, anchor_model)
    if fresh:  # a resumed run keeps its checkpoint's weights; the anchor stays the start
        run.model.load_state_dict(anchor_model.state_dict())
    anchor = dict(anchor_model.named_parameters())
    run.anchor = [(p, anchor[name].detach()) for name, p in run.model.named_parameters() if name in anchor]
    strength = run.options.l2sp
    run.l2sp = WARM_START_L2SP if strength is None else strength
    if run.l2sp < 0:
        raise TrainingError(f"--l2sp: must be 0 or more, got {run.l2sp}")
    run.state.options.update(init_from=str(start), l2sp=run.l2sp)
    pseudo = run.data.pseudo
    if pseudo is not None and pseudo.n_items:  # a few held-aside items searched among the library's others
        chosen = np.random.default_rng(run.settings["seed"]).permutation(pseudo.n_items)[:WARM_START_DISTRACTORS]
        run.distractors = pseudo.subset(np.sort(chosen))
    if fresh and run.dist.main:
        report = quick_rsum(run.model, run.val_subset, run.device, run.distractors)
        run.state.best_rsum, run.state.best_epoch = report["rsum"], 0
        save_best(Path(run.options.out), run.model, None, kept_text=run.kept_text)
        run.reporter.emit(events.EpochEnd(0, report, best=True, loss={}, lr=0.0))


def _wrap(module: nn.Module, world: Dist, device: torch.device) -> nn.Module:
    """``module`` itself, or its DistributedDataParallel wrapper under torchrun."""
    if not world.active:
        return module
    return nn.parallel.DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True)


def _resumable(options: TrainOptions, out: Path) -> ckpt.TrainerState | None:
    """The saved state ``--resume`` continues from (None: start afresh); refuses to overwrite a run."""
    saved = ckpt.load_state(out)
    if saved is None:
        return None
    if not options.resume:
        raise TrainingError(f"--out: {out} already holds a training run; pass --resume to continue it or "
                            "choose another folder")
    if saved.method != options.method:
        raise TrainingError(f"--method: {out} was trained with {saved.method!r}, not {options.method!r}")
    if saved.resume is None:
        return None
    if options.overrides:
        log.warning("--set is ignored when resuming: %s keeps its saved config", out)
    return saved


def _restore(out: Path, model: RetrievalModel, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
             settings: dict[str, Any]) -> ckpt.TrainerState:
    """Load the checkpoint: weights, optimizer, gradient scaler, RNG; the epoch budget may have changed."""
    state, training = ckpt.load_checkpoint(out, model)
    load_optimizer(optimizer, training["optimizer"], settings["lr"])
    scaler.load_state_dict(training["scaler"])
    torch.set_rng_state(training["torch_rng"])
    state.finished = False
    # the budget may have changed; settings an older run did not record (phase two's) are recorded now
    state.options = {**settings, **state.options, "epochs": settings["epochs"],
                     **{name: settings[name] for name in FINETUNE_DEFAULTS}}
    return state


def _load_data(options: TrainOptions, config: MethodConfig, world: Dist, source: FeatureSource,
               stop: StopRequest) -> TrainingData:
    """Rank 0 loads first (it may have to compute features); the other ranks then read the caches."""
    probe = build_model(dataclasses.replace(config, num_classes=1) if config.method == "instance" else config)
    needs = FeatureNeeds.of(probe)
    del probe
    user_progress = source.progress

    def progress(p: Progress) -> None:
        if stop.requested:
            raise Interrupted(stop.signum or signal.SIGTERM)
        user_progress(p)

    source.progress = progress
    kept = _start_text(options)
    if kept is not None:
        from engine.features.text import MiniLMEncoder

        source.use_minilm(MiniLMEncoder(options.assets, graph=kept[2], name=kept[0]), kept[0])
    if world.active and not world.main:
        dist.barrier()
    try:
        # un-annotated items with pseudo captions: A3VSE's D^u, VSE's pseudo pairs, a warm start's distractors
        pseudo = options.pseudo_pairs and (config.method == "a3vse" or options.init_from is not None
                                           or getattr(config, "pseudo_weight", 0) > 0)
        data = load_training_data(options.data, options.train_split, options.val_split, options.sparse, needs,
                                  source, with_pseudo=pseudo)
    finally:
        source.progress = user_progress
        if world.active and world.main:
            dist.barrier()
    log.info("training on %d items / %d captions, validating on %d items / %d captions%s",
             data.train.n_items, len(data.train.captions), data.val.n_items, len(data.val.captions),
             f", {data.pseudo.n_items} pseudo pairs" if data.pseudo else "")
    return data


def _start_text(options: TrainOptions) -> tuple[str, Path, Path] | None:
    """(id, weights file, exported graph) of the text encoder of the model a warm start begins from, or None."""
    if options.init_from is None:
        return None
    found = finetuned_text(Path(options.init_from))
    if found is None:
        return None
    graph = Path(options.init_from) / ckpt.ONNX_DIR / "text_encoder.onnx"
    if not graph.is_file():
        raise TrainingError(f"--init-from: {options.init_from} has its own text encoder but no {graph.name} export; "
                            f"run `polyseek export --model {options.init_from}` first")
    return found[0], found[1], graph


def _validation_subset(val: PairSet, limit: int, seed: int) -> PairSet:
    if val.n_items <= limit:
        return val
    chosen = np.sort(np.random.default_rng(seed).choice(val.n_items, size=limit, replace=False))
    return val.subset(chosen)


def _loop(run: Run) -> None:
    """Phase one (the warm-up on cached features), then phase two when ``finetune_epochs`` asks for it."""
    state, settings = run.state, run.settings
    timer = _Eta()
    if state.finetune_from is None:
        _phase(run, 0, settings["epochs"], timer)
        if settings["finetune_epochs"]:
            _begin_finetune(run)
    if state.finetune_from is not None:
        try:  # a fresh ETA: a fine-tuning step costs 100x a warm-up step
            _phase(run, state.finetune_from, state.finetune_from + settings["finetune_epochs"], _Eta())
        finally:
            if run.feed is not None:
                run.feed.close()


def _phase(run: Run, first: int, end: int, timer: _Eta) -> None:
    """Epochs ``first`` .. ``end`` - 1 (the schedule restarts at ``first``), until early stopping."""
    state, settings = run.state, run.settings
    while state.epoch < end and not state.stopped_early:
        batches = epoch_batches(run.data.train, state.epoch, settings["seed"], settings["batch_size"],
                                settings["group"], settings["per_item"], run.data.n_split_items)
        mine = _shard(batches, run.dist)
        scale = learning_rate(run.recipe, 1.0, state.epoch - first, end - first, state)
        for group in run.optimizer.param_groups:
            group["lr"] = group["base_lr"] * scale
        lr = run.optimizer.param_groups[-1]["lr"]  # the head's (phase two's last group)
        pictures = None
        if run.feed is not None:
            pictures = run.feed.batches([run.data.train.caption_item[rows] for rows in mine], state.epoch,
                                        state.step)
        sums: dict[str, float] = {}
        done_here, started = 0, time.monotonic()
        run.checkpointed.train()
        for index, rows in enumerate(mine):
            if index < state.step:
                continue  # done before the interruption this run resumes from
            progress = (state.epoch * len(mine) + index) / max(1, end * len(mine))
            # Phase two has no pseudo pairs: their cached features come from the stock backbone.
            pseudo_rng = np.random.default_rng([settings["seed"], state.epoch, index, 1]) \
                if state.finetune_from is None else None
            batch = make_batch(run.data, rows, run.device, progress, pseudo_rng, _phase_two_visual(run, rows, pictures),
                               run.train_tokens if run.text is not None else None)
            terms = _train_step(run, batch)
            for name, value in terms.items():
                sums[name] = sums.get(name, 0.0) + value
            done_here += 1
            state.step, state.global_step = index + 1, state.global_step + 1
            timer.tick()
            run.reporter.step(events.Step(state.epoch + 1, index + 1, len(mine), loss=terms, lr=lr,
                                          eta_s=timer.eta(end * len(mine) - (state.epoch * len(mine) + index + 1),
                                                          end - state.epoch)),
                              last=index + 1 == len(mine))
            if _should_stop(run):
                _checkpoint(run)
                raise Interrupted(run.stop.signum or signal.SIGTERM)
        _end_epoch(run, {k: v / max(1, done_here) for k, v in sums.items()}, lr, timer,
                   time.monotonic() - started)


def _phase_two_visual(run: Run, rows: np.ndarray, pictures: Iterator[np.ndarray] | None) -> Pixels | Trunk | None:
    """The batch's visual input in phase two (None in phase one: the cached features)."""
    if pictures is not None:
        return to_pixels(next(pictures), run.device)
    if run.train_trunk is not None:
        items = run.data.train.caption_item[rows]
        return Trunk(torch.from_numpy(run.train_trunk[items]).to(run.device).float())
    return None


def _begin_finetune(run: Run) -> None:
    """Phase two from the warm-up's best head: the backbone joins, with its own optimizer group; the
    schedule, early stopping and the gradient scaler start afresh, the best rsum so far stays to beat."""
    settings, state = run.settings, run.state
    if settings["finetune_blocks"]:
        require_photos(run.data.train, "training")
        require_photos(run.data.val, "validation")
    ckpt.load_weights(Path(run.options.out) / ckpt.WEIGHTS_FILE, run.model)
    run.backbone, run.text = _phase_two_parts(settings, run.device)
    run.trainable = FineTuned(run.backbone, run.model, run.text)
    run.optimizer = make_optimizer(run.recipe, optimizer_groups(run.backbone, run.model, settings["finetune_lr"],
                                                                settings["finetune_head_lr"], run.text,
                                                                settings["text_lr"]), settings["lr"])
    run.scaler = torch.amp.GradScaler(run.device.type, enabled=run.device.type == "cuda")
    run.wrapped = _wrap(run.trainable, run.dist, run.device)
    state.finetune_from, state.step = state.epoch, 0
    state.bad_epochs, state.plateau_epochs, state.lr_scale, state.stopped_early = 0, 0, 1.0, False
    run.reporter.emit(events.Phase("finetune", state.epoch, settings["finetune_epochs"], settings["finetune_lr"],
                                   settings["finetune_blocks"], settings["text_layers"]))
    _open_pixels(run)
    _checkpoint(run)


def _open_pixels(run: Run) -> None:
    """Phase two's inputs. Pictures: the augmented training feed and the validation subset decoded once; or,
    when only the last blocks learn, the frozen trunk's output of every picture computed once (no augmentation).
    Captions, when the text encoder learns: every training and validation caption tokenised once."""
    if run.text is not None:
        run.train_tokens = Tokenized(run.data.train.captions, run.options.assets)
        run.val_tokens = Tokenized(run.val_subset.captions, run.options.assets)
    if run.backbone is None:
        return
    train_paths = item_paths(run.options.data, run.data.train.files)
    val_paths = item_paths(run.options.data, run.val_subset.files)
    if run.backbone.trainable_from:
        report = run.reporter.progress("fine-tuning cache")
        run.train_trunk = trunk_outputs(run.backbone, train_paths, run.device, report)
        run.val_trunk = trunk_outputs(run.backbone, val_paths, run.device, report)
        return
    run.feed = PixelFeed(train_paths, run.settings["seed"], threads=min(8, os.cpu_count() or 1))
    run.val_pixels = decode_for_eval(val_paths)


def _shard(batches: list[np.ndarray], world: Dist) -> list[np.ndarray]:
    if not world.active:
        return batches
    usable = len(batches) // world.world * world.world
    if usable == 0:
        raise TrainingError(f"--batch-size: {len(batches)} batches cannot be shared by {world.world} processes")
    return batches[:usable][world.rank::world.world]


def _train_step(run: Run, batch: PairBatch) -> dict[str, float]:
    """Forward, loss, backward, clip at :data:`GRAD_CLIP`, step; returns the loss terms as floats."""
    run.optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=run.device.type, dtype=torch.float16, enabled=run.device.type == "cuda"):
        terms = run.criterion(run.wrapped(batch), batch)
    if run.anchor and run.l2sp > 0:  # L2-SP: alpha/2 * sum ||w - w0||^2 over the starting weights
        drift = sum(((p - p0) ** 2).sum() for p, p0 in run.anchor)
        terms = {**terms, "l2sp": 0.5 * run.l2sp * drift}
        terms["total"] = terms["total"] + terms["l2sp"]
    total = terms["total"]
    if not torch.isfinite(total):
        raise TrainingError(f"the loss is not finite at epoch {run.state.epoch + 1}, step {run.state.step + 1}: "
                            f"{ {k: float(v) for k, v in terms.items()} }; try a lower --lr")
    run.scaler.scale(total).backward()
    run.scaler.unscale_(run.optimizer)
    nn.utils.clip_grad_norm_(run.checkpointed.parameters(), GRAD_CLIP)
    run.scaler.step(run.optimizer)
    run.scaler.update()
    return {k: float(v.detach()) for k, v in terms.items()}


def _should_stop(run: Run) -> bool:
    """Whether any rank was asked to stop (all ranks agree, so they stop after the same step)."""
    if not run.dist.active:
        return run.stop.requested
    flag = torch.tensor([1.0 if run.stop.requested else 0.0], device=run.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() and run.stop.signum is None:
        run.stop.request(signal.SIGTERM)
    return bool(flag.item())


def _end_epoch(run: Run, losses: dict[str, float], lr: float, timer: _Eta, train_s: float) -> None:
    """Validate (rank 0), keep the best weights, update the schedule, checkpoint, report."""
    state = run.state
    started = time.monotonic()
    decision = torch.zeros(2, device=run.device)
    if run.dist.main:
        val = run.val_subset
        if run.backbone is not None:
            cached = run.val_trunk if run.val_trunk is not None else run.val_pixels
            assert cached is not None
            val = with_visual(val, backbone_features(run.backbone, cached, run.device,
                                                     from_trunk=run.val_trunk is not None))
        if run.text is not None and run.val_tokens is not None:
            val = with_text(val, encode_captions(run.text, run.val_tokens, run.device, val.text.tokens is not None))
        report = quick_rsum(run.model, val, run.device, run.distractors)
        state.epoch += 1
        state.step = 0
        best = update_after_validation(run.recipe, state, report["rsum"], run.settings["patience"])
        state.history.append({"epoch": state.epoch, "loss": losses, "lr": lr, "val": report, "best": best,
                              "train_s": round(train_s, 2), "val_s": round(time.monotonic() - started, 2),
                              **_gpu_peak(run.device)})
        if best:
            save_best(Path(run.options.out), run.model, run.backbone, run.text, run.kept_text)
        _checkpoint(run)
        run.reporter.emit(events.EpochEnd(state.epoch, report, best=best, loss=losses, lr=lr))
        decision = torch.tensor([float(state.stopped_early), state.lr_scale], device=run.device)
    if run.dist.active:
        dist.broadcast(decision, 0)
        if not run.dist.main:
            state.epoch, state.step = state.epoch + 1, 0
            state.stopped_early, state.lr_scale = bool(decision[0].item()), float(decision[1].item())
    timer.validation(time.monotonic() - started)


def _gpu_peak(device: torch.device) -> dict[str, float]:
    """``{"gpu_peak_mib": ...}``, the most GPU memory this process's tensors have held, on CUDA; else ``{}``."""
    if device.type != "cuda":
        return {}
    return {"gpu_peak_mib": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}


def _checkpoint(run: Run) -> None:
    if not run.dist.main:
        return
    training = {"optimizer": run.optimizer.state_dict(), "scaler": run.scaler.state_dict(),
                "torch_rng": torch.get_rng_state()}
    ckpt.save_checkpoint(Path(run.options.out), run.checkpointed, training, run.state)


def _finish(run: Run) -> dict[str, Any]:
    """Evaluate the best epoch on the whole validation split, write metrics.json, export ONNX, report."""
    out = Path(run.options.out)
    ckpt.load_weights(out / ckpt.WEIGHTS_FILE, run.model)
    found = finetuned_backbone(out)
    report = evaluate_pairs(run.model, model_pairs(out, run.data.val, run.options.data, run.device), run.device)
    report.update(method=run.config.method, split=run.options.val_split, best_epoch=run.state.best_epoch,
                  epochs=run.state.epoch, backbone=found[0] if found else None,
                  finetune_from=run.state.finetune_from, **_gpu_peak(run.device))
    report = nan_to_none(report)
    ckpt.write_json(out / ckpt.METRICS_FILE, report)
    export_folder(out, run.model, out / ckpt.ONNX_DIR, trained_on=_trained_on(run))
    run.state.finished = True
    ckpt.atomic_write_text(out / ckpt.STATE_FILE, run.state.to_json() + "\n")
    run.reporter.emit(events.Done(str(out), report))
    return report


def _trained_on(run: Run) -> dict[str, int]:
    """How many photos and clips each visual branch learnt from (``trained_on`` in the manifest): this run's
    annotated and pseudo pairs plus, for a warm start, what the model it started from had learnt from. The engine
    never ranks with a branch that learnt from nothing (:mod:`engine.search.trained`)."""
    counts = {"image": 0, "video": 0}
    for pairs in (run.data.train, run.data.pseudo):
        if pairs is not None:
            clips = int(np.asarray(pairs.visual.is_clip).sum())
            counts["video"] += clips
            counts["image"] += len(pairs.visual.is_clip) - clips
    if run.options.init_from is not None:
        try:
            manifest = Path(run.options.init_from) / ckpt.ONNX_DIR / "manifest.json"
            before = json.loads(manifest.read_text()).get("trained_on")
        except (OSError, ValueError):
            before = None
        for kind, n in (before or {}).items():
            if kind in counts:
                counts[kind] += int(n)
    return counts


class _Eta:
    """Seconds left: the mean step time of this process so far times the steps left, plus validations."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.steps = 0
        self.val_s = 0.0
        self.val_count = 0

    def tick(self) -> None:
        self.steps += 1

    def validation(self, seconds: float) -> None:
        self.val_s += seconds
        self.val_count += 1

    def eta(self, steps_left: int, validations_left: int) -> float:
        train_s = time.monotonic() - self.start - self.val_s
        per_step = train_s / max(1, self.steps)
        per_validation = self.val_s / self.val_count if self.val_count else 0.0
        return round(per_step * steps_left + per_validation * validations_left, 1)
