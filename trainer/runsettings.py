"""What one training run is asked to do and what it resolves to: the options of a ``train`` command, the typed
settings they and the method's recipe (:class:`trainer.methods.recipe.Recipe`, kept beside each method) resolve to
(a resumed run keeps its own), and the optimizer, schedule and early-stopping rules the loop
(:mod:`trainer.train`) applies.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from trainer import checkpoint as ckpt
from trainer.batches import SAME
from trainer.data import feature_dims
from trainer.finetune import NUM_BLOCKS
from trainer.methods import ConfigError, MethodConfig, build_config, get_method, list_methods
from trainer.methods.recipe import Recipe
from trainer.sparse import SparseConfig

SCHEDULES = ("plateau", "cosine", "step", "constant")
FEATURE_DIM_FIELDS = ("image_dim", "image_regions", "sentence_dim", "text_word_dim")


TEXT_LAYERS = 6  # MiniLM-L6's transformer layers


class TrainingError(RuntimeError):
    """Training cannot start or go on (bad option, empty data, a loss that is not finite)."""


# Every registered method's recipe (each method module keeps its own beside its model: ``MethodSpec.recipe``).
RECIPES: Mapping[str, Recipe] = MappingProxyType({name: get_method(name).recipe for name in list_methods()})


# Phase two: ``finetune_blocks`` of the image backbone (0: its cached features) and ``text_layers`` of MiniLM
# (0: its cached features; trainer.textencoder) learn with the head.
FINETUNE_DEFAULTS = {"finetune_epochs": 0, "finetune_lr": 1e-5, "finetune_head_lr": 2e-5,
                     "finetune_blocks": NUM_BLOCKS, "text_layers": 0, "text_lr": 1e-5}


@dataclass
class TrainOptions:
    """One ``train`` command. ``None`` fields take the method's recipe value."""

    method: str
    data: Path
    out: Path
    train_split: str = "train"
    val_split: str = "dev"
    epochs: int | None = None
    device: str = "auto"
    sparse: SparseConfig = field(default_factory=SparseConfig)
    json_progress: bool = False
    resume: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    preset: str = "paper"
    seed: int = 0
    batch_size: int | None = None
    lr: float | None = None
    patience: int | None = None
    # a validation rsum equal to the best so far keeps the later epoch (a warm start validated on a few held-aside
    # captions: its rsum soon stops moving, and the first epoch that reached it would be all the run learnt)
    later_ties: bool = False
    # the last epoch is the model whatever its validation rsum (a stage that cannot move the rsum: PCME's sigma stage)
    keep_last: bool = False
    # only this part of the model learns (RetrievalModel.part_parameters; 'sigma': PCME's uncertainty side)
    train_only: str | None = None
    pseudo_pairs: bool = True
    pseudo_captions: str = "regions"  # where the pseudo pairs' text comes from (trainer.pseudocaptions)
    val_items: int | None = None
    schedule: str | None = None
    epoch_captions: int | None = None  # captions of each item per epoch; 0 = all (default: the recipe's)
    clip_captions: int | None = None  # captions of each GIF/video per epoch; 0 = all (default: as epoch_captions)
    assets: Path | None = None
    # Phase two (trainer.finetune); None: the saved run's value when resuming, else FINETUNE_DEFAULTS.
    finetune_epochs: int | None = None  # epochs with the backbone fine-tuned
    finetune_lr: float | None = None  # the backbone's rate
    finetune_head_lr: float | None = None  # the head's rate
    finetune_blocks: int | None = None  # the last N MBConv blocks learn (fewer than all: their input is cached)
    text_layers: int | None = None  # the last N MiniLM layers learn (0: the cached text features)
    text_lr: float | None = None  # the text encoder's rate
    # Warm start (:func:`_warm_start`): a model folder of the same method whose config and weights the run
    # starts from, and the L2-SP strength pulling the weights back toward them (None: WARM_START_L2SP).
    init_from: Path | None = None
    l2sp: float | None = None


def resolve_config(method: str, overrides: dict[str, Any], preset: str = "paper",
                   assets: Path | None = None) -> MethodConfig:
    """The config a run trains: paper defaults, ``preset``, the recipe's overrides, the user's overrides,
    then the cached features' sizes. :class:`ConfigError` names a bad field."""
    recipe = get_method(method).recipe  # unknown method -> ConfigError naming 'method'
    for name in FEATURE_DIM_FIELDS:
        if name in overrides:
            raise ConfigError(f"{name}: fixed by the cached features; it cannot be set")
    dims: dict[str, Any] = {**feature_dims(assets), "text_word_dim": None}
    return build_config(method, {**recipe.overrides, **overrides, **dims}, preset)


