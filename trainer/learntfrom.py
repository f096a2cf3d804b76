"""What a trained model learnt from, written beside it when its run finishes: how many photos and clips each
visual branch saw (the manifest's ``trained_on``) and the content words of its training captions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.features import vocabulary
from trainer import checkpoint as ckpt
from trainer.data import PairSet


def trained_on(train: PairSet, pseudo: PairSet | None, init_from: str | Path | None) -> dict[str, int]:
    """How many photos and clips each visual branch learnt from (``trained_on`` in the manifest): a run's
    annotated (``train``) and ``pseudo`` pairs plus, for a warm start, what the model it started from
    (``init_from``) had learnt from. The engine never ranks with a branch that learnt from nothing
    (:mod:`engine.search.trained`)."""
    counts = {"image": 0, "video": 0}
    for pairs in (train, pseudo):
        if pairs is not None:
            clips = int(np.asarray(pairs.visual.is_clip).sum())
            counts["video"] += clips
            counts["image"] += len(pairs.visual.is_clip) - clips
    if init_from is not None:
        try:
            manifest = Path(init_from) / ckpt.ONNX_DIR / "manifest.json"
            before = json.loads(manifest.read_text()).get("trained_on")
        except (OSError, ValueError):
            before = None
        for kind, n in (before or {}).items():
            if kind in counts:
                counts[kind] += int(n)
    return counts


def write_caption_words(out: Path, train: PairSet | None, init_from: str | Path | None) -> None:
    """The content words of a run's training captions (``train``), counted, plus those of the model it started
    from (``init_from``) (:mod:`engine.features.vocabulary`: the search tells the user's own words from the ones the
    model knows)."""
    captions = list(train.captions) if train is not None else []
    counts, total = vocabulary.count_caption_words(captions), len(captions)
    before = vocabulary.read_caption_words(Path(init_from)) if init_from is not None else None
    if before is not None:
        counts.update(before[0])
        total += before[1]
    vocabulary.write_caption_words(out, counts, total)
