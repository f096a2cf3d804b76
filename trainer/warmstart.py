"""A run that starts from another model's weights (``--init-from``): its config, the L2-SP anchor, and what it keeps.

A warm start (the library loop's retrain) loads the starting model's config and weights, pulls the weights back
toward them with L2-SP (Li, Grandvalet & Davoine 2018: alpha/2 * ||w - w0||^2), validates its few held-aside
captions among un-annotated items too (the distractors), and keeps the start's own fine-tuned text encoder if it
has one. The loop (:mod:`trainer.train`) scores the start as epoch 0, so an epoch is kept only if it beats it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from trainer import checkpoint as ckpt
from trainer.data import PairSet
from trainer.finetune import finetuned_backbone
from trainer.methods import MethodConfig, RetrievalModel, build_model
from trainer.runsettings import TrainingError, TrainOptions
from trainer.textencoder import finetuned_text

# L2-SP strength of a warm start, chosen on tests/bench/bench_user_loop.py (see docs/benchmarks.md).
WARM_START_L2SP = 1.0
# Validating a warm start: its few held-aside captions rank their items among this many un-annotated ones too.
WARM_START_DISTRACTORS = 1000


@dataclass
class WarmStart:
    """What a warm-started run keeps of its start: L2-SP's anchor (each parameter with its starting value) and
    strength, the distractors its validation searches too, and the start's text encoder (id, weights file)."""

    start: Path
    anchor: list[tuple[nn.Parameter, torch.Tensor]]
    l2sp: float
    distractors: PairSet | None = None
    kept_text: tuple[str, Path] | None = None

    def penalty(self) -> torch.Tensor | None:
        """L2-SP's term, alpha/2 * sum ||w - w0||^2 over the starting weights (None when it is off)."""
        if not self.anchor or self.l2sp <= 0:
            return None
        return 0.5 * self.l2sp * sum(((p - p0) ** 2).sum() for p, p0 in self.anchor)


def warm_start_config(options: TrainOptions) -> MethodConfig:
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


def start_text(options: TrainOptions) -> tuple[str, Path, Path] | None:
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


def begin_warm_start(options: TrainOptions, model: RetrievalModel, config: MethodConfig, device: torch.device,
                     pseudo: PairSet | None, seed: int, fresh: bool) -> WarmStart:
    """Load the starting weights into ``model`` (a fresh run; a resumed one keeps its checkpoint's), keep them as
    the L2-SP anchor, and choose the validation's distractors among the un-annotated items ``pseudo``."""
    start = Path(options.init_from)  # type: ignore[arg-type]
    kept = start_text(options)
    anchor_model = build_model(config).to(device)  # the start's weights, read once
    ckpt.load_weights(start / ckpt.WEIGHTS_FILE, anchor_model)
    if fresh:
        model.load_state_dict(anchor_model.state_dict())
    anchor = dict(anchor_model.named_parameters())
    strength = WARM_START_L2SP if options.l2sp is None else options.l2sp
    if strength < 0:
        raise TrainingError(f"--l2sp: must be 0 or more, got {strength}")
    distractors = None
    if pseudo is not None and pseudo.n_items:  # a few held-aside items searched among the library's others
        chosen = np.random.default_rng(seed).permutation(pseudo.n_items)[:WARM_START_DISTRACTORS]
        distractors = pseudo.subset(np.sort(chosen))
    return WarmStart(start, [(p, anchor[name].detach()) for name, p in model.named_parameters() if name in anchor],
                     strength, distractors, kept[:2] if kept is not None else None)
