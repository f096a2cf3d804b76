"""Synthetic caption folders for sanity checks and smoke tests (Pillow only, deterministic given a seed).

- :func:`make_motion_gif_folder`: animated GIFs of two events in sequence ("a red square moves left,
  then a blue circle appears"). Every clip has an *order twin* with the same two events swapped. The
  first half of the frames shows only the first event's shape and the second half only the second's,
  so a clip and its twin hold exactly the same frames in a different order: a model that ignores frame
  order (mean pooling, shuffled frames) cannot tell their captions apart, one that reads order can.
  "moves left/right", "moves up/down" and "appears/disappears" are time reversals of each other, so they
  too can only be told apart through order.
- :func:`make_toy_photo_folder`: still images of one coloured shape ("a large green triangle on a white
  background") for trainer smoke tests.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw

from engine.library.captionfolder import CaptionFolder, CaptionFolderError, write_caption_folder

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220),
    "yellow": (235, 200, 30), "purple": (140, 60, 180), "orange": (240, 130, 20),
}
SHAPES = ("square", "circle", "triangle", "diamond")
ACTIONS = ("moves left", "moves right", "moves up", "moves down", "appears", "disappears")
BACKGROUNDS: dict[str, tuple[int, int, int]] = {"white": (255, 255, 255), "black": (0, 0, 0),
                                                 "gray": (128, 128, 128)}
GIF_BACKGROUND = (0, 0, 0)
FRAME_MS = 120


class SyntheticDataError(ValueError):
    """A synthetic-data setting cannot produce valid data."""


@dataclass(frozen=True, slots=True)
class Event:
    """One shape doing one thing during half of a clip."""

    colour: str
    shape: str
    action: str

    @property
    def phrase(self) -> str:
        return f"{article(self.colour)} {self.colour} {self.shape} {self.action}"


def article(word: str) -> str:
    """The indefinite article before ``word``."""
    return "an" if word[:1] in "aeiou" else "a"


def motion_captions(first: Event, second: Event) -> list[str]:
    """Two captions for "first, then second" that only differ from the twin's by word order."""
    return [f"{first.phrase}, then {second.phrase}", f"{second.phrase} after {first.phrase}"]


# ---------------------------------------------------------------- drawing


