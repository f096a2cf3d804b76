"""Pictures for the widgets, read off the GUI thread: thumbnails and preview frames (the files the service
writes, cached by media id), and a photo read upright and scaled to a box (what the viewer and the inspector show).

``QImage`` is safe on any thread, ``QPixmap`` only on the GUI thread: the readers here return ``QImage`` and
the cache turns them into pixmaps when they arrive.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QSize, Qt, QThreadPool, Signal
from PySide6.QtGui import QImage, QImageIOHandler, QImageReader, QPixmap

from app.workers import Worker, while_alive

if TYPE_CHECKING:  # the engine loads with the library, after the window (app/main.py)
    from engine.workspace import Workspace

log = logging.getLogger(__name__)


class ThumbnailError(Exception):
    """A thumbnail or preview frame file could not be read."""


def read_image(path: Path) -> QImage:
    """Read an image file into a ``QImage`` (safe on any thread, unlike ``QPixmap``)."""
    image = QImage(str(path))
    if image.isNull():
        raise ThumbnailError(f"cannot read image {path}")
    return image


class ThumbnailCache(QObject):
    """Thumbnails and hover-preview frames by media id, loaded on demand off the GUI thread, LRU-bounded."""

    thumbnail_ready = Signal(int)
    frames_ready = Signal(int)

    def __init__(self, pool: QThreadPool, size: int = 256, capacity: int = 600,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._pool, self.size, self._capacity = pool, size, capacity
        self._service: Workspace | None = None
        self._thumbs: OrderedDict[int, QPixmap | None] = OrderedDict()  # None: failed, do not retry
        self._frames: OrderedDict[int, list[QPixmap]] = OrderedDict()
        self._pending: set[tuple[str, int]] = set()

    def set_service(self, service: Workspace | None) -> None:
        """Forget everything cached: ids belong to the previous library."""
        self._service = service
        self._thumbs.clear()
        self._frames.clear()
        self._pending.clear()

    @property
    def service(self) -> Workspace | None:
        """The library whose thumbnails this caches (the viewer asks it for an item's details too)."""
        return self._service

    def thumbnail(self, media_id: int) -> QPixmap | None:
        """The cached thumbnail, or None while it loads (``thumbnail_ready`` follows)."""
        if media_id in self._thumbs:
            self._thumbs.move_to_end(media_id)
            return self._thumbs[media_id]
        self._request("thumb", media_id)
        return None

    def frames(self, media_id: int) -> list[QPixmap] | None:
        """The cached preview frames, or None while they load (``frames_ready`` follows)."""
        if media_id in self._frames:
            self._frames.move_to_end(media_id)
            return self._frames[media_id]
        self._request("frames", media_id)
        return None

    def _request(self, what: str, media_id: int) -> None:
        service = self._service
        if service is None or (what, media_id) in self._pending:
            return
        self._pending.add((what, media_id))
        size = self.size
        if what == "thumb":
            def job() -> list[QImage]:
                return [read_image(service.library.thumbnail(media_id, size))]
        else:
            def job() -> list[QImage]:
                return [read_image(p) for p in service.library.preview_frames(media_id, 8)]
        from engine.terms import MediaError  # the decoder loads with the service; not at the window's start

        worker = Worker(job)
        # an unreadable file is reported once by _store, not as a traceback per request (a library with many of
        # them logged two tracebacks for each one scrolled past)
        worker.expected_errors = (ThumbnailError, MediaError, OSError)
        # while_alive: a reply that comes after the cache (its window) is gone is dropped, not an exception
        worker.signals.returned.connect(while_alive(self, lambda images: self._store(service, what, media_id, images)))
        worker.signals.errored.connect(while_alive(self, lambda exc: self._store(service, what, media_id, None, exc)))
        worker.start(self._pool, priority=0 if what == "thumb" else 1)

    def _store(self, service: Any, what: str, media_id: int, images: list[QImage] | None,
               exc: BaseException | None = None) -> None:
        if service is not self._service:  # a reply for a library no longer shown
            return
        self._pending.discard((what, media_id))
        if exc is not None:
            log.warning("no %s for media %d: %s", what, media_id, exc)
        pixmaps = [QPixmap.fromImage(image) for image in images or []]
        if what == "thumb":
            self._thumbs[media_id] = pixmaps[0] if pixmaps else None
            _trim(self._thumbs, self._capacity)
            self.thumbnail_ready.emit(media_id)
        else:
            self._frames[media_id] = pixmaps
            _trim(self._frames, max(8, self._capacity // 20))
            self.frames_ready.emit(media_id)


def _trim(cache: OrderedDict[int, Any], capacity: int) -> None:
    while len(cache) > capacity:
        cache.popitem(last=False)



def read_scaled(path: Path, box: QSize) -> QImage:
    """Read a picture upright and no larger than ``box`` (decoding a 24-megapixel photo whole would be wasted
    memory). Qt reads what it can (EXIF orientation applied); what it cannot (HEIC, AVIF here) is decoded by
    the engine the way indexing decodes it. Raises OSError with the reason. Safe on any thread."""
    return read_picture(path, box)[0]


def read_picture(path: Path, box: QSize) -> tuple[QImage, QSize]:
    """:func:`read_scaled`, and the picture's whole size (upright), which a zoom to 1:1 is measured in."""
    reader = QImageReader(str(path))
    reader.setAutoTransform(True)
    if reader.canRead():
        size = reader.size()  # as stored, which is what a scaled read is sized in
        upright, stored_box = QSize(size), QSize(box)
        if reader.transformation() & QImageIOHandler.Transformation.TransformationRotate90:
            upright.transpose()  # a phone photo stored on its side: shown (and measured) upright
            stored_box.transpose()
        if size.isValid() and (size.width() > stored_box.width() or size.height() > stored_box.height()):
            reader.setScaledSize(size.scaled(stored_box, Qt.AspectRatioMode.KeepAspectRatio))
        image = reader.read()
        if not image.isNull():
            return image, upright if upright.isValid() else image.size()
    return _read_with_engine(path, box)


def _read_with_engine(path: Path, box: QSize) -> tuple[QImage, QSize]:
    from PIL import Image

    from engine.terms import MediaError, load_image, probe

    try:
        picture = load_image(path, min_size=max(box.width(), box.height()))
        info = probe(path)
    except MediaError as exc:
        raise OSError(str(exc)) from exc
    width, height = info.width, info.height
    if (width > height) != (picture.width > picture.height):  # the declared size is the stored, not the upright
        width, height = height, width
    picture.thumbnail((max(1, box.width()), max(1, box.height())), Image.Resampling.LANCZOS)
    data = picture.convert("RGB").tobytes()
    image = QImage(data, picture.width, picture.height, 3 * picture.width, QImage.Format.Format_RGB888)
    return image.copy(), QSize(width, height)  # the copy owns its pixels; ``data`` goes away with this frame
