"""The viewer's clips playing: a GIF (QMovie), a video (decoded by OpenCV on a thread of its own, one frame at a
time) or, when OpenCV cannot read it, the video's preview frames; play / pause, seeking, the position shown, and a
clip opened at the frame that matched held a moment before it plays on (:class:`app.widgets.viewer.Viewer`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSize, QTimer
from PySide6.QtGui import QImage, QImageReader, QMovie, QPixmap
from PySide6.QtWidgets import QLabel, QPushButton, QWidget

from app.widgets.clips import MATCH_HOLD_MS, SeekSlider, VideoReader, matched_frame, seek_movie
from app.widgets.images import ThumbnailCache
from app.widgets.mediadetails import clock_text
from app.widgets.zoomview import PictureView
from engine.types import MediaKind, SearchHit

FRAME_MS = 140  # a video's preview frames, as on hover in the grid
VIDEO_STOP_WAIT_MS = 2000  # closing the viewer waits this long at most for a video's decoding thread
MOVIE_CACHE_BYTES = 256 * 2**20  # a GIF whose frames fit in this is cached whole, so seeking in it is a jump


class ClipPlayback:
    """The viewer's clip playing, mixed into :class:`app.widgets.viewer.Viewer`, which owns the state below (it
    resets it when another item opens) and the widgets the clip shows in."""

    hit: SearchHit | None
    picture: PictureView
    play_button: QPushButton
    seek_slider: SeekSlider
    position_label: QLabel
    clip_controls: QWidget
    position: int  # the clip's frame shown now
    opened_at: int | None  # a clip opened at its match: the frame (of the file / its previews)
    start_sample: int | None  # the sampled frame the clip opens at (None: the start)
    _cache: ThumbnailCache
    _generation: int
    _movie: QMovie | None
    _video: VideoReader | None
    _frames: list[QPixmap]
    _frame: int
    _held: bool
    _paused_by_user: bool
    _clip_length: int
    _fps: float
    _timer: QTimer
    _load_still: Callable[[Path, QSize], None]  # a photo (or a GIF QMovie cannot play) read as a still
    isVisible: Callable[[], bool]  # QWidget's

    # --- clips: playing, pausing, seeking
    @property
    def playing(self) -> bool:
        """Whether the shown clip is playing (or about to, held on its matched frame); False when paused."""
        if self._video is not None:
            return not self._video.paused
        if self._movie is not None:
            return self._movie.state() is QMovie.MovieState.Running or (self._held and not self._paused_by_user)
        return self._timer.isActive() or (self._held and not self._paused_by_user)

    def toggle_play(self) -> None:
        """Play a paused clip, pause a playing one (Space). A video paused at its end plays from the start."""
        if self.hit is None or self.hit.kind is MediaKind.IMAGE:
            return
        pause = self.playing
        self._paused_by_user = pause
        if self._video is not None:
            if not pause and self._clip_length and self.position >= self._clip_length - 1:
                self._video.seek(0)
            self._video.set_paused(pause)
        elif self._movie is not None:
            if pause:
                self._movie.setPaused(True)
            elif self._movie.state() is QMovie.MovieState.Paused:
                self._movie.setPaused(False)
            else:
                self._held = False
                self._movie.start()  # from the frame shown
        elif self._frames:
            if pause:
                self._timer.stop()
            else:
                self._held = False
                self._timer.start()
        self._show_position()

    def seek(self, frame: int) -> None:
        """Show ``frame`` of the shown clip (playing on from there if it was playing)."""
        frame = max(0, min(frame, self._clip_length - 1)) if self._clip_length else max(0, frame)
        if self._video is not None:
            self._video.seek(frame)
            self.position = frame
        elif self._movie is not None:
            was_playing = self._movie.state() is QMovie.MovieState.Running
            seek_movie(self._movie, frame)
            self.position = max(0, self._movie.currentFrameNumber())
            self.picture.setPixmap(self._movie.currentPixmap())
            if was_playing and self._movie.state() is not QMovie.MovieState.Running:
                self._movie.start()  # seeking backwards restarted the reader
        elif self._frames:
            self._frame = self.position = frame % len(self._frames)
            self.picture.setPixmap(self._frames[self._frame])
        self._show_position()

    def _slider_moved(self, value: int) -> None:
        if value != self.position:
            self.seek(value)

    def _show_position(self) -> None:
        """The play button, the slider and the text say where the clip is."""
        self.play_button.setText("Pause" if self.playing else "Play")
        slider = self.seek_slider
        slider.blockSignals(True)
        slider.setRange(0, max(0, self._clip_length - 1))
        if not slider.isSliderDown():  # the user's drag wins over the frames still arriving
            slider.setValue(self.position)
        slider.blockSignals(False)
        if self._fps > 0:
            total = f" / {clock_text(self._clip_length / self._fps)}" if self._clip_length else ""
            self.position_label.setText(clock_text(self.position / self._fps) + total)
        elif self._clip_length:
            self.position_label.setText(f"frame {self.position + 1} of {self._clip_length}")
        else:
            self.position_label.setText("")

    # --- GIFs
    def _play_movie(self, path: Path) -> None:
        movie = QMovie(str(path), parent=self)
        if not movie.isValid():
            self.clip_controls.hide()
            self._load_still(path, self.picture.viewport().size())
            return
        size = QImageReader(str(path)).size()
        if size.isValid() and movie.frameCount() * size.width() * size.height() * 4 <= MOVIE_CACHE_BYTES:
            movie.setCacheMode(QMovie.CacheMode.CacheAll)  # then a seek is a jump, not a replay from the start
        movie.frameChanged.connect(self._movie_frame)
        self._movie, self._clip_length, self._fps = movie, max(0, movie.frameCount()), 0.0
        if self.start_sample is None or movie.frameCount() < 1:
            movie.start()
            self._show_position()
            return
        seek_movie(movie, matched_frame(self.start_sample, movie.frameCount()))
        self.opened_at = movie.currentFrameNumber()
        self._hold_then_play()

    def _movie_frame(self, frame: int) -> None:
        movie = self._movie
        if movie is not None:
            self.position = max(0, frame)
            self.picture.setPixmap(movie.currentPixmap())
            self._show_position()

    def _hold_then_play(self) -> None:
        """A clip opened at its matched frame: hold it MATCH_HOLD_MS, then play on (unless the user paused)."""
        self._held = True
        self._show_position()
        generation = self._generation
        QTimer.singleShot(MATCH_HOLD_MS, self, lambda: self._play_on(generation))

    def _play_on(self, generation: int) -> None:
        if generation != self._generation or not self._held or self._paused_by_user or not self.isVisible():
            return
        self._held = False
        if self._movie is not None:
            self._movie.start()  # from the frame shown
        elif self._frames:
            self._timer.start()
        self._show_position()

    # --- videos
    def _play_video(self, path: Path, media_id: int) -> None:
        generation = self._generation
        video = VideoReader(path, self.picture.viewport().size(), self, start=self.start_sample)
        video.opened.connect(lambda n, fps: self._video_opened(generation, n, fps))
        video.frame_ready.connect(lambda image, n, size: self._video_frame(generation, image, n, size))
        video.ended.connect(lambda: self._show_position() if generation == self._generation else None)
        video.failed.connect(lambda: self._play_frames(media_id) if generation == self._generation else None)
        self._video = video
        video.start()

    def _video_opened(self, generation: int, n_frames: int, fps: float) -> None:
        if generation == self._generation:
            self._clip_length, self._fps = n_frames, fps
            self._show_position()

    def _video_frame(self, generation: int, image: QImage, frame: int, size: QSize) -> None:
        if generation == self._generation:
            if self.opened_at is None and self._video is not None:
                self.opened_at = self._video.started_at
            self.position = frame
            self.picture.setPixmap(QPixmap.fromImage(image), size)
            self._show_position()

    @property
    def playing_video(self) -> bool:
        """Whether a video is being decoded and shown (not its preview frames)."""
        return self._video is not None and self._video.isRunning()

    def _play_frames(self, media_id: int) -> None:
        video, self._video = self._video, None  # OpenCV could not read it: its preview frames play instead
        if video is not None:
            video.wait(VIDEO_STOP_WAIT_MS)  # it returns right after saying so
            video.deleteLater()
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
        self._clip_length, self._fps = len(self._frames), 0.0
        if self.start_sample is not None:  # the previews are spread like the sampled frames: start at the match
            self._frame = self.opened_at = matched_frame(self.start_sample, len(self._frames))
        self.position = self._frame
        self.picture.setPixmap(self._frames[self._frame])
        if self.opened_at is not None:
            self._hold_then_play()
        elif not self._paused_by_user:
            self._timer.start()
        self._show_position()

    def _next_frame(self) -> None:
        if self._frames:
            self._frame = self.position = (self._frame + 1) % len(self._frames)
            self.picture.setPixmap(self._frames[self._frame])
            self._show_position()