def make_optimizer(recipe: Recipe, params: list[nn.Parameter] | list[dict], lr: float) -> torch.optim.Optimizer:
    """Adam, AMSGrad (PVSE) or AdamW (PCME's AdamP stand-in) with the recipe's weight decay. Every parameter
    group keeps its ``base_lr`` (``lr`` unless the group names its own), which the schedule scales.

    Parameters on CUDA get the fused implementation, one kernel for all of them: the step of phase two is
    launch-bound there (EfficientNet-Lite0's training step alone 1.6-1.8k -> 2.8k pictures/s on an H100,
    ``bench-results/gpu-check.md``)."""
    tensors = [p for entry in params for p in (entry["params"] if isinstance(entry, dict) else [entry])]
    fused = {"fused": True} if tensors and all(p.is_cuda for p in tensors) else {}
    if recipe.optimizer == "adamw":
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=recipe.weight_decay,
                                                             **fused)
    elif recipe.optimizer in ("adam", "amsgrad"):
        optimizer = torch.optim.Adam(params, lr=lr, weight_decay=recipe.weight_decay,
                                     amsgrad=recipe.optimizer == "amsgrad", **fused)
    else:
        raise TrainingError(f"optimizer: unknown {recipe.optimizer!r}")
    for group in optimizer.param_groups:
        group.setdefault("base_lr", lr)
    return optimizer


def load_optimizer(optimizer: torch.optim.Optimizer, saved: dict[str, Any], lr: float) -> None:
    """Restore a checkpoint's optimizer state; the groups keep this run's implementation (fused on CUDA, see
    :func:`make_optimizer`) whichever device saved them, and get ``base_lr`` if an older run did not record it."""
    optimizer.load_state_dict(saved)
    for group in optimizer.param_groups:
        group.setdefault("base_lr", lr)
        group["fused"] = optimizer.defaults.get("fused")


def learning_rate(recipe: Recipe, base: float, epoch: int, epochs: int, state: ckpt.TrainerState) -> float:
    """The rate of (0-based) ``epoch`` under the recipe's schedule (see :class:`Recipe`)."""
    if recipe.schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * epoch / max(1, epochs)))
    if recipe.schedule == "step":
        return base * (recipe.schedule_factor if recipe.step_epoch and epoch >= recipe.step_epoch else 1.0)
    if recipe.schedule == "plateau":
        return base * state.lr_scale
    return base


def update_after_validation(recipe: Recipe, state: ckpt.TrainerState, rsum: float, patience: int,
                            later_ties: bool = False, keep_last: bool = False) -> bool:
    """Record a validation rsum; returns True when it is the best so far (``later_ties``: or equal to it;
    ``keep_last``: always). Updates the plateau schedule and the early-stopping counter."""
    improved = (keep_last or state.best_rsum is None or rsum > state.best_rsum
                or (later_ties and rsum >= state.best_rsum - 1e-9))
    if improved:
        state.best_rsum, state.best_epoch, state.bad_epochs, state.plateau_epochs = rsum, state.epoch, 0, 0
    else:
        state.bad_epochs += 1
        state.plateau_epochs += 1
        if recipe.schedule == "plateau" and state.plateau_epochs >= recipe.schedule_patience:
            state.lr_scale *= recipe.schedule_factor
            state.plateau_epochs = 0
    state.stopped_early = state.bad_epochs >= patience
    return improved


