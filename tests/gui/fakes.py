"""An in-memory stand-in for ``engine.workspace.Workspace`` for GUI tests and screenshots.

It implements the same public API over a few media files it generates with Pillow (coloured shapes, animated
GIFs, one tiny "video" and one broken file). It really reads those files while indexing (so a broken one
really fails), scores deterministically (query words against the words of the file name and the captions),
and invents K=2 attention maps and Gaussian embeddings shaped like a real model's, so the widgets can be
driven without any model assets. Like the real service (issue #40), a text search's hits carry a calibrated
match probability and its word for every model, from the fake's own score through a real ``Calibration``
(:data:`FAKE_CALIBRATION`); a picture search's do not. ``FakeService(..., calibrated=False)`` is a library
without a calibration file: only the PCME model then gives a (its own) probability.

Annotation transfer (caption folder / COCO captions JSON), the library-annotations training set, evaluation
of a caption folder and "what to annotate next" are real too, with one crude stand-in for a model: an item's
colour (the mean of its non-background pixels) against the colour words of a caption.
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from engine.features.assets import PREPARE_MESSAGE
from engine.library.captionfolder import load_caption_folder, write_caption_folder
from engine.loop.suggest import SUGGEST_POLICIES  # the engine's own rules, never a copy that can drift
from engine.loop.trainingset import MARKER_FILE, training_warning
from engine.progress import CancelToken, Progress
from engine.search.calibration import Calibration, sigmoid
from engine.trainercontract.metrics import retrieval_report
from engine.types import CaptionSource, CaptureInfo, Explanation, MediaDetails, MediaKind, ModelInfo, SearchHit

K = 2
GRID = (7, 7)
VIDEO_SUFFIXES = {".mp4", ".avi", ".mkv", ".mov", ".webm"}
MEDIA_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp"} | VIDEO_SUFFIXES

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 70),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 40),
    "purple": (140, 60, 180),
    "orange": (240, 130, 30),
}
SHAPES = ("circle", "square", "triangle")
# The fake's calibration: its score (the share of the query's words an item's name and captions hold) as the one
# feature; every word: ~98 % (strong), half of them: ~27 % (good), none: ~0.2 % (weak). Thresholds as shipped.
FAKE_CALIBRATION = Calibration({"lexical": 10.0}, -6.0, strong=0.5, good=0.024, fitted_on="the fake's word overlap")


class FakeServiceError(Exception):
    """A call named something the fake does not hold."""


@dataclass(frozen=True, slots=True)
class FakeMedia:
    """The fake's ``MediaRecord``."""

    id: int
    path: Path
    kind: MediaKind
    width: int
    height: int
    n_frames: int
    duration_s: float | None


@dataclass(frozen=True, slots=True)
class FakeCaption:
    """The fake's ``Caption``."""

    id: int
    media_id: int
    text: str
    source: CaptionSource


@dataclass(frozen=True, slots=True)
class FakeTrainingSet:
    """The fake's ``TrainingSet`` (what ``export_training_set`` wrote)."""

    folder: Path
    train_split: str = "train"
    val_split: str = "heldout"
    n_annotated_items: int = 0
    n_captions: int = 0
    n_heldout_items: int = 0
    n_unannotated: int = 0
    warning: str | None = None

    @property
    def n_train_annotated(self) -> int:
        return self.n_annotated_items - self.n_heldout_items


@dataclass
class _Entry:
    media: FakeMedia
    frames: list[Image.Image]
    words: set[str] = field(default_factory=set)


