"""A tiny, fast stand-in for the pretrained encoders, for tests of the real engine parts (issue #45).

:class:`StandinEncoders` is an :class:`engine.features.encoders.Encoders` whose backbone, MiniLM and GloVe are a
few lines of NumPy instead of ONNX graphs: the real :class:`engine.workspace.Workspace` indexes, ranks, explains,
trains against and evaluates with it exactly as with the real ones (the same ``BackboneOutput`` and
``EncodedText`` they return), in milliseconds and without any prepared assets.

What it sees and understands is deliberately plain, so a test can know what a search must find:

- the *backbone* sees one coloured shape on a plain background (:func:`make_media_folder` draws them): its class
  is "<colour> <shape>" (the foreground's nearest :data:`COLOURS` entry; circle, square or triangle from how much
  of its bounding box it fills), its regions are the 7x7 cells the shape covers;
- the *text encoders* give every colour and shape word an axis of its own ("ball" is a circle, "box" a square),
  any other word a fixed pseudo-random direction; a sentence is the normalised sum of its content words. So
  "a red circle" is the class "red circle", and a made-up word is unknown (:data:`VOCABULARY`).

Tiny real trained models (PVSE with K heads and attention maps, PCME with sigma) over these features are built by
:func:`export_tiny_model` (freshly initialised, exported by the trainer's own exporter).
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from engine.features.backbone import BackboneOutput
from engine.features.encoders import Encoders
from engine.features.regional import content_words
from engine.features.text import EncodedText, glove_tokenize
from engine.progress import CancelToken, Progress

COLOURS = {"red": (220, 40, 40), "green": (40, 170, 70), "blue": (40, 80, 220), "yellow": (235, 200, 40),
           "purple": (140, 60, 180), "orange": (240, 130, 30)}
SHAPES = ("circle", "square", "triangle")
SYNONYMS = {"ball": "circle", "round": "circle", "box": "square", "block": "square"}
BACKGROUND = (245, 245, 240)
# The basic-level ranges of ImageNet's classes end at 397 (engine.features.regional): the stand-in's classes come
# after unused ones, so none is taken for a fish or a bird.
FIRST_CLASS = 400
CLASSES = [f"{c} {s}" for c in COLOURS for s in SHAPES] + ["plain background"]
AXES = [*COLOURS, *SHAPES, "background"]  # the words with an axis of their own
LOCAL_DIM = 16
VOCABULARY = frozenset(AXES) | frozenset(SYNONYMS) | frozenset(
    "a an the of on in at and with is photo picture image shape shapes thing things something moving moves "
    "bouncing sliding sleeping asleep windowsill table white black dog cat beach holiday sunset tree car "
    "colour color bright dark small large big little one two three red green blue night day person people "
    "anything everything nothing corner left right top bottom middle".split())


class StandinBackbone:
    """:class:`engine.features.backbone.Backbone`'s call on a plain picture of one coloured shape (module docstring)."""

    id = "standin-colour-shape"
    image_size = 56

    def __init__(self, encoders: StandinEncoders | None = None) -> None:
        self._encoders = encoders  # its ``delay_s``: a slow machine, seconds per picture

    def __call__(self, images: np.ndarray) -> BackboneOutput:
        if self._encoders is not None and self._encoders.delay_s:
            time.sleep(self._encoders.delay_s * len(images))
        parts = [_see(image) for image in images]
        return BackboneOutput(*(np.stack([p[i] for p in parts]) for i in range(7)))


