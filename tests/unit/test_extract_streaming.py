"""The extractor runs the backbone on decodes as they complete, not once per batch, and keeps every file's
outputs with that file (a stand-in backbone whose outputs encode each image's own pixels)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import engine.features.extract as extract
from engine.features.backbone import BackboneOutput
from engine.media import MediaError
from tests.mediagen import make_animated_gif, make_jpeg

SIZE = 32
NAMES = [f"class {i}" for i in range(1000)]


class PixelBackbone:
    """Outputs that identify the image: every feature is the image's mean red value; records each call."""

    id = "pixels"
    image_size = SIZE

    def __init__(self, on_call=None) -> None:
        self.calls: list[int] = []
        self._on_call = on_call

    def __call__(self, images: np.ndarray) -> BackboneOutput:
        self.calls.append(len(images))
        if self._on_call is not None:
            self._on_call()
        n = len(images)
        red = images[..., 0].reshape(n, -1).mean(axis=1).astype(np.float32)
        probs = np.full((n, 1000), 1e-3, np.float32)
        return BackboneOutput(
            local=np.repeat(red[:, None, None], 49 * 1280, axis=1).reshape(n, 49, 1280),
            pooled=np.repeat(red[:, None], 1280, axis=1),
            probs=probs, region_max=probs.copy(), region_best=np.zeros((n, 1000), np.int64),
            region_top_ids=np.zeros((n, 49, 3), np.int64), region_top_probs=np.full((n, 49, 3), 1e-3, np.float32))


def reds(tmp_path: Path, n: int) -> list[Path]:
    """``n`` JPEGs of distinct red levels (file i has red 10 + 8 i)."""
    return [make_jpeg(tmp_path / f"{i:02d}.jpg", (SIZE, SIZE), (10 + 8 * i, 0, 0)) for i in range(n)]


def test_each_file_keeps_its_own_outputs_across_chunks_with_failures_and_animations_in_place(tmp_path, monkeypatch):
    monkeypatch.setattr(extract, "STREAM_FRAMES", 3)
    photos = reds(tmp_path, 7)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    gif = make_animated_gif(tmp_path / "anim.gif", [(200, 0, 0), (100, 0, 0)], size=(SIZE, SIZE))
    paths = [*photos[:2], broken, gif, *photos[2:]]
    backbone = PixelBackbone()
    extractor = extract.FeatureExtractor(backbone, NAMES, decode_threads=2)
    try:
        results = extractor.extract(paths)
    finally:
        extractor.close()
    assert isinstance(results[2], MediaError)
    assert [r.path for r in results if not isinstance(r, MediaError)] == [p for p in paths if p != broken]
    for photo in photos:
        (result,) = [r for r in results if not isinstance(r, MediaError) and r.path == photo]
        expected = 10 + 8 * int(photo.stem)
        assert result.record.global_[0] == pytest.approx(expected, abs=3)  # JPEG rounding, not another file
        assert result.record.local.shape == (49, 1280) and result.record.local[0, 0] == result.record.global_[0]
    animation = results[3]
    assert animation.record.frames is not None and animation.record.local is None
    assert sum(backbone.calls) == 7 + len(animation.record.frames)
    assert len(backbone.calls) > 1 and max(backbone.calls) < 3 + len(animation.record.frames)


def test_backbone_starts_before_the_rest_of_the_batch_is_decoded(tmp_path, monkeypatch):
    """Files after the first chunk decode only once the backbone has run (with a bounded wait): the backbone
    must take the first chunk without waiting for the whole batch."""
    monkeypatch.setattr(extract, "STREAM_FRAMES", 2)
    paths = reds(tmp_path, 8)
    backbone_ran = threading.Event()
    waited_out: list[str] = []
    decode = extract.decode_for_backbone

    def gated_decode(path: Path, size: int, *args):
        if int(path.stem) >= 4 and not backbone_ran.wait(timeout=5):
            waited_out.append(path.name)
        return decode(path, size, *args)

    monkeypatch.setattr(extract, "decode_for_backbone", gated_decode)
    backbone = PixelBackbone(on_call=backbone_ran.set)
    extractor = extract.FeatureExtractor(backbone, NAMES, decode_threads=2)
    try:
        results = extractor.extract(paths)
    finally:
        extractor.close()
    assert not waited_out, "the backbone waited for the whole batch to be decoded"
    assert [r.path for r in results] == paths
    assert backbone.calls[0] <= 3
