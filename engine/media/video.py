"""Video frames through OpenCV (FFmpeg backend): seek by index, else read in order, always bounded.

The container's frame count is trusted first and frames are fetched by seeking to their index. When
seeking fails (a read after a seek returns nothing: the count was too high, or the stream cannot seek)
or the count is missing or absurd, the frames are counted by reading them in order, at most
:data:`limits.MAX_VIDEO_SEQUENTIAL_FRAMES`, and the sample is taken among those.

A rotated video (a phone held upright: the track's display matrix says 90 degrees) is decoded upright, and its
width and height are the upright ones; OpenCV's FFmpeg backend applies the rotation, asked for explicitly here.

OpenCV and FFmpeg write their own complaints about a broken file ("moov atom not found", "VIDEOIO(FFMPEG):
backend is generally available but can't be used to capture by name") straight to file descriptor 2. The media
layer reports a broken file once, as a :class:`MediaError`, so :func:`quiet_decoders` turns both logs off when
this module is imported: OpenCV reads the FFmpeg level once, when the process first uses FFmpeg (a capture or a
writer, anywhere), so the first video opened would be too late if something else had used FFmpeg before.
Setting ``OPENCV_LOG_LEVEL`` or ``OPENCV_FFMPEG_LOGLEVEL`` in the environment keeps that choice (for debugging).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import cv2
import numpy as np
from PIL import Image

from engine.media import limits
from engine.media.errors import MediaError, translated_errors
from engine.media.sniff import CheckedFile
from engine.media.stills import check_pixels

T = TypeVar("T")
_MAX_PLAUSIBLE_FPS = 1000.0


@dataclass(frozen=True, slots=True)
class VideoStream:
    """What the container says about a video; ``counted`` is True when ``n_frames`` came from reading
    the frames in order (then seeking is not attempted)."""

    width: int
    height: int
    n_frames: int
    fps: float | None
    counted: bool

    @property
    def duration_s(self) -> float | None:
        return self.n_frames / self.fps if self.fps else None


@functools.cache
def quiet_decoders() -> None:
    """Silence OpenCV's and FFmpeg's own stderr logging for this process, once, unless the user set a level.

    Measured with OpenCV 5.0 (opencv-python-headless): ``OPENCV_FFMPEG_LOGLEVEL`` works when set before the
    process first uses FFmpeg (not after: a ``VideoWriter`` made first is enough to defeat it);
    ``cv2.utils.logging.setLogLevel`` silences OpenCV's own warnings at any time but not FFmpeg's. The two
    together leave stderr clean for a truncated or moov-less MP4.
    """
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # AV_LOG_QUIET
    if "OPENCV_LOG_LEVEL" not in os.environ:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)


quiet_decoders()


@contextmanager
def _capture(checked: CheckedFile) -> Iterator[cv2.VideoCapture]:
    capture = cv2.VideoCapture(str(checked.path), cv2.CAP_FFMPEG)
    try:
        if not capture.isOpened():
            if not checked.path.exists():
                raise MediaError("file disappeared")
            if checked.fmt in ("mp4", "mov") and not _has_movie_index(checked):
                raise MediaError(f"incomplete {checked.display} (no index: the file was cut short or is still "
                                 "being written)")
            raise MediaError(f"corrupt or unsupported {checked.display}")
        capture.set(cv2.CAP_PROP_ORIENTATION_AUTO, 1)  # the default of the FFmpeg backend; not left to chance
        yield capture
    finally:
        capture.release()


def _has_movie_index(checked: CheckedFile, max_boxes: int = 10_000) -> bool:
    """Whether an MP4/QuickTime file has its top-level 'moov' box (the index a player needs), walking the box
    headers only; an unreadable file counts as having one (the generic message is then the right one)."""
    try:
        with open(checked.path, "rb") as file:
            position = 0
            for _ in range(max_boxes):
                file.seek(position)
                header = file.read(16)
                if len(header) < 8:
                    return False
                size, kind = int.from_bytes(header[:4], "big"), header[4:8]
                if kind == b"moov":
                    return True
                if size == 1 and len(header) == 16:
                    size = int.from_bytes(header[8:16], "big")  # a 64-bit size follows the type
                if size < 8:  # 0: the box runs to the end of the file; below 8: malformed
                    return False
                position += size
    except OSError:
        return True
    return True


def inspect_video(checked: CheckedFile) -> VideoStream:
    """Size, frame rate and frame count of a video; MediaError when it has no decodable frame."""
    with translated_errors(checked.display), _capture(checked) as capture:
        width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
        height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if width <= 0 or height <= 0:
            raise MediaError(f"{checked.display} has no video stream")
        check_pixels(width, height, what=checked.display)
        fps = capture.get(cv2.CAP_PROP_FPS)
        fps = fps if math.isfinite(fps) and 0 < fps <= _MAX_PLAUSIBLE_FPS else None
        reported = capture.get(cv2.CAP_PROP_FRAME_COUNT)
        if math.isfinite(reported) and 1 <= reported <= limits.MAX_VIDEO_REPORTED_FRAMES:
            return VideoStream(width, height, int(reported), fps, counted=False)
        n_frames = _count_frames(capture)
    if n_frames == 0:
        raise MediaError(f"{checked.display} has no frames")
    return VideoStream(width, height, n_frames, fps, counted=True)


def video_frames(
    checked: CheckedFile,
    stream: VideoStream,
    choose: Callable[[int], list[int]],
    finish: Callable[[Image.Image], T],
) -> list[T]:
    """``finish(frame)`` (RGB) for the frames ``choose(n_frames)``, in that order."""
    with translated_errors(checked.display):
        if not stream.counted:
            frames = _read_by_seeking(checked, choose(stream.n_frames), finish)
            if frames is not None:
                return frames
            with _capture(checked) as capture:
                n_frames = _count_frames(capture)
        else:
            n_frames = stream.n_frames
        if n_frames == 0:
            raise MediaError(f"{checked.display} has no decodable frames")
        return _read_in_order(checked, choose(n_frames), finish)


def _count_frames(capture: cv2.VideoCapture) -> int:
    count = 0
    while count < limits.MAX_VIDEO_SEQUENTIAL_FRAMES and capture.grab():
        count += 1
    return count


def _to_image(frame: np.ndarray | None, what: str) -> Image.Image:
    if frame is None or frame.ndim != 3 or frame.shape[2] != 3:
        raise MediaError(f"corrupt {what} (unexpected frame layout)")
    return Image.fromarray(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))


def _read_by_seeking(
    checked: CheckedFile, indices: list[int], finish: Callable[[Image.Image], T]
) -> list[T] | None:
    """The frames at ``indices``, or None as soon as one cannot be read after seeking to it."""
    kept: dict[int, T] = {}
    with _capture(checked) as capture:
        position = 0
        for index in sorted(set(indices)):
            if index != position:  # consecutive frames (a training window) need no seek
                capture.set(cv2.CAP_PROP_POS_FRAMES, index)
            ok, frame = capture.read()
            if not ok:
                return None
            kept[index] = finish(_to_image(frame, checked.display))
            position = index + 1
    return [kept[index] for index in indices]


def _read_in_order(checked: CheckedFile, indices: list[int], finish: Callable[[Image.Image], T]) -> list[T]:
    wanted, kept = set(indices), {}
    with _capture(checked) as capture:
        for position in range(max(indices) + 1):
            if not capture.grab():
                raise MediaError(f"truncated {checked.display} (frame {position} cannot be read)")
            if position in wanted:
                ok, frame = capture.retrieve()
                if not ok:
                    raise MediaError(f"corrupt {checked.display} (frame {position} cannot be decoded)")
                kept[position] = finish(_to_image(frame, checked.display))
    return [kept[index] for index in indices]