def _see(image: np.ndarray):
    pixels = image.astype(np.float32)
    foreground = np.abs(pixels - pixels[0, 0]).sum(axis=-1) > 60
    s = image.shape[0] // 7
    cells = foreground[: 7 * s, : 7 * s].reshape(7, s, 7, s).mean(axis=(1, 3)).ravel()  # (49,) share covered
    n = FIRST_CLASS + len(CLASSES)
    logits = np.full(n, -8.0, np.float32)
    logits[FIRST_CLASS:] = 0.0
    colour = shape = None
    if foreground.any():
        mean = pixels[foreground].mean(axis=0)
        colour = min(range(len(COLOURS)), key=lambda i: float(np.linalg.norm(mean - list(COLOURS.values())[i])))
        rows, cols = np.nonzero(foreground)
        fill = foreground.sum() / ((np.ptp(rows) + 1) * (np.ptp(cols) + 1))
        shape = 1 if fill > 0.9 else 0 if fill > 0.65 else 2
        for c in range(len(COLOURS)):
            for k in range(len(SHAPES)):
                logits[FIRST_CLASS + 3 * c + k] = 4.0 * (c == colour) + 3.0 * (k == shape)
    else:
        logits[-1] = 6.0
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    shape_probs = np.where(np.arange(n) == n - 1, 0.0, probs) / max(float(probs[:-1].sum()), 1e-9)
    regions = (cells[:, None] * shape_probs + (1 - cells[:, None]) * (np.arange(n) == n - 1)  # (49, n) each region's
               + 1e-6 * (np.arange(n) >= FIRST_CLASS))  # never an unused class among a region's best
    region_max = regions.max(axis=0).astype(np.float32)
    region_best = regions.argmax(axis=0).astype(np.int64)
    top_ids = np.argsort(-regions, axis=1, kind="stable")[:, :3].astype(np.int64)
    top_probs = np.take_along_axis(regions, top_ids, axis=1).astype(np.float32)
    local = np.zeros((49, LOCAL_DIM), np.float32)
    if colour is not None:
        local[:, colour] = cells
        local[:, len(COLOURS) + shape] = cells
    local[:, 9] = 1 - cells
    local[:, 10:13] = pixels[: 7 * s, : 7 * s].reshape(7, s, 7, s, 3).mean(axis=(1, 3)).reshape(49, 3) / 255.0
    return local, local.mean(axis=0), probs, region_max, region_best, top_ids, top_probs


def word_vector(word: str, dim: int = 384) -> np.ndarray:
    """A word's unit vector: an axis of its own for colours and shapes (and their synonyms), else a fixed
    pseudo-random direction in the other dimensions."""
    word = SYNONYMS.get(word, word)
    out = np.zeros(dim, np.float32)
    if word in AXES:
        out[AXES.index(word)] = 1.0
        return out
    rng = np.random.default_rng(zlib.crc32(word.encode()))
    out[len(AXES):] = rng.standard_normal(dim - len(AXES))
    return out / np.linalg.norm(out)


class StandinText:
    """MiniLM's (or, with ``dim=50`` and ``sentences=False``, GloVe's) ``encode`` and ``knows`` (module docstring)."""

    def __init__(self, name: str = "minilm", dim: int = 384, sentences: bool = True) -> None:
        self.name = self.id = name
        self.dim, self._sentences = dim, sentences

    def knows(self, word: str) -> bool:
        return word.lower() in VOCABULARY

    def encode(self, texts: list[str], batch_size: int = 64) -> EncodedText:
        tokens = [glove_tokenize(t)[:64] or ["."] for t in texts]
        length = max((len(t) for t in tokens), default=0)
        vectors = np.zeros((len(texts), length, self.dim), np.float32)
        mask = np.zeros((len(texts), length), bool)
        sentence = np.zeros((len(texts), self.dim), np.float32)
        for row, (text, words) in enumerate(zip(texts, tokens, strict=True)):
            mask[row, : len(words)] = True
            for i, w in enumerate(words):
                if self._sentences or self.knows(w):  # GloVe: an unknown word is zeros
                    vectors[row, i] = word_vector(w, self.dim)
            total = sum((word_vector(w, self.dim) for w in content_words(text)), np.zeros(self.dim, np.float32))
            if not np.any(total):
                total = word_vector(text.strip().lower() or ".", self.dim)
            sentence[row] = total / np.linalg.norm(total)
        return EncodedText(tokens, vectors, mask, sentence if self._sentences else None)


