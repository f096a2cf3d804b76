"""Tiny generated media for tests: photos with EXIF, exact animated GIFs, WebP/APNG animations, MP4s,
and hostile files (huge headers, truncations, random bytes). Nothing is downloaded; every file is made
in a few milliseconds.

Colours are RGB tuples; sizes are (width, height). Every ``make_*`` returns the path it wrote.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

RGB = tuple[int, int, int]
Size = tuple[int, int]

RED: RGB = (220, 20, 20)
GREEN: RGB = (20, 200, 40)
BLUE: RGB = (30, 40, 210)
WHITE: RGB = (255, 255, 255)
BLACK: RGB = (0, 0, 0)
ORIENTATION_TAG = 0x0112


def solid(size: Size, color: Sequence[int]) -> np.ndarray:
    """An (height, width, channels) uint8 array filled with ``color``."""
    width, height = size
    return np.tile(np.asarray(color, dtype=np.uint8), (height, width, 1))


def halves(size: Size, top: RGB, bottom: RGB) -> np.ndarray:
    """Top half one colour, bottom half another: shows which way an image was rotated."""
    pixels = solid(size, top)
    pixels[size[1] // 2 :] = bottom
    return pixels


def make_jpeg(
    path: Path,
    size: Size = (64, 48),
    color: RGB = RED,
    exif_orientation: int | None = None,
    pixels: np.ndarray | None = None,
    quality: int = 95,
) -> Path:
    """A baseline JPEG of one colour (or of ``pixels``), optionally with an EXIF orientation tag."""
    image = Image.fromarray(pixels if pixels is not None else solid(size, color))
    extra = {}
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[ORIENTATION_TAG] = exif_orientation
        extra["exif"] = exif.tobytes()
    image.save(path, "JPEG", quality=quality, **extra)
    return Path(path)


def make_jpeg_with_exif(path: Path, taken: str | None = "2014:06:21 18:05:09", offset: str | None = "+02:00",
                        make: str | None = "Canon", model: str | None = "Canon EOS 5D Mark III",
                        colour: RGB = (200, 40, 40), size: Size = (48, 32), pixels: np.ndarray | None = None) -> Path:
    """A JPEG whose EXIF says when (DateTimeOriginal, OffsetTimeOriginal) and with what (Make, Model) it was taken."""
    from engine.media.exif import DATETIME, DATETIME_ORIGINAL, EXIF_IFD, MAKE, MODEL, OFFSET_TIME_ORIGINAL

    exif = Image.Exif()
    if make is not None:
        exif[MAKE] = make + "\x00"  # cameras pad their strings
    if model is not None:
        exif[MODEL] = model
    exif[DATETIME] = "2020:01:01 00:00:00"  # the last edit: not the date taken when the original is there
    sub = exif.get_ifd(EXIF_IFD)
    if taken is not None:
        sub[DATETIME_ORIGINAL] = taken
    if offset is not None:
        sub[OFFSET_TIME_ORIGINAL] = offset
    image = Image.fromarray(pixels) if pixels is not None else Image.new("RGB", size, colour)
    image.save(path, "JPEG", quality=92, exif=exif.tobytes())
    return path


def make_png(
    path: Path, size: Size = (64, 48), color: Sequence[int] = RED, mode: str = "RGB", pixels=None
) -> Path:
    """A PNG in ``mode`` ('RGB', 'RGBA', 'L', 'LA', 'P', 'I;16'); ``color`` has that mode's channels
    (for 'P' it is RGB and the image is quantised). ``pixels`` overrides the solid colour."""
    if pixels is not None:
        image = Image.fromarray(pixels)
    elif mode == "I;16":
        image = Image.fromarray(np.full((size[1], size[0]), color[0], dtype=np.uint16))
    elif mode == "P":
        image = Image.fromarray(solid(size, color)).convert("P", palette=Image.Palette.ADAPTIVE)
    else:
        channels = solid(size, color)
        image = Image.fromarray(channels[:, :, 0] if len(color) == 1 else channels, mode=None)
        image = image.convert(mode) if image.mode != mode else image
    image.save(path, "PNG")
    return Path(path)


def make_image(path: Path, fmt: str, size: Size = (64, 48), color: RGB = RED) -> Path:
    """A still image in a Pillow format ('BMP', 'TIFF', 'WEBP', 'GIF', ...)."""
    image = Image.fromarray(solid(size, color))
    options = {"lossless": True} if fmt == "WEBP" else {}
    image.save(path, fmt, **options)
    return Path(path)


# ---- GIF, written byte by byte so tests know exactly what each frame holds --------------------------


@dataclass(frozen=True)
class GifFrame:
    """One GIF frame: palette ``indices`` (height x width) placed at ``(left, top)``.

    ``palette`` is a local colour table (None: use the global one); ``disposal`` 0-3 says what happens
    to the frame's rectangle after it was shown (1 leave, 2 restore to background, 3 restore previous);
    pixels equal to ``transparent`` are not drawn.
    """

    indices: np.ndarray
    left: int = 0
    top: int = 0
    palette: Sequence[RGB] | None = None
    disposal: int = 1
    transparent: int | None = None
    delay_cs: int = 10


def write_gif(
    path: Path, canvas: Size, frames: Sequence[GifFrame], palette: Sequence[RGB] | None, background: int = 0
) -> Path:
    """A GIF89a with exactly these frames (LZW data written without compression, which every decoder
    reads: a clear code before the code table would grow)."""
    out = bytearray(b"GIF89a")
    out += struct.pack("<HHBBB", canvas[0], canvas[1], _palette_flags(palette) | 0x70, background, 0)
    out += _palette_bytes(palette)
    out += b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"  # loop forever
    for frame in frames:
        out += _gif_frame(frame)
    out += b"\x3b"
    Path(path).write_bytes(bytes(out))
    return Path(path)


def gif_frame_offsets(path: Path) -> list[int]:
    """Byte offsets of each image descriptor (0x2C) in a GIF written by :func:`write_gif`."""
    data, offsets, pos = Path(path).read_bytes(), [], 13
    pos += 3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0
    while data[pos] != 0x3B:
        if data[pos] == 0x21:
            pos = _after_sub_blocks(data, pos + 2)
            continue
        offsets.append(pos)
        flags = data[pos + 9]
        pos += 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0) + 1
        pos = _after_sub_blocks(data, pos)
    return offsets


def make_animated_gif(
    path: Path,
    colors: Sequence[RGB],
    size: Size = (16, 16),
    disposal: int = 1,
    transparency: bool = False,
    delay_cs: int = 10,
) -> Path:
    """One frame per colour. Without ``transparency`` each frame fills the canvas; with it, frame 0
    fills the canvas and later frames draw only the centre quarter, the rest transparent."""
    palette = [*colors, BLACK]
    key = len(colors)
    frames = []
    for i in range(len(colors)):
        indices = np.full((size[1], size[0]), i, dtype=np.uint8)
        if transparency and i > 0:
            indices[:] = key
            indices[size[1] // 4 : 3 * size[1] // 4, size[0] // 4 : 3 * size[0] // 4] = i
        frames.append(
            GifFrame(indices, disposal=disposal, transparent=key if transparency else None, delay_cs=delay_cs)
        )
    return write_gif(path, size, frames, palette)


def _palette_size_code(palette: Sequence[RGB]) -> int:
    return max(1, (len(palette) - 1).bit_length()) - 1


def _palette_flags(palette: Sequence[RGB] | None) -> int:
    return 0 if not palette else 0x80 | _palette_size_code(palette)


def _palette_bytes(palette: Sequence[RGB] | None) -> bytes:
    if not palette:
        return b""
    entries = 2 << _palette_size_code(palette)
    padded = [*palette, *([BLACK] * (entries - len(palette)))]
    return bytes(channel for color in padded for channel in color)


def _gif_frame(frame: GifFrame) -> bytes:
    height, width = frame.indices.shape
    packed = (frame.disposal & 7) << 2 | (1 if frame.transparent is not None else 0)
    out = bytearray(
        b"\x21\xf9\x04" + struct.pack("<BHB", packed, frame.delay_cs, frame.transparent or 0) + b"\0"
    )
    out += b"\x2c" + struct.pack(
        "<HHHHB", frame.left, frame.top, width, height, _palette_flags(frame.palette)
    )
    out += _palette_bytes(frame.palette)
    min_code_size = max(2, int(frame.indices.max()).bit_length())
    out.append(min_code_size)
    data = _lzw_without_compression(frame.indices.astype(np.uint8).ravel().tolist(), min_code_size)
    for start in range(0, len(data), 255):
        chunk = data[start : start + 255]
        out += bytes([len(chunk)]) + chunk
    return bytes(out + b"\0")


def _lzw_without_compression(indices: list[int], min_code_size: int) -> bytes:
    clear = 1 << min_code_size
    width = min_code_size + 1
    run = clear - 2  # codes per run: the decoder's table never reaches the next code width
    codes = []
    for start in range(0, len(indices), run):
        codes += [clear, *indices[start : start + run]]
    codes.append(clear + 1)  # end of information
    out, accumulator, n_bits = bytearray(), 0, 0
    for code in codes:
        accumulator |= code << n_bits
        n_bits += width
        while n_bits >= 8:
            out.append(accumulator & 0xFF)
            accumulator >>= 8
            n_bits -= 8
    if n_bits:
        out.append(accumulator & 0xFF)
    return bytes(out)


def _after_sub_blocks(data: bytes, pos: int) -> int:
    while data[pos]:
        pos += data[pos] + 1
    return pos + 1


# ---- other animations and video ----------------------------------------------------------------------


def make_webp_animated(
    path: Path, colors: Sequence[RGB], size: Size = (16, 16), duration_ms: int = 100
) -> Path:
    """A lossless animated WebP, one full frame per colour."""
    frames = [Image.fromarray(solid(size, color)) for color in colors]
    frames[0].save(path, "WEBP", save_all=True, append_images=frames[1:], duration=duration_ms, lossless=True)
    return Path(path)


def make_apng(
    path: Path,
    colors: Sequence[RGB],
    size: Size = (16, 16),
    duration_ms: int = 100,
    default_image: bool = False,
) -> Path:
    """An animated PNG, one full frame per colour. With ``default_image`` the first colour is the
    fallback picture that is not part of the animation."""
    frames = [Image.fromarray(solid(size, color)) for color in colors]
    frames[0].save(
        path,
        "PNG",
        save_all=True,
        append_images=frames[1:],
        duration=duration_ms,
        loop=0,
        default_image=default_image,
    )
    return Path(path)


def video_color(index: int) -> RGB:
    """The colour of frame ``index`` in :func:`make_mp4`: far apart for neighbouring indices."""
    return (int(index * 37 % 200) + 30, int(index * 91 % 200) + 30, int(index * 53 % 200) + 30)


def make_video(
    path: Path,
    n_frames: int,
    size: Size = (64, 48),
    fps: float = 10.0,
    colors: Sequence[RGB] | None = None,
    fourcc: str = "mp4v",
) -> Path:
    """A video written by OpenCV whose frame i is the solid colour ``colors[i]`` (default
    :func:`video_color`). ``fourcc`` 'mp4v' for .mp4, 'MJPG' for .avi; ``n_frames`` may be 0."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), fps, size)
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write {fourcc} here")
    for i in range(n_frames):
        color = colors[i] if colors is not None else video_color(i)
        writer.write(np.ascontiguousarray(solid(size, color)[:, :, ::-1]))  # OpenCV wants BGR
    writer.release()
    return Path(path)


