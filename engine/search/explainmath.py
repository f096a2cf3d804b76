"""The numbers an explanation shows, worked out from a model's vectors
(:meth:`engine.search.trained.TrainedSearch.explain`): per-head attention, a clip's frame weights, whether an item's
heads are one, and the 2-D view of two Gaussians."""

from __future__ import annotations

import numpy as np

HEADS_ALIKE = 1e-4  # an item's K unit vectors closer than this in every coordinate are one vector


def frame_attention(frames: np.ndarray, query: np.ndarray) -> tuple[np.ndarray, int, bool]:
    """Per item head, weights over a clip's frames (K, T) from how well each frame (``frames``: T, K, D) matches the
    query (Kq, D) (a softmax of the frame scores at temperature 0.05), the frame that matched best, and whether the
    K heads embed every frame alike (K > 1)."""
    frames, q = normalise_rows(frames), normalise_rows(query)
    sims = np.einsum("tkd,qd->ktq", frames, q).max(axis=2)  # (K, T)
    weights = np.exp((sims - sims.max(axis=1, keepdims=True)) / 0.05)
    alike = frames.shape[1] > 1 and heads_alike(frames)
    return (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32), int(sims.max(axis=0).argmax()), alike


def heads_alike(vectors: np.ndarray) -> bool:
    """Whether the K unit vectors of an item (K, D), or of each of its frames (T, K, D), are one vector K times
    (within float error)."""
    return bool(np.abs(vectors - vectors[..., :1, :]).max() < HEADS_ALIKE)


def normalise_rows(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-9)


def attention_or_none(attention: np.ndarray | None, length: int) -> np.ndarray:
    """Per-head attention (H, R) with rows summing to 1, or an empty (0, 0) array when the method has none."""
    if attention is None:
        return np.zeros((0, 0), np.float32)
    att = attention[0, :, :length].astype(np.float32) if length else attention[0].astype(np.float32)
    return att / np.maximum(att.sum(axis=1, keepdims=True), 1e-9)


def project_pair(mu_q, logsig_q, mu_i, logsig_i):
    """2-D view of two Gaussians for the inspector: the plane through both means and the origin."""
    a = mu_q / max(np.linalg.norm(mu_q), 1e-9)
    b = mu_i - (mu_i @ a) * a
    b = b / max(np.linalg.norm(b), 1e-9) if np.linalg.norm(b) > 1e-6 else np.roll(a, 1)
    basis = np.stack([a, b])  # (2, D)
    sig_q, sig_i = np.exp(logsig_q), np.exp(logsig_i)
    spread = lambda s: np.sqrt((basis ** 2) @ (s ** 2))  # noqa: E731 - per-axis std of the projection
    return (basis @ mu_q).astype(np.float32), (basis @ mu_i).astype(np.float32), \
        spread(sig_q).astype(np.float32), spread(sig_i).astype(np.float32)
