"""What phones write: HEIC/HEIF and AVIF stills, portrait (rotated) videos, Live Photo pairs; and a broken video
reported once, in Polyseek's words, with nothing from OpenCV or FFmpeg on stderr."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from engine.media import MediaInfo, decode_frames, decode_image, load_image, probe, sniff_format, thumbnail
from engine.media.sniff import sniff_bytes
from engine.types import MediaKind
from tests import mediagen as mg
from tests.mediagen import BLUE, GREEN, RED

PHONE_FORMATS = [("HEIF", "photo.heic", "heif"), ("AVIF", "photo.avif", "avif")]


def close(pixel: np.ndarray, color: tuple[int, int, int], tolerance: int = 24) -> bool:
    return bool(np.all(np.abs(pixel.astype(int) - np.asarray(color)) <= tolerance))


@pytest.mark.parametrize(("writer", "name", "fmt"), PHONE_FORMATS)
def test_phone_stills_are_recognised_by_content_and_probe_as_images(tmp_path: Path, writer, name, fmt) -> None:
    path = mg.make_heif_or_avif(tmp_path / name, writer, mg.solid((40, 30), GREEN))
    renamed = path.rename(tmp_path / "no_extension")
    assert sniff_format(renamed) == fmt
    assert probe(renamed) == MediaInfo(MediaKind.IMAGE, fmt, 40, 30, 1, None)
    assert close(decode_image(renamed, size=8)[4, 4], GREEN)


@pytest.mark.parametrize(("brands", "expected"), [
    (b"mif1\0\0\0\0mif1heic", "heif"),
    (b"mif1\0\0\0\0mif1avif", "avif"),
    (b"msf1\0\0\0\0msf1hevc", "heif"),
    (b"avis\0\0\0\0avismsf1", "avif"),
    (b"crx \0\0\0\0crx isom", None),  # Canon raw: neither picture we decode nor video
    (b"isom\0\0\0\0isomiso2", "mp4"),
])
def test_iso_media_brands(brands: bytes, expected: str | None) -> None:
    head = (8 + len(brands)).to_bytes(4, "big") + b"ftyp" + brands + b"\0" * 64
    assert sniff_bytes(head) == expected


@pytest.mark.parametrize(("writer", "name", "fmt"), PHONE_FORMATS)
@pytest.mark.parametrize(("orientation", "left", "right"), [(1, None, None), (6, BLUE, RED), (8, RED, BLUE)])
def test_phone_stills_are_shown_upright(tmp_path: Path, writer, name, fmt, orientation, left, right) -> None:
    # Stored: red top half, blue bottom half; 6 = "rotate 90 degrees clockwise to view" (the top ends on the right).
    path = mg.make_heif_or_avif(tmp_path / name, writer, mg.halves((64, 32), RED, BLUE), exif_orientation=orientation)
    assert load_image(path).size == ((64, 32) if left is None else (32, 64))
    pixels = decode_image(path, size=32)
    if left is None:
        assert close(pixels[2, 16], RED) and close(pixels[29, 16], BLUE)
    else:
        assert close(pixels[16, 2], left) and close(pixels[16, 29], right)


def test_a_heic_is_decoded_from_its_embedded_thumbnail_when_that_is_big_enough(tmp_path: Path) -> None:
    path = mg.make_heif_or_avif(tmp_path / "big.heic", "HEIF", mg.halves((1200, 800), RED, BLUE),
                                exif_orientation=6, thumbnails=[480])
    assert load_image(path).size == (800, 1200)
    assert load_image(path, min_size=224).size == (320, 480)  # the thumbnail, upright like the picture
    assert load_image(path, min_size=400).size == (800, 1200)  # too small for that: the full picture
    pixels = decode_image(path, size=32)
    assert close(pixels[16, 2], BLUE) and close(pixels[16, 29], RED)


@pytest.mark.parametrize(("writer", "name", "fmt"), PHONE_FORMATS)
def test_phone_stills_get_jpeg_thumbnails_upright(tmp_path: Path, writer, name, fmt) -> None:
    path = mg.make_heif_or_avif(tmp_path / name, writer, mg.halves((300, 200), RED, BLUE), exif_orientation=6)
    [still] = thumbnail(path, tmp_path / "cache", size=128)
    with Image.open(still) as image:
        assert image.format == "JPEG" and image.size == (85, 128)
        pixels = np.asarray(image.convert("RGB"))
    assert close(pixels[64, 3], BLUE) and close(pixels[64, 80], RED)


def test_avif_without_libavif_says_so(tmp_path: Path, monkeypatch) -> None:
    from engine.media import MediaError, stills

    path = mg.make_heif_or_avif(tmp_path / "a.avif", "AVIF", mg.solid((16, 16), RED))
    monkeypatch.setattr(stills, "avif_supported", lambda: False)
    with pytest.raises(MediaError, match="libavif"):
        decode_image(path)


def test_a_truncated_heic_is_a_media_error(tmp_path: Path) -> None:
    from engine.media import MediaError

    path = mg.make_heif_or_avif(tmp_path / "cut.heic", "HEIF", mg.solid((64, 64), RED))
    mg.truncate(path, 0.5)
    with pytest.raises(MediaError, match="HEIF"):
        decode_image(path)


# ---- portrait video, Live Photos -----------------------------------------------------------------------------


def portrait_clip(path: Path, n_frames: int = 10, fourcc: str = "mp4v") -> Path:
    """A landscape-stored clip (red top, blue bottom) whose track says "rotate 90 degrees clockwise"."""
    import cv2

    frame = np.ascontiguousarray(mg.halves((64, 32), RED, BLUE)[:, :, ::-1])  # OpenCV wants BGR
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*fourcc), 10.0, (64, 32))
    for _ in range(n_frames):
        writer.write(frame)
    writer.release()
    return mg.set_video_rotation(path, 90)


def test_a_portrait_video_is_decoded_upright(tmp_path: Path) -> None:
    clip = portrait_clip(tmp_path / "portrait.mp4")
    info = probe(clip)
    assert (info.kind, info.width, info.height, info.n_frames) == (MediaKind.VIDEO, 32, 64, 10)
    for frame in decode_frames(clip, n=3, size=32):
        assert close(frame[16, 2], BLUE) and close(frame[16, 29], RED)
    still, *previews = thumbnail(clip, tmp_path / "cache", size=64, n_preview=2)
    for path in [still, *previews]:
        with Image.open(path) as image:
            assert image.size == (32, 64)


def test_a_live_photo_pair_indexes_and_previews_both_halves(tmp_path: Path, assets_dir: Path) -> None:
    from engine.workspace import Workspace

    folder = tmp_path / "DCIM"
    folder.mkdir()
    mg.make_heif_or_avif(folder / "IMG_0001.HEIC", "HEIF", mg.halves((64, 32), RED, BLUE), exif_orientation=6)
    movie = portrait_clip(folder / "IMG_0001.MOV")  # QuickTime ('qt  ' brand), as the phone writes it
    assert sniff_format(movie) == "mov"
    service = Workspace.open("phone", assets_dir)
    try:
        list(service.library.index([folder]))
        counts = service.library.counts()
        assert (counts.get("image"), counts.get("video"), counts["failed"]) == (1, 1, 0), service.library.failures()
        hits = service.search.example(folder / "IMG_0001.HEIC", top=2)
        assert Path(hits[0].path).name == "IMG_0001.HEIC"
        by_name = {Path(hit.path).name: hit.media_id for hit in hits}
        for name in ("IMG_0001.HEIC", "IMG_0001.MOV"):
            with Image.open(service.library.thumbnail(by_name[name])) as image:
                assert image.size[0] < image.size[1], name  # portrait, like the phone showed it
        assert len(service.library.preview_frames(by_name["IMG_0001.MOV"], n=3)) == 3
    finally:
        service.close()


def test_heic_and_avif_photos_are_searched_like_jpegs(tmp_path: Path, assets_dir: Path) -> None:
    import skimage.data

    from engine.workspace import Workspace

    folder = tmp_path / "phone"
    folder.mkdir()
    mg.make_heif_or_avif(folder / "coffee.heic", "HEIF", skimage.data.coffee())
    mg.make_heif_or_avif(folder / "cat.avif", "AVIF", skimage.data.chelsea())
    Image.fromarray(skimage.data.rocket()).save(folder / "rocket.jpg")
    service = Workspace.open("phone", assets_dir)
    try:
        list(service.library.index([folder]))
        counts = service.library.counts()
        assert (counts.get("image"), counts["failed"]) == (3, 0), service.library.failures()
        assert Path(service.search.text("a cup of coffee", top=1)[0].path).name == "coffee.heic"
        assert Path(service.search.text("a cat", top=1)[0].path).name == "cat.avif"
        assert Path(service.search.example(folder / "cat.avif", top=1)[0].path).name == "cat.avif"
    finally:
        service.close()


# ---- OpenCV / FFmpeg noise -----------------------------------------------------------------------------------


def moov_less_mp4(path: Path) -> Path:
    """An MP4 cut before its index (the 'moov' box), as a copy interrupted mid-way leaves it."""
    mg.make_mp4(path, n_frames=5)
    data, kept, pos = path.read_bytes(), [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        if data[pos + 4 : pos + 8] != b"moov":
            kept.append(data[pos : pos + size])
        pos += size
    path.write_bytes(b"".join(kept))
    return path


def test_a_broken_video_is_reported_once_without_decoder_noise(tmp_path: Path, assets_dir: Path, capfd) -> None:
    from engine.workspace import Workspace

    folder = tmp_path / "videos"
    folder.mkdir()
    moov_less_mp4(folder / "no_index.mp4")
    whole = mg.make_mp4(tmp_path / "whole.mp4", n_frames=20).read_bytes()
    (folder / "truncated.mp4").write_bytes(whole[: len(whole) * 2 // 3])
    capfd.readouterr()
    service = Workspace.open("noise", assets_dir)
    try:
        list(service.library.index([folder]))
        failures = dict(service.library.failures())
    finally:
        service.close()
    err = capfd.readouterr().err  # what reached file descriptor 2, C libraries included
    assert sorted(Path(p).name for p in failures) == ["no_index.mp4", "truncated.mp4"]
    assert all("MP4 video" in reason for reason in failures.values()), failures
    assert failures[str(folder / "no_index.mp4")].startswith("incomplete MP4 video (no index"), failures
    for noise in ("moov atom", "VIDEOIO", "WARN", "mov,mp4", "error reading header"):
        assert noise not in err, err


@pytest.mark.parametrize(("writer", "name", "fmt"), PHONE_FORMATS)
def test_load_image_pixels_outlive_the_file(tmp_path: Path, writer, name, fmt) -> None:
    """An upright RGB file is returned as decoded, not as the (closed) opened image: its pixels can be read."""
    path = mg.make_heif_or_avif(tmp_path / name, writer, mg.halves((40, 30), RED, BLUE))
    pixels = np.asarray(load_image(path))
    assert close(pixels[2, 20], RED) and close(pixels[27, 20], BLUE)
