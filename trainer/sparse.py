"""The sparse parallel corpus of A3VSE (Huang et al. 2019, section 4.1).

A3VSE simulates a library where few items are annotated: the training images are shuffled once and the
first fraction of them keep 1, 2 or 5 of their captions; the rest become un-annotated images (their
captions are dropped, and the method pairs them with pseudo captions instead).

Here the shuffle is seeded, so the same seed gives the same split; and it is nested - with one seed the
items annotated at 10% are among those annotated at 20%, and the captions kept at N per item are among
those kept at N + 1 - so sparsity levels differ only in how much is annotated, not in which.
The trainer's ``--annotated-fraction F --captions-per-image N`` flags build a :class:`SparseConfig`.

``extra_annotated`` names items annotated on top of the seeded fraction, with all their captions: an
active-learning round (:mod:`engine.loop.activelearning`) picks them among the un-annotated items and "annotates" them,
and the split is otherwise the same as without them.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass

from engine.library.captionfolder import CaptionFolder, Item


class SparseSplitError(ValueError):
    """A sparse-split setting is out of range."""


@dataclass(frozen=True, slots=True)
class SparseConfig:
    """How much of a split stays annotated: ``None`` captions per image keeps them all.

    ``extra_annotated``: item files (as in the caption folder) annotated in addition, with all captions.
    """

    annotated_fraction: float = 1.0
    captions_per_image: int | None = None
    seed: int = 0
    extra_annotated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.extra_annotated, str):
            raise SparseSplitError("extra annotated items: expected a sequence of item files, got one string")
        object.__setattr__(self, "extra_annotated", tuple(self.extra_annotated))  # hashable, immutable
        if not 0.0 <= self.annotated_fraction <= 1.0:
            raise SparseSplitError(f"annotated fraction {self.annotated_fraction} is not within [0, 1]")
        if self.captions_per_image is not None and self.captions_per_image < 1:
            raise SparseSplitError(f"captions per image must be at least 1, got {self.captions_per_image}")


@dataclass(frozen=True, slots=True)
class SparseSplit:
    """The annotated pairs and the un-annotated items of one sparse split, both in input order."""

    annotated: list[tuple[Item, list[str]]]
    unannotated: list[Item]

    @property
    def n_pairs(self) -> int:
        """Number of annotated (item, caption) pairs."""
        return sum(len(captions) for _, captions in self.annotated)


def sparse_split(
    items_with_captions: Sequence[tuple[Item, Sequence[str]]],
    annotated_fraction: float,
    captions_per_image: int | None,
    seed: int,
    extra_annotated: Sequence[str] = (),
) -> SparseSplit:
    """Keep captions for fraction x (items with captions) items (rounded half up), at most N captions each,
    plus every caption of the ``extra_annotated`` item files.

    Items without captions are always un-annotated. A positive fraction annotates at least one item.
    Which items and which captions are kept depends only on ``seed`` and the item files (see module doc).
    Raises :class:`SparseSplitError` naming an extra item that is not in the split or has no caption.
    """
    config = SparseConfig(annotated_fraction, captions_per_image, seed, tuple(extra_annotated))
    candidates = [i for i, (_, captions) in enumerate(items_with_captions) if captions]
    n_annotated = int(config.annotated_fraction * len(candidates) + 0.5)
    if config.annotated_fraction > 0 and candidates:
        n_annotated = max(1, n_annotated)
    shuffled = list(candidates)
    random.Random(config.seed).shuffle(shuffled)  # shuffled once, then trimmed: nested across fractions
    chosen = set(shuffled[:n_annotated])
    extra = _extra_indices(items_with_captions, config.extra_annotated)
    annotated = [(item, list(captions) if i in extra else _sample_captions(item, captions, config))
                 for i, (item, captions) in enumerate(items_with_captions) if i in chosen or i in extra]
    chosen |= extra
    unannotated = [item for i, (item, _) in enumerate(items_with_captions) if i not in chosen]
    return SparseSplit(annotated, unannotated)


def _extra_indices(items_with_captions: Sequence[tuple[Item, Sequence[str]]], files: Sequence[str]) -> set[int]:
    """Indices of the extra-annotated item files; each must be a captioned item of the split."""
    index = {item.file: i for i, (item, _) in enumerate(items_with_captions)}
    out = set()
    for file in files:
        if file not in index:
            raise SparseSplitError(f"extra annotated item {file!r} is not in the split")
        if not items_with_captions[index[file]][1]:
            raise SparseSplitError(f"extra annotated item {file!r} has no caption to annotate it with")
        out.add(index[file])
    return out


def _sample_captions(item: Item, captions: Sequence[str], config: SparseConfig) -> list[str]:
    """The first N of a per-item seeded permutation, kept in their original order."""
    n = len(captions) if config.captions_per_image is None else min(config.captions_per_image, len(captions))
    order = list(range(len(captions)))
    # a string seed is hashed with SHA-512, so this does not depend on PYTHONHASHSEED or on item order
    random.Random(f"{config.seed}:{item.file}").shuffle(order)
    return [captions[i] for i in sorted(order[:n])]


def sparse_split_folder(folder: CaptionFolder, config: SparseConfig) -> SparseSplit:
    """:func:`sparse_split` of every item of ``folder`` (usually a split view such as ``train``)."""
    return sparse_split(folder.item_captions(), config.annotated_fraction, config.captions_per_image,
                        config.seed, config.extra_annotated)


def add_sparse_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--annotated-fraction``, ``--captions-per-image`` and ``--sparse-seed`` to a trainer parser."""
    parser.add_argument("--annotated-fraction", type=float, default=1.0, metavar="F",
                        help="fraction of the training items that keep their captions (A3VSE sparse corpus)")
    parser.add_argument("--captions-per-image", type=int, default=None, metavar="N",
                        help="captions kept per annotated item (default: all)")
    parser.add_argument("--sparse-seed", type=int, default=0, help="seed of the sparse sampling")


def sparse_config_from_args(args: argparse.Namespace) -> SparseConfig:
    """The :class:`SparseConfig` of arguments parsed with :func:`add_sparse_arguments`."""
    return SparseConfig(args.annotated_fraction, args.captions_per_image, args.sparse_seed)
