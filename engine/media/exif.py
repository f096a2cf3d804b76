"""When and with what a photo was taken: the date and camera its EXIF block records.

Read from the header Pillow has already parsed when indexing opens the file (:func:`capture_info`), so it
costs no extra read; :func:`read_capture` opens a file's header for the items indexed before the catalog
stored it. Cameras write dates as ``YYYY:MM:DD HH:MM:SS`` in local time, with the offset in a separate tag
(EXIF 2.31) when at all; unknown dates as zeros or blanks. A malformed block means "nothing known", never an
error: the photo itself is still good.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from PIL import Image

from engine.media.errors import MediaError
from engine.media.sniff import check_file
from engine.media.stills import open_pillow
from engine.types import CaptureInfo

log = logging.getLogger(__name__)

EXIF_IFD = 0x8769
MAKE, MODEL, DATETIME = 0x010F, 0x0110, 0x0132
DATETIME_ORIGINAL, DATETIME_DIGITIZED = 0x9003, 0x9004
OFFSET_TIME, OFFSET_TIME_ORIGINAL, OFFSET_TIME_DIGITIZED = 0x9010, 0x9011, 0x9012
# the moment the shutter fired first; digitised (a scan) and the file's last edit only when it is absent
_DATE_TAGS = ((DATETIME_ORIGINAL, OFFSET_TIME_ORIGINAL), (DATETIME_DIGITIZED, OFFSET_TIME_DIGITIZED),
              (DATETIME, OFFSET_TIME))
_DATE = re.compile(r"\s*(\d{4})[:\-](\d{2})[:\-](\d{2})[ T](\d{2}):(\d{2}):(\d{2})")
_OFFSET = re.compile(r"\s*([+-])(\d{2}):?(\d{2})\s*$")


def capture_info(image: Image.Image) -> CaptureInfo:
    """The date taken and the camera of an opened picture (nothing known: all None)."""
    try:
        exif = image.getexif()
        sub = exif.get_ifd(EXIF_IFD)
    except Exception as exc:  # noqa: BLE001 - a malformed block must not make a readable photo unusable
        log.debug("unreadable EXIF: %s", exc)
        return CaptureInfo()
    taken_at = taken_ns = None
    for date_tag, offset_tag in _DATE_TAGS:
        found = parse_exif_date(sub.get(date_tag) or exif.get(date_tag), sub.get(offset_tag))
        if found is not None:
            taken_at, taken_ns = found
            break
    return CaptureInfo(taken_at, taken_ns, _text(exif.get(MAKE)), _text(exif.get(MODEL)))


def read_capture(path: Path) -> CaptureInfo:
    """:func:`capture_info` of a file, reading only its header; a video (no EXIF) or a file that cannot be
    opened tells nothing. Raises nothing for a bad file."""
    try:
        checked = check_file(path)
        if checked.is_video:
            return CaptureInfo()
        with open_pillow(checked) as image:
            return capture_info(image)
    except MediaError as exc:
        log.info("no capture date for %s: %s", path, exc)
        return CaptureInfo()


def parse_exif_date(value: object, offset: object = None) -> tuple[str, int] | None:
    """``(ISO 8601 text, ns since the epoch)`` of an EXIF date and optional offset ("+02:00"); None for a
    blank, zero or impossible date. Without an offset the time is this machine's local time."""
    match = _DATE.match(_text(value) or "")
    if match is None:
        return None
    try:
        when = datetime(*(int(part) for part in match.groups()))  # type: ignore[misc]
    except ValueError:  # "0000:00:00 00:00:00", month 13, ...
        return None
    zone = _offset(offset)
    if zone is not None:
        when = when.replace(tzinfo=zone)
    try:
        stamp = when.timestamp()
    except (OverflowError, OSError, ValueError):
        return None
    return when.isoformat(), int(round(stamp * 1e6)) * 1000


def _offset(value: object) -> timezone | None:
    match = _OFFSET.match(_text(value) or "")
    if match is None:
        return None
    sign, hours, minutes = match.groups()
    delta = timedelta(hours=int(hours), minutes=int(minutes))
    return timezone(-delta if sign == "-" else delta) if delta <= timedelta(hours=14) else None


def _text(value: object) -> str | None:
    """An ASCII tag as clean text (cameras pad with NULs and spaces); None when empty or not text."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    text = value.replace("\x00", " ").strip()
    return text or None