def make_mp4(
    path: Path, n_frames: int, size: Size = (64, 48), fps: float = 10.0, colors: Sequence[RGB] | None = None
) -> Path:
    """An MPEG-4 Part 2 ('mp4v') .mp4 whose frame i is the solid colour ``colors[i]``."""
    return make_video(path, n_frames, size, fps, colors, "mp4v")


# ---- hostile files -----------------------------------------------------------------------------------


def make_huge_header_png(path: Path, width: int = 50_000, height: int = 50_000) -> Path:
    """A valid-looking PNG whose IHDR declares ``width`` x ``height`` RGB with one tiny IDAT."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
    Path(path).write_bytes(data + chunk(b"IEND", b""))
    return Path(path)


def make_huge_header_jpeg(path: Path, width: int = 50_000, height: int = 50_000) -> Path:
    """A small real JPEG whose frame header (SOF0) is patched to declare ``width`` x ``height``."""
    make_jpeg(path, (16, 16))
    data = bytearray(Path(path).read_bytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    Path(path).write_bytes(bytes(data))
    return Path(path)


def truncate(path: Path, keep: int | float) -> Path:
    """Cut ``path`` to ``keep`` bytes (an int) or to that fraction of its length (a float)."""
    data = Path(path).read_bytes()
    n_bytes = keep if isinstance(keep, int) else int(len(data) * keep)
    Path(path).write_bytes(data[:n_bytes])
    return Path(path)


def make_random_bytes(path: Path, n_bytes: int = 4096, seed: int = 0) -> Path:
    """Random bytes (that start with no media signature)."""
    data = bytearray(np.random.default_rng(seed).integers(0, 256, n_bytes, dtype=np.uint8).tobytes())
    data[:4] = b"\0\0\0\0"
    Path(path).write_bytes(bytes(data))
    return Path(path)


# ---- phone media: HEIF/AVIF stills, rotated videos ------------------------------------------------------------


def make_heif_or_avif(
    path: Path,
    fmt: str,
    pixels: np.ndarray,
    exif_orientation: int | None = None,
    thumbnails: Sequence[int] = (),
) -> Path:
    """A HEIC (``fmt`` 'HEIF', written by pillow-heif's x265) or AVIF ('AVIF', Pillow's own libavif) still of
    ``pixels``, optionally with an EXIF orientation tag and embedded thumbnails (HEIF only; each fits a box of
    that many pixels). The orientation is stored the way phones do: the writer records it as the file's
    rotation, so a reader that ignores both shows the picture on its side."""
    from pillow_heif import register_heif_opener

    register_heif_opener()
    extra: dict = {"quality": 95}
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[ORIENTATION_TAG] = exif_orientation
        extra["exif"] = exif.tobytes()
    if thumbnails:
        extra["thumbnails"] = list(thumbnails)
    Image.fromarray(pixels).save(path, fmt, **extra)
    return Path(path)


def set_video_rotation(path: Path, degrees: int) -> Path:
    """Rewrite the first track header's display matrix of an .mp4/.mov in place, as a phone held upright does
    (``degrees`` 90, 180 or 270, clockwise); the stored frames stay as they are."""
    cos, sin = {0: (1, 0), 90: (0, 1), 180: (-1, 0), 270: (0, -1)}[degrees]
    data = bytearray(Path(path).read_bytes())
    at = data.find(b"tkhd")
    if at < 0:
        raise ValueError(f"{path} has no track header")
    matrix_at = at + 4 + 4 + (32 if data[at + 4] == 1 else 20) + 8 + 8  # version/flags, times, reserved, layer...
    one = 0x10000  # 16.16 fixed point
    struct.pack_into(">9i", data, matrix_at, cos * one, sin * one, 0, -sin * one, cos * one, 0, 0, 0, 0x40000000)
    Path(path).write_bytes(bytes(data))
    return Path(path)
