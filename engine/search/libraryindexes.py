"""What a library's searches read besides a trained model, built from its items on first use and kept until they
change: the zero-shot index of every indexed item and of its clips' sampled frames, the backbone's global features
(a picture query's ranking, the look-alikes the user's words spread to), the user's words, and the MiniLM
embeddings of sentences and query words already asked.

:class:`engine.state.LibraryState` holds one (``state.indexes``) and calls :meth:`LibraryIndexes.drop` when a
scan or a removal changed the items; the user's words follow the catalog's annotation version by themselves.
"""

from __future__ import annotations

import threading

import numpy as np

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from engine.features.regional import content_words
from engine.library.catalog import Catalog, MediaStatus
from engine.search.shots import pooled_distributions, shot_labels
from engine.search.words import LookAlikes, UserWords
from engine.search.zeroshot import ZeroShotIndex, frame_distributions
from engine.types import CaptionSource, MediaKind


class LibraryIndexes:
    """The lazily built, cached indexes of one library (see the module docstring); thread-safe."""

    def __init__(self, catalog: Catalog, features: FeatureStore, encoders: Encoders) -> None:
        self.catalog, self.features, self.encoders = catalog, features, encoders
        self._lock = threading.RLock()
        self.zero_shot_built: tuple[np.ndarray, ZeroShotIndex] | None = None  # (ids, index); None: built next use
        self._frames: tuple[np.ndarray, ZeroShotIndex] | None = None  # (owner rows, index of the clips' frames)
        self._log_frames: np.ndarray | None = None  # per zero-shot row: log of its sampled frames (0: a photo)
        self._globals: tuple[np.ndarray, np.ndarray] | None = None  # (ids, (N, D) normalised global features)
        self._look_alikes: LookAlikes | None = None  # the globals centred: where the user's words spread
        self._words: tuple[tuple, UserWords] | None = None  # (annotation version, the user's words)
        self._words_checked: tuple | None = None  # the catalog version the user's words were last checked at
        self._sentence_cache: dict[str, np.ndarray] = {}

    def drop(self) -> None:
        """Forget what was built from the items (the next search rebuilds it); the encodings stay."""
        with self._lock:
            self.zero_shot_built = self._frames = self._log_frames = self._globals = self._look_alikes = None

    def ok_items(self) -> tuple[np.ndarray, list[str]]:
        """``(ids, content hashes)`` of the indexed items."""
        items = [(m.id, m.content_hash) for m in self.catalog.iter_media(MediaStatus.OK)]
        return np.array([i for i, _ in items], dtype=np.int64), [h for _, h in items]

    def zero_shot(self) -> tuple[np.ndarray, ZeroShotIndex]:
        """``(ids, ZeroShotIndex)`` of every indexed item's regional semantics."""
        with self._lock:
            if self.zero_shot_built is None:
                ids, hashes = self.ok_items()
                backbone = self.encoders.backbone.id
                class_ids = self.features.stack(hashes, backbone, "image_top_ids") if hashes else np.zeros((0, 32))
                probs = self.features.stack(hashes, backbone, "image_top_probs") if hashes else np.zeros((0, 32))
                self.zero_shot_built = (ids, ZeroShotIndex(self.encoders.class_embeddings, class_ids, probs))
            return self.zero_shot_built

    def frames(self) -> tuple[np.ndarray, ZeroShotIndex]:
        """``(owner rows, ZeroShotIndex)`` of every shot of the library's clips (rows of :meth:`zero_shot`'s ids;
        :mod:`engine.search.shots`): a frame's class distribution is the per-class maximum over its regions' top
        classes, normalised (the regional half of an item's distribution, A3VSE §3.2), a shot's the mean of its
        frames'."""
        with self._lock:
            if self._frames is None:
                ids, index = self.zero_shot()
                row_of = {int(m): r for r, m in enumerate(ids.tolist())}
                clips = [m for m in self.catalog.iter_media(MediaStatus.OK)
                         if m.kind != MediaKind.IMAGE and m.id in row_of]
                owners: list[int] = []
                tops: list[tuple[np.ndarray, np.ndarray]] = []
                records = self.features.get_many([m.content_hash for m in clips], self.encoders.backbone.id,
                                                 ("frames", "region_top_ids", "region_top_probs")) if clips else {}
                k = index.top_k
                for m in clips:
                    r = records.get(m.content_hash)
                    if r is None or r.frames is None or r.region_top_ids is None:
                        continue
                    per_frame = frame_distributions(r.region_top_ids, r.region_top_probs, len(r.frames), k)
                    if len(per_frame) != len(r.frames):
                        continue
                    for frame_ids, frame_probs in pooled_distributions(per_frame, shot_labels(r.frames), k):
                        owners.append(row_of[m.id])
                        tops.append((frame_ids, frame_probs))
                frame_index = ZeroShotIndex(self.encoders.class_embeddings,
                                            np.stack([t[0] for t in tops]) if tops else np.zeros((0, k), np.int64),
                                            np.stack([t[1] for t in tops]) if tops else np.zeros((0, k), np.float32))
                self._frames = (np.array(owners, np.int64), frame_index)
            return self._frames

    def log_frames(self) -> np.ndarray:
        """Per row of :meth:`zero_shot`'s ids, the log of the item's shots (0 for a photo): how far a clip's best of
        T shots stands above one draw (the calibration's ``frames_bias``). Made once per state."""
        with self._lock:
            if self._log_frames is None:
                owners, _ = self.frames()
                counts = np.bincount(owners, minlength=len(self.zero_shot()[0]))
                self._log_frames = np.log(np.maximum(counts, 1)).astype(np.float32)
            return self._log_frames

    def global_matrix(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, (N, D) unit global features)`` of the indexed items."""
        with self._lock:
            if self._globals is None:
                ids, hashes = self.ok_items()
                matrix = (self.features.stack(hashes, self.encoders.backbone.id, "global").astype(np.float32)
                          if hashes else np.zeros((0, 1), np.float32))
                matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-9)
                self._globals = (ids, matrix)
            return self._globals

    def look_alikes(self) -> LookAlikes:
        """The items' look-alikes (:class:`engine.search.words.LookAlikes`: the global features centred on the
        library's mean), where the user's words spread."""
        with self._lock:
            if self._look_alikes is None:
                self._look_alikes = LookAlikes(*self.global_matrix())
            return self._look_alikes

    def user_words(self) -> UserWords:
        """The user's words of this library (:class:`engine.search.words.UserWords`), rebuilt when they change."""
        with self._lock:
            version = self.catalog.version()  # cheap; the annotations' own version is read only when it moved
            if self._words is not None and self._words_checked == version:
                return self._words[1]
            key = self.catalog.annotation_version()
            self._words_checked = version
            if self._words is None or self._words[0] != key:
                texts = [(c.media_id, c.text, False) for c in self.catalog.iter_captions()
                         if c.source != CaptionSource.PSEUDO]
                texts += [(p.media_id, p.query, p.label < 0) for p in self.catalog.pairs()]
                self._words = (key, UserWords(texts, self.encode_sentences))
            return self._words[1]

    def encode_sentences(self, texts: list[str]) -> np.ndarray:
        """Unit MiniLM sentence embeddings, each text encoded once per library."""
        todo = sorted({t for t in texts if t not in self._sentence_cache})
        if todo:
            for t, v in zip(todo, self.encoders.minilm.encode(todo).sentence, strict=True):
                self._sentence_cache[t] = (v / max(float(np.linalg.norm(v)), 1e-9)).astype(np.float32)
        return np.stack([self._sentence_cache[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)

    def zero_shot_query(self, text: str, exclude: set[str] = frozenset(), sentence: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
        """The MiniLM embeddings of a sentence (D,) and of its content words (W, D) for the zero-shot ranking
        (words in ``exclude`` left out; ``sentence``: its embedding when already computed).

        Two batches: in one, every word would be padded to the sentence's length and cost as much as the
        sentence (measured: CPU per query p50 28 -> 12 ms, p95 70 -> 23 ms on Flickr8k captions); the
        embeddings are the same, padding being masked out.
        """
        if sentence is None:
            sentence = self.encoders.minilm.encode([text]).sentence[0]
        words = [w for w in content_words(text) if w not in exclude]
        return sentence, self.encoders.word_embeddings.embed(words, len(sentence))  # the assets' word table
