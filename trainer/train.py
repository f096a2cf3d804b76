"""The training loop: cached features in, a checkpointed, validated, exported model folder out.

One run (``python -m trainer train``) resolves the method's recipe (``MethodSpec.recipe``: its config overrides,
optimizer, learning rate, schedule, epochs, batch size) and the user's options into typed settings
(:class:`trainer.runsettings.RunSettings`) plus the user's ``--set`` overrides, loads the
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

Interruption: SIGINT / SIGTERM set a :class:`~trainer.reporting.StopRequest`; the loop finishes its current
step, writes a resumable checkpoint (including how far into the epoch it got) and raises
:class:`~trainer.reporting.Interrupted`, which the CLI turns into exit status 130 / 143. ``--resume`` continues
from the last checkpoint, mid-epoch included. Distributed data parallel: :mod:`trainer.device`. A warm start
(``--init-from``): :mod:`trainer.warmstart`; phase two's parts: :mod:`trainer.phasetwo`.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from engine.features.text import MiniLMEncoder
from engine.progress import Progress
from engine.trainercontract import events
from trainer import checkpoint as ckpt
from trainer.batches import epoch_batches, make_batch
from trainer.data import FeatureNeeds, FeatureSource, PairSet
from trainer.device import Dist, gpu_peak, init_distributed, resolve_device, shard, wrap
from trainer.evaluation import evaluate_pairs, nan_to_none, quick_rsum
from trainer.exporting import export_folder
from trainer.finetune import (
    backbone_features,
    finetuned_backbone,
    model_pairs,
    optimizer_groups,
    require_photos,
    save_best,
    with_visual,
)
from trainer.learntfrom import trained_on, write_caption_words
from trainer.methods import MethodConfig, PairBatch, RetrievalModel, build_loss, build_model, get_method
from trainer.phasetwo import PhaseTwo, batch_visual, open_inputs, phase_two
from trainer.reporting import Eta, Interrupted, Reporter, StopRequest
from trainer.runsettings import (  # noqa: F401 - re-exported: the trainer's callers import them from here
    FEATURE_DIM_FIELDS,
    FINETUNE_DEFAULTS,
    RECIPES,
    SCHEDULES,
    TEXT_LAYERS,
    Recipe,
    RunSettings,
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
from trainer.splits import TrainingData, load_training_data
from trainer.textencoder import encode_captions, with_text
from trainer.warmstart import WarmStart, begin_warm_start, start_text, warm_start_config

log = logging.getLogger(__name__)

GRAD_CLIP = 2.0


@dataclass
class Optimisation:
    """What takes a step: the model as the forward pass sees it (or its DDP wrapper), the criterion, the
    optimizer and AMP's gradient scaler. Phase two replaces it."""

    wrapped: nn.Module
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler


@dataclass
class Run:
    """Everything one training process holds: what it was asked (``options``, the method's ``recipe``, the
    resolved ``settings`` and ``config``), the model, its data and progress (``state``), where it runs, how it
    reports and is stopped, and the parts only some runs have (phase two, a warm start)."""

    options: TrainOptions
    recipe: Recipe
    settings: RunSettings
    config: MethodConfig
    model: RetrievalModel
    optim: Optimisation
    data: TrainingData
    val_subset: PairSet  # the per-epoch validation's items (at most ``settings.val_items``)
    state: ckpt.TrainerState
    device: torch.device
    dist: Dist
    reporter: Reporter
    stop: StopRequest
    phase_two: PhaseTwo | None = None
    warm: WarmStart | None = None

    @property
    def checkpointed(self) -> nn.Module:
        """What checkpoints hold: the model, or phase two's backbone, model and text encoder together."""
        return self.phase_two.trainable if self.phase_two is not None else self.model


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
        config = warm_start_config(options)
    else:
        config = resolve_config(options.method, options.overrides, options.preset, options.assets)
    recipe = get_method(options.method).recipe
    settings = resolve_settings(options, recipe, saved)
    recipe = dataclasses.replace(recipe, schedule=settings.schedule)
    torch.manual_seed(settings.seed)
    if options.train_only and settings.finetune_epochs:
        raise TrainingError("--train-only: one part of the head learns alone; it does not go with --finetune-epochs")
    data = _load_data(options, config, world, source, stop)
    if settings.finetune_epochs and settings.finetune_blocks and (saved is None or saved.finetune_from is None):
        require_photos(data.train, "training")  # refused before the warm-up, not after it
        require_photos(data.val, "validation")
    if settings.text_layers and not config.text_encoder.startswith("minilm"):
        raise TrainingError(f"--text-layers: this {config.method} model reads {config.text_encoder} word vectors, "
                            "not MiniLM; fine-tuning MiniLM needs text_encoder=minilm or minilm-sentence")
    if not saved:
        config = config.fitted_to(data.train.n_items)
    model = build_model(config).to(device)
    parts = None
    if saved is not None and saved.finetune_from is not None:  # resuming inside phase two
        parts = phase_two(settings, model, device)
        optimizer = make_optimizer(recipe, optimizer_groups(parts.backbone, model, settings.finetune_lr,
                                                            settings.finetune_head_lr, parts.text, settings.text_lr),
                                   settings.lr)
    else:
        try:
            groups = model.trainable_groups(settings.lr, options.train_only)
        except ValueError as exc:
            raise TrainingError(f"--train-only: {exc}") from None
        optimizer = make_optimizer(recipe, groups, settings.lr)
    scaler = torch.amp.GradScaler(device.type, enabled=device.type == "cuda")
    trainable = parts.trainable if parts is not None else model
    state = ckpt.TrainerState(method=config.method, options=jsonable(settings, options))
    if saved:
        state = _restore(out, trainable, optimizer, scaler, settings)
        reporter.emit(events.Resumed(state.epoch, state.step))
    elif world.main:
        out.mkdir(parents=True, exist_ok=True)
        ckpt.save_config(out, config)
    run = Run(options, recipe, settings, config, model,
              Optimisation(wrap(trainable, world, device), build_loss(config).to(device), optimizer, scaler),
              data, _validation_subset(data.val, settings.val_items, settings.seed), state, device, world,
              reporter, stop, phase_two=parts)
    if options.init_from is not None:
        _warm_start(run, saved is None)
    if parts is not None:
        _open_inputs(run)
    return run


