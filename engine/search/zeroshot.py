"""Zero-shot text search (A3VSE §4.3): a sentence ranked against every item's regional semantics
(:mod:`engine.features.regional`), before any model is trained.

It scores an item against a sentence with three terms, each standardised over the
candidates (z-scores, so no term dominates by scale) and summed:

1. *class match*: the Bhattacharyya coefficient between the item's class distribution (half the whole-image
   softmax, half the normalised per-class maximum over regions) and the sentence's distribution over the class
   names (softmax of MiniLM cosine similarities at temperature ``SENTENCE_TAU``);
2. *concept match*: every content word of the sentence must be found — the sum over words of
   ``w_word * log(BC(item, word) + EPS)``, where a word's weight is how well it matches any class name at all
   (``max cos - WORD_FLOOR``, clipped at 0), so "dog" and "beach" both have to be there, while "running" counts little;
3. *caption match*: MiniLM cosine between the sentence and the pseudo caption's embedding, taken as the
   probability-weighted centroid of the class-text embeddings (measured as good as encoding the caption text,
   and it keeps the text encoder out of indexing).

On 1,000 held-out Flickr8k photos (dev split) ImageNet top-5 class names alone give t2i R@10 ≈ 22; the
benchmark in ``tests/bench/bench_zeroshot.py`` reports what these three terms give (the README quotes it).
The hyper-parameters below were chosen on 1,000 *train* photos, never on dev.
"""

from __future__ import annotations

import numpy as np

from engine.features.regional import softmax

SENTENCE_TAU = 0.04
WORD_TAU = 0.04
WORD_FLOOR = 0.3
EPS = 0.01


def _zscore(scores: np.ndarray) -> np.ndarray:
    std = scores.std()
    return (scores - scores.mean()) / std if std > 1e-9 else np.zeros_like(scores)


class ZeroShotIndex:
    """Zero-shot text ranking of a library from its items' class distributions (module docstring, terms 1-3).

    ``class_embeddings`` are the MiniLM embeddings of :func:`class_texts` (C, D); each item is its top classes
    ``class_ids`` (N, k) with probabilities ``class_probs`` (N, k). The pseudo caption's embedding in term 3 is
    the probability-weighted centroid of its classes' text embeddings, so indexing never runs the text encoder.
    """

    def __init__(self, class_embeddings: np.ndarray, class_ids: np.ndarray, class_probs: np.ndarray) -> None:
        from scipy.sparse import csr_matrix

        self.class_embeddings = class_embeddings.astype(np.float32)
        n, k = class_ids.shape
        ids = class_ids.astype(np.int64)
        probs = class_probs.astype(np.float32)
        rows = np.repeat(np.arange(n), k)
        self._sqrt = csr_matrix((np.sqrt(probs).ravel(), (rows, ids.ravel())),
                                shape=(n, self.class_embeddings.shape[0]))
        centroid = np.einsum("nk,nkd->nd", probs, self.class_embeddings[ids]) if n else np.zeros((0, 1))
        norms = np.linalg.norm(centroid, axis=1, keepdims=True) if n else np.ones((0, 1))
        self._centroids = (centroid / np.maximum(norms, 1e-9)).astype(np.float32)

    def __len__(self) -> int:
        return self._sqrt.shape[0]

    def score(self, sentence: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Scores (N,) for one sentence embedding (D,) and the embeddings of its content words (W, D)."""
        if len(self) == 0:
            return np.zeros(0, np.float32)
        sims = self.class_embeddings @ sentence
        class_match = self._sqrt @ np.sqrt(softmax(sims / SENTENCE_TAU))
        total = _zscore(class_match) + _zscore(self._centroids @ sentence)
        if len(words):
            word_sims = words @ self.class_embeddings.T  # (W, C)
            weights = np.clip(word_sims.max(axis=1) - WORD_FLOOR, 0.0, None)
            if weights.sum() > 0:
                per_word = self._sqrt @ np.sqrt(softmax(word_sims / WORD_TAU, axis=1)).T  # (N, W)
                total = total + _zscore(np.log(per_word + EPS) @ weights)
        return total.astype(np.float32)
