"""The decoding entry points: probe, one picture per file, a fixed number of frames per file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import numpy as np
from PIL import Image

from engine.media import animation
from engine.media.containers import AnimationScan
from engine.media.errors import MediaError
from engine.media.exif import capture_info
from engine.media.sampling import FRAMES_PER_ITEM, SamplingMode, frame_indices, stride_for_fps
from engine.media.sniff import ANIMATABLE_FORMATS, CheckedFile, check_file
from engine.media.stills import check_pixels, open_pillow, prepare_still, squash
from engine.media.video import VideoStream, inspect_video, video_frames
from engine.types import CaptureInfo, MediaKind

T = TypeVar("T")
DEFAULT_SIZE = 224  # the backbone's input side


@dataclass(frozen=True, slots=True)
class MediaInfo:
    """What :func:`probe` learns from a file's headers. ``n_frames`` is 1 for a still image, the
    (capped) frame count of an animation, and the container's frame count of a video (which may be an
    estimate). ``duration_s`` is None for stills and for videos without a frame rate. ``capture`` is what a
    picture's EXIF says of when and with what it was taken (nothing for videos)."""

    kind: MediaKind
    format: str
    width: int
    height: int
    n_frames: int
    duration_s: float | None
    capture: CaptureInfo = CaptureInfo()  # a picture's EXIF date and camera (read from the opened header)


def classify(checked: CheckedFile) -> tuple[MediaKind, AnimationScan | None]:
    """IMAGE, ANIMATION (a GIF/WebP/APNG with more than one frame) or VIDEO, from content."""
    if checked.is_video:
        return MediaKind.VIDEO, None
    if checked.fmt not in ANIMATABLE_FORMATS:
        return MediaKind.IMAGE, None
    scan = animation.scan(checked)
    if checked.fmt == "gif" and scan.n_frames == 0:
        raise MediaError("truncated GIF (no complete frame)")
    return (MediaKind.ANIMATION if scan.n_frames > 1 else MediaKind.IMAGE), scan


def probe(path: Path) -> MediaInfo:
    """Kind, format, size and length of a media file from its headers, without decoding pixels.

    Cheap (a few header reads; a GIF's blocks are walked up to the frame cap), so a file that probes
    fine may still fail to decode. Raises MediaError with the reason.
    """
    checked = check_file(path)
    kind, scan = classify(checked)
    if kind is MediaKind.VIDEO:
        return _video_info(checked, inspect_video(checked))
    with open_pillow(checked) as image:
        return _picture_info(checked, kind, scan, image)


def probe_and_decode(path: Path, n: int = FRAMES_PER_ITEM, size: int = DEFAULT_SIZE) -> tuple[MediaInfo, np.ndarray]:
    """:func:`probe` and the frames indexing feeds the backbone, in one pass over the file.

    The same as ``probe(path)`` with ``decode_image(path, size)[None]`` for a still image (1, size, size, 3)
    and ``decode_frames(path, n, size)`` (uniform sampling) otherwise, but the file is checked, classified
    and (a still) opened once instead of twice: for a 224 px photo the second open costs a fifth of the
    decode. Raises MediaError with the reason, as they do.
    """
    _check_positive(n=n, size=size)
    checked = check_file(path)
    kind, scan = classify(checked)
    finish = partial(squash, size=size)
    if kind is MediaKind.VIDEO:
        stream = inspect_video(checked)
        choose = partial(frame_indices, n=n, stride=stride_for_fps(stream.fps))
        return _video_info(checked, stream), np.stack(video_frames(checked, stream, choose, finish))
    if kind is MediaKind.ANIMATION and scan is not None:
        with open_pillow(checked) as image:
            info = _picture_info(checked, kind, scan, image)
        choose = partial(frame_indices, n=n, stride=stride_for_fps(scan.fps))
        return info, np.stack(animation.decode_sampled(checked, scan, choose, finish))
    with open_pillow(checked) as image:
        info = _picture_info(checked, kind, scan, image)  # the declared size, before draft mode shrinks it
        return info, finish(prepare_still(image, checked, size))[None]


