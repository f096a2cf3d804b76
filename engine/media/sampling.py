"""Which frames of an animation or video a model sees (PVSE, Song & Soleymani 2019, section 3.5)."""

from __future__ import annotations

from typing import Literal

import numpy as np

FRAMES_PER_ITEM = 8
"""PVSE §3.5: "We set the maximum length of video to be 8 frames"."""

SAMPLE_FPS = 8.0
"""PVSE §3.5 subsamples videos at 8 FPS before taking frames; :func:`stride_for_fps` maps a source
frame rate onto that timeline for training windows."""

SamplingMode = Literal["uniform", "random"]


def frame_indices(
    n_total: int,
    n: int = FRAMES_PER_ITEM,
    mode: SamplingMode = "uniform",
    rng: np.random.Generator | None = None,
    stride: int = 1,
) -> list[int]:
    """Indices (ascending, length ``n``) of the frames to take from a sequence of ``n_total`` frames.

    PVSE §3.5: at inference "we sample 8 frames evenly spread across each video"; during training, for
    videos longer than 8 frames, "we select random subsequences".

    - ``uniform``: the centre of each of ``n`` equal segments, ``floor((i + 0.5) * n_total / n)``, so one
      frame gives the middle frame and the first and last frames (often fades) are avoided.
    - ``random``: a contiguous window of ``n`` frames, taken every ``stride`` frames (``stride`` maps the
      source rate onto the paper's 8 FPS timeline, see :func:`stride_for_fps`), starting at a uniformly
      random position; the stride shrinks when the window would not fit.
    - When ``n_total < n`` (both modes) every frame is used, in order, repeated so the length is ``n``.
    """
    if n_total < 1 or n < 1 or stride < 1:
        raise ValueError(f"frame_indices needs n_total, n and stride >= 1 (got {n_total}, {n}, {stride})")
    if mode == "uniform" or n_total <= n:
        return [int((i + 0.5) * n_total / n) for i in range(n)]
    if mode != "random":
        raise ValueError(f"unknown frame sampling mode {mode!r} (expected 'uniform' or 'random')")
    rng = rng if rng is not None else np.random.default_rng()
    stride = min(stride, (n_total - 1) // (n - 1)) if n > 1 else 1
    span = (n - 1) * stride + 1
    start = int(rng.integers(0, n_total - span + 1))
    return [start + i * stride for i in range(n)]


def stride_for_fps(fps: float | None) -> int:
    """Source frames per frame of the 8 FPS timeline of PVSE §3.5 (1 when the rate is unknown or low)."""
    if fps is None or not np.isfinite(fps) or fps <= SAMPLE_FPS:
        return 1
    return max(1, round(fps / SAMPLE_FPS))
