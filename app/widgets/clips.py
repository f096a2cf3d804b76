"""Clips in the viewer: where a search's matched frame is in the file, seeking a GIF, decoding a video on a thread
of its own (OpenCV, one frame at a time), and a seek slider that jumps where it is clicked."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from PySide6.QtCore import QSize, Qt, QThread, Signal
from PySide6.QtGui import QImage, QMouseEvent, QMovie
from PySide6.QtWidgets import QSlider, QStyle, QStyleOptionSlider, QWidget

log = logging.getLogger(__name__)

MATCH_HOLD_MS = 1500  # a clip opened at its matched frame shows that frame this long before it plays on
FULL_SIZE = QSize(1 << 14, 1 << 14)  # a video's frames decoded at the file's size (a zoom past the window)
SAMPLED_FRAMES = 8  # engine.media.sampling.FRAMES_PER_ITEM: a hit's ``frame`` is one of these (not imported: the
# engine's media package loads its decoders, and the window starts before any of that)


def matched_frame(frame: int, n_total: int, samples: int = SAMPLED_FRAMES) -> int:
    """The frame (0..n_total-1) of a clip of ``n_total`` frames that is sampled frame ``frame`` of ``samples``.

    Indexing takes the centre of each of ``samples`` equal segments (:func:`engine.media.sampling.frame_indices`,
    uniform), so the same arithmetic finds it again in the file, or among a clip's ``min(samples, n_total)``
    preview frames (evenly spread the same way).
    """
    if n_total < 1:
        return 0
    k = max(0, min(samples - 1, int(frame)))
    return min(n_total - 1, int((k + 0.5) * n_total / samples))


def seek_movie(movie: QMovie, frame: int) -> None:
    """Show ``frame`` of ``movie``. A GIF cannot seek (Qt's reader has no random access) unless its frames are
    cached: step there, from the start when it is behind."""
    frame = max(0, min(frame, movie.frameCount() - 1)) if movie.frameCount() > 0 else max(0, frame)
    if movie.currentFrameNumber() == frame or movie.jumpToFrame(frame):
        return
    if movie.currentFrameNumber() > frame:
        movie.stop()
        movie.jumpToFrame(0)
    while movie.currentFrameNumber() < frame:
        if not movie.jumpToNextFrame():
            break


class VideoReader(QThread):
    """Plays a video file: decodes it frame by frame at its own pace, scaled to ``box``; pauses, seeks, and
    stops at its end (as video players do; GIFs loop). ``box`` may be changed while it plays (a zoom)."""

    opened = Signal(int, float)  # the frame count (0: unknown), frames per second
    frame_ready = Signal(QImage, int, QSize)  # the frame, its number in the file, the file's frame size
    ended = Signal()  # the last frame was shown; paused there
    failed = Signal()  # OpenCV cannot read it

    def __init__(self, path: Path, box: QSize, parent: QWidget | None = None, start: int | None = None) -> None:
        super().__init__(parent)
        self.path, self.box = path, box
        self.start_sample = start  # the sampled frame (0..7) to open at, shown MATCH_HOLD_MS before playing on
        self.started_at: int | None = None  # the file's frame it opened at
        self._lock = threading.Lock()
        self._paused = False
        self._seek_to: int | None = None

    # --- commands (any thread); the decoding thread takes them between frames
    @property
    def paused(self) -> bool:
        return self._paused

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            self._paused = paused

    def seek(self, frame: int) -> None:
        """Show ``frame`` next (also while paused); a newer seek replaces one not yet done."""
        with self._lock:
            self._seek_to = max(0, int(frame))

    def _take_seek(self) -> int | None:
        with self._lock:
            frame, self._seek_to = self._seek_to, None
            return frame

    def run(self) -> None:
        import cv2  # the headless build; only a viewer playing a video needs it

        capture = cv2.VideoCapture(str(self.path))
        if not capture.isOpened():
            self.failed.emit()
            return
        try:
            self._play(cv2, capture)
        finally:
            capture.release()

    def _play(self, cv2, capture) -> None:  # noqa: ANN001 - cv2 and its VideoCapture (imported on this thread)
        fps = capture.get(cv2.CAP_PROP_FPS)
        fps = fps if 1 <= fps <= 120 else 25.0
        pause_ms = int(1000 / fps)
        n_total = max(0, int(capture.get(cv2.CAP_PROP_FRAME_COUNT)))
        self.opened.emit(n_total, fps)
        position = 0
        if self.start_sample is not None and n_total > 0:
            position = self.started_at = matched_frame(self.start_sample, n_total)
            capture.set(cv2.CAP_PROP_POS_FRAMES, position)
        shown = 0
        while not self.isInterruptionRequested():
            seek = self._take_seek()
            if seek is not None:
                position = min(seek, n_total - 1) if n_total else seek
                capture.set(cv2.CAP_PROP_POS_FRAMES, position)
            elif self._paused and shown:
                self.msleep(10)
                continue
            ok, frame = capture.read()
            if not ok:
                if shown == 0:
                    self.failed.emit()
                    return
                self.set_paused(True)  # the end: paused on the last frame; Play starts again
                self.ended.emit()
                continue
            self.frame_ready.emit(self._image(cv2, frame), position, QSize(frame.shape[1], frame.shape[0]))
            position += 1
            shown += 1
            pause = MATCH_HOLD_MS if shown == 1 and self.started_at is not None else pause_ms
            for _ in range(max(1, pause // 10)):  # short naps: stopping or seeking never waits a whole frame
                if self.isInterruptionRequested() or self._seek_to is not None:
                    break
                self.msleep(10)

    def _image(self, cv2, frame) -> QImage:  # noqa: ANN001 - cv2 and a BGR frame
        height, width = frame.shape[:2]
        box = self.box
        scale = min(box.width() / width, box.height() / height, 1.0)
        if scale < 1.0:
            frame = cv2.resize(frame, (max(1, int(width * scale)), max(1, int(height * scale))),
                               interpolation=cv2.INTER_AREA)
        rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        image = QImage(rgb.data, rgb.shape[1], rgb.shape[0], rgb.strides[0], QImage.Format.Format_RGB888)
        return image.copy()  # the copy owns its pixels; rgb is reused


class SeekSlider(QSlider):
    """A position slider that jumps to where it is clicked (as video players' do), not a page at a time."""

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() is Qt.MouseButton.LeftButton and self.maximum() > self.minimum():
            option = QStyleOptionSlider()
            self.initStyleOption(option)
            handle = self.style().subControlRect(QStyle.ComplexControl.CC_Slider, option,
                                                 QStyle.SubControl.SC_SliderHandle, self)
            if not handle.contains(event.position().toPoint()):
                span = max(1, self.width() - handle.width())
                x = int(event.position().x() - handle.width() / 2)
                self.setValue(QStyle.sliderValueFromPosition(self.minimum(), self.maximum(), x, span))
        super().mousePressEvent(event)