def draw_shape(draw: ImageDraw.ImageDraw, shape: str, cx: float, cy: float, r: float,
               fill: int | tuple[int, int, int]) -> None:
    """Draw ``shape`` centred at (cx, cy) with half-size ``r`` (no anti-aliasing, so colours stay exact)."""
    if shape == "square":
        draw.rectangle([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)], fill=fill)
    else:
        raise SyntheticDataError(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")


def _gif_palette() -> list[int]:
    """Index 0 is the background, then one entry per colour in COLOURS order."""
    flat = [*GIF_BACKGROUND]
    for rgb in COLOURS.values():
        flat.extend(rgb)
    return flat + [0] * (768 - len(flat))


def _event_frames(event: Event, n: int, size: int, rng: random.Random) -> list[Image.Image]:
    """The ``n`` frames of one event: the shape alone on the background."""
    r = size * rng.uniform(0.15, 0.2)
    lo, hi = r + 2, size - r - 3
    cx, cy = rng.uniform(lo, hi), rng.uniform(lo, hi)
    fill = 1 + list(COLOURS).index(event.colour)
    frames = []
    for t in range(n):
        step = t / (n - 1)
        x, y, scale = cx, cy, 1.0
        if event.action == "moves left":
            x = hi + (lo - hi) * step
        elif event.action == "moves right":
            x = lo + (hi - lo) * step
        elif event.action == "moves up":
            y = hi + (lo - hi) * step
        elif event.action == "moves down":
            y = lo + (hi - lo) * step
        else:  # appears / disappears: grows from or shrinks to a small shape, never nothing
            scale = (t + 1) / n if event.action == "appears" else (n - t) / n
        frame = Image.new("P", (size, size), 0)
        frame.putpalette(_gif_palette())
        draw_shape(ImageDraw.Draw(frame), event.shape, x, y, r * scale, fill)
        frames.append(frame)
    return frames


def _save_gif(path: Path, frames: Sequence[Image.Image]) -> None:
    """Write an animated GIF; consecutive identical frames would be merged by Pillow, so refuse them."""
    for a, b in zip(frames, frames[1:], strict=False):
        if a.tobytes() == b.tobytes():
            raise SyntheticDataError(f"{path.name}: two consecutive frames are identical; "
                                     "use a larger size or fewer frames")
    _save_atomic(frames[0], path, format="GIF", save_all=True, append_images=list(frames[1:]),
                 duration=FRAME_MS, loop=0, optimize=False, disposal=1)


def _save_atomic(image: Image.Image, path: Path, **options: object) -> None:
    """Save through a temporary name so an interrupted run never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    image.save(tmp, **options)
    os.replace(tmp, path)


# ---------------------------------------------------------------- folders


def _prepare(dest: str | os.PathLike[str], n_items: int) -> Path:
    dest = Path(dest)
    if n_items < 1:
        raise SyntheticDataError(f"n_items must be at least 1, got {n_items}")
    if dest.exists() and any(dest.iterdir()):
        raise CaptionFolderError(f"{dest} is not empty; synthetic folders are written into a new folder")
    (dest / "media").mkdir(parents=True)
    return dest


def _splits(n_groups: int, dev_fraction: float, rng: random.Random) -> list[str]:
    """``"train"``/``"dev"`` per group, or an empty list (no splits.tsv) when ``dev_fraction`` is 0."""
    if not 0.0 <= dev_fraction < 1.0:
        raise SyntheticDataError(f"dev_fraction {dev_fraction} is not within [0, 1)")
    if dev_fraction == 0.0:
        return []
    dev = set(rng.sample(range(n_groups), max(1, int(dev_fraction * n_groups + 0.5))))
    return ["dev" if g in dev else "train" for g in range(n_groups)]


def _random_event_pair(rng: random.Random, used: set[tuple[Event, Event]]) -> tuple[Event, Event]:
    """Two events with different shapes or colours, an ordered pair not used before (when possible)."""
    for _ in range(1000):
        first = Event(rng.choice(list(COLOURS)), rng.choice(SHAPES), rng.choice(ACTIONS))
        second = Event(rng.choice(list(COLOURS)), rng.choice(SHAPES), rng.choice(ACTIONS))
        distinct = (first.colour, first.shape) != (second.colour, second.shape)
        if distinct and (first, second) not in used and (second, first) not in used:
            used.add((first, second))
            return first, second
    raise SyntheticDataError("ran out of distinct event pairs; ask for fewer items")


def make_motion_gif_folder(
    dest: str | os.PathLike[str],
    n_items: int,
    seed: int,
    n_frames: int = 8,
    size: int = 64,
    dev_fraction: float = 0.0,
) -> CaptionFolder:
    """Write a caption folder of ``n_items`` two-event GIFs in order-twin pairs and return it.

    Clip ``motion_PPPP_a.gif`` shows event 1 then event 2, ``motion_PPPP_b.gif`` the same two swapped
    (an odd ``n_items`` leaves the last clip without twin). Each clip has two captions (see
    :func:`motion_captions`). ``dev_fraction > 0`` writes splits.tsv with twins kept in the same split.
    """
    if n_frames < 4 or n_frames % 2:
        raise SyntheticDataError(f"n_frames must be even and at least 4, got {n_frames}")
    if size < 32:
        raise SyntheticDataError(f"size must be at least 32 pixels, got {size}")
    dest = _prepare(dest, n_items)
    rng = random.Random(seed)
    n_pairs = (n_items + 1) // 2
    split_of_pair = _splits(n_pairs, dev_fraction, rng)
    paths, captions, splits, used = [], [], [], set()
    for pair in range(n_pairs):
        first, second = _random_event_pair(rng, used)
        frames = {e: _event_frames(e, n_frames // 2, size, rng) for e in (first, second)}
        orders = [(first, second), (second, first)][: n_items - 2 * pair]  # an odd count: last has no twin
        for twin, (a, b) in zip("ab", orders, strict=False):
            path = dest / "media" / f"motion_{pair:04d}_{twin}.gif"
            _save_gif(path, frames[a] + frames[b])
            captions.extend((len(paths), text) for text in motion_captions(a, b))
            paths.append(path)
            splits.extend(split_of_pair[pair:pair + 1])
    return write_caption_folder(dest, paths, captions, splits or None, copy_media=False)


def _toy_photo(size: int, colour: str, shape: str, large: bool, background: str,
               rng: random.Random) -> Image.Image:
    r = size * (rng.uniform(0.3, 0.38) if large else rng.uniform(0.1, 0.15))
    cx, cy = rng.uniform(r + 1, size - r - 2), rng.uniform(r + 1, size - r - 2)
    image = Image.new("RGB", (size, size), BACKGROUNDS[background])
    draw_shape(ImageDraw.Draw(image), shape, cx, cy, r, COLOURS[colour])
    return image


def make_toy_photo_folder(
    dest: str | os.PathLike[str],
    n_items: int,
    seed: int,
    size: int = 64,
    dev_fraction: float = 0.0,
) -> CaptionFolder:
    """Write a caption folder of ``n_items`` PNG photos of one coloured shape each and return it.

    Captions: "a large green triangle on a white background" and "a white picture with a big green
    triangle" (small/little for small shapes). ``dev_fraction > 0`` writes splits.tsv (train/dev).
    """
    if size < 16:
        raise SyntheticDataError(f"size must be at least 16 pixels, got {size}")
    dest = _prepare(dest, n_items)
    rng = random.Random(seed)
    splits = _splits(n_items, dev_fraction, rng)
    # every attribute combination once (shuffled) before any repeats, so small folders have no duplicates
    combos = list(itertools.product(COLOURS, SHAPES, (True, False), BACKGROUNDS))
    rng.shuffle(combos)
    paths, captions = [], []
    for i in range(n_items):
        colour, shape, large, background = combos[i % len(combos)]
        path = dest / "media" / f"toy_{i:04d}.png"
        _save_atomic(_toy_photo(size, colour, shape, large, background, rng), path, format="PNG")
        size_word, size_synonym = ("large", "big") if large else ("small", "little")
        captions += [(i, f"a {size_word} {colour} {shape} on {article(background)} {background} background"),
                     (i, f"a {background} picture with a {size_synonym} {colour} {shape}")]
        paths.append(path)
    return write_caption_folder(dest, paths, captions, splits or None, copy_media=False)
