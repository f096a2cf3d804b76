"""A caption folder's training and validation splits, and the data one training run reads from them
(:func:`load_training_data`: the annotated pairs, the validation pairs and A3VSE's pseudo-captioned items, as
:mod:`trainer.data` turns them into features)."""

from __future__ import annotations

import dataclasses
import logging
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.library.captionfolder import CaptionFolder, load_caption_folder
from trainer.data import DataError, FeatureNeeds, FeatureSource, PairSet, VisualFeatures, text_subset
from trainer.pseudocaptions import PseudoSource, consensus_captions, nearest_annotated
from trainer.sparse import SparseConfig, sparse_split_folder

log = logging.getLogger(__name__)

VAL_FRACTION = 0.1  # share of the training items held out when a folder has no validation split


@dataclass
class TrainingData:
    """Everything one training run reads: annotated ``train`` pairs, ``val`` pairs, and for A3VSE the
    un-annotated training items with their pseudo captions (``pseudo``, one caption per item)."""

    train: PairSet
    val: PairSet
    pseudo: PairSet | None = None
    n_split_items: int = 0  # items of the training split, annotated or not (sets a sparse epoch's length)


def resolve_splits(folder: CaptionFolder, train_split: str, val_split: str,
                   seed: int = 0) -> tuple[CaptionFolder, CaptionFolder]:
    """The train and validation views of ``folder``.

    A folder without ``splits.tsv`` (one split, ``all``) trains on it; a folder without the validation
    split holds out a seeded 10% of the training items (at least one) for validation, with a warning.
    """
    names = folder.splits()
    if train_split not in names:
        if names != ["all"]:
            raise DataError(f"{folder.root}: no split {train_split!r} (splits: {', '.join(names)})")
        train_split = "all"
    train = folder.split(train_split)
    if val_split in names:
        if val_split == train_split:
            log.warning("validating on the training split %r: the validation rsum will be optimistic", val_split)
        return train, folder.split(val_split)
    captioned = [i for i, (_, caps) in enumerate(train.item_captions()) if caps]
    if len(captioned) < 2:
        raise DataError(f"{folder.root}: split {train_split!r} needs at least 2 captioned items to hold "
                        "some out for validation")
    held = set(random.Random(seed).sample(captioned, max(1, int(VAL_FRACTION * len(captioned) + 0.5))))
    log.warning("%s has no %r split: holding out %d of %d training items for validation",
                folder.root, val_split, len(held), len(captioned))
    return _view(train, [i for i in range(len(train.items)) if i not in held]), _view(train, sorted(held))


def _view(folder: CaptionFolder, keep: list[int]) -> CaptionFolder:
    new_index = {old: new for new, old in enumerate(keep)}
    captions = [(new_index[i], text) for i, text in folder.captions if i in new_index]
    return CaptionFolder(folder.root, folder.media_dir, [folder.items[i] for i in keep], captions,
                         list(folder.warnings))


def split_view(root: Path, split: str | None) -> CaptionFolder:
    """One split of the caption folder at ``root`` (the whole folder for None)."""
    folder = load_caption_folder(root)
    if split is None:
        return folder
    if split not in folder.splits():
        raise DataError(f"{folder.root}: no split {split!r} (splits: {', '.join(folder.splits())})")
    return folder.split(split)


def load_training_data(root: Path, train_split: str, val_split: str, sparse: SparseConfig,
                       needs: FeatureNeeds, source: FeatureSource, with_pseudo: bool,
                       pseudo_captions: PseudoSource = "regions") -> TrainingData:
    """Train / validation pairs of a caption folder; ``sparse`` keeps a fraction of the training captions
    (A3VSE's sparse corpus) and ``with_pseudo`` pairs the rest of the training items with pseudo captions
    (``pseudo_captions``: where their text comes from, :mod:`trainer.pseudocaptions`)."""
    train_view, val_view = resolve_splits(load_caption_folder(root), train_split, val_split, sparse.seed)
    split = sparse_split_folder(train_view, sparse)
    if not split.annotated:
        raise DataError(f"{root}: no annotated training pairs (annotated fraction {sparse.annotated_fraction})")
    train = source.pairs(split.annotated, needs)
    val = source.pairs(val_view.item_captions(), needs)
    if not val.captions:
        raise DataError(f"{root}: the validation split has no captions")
    pseudo = None
    if with_pseudo and split.unannotated:
        visual, kept = source.visual(split.unannotated, needs)
        items = [split.unannotated[i] for i in kept]
        if pseudo_captions == "neighbours":
            chosen = _transferred_captions(train, visual, source, needs)
            texts = [train.captions[c] for c in chosen]
            text = text_subset(train.text, chosen)
        else:
            texts = source.pseudo_captions(items, colours=pseudo_captions == "colours")
            text = source.text(texts, needs)
        pseudo = PairSet([item.file for item in items], visual, texts, np.arange(len(items), dtype=np.int64), text)
    return TrainingData(train, val, pseudo, len(split.annotated) + len(split.unannotated))


def _transferred_captions(train: PairSet, unannotated: VisualFeatures, source: FeatureSource,
                          needs: FeatureNeeds) -> np.ndarray:
    """Indices into ``train.captions`` of the caption carried over to each un-annotated item (the consensus of
    its annotated look-alikes' captions, :mod:`trainer.pseudocaptions`)."""
    sentences = train.text.sentence
    if sentences is None:
        sentences = source.text(train.captions, dataclasses.replace(needs, tokens=False, sentence=True,
                                                                    text_encoder="minilm")).sentence
    assert sentences is not None
    neighbours, likeness = nearest_annotated(train.visual.pooled, unannotated.pooled)
    return consensus_captions(neighbours, likeness, train.caption_item, sentences)
