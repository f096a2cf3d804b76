"""Regional semantics (A3VSE §3.2): what every item shows, before any model is trained.

Before any model is trained, Polyseek describes every item by its *regional semantics*: for each of the 49
regions of the 7x7 feature grid, the ImageNet classifier's most confident class, with an attribute — the colour
name of that region's pixels ("black dog", "green lawn"). The phrases, sorted by confidence, joined, form the
item's pseudo caption (stored as a pseudo pair, later the A3VSE trainer's un-annotated captions).

The zero-shot ranking built on them is :mod:`engine.search.zeroshot`.
"""

from __future__ import annotations

import colorsys
import re
from dataclasses import dataclass

import numpy as np

COLOURS = ("black", "white", "gray", "red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
TOP_CLASSES = 32  # classes kept per item (the rest of the distribution is ~0)
PHRASES = 6  # phrases in a pseudo caption
IMAGE_WEIGHT = 0.5  # share of the whole-image softmax in the item's class distribution

# Basic-level names for the fine-grained ImageNet ranges (WordNet hypernyms), so "a dog" finds a Labrador.
_BASIC_RANGES = (
    (0, 6, "fish"), (7, 24, "bird"), (25, 32, "frog"), (33, 37, "turtle"), (38, 48, "lizard"),
    (49, 50, "crocodile"), (52, 68, "snake"), (69, 79, "spider"), (80, 100, "bird"), (101, 101, "elephant"),
    (127, 146, "bird"), (151, 268, "dog"), (269, 272, "wolf"), (275, 276, "dog"), (277, 280, "fox"),
    (281, 285, "cat"), (286, 293, "big cat"), (294, 297, "bear"), (300, 319, "insect"), (320, 326, "butterfly"),
    (330, 332, "rabbit"), (333, 338, "rodent"), (339, 339, "horse"), (345, 347, "cow"), (348, 353, "sheep"),
    (354, 355, "camel"), (362, 384, "monkey"), (385, 386, "elephant"), (387, 388, "panda"), (389, 397, "fish"),
)
_STOP = frozenset(
    "a an the of on in at to and with is are be his her their its it they he she this that there these those "
    "one two three four five some while for from into by near next over under up down out through as".split()
)
_WORDS = re.compile(r"[a-z]+")


def basic_name(class_id: int) -> str | None:
    """The basic-level noun of ImageNet class ``class_id`` (as in :func:`basic_names`), or None."""
    for first, last, noun in reversed(_BASIC_RANGES):  # a later range wins where two overlap
        if first <= class_id <= last:
            return noun
    return None


def basic_names(names: list[str]) -> list[str | None]:
    """The basic-level noun of each ImageNet class, or None where the class name already is one."""
    return [basic_name(i) for i in range(len(names))]


def class_texts(names: list[str]) -> list[str]:
    """The text each class is matched by: "dog, Labrador Retriever", or the plain name."""
    return [f"{b}, {n}" if b else n for n, b in zip(names, basic_names(names), strict=True)]


def colour_name(rgb: np.ndarray) -> str:
    """A basic colour term for one RGB colour (0..255)."""
    r, g, b = (float(x) / 255.0 for x in rgb[:3])
    hue, sat, val = colorsys.rgb_to_hsv(r, g, b)
    if val < 0.22:
        return "black"
    if sat < 0.18:
        return "white" if val > 0.75 else "gray"
    hue *= 360.0
    if hue < 15 or hue >= 345:
        return "red" if val > 0.45 else "brown"
    if hue < 40:
        return "orange" if val > 0.7 and sat > 0.5 else "brown"
    for limit, name in ((70, "yellow"), (170, "green"), (255, "blue"), (290, "purple")):
        if hue < limit:
            return name
    return "pink"


def region_colour(image: np.ndarray, cell: int, grid: int = 7) -> str:
    """The colour name of the median pixel of one cell (row-major index) of a ``grid`` x ``grid`` split: every
    4th pixel of the cell when the image divides evenly (the backbone's 224 x 224 input; plenty for a median),
    all of them otherwise. The indexer names only the few cells a pseudo caption uses."""
    h, w = image.shape[:2]
    row, col = divmod(cell, grid)
    if h % grid == 0 and w % grid == 0:
        ch, cw = h // grid, w // grid
        pixels = image[row * ch:(row + 1) * ch:2, col * cw:(col + 1) * cw:2]
    else:
        ys = np.linspace(0, h, grid + 1).astype(int)
        xs = np.linspace(0, w, grid + 1).astype(int)
        pixels = image[ys[row]:ys[row + 1], xs[col]:xs[col + 1]]
    return colour_name(np.median(pixels.reshape(-1, 3), axis=0))


def region_colours(images: np.ndarray, cells: list[tuple[int, int]], grid: int = 7) -> list[str]:
    """:func:`region_colour` of several ``(frame, cell)`` of (F, S, S, 3) frames, with one median over all of
    them when the frames divide evenly (a median per cell costs more in NumPy's overhead than in arithmetic)."""
    h, w = images.shape[1:3]
    if not cells or h % grid or w % grid:
        return [region_colour(images[f], cell, grid) for f, cell in cells]
    ch, cw = h // grid, w // grid
    blocks = images.reshape(len(images), grid, ch, grid, cw, 3)
    pixels = np.stack([blocks[f, cell // grid, ::2, cell % grid, ::2] for f, cell in cells])
    medians = np.median(pixels.reshape(len(cells), -1, 3), axis=1)
    return [colour_name(m) for m in medians]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x - x.max(axis=axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


@dataclass(frozen=True, slots=True)
class Semantics:
    """An item's regional semantics: the pseudo caption and its sparse class distribution."""

    caption: str
    class_ids: np.ndarray  # (TOP_CLASSES,) int16, most confident first
    class_probs: np.ndarray  # (TOP_CLASSES,) float32, renormalised to sum 1


def regional_semantics(probs: np.ndarray, region_max: np.ndarray, region_best: np.ndarray, images: np.ndarray,
                       names: list[str]) -> Semantics:
    """Regional semantics of one item from its backbone outputs over F frames (F = 1 for a photo).

    ``probs`` (F, C) is the whole-frame softmax, ``region_max`` (F, C) each class's best region probability and
    ``region_best`` (F, C) that region's index; ``images`` are the F decoded frames (F, S, S, 3) the colours are
    read from. Over frames, a class keeps its best region.
    """
    image_probs = probs.astype(np.float32).mean(axis=0)
    best_frame = region_max.argmax(axis=0)  # (C,)
    best_max = region_max.max(axis=0).astype(np.float32)
    dist = IMAGE_WEIGHT * image_probs + (1 - IMAGE_WEIGHT) * best_max / best_max.sum()
    top = np.argsort(-dist)[:TOP_CLASSES]
    top_probs = dist[top] / dist[top].sum()
    # only the cells the caption names (a few of 49 per frame); those of its likely phrases in one pass
    cells = [(int(best_frame[c]), int(region_best[best_frame[c], c])) for c in top[:PHRASES]]
    colours = dict(zip(cells, region_colours(images, cells), strict=True))
    phrases: list[str] = []
    for c in top:
        if len(phrases) == PHRASES:
            break
        frame = int(best_frame[c])
        where = (frame, int(region_best[frame, c]))
        if where not in colours:
            colours[where] = region_colour(images[frame], where[1])
        basic = basic_name(int(c))
        noun = f"{basic} ({names[c]})" if basic else names[c]
        phrase = f"{colours[where]} {noun}"
        if phrase not in phrases:
            phrases.append(phrase)
    return Semantics(", ".join(phrases), top.astype(np.int16), top_probs.astype(np.float32))


def content_words(text: str) -> list[str]:
    """The words of a query that can name something visible (stop words and 1-2 letter words dropped)."""
    return [w for w in _WORDS.findall(text.lower()) if w not in _STOP and len(w) > 2]


def pseudo_caption_from_record(record, names: list[str]) -> str:
    """A pseudo caption rebuilt from stored top classes, for content indexed before under another path.

    The colour attributes need the pixels, which the feature store does not keep, so this caption names the
    classes only; re-indexing the file (when it changes) restores the full regional semantics.
    """
    ids = record.image_top_ids if record.image_top_ids is not None else np.zeros(0, np.int16)
    basic = basic_names(names)
    phrases: list[str] = []
    for c in ids[:PHRASES]:
        phrase = f"{basic[c]} ({names[c]})" if basic[c] else names[c]
        if phrase not in phrases:
            phrases.append(phrase)
    return ", ".join(phrases)
