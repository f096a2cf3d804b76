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

On 1,000 held-out Flickr8k photos (dev split) ImageNet top-5 class names alone give t2i R@10 ≈ 22;
``polyseek evaluate --model zero-shot --data FOLDER`` reports what these three terms give (docs/benchmarks.md).
The hyper-parameters below were chosen on 1,000 *train* photos, never on dev.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.features.regional import softmax

SENTENCE_TAU = 0.04
WORD_TAU = 0.04
WORD_FLOOR = 0.3
EPS = 0.01


class ZeroShotIndex:
    """Zero-shot text ranking of a library from its items' class distributions (module docstring, terms 1-3).

    ``class_embeddings`` are the MiniLM embeddings of :func:`class_texts` (C, D); each item is its top classes
    ``class_ids`` (N, k) with probabilities ``class_probs`` (N, k). The pseudo caption's embedding in term 3 is
    the probability-weighted centroid of its classes' text embeddings, so indexing never runs the text encoder.

    Scale. Every term is a sparse (N, C) matrix with k non-zeros a row times a C-vector the query gives, so a
    query costs O(N k), not O(N D), and the index holds ~(8 k + 4) bytes an item. Term 3 never forms the
    (N, D) centroids: ``centroid_n . q = (sum_j p_nj e_j . q) / ||sum_j p_nj e_j||``, i.e. the item's class
    probabilities times the sentence's class similarities ``E q`` (which term 1 needs anyway), divided by the
    centroid's norm, computed once here in chunks. Exact: the same scores as forming the centroids.
    """

    _NORM_CHUNK = 8192  # items whose centroids are formed at once to measure their norms (8192 x D floats)
    _VIEW_MIN = 500  # row sets at least this large are kept once sliced (see _rows_view)

    def __init__(self, class_embeddings: np.ndarray, class_ids: np.ndarray, class_probs: np.ndarray) -> None:
        from scipy.sparse import csr_matrix

        self.class_embeddings = class_embeddings.astype(np.float32)
        n, k = class_ids.shape
        self._k = k
        n_classes = self.class_embeddings.shape[0]
        ids = class_ids.astype(np.int32).ravel()
        probs = class_probs.astype(np.float32)
        indptr = np.arange(0, n * k + 1, k, dtype=np.int64)
        self._sqrt = csr_matrix((np.sqrt(probs).ravel(), ids, indptr), shape=(n, n_classes))
        self._probs = csr_matrix((probs.ravel(), ids, indptr), shape=(n, n_classes))
        norms = np.ones(n, np.float32)
        for lo in range(0, n, self._NORM_CHUNK):
            centroids = self._probs[lo:lo + self._NORM_CHUNK] @ self.class_embeddings
            norms[lo:lo + len(centroids)] = np.linalg.norm(centroids, axis=1)
        self._inv_norms = (1.0 / np.maximum(norms, 1e-9)).astype(np.float32)
        self._views: dict[tuple[int, int], tuple] = {}

    def __len__(self) -> int:
        return self._sqrt.shape[0]

    @property
    def top_k(self) -> int:
        """Classes kept per item."""
        return self._k

    def score(self, sentence: np.ndarray, words: np.ndarray) -> np.ndarray:
        """Scores (N,) for one sentence embedding (D,) and the embeddings of its content words (W, D)."""
        if len(self) == 0:
            return np.zeros(0, np.float32)
        return combine_terms(self.terms(sentence, words))

    def terms(self, sentence: np.ndarray, words: np.ndarray, rows: np.ndarray | None = None,
              query: QueryColumns | None = None) -> np.ndarray:
        """The three raw terms (n, 3) of every item or of ``rows`` (the concept term is 0 for a sentence with no
        word that names a class); :func:`combine_terms` standardises and sums them. ``query``: the sentence's
        :meth:`query_columns` when already computed (a ranking reads several sets of rows for one query)."""
        sqrt, probs, inv_norms = self._rows_view(rows)
        q = query if query is not None else self.query_columns(sentence, words)
        matched = sqrt @ q.columns  # (n, 1 + W)
        out = np.zeros((matched.shape[0], 3), np.float32)
        out[:, 0] = matched[:, 0]
        out[:, 1] = (probs @ q.sims) * inv_norms
        if len(q.weights):
            out[:, 2] = np.log(matched[:, 1:] + EPS) @ q.weights
        return out

    def query_columns(self, sentence: np.ndarray, words: np.ndarray) -> QueryColumns:
        """The query's side of the three terms, over the class vocabulary (independent of the items)."""
        sims = self.class_embeddings @ sentence.astype(np.float32)
        # Terms 1 and 2 read the item's square-rooted distribution: one pass over it with every query column
        # (sentence, then each word), in float32 so the sparse product never converts the library's matrix.
        columns = [np.sqrt(softmax(sims / SENTENCE_TAU))]
        weights = np.zeros(0, np.float32)
        if len(words):
            word_sims = words.astype(np.float32) @ self.class_embeddings.T  # (W, C)
            weights = np.clip(word_sims.max(axis=1) - WORD_FLOOR, 0.0, None)
            if weights.sum() > 0:
                columns.extend(np.sqrt(softmax(word_sims / WORD_TAU, axis=1)))
            else:
                weights = np.zeros(0, np.float32)
        return QueryColumns(sims, np.ascontiguousarray(np.stack(columns, axis=1), dtype=np.float32),
                            weights.astype(np.float32))

    def _rows_view(self, rows: np.ndarray | None):
        """The three per-item arrays for ``rows`` (all items: no copy); the last few row sets are kept, since a
        large library's ranking reads the same fixed sample every query (``evidence.fixed_sample``)."""
        if rows is None or (len(rows) == len(self) and rows[0] == 0 and rows[-1] == len(self) - 1):
            return self._sqrt, self._probs, self._inv_norms
        key = (len(rows), hash(np.ascontiguousarray(rows, np.int64).tobytes()))
        view = self._views.pop(key, None)  # least recently used first: a hit goes back to the end
        if view is None:
            view = self._slice(rows)
            if len(rows) < self._VIEW_MIN:  # small sets are cheap to slice again and rarely repeat
                return view
        self._views[key] = view
        while len(self._views) > 4:
            self._views.pop(next(iter(self._views)), None)
        return view

    def _slice(self, rows: np.ndarray):
        """The three per-item arrays of ``rows``, copied. Every row holds exactly ``top_k`` classes, so the rows'
        matrices are gathered from the (N, k) arrays directly: the same matrices as scipy's fancy row indexing,
        which cost twice as much (a ranking slices its few hundred candidates every query)."""
        from scipy.sparse import csr_matrix

        k, shape = self._k, (len(rows), self._sqrt.shape[1])
        if k == 0:
            return self._sqrt[rows], self._probs[rows], self._inv_norms[rows]
        indptr = np.arange(0, len(rows) * k + 1, k, dtype=np.int64)
        classes = self._sqrt.indices.reshape(-1, k)[rows].ravel()
        return (csr_matrix((self._sqrt.data.reshape(-1, k)[rows].ravel(), classes, indptr), shape=shape),
                csr_matrix((self._probs.data.reshape(-1, k)[rows].ravel(), classes, indptr), shape=shape),
                self._inv_norms[rows])


