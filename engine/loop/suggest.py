"""What to annotate next in a library: the active-learning policies of :mod:`engine.loop.activelearning` applied to
the active model's encodings of the un-annotated items.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from engine.library.catalog import Catalog, MediaStatus
from engine.loop import activelearning as active
from engine.loop.trainingset import library_annotations
from engine.types import CaptionSource

if TYPE_CHECKING:
    from engine.search.trained import TrainedSearch


log = logging.getLogger(__name__)


SUGGEST_POLICIES = ("auto", "uncertainty", "disagreement", "random")


def resolve_policy(trained: TrainedSearch | None, policy: str = "auto") -> str:
    """The policy :func:`suggest` applies for ``policy``: ``auto`` is ``uncertainty`` with an active PCME model,
    ``disagreement`` with one of K >= 2 heads, else ``random``; any other policy is itself."""
    if policy not in SUGGEST_POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(SUGGEST_POLICIES)}, got {policy!r}")
    if policy != "auto":
        return policy
    if trained is not None and trained.runner.probabilistic:
        return "uncertainty"
    if trained is not None and trained.runner.num_embeddings >= 2:
        return "disagreement"
    return "random"


def suggest(catalog: Catalog, trained: TrainedSearch | None, n: int = 20, policy: str = "auto",
            rng: np.random.Generator | None = None) -> list[tuple[int, float]]:
    """``(media_id, score)`` of the un-annotated items worth annotating next, best first
    (:mod:`engine.loop.activelearning`).

    ``uncertainty`` needs an active PCME model (score: geometric mean of the item's sigma); ``disagreement``
    an active model with K >= 2 heads (score: 1 - mean Jaccard overlap of the heads' nearest library captions,
    or pseudo captions when the library has none); ``random`` always applies (score 0). ``auto`` takes the
    first that applies in that order. ``trained`` is the active :class:`engine.search.trained.TrainedSearch`, or None
    while the zero-shot ranking is active.
    """
    if policy not in SUGGEST_POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(SUGGEST_POLICIES)}, got {policy!r}")
    annotated = library_annotations(catalog)
    candidates = np.array([m.id for m in catalog.iter_media(MediaStatus.OK) if m.id not in annotated],
                          dtype=np.int64)
    if n <= 0 or not len(candidates):
        return []
    chosen = resolve_policy(trained, policy)
    if chosen == "random":
        rows = active.pick(np.zeros(len(candidates)), n, rng=rng or np.random.default_rng(), policy="random")
        return [(int(candidates[r]), 0.0) for r in rows]
    if trained is None:
        raise ValueError(f"policy {policy!r} needs an active trained model; the zero-shot ranking is active")
    for _ in trained.sync():  # items indexed since the model became active get their vectors first
        pass
    ids, vectors, extras = catalog.get_embeddings(trained.record.id, candidates.tolist())
    if not len(ids):
        return []
    if chosen == "uncertainty":
        if not trained.runner.probabilistic:
            raise ValueError(f"policy 'uncertainty' needs a PCME model; {trained.record.name!r} is "
                             f"{trained.runner.method}")
        scores = active.uncertainty_scores(extras["log_sigma"])
    else:
        if trained.runner.num_embeddings < 2:
            raise ValueError(f"policy 'disagreement' needs a model with K >= 2 heads; {trained.record.name!r} "
                             "has one")
        scores = active.head_disagreement(vectors, _caption_vectors(catalog, trained))
    rows = active.pick(scores, n)
    return [(int(ids[r]), float(scores[r])) for r in rows]


def _caption_vectors(catalog: Catalog, trained: TrainedSearch) -> np.ndarray:
    """(M x K, D) the library's training captions (else its pseudo captions) through the model's text encoder;
    every head of every caption is one row, so each item head finds its neighbours among all of them."""
    texts = sorted({t for texts in library_annotations(catalog).values() for t in texts})
    if not texts:
        texts = sorted({c.text for c in catalog.iter_captions(CaptionSource.PSEUDO)})
    if not texts:
        raise ValueError("policy 'disagreement' needs captions or pseudo captions in the library; index it first")
    encoded, _ = trained.encode_text(texts)
    return encoded.emb.reshape(-1, encoded.emb.shape[-1])
