"""Cheap, bounded walks over GIF, PNG and WebP containers: frame count, frame delays, canvas size.

They read block headers only (through mmap, nothing decoded), stop after ``max_frames`` frames, and
stop quietly at the first malformed or truncated block, reporting the frames that were complete.
Pillow's own ``n_frames`` would walk a whole 4 GiB GIF in Python, with no bound.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MIN_FRAME_DELAY_MS = 20
DEFAULT_FRAME_DELAY_MS = 100
"""Browsers show frames with a delay under 20 ms for 100 ms (a GIF delay of 0 or 1 centisecond means
"unspecified"); durations follow the same rule, so they match what a person sees."""


@dataclass(frozen=True, slots=True)
class GifFrameRecord:
    """Where one GIF frame lies in the file and how it is drawn: its rectangle on the canvas, its
    palette (local, else global; raw RGB triplets, empty when the file has none), its LZW data
    (``data_start`` is the minimum-code-size byte, ``data_end`` follows the block terminator), and the
    graphic control values (disposal 0-3, transparent palette index)."""

    left: int
    top: int
    width: int
    height: int
    interlaced: bool
    palette: bytes
    data_start: int
    data_end: int
    disposal: int
    transparent: int | None
    delay_ms: int


@dataclass(frozen=True, slots=True)
class AnimationScan:
    """What a container walk found. ``n_frames`` counts complete frames (at most the cap);
    ``capped`` says the walk stopped at the cap; ``canvas`` is (width, height) when the walk saw it;
    ``gif_frames`` describes each frame of a GIF (empty for other formats)."""

    n_frames: int
    delays_ms: tuple[int, ...]
    capped: bool
    canvas: tuple[int, int] | None = None
    gif_frames: tuple[GifFrameRecord, ...] = ()

    @property
    def duration_s(self) -> float | None:
        return sum(self.delays_ms) / 1000.0 if self.delays_ms else None

    @property
    def fps(self) -> float | None:
        return len(self.delays_ms) / self.duration_s if self.duration_s else None


def scan_animation(path: Path, fmt: str, max_frames: int) -> AnimationScan:
    """Walk ``path`` (format 'gif', 'png' or 'webp'); OSError if it cannot be mapped."""
    walker: Callable[[mmap.mmap, int], AnimationScan] = _WALKERS[fmt]
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return walker(data, max_frames)


def _delay(ms: float) -> int:
    return DEFAULT_FRAME_DELAY_MS if ms < MIN_FRAME_DELAY_MS else int(round(ms))


def _u16le(data: mmap.mmap, at: int) -> int:
    return data[at] | data[at + 1] << 8


def _u24le(data: mmap.mmap, at: int) -> int:
    return data[at] | data[at + 1] << 8 | data[at + 2] << 16


def _u32be(data: mmap.mmap, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "big")


def _skip_sub_blocks(data: mmap.mmap, pos: int) -> int:
    """Position after a GIF sub-block chain, or -1 when the data ends inside it."""
    end = len(data)
    while pos < end:
        length = data[pos]
        pos += 1
        if length == 0:
            return pos
        pos += length
    return -1


def _walk_gif(data: mmap.mmap, max_frames: int) -> AnimationScan:
    if len(data) < 13:
        return AnimationScan(0, (), False)
    canvas = (_u16le(data, 6), _u16le(data, 8))
    global_palette = bytes(data[13 : 13 + _gif_palette_size(data[10])])
    pos = 13 + len(global_palette)
    frames: list[GifFrameRecord] = []
    control = (0.0, 0, None)  # delay ms, disposal, transparent index of the next frame
    while 0 <= pos < len(data) and len(frames) < max_frames:
        block, pos = data[pos], pos + 1
        if block == 0x21 and pos < len(data):  # extension; 0xF9 = graphic control
            if data[pos] == 0xF9 and pos + 6 < len(data):
                packed = data[pos + 2]
                control = (
                    10.0 * _u16le(data, pos + 3),
                    (packed >> 2) & 7,
                    data[pos + 5] if packed & 1 else None,
                )
            pos = _skip_sub_blocks(data, pos + 1)
        elif block == 0x2C and pos + 9 < len(data):  # image descriptor, optional local palette, LZW data
            frame, pos = _gif_frame_record(data, pos, global_palette, control)
            if frame is None:
                break  # the frame's data is cut off: not a complete frame
            frames.append(frame)
            control = (0.0, 0, None)
        else:
            break  # trailer (0x3B), or garbage after the last good frame
    delays = tuple(frame.delay_ms for frame in frames)
    return AnimationScan(len(frames), delays, len(frames) >= max_frames, canvas, tuple(frames))


def _gif_palette_size(flags: int) -> int:
    return 3 << ((flags & 7) + 1) if flags & 0x80 else 0


def _gif_frame_record(
    data: mmap.mmap, pos: int, global_palette: bytes, control: tuple[float, int, int | None]
) -> tuple[GifFrameRecord | None, int]:
    flags = data[pos + 8]
    palette_end = pos + 9 + _gif_palette_size(flags)
    palette = bytes(data[pos + 9 : palette_end]) if flags & 0x80 else global_palette
    end = _skip_sub_blocks(data, palette_end + 1)  # after the LZW minimum code size byte
    if end < 0:
        return None, end
    delay_ms, disposal, transparent = control
    frame = GifFrameRecord(
        left=_u16le(data, pos),
        top=_u16le(data, pos + 2),
        width=_u16le(data, pos + 4),
        height=_u16le(data, pos + 6),
        interlaced=bool(flags & 0x40),
        palette=palette,
        data_start=palette_end,
        data_end=end,
        disposal=disposal,
        transparent=transparent,
        delay_ms=_delay(delay_ms),
    )
    return frame, end


def _walk_png(data: mmap.mmap, max_frames: int) -> AnimationScan:
    """APNG frames are the fcTL chunks; a PNG without acTL before IDAT is a still (0 frames)."""
    pos, delays, animated = 8, [], False
    canvas = (_u32be(data, 16), _u32be(data, 20)) if len(data) >= 24 else None
    while pos + 8 <= len(data) and len(delays) < max_frames:
        length, kind = _u32be(data, pos), data[pos + 4 : pos + 8]
        body = pos + 8
        if body + length > len(data) or kind == b"IEND" or (kind == b"IDAT" and not animated):
            break
        if kind == b"acTL":
            animated = True
        elif kind == b"fcTL" and length >= 26:
            numerator, denominator = (
                int.from_bytes(data[body + 20 : body + 22], "big"),
                int.from_bytes(data[body + 22 : body + 24], "big"),
            )
            delays.append(_delay(1000.0 * numerator / (denominator or 100)))
        pos = body + length + 4  # data, then CRC
    return AnimationScan(len(delays), tuple(delays), len(delays) >= max_frames, canvas)


def _walk_webp(data: mmap.mmap, max_frames: int) -> AnimationScan:
    """Animated WebP frames are the ANMF chunks; the canvas comes from VP8X, VP8L or VP8."""
    pos, delays = 12, []
    canvas: tuple[int, int] | None = None
    while pos + 8 <= len(data) and len(delays) < max_frames:
        kind, length = data[pos : pos + 4], int.from_bytes(data[pos + 4 : pos + 8], "little")
        body = pos + 8
        if body + length > len(data):
            break
        if canvas is None:
            canvas = _webp_canvas(data, kind, body, length)
        if kind == b"ANMF" and length >= 16:
            delays.append(_delay(_u24le(data, body + 12)))
        pos = body + length + (length & 1)  # chunks are padded to an even size
    return AnimationScan(len(delays), tuple(delays), len(delays) >= max_frames, canvas)


def _webp_canvas(data: mmap.mmap, kind: bytes, body: int, length: int) -> tuple[int, int] | None:
    if kind == b"VP8X" and length >= 10:
        return 1 + _u24le(data, body + 4), 1 + _u24le(data, body + 7)
    if kind == b"VP8L" and length >= 5:
        bits = int.from_bytes(data[body + 1 : body + 5], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if kind == b"VP8 " and length >= 10:
        return _u16le(data, body + 6) & 0x3FFF, _u16le(data, body + 8) & 0x3FFF
    return None


_WALKERS = {"gif": _walk_gif, "png": _walk_png, "webp": _walk_webp}
