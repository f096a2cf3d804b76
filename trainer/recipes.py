"""What one training run is asked to do and how each method trains by default: the options of a ``train``
command, the recipes (optimizer, learning rate, schedule, epochs, batch), the settings they resolve to (a resumed
run keeps its own), and the optimizer, schedule and early-stopping rules the loop (:mod:`trainer.train`) applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer import checkpoint as ckpt
from trainer.data import feature_dims
from trainer.finetune import NUM_BLOCKS
from trainer.methods import ConfigError, MethodConfig, build_config, get_method
from trainer.sparse import SparseConfig

SCHEDULES = ("plateau", "cosine", "step", "constant")
FEATURE_DIM_FIELDS = ("image_dim", "image_regions", "sentence_dim", "text_word_dim")


TEXT_LAYERS = 6  # MiniLM-L6's transformer layers


class TrainingError(RuntimeError):
    """Training cannot start or go on (bad option, empty data, a loss that is not finite)."""


@dataclass(frozen=True)
class Recipe:
    """How a method trains by default on cached features.

    ``schedule``: 'plateau' multiplies the learning rate by ``schedule_factor`` after ``schedule_patience``
    epochs without a better validation rsum; 'cosine' anneals it to 0 over the run; 'step' multiplies it by
    ``schedule_factor`` from epoch ``step_epoch`` on; 'constant' keeps it. ``patience`` epochs without
    improvement stop the run.
    ``per_item`` captions of every item make an epoch (None: all of them); ``group`` > 1 puts that many
    captions of one item into the same batch (neighbourhood sampling).
    ``val_items`` caps the items of the per-epoch validation (the final report uses them all).
    """

    overrides: dict[str, Any]
    optimizer: str = "adam"
    lr: float = 2e-4
    weight_decay: float = 0.0
    schedule: str = "plateau"
    schedule_factor: float = 0.5
    schedule_patience: int = 1
    step_epoch: int = 0
    epochs: int = 15
    patience: int = 3
    batch_size: int = 128
    group: int = 1
    per_item: int | None = 1
    val_items: int = 1000


_SENTENCE = {"text_encoder": "minilm-sentence"}
# An epoch shows every item once with one of its captions (``per_item=1``): on cached features five caption
# passes cost five times as much and overfit as soon (linear VSE++ on Flickr8k peaks after ~15 such epochs).
# The methods that attend over the 49 local features of a photo cost 10-100x more per step than the global
# ones on a CPU, so A3VSE's budget is 12 epochs (it keeps its schedule's proportions: decay after 2/3) and
# PCME's 6 all-caption ones; PVSE's steps are cheap enough (~13 s an epoch here) for 30.
RECIPES: dict[str, Recipe] = {
    # VSE++: Adam 2e-4 (Faghri et al.), halved when the validation rsum stalls.
    "vse": Recipe(dict(_SENTENCE), "adam", 2e-4, epochs=30, patience=5, schedule_patience=2),
    # PVSE §3.5 / §4: AMSGrad, lr 2e-4 halved when validation stagnates, batch 128. The margin rho is
    # cross-validated over [0.1, 1.0] there. On Flickr8k dev, 0.1 with 12 epochs peaked at rsum 273.8 (epoch 12);
    # 0.2 (VSE++'s) with vse's 30-epoch budget reaches 288.0 (epoch 25).
    "pvse": Recipe({**_SENTENCE, "margin": 0.2}, "amsgrad", 2e-4, epochs=30, patience=4, schedule_patience=2),
    # PCME uses AdamP with a cosine schedule; AdamP is not installed, AdamW (decoupled weight decay, the
    # part of AdamP that matters for un-normalised heads) stands in for it. D=512 (PCME's CUB size) halves
    # the J x J sample distances of the loss.
    # Every caption of an item each epoch: 6 such epochs (2,820 steps on Flickr8k) reach dev rsum 269.0 and a
    # sigma-decile Spearman of -0.78 text-to-image, against 242.4 / -0.54 for 12 one-caption epochs (564 steps).
    # PCME++'s closed-form distance (--set match_distance=csd) is not the default: only its first epoch of six
    # has been measured (docs/benchmarks.md, "PCME's uncertainty").
    # sigma_lr_scale (the sigma side's own rate, not in the paper) is not the default either: at 20x, on the full
    # train split (120-235 steps, seed 0), sigma spread 2-8x wider with either loss but followed how crowded an
    # item's neighbourhood is (Spearman with the mean cosine of its 10 nearest items +0.5 to +0.8), not whether it
    # is retrieved: sigma-decile Spearman of R@1 i2t/t2i +0.07/-0.05 (csd; control +0.19/-0.37), +0.05/-0.40
    # (sampled; controls -0.54/-0.23 and, seed 1, -0.58/+0.13): bench-results/pcme-uncertainty-sigma.md.
    "pcme": Recipe({**_SENTENCE, "embed_dim": 512}, "adamw", 2e-4, weight_decay=1e-4, schedule="cosine",
                   epochs=6, patience=4, per_item=None),
    # A3VSE §4.3: Adam, weight decay 1e-6, clip 2.0, batch 128, 24 epochs with a 10x lower rate after 16 (here
    # 12 and 8); the paper's lambdas are the config defaults. Its attention reads MiniLM token vectors.
    "a3vse": Recipe({"text_encoder": "minilm"}, "adam", 2e-4, weight_decay=1e-6, schedule="step",
                    schedule_factor=0.1, step_epoch=8, epochs=12, patience=4),
    # Two-branch networks §5: two captions of each image side by side so the neighbourhood term has pairs.
    "twobranch-embed": Recipe(dict(_SENTENCE), "adam", 2e-4, weight_decay=1e-5, epochs=30, patience=5,
                              schedule_patience=2, group=2, per_item=2),
    # The similarity network scores every (item, caption) pair of the validation matrix: fewer items.
    "twobranch-sim": Recipe(dict(_SENTENCE), "adam", 2e-4, weight_decay=1e-5, epochs=30, patience=5,
                            schedule_patience=2, val_items=250),
    # Zheng et al. stage II (ranking + instance loss) directly on frozen image features.
    "instance": Recipe(dict(_SENTENCE), "adam", 2e-4, epochs=30, patience=5, schedule_patience=2),
}


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
    pseudo_pairs: bool = True
    val_items: int | None = None
    schedule: str | None = None
    epoch_captions: int | None = None  # captions of each item per epoch; 0 = all (default: the recipe's)
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
    recipe = RECIPES.get(method)
    get_method(method)  # unknown method -> ConfigError naming 'method'
    for name in FEATURE_DIM_FIELDS:
        if name in overrides:
            raise ConfigError(f"{name}: fixed by the cached features; it cannot be set")
    dims: dict[str, Any] = {**feature_dims(assets), "text_word_dim": None}
    return build_config(method, {**(recipe.overrides if recipe else {}), **overrides, **dims}, preset)


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


def update_after_validation(recipe: Recipe, state: ckpt.TrainerState, rsum: float, patience: int) -> bool:
    """Record a validation rsum; returns True when it is the best so far. Updates the plateau schedule and
    the early-stopping counter."""
    improved = state.best_rsum is None or rsum > state.best_rsum
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



def resolve_settings(options: TrainOptions, recipe: Recipe, saved: ckpt.TrainerState | None) -> dict[str, Any]:
    """Resolved hyper-parameters; a resumed run keeps its saved ones (only the epoch budget may change)."""
    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    fresh = {"lr": pick(options.lr, recipe.lr), "batch_size": pick(options.batch_size, recipe.batch_size),
             "epochs": pick(options.epochs, recipe.epochs), "patience": pick(options.patience, recipe.patience),
             "seed": options.seed, "group": recipe.group, "per_item": _per_item(options, recipe),
             "val_items": pick(options.val_items, recipe.val_items),
             "schedule": pick(options.schedule, recipe.schedule),
             **{k: pick(getattr(options, k), v) for k, v in FINETUNE_DEFAULTS.items()}}
    if fresh["schedule"] not in SCHEDULES:
        raise TrainingError(f"--schedule: expected one of {', '.join(SCHEDULES)}, got {fresh['schedule']!r}")
    for name in ("lr", "batch_size", "epochs", "patience", "val_items", "finetune_lr", "finetune_head_lr", "text_lr"):
        if fresh[name] <= 0:
            raise TrainingError(f"--{name.replace('_', '-')}: must be positive, got {fresh[name]}")
    if not 0 <= fresh["finetune_blocks"] <= NUM_BLOCKS:
        raise TrainingError(f"--finetune-blocks: between 0 and {NUM_BLOCKS}, got {fresh['finetune_blocks']}")
    if not 0 <= fresh["text_layers"] <= TEXT_LAYERS:
        raise TrainingError(f"--text-layers: between 0 and {TEXT_LAYERS}, got {fresh['text_layers']}")
    if fresh["finetune_epochs"] and not (fresh["finetune_blocks"] or fresh["text_layers"]):
        raise TrainingError("--finetune-epochs: nothing to fine-tune with --finetune-blocks 0 and --text-layers 0")
    if fresh["finetune_epochs"] < 0:
        raise TrainingError(f"--finetune-epochs: must be 0 or more, got {fresh['finetune_epochs']}")
    if fresh["batch_size"] < 2:
        raise TrainingError(f"--batch-size: must be at least 2, got {fresh['batch_size']}")
    if saved is None:
        return fresh
    kept = {k: saved.options.get(k, v) for k, v in fresh.items()}
    kept["epochs"] = pick(options.epochs, kept["epochs"])
    for name in FINETUNE_DEFAULTS:  # given on the command line: it wins, as the epoch budget does
        kept[name] = pick(getattr(options, name), kept[name])
    recorded = saved.options.get("finetune_blocks")  # None: not recorded by the run (the command must say)
    if saved.finetune_from is not None and recorded is not None and kept["finetune_blocks"] != recorded:
        raise TrainingError(f"--finetune-blocks: {options.out} is fine-tuning {recorded} blocks; it cannot change "
                            "mid-run")
    return kept


def _per_item(options: TrainOptions, recipe: Recipe) -> int | None:
    if options.epoch_captions is None:
        return recipe.per_item
    if options.epoch_captions < 0:
        raise TrainingError(f"--epoch-captions: must be 0 (all) or more, got {options.epoch_captions}")
    return options.epoch_captions or None


def jsonable(settings: dict[str, Any], options: TrainOptions) -> dict[str, Any]:
    return {**settings, "data": str(options.data), "train_split": options.train_split,
            "val_split": options.val_split, "annotated_fraction": options.sparse.annotated_fraction,
            "captions_per_image": options.sparse.captions_per_image, "sparse_seed": options.sparse.seed,
            "preset": options.preset, "pseudo_pairs": options.pseudo_pairs,
            "extra_annotated": list(options.sparse.extra_annotated)}