# ------------------------------------------------------------------------------------------ generation
def _draw_shape(colour: tuple[int, int, int], shape: str, size: int = 96, shift: int = 0) -> Image.Image:
    img = Image.new("RGB", (size, size), (245, 245, 240))
    draw = ImageDraw.Draw(img)
    box = (16 + shift, 16, size - 16 + shift, size - 16)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    else:
        corners = [(size // 2 + shift, 12), (size - 12 + shift, size - 12), (12 + shift, size - 12)]
        draw.polygon(corners, fill=colour)
    return img


def make_media_folder(folder: Path, n_images: int = 8, n_gifs: int = 2, video: bool = True,
                      broken: bool = True) -> Path:
    """Write a small media folder: stills ``<colour>_<shape>.png``, GIFs, a video and a broken file."""
    folder.mkdir(parents=True, exist_ok=True)
    colours = list(COLOURS)
    for i in range(n_images):
        colour, shape = colours[i % len(colours)], SHAPES[i % len(SHAPES)]
        _draw_shape(COLOURS[colour], shape).save(folder / f"{colour}_{shape}_{i}.png")
    for i in range(n_gifs):
        colour = colours[(i + 2) % len(colours)]
        frames = [_draw_shape(COLOURS[colour], "circle", shift=s) for s in range(-12, 13, 4)]
        frames[0].save(folder / f"bouncing_{colour}_ball_{i}.gif", save_all=True,
                       append_images=frames[1:], duration=80, loop=0)
    if video:
        frames = [_draw_shape(COLOURS["blue"], "square", shift=s) for s in range(-12, 13, 6)]
        # A real video container is not needed: the fake decodes its own frames; the suffix sets the kind.
        frames[0].save(folder / "sliding_blue_square.mp4", format="GIF", save_all=True,
                       append_images=frames[1:], duration=120)
    if broken:
        (folder / "broken_photo.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    return folder


def _words(path: Path) -> set[str]:
    return {w for w in path.stem.lower().replace("-", "_").split("_") if w and not w.isdigit()}


def _load(path: Path) -> tuple[MediaKind, list[Image.Image]]:
    """Decode ``path`` into frames; raises ``OSError``-family errors for broken files."""
    with Image.open(path) as img:
        n = getattr(img, "n_frames", 1)
        frames = []
        for i in range(n):
            img.seek(i)
            frames.append(img.convert("RGB").copy())
    if path.suffix.lower() in VIDEO_SUFFIXES:
        return MediaKind.VIDEO, frames
    return (MediaKind.ANIMATION if n > 1 else MediaKind.IMAGE), frames


def colour_feature(img: Image.Image) -> np.ndarray:
    """Mean RGB of the pixels that differ from the top-left (background) pixel; the whole mean if none do."""
    pixels = np.asarray(img.convert("RGB"), dtype=np.float32)
    background = pixels[0, 0]
    mask = np.abs(pixels - background).sum(axis=-1) > 30
    chosen = pixels[mask] if mask.any() else pixels.reshape(-1, 3)
    return chosen.mean(axis=0)


def caption_colour(text: str) -> np.ndarray | None:
    """Mean RGB of the colour words in ``text`` (None when it names no colour)."""
    named = [COLOURS[w] for w in text.lower().replace(",", " ").split() if w in COLOURS]
    return np.asarray(named, dtype=np.float32).mean(axis=0) if named else None


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _blob(grid: tuple[int, int], centre: tuple[float, float], width: float = 1.5) -> np.ndarray:
    rows, cols = np.mgrid[0: grid[0], 0: grid[1]]
    d2 = (rows - centre[0]) ** 2 + (cols - centre[1]) ** 2
    return (-d2 / (2 * width**2)).ravel()


# ----------------------------------------------------------------------------------------------- service
# The parts of engine.workspace.Workspace: each part's method -> the fake's flat method it forwards to
PART_METHODS = (
    {"roots": "roots", "add_root": "add_root", "root_summary": "root_summary", "remove_root": "remove_root",
     "index": "index_paths", "offline_roots": "offline_roots", "counts": "counts", "failures": "failures",
     "assets_ready": "assets_ready", "media": "media", "details": "media_details", "item": "item", "browse": "browse",
     "browse_count": "browse_count", "thumbnail": "thumbnail", "preview_frames": "preview_frames",
     "file_thumbnail": "file_thumbnail", "missing_summary": "missing_summary", "purge_missing": "purge_missing"},
    {"captions": "captions", "add_caption": "add_caption", "update_caption": "update_caption",
     "delete_caption": "delete_caption", "accept_pair": "accept_pair", "reject_pair": "reject_pair",
     "delete_pair": "delete_pair", "states": "annotation_states", "progress": "annotation_progress",
     "version": "annotation_version", "export": "export_annotations", "import_file": "import_annotations",
     "suggest": "suggest_annotations", "suggestion_policy": "suggestion_policy"},
    {"all": "_model_list", "activate": "set_active_model", "switch": "switch_model", "register": "register_model",
     "rename": "rename_model", "delete": "delete_model", "reindex": "reindex", "retrain": "retrain",
     "adopt": "_adopt",
     "training_set": "export_training_set", "evaluate": "evaluate_on",
     "compare": "compare_models"},
    {"text": "search_text", "example": "search_media", "explain": "explain", "carries_evidence":
     "query_carries_evidence", "warm": "warm_search"},
)


class _Part:
    """One part of the fake workspace: its methods are the fake's (:data:`PART_METHODS`); the models part is also
    callable, as the fake's own ``models()`` its tests call."""

    def __init__(self, fake: FakeService, names: dict[str, str]) -> None:
        self._fake, self._names = fake, names

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._names:
            raise AttributeError(name)
        return getattr(self._fake, self._names[name])

    def __call__(self) -> list[ModelInfo]:
        return self._fake._model_list()  # the fake's tests call ``service.models()``


class FakeService:
    """In-memory ``SearchService`` with the same public API (see the module docstring)."""

    def __init__(self, workdir: Path, index_delay_s: float = 0.0, name: str = "fake", calibrated: bool = True) -> None:
        self.name = name
        self.calibration = FAKE_CALIBRATION if calibrated else None  # None: as without resources/calibration.json
        self.workdir = Path(workdir)
        self.thumb_dir = self.workdir / "thumbs"
        self.thumb_dir.mkdir(parents=True, exist_ok=True)
        self.index_delay_s = index_delay_s
        self._lock = threading.RLock()
        self._roots: list[Path] = []
        self._entries: dict[int, _Entry] = {}
        self._by_path: dict[Path, int] = {}
        self._failures: dict[str, str] = {}
        self._pending: set[Path] = set()  # files found but not indexed yet (SearchService.counts()["pending"])
        self._captions: dict[int, FakeCaption] = {}
        self._pairs: dict[int, tuple[str, int, int]] = {}
        self._next_id = 1
        self._captures: dict[int, CaptureInfo] = {}  # EXIF date taken and camera, read when indexed (as the engine)
        self._active: str | None = None
        self._models = [("fake-pvse", "pvse", {"rsum": 301.5}), ("fake-pcme", "pcme", {"rsum": 288.0})]
        self.calls: list[tuple[str, tuple[Any, ...]]] = []  # what the GUI asked for, in order
        self._listeners: list[Any] = []
        self._version = 0  # moves with every change (the catalog's version)
        self._annotation_version = 0  # moves with every caption or pair change
        # a fresh home (issue #44): set an Event and the assets are missing until the next index run has waited
        # for it ("preparing" them); searches fail as the real ones do meanwhile
        self.prepare_gate: threading.Event | None = None
        self.warm_gate: threading.Event | None = None  # test helper: hold warm_search until set
        self.warm_ups: list[CancelToken | None] = []  # each warm_search's cancel token
        self._assets = True
        # the Workspace's four parts (engine.workspace), each forwarding to the fake's flat methods below
        self.library, self.annotations, self.models, self.search = (_Part(self, names) for names in PART_METHODS)

    @classmethod
    def open(cls, library: str = "default", assets: Path | None = None) -> FakeService:
        """Not meaningful for the fake: build it with a working folder instead."""
        raise FakeServiceError(f"FakeService cannot open library {library!r}; construct it with a folder")

    # --- what changed (SearchService.subscribe: a call after every committed change)
    def subscribe(self, listener: Any) -> Any:
        self._listeners.append(listener)

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
        return stop

    def _changed(self, annotations: bool = False) -> None:
        with self._lock:
            self._version += 1
            self._annotation_version += int(annotations)
        for listener in list(self._listeners):
            listener()

    def version(self) -> int:
        return self._version

    def annotation_version(self) -> int:
        return self._annotation_version

    def file_thumbnail(self, path: Path, size: int = 256) -> Path:
        """A thumbnail of any media file (the example of a search by example)."""
        _, frames = _load(Path(path))
        return self._save(frames[0], size, f"file-{abs(hash(str(path)))}_{size}.jpg")

    def _id(self) -> int:
        with self._lock:
            self._next_id += 1
            return self._next_id - 1

    def _entry(self, media_id: int) -> _Entry:
        try:
            return self._entries[media_id]
        except KeyError:
            raise FakeServiceError(f"no media with id {media_id}") from None

    # --- roots and indexing
    def roots(self) -> list[Path]:
        return list(self._roots)

    def add_root(self, path: Path) -> None:
        path = Path(path).resolve()
        if not path.is_dir():
            raise FakeServiceError(f"root {path} is not a folder")
        if path not in self._roots:
            self._roots.append(path)
            self._changed()

    def _under_root(self, path: Path) -> tuple[set[int], list[int], list[int]]:
        """The items under the library folder ``path`` and the ids of the captions (not pseudo) and pairs on them."""
        if path not in self._roots:
            raise FakeServiceError(f"root {path} is not in the library")
        media = {m for file, m in self._by_path.items() if path in file.parents}
        captions = [c.id for c in self._captions.values() if c.media_id in media and c.source != CaptionSource.PSEUDO]
        return media, captions, [p for p, (_, m, _) in self._pairs.items() if m in media]

    def root_summary(self, path: Path) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` removing the folder deletes (its failed files are items too, as there)."""
        path = Path(path).resolve()
        media, captions, pairs = self._under_root(path)
        failed = sum(1 for p in self._failures if path in Path(p).parents)
        return len(media) + failed, len(captions), len(pairs)

    def remove_root(self, path: Path) -> Path | None:
        """Forget the folder and its items; their annotations go too, after a snapshot of every annotation, in the
        real format and folder (None when they had none)."""
        path = Path(path).resolve()
        with self._lock:
            media, captions, pairs = self._under_root(path)
            snapshot = self._snapshot("remove-root") if captions or pairs else None
            self._roots = [r for r in self._roots if r != path]
            for media_id in media:
                del self._by_path[self._entries.pop(media_id).media.path]
            self._captions = {i: c for i, c in self._captions.items() if c.media_id not in media}
            self._pairs = {i: p for i, p in self._pairs.items() if p[1] not in media}
            self._failures = {p: r for p, r in self._failures.items() if path not in Path(p).parents}
            self._pending = {p for p in self._pending if path not in p.parents}
        self._changed(annotations=bool(captions or pairs))
        return snapshot

    def _snapshot(self, reason: str) -> Path:
        """Write every caption (not pseudo) and pair as an annotation snapshot (engine.library.catalog.snapshots)."""
        from engine.library.catalog import snapshots

        items: dict[int, dict[str, Any]] = {}

        def item(media_id: int) -> dict[str, Any]:
            path = self._entries[media_id].media.path
            return items.setdefault(media_id, {"content_hash": f"fake-{media_id}", "path": str(path), "size": 0,
                                               "mtime_ns": 0, "status": "ok", "captions": [], "pairs": []})

        for c in self._captions.values():
            if c.source != CaptionSource.PSEUDO:
                item(c.media_id)["captions"].append({"text": c.text, "source": c.source.value, "created_at": 0.0,
                                                     "updated_at": 0.0})
        for query, media_id, label in self._pairs.values():
            item(media_id)["pairs"].append({"query": query, "label": label, "source": "user", "created_at": 0.0})
        data = {"format": snapshots.FORMAT, "version": snapshots.VERSION, "created_at": time.time(),
                "items": [items[k] for k in sorted(items)]}
        return snapshots.write(self.workdir / snapshots.FOLDER_NAME, data, reason)

    def _restore_snapshot(self, path: Path) -> int:
        """Put a snapshot's captions and pairs back on the items at their paths (those it lacks); the captions
        added. The real one also finds an item by its content, or keeps a row for it until its file returns."""
        from engine.library.catalog import snapshots

        added = 0
        for entry in snapshots.read(path)["items"]:
            media_id = self._by_path.get(Path(entry["path"]))
            if media_id is None:
                continue
            have = {c.text for c in self.captions(media_id)}
            for caption in entry["captions"]:
                if caption["text"] not in have:
                    self.add_caption_from(media_id, caption["text"], CaptionSource(caption["source"]))
                    have.add(caption["text"])
                    added += 1
            judged = {(q, label) for q, m, label in self._pairs.values() if m == media_id}
            for pair in entry["pairs"]:
                key = (pair["query"], int(pair["label"]))
                if key not in judged:
                    self._pair(key[0], media_id, key[1])
                    judged.add(key)
        return added

    def _files(self, paths: list[Path] | None) -> list[Path]:
        files: list[Path] = []
        for root in paths if paths is not None else self._roots:
            root = Path(root).resolve()
            if root.is_file():
                files.append(root)
            elif root.is_dir():
                files += sorted(p for p in root.rglob("*") if p.suffix.lower() in MEDIA_SUFFIXES)
        return files

    def index_paths(self, paths: list[Path] | None = None,
                    cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Decode every new file under ``paths`` (all roots when None), yielding progress per file."""
        if self.prepare_gate is not None and not self._assets:
            yield Progress(0, 100, PREPARE_MESSAGE)
            time.sleep(0.3)  # the GUI hears at most a few records a second
            yield Progress(40, 100, PREPARE_MESSAGE)
            self.prepare_gate.wait(30)
            self._assets = True
            yield Progress(100, 100, PREPARE_MESSAGE)
        files = [f for f in self._files(paths) if f not in self._by_path]
        with self._lock:  # as the engine's scan, every file found is recorded pending before any is decoded
            self._pending.update(files)
        yield Progress(0, len(files), "scanning")
        for done, file in enumerate(files, start=1):
            if cancel is not None:
                cancel.raise_if_cancelled()
            if self.index_delay_s:
                time.sleep(self.index_delay_s)
            self._index_one(file)
            yield Progress(done, len(files), file.name)

    def _index_one(self, file: Path) -> None:
        with self._lock:
            self._pending.discard(file)
        try:
            kind, frames = _load(file)
        except Exception as exc:  # noqa: BLE001 - a broken file is recorded, never fatal
            self._failures[str(file)] = f"cannot decode: {exc}"
            self._changed()
            return
        media_id = self._id()
        w, h = frames[0].size
        duration = None if kind is MediaKind.IMAGE else 0.1 * len(frames)
        media = FakeMedia(media_id, file, kind, w, h, len(frames), duration)
        from engine.media import read_capture

        with self._lock:
            self._entries[media_id] = _Entry(media, frames, _words(file))
            self._by_path[file] = media_id
            self._captures[media_id] = read_capture(file)
        self._changed()

    def counts(self) -> dict[str, int]:
        kinds = [e.media.kind.value for e in self._entries.values()]
        out = {k.value: kinds.count(k.value) for k in MediaKind}
        out["failed"] = len(self._failures)
        if self._pending:  # found by a scan, not decoded yet (an interrupted run left them)
            out["pending"] = len(self._pending)
        out["total"] = len(kinds) + len(self._failures)  # decoded or failed (the engine's total has pending too)
        return out

    def failures(self) -> list[tuple[str, str]]:
        return sorted(self._failures.items())

    def assets_ready(self) -> bool:
        return self._assets

    def warm_search(self, cancel: CancelToken | None = None) -> bool:
        self.warm_ups.append(cancel)  # apart from ``calls``: it runs in the background whenever the library opens
        if self.warm_gate is not None:  # test helper: a warm-up that runs until the gate opens
            self.warm_gate.wait(10)
        return not (cancel is not None and cancel.cancelled) and self._assets and bool(self._entries)

    def missing_assets(self, gate: threading.Event) -> None:
        """Test helper: a fresh home whose assets the next index run prepares once ``gate`` is set."""
        self.prepare_gate, self._assets = gate, False

    def _require_assets(self) -> None:
        if not self._assets:  # the real AssetsMissing's words
            raise FakeServiceError(f"pretrained assets are missing in {self.workdir / 'assets'}: "
                                   "run `polyseek prepare` first")

    # --- search
    def _is_probabilistic(self) -> bool:
        return any(model.active and model.probabilistic for model in self.models())

    def _hit(self, entry: _Entry, score: float, prob: float | None = None, match: str | None = None) -> SearchHit:
        media_id = entry.media.id
        caps = tuple(c.text for c in self.captions(media_id) if c.source != CaptionSource.PSEUDO)
        guess = next((c.text for c in self.captions(media_id) if c.source == CaptionSource.PSEUDO), None)
        unc = None
        pair = None
        if self._is_probabilistic():
            unc = 0.2 + 0.1 * (media_id % 5)
        frame = None
        if self._active is not None:
            pair = (media_id % K, (media_id + 1) % K)
            if entry.media.kind is not MediaKind.IMAGE and score > 0:  # a search's clip: the part that matched
                frame = self.matched_frame(media_id)
        return SearchHit(media_id, str(entry.media.path), entry.media.kind, score, caps, prob, unc, pair, frame,
                         guess, match)

    def _match(self, score: float) -> tuple[float | None, str | None]:
        """A text search hit's match probability and its word: calibrated for every model (the real service's
        #40 rule); without a calibration, a PCME model's own probability and no word; else neither."""
        if self.calibration is not None:
            p = float(sigmoid(self.calibration.logit({"lexical": score}, 1))[0])
            return p, self.calibration.word(p)
        if self._is_probabilistic():
            return 1 / (1 + math.exp(-8 * (score - 0.4))), None
        return None, None

    def _in_scope(self, entry: _Entry, kind: str | None, folder: Path | None) -> bool:
        return ((kind is None or entry.media.kind.value == kind)
                and (folder is None or Path(folder).resolve() in entry.media.path.parents))

    def matched_frame(self, media_id: int) -> int:
        """The sampled frame a search says matched best in a clip (an invented one, not the first or last)."""
        return 1 + media_id % (len(self._entry(media_id).frames) - 2)

    def search_text(self, text: str, top: int = 60, offset: int = 0, min_probability: float | None = None,
                    kind: str | None = None, folder: Path | None = None) -> list[SearchHit]:
        """Rank by the share of query words found in the item's name and captions (ties: lower id first)."""
        self.calls.append(("search_text", (text, top, offset, min_probability)))
        self._require_assets()
        query = {w for w in text.lower().split() if w}
        scored = []
        for entry in [e for e in self._entries.values() if self._in_scope(e, kind, folder)]:
            words = entry.words | {w for c in self.captions(entry.media.id) for w in c.text.lower().split()}
            overlap = len(query & words) / max(1, len(query))
            score = round(overlap + 0.001 * (100 - entry.media.id) / 100, 4)
            scored.append(self._hit(entry, score, *self._match(score)))
        scored.sort(key=lambda h: (-h.score, h.media_id))
        if min_probability is not None and (self.calibration is not None or self._is_probabilistic()):
            if self.calibration is None and not self.query_carries_evidence(text):
                return []  # the real rule without a calibration (#29); with one, the probability says it
            scored = [h for h in scored if (h.match_probability or 0) >= min_probability]
        return scored[offset: offset + top]

    UNKNOWN_WORDS = frozenset({"zxqv", "blorf"})

    def query_carries_evidence(self, text: str) -> bool:
        """The fake model knows every word but ``UNKNOWN_WORDS`` (the real rule: engine.features.text)."""
        return not self._is_probabilistic() or bool(set(text.lower().split()) - self.UNKNOWN_WORDS)

    def search_media(self, path: Path, top: int = 60, offset: int = 0, kind: str | None = None,
                     folder: Path | None = None, exclude_example: bool = False) -> list[SearchHit]:
        """Rank by closeness of mean colour to the example file's mean colour (``exclude_example``: the library
        item at ``path`` left out, as the real service does)."""
        self.calls.append(("search_media", (str(path), top, offset)))
        self._require_assets()
        _, frames = _load(Path(path))
        target = np.asarray(frames[0], dtype=np.float32).mean(axis=(0, 1))
        entries = [e for e in self._entries.values()
                   if not (exclude_example and Path(e.media.path).resolve() == Path(path).resolve())]
        close = np.array([1 - np.linalg.norm(np.asarray(e.frames[0], dtype=np.float32).mean(axis=(0, 1)) - target)
                          / 442 for e in entries])
        # as the real one: a z-score over the whole library (engine/search/evidence.py), then narrowed to the scope
        z = (close - close.mean()) / (close.std() or 1.0) if len(close) else close
        scored = [self._hit(e, round(float(score), 4)) for e, score in zip(entries, z, strict=True)
                  if self._in_scope(e, kind, folder)]
        scored.sort(key=lambda h: (-h.score, h.media_id))
        return scored[offset: offset + top]

    def explain(self, query: str | Path, media_id: int) -> Explanation:
        """K=2 invented maps: head 0 looks top-left and at the first words, head 1 bottom-right, the rest."""
        entry = self._entry(media_id)
        tokens = tuple(query.split()) if isinstance(query, str) else ()
        if self._active is None:
            empty = np.zeros((0, 0), dtype=np.float32)
            return Explanation(tokens, empty, empty, None, empty, (0, 0),
                               notes=("zero-shot ranking has no attention heads; train a PVSE or PCME model "
                                      "to see per-head explanations",))
        length = max(1, len(tokens)) if tokens else 49
        pos = np.arange(length, dtype=np.float32)
        query_att = _softmax(np.stack([-pos, pos - length]) * 0.8)
        if entry.media.kind is MediaKind.IMAGE:
            item_att = _softmax(np.stack([_blob(GRID, (1.5, 1.5)), _blob(GRID, (5, 4.5))]))
            grid = GRID
        else:
            t = np.arange(len(entry.frames), dtype=np.float32)
            item_att = _softmax(np.stack([-t, t - len(t)]) * 0.7)
            grid = None
        sim = np.array([[0.31, 0.12], [0.05, 0.44]], dtype=np.float32) + 0.01 * (media_id % 3)
        pair = tuple(int(i) for i in np.unravel_index(int(sim.argmax()), sim.shape))
        prob = unc_q = unc_i = pct = None
        mu_q = mu_i = sig_q = sig_i = None
        if self._is_probabilistic():
            pct = 100.0 * ((media_id % 10) + 1) / 10  # an invented place among 10 library items
            unc_q, unc_i = 0.35, 0.2 + 0.1 * (media_id % 5)
            prob = 1 / (1 + math.exp(-4 * float(sim.max())))
            mu_q, mu_i = np.array([0.0, 0.2]), np.array([0.5, -0.1 * (media_id % 4)])
            sig_q, sig_i = np.array([0.3, 0.2]), np.array([unc_i, unc_i * 0.6])
        return Explanation(tokens, query_att.astype(np.float32), item_att.astype(np.float32), grid, sim,
                           pair, unc_q, unc_i, prob, sig_q, sig_i, mu_q, mu_i, pct, 10 if pct is not None else 0, ())

    # --- media
    def media(self, media_id: int) -> FakeMedia:
        return self._entry(media_id).media

    def item(self, media_id: int) -> SearchHit:
        """One item as a hit of no search (score 0), as the engine makes it (``split_captions``)."""
        from engine.library.browse import split_captions

        media = self._entry(media_id).media
        captions, guess = split_captions(self.captions(media_id))
        return SearchHit(media_id, str(media.path), media.kind, 0.0, captions, guess=guess)

    def media_details(self, media_id: int) -> MediaDetails:
        """The engine's record of an item: the file's size and date, what indexing read (kind, pixels, EXIF)."""
        media, st = self._entry(media_id).media, self._entry(media_id).media.path.stat()
        return MediaDetails(media_id, media.path, media.kind, media.path.suffix.lstrip(".").lower() or None,
                            st.st_size, st.st_mtime_ns, media.width, media.height, media.n_frames,
                            media.duration_s, self._captures.get(media_id, CaptureInfo()))

    def _save(self, img: Image.Image, size: int, name: str) -> Path:
        out = self.thumb_dir / name
        if not out.exists():
            thumb = img.copy()
            thumb.thumbnail((size, size))
            thumb.save(out, "JPEG", quality=85)
        return out

    def thumbnail(self, media_id: int, size: int = 256) -> Path:
        return self._save(self._entry(media_id).frames[0], size, f"{media_id}_{size}.jpg")

    def preview_frames(self, media_id: int, n: int = 8) -> list[Path]:
        frames = self._entry(media_id).frames
        picks = sorted({round(i * (len(frames) - 1) / max(1, n - 1)) for i in range(n)})
        return [self._save(frames[i], 256, f"{media_id}_f{i}.jpg") for i in picks]

    # --- annotations
    def captions(self, media_id: int) -> list[FakeCaption]:
        return [c for c in self._captions.values() if c.media_id == media_id]

    def add_caption(self, media_id: int, text: str) -> int:
        self._entry(media_id)
        self.calls.append(("add_caption", (media_id, text)))
        caption_id = self._id()
        self._captions[caption_id] = FakeCaption(caption_id, media_id, text, CaptionSource.USER)
        self._changed(annotations=True)
        return caption_id

    def update_caption(self, caption_id: int, text: str) -> None:
        self.calls.append(("update_caption", (caption_id, text)))
        old = self._captions.get(caption_id)
        if old is None:
            raise FakeServiceError(f"no caption with id {caption_id}")
        self._captions[caption_id] = FakeCaption(caption_id, old.media_id, text, old.source)
        self._changed(annotations=True)

    def delete_caption(self, caption_id: int) -> None:
        self.calls.append(("delete_caption", (caption_id,)))
        if self._captions.pop(caption_id, None) is None:
            raise FakeServiceError(f"no caption with id {caption_id}")
        self._changed(annotations=True)

    def _pair(self, query: str, media_id: int, label: int) -> int:
        self._entry(media_id)
        pair_id = self._id()
        self._pairs[pair_id] = (query, media_id, label)
        self._changed(annotations=True)
        return pair_id

    def accept_pair(self, query: str, media_id: int) -> int:
        self.calls.append(("accept_pair", (query, media_id)))
        return self._pair(query, media_id, +1)

    def reject_pair(self, query: str, media_id: int) -> int:
        self.calls.append(("reject_pair", (query, media_id)))
        return self._pair(query, media_id, -1)

    def delete_pair(self, pair_id: int) -> None:
        self.calls.append(("delete_pair", (pair_id,)))
        if self._pairs.pop(pair_id, None) is None:
            raise FakeServiceError(f"no pair with id {pair_id}")
        self._changed(annotations=True)

    def pairs(self) -> dict[int, tuple[str, int, int]]:
        """Test helper: the stored (query, media_id, label) judgements by id."""
        return dict(self._pairs)

    # --- models
    def models(self) -> list[ModelInfo]:
        """The fake's models; a PCME one is probabilistic (a real one's manifest says so); every one gives a match
        probability with the calibration, only the PCME one without."""
        calibrated = self.calibration is not None
        out = [ModelInfo("zero-shot", "zero-shot", None, {}, self._active is None, gives_probability=calibrated)]
        for name, method, metrics in self._models:
            pcme = method == "pcme"
            out.append(ModelInfo(name, method, self.workdir / name, metrics, name == self._active, pcme,
                                 calibrated or pcme))
        return out

    _model_list = models  # the models part's ``all`` (the instance's ``models`` is that part, callable)

    def register_model(self, model_dir: Path, name: str | None = None) -> str:
        name = name or Path(model_dir).name
        metrics_file, config_file = Path(model_dir) / "metrics.json", Path(model_dir) / "config.json"
        metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        method = json.loads(config_file.read_text()).get("method", "vse") if config_file.is_file() else "vse"
        if name not in {n for n, _, _ in self._models}:
            self._models.append((name, str(method), metrics))
        self.calls.append(("register_model", (name,)))
        self._changed()
        return name

    def set_active_model(self, name: str | None) -> None:
        if name == "zero-shot":
            name = None
        if name is not None and name not in {n for n, _, _ in self._models}:
            raise FakeServiceError(f"no model named {name!r}")
        self.calls.append(("set_active_model", (name,)))
        self._active = name
        self._changed()

    def rename_model(self, name: str, new_name: str) -> None:
        names = [n for n, _, _ in self._models]
        if name not in names or new_name in names:
            raise FakeServiceError(f"cannot rename {name!r} to {new_name!r}")
        self.calls.append(("rename_model", (name, new_name)))
        self._models = [(new_name if n == name else n, m, x) for n, m, x in self._models]
        if self._active == name:
            self._active = new_name
        self._changed()

    def delete_model(self, name: str) -> None:
        if name not in {n for n, _, _ in self._models}:
            raise FakeServiceError(f"no model named {name!r}")
        self.calls.append(("delete_model", (name,)))
        self._models = [entry for entry in self._models if entry[0] != name]
        if self._active == name:
            self._active = None
        self._changed()

    def switch_model(self, name: str, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """As the real one: active, then re-embedded."""
        self.calls.append(("switch_model", (name,)))
        self.set_active_model(name)
        yield Progress(0, 0, f"{name} is the active model")
        yield from self.reindex(cancel)

    def reindex(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        ids = list(self._entries)
        for done, _ in enumerate(ids, start=1):
            if cancel is not None:
                cancel.raise_if_cancelled()
            if self.index_delay_s:
                time.sleep(self.index_delay_s)
            yield Progress(done, len(ids), "re-embedding")
        self._changed()  # the active model's embeddings were written again

    def retrain(self, options: Any = None, on_event: Any = None, on_output: Any = None) -> Any:
        """The engine's retraining job (``engine.loop.retrain.Retrain``: trainer process, naming, registering,
        warm start, resume, cancel) on this fake: its training set and its comparison of the two models are the
        fake's (:meth:`export_training_set`, :meth:`compare_models`, :meth:`evaluate_on`)."""
        from engine.loop.compare import measure_models
        from engine.loop.retrain import Retrain

        fake = self

        class RetrainOnFake(Retrain):
            def _register(self, model_dir: Path, name: str) -> str:
                return fake.register_model(model_dir, name)

            def _models(self) -> list[ModelInfo]:
                return fake._model_list()

            def _export_training_set(self) -> Any:
                return fake.export_training_set(self.options.dest, self.options.holdout, self.options.seed)

            def _compare(self, result: Any) -> Any:
                ts = result.training_set
                if ts is None:
                    return measure_models(lambda *a: fake.evaluate_on(*a), result.model_name, result.old_model,
                                          result.data, result.val_split)
                return fake.compare_models(result.model_name, ts.folder, ts.val_split if ts.n_heldout_items else None,
                                           result.old_model, self.options.seed)

        return RetrainOnFake(self, options, on_event, on_output)

    def _adopt(self, result: Any, cancel: CancelToken | None = None) -> Iterator[Progress]:
        if result.activated and result.model_name is not None:  # as the Workspace's models.adopt
            yield from self.switch_model(result.model_name, cancel)

    # --- annotation transfer
    def _annotated(self) -> list[tuple[_Entry, list[str]]]:
        out = []
        for media_id in sorted(self._entries):
            texts = [c.text for c in self.captions(media_id)]
            if texts:
                out.append((self._entries[media_id], texts))
        return out

    def export_annotations(self, dest: Path, fmt: str = "folder") -> int:
        """Write every captioned item as a caption folder (media copied) or a COCO captions JSON.

        Returns the number of captions written. COCO ``file_name`` is the absolute path of the file, so an
        import into this library finds the items again.
        """
        self.calls.append(("export_annotations", (str(dest), fmt)))
        if fmt not in ("folder", "coco"):
            raise FakeServiceError(f"unknown annotation format {fmt!r} (use 'folder' or 'coco')")
        annotated = self._annotated()
        dest = Path(dest)
        if fmt == "folder":
            rows = [(i, text) for i, (_, texts) in enumerate(annotated) for text in texts]
            write_caption_folder(dest, [e.media.path for e, _ in annotated], rows, copy_media=True,
                                 overwrite=True)
            return len(rows)
        images = [{"id": e.media.id, "file_name": str(e.media.path)} for e, _ in annotated]
        annotations = [{"id": n + 1, "image_id": e.media.id, "caption": text}
                       for n, (e, text) in enumerate((e, t) for e, texts in annotated for t in texts)]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(json.dumps({"images": images, "annotations": annotations}, indent=1), encoding="utf-8")
        return len(annotations)

    def _find(self, path: Path, name: str) -> int | None:
        """The library item at ``path``, else the one item whose file name is ``name``'s."""
        media_id = self._by_path.get(path.resolve()) if path.is_absolute() else None
        if media_id is not None:
            return media_id
        same = [i for p, i in self._by_path.items() if p.name == Path(name).name]
        return same[0] if len(same) == 1 else None

    def import_annotations(self, path: Path) -> int:
        """Add the captions of a caption folder or COCO captions JSON to the matching library items.

        Items are matched by path, else by file name; captions an item already has are skipped. Returns the
        number of captions added. An annotation snapshot is restored instead (its captions and pairs).
        """
        self.calls.append(("import_annotations", (str(path),)))
        path = Path(path)
        from engine.library.catalog import snapshots

        if snapshots.is_snapshot_file(path):  # an annotation snapshot is restored, as the real one does
            return self._restore_snapshot(path)
        rows: list[tuple[Path, str, str]] = []
        if path.is_dir():
            folder = load_caption_folder(path)
            rows = [(item.path, item.file, text) for item, texts in folder.item_captions() for text in texts]
        elif path.suffix.lower() == ".json" and path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            files = {image["id"]: str(image["file_name"]) for image in data.get("images", [])}
            rows = [(Path(files[a["image_id"]]), files[a["image_id"]], str(a["caption"]))
                    for a in data.get("annotations", []) if a.get("image_id") in files]
        else:
            raise FakeServiceError(f"{path} is neither a caption folder nor a COCO captions .json file")
        added = 0
        for file_path, name, text in rows:
            media_id = self._find(file_path, name)
            if media_id is None or text in {c.text for c in self.captions(media_id)}:
                continue
            self.add_caption(media_id, text)
            added += 1
        return added

    # --- training on the library's annotations
    def export_training_set(self, dest: Path | None = None, holdout: float = 0.2, seed: int = 0
                            ) -> FakeTrainingSet:
        """A caption folder of the library: annotated items (a ``holdout`` share in split ``heldout``) and the
        un-annotated ones (split ``train``, no captions). The fake's "videos" are GIFs in disguise, which a
        real decoder would reject, so they are left out."""
        self.calls.append(("export_training_set", (holdout, seed)))
        annotated = self._annotated()
        if not annotated:
            raise FakeServiceError("this library has no captioned items to train on")
        if not 0 <= holdout < 1:
            raise FakeServiceError(f"holdout must be in [0, 1), got {holdout}")
        order = list(range(len(annotated)))
        random.Random(seed).shuffle(order)
        n_held = min(len(annotated) - 1, max(1, round(holdout * len(annotated)))) if holdout > 0 else 0
        held = set(order[:n_held])
        captioned_ids = {e.media.id for e, _ in annotated}
        bare = [e for i, e in sorted(self._entries.items())
                if i not in captioned_ids and e.media.kind is not MediaKind.VIDEO]
        paths = [e.media.path for e, _ in annotated] + [e.media.path for e in bare]
        splits = ["heldout" if i in held else "train" for i in range(len(annotated))] + ["train"] * len(bare)
        rows = [(i, text) for i, (_, texts) in enumerate(annotated) for text in texts]
        if dest is None:
            dest = self.workdir / f"training-set-{self._id()}"
        write_caption_folder(dest, paths, rows, splits, copy_media=True, overwrite=True)
        (Path(dest) / MARKER_FILE).write_text("written by polyseek\n", encoding="utf-8")  # as the engine's export
        warning = training_warning(len(annotated), n_held)
        return FakeTrainingSet(Path(dest), "train", "heldout", len(annotated), len(rows), n_held, len(bare),
                               warning)

    def compare_models(self, new_model: str, folder: Path, split: str | None, old_model: str | None = None,
                       seed: int = 0) -> Any:
        """The engine's rule (``engine.loop.gate.gate``) on this fake's evaluations (no pseudo pairs here), with
        the interval of the difference measured from their per-query ranks, as the engine's ``compare_models``."""
        from engine.loop.gate import ModelComparison

        self.calls.append(("compare_models", (new_model, str(folder), split, old_model)))
        verdict = ModelComparison(new_model, old_model)
        if split is not None:
            verdict.before = self.evaluate_on(folder, split, old_model, per_query=True)
            verdict.after = self.evaluate_on(folder, split, new_model, per_query=True)
        verdict.measure_intervals()
        verdict.decide()  # the engine's rule (engine.loop.gate.gate)
        return verdict

    def evaluate_on(self, folder: Path, split: str, model: str | None = None,
                    distractors: Sequence[Path] = (), per_query: bool = False) -> dict[str, Any]:
        """Retrieval metrics (``engine.trainercontract.metrics.retrieval_report``) of split ``split`` of a caption
        folder.

        The fake has no real models, so every model ranks the same way: by how close an item's colour is to
        the colour words of the caption (an unnamed colour scores 0). ``model`` must exist (None or
        ``zero-shot``: the zero-shot ranking, as in the engine). ``distractors`` are ignored: the fake ranks
        each split on its own. ``per_query``: the report keeps each query's rank, as the engine's.
        """
        self.calls.append(("evaluate_on", (str(folder), split, model)))
        if model is not None and model != "zero-shot" and model not in {n for n, _, _ in self._models}:
            raise FakeServiceError(f"no model named {model!r}")
        view = load_caption_folder(folder).split(split)
        if not view.captions:
            raise FakeServiceError(f"{folder}: split {split!r} has no captions")
        features = []
        for item in view.items:
            with Image.open(item.path) as img:
                features.append(colour_feature(img))
        scores = np.zeros((len(view.items), len(view.captions)), dtype=np.float64)
        for c, (_, text) in enumerate(view.captions):
            target = caption_colour(text)
            if target is not None:
                scores[:, c] = [-float(np.linalg.norm(f - target)) for f in features]
        report = retrieval_report(scores, np.asarray(view.caption_item_indices()), per_query=per_query)
        report.update(split=split, model=model or "zero-shot")
        return report

    def suggest_annotations(self, n: int = 20, policy: str = "auto") -> list[tuple[int, float]]:
        """Un-captioned items, most novel first: score = colour distance to the nearest captioned item
        (to the library's mean colour while nothing is captioned), scaled to [0, 1]."""
        self.calls.append(("suggest_annotations", (n, policy)))
        if policy not in SUGGEST_POLICIES:
            raise FakeServiceError(f"unknown suggestion policy {policy!r} (use one of {SUGGEST_POLICIES})")
        features = {i: colour_feature(e.frames[0]) for i, e in self._entries.items()}
        if not features:
            return []
        captioned = {e.media.id for e, _ in self._annotated()}
        anchors = [features[i] for i in captioned] or [np.mean(list(features.values()), axis=0)]
        scored = []
        for media_id, feature in features.items():
            if media_id in captioned:
                continue
            distance = min(float(np.linalg.norm(feature - a)) for a in anchors)
            scored.append((media_id, round(distance / 442.0, 4)))  # 442 = the RGB cube's diagonal
        scored.sort(key=lambda pair: (-pair[1], pair[0]))
        return scored[:n]

    def suggestion_policy(self, policy: str = "auto") -> str:
        """The policy ``auto`` stands for with the active model (engine.loop.suggest.resolve_policy's rule; the
        fake's list is ordered by colour novelty whichever it is)."""
        self.calls.append(("suggestion_policy", (policy,)))
        if policy not in SUGGEST_POLICIES:
            raise FakeServiceError(f"unknown suggestion policy {policy!r} (use one of {SUGGEST_POLICIES})")
        if policy != "auto":
            return policy
        if self._is_probabilistic():
            return "uncertainty"
        return "disagreement" if self._active is not None else "random"

    # --- the library without a query (engine.library.browse's semantics)
    def browse(self, top: int = 60, offset: int = 0, sort: str = "newest", folder: Path | None = None,
               kind: str | None = None, annotation: str = "all") -> list[SearchHit]:
        """Indexed items sorted by date taken (the file's mtime where there is none; ties: id), file mtime or name,
        filtered by folder, kind and annotations."""
        self.calls.append(("browse", (top, offset, sort, str(folder) if folder else None, kind, annotation)))
        return self._browsed(sort, folder, kind, annotation)[offset:offset + top]

    def browse_count(self, folder: Path | None = None, kind: str | None = None, annotation: str = "all") -> int:
        self.calls.append(("browse_count", (str(folder) if folder else None, kind, annotation)))
        return len(self._browsed("name", folder, kind, annotation))

    def _browsed(self, sort: str, folder: Path | None, kind: str | None, annotation: str) -> list[SearchHit]:
        entries = [e for e in self._entries.values()
                   if (kind is None or e.media.kind.value == kind)
                   and (folder is None or Path(folder).resolve() in e.media.path.parents)]
        states = self.annotation_states([e.media.id for e in entries])
        if annotation == "captioned":
            entries = [e for e in entries if states[e.media.id].captioned]
        elif annotation == "uncaptioned":
            entries = [e for e in entries if not states[e.media.id].captioned]
        elif annotation == "judged":
            entries = [e for e in entries if states[e.media.id].judged]
        if sort == "name":
            from engine.library.catalog import name_key  # the real catalog's natural order of names

            entries.sort(key=lambda e: (name_key(e.media.path), e.media.id))
        elif sort in ("newest", "oldest"):  # the EXIF date taken, the file's mtime where there is none
            entries.sort(key=lambda e: (self._captures[e.media.id].taken_ns or e.media.path.stat().st_mtime_ns,
                                        e.media.id), reverse=sort == "newest")
        elif sort in ("modified", "modified-oldest"):
            entries.sort(key=lambda e: (e.media.path.stat().st_mtime_ns, e.media.id), reverse=sort == "modified")
        else:
            raise FakeServiceError(f"unknown browse order {sort!r}")
        return [self._hit(e, 0.0) for e in entries]

    def annotation_states(self, media_ids: list[int], query: str | None = None) -> dict[int, Any]:
        from engine.library.browse import AnnotationState, latest_verdicts

        key = query.strip().casefold() if query else None
        out = {}
        for media_id in media_ids:
            sources = frozenset(str(c.source) for c in self.captions(media_id))
            pairs = [(q, label) for q, m, label in self._pairs.values() if m == media_id]
            verdicts = [label for q, label in pairs if key is not None and q.strip().casefold() == key]
            out[media_id] = AnnotationState(sources, verdicts[-1] if verdicts else 0, bool(pairs),
                                            latest_verdicts(pairs))
        return out

    def annotation_progress(self) -> Any:
        from engine.library.browse import AnnotationProgress

        states = self.annotation_states(list(self._entries))
        return AnnotationProgress(sum(s.captioned for s in states.values()), len(states))

    # --- items whose files are gone (SearchService.missing_summary / purge_missing, issue #21)
    def _missing(self) -> tuple[set[int], list[int], list[int]]:
        gone = {m for m, e in self._entries.items() if not e.media.path.exists()}
        captions = [c.id for c in self._captions.values() if c.media_id in gone and c.source != CaptionSource.PSEUDO]
        pairs = [p for p, (_, m, _) in self._pairs.items() if m in gone]
        return gone, captions, pairs

    def missing_summary(self) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` whose files are gone (the fake has no offline drives)."""
        gone, captions, pairs = self._missing()
        return len(gone), len(captions), len(pairs)

    def purge_missing(self) -> tuple[int, int, int, Path | None]:
        """Delete the items whose files are gone with their annotations; the fake writes no snapshot (None)."""
        with self._lock:
            gone, captions, pairs = self._missing()
            for media_id in gone:
                self._by_path.pop(self._entries.pop(media_id).media.path, None)
            self._captions = {i: c for i, c in self._captions.items() if c.media_id not in gone}
            self._pairs = {i: p for i, p in self._pairs.items() if p[1] not in gone}
        self._changed(annotations=True)
        return len(gone), len(captions), len(pairs), None

    def add_caption_from(self, media_id: int, text: str, source: CaptionSource) -> int:
        """Test helper: a caption of another provenance (imported, pseudo)."""
        caption_id = self._id()
        self._captions[caption_id] = FakeCaption(caption_id, media_id, text, source)
        self._changed(annotations=True)
        return caption_id