def _warm_start(run: Run, fresh: bool) -> None:
    """Begin from ``--init-from`` (:mod:`trainer.warmstart`) and, in a fresh run, score the start on the
    validation subset as epoch 0: an epoch is kept only if it beats the model the run started from."""
    warm = run.warm = begin_warm_start(run.options, run.model, run.config, run.device, run.data.pseudo,
                                       run.settings.seed, fresh)
    run.state.options.update(init_from=str(warm.start), l2sp=warm.l2sp)
    if fresh and run.dist.main:
        report = quick_rsum(run.model, run.val_subset, run.device, warm.distractors)
        run.state.best_rsum, run.state.best_epoch = report["rsum"], 0
        save_best(Path(run.options.out), run.model, None, kept_text=warm.kept_text)
        run.reporter.emit(events.EpochEnd(0, report, best=True, loss={}, lr=0.0))


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


def _restore(out: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
             settings: RunSettings) -> ckpt.TrainerState:
    """Load the checkpoint: weights, optimizer, gradient scaler, RNG; the epoch budget may have changed."""
    state, training = ckpt.load_checkpoint(out, model)
    load_optimizer(optimizer, training["optimizer"], settings.lr)
    scaler.load_state_dict(training["scaler"])
    torch.set_rng_state(training["torch_rng"])
    state.finished = False
    # the budget may have changed; settings an older run did not record (phase two's) are recorded now
    recorded = settings.to_json()
    state.options = {**recorded, **state.options, "epochs": settings.epochs,
                     **{name: recorded[name] for name in FINETUNE_DEFAULTS}}
    return state


def _load_data(options: TrainOptions, config: MethodConfig, world: Dist, source: FeatureSource,
               stop: StopRequest) -> TrainingData:
    """Rank 0 loads first (it may have to compute features); the other ranks then read the caches."""
    probe = build_model(config.fitted_to(1))
    needs = FeatureNeeds.of(probe)
    del probe
    user_progress = source.progress

    def progress(p: Progress) -> None:
        if stop.requested:
            raise Interrupted(stop.signum or signal.SIGTERM)
        user_progress(p)

    source.progress = progress
    kept = start_text(options)
    if kept is not None:
        source.use_minilm(MiniLMEncoder(options.assets, graph=kept[2], name=kept[0]), kept[0])
    if world.active and not world.main:
        dist.barrier()
    try:
        # un-annotated items with pseudo captions: A3VSE's D^u, VSE's pseudo pairs, a warm start's distractors
        pseudo = options.pseudo_pairs and (config.learns_from_pseudo_pairs or options.init_from is not None)
        data = load_training_data(options.data, options.train_split, options.val_split, options.sparse, needs,
                                  source, with_pseudo=pseudo, pseudo_captions=options.pseudo_captions)
    finally:
        source.progress = user_progress
        if world.active and world.main:
            dist.barrier()
    log.info("training on %d items / %d captions, validating on %d items / %d captions%s",
             data.train.n_items, len(data.train.captions), data.val.n_items, len(data.val.captions),
             f", {data.pseudo.n_items} pseudo pairs" if data.pseudo else "")
    return data


