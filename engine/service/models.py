"""The models of one library as :class:`engine.service.SearchService` offers them: the list (zero-shot ranking
first), which one is active (for the library, or for one service object), registering a model folder, renaming and
deleting one, and switching to one with the library re-embedded."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from engine.library.catalog import Catalog
from engine.progress import CancelToken, Progress, staged
from engine.trainercontract.exportformat import is_probabilistic
from engine.trainercontract.runfolder import read_metrics
from engine.types import ZERO_SHOT, EvidenceKind, ModelInfo

log = logging.getLogger(__name__)


class LibraryModels:
    """The model half of :class:`engine.service.SearchService`, which owns the state below and mixes this in."""

    catalog: Catalog
    encoders: Encoders
    evidence: frozenset[EvidenceKind]
    library_dir: Path
    _lock: threading.RLock
    _offering: bool
    _awaited_starter: ModelInfo | None
    _model_for_this_service: tuple[str | None] | None
    features: FeatureStore
    _trained: Any  # the TrainedSearch of the active model, opened lazily
    _unloadable: int | None  # id of an active model that could not be loaded (warned once)

    def _invalidate(self, model: bool = True) -> None:
        raise NotImplementedError  # SearchService drops what it built from the library's items and model

    def counts(self) -> dict[str, int]:
        raise NotImplementedError  # SearchService counts the library's items

    def reindex(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        raise NotImplementedError  # SearchService re-embeds the library with the active model

    def active_trained(self):
        """The TrainedSearch of the active model, or None while zero-shot ranking is active."""
        with self._lock:
            if self._model_for_this_service is None:
                record = self.catalog.active_model()
            else:
                name = self._model_for_this_service[0]
                record = None if name is None else self.catalog.model(name)
            if record is None:
                self._trained = None
                return None
            if self._trained is None or self._trained.record.id != record.id:
                from engine.search.modelrunner import ModelLoadError
                from engine.search.trained import TrainedSearch

                try:
                    self._trained = TrainedSearch.open(record, self.catalog, self.features, self.encoders,
                                                       self.library_dir)
                except (ModelLoadError, OSError) as exc:  # its folder is gone or broken: rank zero-shot
                    if self._unloadable != record.id:
                        log.warning("model %r cannot be loaded (%s); searching with zero-shot ranking",
                                    record.name, exc)
                        self._unloadable = record.id
                    self._trained = None
                    return None
                counts = self.counts()
                if len(self._trained.index) < counts["total"] - counts["failed"] - counts["missing"]:
                    for _ in self._trained.sync():
                        pass
            return self._trained

    def models(self) -> list[ModelInfo]:
        """Zero-shot ranking first, then the registered models; each says whether its text searches give a match
        probability (the calibration :meth:`rank_text` uses with it, else a probabilistic model's own)."""
        from engine.search import calibration

        records = self.catalog.models()
        active = any(r.is_active for r in records)
        zero_shot = calibration.load(EvidenceKind.ZERO_SHOT) is not None
        kind = EvidenceKind.MODEL if EvidenceKind.MODEL in self.evidence else EvidenceKind.ZERO_SHOT
        trained = calibration.load(kind) is not None
        waiting = self._offering or not self.encoders.ready()
        awaited = self._awaited_starter if not active and waiting else None
        infos = [ModelInfo(ZERO_SHOT, ZERO_SHOT, None, {}, not active and awaited is None,
                           gives_probability=zero_shot)]
        for r in records:
            pcme = is_probabilistic(r.path)
            infos.append(ModelInfo(r.name, r.method, r.path, r.metrics, r.is_active, pcme, trained or pcme))
        if awaited is not None:  # a fresh home: the starter is registered and searches once the assets are prepared
            infos.append(replace(awaited, gives_probability=trained))
        return infos

    def set_active_model(self, name: str | None) -> None:
        """Activate a registered model by name, a model directory (registered on the way), or zero-shot."""
        self.catalog.set_active_model(self._registered_model(name))
        self._invalidate()

    def switch_model(self, name: str, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Make ``name`` the library's active model, then re-embed the library with it: a generator of progress
        records. The one way a new model is switched to (a retrain the rule accepts; the GUI's "Use it and
        re-index")."""
        self.set_active_model(name)
        yield Progress(0, 0, f"{name} is the active model")
        for progress in self.reindex(cancel):
            yield staged(progress, f"re-indexing with {name}")

    def search_with_model(self, name: str | None) -> None:
        """Search with this model (name, model directory or zero-shot) through this service object only; the
        library's active model stays as it is (``polyseek search --model``). ``None`` goes back to it."""
        with self._lock:
            self._model_for_this_service = None if name is None else (self._registered_model(name),)
        self._invalidate()

    def _registered_model(self, name: str | None) -> str | None:
        """The registered name of a model name or directory (registering a directory); None for zero-shot."""
        if name in (None, ZERO_SHOT):
            return None
        if name not in {m.name for m in self.catalog.models()}:
            candidate = Path(str(name)).expanduser()
            if not candidate.is_dir():
                raise LookupError(f"no model named {name!r} (see `polyseek models`) and no such model directory")
            name = self.register_model(candidate)
        return name

    def register_model(self, model_dir: Path, name: str | None = None) -> str:
        """Register a model directory written by ``polyseek train --out`` (its ONNX export must be there)."""
        from engine.search.modelrunner import ModelRunner
        from engine.trainercontract.exportformat import model_export_dir

        model_dir = Path(model_dir).resolve()
        runner = ModelRunner.load(model_export_dir(model_dir), backbone_id=self.encoders.backbone.id)
        if runner.manifest.backbone is not None:
            self.encoders.for_model(runner)  # its backbone graph must open, or registering fails here
        metrics = read_metrics(model_dir)
        name = name or model_dir.name
        existing = {m.name: m for m in self.catalog.models()}
        if name in existing and Path(existing[name].path) != model_dir:
            raise ValueError(f"a different model is already registered as {name!r}")
        if name not in existing:
            self.catalog.register_model(name, runner.method, model_dir, metrics.as_dict() if metrics else {})
        return name

    def rename_model(self, name: str, new_name: str) -> None:
        """Call a registered model ``new_name`` (its folder on disk keeps its name; its index moves along)."""
        import shutil

        new_name = " ".join(str(new_name).split())
        if new_name in ("", ZERO_SHOT):
            raise ValueError(f"{new_name!r} cannot be a model's name")
        self.catalog.rename_model(name, new_name)
        index = self.library_dir / "index"
        if (index / name).exists():
            shutil.rmtree(index / new_name, ignore_errors=True)  # left by nothing registered now
            os.replace(index / name, index / new_name)
        self._invalidate()

    def delete_model(self, name: str) -> None:
        """Forget a registered model (its vectors and index; the model directory itself is left alone)."""
        import shutil

        self.catalog.delete_model(name)
        shutil.rmtree(self.library_dir / "index" / name, ignore_errors=True)
        self._invalidate()
