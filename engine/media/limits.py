"""Resource limits for decoding untrusted media (read through the module, so tests can lower them).

Every limit here exists so that one hostile or absurd file costs a bounded amount of time and memory
and is reported as a :class:`~engine.media.errors.MediaError` instead of stalling or killing the indexer.
Code reads them as ``limits.NAME`` at call time, never ``from ... import NAME``, so a test may
``monkeypatch.setattr(limits, "NAME", small)``.
"""

from __future__ import annotations

MAX_FILE_BYTES = 4 * 1024**3
"""Any file larger than this (4 GiB) is refused before it is opened."""

MAX_IMAGE_FILE_BYTES = 512 * 1024**2
"""Still and animated images larger than this (512 MiB) are refused: Pillow reads some formats
(WebP) into memory whole, and no real photo or GIF comes near this size."""

MAX_IMAGE_PIXELS = 100_000_000
"""Most pixels one image (or animation canvas, or video frame) may decode to. Checked on the size the
header declares, before any pixel is allocated; for JPEG it applies to the reduced size that draft mode
decodes, so a 108 MP phone photo is fine while a 100 MP PNG is refused. Pillow's own bomb check
(about 179 MP declared) stays in force as a second fence and is reported the same way."""

MAX_ANIMATION_FRAMES = 5_000
"""At most this many frames of an animation are counted and decoded; a longer animation is treated as
its first ``MAX_ANIMATION_FRAMES`` frames (frames are sampled among those)."""

MAX_ANIMATION_DECODED_PIXELS = 2_000_000_000
"""Budget of canvas pixels composited for one animation (frames are decoded in order, so reaching a
late frame means decoding all before it). A large canvas lowers the usable frame count below
``MAX_ANIMATION_FRAMES``: e.g. 1000 x 1000 -> 2,000 frames."""

MAX_VIDEO_SEQUENTIAL_FRAMES = 3_000
"""When a video cannot be seeked by frame index or its frame count is missing or wrong, frames are read
sequentially, at most this many (about 100 s at 30 fps); frames are then sampled among those."""

MAX_VIDEO_REPORTED_FRAMES = 50_000_000
"""A container reporting more frames than this (over 19 days at 30 fps) is not believed; its frames are
counted sequentially instead (bounded by ``MAX_VIDEO_SEQUENTIAL_FRAMES``)."""