def _validation_subset(val: PairSet, limit: int, seed: int) -> PairSet:
    if val.n_items <= limit:
        return val
    chosen = np.sort(np.random.default_rng(seed).choice(val.n_items, size=limit, replace=False))
    return val.subset(chosen)


def _loop(run: Run) -> None:
    """Phase one (the warm-up on cached features), then phase two when ``finetune_epochs`` asks for it."""
    state, settings = run.state, run.settings
    timer = Eta()
    if state.finetune_from is None:
        _phase(run, 0, settings.epochs, timer)
        if settings.finetune_epochs:
            _begin_finetune(run)
    if state.finetune_from is not None:
        try:  # a fresh ETA: a fine-tuning step costs 100x a warm-up step
            _phase(run, state.finetune_from, state.finetune_from + settings.finetune_epochs, Eta())
        finally:
            if run.phase_two is not None:
                run.phase_two.close()


def _phase(run: Run, first: int, end: int, timer: Eta) -> None:
    """Epochs ``first`` .. ``end`` - 1 (the schedule restarts at ``first``), until early stopping."""
    state, settings, parts = run.state, run.settings, run.phase_two
    while state.epoch < end and not state.stopped_early:
        batches = epoch_batches(run.data.train, state.epoch, settings.seed, settings.batch_size,
                                settings.group, settings.per_item, run.data.n_split_items, settings.per_clip)
        mine = shard(batches, run.dist)
        scale = learning_rate(run.recipe, 1.0, state.epoch - first, end - first, state)
        for group in run.optim.optimizer.param_groups:
            group["lr"] = group["base_lr"] * scale
        lr = run.optim.optimizer.param_groups[-1]["lr"]  # the head's (phase two's last group)
        pictures = None
        if parts is not None and parts.feed is not None:
            pictures = parts.feed.batches([run.data.train.caption_item[rows] for rows in mine], state.epoch,
                                          state.step)
        sums: dict[str, float] = {}
        done_here, started = 0, time.monotonic()
        run.checkpointed.train()
        for index, rows in enumerate(mine):
            if index < state.step:
                continue  # done before the interruption this run resumes from
            progress = (state.epoch * len(mine) + index) / max(1, end * len(mine))
            # Phase two has no pseudo pairs: their cached features come from the stock backbone.
            pseudo_rng = np.random.default_rng([settings.seed, state.epoch, index, 1]) \
                if state.finetune_from is None else None
            visual = batch_visual(parts, run.data.train.caption_item[rows], pictures, run.device) \
                if parts is not None else None
            pooled = (np.random.default_rng([settings.seed, state.epoch, index, 2]), run.config.pooled_regions) \
                if run.config.pooled_regions > 0 and visual is None else None
            batch = make_batch(run.data, rows, run.device, progress, pseudo_rng, visual,
                               parts.train_tokens if parts is not None and parts.text is not None else None,
                               pooled_regions=pooled)
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


def _begin_finetune(run: Run) -> None:
    """Phase two from the warm-up's best head: the backbone joins, with its own optimizer group; the
    schedule, early stopping and the gradient scaler start afresh, the best rsum so far stays to beat."""
    settings, state = run.settings, run.state
    if settings.finetune_blocks:
        require_photos(run.data.train, "training")
        require_photos(run.data.val, "validation")
    ckpt.load_weights(Path(run.options.out) / ckpt.WEIGHTS_FILE, run.model)
    parts = run.phase_two = phase_two(settings, run.model, run.device)
    optimizer = make_optimizer(run.recipe, optimizer_groups(parts.backbone, run.model, settings.finetune_lr,
                                                            settings.finetune_head_lr, parts.text,
                                                            settings.text_lr), settings.lr)
    run.optim = Optimisation(wrap(parts.trainable, run.dist, run.device), run.optim.criterion, optimizer,
                             torch.amp.GradScaler(run.device.type, enabled=run.device.type == "cuda"))
    state.finetune_from, state.step = state.epoch, 0
    state.bad_epochs, state.plateau_epochs, state.lr_scale, state.stopped_early = 0, 0, 1.0, False
    run.reporter.emit(events.Phase("finetune", state.epoch, settings.finetune_epochs, settings.finetune_lr,
                                   settings.finetune_blocks, settings.text_layers))
    _open_inputs(run)
    _checkpoint(run)


