"""Evaluation of the zero-shot ranking on a caption folder (the same metrics the trainer reports).

Features of the folder's media come from the shared feature store (computed once, by content hash), so a
second evaluation of the same folder never runs the backbone again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from engine.captionfolder import load_caption_folder
from engine.catalog import content_hash
from engine.extract import Extracted
from engine.featurestore import FeatureStore
from engine.metrics import retrieval_report
from engine.progress import Progress
from engine.regional import ZeroShotIndex, content_words


def ensure_features(paths_: list[Path], store: FeatureStore, encoders, batch: int = 32) -> Iterator[Progress]:
    """Put every file's features into the store (skipping what is there); yields progress."""
    hashes = [content_hash(p) for p in paths_]
    backbone = encoders.backbone.id
    todo = set(store.missing(hashes, backbone))
    work = [(p, h) for p, h in zip(paths_, hashes, strict=True) if h in todo]
    extractor = encoders.extractor()
    batches = [work[i:i + batch] for i in range(0, len(work), batch)]
    done = 0
    for chunk, results in zip(batches, extractor.iter_batches([[p for p, _ in b] for b in batches]), strict=False):
        store.put_many(((h, r.record) for (_, h), r in zip(chunk, results, strict=True) if isinstance(r, Extracted)),
                       backbone)
        done += len(chunk)
        yield Progress(done, len(work), f"features for {done} of {len(work)} files")


def evaluate_zero_shot(folder: Path, split: str | None, store: FeatureStore, encoders,
                       progress=None) -> dict:
    """R@K both ways of the zero-shot ranking on one split of a caption folder."""
    data = load_caption_folder(folder)
    if split:
        if split not in data.splits():
            raise ValueError(f"split {split!r} is not in {folder} (splits: {', '.join(data.splits())})")
        data = data.split(split)
    paths_ = [item.path for item in data.items]
    for p in ensure_features(paths_, store, encoders):
        if progress:
            progress(p)
    hashes = [content_hash(p) for p in paths_]
    backbone = encoders.backbone.id
    present = set(hashes) - set(store.missing(hashes, backbone))
    keep = [i for i, h in enumerate(hashes) if h in present]
    index = ZeroShotIndex(encoders.class_embeddings, store.stack([hashes[i] for i in keep], backbone, "image_top_ids"),
                          store.stack([hashes[i] for i in keep], backbone, "image_top_probs"))
    position = {item: row for row, item in enumerate(keep)}
    captions = [(position[i], text) for i, text in data.captions if i in position]
    texts = [t for _, t in captions]
    sentences = encoders.minilm.encode(texts).sentence
    vocab = sorted({w for t in texts for w in content_words(t)})
    word_index = {w: i for i, w in enumerate(vocab)}
    words = encoders.minilm.encode(vocab).sentence if vocab else np.zeros((0, 384), np.float32)
    scores = np.empty((len(keep), len(texts)), np.float32)
    for j, text in enumerate(texts):
        scores[:, j] = index.score(sentences[j], words[[word_index[w] for w in content_words(text)]])
    report = retrieval_report(scores, np.array([m for m, _ in captions]))
    report["model"] = "zero-shot"
    report["split"] = split or "all"
    report["n_failed"] = len(paths_) - len(keep)
    return report
