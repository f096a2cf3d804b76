"""Animated GIF, WebP and APNG: the composited frames a viewer shows, decoded in order.

GIF frames are composited by :mod:`engine.media.gif` the way browsers do. WebP and APNG frames come
composited from Pillow (libwebp's animation decoder; Pillow's APNG dispose/blend operations). Frames are
flattened onto white like still images; EXIF orientation is not applied to animation frames (no viewer
does).

A frame that cannot be decoded ends the animation: the frames before it are used (a GIF cut off in its
tenth frame is a 9-frame GIF); if the first frame is broken the file is refused with a MediaError.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from PIL import Image

from engine.media import limits
from engine.media.containers import AnimationScan, scan_animation
from engine.media.errors import DECODER_ERRORS, BrokenFrame, MediaError, translated_errors
from engine.media.gif import gif_frames
from engine.media.sniff import CheckedFile
from engine.media.stills import check_pixels, open_pillow, to_rgb

T = TypeVar("T")


def scan(checked: CheckedFile) -> AnimationScan:
    """Count the frames of a GIF/APNG/WebP cheaply, capped by the frame and pixel budgets."""
    with translated_errors(checked.display):
        canvas = scan_animation(checked.path, checked.fmt, 1).canvas
        if canvas is not None:
            check_pixels(*canvas, what=checked.display)
        budget = limits.MAX_ANIMATION_DECODED_PIXELS // max(1, canvas[0] * canvas[1]) if canvas else 1
        return scan_animation(checked.path, checked.fmt, max(1, min(limits.MAX_ANIMATION_FRAMES, budget)))


def composited_frames(
    checked: CheckedFile, scan: AnimationScan, indices: Sequence[int], finish: Callable[[Image.Image], T]
) -> list[T]:
    """``finish(frame)`` for each requested animation frame (RGB, composited, flattened), in the order
    of ``indices`` (repeats allowed). Frames are decoded in order up to the largest index.

    Raises BrokenFrame(k) when frame k > 0 fails, MediaError when frame 0 fails.
    """
    if checked.fmt == "gif":
        return gif_frames(checked, scan, indices, finish)
    wanted = set(indices)
    kept: dict[int, T] = {}
    with open_pillow(checked) as image:
        # An APNG whose default image is not part of the animation: Pillow shows it as frame 0.
        offset = 1 if checked.fmt == "png" and getattr(image, "default_image", False) else 0
        for index in range(max(indices) + 1):
            try:
                image.seek(index + offset)
                check_pixels(*image.size, what=checked.display)
                image.load()
            except DECODER_ERRORS as error:
                if index == 0:
                    raise
                raise BrokenFrame(index) from error
            if index in wanted:
                kept[index] = finish(to_rgb(image))
    return [kept[index] for index in indices]


def decode_sampled(
    checked: CheckedFile,
    scan: AnimationScan,
    choose: Callable[[int], list[int]],
    finish: Callable[[Image.Image], T],
) -> list[T]:
    """Frames ``choose(n_frames)``; if a frame turns out broken, choose again among the good ones."""
    try:
        return composited_frames(checked, scan, choose(scan.n_frames), finish)
    except BrokenFrame as broken:
        n_good = broken.index
    try:
        return composited_frames(checked, scan, choose(n_good), finish)
    except BrokenFrame as broken:  # the file changed under us: frames that decoded a moment ago fail
        raise MediaError(f"corrupt {checked.display} ({broken})") from broken
