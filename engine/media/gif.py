"""GIF frames composited the way web browsers show them.

Pillow decodes each frame's LZW data on its own (a one-frame GIF is rebuilt in memory from the frame's
bytes, so Pillow only ever sees palette indices); the compositing is done here, following what
Firefox and Chrome do rather than Pillow's own canvas, which after "restore to background" paints the
transparent colour opaque when the first frame had no transparency:

- the canvas starts fully transparent (the GIF background colour is ignored, as browsers do);
- a frame draws its non-transparent pixels in its rectangle (clipped to the canvas), with its own
  palette (local, else global);
- after it is shown, disposal 2 clears its rectangle to transparent, disposal 3 restores the rectangle
  as it was before the frame, 0 and 1 leave it.

Transparent canvas pixels are flattened onto :data:`engine.media.stills.BACKGROUND` (white).
"""

from __future__ import annotations

import io
import mmap
import struct
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
from PIL import Image

from engine.media.containers import AnimationScan, GifFrameRecord
from engine.media.errors import DECODER_ERRORS, BrokenFrame, MediaError, translated_errors
from engine.media.sniff import CheckedFile
from engine.media.stills import BACKGROUND, check_pixels

T = TypeVar("T")


def gif_frames(
    checked: CheckedFile, scan: AnimationScan, indices: Sequence[int], finish: Callable[[Image.Image], T]
) -> list[T]:
    """``finish(frame)`` for each requested frame, composited and flattened to RGB, in ``indices`` order.

    Raises BrokenFrame(k) when frame k > 0 cannot be decoded, MediaError when frame 0 cannot.
    """
    if scan.canvas is None or not scan.gif_frames:
        raise MediaError("truncated GIF (no complete frame)")
    width, height = scan.canvas
    check_pixels(width, height, what="GIF")
    canvas = np.zeros((height, width), dtype=np.uint32)  # one RGBA pixel per uint32: 4x fewer array ops
    wanted, kept = set(indices), {}
    with translated_errors("GIF"), open(checked.path, "rb") as file:
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for index, frame in enumerate(scan.gif_frames[: max(indices) + 1]):
                pixels = _decode_or_report(data, frame, index)
                restore = _draw(canvas, frame, pixels)
                if index in wanted:
                    kept[index] = finish(_flatten(canvas))
                _dispose(canvas, frame, restore)
    return [kept[index] for index in indices]


def _decode_or_report(data: mmap.mmap, frame: GifFrameRecord, index: int) -> np.ndarray:
    try:
        check_pixels(max(frame.width, 1), max(frame.height, 1), what="GIF frame")
        return _frame_indices(data, frame)
    except (MediaError, *DECODER_ERRORS) as error:
        if index == 0:
            raise
        raise BrokenFrame(index) from error


def _frame_indices(data: mmap.mmap, frame: GifFrameRecord) -> np.ndarray:
    """The frame's palette indices (height x width), decoded by Pillow from a rebuilt one-frame GIF
    without palettes (so Pillow returns the raw indices as an 'L' image)."""
    if frame.width == 0 or frame.height == 0:
        return np.zeros((frame.height, frame.width), dtype=np.uint8)
    descriptor_flags = 0x40 if frame.interlaced else 0
    rebuilt = b"".join(
        (
            b"GIF89a",
            struct.pack("<HHBBB", frame.width, frame.height, 0, 0, 0),
            b"\x2c",
            struct.pack("<HHHHB", 0, 0, frame.width, frame.height, descriptor_flags),
            data[frame.data_start : frame.data_end],
            b"\x3b",
        )
    )
    with Image.open(io.BytesIO(rebuilt), formats=["GIF"]) as image:
        image.load()
        return np.asarray(image, dtype=np.uint8)


def _rgba_palette(frame: GifFrameRecord) -> np.ndarray:
    """256 RGBA entries packed as uint32: the frame's palette (grey ramp when the file has none),
    missing entries black, the transparent index fully transparent."""
    table = np.zeros((256, 4), dtype=np.uint8)
    table[:, 3] = 255
    if frame.palette:
        colors = np.frombuffer(frame.palette, dtype=np.uint8).reshape(-1, 3)[:256]
        table[: len(colors), :3] = colors
    else:
        table[:, :3] = np.arange(256, dtype=np.uint8)[:, None]
    if frame.transparent is not None:
        table[frame.transparent] = 0
    return table.view(np.uint32).ravel()


def _clip(canvas: np.ndarray, frame: GifFrameRecord) -> tuple[slice, slice, int, int]:
    height, width = canvas.shape
    bottom, right = min(frame.top + frame.height, height), min(frame.left + frame.width, width)
    n_rows, n_cols = max(0, bottom - frame.top), max(0, right - frame.left)
    return slice(frame.top, frame.top + n_rows), slice(frame.left, frame.left + n_cols), n_rows, n_cols


def _draw(canvas: np.ndarray, frame: GifFrameRecord, pixels: np.ndarray) -> np.ndarray | None:
    """Draw the frame; returns what its rectangle held before when disposal 3 will need it."""
    rows, cols, n_rows, n_cols = _clip(canvas, frame)
    region = canvas[rows, cols]  # a view: writing it draws on the canvas
    restore = region.copy() if frame.disposal == 3 else None
    indices = pixels[:n_rows, :n_cols]
    colors = _rgba_palette(frame)[indices]
    if frame.transparent is None:
        region[...] = colors
    else:
        np.copyto(region, colors, where=indices != frame.transparent)
    return restore


def _dispose(canvas: np.ndarray, frame: GifFrameRecord, restore: np.ndarray | None) -> None:
    rows, cols, _, _ = _clip(canvas, frame)
    if frame.disposal == 2:
        canvas[rows, cols] = 0
    elif frame.disposal == 3 and restore is not None:
        canvas[rows, cols] = restore


def _flatten(canvas: np.ndarray) -> Image.Image:
    rgba = canvas.view(np.uint8).reshape(*canvas.shape, 4)
    rgb = rgba[:, :, :3].copy()
    rgb[rgba[:, :, 3] == 0] = BACKGROUND
    return Image.fromarray(rgb)