class StandinEncoders(Encoders):
    """The pretrained encoders' stand-in (module docstring); ``ready`` is False until ``prepare`` has run when
    built with ``prepared=False`` (a fresh home's missing assets); ``delay_s``: a slow machine's backbone."""

    def __init__(self, prepared: bool = True, delay_s: float = 0.0) -> None:
        super().__init__(None)
        self.prepared, self.delay_s = prepared, delay_s
        self.gate = None  # a threading.Event prepare waits for (a fresh home's assets being prepared)

    def prepare(self, cancel: CancelToken | None = None, also_ready=lambda: True) -> Iterator[Progress]:
        if self.prepared:
            return
        from engine.features.assets import PREPARE_MESSAGE

        yield Progress(0, 100, PREPARE_MESSAGE)
        if self.gate is not None:
            time.sleep(0.3)  # the GUI shows at most a few progress records a second
        yield Progress(40, 100, PREPARE_MESSAGE)
        if self.gate is not None:
            self.gate.wait(30)
        self.prepared = True
        yield Progress(100, 100, PREPARE_MESSAGE)

    def ready(self) -> bool:
        return self.prepared

    def _require(self) -> None:
        if not self.prepared:
            from engine.features.backbone import AssetsMissing

            raise AssetsMissing("pretrained assets are missing in the stand-in: run `polyseek prepare` first")

    @property
    def backbone(self):
        self._require()
        return self._get("backbone", lambda: StandinBackbone(self))

    @property
    def class_names(self) -> list[str]:
        return [f"unused {i}" for i in range(FIRST_CLASS)] + CLASSES

    @property
    def minilm(self):
        self._require()
        return self._get("minilm", StandinText)

    @property
    def glove(self):
        self._require()
        return self._get("glove", lambda: StandinText("glove", 50, sentences=False))

    @property
    def class_embeddings(self) -> np.ndarray:
        return self._get("class_embeddings", lambda: self.minilm.encode(self.class_names).sentence)

    @property
    def word_embeddings(self):
        from engine.features.wordtable import WordEmbeddings

        return self._get("word_embeddings", lambda: WordEmbeddings(lambda w: self.minilm.encode(w).sentence, None))

    def extractor(self):
        from engine.features.extract import FeatureExtractor

        return FeatureExtractor(self.backbone, self.class_names, decode_threads=1)


# -- tiny media ---------------------------------------------------------------------------------------------------


def draw_shape(colour: tuple[int, int, int], shape: str, size: int = 96, shift: int = 0) -> Image.Image:
    """One coloured shape on the plain background."""
    img = Image.new("RGB", (size, size), BACKGROUND)
    draw = ImageDraw.Draw(img)
    box = (16 + shift, 16, size - 16 + shift, size - 16)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        draw.polygon([(size // 2 + shift, 12), (size - 12 + shift, size - 12), (12 + shift, size - 12)], fill=colour)
    return img


def make_media_folder(folder: Path, n_images: int = 8, n_gifs: int = 2, video: bool = True,
                      broken: bool = True) -> Path:
    """Stills ``<colour>_<shape>_<i>.png``, GIFs of a bouncing ball, an MP4 of a sliding blue square (then a red
    circle) and a file that is not the JPEG it says it is."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    names = list(COLOURS)
    for i in range(n_images):
        colour, shape = names[i % len(names)], SHAPES[i % len(SHAPES)]
        draw_shape(COLOURS[colour], shape).save(folder / f"{colour}_{shape}_{i}.png")
    for i in range(n_gifs):
        colour = names[(i + 2) % len(names)]
        frames = [draw_shape(COLOURS[colour], "circle", shift=s) for s in range(-12, 13, 4)]
        frames[0].save(folder / f"bouncing_{colour}_ball_{i}.gif", save_all=True, append_images=frames[1:],
                       duration=80, loop=0)
    if video:
        writer = cv2.VideoWriter(str(folder / "sliding_blue_square.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 8.0,
                                 (96, 96))
        for s in range(-12, 13, 2):  # two shots: the blue square slides in, then a red circle stands there
            frame = draw_shape(COLOURS["blue"], "square", shift=s) if s < 2 else draw_shape(COLOURS["red"], "circle")
            writer.write(np.asarray(frame)[:, :, ::-1].copy())
        writer.release()
    if broken:
        (folder / "broken_photo.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    return folder


# -- tiny real models ---------------------------------------------------------------------------------------------


def export_tiny_model(method: str, dest: Path, metrics: dict | None = None, **overrides) -> Path:
    """A real export (the trainer's exporter) of a freshly initialised ``method`` model over the stand-in's
    features and GloVe, with ``metrics.json`` as a finished run leaves it."""
    import torch

    from trainer.methods import build_config, build_model, export_model

    torch.manual_seed(0)
    config = build_config(method, {"image_dim": LOCAL_DIM, "image_regions": 49, "text_encoder": "glove",
                                   "text_word_dim": 50, **overrides}, preset="test")
    # float graphs: tests pin an untrained model's arbitrary but fixed choices (a clip's best frame), which int8
    # rounding of near-ties would move; the int8 export is tested on its own (test_methods_export, test_trained_search)
    export_model(build_model(config).eval(), dest / "onnx", int8=False)
    manifest = dest / "onnx" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["feature_backbone"] = StandinBackbone.id
    manifest.write_text(json.dumps(data, indent=2))
    (dest / "config.json").write_text(json.dumps({"method": method}))
    (dest / "metrics.json").write_text(json.dumps(metrics or {}))
    return dest
