"""``LibraryState``: what one library opened in this process holds, shared by the workspace's parts
(:mod:`engine.workspace`) and the library loop's jobs (:mod:`engine.loop`).

It is built from its collaborators (catalog, feature store, encoders: docs/contributing.md) by
:meth:`LibraryState.open`, or by a test from small ones. Besides them it holds what is built from the library and
dropped when the library changes: the indexes a search reads besides a model (:class:`LibraryIndexes`), the active
model's search (:meth:`active_trained`, opened on first use), and the lock that guards them. It does nothing a user
asks for: indexing, searching, annotating and the models are the workspace's parts, over this state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine import paths
from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureStore
from engine.library.catalog import Catalog, CatalogError, MediaStatus
from engine.library.indexer import Indexer
from engine.search.companion import CompanionSpec, read_companion
from engine.search.libraryindexes import LibraryIndexes
from engine.search.modelrunner import ModelLoadError
from engine.search.trained import TrainedSearch
from engine.trainercontract.runfolder import read_config_method
from engine.types import ALL_EVIDENCE, EvidenceKind, ModelInfo, evidence_kinds

log = logging.getLogger(__name__)


class LibraryState:
    """One opened library's collaborators and what is built from them (see the module docstring)."""

    def __init__(self, name: str, catalog: Catalog, features: FeatureStore, encoders: Encoders,
                 cache_dir: Path) -> None:
        self.name = name
        self.catalog = catalog
        self.features = features
        self.encoders = encoders
        self.cache_dir = cache_dir  # the thumbnails
        self.library_dir = cache_dir.parent
        self.indexer = Indexer(catalog, features, encoders.extractor)
        self.lock = threading.RLock()
        self.indexes = LibraryIndexes(catalog, features, encoders)  # zero-shot, frames, globals, the user's words
        self._evidence: frozenset[EvidenceKind] = ALL_EVIDENCE  # the property below
        # the model this object searches with instead of the library's active one (``Models.use_here``); None:
        # the active one
        self.model_here: tuple[str | None] | None = None
        # the shipped starter while a fresh home waits for its assets (engine.state.models.offer_starter), listed
        # as the active model meanwhile; ``offering``: it is being registered (seconds), so it stays listed
        self.awaited_starter: ModelInfo | None = None
        self.offering = False
        self._trained: Any = None  # TrainedSearch of the active model, opened lazily
        self._unloadable: int | None = None  # id of an active model that could not be loaded (warned once)

    @property
    def evidence(self) -> frozenset[EvidenceKind]:
        """The kinds of evidence rankings weigh (:class:`engine.types.EvidenceKind`, all by default;
        :mod:`engine.search.evidence`); a test or a benchmark may narrow them, by kind or name (``ValueError`` for a
        name that is no kind)."""
        return self._evidence

    @evidence.setter
    def evidence(self, kinds: Iterable[EvidenceKind | str]) -> None:
        self._evidence = evidence_kinds(kinds)

    @classmethod
    def open(cls, library: str = "default", assets: Path | None = None) -> LibraryState:
        """The state of a named library under ``engine.paths.home()``."""
        folder = paths.library_dir(library)
        folder.mkdir(parents=True, exist_ok=True)
        catalog = Catalog(folder / "catalog.sqlite")
        features = FeatureStore(paths.home() / "features.sqlite")
        return cls(library, catalog, features, Encoders(assets), folder / "thumbnails")

    def close(self) -> None:
        self.catalog.close()
        self.features.close()

    def active_trained(self):
        """The TrainedSearch of the model this object searches with (the library's active one unless
        :attr:`model_here` names another), or None while zero-shot ranking is active or the model cannot load."""
        with self.lock:
            if self.model_here is None:
                record = self.catalog.active_model()
            else:
                name = self.model_here[0]
                record = None if name is None else self.catalog.model(name)
            if record is None:
                self._trained = None
                return None
            if self._trained is None or self._trained.record.id != record.id:
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
                self._trained.companion = self._open_companion(record)
                status = self.catalog.counts()["status"]
                searchable = sum(status.values()) - status.get(MediaStatus.FAILED, 0) - status.get(
                    MediaStatus.MISSING, 0)
                if self._trained.embedded() < searchable:
                    for _ in self._trained.sync():
                        pass
            return self._trained

    def _open_companion(self, record, owner: str | None = None, depth: int = 0):
        """The TrainedSearch of the companion the model ``record`` names (:mod:`engine.search.companion`),
        registered in this library on first use (:meth:`companion_record`, named after ``owner``, the active model,
        default ``record``'s name), with the companion's own companion attached (one level: the shipped PVSE model's
        probabilistic one); None when the model has none or it cannot be loaded (logged: the model then searches
        alone)."""
        spec = read_companion(record.path)
        owner = owner or record.name
        if spec is None or depth > 1 or Path(record.path).resolve() == spec.folder:
            return None
        registered = False
        try:
            companion, registered = self.companion_record(spec, owner)
            opened = TrainedSearch.open(companion, self.catalog, self.features, self.encoders, self.library_dir)
        except (ModelLoadError, OSError, CatalogError) as exc:
            log.warning("the companion of model %r (%s) cannot be loaded (%s); it searches alone", record.name,
                        spec.folder, exc)
            if registered:  # not listed as a model that cannot load
                self.catalog.delete_model(spec.registered_name(owner))
            return None
        if depth == 0:
            opened.companion = self._open_companion(companion, owner, depth + 1)
        return opened

    def companion_record(self, spec: CompanionSpec, model_name: str) -> tuple[Any, bool]:
        """The catalog's record of the companion ``spec`` of model ``model_name``, and whether it was registered
        now (under :meth:`CompanionSpec.registered_name`). One registration per companion folder: a retrained
        model that keeps its start's companion searches with the vectors the library already has for it
        (embedding it again under the new version's name cost a pass over every item). Nothing is loaded here:
        opening it checks it (its graphs, its backbone)."""
        models = self.catalog.models()
        found = next((m for m in models if Path(m.path).resolve() == spec.folder), None)
        if found is not None:
            return found, False
        name = spec.registered_name(model_name)
        if any(m.name == name for m in models):  # named so for another folder: its vectors are not these
            self.catalog.delete_model(name)
        self.catalog.register_model(name, read_config_method(spec.folder), spec.folder, {})
        return self.catalog.model(name), True

    def invalidate(self, model: bool = True) -> None:
        """Drop what is built from the library's items (zero-shot ranking, global features) and, with ``model``,
        the active model's search (reopened when next needed)."""
        with self.lock:
            self.indexes.drop()
            if model:
                self._trained = None
