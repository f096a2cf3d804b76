"""Phone pictures in the GUI: HEIC and AVIF (which Qt cannot read here) and EXIF-rotated JPEGs are shown upright in
the viewer and under a picture query's attention in the inspector (issue #20)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSize, QThreadPool
from PySide6.QtGui import QColor, QImageReader

from app.widgets.images import ThumbnailCache, read_scaled
from app.widgets.inspector import _load_explanation
from app.widgets.viewer import Viewer
from engine.types import Explanation, MediaKind, SearchHit
from tests import mediagen as mg
from tests.mediagen import BLUE, RED


def close(colour: QColor, rgb: tuple[int, int, int], tolerance: int = 40) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip((colour.red(), colour.green(), colour.blue()), rgb,
                                                      strict=True))


def rotated_photo(folder: Path, fmt: str) -> Path:
    """A 120 x 80 picture, red above blue, stored on its side with EXIF orientation 6 (as a phone held upright
    writes it): shown upright it is 80 x 120, blue on the left, red on the right."""
    pixels = mg.halves((120, 80), RED, BLUE)
    if fmt == "JPEG":
        return mg.make_jpeg(folder / "photo.jpg", pixels=pixels, exif_orientation=6)
    return mg.make_heif_or_avif(folder / f"photo.{fmt.lower()}", fmt, pixels, exif_orientation=6)


@pytest.mark.parametrize("fmt", ["HEIF", "AVIF", "JPEG"])
def test_phone_pictures_are_read_upright_and_scaled_into_the_box(qapp, tmp_path: Path, fmt: str) -> None:
    path = rotated_photo(tmp_path, fmt)
    image = read_scaled(path, QSize(1000, 1000))
    assert (image.width(), image.height()) == (80, 120)  # upright; never enlarged
    assert close(image.pixelColor(5, 60), BLUE) and close(image.pixelColor(74, 60), RED)
    small = read_scaled(path, QSize(40, 40))
    assert small.height() == 40 and small.width() <= 27


def test_qt_alone_cannot_read_heic_here(qapp, tmp_path: Path) -> None:
    """Why the engine's decoder is needed: if a Qt HEIF plugin ever appears, this says so."""
    path = rotated_photo(tmp_path, "HEIF")
    if QImageReader(str(path)).canRead():
        pytest.skip("this Qt has a HEIF plugin")
    assert QImageReader(str(path)).read().isNull()


def test_an_unreadable_file_says_why(qapp, tmp_path: Path) -> None:
    path = tmp_path / "cut.heic"
    path.write_bytes(rotated_photo(tmp_path, "HEIF").read_bytes()[:200])
    with pytest.raises(OSError) as caught:
        read_scaled(path, QSize(100, 100))
    assert str(caught.value)


def test_the_viewer_shows_a_heic(qtbot, tmp_path: Path) -> None:
    path = rotated_photo(tmp_path, "HEIF")
    viewer = Viewer(ThumbnailCache(QThreadPool.globalInstance()), QThreadPool.globalInstance())
    qtbot.addWidget(viewer)
    viewer.show()
    viewer.show_hit(SearchHit(1, str(path), MediaKind.IMAGE, 0.5))
    qtbot.waitUntil(lambda: viewer.picture.pixmap() is not None and not viewer.picture.pixmap().isNull(),
                    timeout=5000)
    pixmap = viewer.picture.pixmap()
    assert pixmap.height() > pixmap.width()  # upright
    assert "Cannot show" not in viewer.picture.text()


class _PictureQueryService:
    """Only what the inspector's loader asks for: an explanation of a picture query, no item picture."""

    @property
    def search(self) -> _PictureQueryService:  # the parts the loader asks: search.explain, library.preview_frames
        return self

    library = search

    def explain(self, query: str | Path, media_id: int) -> Explanation:
        grid = np.full((1, 49), 1 / 49, dtype=np.float32)
        return Explanation((), grid, np.zeros((1, 3), dtype=np.float32), None, np.eye(1), (0, 0))

    def preview_frames(self, media_id: int, n: int) -> list[Path]:
        return []


def test_a_heic_query_picture_is_drawn_under_its_attention(qapp, tmp_path: Path) -> None:
    path = rotated_photo(tmp_path, "HEIF")
    hit = SearchHit(1, str(tmp_path / "clip.mp4"), MediaKind.VIDEO, 0.5)
    loaded = _load_explanation(_PictureQueryService(), path, hit)
    assert loaded.query_image is not None
    assert loaded.query_image.height() > loaded.query_image.width()
