"""Phase two's parts in a run: what learns beside the head (backbone blocks, MiniLM layers) and its inputs.

Phase two (``--finetune-epochs``, :mod:`trainer.finetune`, :mod:`trainer.textencoder`) fine-tunes the last
``finetune_blocks`` backbone blocks and/or the last ``text_layers`` MiniLM layers with the head. Its inputs are
prepared once when it begins: the augmented training pictures (or, when only the last blocks learn, the frozen
trunk's output of every picture, without augmentation), the validation subset's pictures decoded once, and every
caption tokenised once when the text encoder learns.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.progress import Progress
from trainer.data import PairSet
from trainer.finetune import (
    NUM_BLOCKS,
    FineTuned,
    PixelFeed,
    Pixels,
    TorchBackbone,
    Trunk,
    decode_for_eval,
    item_paths,
    load_backbone,
    to_pixels,
    trunk_outputs,
)
from trainer.methods import RetrievalModel
from trainer.runsettings import RunSettings
from trainer.textencoder import Tokenized, TorchMiniLM, load_text_encoder


@dataclass
class PhaseTwo:
    """What phase two trains (``trainable``: the backbone, the head and the text encoder together, which is
    what its checkpoints hold) and its inputs, computed once."""

    trainable: FineTuned
    backbone: TorchBackbone | None = None  # None: the pictures' cached features
    text: TorchMiniLM | None = None  # None: the captions' cached features
    train_tokens: Tokenized | None = None  # the text encoder learns: the captions, tokenised once
    val_tokens: Tokenized | None = None
    feed: PixelFeed | None = None  # the whole backbone learns: augmented training pictures
    val_pixels: np.ndarray | None = None  # ... and the validation subset's pictures, decoded once
    train_trunk: np.ndarray | None = None  # only the last blocks learn: the frozen trunk's outputs
    val_trunk: np.ndarray | None = None

    def close(self) -> None:
        """Stop the picture feed's threads."""
        if self.feed is not None:
            self.feed.close()


def phase_two(settings: RunSettings, model: RetrievalModel, device: torch.device) -> PhaseTwo:
    """The backbone and the text encoder phase two fine-tunes with ``model`` (None: that side reads its cached
    features)."""
    backbone = text = None
    if settings.finetune_blocks:
        backbone = load_backbone(trainable_from=NUM_BLOCKS - settings.finetune_blocks).to(device)
    if settings.text_layers:
        text = load_text_encoder(settings.text_layers).to(device)
    return PhaseTwo(FineTuned(backbone, model, text), backbone, text)


def open_inputs(phase: PhaseTwo, data_dir: Path, train: PairSet, val: PairSet, assets: Path | None, seed: int,
                device: torch.device, report: Callable[[Progress], None]) -> None:
    """Phase two's inputs (module docstring), for the training pairs ``train`` and the validation subset ``val``."""
    if phase.text is not None:
        phase.train_tokens = Tokenized(train.captions, assets)
        phase.val_tokens = Tokenized(val.captions, assets)
    if phase.backbone is None:
        return
    train_paths = item_paths(data_dir, train.files)
    val_paths = item_paths(data_dir, val.files)
    if phase.backbone.trainable_from:
        phase.train_trunk = trunk_outputs(phase.backbone, train_paths, device, report)
        phase.val_trunk = trunk_outputs(phase.backbone, val_paths, device, report)
        return
    phase.feed = PixelFeed(train_paths, seed, threads=min(8, os.cpu_count() or 1))
    phase.val_pixels = decode_for_eval(val_paths)


def batch_visual(phase: PhaseTwo, items: np.ndarray, pictures: Iterator[np.ndarray] | None,
                 device: torch.device) -> Pixels | Trunk | None:
    """A batch's visual input (its ``items``) in phase two: the next augmented pictures, the trunk's outputs, or
    None when the backbone does not learn (the cached features)."""
    if pictures is not None:
        return to_pixels(next(pictures), device)
    if phase.train_trunk is not None:
        return Trunk(torch.from_numpy(phase.train_trunk[items]).to(device).float())
    return None
