"""The multi-vector index's scoring rule and its errors: PVSE's K x K max-cosine (§3.4) in plain numpy.

PVSE represents every item by K embeddings and scores an item for a query with Kq embeddings by the best of the
Kq x K cosine pairs ("Inference", §3.4): :func:`kxk_scores`. Every search of the index, exact or approximate,
scores its candidates by it (:mod:`engine.search.vectorindex.index`).
"""

from __future__ import annotations

import cv2
import numpy as np

from engine.search import threads


class VectorIndexError(Exception):
    """Base class of the vector index's errors."""


class IndexInputError(VectorIndexError, ValueError):
    """Ids, vectors or a query have the wrong shape, type or values; the message names which."""


class IndexFileError(VectorIndexError, OSError):
    """A saved index is missing, unreadable or of another format; the message names the file."""


class ModelMismatchError(VectorIndexError):
    """A saved index was built with another model than the one asked for."""


def normalise(vectors: np.ndarray) -> np.ndarray:
    """float32 copy of ``vectors`` with unit L2 norm along the last axis (zero vectors stay zero)."""
    out = np.array(vectors, dtype=np.float32, copy=True)
    norms = np.linalg.norm(out, axis=-1, keepdims=True)
    out /= np.maximum(norms, 1e-12)
    return out


def kxk_scores(query: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PVSE §3.4 inference: for a query (Kq, D) and items (N, K, D), the best cosine of the Kq x K pairs.

    Returns ``scores`` (N,) float32 and ``pairs`` (N, 2) int64 with the (query head, item head) that
    gave each score. Both sides are L2-normalised here, so any non-zero vectors may be passed.
    """
    query, items = np.asarray(query), np.asarray(items)
    if query.ndim != 2 or items.ndim != 3 or query.shape[1] != items.shape[2]:
        raise IndexInputError(f"kxk_scores: expected query (Kq, D) and items (N, K, D), got "
                              f"{query.shape} and {items.shape}")
    return max_pairs(normalise(query), normalise(items))


def widen(vectors: np.ndarray) -> np.ndarray:
    """float16 stored vectors as float32 (float32 ones as they are): OpenCV's vectorised conversion, adding 0
    (exact), ~7x NumPy's element-by-element cast and 2x OpenCV's multiplying by 1; it was most of a companion's
    K x K scoring of a query's candidates (0.5 ms of 1.1 for 314 items of 3 x 1,024 halves)."""
    if vectors.dtype != np.float16 or vectors.size < 4096:
        return vectors.astype(np.float32, copy=False)
    flat = np.ascontiguousarray(vectors).reshape(len(vectors), -1)
    return cv2.add(flat, 0.0, dtype=cv2.CV_32F).reshape(vectors.shape)


def dot(rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(N, Q) inner products of (N, D) rows with (Q, D) queries.

    BLAS (``@``) while a query holds its pools to one thread (:func:`engine.search.threads.held`), about twice
    ``np.einsum``; ``np.einsum`` otherwise: a matrix with a handful of columns is memory-bound, and OpenBLAS's
    threads made it 10-100x slower whenever the two cores were busy (12 ms instead of 0.1 ms for 900 rows).
    """
    if threads.held():
        return rows @ queries.T
    return np.einsum("nd,qd->nq", rows, queries)


def max_pairs(query: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`kxk_scores` on already-normalised float32 arrays (the hot path)."""
    n, heads, dim = items.shape
    sims = dot(items.reshape(n * heads, dim), query).reshape(n, heads, len(query))
    if heads * len(query) == 1:  # one vector a side: no pair to choose
        return sims.reshape(n).astype(np.float32, copy=False), np.zeros((n, 2), np.int64)
    flat = sims.transpose(0, 2, 1).reshape(n, len(query) * heads)  # column p * K + q
    best = flat.argmax(axis=1)
    scores = flat[np.arange(n), best]
    return scores.astype(np.float32), np.stack([best // heads, best % heads], axis=1).astype(np.int64)


def top_rows(ids: np.ndarray, scores: np.ndarray, pairs: np.ndarray, top: int, offset: int
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``offset .. offset + top`` of the ranking by score (ties: smaller id first)."""
    stop = min(len(ids), offset + top)
    if stop <= offset:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, 2), np.int64)
    part = np.argpartition(-scores, stop - 1)[:stop] if stop < len(ids) else np.arange(len(ids))
    order = part[np.lexsort((ids[part], -scores[part]))][offset:stop]
    return ids[order], scores[order], pairs[order]