def _open_inputs(run: Run) -> None:
    assert run.phase_two is not None
    open_inputs(run.phase_two, run.options.data, run.data.train, run.val_subset, run.options.assets,
                run.settings.seed, run.device, run.reporter.progress("fine-tuning cache"))


def _train_step(run: Run, batch: PairBatch) -> dict[str, float]:
    """Forward, loss, backward, clip at :data:`GRAD_CLIP`, step; returns the loss terms as floats."""
    optim = run.optim
    optim.optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=run.device.type, dtype=torch.float16, enabled=run.device.type == "cuda"):
        terms = optim.criterion(optim.wrapped(batch), batch)
        penalty = run.warm.penalty() if run.warm is not None else None
        if penalty is not None:  # L2-SP toward the weights the run started from
            terms = {**terms, "l2sp": penalty}
            terms["total"] = terms["total"] + terms["l2sp"]
    total = terms["total"]
    if not torch.isfinite(total):
        raise TrainingError(f"the loss is not finite at epoch {run.state.epoch + 1}, step {run.state.step + 1}: "
                            f"{ {k: float(v) for k, v in terms.items()} }; try a lower --lr")
    optim.scaler.scale(total).backward()
    optim.scaler.unscale_(optim.optimizer)
    nn.utils.clip_grad_norm_(run.checkpointed.parameters(), GRAD_CLIP)
    optim.scaler.step(optim.optimizer)
    optim.scaler.update()
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


def _validation_pairs(run: Run) -> PairSet:
    """The validation subset as the model sees it now: in phase two, encoded by the backbone and the text
    encoder being fine-tuned."""
    val, parts = run.val_subset, run.phase_two
    if parts is None:
        return val
    if parts.backbone is not None:
        cached = parts.val_trunk if parts.val_trunk is not None else parts.val_pixels
        assert cached is not None
        val = with_visual(val, backbone_features(parts.backbone, cached, run.device,
                                                 from_trunk=parts.val_trunk is not None))
    if parts.text is not None and parts.val_tokens is not None:
        val = with_text(val, encode_captions(parts.text, parts.val_tokens, run.device, val.text.tokens is not None))
    return val


def _end_epoch(run: Run, losses: dict[str, float], lr: float, timer: Eta, train_s: float) -> None:
    """Validate (rank 0), keep the best weights, update the schedule, checkpoint, report."""
    state, parts = run.state, run.phase_two
    started = time.monotonic()
    decision = torch.zeros(2, device=run.device)
    if run.dist.main:
        report = quick_rsum(run.model, _validation_pairs(run), run.device,
                            run.warm.distractors if run.warm is not None else None)
        state.epoch += 1
        state.step = 0
        best = update_after_validation(run.recipe, state, report["rsum"], run.settings.patience,
                                       run.options.later_ties, run.options.keep_last)
        state.history.append({"epoch": state.epoch, "loss": losses, "lr": lr, "val": report, "best": best,
                              "train_s": round(train_s, 2), "val_s": round(time.monotonic() - started, 2),
                              **gpu_peak(run.device)})
        if best:
            save_best(Path(run.options.out), run.model, parts.backbone if parts else None,
                      parts.text if parts else None, run.warm.kept_text if run.warm is not None else None)
        _checkpoint(run)
        run.reporter.emit(events.EpochEnd(state.epoch, report, best=best, loss=losses, lr=lr))
        decision = torch.tensor([float(state.stopped_early), state.lr_scale], device=run.device)
    if run.dist.active:
        dist.broadcast(decision, 0)
        if not run.dist.main:
            state.epoch, state.step = state.epoch + 1, 0
            state.stopped_early, state.lr_scale = bool(decision[0].item()), float(decision[1].item())
    timer.validation(time.monotonic() - started)


def _checkpoint(run: Run) -> None:
    if not run.dist.main:
        return
    training = {"optimizer": run.optim.optimizer.state_dict(), "scaler": run.optim.scaler.state_dict(),
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
                  finetune_from=run.state.finetune_from, **gpu_peak(run.device))
    report = nan_to_none(report)
    ckpt.write_json(out / ckpt.METRICS_FILE, report)
    export_folder(out, run.model, out / ckpt.ONNX_DIR,
                  trained_on=trained_on(run.data.train, run.data.pseudo, run.options.init_from))
    write_caption_words(out, run.data.train, run.options.init_from)
    run.state.finished = True
    ckpt.atomic_write_text(out / ckpt.STATE_FILE, run.state.to_json() + "\n")
    run.reporter.emit(events.Done(str(out), report))
    return report
