"""The viewer: one result large. Photos are read scaled to the window off the GUI thread, GIFs play (QMovie),
videos play (decoded by OpenCV on a thread of their own, one frame at a time; their preview frames when OpenCV
cannot read them); Left / Right step through the results, Alt+A / Alt+R judge, Escape closes, "Show in folder"
opens the file manager there. A clip found by a search opens at the part that matched (``SearchHit.frame``):
that frame is shown and held a moment, then the clip plays on from there. The details under the picture say
which queries the user accepted or rejected the item for."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QSize, Qt, QThread, QThreadPool, QTimer, Signal
from PySide6.QtGui import QAction, QHideEvent, QImage, QImageReader, QKeySequence, QMovie, QPixmap, QResizeEvent
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.widgets.plaintext import plain_label
from app.widgets.results import ThumbnailCache, show_in_folder, verdict_lines
from app.workers import run_in_background, while_alive
from engine.types import MediaKind, SearchHit

log = logging.getLogger(__name__)

FRAME_MS = 140  # a video's preview frames, as on hover in the grid
VIDEO_STOP_WAIT_MS = 2000  # closing the viewer waits this long at most for a video's decoding thread
MATCH_HOLD_MS = 1500  # a clip opened at its matched frame shows that frame this long before it plays on
SAMPLED_FRAMES = 8  # engine.media.sampling.FRAMES_PER_ITEM: a hit's ``frame`` is one of these (not imported: the
# engine's media package loads its decoders, and the window starts before any of that)
_unstopped: set[VideoReader] = set()  # decoding threads that did not stop in time, kept until they end


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


def read_scaled(path: Path, box: QSize) -> QImage:
    """Read a picture upright and no larger than ``box`` (decoding a 24-megapixel photo whole would be wasted
    memory). Qt reads what it can (EXIF orientation applied); what it cannot (HEIC, AVIF here) is decoded by
    the engine the way indexing decodes it. Raises OSError with the reason. Safe on any thread."""
    reader = QImageReader(str(path))
    reader.setAutoTransform(True)
    if reader.canRead():
        size = reader.size()
        if size.isValid() and (size.width() > box.width() or size.height() > box.height()):
            reader.setScaledSize(size.scaled(box, Qt.AspectRatioMode.KeepAspectRatio))
        image = reader.read()
        if not image.isNull():
            return image
    return _read_with_engine(path, box)


def _read_with_engine(path: Path, box: QSize) -> QImage:
    from PIL import Image

    from engine.media import MediaError, load_image

    try:
        picture = load_image(path, min_size=max(box.width(), box.height()))
    except MediaError as exc:
        raise OSError(str(exc)) from exc
    picture.thumbnail((max(1, box.width()), max(1, box.height())), Image.Resampling.LANCZOS)
    data = picture.convert("RGB").tobytes()
    image = QImage(data, picture.width, picture.height, 3 * picture.width, QImage.Format.Format_RGB888)
    return image.copy()  # the copy owns its pixels; ``data`` goes away with this frame


class VideoReader(QThread):
    """Plays a video file: decodes it frame by frame at its own pace, scaled to ``box``, and loops."""

    frame_ready = Signal(QImage)
    failed = Signal()  # OpenCV cannot read it

    def __init__(self, path: Path, box: QSize, parent: QWidget | None = None, start: int | None = None) -> None:
        super().__init__(parent)
        self.path, self.box = path, box
        self.start_sample = start  # the sampled frame (0..7) to open at, shown MATCH_HOLD_MS before playing on
        self.started_at: int | None = None  # the file's frame it opened at

    def run(self) -> None:
        import cv2  # the headless build; only a viewer playing a video needs it

        capture = cv2.VideoCapture(str(self.path))
        if not capture.isOpened():
            self.failed.emit()
            return
        fps = capture.get(cv2.CAP_PROP_FPS)
        pause_ms = int(1000 / fps) if 1 <= fps <= 120 else 40
        if self.start_sample is not None:
            n_total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
            if n_total > 0:
                self.started_at = matched_frame(self.start_sample, n_total)
                capture.set(cv2.CAP_PROP_POS_FRAMES, self.started_at)
        shown = 0
        try:
            while not self.isInterruptionRequested():
                ok, frame = capture.read()
                if not ok:
                    if shown == 0:
                        self.failed.emit()
                        return
                    capture.set(cv2.CAP_PROP_POS_FRAMES, 0)  # loop, like a GIF
                    continue
                height, width = frame.shape[:2]
                scale = min(self.box.width() / width, self.box.height() / height, 1.0)
                if scale < 1.0:
                    frame = cv2.resize(frame, (max(1, int(width * scale)), max(1, int(height * scale))),
                                       interpolation=cv2.INTER_AREA)
                rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
                image = QImage(rgb.data, rgb.shape[1], rgb.shape[0], rgb.strides[0], QImage.Format.Format_RGB888)
                self.frame_ready.emit(image.copy())  # the copy owns its pixels; rgb is reused
                shown += 1
                pause = MATCH_HOLD_MS if shown == 1 and self.started_at is not None else pause_ms
                for _ in range(max(1, pause // 10)):  # short naps: stopping never waits a whole frame
                    if self.isInterruptionRequested():
                        break
                    self.msleep(10)
        finally:
            capture.release()


class Viewer(QDialog):
    """Shows one :class:`SearchHit` large; asks the window to step (``step_requested``) or judge."""

    step_requested = Signal(int)  # -1 previous, +1 next
    judge_requested = Signal(int)  # +1 accept, -1 reject

    def __init__(self, cache: ThumbnailCache, pool: QThreadPool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Polyseek — viewer")
        self._cache, self._pool = cache, pool
        self.hit: SearchHit | None = None
        self.state: object = None  # the hit's AnnotationState, when known
        self._generation = 0
        self._movie: QMovie | None = None
        self._video: VideoReader | None = None
        self._frames: list[QPixmap] = []
        self._frame = 0
        self.opened_at: int | None = None  # a clip opened at its match: the frame (of the file / its previews)
        self._timer = QTimer(self, interval=FRAME_MS)
        self._timer.timeout.connect(self._next_frame)
        cache.frames_ready.connect(self._frames_arrived)
        self.picture = QLabel(alignment=Qt.AlignmentFlag.AlignCenter)
        self.picture.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Ignored)
        self.picture.setMinimumSize(200, 150)
        self.picture.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # the keys (arrows, Alt+A / R) land here
        self.caption = plain_label("", wrap=True)
        self.previous_button = QPushButton("◀ Previous")
        self.next_button = QPushButton("Next ▶")
        self.folder_button = QPushButton("Show in folder")
        self.previous_button.clicked.connect(lambda: self.step_requested.emit(-1))
        self.next_button.clicked.connect(lambda: self.step_requested.emit(+1))
        self.folder_button.clicked.connect(self._show_in_folder)
        for button in (self.previous_button, self.next_button, self.folder_button):
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # arrows step; they never move between buttons
        for keys, slot in (("Left", lambda: self.step_requested.emit(-1)),
                           ("Right", lambda: self.step_requested.emit(+1)),
                           ("Alt+A", lambda: self.judge_requested.emit(+1)),
                           ("Alt+R", lambda: self.judge_requested.emit(-1))):
            action = QAction(self, shortcut=QKeySequence(keys))
            action.triggered.connect(slot)
            self.addAction(action)
        row = QHBoxLayout()
        row.addWidget(self.previous_button)
        row.addWidget(self.next_button)
        row.addStretch(1)
        row.addWidget(self.folder_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.picture, 1)
        layout.addWidget(self.caption)
        layout.addLayout(row)
        self.resize(900, 700)

    def show_hit(self, hit: SearchHit | None, state: object = None) -> None:
        """Show ``hit`` (None: nothing left to show, the viewer closes); ``state`` is its
        :class:`engine.library.browse.AnnotationState` when known (which queries it was accepted / rejected for)."""
        if hit is None:
            self.close()
            return
        self._stop()
        self.hit = hit
        self._generation += 1
        name = Path(hit.path).name
        self.setWindowTitle(f"{name} — Polyseek")
        self.set_state(state)
        self.caption.setToolTip(str(hit.path))
        self.picture.setText("Loading…")
        if hit.kind is MediaKind.ANIMATION:
            self._play_movie(Path(hit.path))
        elif hit.kind is MediaKind.VIDEO:
            self._play_video(Path(hit.path), hit.media_id)
        else:
            self._load_still(Path(hit.path))

    def _load_still(self, path: Path) -> None:
        generation, box = self._generation, self.picture.size()

        def shown(image: QImage) -> None:
            if generation == self._generation:
                self._set_pixmap(QPixmap.fromImage(image))

        def failed(exc: BaseException) -> None:
            if generation == self._generation:
                self.picture.setText(f"Cannot show this file: {exc}")

        run_in_background(read_scaled, path, box, pool=self._pool, priority=10,
                          on_result=while_alive(self, shown), on_error=while_alive(self, failed))

    def set_state(self, state: object) -> None:
        """Say under the picture what is known about the shown item: the part of a clip that matched, the
        queries it was accepted or rejected for (``state``), its first captions."""
        self.state, hit = state, self.hit
        if hit is None:
            return
        lines = [f"{Path(hit.path).name}  ·  {hit.kind.value}  ·  {hit.path}"]
        if self.match_frame is not None:
            lines.append(f"Best match: sampled frame {self.match_frame + 1} of {SAMPLED_FRAMES}; "
                         "the clip opens there")
        lines += verdict_lines(state)
        lines += [f"“{c}”" for c in hit.captions[:3]]  # what people wrote; the model's guess is said as such
        lines += [f"Model's guess (not a caption): {hit.guess}"] if hit.guess else []
        self.caption.setText("\n".join(lines))

    @property
    def match_frame(self) -> int | None:
        """The sampled frame (0..7) of the shown clip that matched the search best (None: a photo, or unknown)."""
        hit = self.hit
        if hit is None or hit.kind is MediaKind.IMAGE or hit.frame is None or hit.frame < 0:
            return None
        return int(hit.frame)

    def _play_movie(self, path: Path) -> None:
        movie = QMovie(str(path), parent=self)
        if not movie.isValid():
            self._load_still(path)
            return
        movie.frameChanged.connect(lambda _n: self._set_pixmap(movie.currentPixmap()))
        self._movie = movie
        if self.match_frame is None or movie.frameCount() < 1:
            movie.start()
            return
        # a GIF cannot seek (Qt's reader has no random access): step to the matched frame, hold it, play on
        target = matched_frame(self.match_frame, movie.frameCount())
        for _ in range(target + 1):  # from "no frame yet" (-1)
            if not movie.jumpToNextFrame():
                break
        self.opened_at = movie.currentFrameNumber()
        generation = self._generation
        QTimer.singleShot(MATCH_HOLD_MS, self, lambda: self._play_on(generation))

    def _play_on(self, generation: int) -> None:
        if generation == self._generation and self._movie is not None and self.isVisible():
            self._movie.start()  # from the frame shown

    def _play_video(self, path: Path, media_id: int) -> None:
        generation = self._generation
        video = VideoReader(path, self.picture.size(), self, start=self.match_frame)
        video.frame_ready.connect(lambda image: self._video_frame(generation, image))
        video.failed.connect(lambda: self._play_frames(media_id) if generation == self._generation else None)
        self._video = video
        video.start()

    def _video_frame(self, generation: int, image: QImage) -> None:
        if generation == self._generation:
            if self.opened_at is None and self._video is not None:
                self.opened_at = self._video.started_at
            self._set_pixmap(QPixmap.fromImage(image))

    @property
    def playing_video(self) -> bool:
        """Whether a video is being decoded and shown (not its preview frames)."""
        return self._video is not None and self._video.isRunning()

    def _play_frames(self, media_id: int) -> None:
        frames = self._cache.frames(media_id)
        if frames is not None:
            self._frames_arrived(media_id)

    def _frames_arrived(self, media_id: int) -> None:
        if (self.hit is None or self.hit.media_id != media_id or self.hit.kind is not MediaKind.VIDEO
                or self.playing_video or not self.isVisible()):
            return
        self._frames, self._frame = list(self._cache.frames(media_id) or []), 0
        if not self._frames:
            self.picture.setText("No preview frames for this video")
            return
        if self.match_frame is not None:  # the previews are spread like the sampled frames: start at the match
            self._frame = self.opened_at = matched_frame(self.match_frame, len(self._frames))
        self._set_pixmap(self._frames[self._frame])
        if self.opened_at is not None:
            generation = self._generation
            QTimer.singleShot(MATCH_HOLD_MS, self,
                              lambda: self._timer.start() if generation == self._generation and self._frames else None)
        else:
            self._timer.start()

    def _next_frame(self) -> None:
        if self._frames:
            self._frame = (self._frame + 1) % len(self._frames)
            self._set_pixmap(self._frames[self._frame])

    def _set_pixmap(self, pixmap: QPixmap) -> None:
        self._pixmap = pixmap
        self.picture.setPixmap(pixmap.scaled(self.picture.size(), Qt.AspectRatioMode.KeepAspectRatio,
                                             Qt.TransformationMode.SmoothTransformation))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        pixmap = getattr(self, "_pixmap", None)
        if pixmap is not None and not pixmap.isNull():
            self._set_pixmap(pixmap)

    def _stop(self) -> None:
        self._timer.stop()
        self._frames = []
        self._pixmap = None
        self.opened_at = None
        if self._video is not None:
            video, self._video = self._video, None
            video.requestInterruption()
            if video.wait(VIDEO_STOP_WAIT_MS):  # a frame's decoding, normally
                video.deleteLater()
            else:  # a decoder stuck in a file must not freeze the window: it ends (and goes) on its own
                log.warning("decoding %s did not stop within %d ms; left to finish", video.path, VIDEO_STOP_WAIT_MS)
                video.setParent(None)
                _unstopped.add(video)
                video.finished.connect(lambda: _unstopped.discard(video))
        if self._movie is not None:
            self._movie.stop()
            self._movie.deleteLater()
            self._movie = None

    def _show_in_folder(self) -> None:
        if self.hit is not None:
            show_in_folder(Path(self.hit.path))

    def hideEvent(self, event: QHideEvent) -> None:
        self._stop()  # Escape, Close or the window going away: nothing plays unseen
        super().hideEvent(event)