def _video_info(checked: CheckedFile, stream: VideoStream) -> MediaInfo:
    return MediaInfo(MediaKind.VIDEO, checked.fmt, stream.width, stream.height, stream.n_frames, stream.duration_s)


def _picture_info(checked: CheckedFile, kind: MediaKind, scan: AnimationScan | None,
                  image: Image.Image) -> MediaInfo:
    width, height = image.size
    if checked.fmt != "jpeg":  # JPEG decodes at a reduced draft size, checked when decoding
        check_pixels(width, height, what=checked.display)
    if kind is MediaKind.ANIMATION and scan is not None:
        return MediaInfo(kind, checked.fmt, width, height, scan.n_frames, scan.duration_s, capture_info(image))
    return MediaInfo(kind, checked.fmt, width, height, 1, None, capture_info(image))


def load_image(path: Path, min_size: int | None = None) -> Image.Image:
    """The picture that stands for a file, as an upright RGB Pillow image before any resizing: the image
    itself, the first composited frame of an animation, the middle frame of a video.

    With ``min_size``, a JPEG is decoded in draft mode at the smallest 1/2, 1/4 or 1/8 scale that keeps
    both sides >= ``min_size`` (a 4000 x 3000 photo for 224 decodes at 500 x 375).
    """
    return _still(check_file(path), min_size, Image.Image.copy)  # an upright RGB file is the opened image: closed


def decode_image(path: Path, size: int = DEFAULT_SIZE) -> np.ndarray:
    """The picture of :func:`load_image`, whole, squashed to ``size`` x ``size``: uint8 RGB (size, size, 3).

    EXIF orientation applied; alpha and palette transparency composited on white
    (:data:`engine.media.stills.BACKGROUND`); 16-bit greyscale rescaled; JPEG decoded in draft mode.
    Raises MediaError with the reason for anything that is not a usable media file.
    """
    _check_positive(size=size)
    return _still(check_file(path), size, partial(squash, size=size))


def decode_frames(
    path: Path,
    n: int = FRAMES_PER_ITEM,
    size: int = DEFAULT_SIZE,
    mode: SamplingMode = "uniform",
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """``n`` frames, uint8 RGB (n, size, size, 3), each squashed like :func:`decode_image`.

    Frames chosen by :func:`engine.media.sampling.frame_indices` (PVSE §3.5: evenly spread for
    inference, a random contiguous window on the 8 FPS timeline for training). Animations give the
    composited frames a viewer shows; a still image gives its one picture ``n`` times; videos are read
    with OpenCV. Raises MediaError with the reason.
    """
    _check_positive(n=n, size=size)
    checked = check_file(path)
    kind, scan = classify(checked)
    finish = partial(squash, size=size)
    if kind is MediaKind.IMAGE:
        return np.repeat(_still(checked, size, finish, (kind, scan))[None], n, axis=0)
    if kind is MediaKind.ANIMATION and scan is not None:
        choose = partial(frame_indices, n=n, mode=mode, rng=rng, stride=stride_for_fps(scan.fps))
        return np.stack(animation.decode_sampled(checked, scan, choose, finish))
    stream = inspect_video(checked)
    choose = partial(frame_indices, n=n, mode=mode, rng=rng, stride=stride_for_fps(stream.fps))
    return np.stack(video_frames(checked, stream, choose, finish))


def _still(
    checked: CheckedFile,
    min_size: int | None,
    finish: Callable[[Image.Image], T],
    classified: tuple[MediaKind, AnimationScan | None] | None = None,
) -> T:
    kind, scan = classified or classify(checked)
    if kind is MediaKind.VIDEO:
        middle = partial(frame_indices, n=1)
        return video_frames(checked, inspect_video(checked), middle, finish)[0]
    if kind is MediaKind.ANIMATION and scan is not None:
        return animation.composited_frames(checked, scan, [0], finish)[0]
    with open_pillow(checked) as image:
        return finish(prepare_still(image, checked, min_size))


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
