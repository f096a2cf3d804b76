"""Thumbnails and preview frames, made on demand, cached on disk as JPEG (written atomically) in a bounded cache.

The cache never grows past a budget whatever the library's size: :func:`prune_thumbnails` (run by the service
after each scan) removes the least recently used files once it holds more than ``max_bytes``; a cache hit
refreshes a file's modification time, so what the user keeps looking at stays. A pruned thumbnail is made again
the next time it is shown.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from PIL import Image

from engine.media import animation
from engine.media.decode import classify
from engine.media.errors import MediaError
from engine.media.sampling import frame_indices
from engine.media.sniff import ANIMATABLE_FORMATS, CheckedFile, check_file
from engine.media.stills import contain, open_pillow, prepare_still
from engine.media.video import inspect_video, video_frames
from engine.types import MediaKind

THUMBNAIL_QUALITY = 85
THUMBNAIL_CACHE_BYTES = 256 * 1024 * 1024  # ~60,000 thumbnails of 256 px; past it the least recently used go
PRUNE_TO = 0.8  # a prune goes down to this fraction of the budget, so the next ones are rare


def thumbnail(path: Path, cache_dir: Path, size: int = 256, n_preview: int = 0) -> list[Path]:
    """JPEG files showing ``path``, shrunk to fit ``size`` x ``size`` (aspect kept, never enlarged).

    The first is the still thumbnail (the picture of :func:`engine.media.decode.load_image`); then, for
    animations and videos, up to ``n_preview`` evenly spread frames (fewer when the media has fewer).
    Files are named by a hash of (resolved path, size, mtime_ns, file size), so an edited file gets new
    thumbnails, and live in ``cache_dir/<2 hex>/``. When they exist they are returned without decoding.
    Each file is written to a temporary name and renamed, so a crash never leaves half a thumbnail.
    Raises MediaError when the media cannot be decoded.
    """
    if size < 1 or n_preview < 0:
        raise ValueError(f"thumbnail needs size >= 1 and n_preview >= 0 (got {size}, {n_preview})")
    checked = check_file(path)
    key = _cache_key(checked, size)
    folder = Path(cache_dir) / key[:2]
    still = folder / f"{key}.jpg"
    manifest = folder / f"{key}.p{n_preview}.txt"  # lists still + previews once all are written
    if not checked.is_video and checked.fmt not in ANIMATABLE_FORMATS:
        n_preview = 0  # a JPEG, BMP or TIFF never has preview frames: no manifest needed
    cached = _cached(still, manifest, n_preview)
    if cached is not None:
        return cached
    pictures = _render(checked, size, n_preview)
    targets = [still] + [folder / f"{key}.p{n_preview}-{i}.jpg" for i in range(len(pictures) - 1)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for picture, target in zip(pictures, targets, strict=True):
            _write_atomic(target, partial(picture.save, format="JPEG", quality=THUMBNAIL_QUALITY))
        if n_preview:
            text = "\n".join(target.name for target in targets).encode()
            _write_atomic(manifest, lambda file: file.write(text))
    except OSError as error:
        raise MediaError(f"cannot write thumbnail in {folder} ({error.strerror or error})") from error
    return targets


def _cache_key(checked: CheckedFile, size: int) -> str:
    identity = f"{checked.path.resolve()}\0{size}\0{checked.mtime_ns}\0{checked.size}"
    return hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:40]


def _cached(still: Path, manifest: Path, n_preview: int) -> list[Path] | None:
    if not n_preview:
        paths = [still] if still.is_file() else None
    else:
        try:
            names = manifest.read_text().split()
        except (OSError, UnicodeDecodeError):
            return None
        paths = [manifest.parent / name for name in names]
        paths = paths if paths and all(path.is_file() for path in paths) else None
    for path in (paths or []) + ([manifest] if paths and n_preview else []):
        try:
            os.utime(path)  # recently used: the last to be pruned
        except OSError:
            pass
    return paths


def prune_thumbnails(cache_dir: Path, max_bytes: int = THUMBNAIL_CACHE_BYTES) -> tuple[int, int]:
    """Keep the cache under ``max_bytes``: when it holds more, remove the least recently used files until it
    holds :data:`PRUNE_TO` of it. Returns ``(files removed, bytes freed)``. Files being written (``.tmp-``) stay."""
    files = []
    try:
        folders = [entry for entry in os.scandir(cache_dir) if entry.is_dir()]
    except OSError:
        return 0, 0
    for folder in folders:
        try:
            with os.scandir(folder.path) as entries:
                for entry in entries:
                    if entry.is_file() and not entry.name.startswith(".tmp-"):
                        st = entry.stat()
                        files.append((st.st_mtime_ns, st.st_size, entry.path))
        except OSError:
            continue
    total = sum(size for _, size, _ in files)
    if total <= max_bytes:
        return 0, 0
    removed = freed = 0
    for _, size, path in sorted(files):
        if total - freed <= PRUNE_TO * max_bytes:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        removed, freed = removed + 1, freed + size
    return removed, freed


def _render(checked: CheckedFile, size: int, n_preview: int) -> list[Image.Image]:
    fit = partial(contain, size=size)
    kind, scan = classify(checked)
    if kind is MediaKind.IMAGE:
        with open_pillow(checked) as image:
            return [fit(prepare_still(image, checked, size))]
    if kind is MediaKind.ANIMATION and scan is not None:
        return animation.decode_sampled(checked, scan, partial(_pick, first=0, n=n_preview), fit)
    stream = inspect_video(checked)
    return video_frames(checked, stream, partial(_pick, first=None, n=n_preview), fit)


def _pick(n_total: int, first: int | None, n: int) -> list[int]:
    """The still's frame (``first``, or the middle frame when None) then ``n`` evenly spread previews."""
    still = first if first is not None else frame_indices(n_total, 1)[0]
    return [still] + (frame_indices(n_total, min(n, n_total)) if n else [])


def _write_atomic(target: Path, write: Callable[..., object]) -> None:
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=target.suffix)
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