@dataclass(frozen=True)
class RunSettings:
    """The hyper-parameters a run resolved (``--lr``, ``--batch-size``, ... over the method's recipe, or a resumed
    run's saved ones). Phase two (:mod:`trainer.finetune`): ``finetune_epochs`` epochs in which the last
    ``finetune_blocks`` backbone blocks (rate ``finetune_lr``) and the last ``text_layers`` MiniLM layers (rate
    ``text_lr``) learn with the head (rate ``finetune_head_lr``)."""

    lr: float
    batch_size: int
    epochs: int
    patience: int
    seed: int
    group: int
    per_item: int | None
    val_items: int
    schedule: str
    finetune_epochs: int
    finetune_lr: float
    finetune_head_lr: float
    finetune_blocks: int
    text_layers: int
    text_lr: float
    per_clip: int | None = SAME  # captions of a GIF/video an epoch (None: all; SAME: per_item)

    def to_json(self) -> dict[str, Any]:
        """The settings as the state file's ``options`` keep them."""
        return dataclasses.asdict(self)

    def check(self) -> None:
        """:class:`TrainingError` naming the command-line option of a value out of range."""
        if self.schedule not in SCHEDULES:
            raise TrainingError(f"--schedule: expected one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        for name in ("lr", "batch_size", "epochs", "patience", "val_items", "finetune_lr", "finetune_head_lr",
                     "text_lr"):
            if getattr(self, name) <= 0:
                raise TrainingError(f"--{name.replace('_', '-')}: must be positive, got {getattr(self, name)}")
        if not 0 <= self.finetune_blocks <= NUM_BLOCKS:
            raise TrainingError(f"--finetune-blocks: between 0 and {NUM_BLOCKS}, got {self.finetune_blocks}")
        if not 0 <= self.text_layers <= TEXT_LAYERS:
            raise TrainingError(f"--text-layers: between 0 and {TEXT_LAYERS}, got {self.text_layers}")
        if self.finetune_epochs and not (self.finetune_blocks or self.text_layers):
            raise TrainingError("--finetune-epochs: nothing to fine-tune with --finetune-blocks 0 and --text-layers 0")
        if self.finetune_epochs < 0:
            raise TrainingError(f"--finetune-epochs: must be 0 or more, got {self.finetune_epochs}")
        if self.batch_size < 2:
            raise TrainingError(f"--batch-size: must be at least 2, got {self.batch_size}")


def resolve_settings(options: TrainOptions, recipe: Recipe, saved: ckpt.TrainerState | None) -> RunSettings:
    """Resolved hyper-parameters; a resumed run keeps its saved ones (only the epoch budget and phase two's
    settings given on the command line may change)."""
    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    fresh = RunSettings(
        lr=pick(options.lr, recipe.lr), batch_size=pick(options.batch_size, recipe.batch_size),
        epochs=pick(options.epochs, recipe.epochs), patience=pick(options.patience, recipe.patience),
        seed=options.seed, group=recipe.group, per_item=_per_item(options, recipe),
        val_items=pick(options.val_items, recipe.val_items), schedule=pick(options.schedule, recipe.schedule),
        per_clip=_per_clip(options),
        **{k: pick(getattr(options, k), v) for k, v in FINETUNE_DEFAULTS.items()})
    fresh.check()
    if saved is None:
        return fresh
    kept = dataclasses.replace(fresh, **{k: v for k, v in saved.options.items() if k in fresh.to_json()})
    # given on the command line, the epoch budget and phase two's settings win
    kept = dataclasses.replace(kept, epochs=pick(options.epochs, kept.epochs),
                               **{name: pick(getattr(options, name), getattr(kept, name))
                                  for name in FINETUNE_DEFAULTS})
    recorded = saved.options.get("finetune_blocks")  # None: not recorded by the run (the command must say)
    if saved.finetune_from is not None and recorded is not None and kept.finetune_blocks != recorded:
        raise TrainingError(f"--finetune-blocks: {options.out} is fine-tuning {recorded} blocks; it cannot change "
                            "mid-run")
    return kept


def _per_item(options: TrainOptions, recipe: Recipe) -> int | None:
    if options.epoch_captions is None:
        return recipe.per_item
    if options.epoch_captions < 0:
        raise TrainingError(f"--epoch-captions: must be 0 (all) or more, got {options.epoch_captions}")
    return options.epoch_captions or None


def _per_clip(options: TrainOptions) -> int | None:
    if options.clip_captions is None:
        return SAME
    if options.clip_captions < 0:
        raise TrainingError(f"--clip-captions: must be 0 (all) or more, got {options.clip_captions}")
    return options.clip_captions or None


def jsonable(settings: RunSettings, options: TrainOptions) -> dict[str, Any]:
    """What the state file's ``options`` record of a run: its settings and what it trained on."""
    return {**settings.to_json(), "data": str(options.data), "train_split": options.train_split,
            "val_split": options.val_split, "annotated_fraction": options.sparse.annotated_fraction,
            "captions_per_image": options.sparse.captions_per_image, "sparse_seed": options.sparse.seed,
            "preset": options.preset, "pseudo_pairs": options.pseudo_pairs,
            "pseudo_captions": options.pseudo_captions,
            "extra_annotated": list(options.sparse.extra_annotated)}
