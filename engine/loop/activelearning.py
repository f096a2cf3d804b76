"""What to annotate next: active-learning policies over a trained model's encodings (numpy only).

A library where few items have captions (A3VSE's sparse parallel corpus, §4.1) gains most from a caption on
an item the model understands least. Every policy turns the un-annotated items' encodings into one score per
item, higher = more worth annotating, and :func:`pick` takes the ``n`` best:

- **random** (``pick(..., policy="random")``): ``n`` items drawn uniformly without replacement; the baseline
  every other policy must beat.
- **sigma** (:func:`uncertainty_scores`): PCME (Chun et al. 2021, §3.2.1) encodes each item as a Gaussian
  whose spread is the model's uncertainty; the score is the geometric mean of sigma (the Gaussian's volume,
  the same value :func:`engine.search.pcme.uncertainty` shows). PCME fig. 6-7 show R@1 falling as sigma
  rises, so high-sigma items are the ones retrieval gets wrong.
- **head disagreement** (:func:`head_disagreement`): a multi-head model (PVSE's K embeddings, A3VSE's K
  heads) gives each item K vectors. When the heads retrieve different captions the item is ambiguous to the
  model (or genuinely polysemous); the score is one minus the mean pairwise Jaccard overlap of the heads'
  top-``top`` caption neighbours: 0 when every head sees the same neighbours, 1 when no two share any.

Items are rows; nothing here knows about catalogs or files, so the app's service and the trainer's
benchmark share these functions.
"""

from __future__ import annotations

import numpy as np

POLICIES = ("score", "random")
_BLOCK = 1 << 22  # similarity entries per block of head_disagreement (32 MB in float64)


class ActiveLearningError(ValueError):
    """An active-learning input has the wrong shape, is not finite, or names an unknown policy."""


def uncertainty_scores(log_sigma: np.ndarray) -> np.ndarray:
    """(N,) uncertainty of N PCME Gaussians from their log sigmas (N, D) or (N, K, D): the geometric mean of
    sigma, ``exp(mean_d log sigma_d)`` (PCME §3.2.1). Higher = more uncertain.

    Log-variances (``2 log sigma``) rank the items identically, since the score is monotone in the mean.
    """
    log_sigma = np.asarray(log_sigma, dtype=np.float64)
    if log_sigma.ndim not in (2, 3) or log_sigma.shape[-1] == 0:
        raise ActiveLearningError(f"log_sigma: expected an (N, D) or (N, K, D) array, got shape {log_sigma.shape}")
    if not np.isfinite(log_sigma).all():
        raise ActiveLearningError("log_sigma: contains NaN or infinite values")
    return np.exp(log_sigma.reshape(len(log_sigma), -1).mean(axis=1))


def head_disagreement(item_vecs: np.ndarray, caption_vecs: np.ndarray, top: int = 10) -> np.ndarray:
    """(N,) disagreement of each item's K heads about which captions are nearest.

    ``item_vecs`` (N, K, D) are L2-normalised head embeddings, ``caption_vecs`` (M, D) caption embeddings
    (normalised here, so cosine similarity ranks them). For each item and head, the ``top`` captions of highest
    cosine form a set ``T_k``; the score is ``1 - mean_{k<l} |T_k & T_l| / |T_k | T_l|``. One head (K = 1)
    cannot disagree with itself: the score is 0. ``top`` larger than M uses all M captions.
    """
    items = np.asarray(item_vecs, dtype=np.float64)
    captions = np.asarray(caption_vecs, dtype=np.float64)
    if items.ndim != 3:
        raise ActiveLearningError(f"item_vecs: expected an (N, K, D) array, got shape {items.shape}")
    if captions.ndim != 2 or captions.shape[1] != items.shape[2]:
        raise ActiveLearningError(f"caption_vecs: expected an (M, {items.shape[2]}) array, got shape "
                                  f"{captions.shape}")
    if top < 1:
        raise ActiveLearningError(f"top: must be at least 1, got {top}")
    if not (np.isfinite(items).all() and np.isfinite(captions).all()):
        raise ActiveLearningError("item_vecs/caption_vecs: contain NaN or infinite values")
    n, heads, _ = items.shape
    if heads < 2 or n == 0:
        return np.zeros(n)
    if len(captions) == 0:
        raise ActiveLearningError("caption_vecs: no captions to compare the heads' neighbours against")
    captions = captions / np.maximum(np.linalg.norm(captions, axis=1, keepdims=True), 1e-12)
    top = min(top, len(captions))
    out = np.empty(n)
    chunk = max(1, _BLOCK // (heads * len(captions)))
    for start in range(0, n, chunk):
        block = items[start:start + chunk]
        out[start:start + len(block)] = 1.0 - _mean_pairwise_jaccard(_top_captions(block, captions, top))
    return out


def _top_captions(items: np.ndarray, captions: np.ndarray, top: int) -> np.ndarray:
    """(B, K, top) indices of each head's ``top`` most similar captions (in no particular order)."""
    sims = items @ captions.T  # (B, K, M)
    if top == sims.shape[-1]:
        return np.broadcast_to(np.arange(top), sims.shape).copy()
    return np.argpartition(-sims, top - 1, axis=-1)[..., :top]


def _mean_pairwise_jaccard(neighbours: np.ndarray) -> np.ndarray:
    """(B,) mean Jaccard overlap over the K (K - 1) / 2 head pairs of (B, K, top) neighbour sets."""
    heads, top = neighbours.shape[1], neighbours.shape[2]
    total = np.zeros(len(neighbours))
    for k in range(heads):
        for other in range(k + 1, heads):
            # the sets hold distinct indices, so equal entries between two heads count the intersection
            shared = (neighbours[:, k, :, None] == neighbours[:, other, None, :]).sum(axis=(1, 2))
            total += shared / (2 * top - shared)
    return total / (heads * (heads - 1) / 2)


def pick(scores: np.ndarray, n: int, exclude: np.ndarray | None = None, rng: np.random.Generator | None = None,
         policy: str = "score") -> np.ndarray:
    """Indices of the items to annotate next, never one in ``exclude`` (already annotated, say).

    ``policy="score"``: the ``n`` highest ``scores``, best first (ties: the lower index first).
    ``policy="random"``: ``n`` uniform draws without replacement from ``rng`` (a fresh generator when None);
    ``scores`` then only gives N. Fewer than ``n`` candidates left: all of them.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1:
        raise ActiveLearningError(f"scores: expected an (N,) array, got shape {scores.shape}")
    if n < 0:
        raise ActiveLearningError(f"n: must be 0 or more, got {n}")
    if policy not in POLICIES:
        raise ActiveLearningError(f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    allowed = np.ones(len(scores), dtype=bool)
    if exclude is not None:
        exclude = np.asarray(exclude)
        if exclude.size and (exclude.dtype.kind not in "iu" or exclude.min() < 0 or exclude.max() >= len(scores)):
            raise ActiveLearningError(f"exclude: expected indices in [0, {len(scores)}), got {exclude!r}")
        allowed[exclude.astype(np.int64)] = False
    candidates = np.flatnonzero(allowed)
    if policy == "random":
        rng = rng or np.random.default_rng()
        return rng.choice(candidates, size=min(n, len(candidates)), replace=False).astype(np.int64)
    if np.isnan(scores[candidates]).any():
        raise ActiveLearningError("scores: NaN among the candidates")
    order = np.argsort(-scores[candidates], kind="stable")
    return candidates[order[:n]].astype(np.int64)
