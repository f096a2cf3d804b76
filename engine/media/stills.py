"""Decoding one picture with Pillow: size checks, JPEG draft mode, EXIF orientation, mode flattening."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from PIL import Image

from engine.media import limits
from engine.media.errors import MediaError, translated_errors
from engine.media.sniff import PILLOW_FORMATS, CheckedFile

BACKGROUND = (255, 255, 255)
"""Transparent pixels are composited onto white, what most viewers and web pages show behind a
transparent PNG, sticker or GIF; a model sees the same picture a person does."""

RESAMPLE = Image.Resampling.BILINEAR  # with Pillow's support scaling this averages the area when shrinking
_REDUCING_GAP = 2.0  # shrink by an integer box reduce first when the factor is large (fast, area-exact)

_ORIENTATION_TAG = 0x0112
_TRANSPOSE_FOR_ORIENTATION = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
_DRAFT_FORMATS = frozenset({"jpeg", "heif"})  # formats whose Pillow plugin can decode a smaller picture


@contextmanager
def open_pillow(checked: CheckedFile) -> Iterator[Image.Image]:
    """Open ``checked`` with only the Pillow plugin its content names, errors translated to MediaError.

    Opening reads the header only (WebP: the container), so the size limit is enforced here, before
    anything is decoded.
    """
    if checked.fmt == "heif":
        _register_heif()
    elif checked.fmt == "avif" and not avif_supported():
        raise MediaError("AVIF needs a Pillow built with libavif (the PyPI wheels are)")
    with translated_errors(checked.display), open(checked.path, "rb") as file:
        image = Image.open(file, formats=[PILLOW_FORMATS[checked.fmt]])
        try:
            yield image
        finally:
            image.close()


@functools.cache
def _register_heif() -> None:
    """Teach Pillow HEIF (pillow-heif), once, the first time a HEIF file is opened.

    Only the primary picture is wanted: depth maps and auxiliary images are not read. libheif applies the
    file's rotation and mirroring (``irot``/``imir``) itself and resets the EXIF orientation to 1, so
    :func:`apply_orientation` leaves a decoded HEIF as it is.
    """
    from pillow_heif import register_heif_opener

    register_heif_opener(thumbnails=True, depth_images=False, aux_images=False)


@functools.cache
def avif_supported() -> bool:
    """Whether this Pillow decodes AVIF (its own plugin, in the PyPI wheels since 11.3; a distribution's build
    may leave libavif out)."""
    from PIL import features

    return bool(features.check("avif"))


def check_pixels(width: int, height: int, what: str) -> None:
    """Refuse a declared size above :data:`limits.MAX_IMAGE_PIXELS` (a decompression bomb)."""
    if width <= 0 or height <= 0:
        raise MediaError(f"{what} declares an empty size ({width}x{height})")
    if width * height > limits.MAX_IMAGE_PIXELS:
        raise MediaError(f"{what} too large ({width}x{height} pixels)")


def prepare_still(image: Image.Image, checked: CheckedFile, min_size: int | None) -> Image.Image:
    """Decode the current frame of an opened image into an upright RGB picture.

    ``min_size``: for JPEG, decode at the smallest DCT scale (1/2, 1/4, 1/8) whose width and height stay
    at least ``min_size`` (Pillow draft mode), so a 12 MP photo wanted at 224 px decodes 1/8 of its
    pixels; for HEIF, decode the smallest embedded thumbnail (phones write one) whose sides are both at
    least ``min_size``, when there is one. The pixel limit applies to that reduced size.
    """
    if min_size is not None and checked.fmt in _DRAFT_FORMATS:
        image.draft(None, (min_size, min_size))
    check_pixels(*image.size, what=checked.display)
    image.load()
    return to_rgb(apply_orientation(image))


def apply_orientation(image: Image.Image) -> Image.Image:
    """Rotate/flip by the EXIF orientation tag; a missing or malformed EXIF block means upright."""
    try:
        orientation = image.getexif().get(_ORIENTATION_TAG, 1)
    except Exception:  # noqa: BLE001 - malformed EXIF must not make a readable photo unusable
        return image
    method = _TRANSPOSE_FOR_ORIENTATION.get(orientation) if isinstance(orientation, int) else None
    return image.transpose(method) if method is not None else image


def to_rgb(image: Image.Image) -> Image.Image:
    """Any Pillow mode as 8-bit RGB: alpha and palette transparency composited on :data:`BACKGROUND`,
    16/32-bit and float greyscale rescaled to 0-255 (not clipped), CMYK and the rest converted."""
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in _SIXTEEN_BIT_MODES or mode in ("I", "F"):
        return Image.fromarray(_deep_grey_to_8bit(image)).convert("RGB")
    if "A" in mode or "a" in mode or "transparency" in image.info:
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, BACKGROUND)
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return image.convert("RGB")


def _deep_grey_to_8bit(image: Image.Image) -> np.ndarray:
    values = np.asarray(image, dtype=np.float64)
    if image.mode == "F":
        peak = 1.0 if np.nanmax(values, initial=0.0) <= 1.0 else 255.0
    elif image.mode in _SIXTEEN_BIT_MODES or np.max(values, initial=0) > 255:
        peak = 65535.0  # 16-bit data (Pillow may hand 16-bit PNG greyscale over as mode "I")
    else:
        peak = 255.0
    scaled = np.nan_to_num(values * (255.0 / peak), nan=0.0)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def squash(image: Image.Image, size: int) -> np.ndarray:
    """The whole picture resized to ``size`` x ``size`` (aspect ratio not kept), as uint8 HxWx3."""
    if image.size != (size, size):
        image = image.resize((size, size), RESAMPLE, reducing_gap=_REDUCING_GAP)
    return np.asarray(image, dtype=np.uint8)


def contain(image: Image.Image, size: int) -> Image.Image:
    """The picture shrunk (never enlarged) to fit in ``size`` x ``size``, aspect ratio kept."""
    image = image.copy()
    image.thumbnail((size, size), Image.Resampling.BICUBIC, reducing_gap=_REDUCING_GAP)
    return image