@dataclass(frozen=True)
class QueryColumns:
    """A query over the class vocabulary: the sentence's class similarities (C,), the square-rooted class
    distributions of the sentence and of each class-naming word (C, 1 + W), and the words' weights (W,)."""

    sims: np.ndarray
    columns: np.ndarray
    weights: np.ndarray


def combine_terms(terms: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """The zero-shot score: each term of :meth:`ZeroShotIndex.terms` z-scored (over ``reference``'s rows, default
    the same ones) and summed; a term that is constant (no word names a class) adds nothing."""
    ref = terms if reference is None else reference
    total = np.zeros(len(terms), np.float32)
    for j in range(terms.shape[1]):
        std = float(ref[:, j].std()) if len(ref) else 0.0
        if std > 1e-9:
            total += (terms[:, j] - float(ref[:, j].mean())) / std
    return total.astype(np.float32)


def frame_distributions(region_ids: np.ndarray, region_probs: np.ndarray, frames: int, k: int
                        ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sampled frame of a clip, its top ``k`` classes and probabilities from its regions' top classes
    (``region_ids`` / ``region_probs`` (T * R, k') as the feature store keeps them): each class's maximum over
    the frame's regions, normalised to sum to 1."""
    if frames < 1 or len(region_ids) % frames:
        return []
    per = len(region_ids) // frames
    out = []
    for t in range(frames):
        ids = region_ids[t * per:(t + 1) * per].astype(np.int64).ravel()
        probs = region_probs[t * per:(t + 1) * per].astype(np.float32).ravel()
        best: dict[int, float] = {}
        for c, p in zip(ids.tolist(), probs.tolist(), strict=True):
            if p > best.get(c, 0.0):
                best[c] = p
        out.append(top_distribution(best, k))
    return out


def top_distribution(mass: dict[int, float], k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, probabilities)`` of the ``k`` classes with most ``mass`` (class -> weight), normalised to sum to 1;
    fewer distinct classes than ``k`` are padded with zero probability."""
    ranked = sorted(mass.items(), key=lambda cp: -cp[1])[:k]
    while len(ranked) < k:
        ranked.append((ranked[-1][0] if ranked else 0, 0.0))
    top_ids = np.array([c for c, _ in ranked], np.int64)
    top_probs = np.array([p for _, p in ranked], np.float32)
    return top_ids, top_probs / max(float(top_probs.sum()), 1e-9)
