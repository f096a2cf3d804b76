"""The pretrained encoders (backbone, MiniLM, GloVe, class embeddings), created on first use.

Shared by the search service, the evaluations and the trainer's data loading (``trainer.data``), so each
opens the same ONNX sessions the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine.features import wordtable
from engine.features.assets import assets_ready, ensure_assets
from engine.features.backbone import Backbone, class_names, require_assets
from engine.features.extract import FeatureExtractor
from engine.features.regional import class_texts
from engine.features.text import GloveEncoder, MiniLMEncoder
from engine.features.wordtable import WordEmbeddings
from engine.progress import CancelToken, Progress


class Encoders:
    """The pretrained encoders, created on first use (opening ONNX sessions takes a moment)."""

    def __init__(self, assets: Path | None = None) -> None:
        self._assets = assets
        self._lock = threading.RLock()  # class_embeddings needs minilm: nested creation
        self._cache: dict[str, Any] = {}

    def prepare(self, cancel: CancelToken | None = None,
                also_ready: Callable[[], bool] = lambda: True) -> Iterator[Progress]:
        """Prepare the default pretrained assets when they are missing (first use; progress records), and
        their word table (:mod:`engine.features.wordtable`; once, also for an asset set prepared before it
        existed); an assets folder given explicitly is used as it is."""
        if self._assets is None:
            yield from ensure_assets(cancel, also_ready=also_ready)
            own = wordtable.own_assets()
            if own is not None:
                yield from wordtable.ensure_table(own, lambda words: self.minilm.encode(words).sentence, cancel)

    def ready(self) -> bool:
        """Whether the pretrained assets are there (a fresh home's default set is missing until :meth:`prepare`
        has run: the first index run prepares it)."""
        return assets_ready(self._assets)

    def _get(self, key: str, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key not in self._cache:
                self._cache[key] = make()
            return self._cache[key]

    @property
    def backbone(self):
        return self._get("backbone", lambda: Backbone(self._assets))

    def release_backbone(self) -> None:
        """Let the stock backbone's session go (reopened on next use, a fraction of a second). ONNX Runtime's CPU
        arena keeps its largest run's activations for the session's life: ~200 MB that an indexed library then
        held until the app quit (issue #44 point 19). A caller still running it keeps its own reference."""
        with self._lock:
            self._cache.pop("backbone", None)

    @property
    def class_names(self) -> list[str]:
        return self._get("names", lambda: class_names(self._assets))

    @property
    def minilm(self):
        return self._get("minilm", lambda: MiniLMEncoder(self._assets))

    @property
    def glove(self):
        return self._get("glove", lambda: GloveEncoder(self._assets))

    @property
    def class_embeddings(self) -> np.ndarray:
        def make() -> np.ndarray:
            cached = require_assets(self._assets) / "zeroshot" / "class_embeddings.npy"
            if cached.is_file():
                return np.load(cached)
            return self.minilm.encode(class_texts(self.class_names)).sentence

        return self._get("class_embeddings", make)

    @property
    def word_embeddings(self):
        """The stock MiniLM's embeddings of single words (:class:`engine.features.wordtable.WordEmbeddings`:
        the assets' word table, else encoded once per session), for the zero-shot concept term."""
        return self._get("word_embeddings",
                         lambda: WordEmbeddings(lambda words: self.minilm.encode(words).sentence,
                                                require_assets(self._assets)))

    def extractor(self):
        return FeatureExtractor(self.backbone, self.class_names)

    def for_model(self, runner) -> Encoders:
        """These encoders as ``runner``'s model sees them: its own fine-tuned backbone and/or text encoder in
        place of the stock ones where it has them (cached per model version), the rest shared."""
        if runner.manifest.backbone is None and runner.manifest.text_model is None:
            return self
        return self._get(f"model:{runner.model_id}",
                         lambda: _ModelEncoders(self, runner.own_backbone(), runner.own_text_encoder(self._assets)))


class _ModelEncoders(Encoders):
    """:class:`Encoders` sharing everything with ``base`` but the backbone and/or MiniLM (None: the base's)."""

    def __init__(self, base: Encoders, backbone, minilm=None) -> None:  # not super().__init__: a fresh cache
        self._base, self._own_backbone, self._own_minilm = base, backbone, minilm
        self._assets, self._lock, self._cache = base._assets, base._lock, base._cache

    @property
    def backbone(self):
        return self._own_backbone if self._own_backbone is not None else self._base.backbone

    @property
    def minilm(self):
        return self._own_minilm if self._own_minilm is not None else self._base.minilm

    @property
    def class_embeddings(self) -> np.ndarray:
        return self._base.class_embeddings  # zero-shot ranking stays the stock MiniLM's

    @property
    def word_embeddings(self):
        return self._base.word_embeddings  # the stock MiniLM's too

    def for_model(self, runner) -> Encoders:
        return self._base.for_model(runner)
