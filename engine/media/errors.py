"""The one error type of the media layer, and the translation of decoder exceptions into it."""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import cv2
from PIL import Image, UnidentifiedImageError

log = logging.getLogger(__name__)


class MediaError(Exception):
    """A media file cannot be used. ``str(error)`` is a short human reason ("truncated JPEG",
    "not a media file", "file disappeared"); the caller knows the path and shows both."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else "unusable media file"


class BrokenFrame(Exception):
    """Internal: animation frame ``index`` could not be decoded, the frames before it could (the caller
    then samples among those; never escapes the package)."""

    def __init__(self, index: int) -> None:
        super().__init__(f"frame {index} cannot be decoded")
        self.index = index


# What third-party decoders raise on hostile input. Pillow plugins are fuzzed, but corrupt data still
# surfaces as any of these (SyntaxError for bad PNG chunks, struct.error for short headers, ...);
# MemoryError covers a declared size that slipped past the pixel limit.
DECODER_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    IndexError,
    KeyError,
    TypeError,
    struct.error,
    zlib.error,
    MemoryError,
    cv2.error,
    Image.DecompressionBombError,
)


@contextmanager
def translated_errors(what: str) -> Iterator[None]:
    """Turn any decoder failure inside the block into a :class:`MediaError` about ``what``
    (a format name such as "JPEG" or "MP4 video"); a MediaError passes through unchanged."""
    try:
        yield
    except MediaError:
        raise
    except FileNotFoundError as error:
        raise MediaError("file disappeared") from error
    except PermissionError as error:
        raise MediaError("permission denied") from error
    except Image.DecompressionBombError as error:
        raise MediaError(f"{what} too large to decode") from error
    except MemoryError as error:
        raise MediaError(f"{what} too large to decode (out of memory)") from error
    except UnidentifiedImageError as error:
        raise MediaError(f"corrupt or truncated {what} header") from error
    except DECODER_ERRORS as error:
        log.debug("decoding %s failed", what, exc_info=True)
        raise MediaError(describe_failure(what, error)) from error


def describe_failure(what: str, error: BaseException) -> str:
    """A short reason for a decoder exception: "truncated X" when the data ends early, else "corrupt X"."""
    text = str(error).strip()
    if isinstance(error, EOFError) or "truncat" in text.lower():
        return f"truncated {what}"
    return f"corrupt {what} ({text})" if text else f"corrupt {what}"
