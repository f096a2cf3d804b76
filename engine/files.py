"""Files on disk, the same way everywhere: atomic writes and content fingerprints.

Every file Polyseek writes that a crash must not leave half-written (catalog snapshots, index headers,
caption folders, checkpoints, exports) goes through :func:`atomic_write_bytes`: a temporary file in the
same folder, flushed and fsynced, then ``os.replace``d over the target (docs/contributing.md).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

_HASH_WINDOW = 1 << 20


def content_hash(path: Path) -> str:
    """A fast content fingerprint: blake2b-128 over the size and three 1 MiB windows (start, middle, end).

    Reading at most 3 MiB keeps hashing a 4 GB video as cheap as hashing a photo, which is what lets a scan
    recognise moved files and lets the feature store share features between libraries. The trade-off: two
    files of equal size that differ only outside the three windows get the same hash (an in-place edit of a
    large video that keeps its size exactly). Files up to 3 MiB are hashed whole, so photos are exact.
    """
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.blake2b(size.to_bytes(8, "little"), digest_size=16)
    with path.open("rb") as f:
        if size <= 3 * _HASH_WINDOW:
            digest.update(f.read())
        else:
            for offset in (0, (size - _HASH_WINDOW) // 2, size - _HASH_WINDOW):
                f.seek(offset)
                digest.update(f.read(_HASH_WINDOW))
    return digest.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``; the folder
    is created if needed, and the file is readable by others like any file the user saves (0644)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a model folder is ordinary user data
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """UTF-8 text, atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))
