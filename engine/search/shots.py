"""A clip's sampled frames pooled into shots: the views a clip shows, each counted once (issue #40).

A clip is found by what any part of it shows: it is scored by the best of its frames. But the best of several
near-identical frames stands above one frame by chance alone: a GIF that slowly zooms into one photo was found more
often than the photo itself (its best crop of nine), while a slideshow, whose frames of one photo are identical, was
not. So consecutive frames whose backbone features stay close to the first frame of their run (cosine
>= :data:`SHOT_COSINE`) are one shot, and a shot is scored as the mean of its frames (their mean feature, their mean
class distribution): a clip's score is the best of its *shots*, and the calibration's ``frames_bias`` counts shots,
not frames. The threshold sits between what the backbone's global features measured (bench-results/shots.json):
consecutive crops of one slowly zoomed photo 0.86-0.96 (to the first crop 0.69-0.83), a slideshow's cut 0.21-0.34,
consecutive frames of a real video (MSR-VTT, 2 frames a second) anywhere from 0.4 to 0.98.
"""

from __future__ import annotations

import numpy as np

SHOT_COSINE = 0.7  # a frame joins the running shot while its cosine with the shot's first frame is at least this


def shot_labels(frames: np.ndarray, threshold: float | None = None) -> np.ndarray:
    """Per frame (``frames``: (T, C) global features, in time order), the shot it belongs to, 0..S-1."""
    threshold = SHOT_COSINE if threshold is None else threshold
    frames = np.asarray(frames, np.float32)
    labels = np.zeros(len(frames), np.int64)
    if len(frames) < 2:
        return labels
    unit = frames / np.maximum(np.linalg.norm(frames, axis=1, keepdims=True), 1e-9)
    first, shot = 0, 0
    for t in range(1, len(frames)):
        if float(unit[t] @ unit[first]) < threshold:
            shot, first = shot + 1, t
        labels[t] = shot
    return labels


def pooled_shots(frames: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(shots (S, C), representative frame per shot (S,))``: each shot's mean feature, and the frame of the shot
    nearest that mean (the one a viewer opens at)."""
    frames = np.asarray(frames, np.float32)
    count = int(labels.max()) + 1 if len(labels) else 0
    means = np.stack([frames[labels == s].mean(axis=0) for s in range(count)]) if count else frames[:0]
    unit = frames / np.maximum(np.linalg.norm(frames, axis=1, keepdims=True), 1e-9)
    centre = means / np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-9)
    representative = np.array([int(np.flatnonzero(labels == s)[np.argmax(unit[labels == s] @ centre[s])])
                               for s in range(count)], np.int64)
    return means, representative


def pooled_distributions(distributions: list[tuple[np.ndarray, np.ndarray]], labels: np.ndarray, k: int
                         ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per shot, the mean of its frames' class distributions (each frame's top ``k`` classes and probabilities),
    kept to its top ``k`` and normalised."""
    out = []
    for s in range(int(labels.max()) + 1 if len(labels) else 0):
        members = [distributions[t] for t in np.flatnonzero(labels == s)]
        mass: dict[int, float] = {}
        for ids, probs in members:
            for c, p in zip(ids.tolist(), probs.tolist(), strict=True):
                mass[c] = mass.get(c, 0.0) + p / len(members)
        ranked = sorted(mass.items(), key=lambda cp: -cp[1])[:k]
        while len(ranked) < k:
            ranked.append((ranked[-1][0] if ranked else 0, 0.0))
        top_ids = np.array([c for c, _ in ranked], np.int64)
        top_probs = np.array([p for _, p in ranked], np.float32)
        out.append((top_ids, top_probs / max(float(top_probs.sum()), 1e-9)))
    return out
