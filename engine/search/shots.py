"""A clip's sampled frames pooled into shots: the views a clip shows, each counted once (issue #40).

A clip is found by what any part of it shows: it is scored by the best of its frames. But the best of several
near-identical frames stands above one frame by chance alone: a GIF that slowly zooms into one photo was found more
often than the photo itself (its best crop of eight), while a slideshow, whose frames of one photo are identical,
was not. So consecutive frames whose backbone features stay close to the first frame of their run (cosine
>= :data:`SHOT_COSINE`) are one shot, and a shot is scored as the mean of its frames (the model: the mean of their
scores; the zero-shot semantics: their mean class distribution). A clip's score is the best of its *shots*, the
calibration's ``frames_bias`` counts shots, not frames, and the frame a viewer opens at is the best frame of the
best shot. The threshold sits between what the backbone's global features measured (docs/benchmarks.md, "Clips"):
consecutive crops of one slowly zoomed photo 0.86-0.96 (to the first crop 0.69-0.83), a slideshow's cut 0.21-0.34,
consecutive frames of a real video (MSR-VTT, 2 frames a second) anywhere from 0.4 to 0.98.
"""

from __future__ import annotations

import numpy as np

from engine.search.zeroshot import top_distribution

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


def shot_scores(frame_scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per clip (a row of ``frame_scores`` (n, T): each sampled frame's score; of ``labels`` (n, T): each frame's
    shot, -1 for a frame that only pads a short clip), ``(the best shot's mean score, the best frame of that shot)``:
    the clip's score and the frame a viewer opens at."""
    n, t = frame_scores.shape
    member = (labels[:, :, None] == np.arange(t)[None, None, :]).astype(np.float32)  # (n, T frames, T shots)
    count = member.sum(axis=1)
    means = np.einsum("nt,nts->ns", frame_scores.astype(np.float32), member) / np.maximum(count, 1)
    means[count == 0] = -np.inf
    best = means.argmax(axis=1)
    inside = np.where(labels == best[:, None], frame_scores, -np.inf)
    return means[np.arange(n), best].astype(np.float32), inside.argmax(axis=1).astype(np.int64)


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
        out.append(top_distribution(mass, k))
    return out
