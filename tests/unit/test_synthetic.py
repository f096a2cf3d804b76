"""Synthetic caption folders: order twins, captions that match the pixels, determinism."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image, ImageSequence

from engine.library.captionfolder import CaptionFolderError, load_caption_folder
from tests.synthetic import (
    BACKGROUNDS,
    COLOURS,
    SyntheticDataError,
    make_motion_gif_folder,
    make_toy_photo_folder,
)

EVENT = re.compile(r"an? (\w+) (\w+) (moves left|moves right|moves up|moves down|appears|disappears)")


def frames_of(path) -> list[np.ndarray]:
    with Image.open(path) as gif:
        return [np.asarray(frame.convert("RGB")) for frame in ImageSequence.Iterator(gif)]


def colour_trace(frames: list[np.ndarray], colour: str) -> list[tuple[float, float, int]]:
    """(mean x, mean y, pixel count) of ``colour`` in each frame."""
    out = []
    for frame in frames:
        ys, xs = np.nonzero((frame == COLOURS[colour]).all(axis=-1))
        out.append((xs.mean() if xs.size else np.nan, ys.mean() if ys.size else np.nan, xs.size))
    return out


def check_event(trace: list[tuple[float, float, int]], action: str) -> None:
    xs, ys, counts = (np.array(v) for v in zip(*trace, strict=True))
    assert (counts > 0).all(), "the shape is visible in every frame of its event"
    expected = {"moves left": (xs, -1), "moves right": (xs, 1), "moves up": (ys, -1), "moves down": (ys, 1),
                "appears": (counts, 1), "disappears": (counts, -1)}[action]
    values, sign = expected
    assert (np.sign(np.diff(values)) == sign).all(), f"{action}: {values}"


def test_motion_twins_share_frames_in_another_order(tmp_path):
    folder = make_motion_gif_folder(tmp_path / "gifs", 6, seed=4)
    assert [item.file for item in folder.items] == [f"motion_{p:04d}_{t}.gif" for p in range(3) for t in "ab"]
    assert len(folder.captions) == 12 and folder.splits() == ["all"]
    for pair in range(3):
        a, b = frames_of(folder.items[2 * pair].path), frames_of(folder.items[2 * pair + 1].path)
        assert len(a) == len(b) == 8
        assert sorted(f.tobytes() for f in a) == sorted(f.tobytes() for f in b)
        assert [f.tobytes() for f in a] != [f.tobytes() for f in b]
        first_a, first_b = folder.captions_of(2 * pair)[0], folder.captions_of(2 * pair + 1)[0]
        assert first_a != first_b and sorted(first_a.split(", then ")) == sorted(first_b.split(", then "))


def test_motion_captions_describe_the_pixels(tmp_path):
    folder = make_motion_gif_folder(tmp_path / "gifs", 24, seed=0, n_frames=10)
    for index, item in enumerate(folder.items):
        frames = frames_of(item.path)
        then, after = folder.captions_of(index)
        events = EVENT.findall(then)
        assert len(events) == 2 and after == f"{then.split(', then ')[1]} after {then.split(', then ')[0]}"
        for half, (colour, _shape, action) in zip((frames[:5], frames[5:]), events, strict=True):
            check_event(colour_trace(half, colour), action)


def test_motion_folder_is_deterministic_and_splits_keep_twins_together(tmp_path):
    one = make_motion_gif_folder(tmp_path / "one", 7, seed=9, dev_fraction=0.5)
    two = make_motion_gif_folder(tmp_path / "two", 7, seed=9, dev_fraction=0.5)
    other = make_motion_gif_folder(tmp_path / "other", 7, seed=10)
    assert one.captions == two.captions != other.captions
    assert all(a.path.read_bytes() == b.path.read_bytes() for a, b in zip(one.items, two.items, strict=True))
    assert len(one.items) == 7 and one.items[-1].file == "motion_0003_a.gif"
    assert one.splits() == ["dev", "train"]
    assert len({item.file[:11] for item in one.split("dev").items}) == 2  # two of the four pairs
    for pair in range(3):
        assert one.items[2 * pair].split == one.items[2 * pair + 1].split
    assert load_caption_folder(tmp_path / "one").captions == one.captions


def test_motion_settings_are_validated(tmp_path):
    with pytest.raises(SyntheticDataError, match="n_frames"):
        make_motion_gif_folder(tmp_path / "a", 2, seed=0, n_frames=7)
    with pytest.raises(SyntheticDataError, match="size"):
        make_motion_gif_folder(tmp_path / "b", 2, seed=0, size=16)
    with pytest.raises(SyntheticDataError, match="n_items"):
        make_motion_gif_folder(tmp_path / "c", 0, seed=0)
    make_toy_photo_folder(tmp_path / "d", 1, seed=0)
    with pytest.raises(CaptionFolderError, match="not empty"):
        make_motion_gif_folder(tmp_path / "d", 2, seed=0)


def test_toy_photos_match_their_captions(tmp_path):
    folder = make_toy_photo_folder(tmp_path / "toy", 30, seed=2, dev_fraction=0.2)
    assert len(folder.items) == 30 and len(folder.captions) == 60
    assert len(folder.split("dev").items) == 6
    pattern = re.compile(r"a (large|small) (\w+) (\w+) on an? (\w+) background")
    descriptions = set()
    for index, item in enumerate(folder.items):
        first, second = folder.captions_of(index)
        size_word, colour, shape, background = pattern.fullmatch(first).groups()
        assert second.startswith(f"a {background} picture with a ") and second.endswith(f"{colour} {shape}")
        pixels = np.asarray(Image.open(item.path).convert("RGB"))
        assert tuple(pixels[0, 0]) == BACKGROUNDS[background]
        shape_pixels = (pixels == COLOURS[colour]).all(axis=-1).sum()
        # a small square covers at most (2 x 0.15)^2 = 9% of the image, a large diamond at least 2 x 0.3^2
        threshold = 0.13 * pixels.shape[0] ** 2
        assert shape_pixels > threshold if size_word == "large" else 0 < shape_pixels < threshold
        descriptions.add(first)
    assert len(descriptions) == 30  # no repeated attribute combination in a small folder
    again = make_toy_photo_folder(tmp_path / "again", 30, seed=2, dev_fraction=0.2)
    assert again.captions == folder.captions
    assert again.items[5].path.read_bytes() == folder.items[5].path.read_bytes()
