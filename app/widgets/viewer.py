"""The viewer: one result large, as a photo viewer shows it. Photos are read scaled to the window off the GUI
thread (and again at full size when a zoom needs the pixels), GIFs play (QMovie), videos play (decoded by OpenCV on
a thread of their own, one frame at a time; their preview frames when OpenCV cannot read them) with play / pause,
a seek slider and the position; Ctrl+wheel, +/- zoom, 0 fits, 1 shows actual pixels (:mod:`app.widgets.zoomview`);
the details panel says what the catalog knows of the file (:mod:`app.widgets.mediadetails`). Left / Right step
through the results, Alt+A / Alt+R judge, Escape closes, "Show in folder" opens the file manager there. A clip
found by a search opens at the part that matched (``SearchHit.frame``): that frame is shown and held a moment,
then the clip plays on from there (a frame clicked in the inspector's strip opens it at that frame). The text under
the picture says which queries the user accepted or rejected the item for."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QModelIndex, QSize, Qt, QThreadPool, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QHideEvent,
    QImage,
    QKeySequence,
    QMovie,
    QPixmap,
)
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.widgets.clipplayback import FRAME_MS, VIDEO_STOP_WAIT_MS, ClipPlayback
from app.widgets.clips import (
    FULL_SIZE,
    SAMPLED_FRAMES,
    SeekSlider,
    VideoReader,
)
from app.widgets.desktop import show_in_folder
from app.widgets.hittext import verdict_lines
from app.widgets.images import ThumbnailCache, read_picture
from app.widgets.mediadetails import DetailsPanel
from app.widgets.plaintext import plain_label
from app.widgets.resultsmodel import STATE_ROLE, ResultsModel
from app.widgets.zoomview import PictureView
from app.workers import run_in_background, while_alive
from engine.types import MediaDetails, MediaKind, SearchHit

log = logging.getLogger(__name__)

_unstopped: set[VideoReader] = set()  # decoding threads that did not stop in time, kept until they end


class Viewer(ClipPlayback, QDialog):
    """Shows one :class:`SearchHit` large; asks the window to step (``step_requested``) or judge.

    Zoom: Ctrl+wheel or +/- (at the pointer / the centre), 0 fits the window, 1 shows actual pixels (1:1), Z or a
    double-click toggles the two (Lightroom's keys); a zoomed picture is dragged to pan. A photo is read scaled to
    the window first and again at full size when a zoom needs its pixels. Clips: Space plays / pauses, the slider
    seeks, the text beside it says where (a video's time, a GIF's frame). I shows / hides the details panel.
    """

    step_requested = Signal(int)  # -1 previous, +1 next
    judge_requested = Signal(int)  # +1 accept, -1 reject

    def __init__(self, cache: ThumbnailCache, pool: QThreadPool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Polyseek — viewer")
        self._cache, self._pool = cache, pool
        self.hit: SearchHit | None = None
        self._results: ResultsModel | None = None  # the results whose annotation states the viewer follows
        self.state: object = None  # the hit's AnnotationState, when known
        self.details_data: MediaDetails | None = None  # the shown item's catalog details, once read
        self._generation = 0
        self._movie: QMovie | None = None
        self._video: VideoReader | None = None
        self._frames: list[QPixmap] = []
        self._frame = 0
        self._full_size_asked = False
        self._held = False  # a clip shown at its matched frame, to play on after MATCH_HOLD_MS
        self._paused_by_user = False
        self._clip_length = 0  # frames of the shown clip (0: unknown)
        self._fps = 0.0  # a video's frame rate (0: frames are counted, not timed)
        self.position = 0  # the clip's frame shown now
        self.opened_at: int | None = None  # a clip opened at its match: the frame (of the file / its previews)
        self._start: int | None = None  # the sampled frame asked for (a frame clicked in the inspector)
        self._timer = QTimer(self, interval=FRAME_MS)
        self._timer.timeout.connect(self._next_frame)
        cache.frames_ready.connect(self._frames_arrived)
        self.picture = PictureView()
        self.picture.setMinimumSize(200, 150)
        self.picture.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # the keys (arrows, Alt+A / R) land here
        self.picture.zoom_changed.connect(self._zoom_changed)
        self.details = DetailsPanel()
        self.caption = plain_label("", wrap=True)
        self._build_clip_controls()
        self._build_buttons()
        self._add_keys()
        self._lay_out()
        self.resize(1100, 760)

    # --- construction
    def _build_clip_controls(self) -> None:
        self.play_button = QPushButton("Pause")
        self.play_button.setToolTip("Play / pause (Space)")
        self.play_button.clicked.connect(self.toggle_play)
        self.seek_slider = SeekSlider(Qt.Orientation.Horizontal)
        self.seek_slider.setToolTip("Drag or click to go to another moment of the clip")
        self.seek_slider.valueChanged.connect(self._slider_moved)
        self.position_label = plain_label("")
        self.clip_controls = QWidget()
        row = QHBoxLayout(self.clip_controls)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.play_button)
        row.addWidget(self.seek_slider, 1)
        row.addWidget(self.position_label)
        self.clip_controls.hide()

    def _build_buttons(self) -> None:
        self.previous_button = QPushButton("◀ Previous")
        self.next_button = QPushButton("Next ▶")
        self.zoom_out_button = QPushButton("−")
        self.fit_button = QPushButton("Fit")
        self.actual_button = QPushButton("1:1")
        self.zoom_in_button = QPushButton("+")
        self.zoom_label = plain_label("")
        self.details_button = QPushButton("Details", checkable=True, checked=True)
        self.folder_button = QPushButton("Show in folder")
        for button, tip in ((self.zoom_out_button, "Zoom out (−, Ctrl+wheel)"),
                            (self.fit_button, "Fit the window (0)"),
                            (self.actual_button, "Actual pixels, 1:1 (1; Z or a double-click toggles)"),
                            (self.zoom_in_button, "Zoom in (+, Ctrl+wheel)"),
                            (self.details_button, "Show or hide the details (I)")):
            button.setToolTip(tip)
        self.previous_button.clicked.connect(lambda: self.step_requested.emit(-1))
        self.next_button.clicked.connect(lambda: self.step_requested.emit(+1))
        self.zoom_out_button.clicked.connect(lambda: self.picture.zoom_by(-1))
        self.zoom_in_button.clicked.connect(lambda: self.picture.zoom_by(+1))
        self.fit_button.clicked.connect(lambda: self.picture.set_zoom(None))
        self.actual_button.clicked.connect(lambda: self.picture.set_zoom(1.0))
        self.details_button.toggled.connect(self.details.setVisible)
        self.folder_button.clicked.connect(self._show_in_folder)
        for widget in (self.previous_button, self.next_button, self.zoom_out_button, self.fit_button,
                       self.actual_button, self.zoom_in_button, self.details_button, self.folder_button,
                       self.play_button, self.seek_slider):
            widget.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # arrows step, Space plays: never a button's keys

    def _add_keys(self) -> None:
        for keys, slot in ((("Left",), lambda: self.step_requested.emit(-1)),
                           (("Right",), lambda: self.step_requested.emit(+1)),
                           (("Alt+A",), lambda: self.judge_requested.emit(+1)),
                           (("Alt+R",), lambda: self.judge_requested.emit(-1)),
                           (("+", "=", "Ctrl++", "Ctrl+="), lambda: self.picture.zoom_by(+1)),
                           (("-", "Ctrl+-"), lambda: self.picture.zoom_by(-1)),
                           (("0", "Ctrl+0"), lambda: self.picture.set_zoom(None)),
                           (("1", "Ctrl+1"), lambda: self.picture.set_zoom(1.0)),
                           (("Z",), lambda: self.picture.toggle_actual_pixels()),
                           (("Space",), self.toggle_play),
                           (("I",), self.details_button.toggle)):
            action = QAction(self)
            action.setShortcuts([QKeySequence(k) for k in keys])
            action.triggered.connect(slot)
            self.addAction(action)

    def _lay_out(self) -> None:
        top = QHBoxLayout()
        top.addWidget(self.picture, 1)
        top.addWidget(self.details)
        row = QHBoxLayout()
        row.addWidget(self.previous_button)
        row.addWidget(self.next_button)
        row.addStretch(1)
        for widget in (self.zoom_out_button, self.fit_button, self.actual_button, self.zoom_in_button,
                       self.zoom_label):
            row.addWidget(widget)
        row.addStretch(1)
        row.addWidget(self.details_button)
        row.addWidget(self.folder_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top, 1)
        layout.addWidget(self.clip_controls)
        layout.addWidget(self.caption)
        layout.addLayout(row)

    # --- the item
    def show_hit(self, hit: SearchHit | None, state: object = None, start: int | None = None) -> None:
        """Show ``hit`` (None: nothing left to show, the viewer closes); ``state`` is its
        :class:`engine.library.browse.AnnotationState` when known (which queries it was accepted / rejected for).
        ``start``: a clip's sampled frame (0..7) to open at, e.g. one clicked in the inspector (None: its match)."""
        if hit is None:
            self.close()
            return
        self._stop()
        self.hit = hit
        self._start = start if start is not None and hit.kind is not MediaKind.IMAGE and start >= 0 else None
        self._generation += 1
        name = Path(hit.path).name
        self.setWindowTitle(f"{name} — Polyseek")
        self.set_state(state)
        self.caption.setToolTip(str(hit.path))
        self.picture.setText("Loading…")
        self._load_details(hit)
        self.clip_controls.setVisible(hit.kind is not MediaKind.IMAGE)
        if hit.kind is MediaKind.ANIMATION:
            self._play_movie(Path(hit.path))
        elif hit.kind is MediaKind.VIDEO:
            self._play_video(Path(hit.path), hit.media_id)
        else:
            self._load_still(Path(hit.path), self.picture.viewport().size())

    def follow(self, hit: SearchHit, state: object = None) -> None:
        """The results' selection moved to ``hit`` while the viewer is open: another item opens at its match; the
        same item selected again (a results page read again under it, #44) keeps the frame the user opened it at
        and only takes the new ``state``."""
        if self.hit is not None and self.hit.media_id == hit.media_id:
            self.set_state(state)
        else:
            self.show_hit(hit, state)

    def _load_details(self, hit: SearchHit) -> None:
        self.details_data = None
        self.details.show_path(Path(hit.path), hit.kind)
        service = self._cache.service
        if service is None:
            return
        generation = self._generation

        def arrived(details: MediaDetails) -> None:
            if generation == self._generation:
                self.details_data = details
                self.details.show_details(details)

        def failed(exc: BaseException) -> None:
            if generation == self._generation:
                self.details.show_path(Path(hit.path), hit.kind, f"No details from the library: {exc}")

        run_in_background(service.library.details, hit.media_id, pool=self._pool, priority=10,
                          on_result=while_alive(self, arrived), on_error=while_alive(self, failed))

    def _load_still(self, path: Path, box: QSize) -> None:
        generation = self._generation

        def shown(loaded: tuple[QImage, QSize]) -> None:
            if generation == self._generation:
                image, source = loaded
                self.picture.setPixmap(QPixmap.fromImage(image), source)

        def failed(exc: BaseException) -> None:
            if generation == self._generation and self.picture.pixmap() is None:
                self.picture.setText(f"Cannot show this file: {exc}")

        run_in_background(read_picture, path, box, pool=self._pool, priority=10,
                          on_result=while_alive(self, shown), on_error=while_alive(self, failed))

    def follow_states(self, results: ResultsModel) -> None:
        """Say what the user wrote about the item on show as it arrives or changes among ``results``."""
        self._results = results
        results.dataChanged.connect(self._states_changed)

    def _states_changed(self, first: QModelIndex, last: QModelIndex, roles: list[int]) -> None:
        results, hit = self._results, self.hit
        if results is None or hit is None or not self.isVisible() or (roles and STATE_ROLE not in roles):
            return
        row = results.row_of(hit.media_id)
        if row is not None and first.row() <= row <= last.row():
            self.set_state(results.state(hit.media_id))

    def set_state(self, state: object) -> None:
        """Say under the picture what is known about the shown item: the part of a clip that matched, the
        queries it was accepted or rejected for (``state``), its first captions."""
        self.state, hit = state, self.hit
        if hit is None:
            return
        lines = [f"{Path(hit.path).name}  ·  {hit.kind.value}  ·  {hit.path}"]
        if self.match_frame is not None:
            lines.append(f"Best match: sampled frame {self.match_frame + 1} of {SAMPLED_FRAMES}"
                         + ("; the clip opens there" if self.start_sample == self.match_frame else ""))
        if self.start_sample is not None and self.start_sample != self.match_frame:
            lines.append(f"Opened at sampled frame {self.start_sample + 1} of {SAMPLED_FRAMES}, as asked")
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

    @property
    def start_sample(self) -> int | None:
        """The sampled frame (0..7) the shown clip opens at: the one asked for, else its match (None: the start)."""
        return self._start if self._start is not None else self.match_frame

    # --- zoom
    def _zoom_changed(self) -> None:
        picture = self.picture
        percent = round(100 * picture.scale())
        self.zoom_label.setText(f"Fit ({percent} %)" if picture.fitted else f"{percent} %")
        if not picture.wants_full_size or self.hit is None:
            return
        if self.hit.kind is MediaKind.IMAGE and not self._full_size_asked:
            self._full_size_asked = True  # once per photo: the zoom keeps its place when the pixels arrive
            self._load_still(Path(self.hit.path), picture.source)
        elif self._video is not None and self._video.box != FULL_SIZE:
            self._video.box = FULL_SIZE  # frames at the file's size from now on
            if self._video.paused:
                self._video.seek(self.position)  # redraw the paused frame with its pixels

    # --- closing
    def _stop(self) -> None:
        self._timer.stop()
        self._frames = []
        self.opened_at = None
        self._full_size_asked = self._held = self._paused_by_user = False
        self._clip_length, self._fps, self.position = 0, 0.0, 0
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
