"""Recognising media by content (magic bytes), never by file name, and opening files safely."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from engine.media import limits
from engine.media.errors import MediaError

IMAGE_FORMATS = frozenset({"jpeg", "png", "gif", "webp", "bmp", "tiff", "heif", "avif"})
ANIMATABLE_FORMATS = frozenset({"gif", "png", "webp"})  # may hold an animation (GIF, APNG, animated WebP)
VIDEO_FORMATS = frozenset({"mp4", "mov", "webm", "mkv", "avi"})

HEAD_BYTES = 256  # enough for every signature below, including a Matroska DocType

# Human names for messages ("truncated JPEG"); Pillow plugin ids for Image.open(formats=...).
DISPLAY_NAMES = {
    "jpeg": "JPEG",
    "png": "PNG",
    "gif": "GIF",
    "webp": "WebP",
    "bmp": "BMP",
    "tiff": "TIFF",
    "heif": "HEIF",
    "avif": "AVIF",
    "mp4": "MP4 video",
    "mov": "QuickTime video",
    "webm": "WebM video",
    "mkv": "Matroska video",
    "avi": "AVI video",
}
PILLOW_FORMATS = {
    "jpeg": "JPEG",
    "png": "PNG",
    "gif": "GIF",
    "webp": "WEBP",
    "bmp": "BMP",
    "tiff": "TIFF",
    "heif": "HEIF",  # pillow-heif's plugin (engine.media.stills registers it)
    "avif": "AVIF",  # Pillow's own (libavif, Pillow >= 11.3)
}

# ISO-BMFF brands. HEIF (what phones write: HEVC stills) and AVIF (AV1 stills) are pictures; a file whose major
# brand is the generic "mif1"/"msf1" is AVIF when its compatible brands name AVIF, else HEIF. Canon CR3 raw
# and iTunes audio are neither picture nor video.
_HEIF_BRANDS = frozenset(b.encode() for b in "heic heix hevc hevx heim heis hevm hevs".split())
_AVIF_BRANDS = frozenset({b"avif", b"avis"})
_GENERIC_IMAGE_BRANDS = frozenset({b"mif1", b"mif2", b"msf1"})
_NOT_VIDEO_BRANDS = frozenset(brand.encode().ljust(4) for brand in "crx M4A M4B M4P".split())
# Old QuickTime files start with a top-level atom instead of "ftyp".
_QUICKTIME_ATOMS = frozenset({b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"})
_BMP_HEADER_SIZES = frozenset({12, 40, 52, 56, 64, 108, 124})


def sniff_bytes(head: bytes) -> str | None:
    """The media format whose signature starts ``head`` (see :func:`sniff_format`), or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] in (b"WEBP", b"AVI "):
        return "webp" if head[8:12] == b"WEBP" else "avi"
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return "tiff"
    if head[:2] == b"BM" and len(head) >= 18 and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES:
        return "bmp"
    return _sniff_video(head)


def _sniff_video(head: bytes) -> str | None:
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        picture = _sniff_heif(head, brand)
        if picture is not None or brand in _NOT_VIDEO_BRANDS:
            return picture
        return "mov" if brand == b"qt  " else "mp4"
    if head[4:8] in _QUICKTIME_ATOMS:
        return "mov"
    if head.startswith(b"\x1a\x45\xdf\xa3"):  # EBML: the DocType says WebM or Matroska
        if b"webm" in head:
            return "webm"
        return "mkv" if b"matroska" in head else None
    return None


def _sniff_heif(head: bytes, brand: bytes) -> str | None:
    """'heif' or 'avif' for an ISO-BMFF still image (its ``ftyp`` major and compatible brands), else None."""
    if brand in _AVIF_BRANDS:
        return "avif"
    if brand in _HEIF_BRANDS:
        return "heif"
    if brand not in _GENERIC_IMAGE_BRANDS:
        return None
    box_end = min(int.from_bytes(head[:4], "big"), len(head))
    compatible = {head[at : at + 4] for at in range(16, box_end - 3, 4)}
    return "avif" if compatible & _AVIF_BRANDS else "heif"


def sniff_format(path: Path) -> str | None:
    """The media format of ``path`` from its first bytes, not its name: one of 'jpeg', 'png', 'gif',
    'webp', 'bmp', 'tiff', 'heif', 'avif', 'mp4', 'mov', 'webm', 'mkv', 'avi', or None when the file is readable but
    not media we know (also for directories, devices and pipes, which are never opened for reading).

    Raises MediaError when the file cannot be read (vanished, permission denied).
    """
    try:
        with _open_regular(Path(path)) as (file, _stat):
            return sniff_bytes(file.read(HEAD_BYTES))
    except _NotRegular:
        return None
    except FileNotFoundError as error:
        raise MediaError("file disappeared") from error
    except OSError as error:
        raise MediaError(f"cannot read file ({error.strerror or error})") from error


@dataclass(frozen=True, slots=True)
class CheckedFile:
    """A regular media file that passed the size limits; ``fmt`` comes from its content."""

    path: Path
    fmt: str
    size: int
    mtime_ns: int

    @property
    def display(self) -> str:
        return DISPLAY_NAMES[self.fmt]

    @property
    def is_video(self) -> bool:
        return self.fmt in VIDEO_FORMATS


def check_file(path: Path) -> CheckedFile:
    """Stat, size-check and sniff ``path``; every failure is a MediaError with the reason."""
    path = Path(path)
    try:
        with _open_regular(path) as (file, st):
            size = st.st_size
            if size == 0:
                raise MediaError("empty file")
            if size > limits.MAX_FILE_BYTES:
                raise MediaError(f"file too large ({size / 1024**3:.1f} GiB)")
            fmt = sniff_bytes(file.read(HEAD_BYTES))
    except _NotRegular as error:
        raise MediaError("not a regular file") from error
    except FileNotFoundError as error:
        raise MediaError("file disappeared") from error
    except PermissionError as error:
        raise MediaError("permission denied") from error
    except OSError as error:
        raise MediaError(f"cannot read file ({error.strerror or error})") from error
    if fmt is None:
        raise MediaError("not a media file")
    if fmt in IMAGE_FORMATS and size > limits.MAX_IMAGE_FILE_BYTES:
        raise MediaError(f"{DISPLAY_NAMES[fmt]} file too large ({size / 1024**2:.0f} MiB)")
    return CheckedFile(path, fmt, size, st.st_mtime_ns)


class _NotRegular(Exception):
    """The path is a directory, device, pipe or socket."""


@contextmanager
def _open_regular(path: Path) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """Open a regular file for reading without ever blocking on a FIFO (O_NONBLOCK, then fstat)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NotRegular(str(path))
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        yield file, st
