"""An epoch's batches: caption rows in a seeded order that a resumed run replays, and the batch records."""

from __future__ import annotations

import math

import numpy as np
import torch

from trainer.data import PairSet
from trainer.finetune import Pixels, Trunk
from trainer.methods import PairBatch
from trainer.methods.interface import ImageInput
from trainer.splits import TrainingData
from trainer.textencoder import Tokenized

SAME = -1  # per_clip: as many captions of a GIF/video as of a photo (per_item)


def epoch_batches(pairs: PairSet, epoch: int, seed: int, batch_size: int, group: int = 1,
                  per_item: int | None = None, min_units: int = 0, per_clip: int | None = SAME) -> list[np.ndarray]:
    """Caption indices of each batch of one epoch, the order seeded by (seed, epoch) so that a resumed run
    replays it. An epoch takes ``per_item`` random captions of every item (None: every caption once);
    ``group`` captions of one item sit side by side in a batch; photos and clips are never mixed. Batches of
    fewer than 2 captions are dropped (no negatives, and batch norm needs 2).

    ``min_units`` > the epoch's units repeats the draw (fresh shuffles) until there are at least that many:
    a sparse corpus then gets as many steps per epoch as the fully annotated one would (A3VSE §4.2 keeps
    the baselines' iteration count comparable instead of letting 10 % of the pairs make 10 % of the steps).

    ``per_clip``: captions of each GIF/video an epoch takes (None: all; :data:`SAME`: ``per_item``): clips with
    20 captions each read as many of them as a photo reads of its five, unless told otherwise (issue #41)."""
    rng = np.random.default_rng([seed, epoch])
    clip_of_caption = pairs.visual.is_clip[pairs.caption_item]
    clip_limit = per_item if per_clip == SAME else per_clip
    moving = pairs.visual.moving if clip_limit != per_item else None  # None: every item reads per_item
    n_units = len(pairs.captions) if per_item is None else pairs.n_items * per_item
    repeats = max(1, math.ceil(min_units / max(1, n_units // max(1, group))))
    batches: list[np.ndarray] = []
    for kind in (False, True):
        units = [u for _ in range(repeats)
                 for u in _units(np.flatnonzero(clip_of_caption == kind), pairs.caption_item, group, per_item, rng,
                                 moving, clip_limit)]
        per_batch = max(1, batch_size // max(1, group))
        n_batches = math.ceil(len(units) / per_batch)
        for part in np.array_split(np.arange(len(units)), n_batches) if n_batches else []:
            rows = np.concatenate([units[i] for i in part])
            if len(rows) >= 2:
                batches.append(rows)
    return [batches[i] for i in rng.permutation(len(batches))]


def _units(captions: np.ndarray, caption_item: np.ndarray, group: int, per_item: int | None,
           rng: np.random.Generator, moving: np.ndarray | None = None,
           per_clip: int | None = None) -> list[np.ndarray]:
    """Shuffled groups of up to ``group`` captions of one item, ``per_item`` captions drawn per item, ``per_clip``
    per item that is ``moving`` (a GIF/video; None: no item reads another number)."""
    if group <= 1 and per_item is None and moving is None:
        return [np.array([c]) for c in rng.permutation(captions)]
    by_item: dict[int, list[int]] = {}
    for c in captions:
        by_item.setdefault(int(caption_item[c]), []).append(int(c))
    units = []
    for item in sorted(by_item):
        limit = per_clip if moving is not None and moving[item] else per_item
        own = rng.permutation(by_item[item])[:limit]
        units += [own[i:i + max(1, group)] for i in range(0, len(own), max(1, group))]
    return [units[i] for i in rng.permutation(len(units))]


def make_batch(data: TrainingData, rows: np.ndarray, device: torch.device, progress: float,
               pseudo_rng: np.random.Generator | None, visual: Pixels | Trunk | None = None,
               tokens: Tokenized | None = None,
               pooled_regions: tuple[np.random.Generator, float] | None = None) -> PairBatch:
    """The :class:`PairBatch` of caption ``rows``; for A3VSE also as many pseudo pairs of the same kind.
    ``visual`` (phase two) is the rows' items as pixels or trunk outputs, in place of their cached features;
    ``tokens`` (phase two with the text encoder) gives the rows' captions as token ids in place of theirs.
    ``pooled_regions`` ``(generator, p)``: each photo of the batch reads its pooled feature in place of every
    region with probability p (:func:`pool_regions`)."""
    train = data.train
    items = train.caption_item[rows]
    visual = visual if visual is not None else train.visual.batch(items, device)
    if pooled_regions is not None:
        visual = pool_regions(visual, *pooled_regions)
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


def pool_regions(visual, rng: np.random.Generator, p: float):
    """``visual`` with each photo's regions replaced, with probability ``p``, by its pooled feature (how the engine
    reads a clip's frames and a photo past the feature store's local-feature cap); clips and inputs without
    regions are returned as they are."""
    if not isinstance(visual, ImageInput) or visual.local.shape[1] == 0:
        return visual
    chosen = torch.from_numpy(rng.random(len(visual)) < p).to(visual.local.device)
    if not bool(chosen.any()):
        return visual
    local = torch.where(chosen[:, None, None], visual.pooled[:, None, :].expand_as(visual.local), visual.local)
    return ImageInput(local, visual.pooled)
