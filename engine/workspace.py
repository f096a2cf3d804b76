"""``Workspace``: one library opened for the CLI and the GUI, the one object they talk to.

It is the library's :class:`engine.service.SearchService` (index, search, explain, annotate, models) with the
library loop's jobs on top: the training set, a model measured on a caption folder, two models compared under
the activation rule, what to annotate next, annotations in and out, and the retraining job itself
(:meth:`Workspace.retrain`). The service knows nothing of the loop; the loop (:mod:`engine.loop`) takes the
service's parts (its catalog, feature store, encoders, its ``switch_model``) and imports downward only; this
module composes the two, so a job reaches each room once (docs/architecture.md, "A retrain's way").

Why a subclass of the service and not an object holding one: the CLI and the GUI call some fifty of the service's
methods on the object they hold (the GUI through ``app.service_api.SearchServiceLike``); a subclass adds the loop's
jobs without a forwarding method for each of those, and ``Workspace.open`` is ``SearchService.open``.

The loop's vocabulary the CLI and the GUI need (the job, its options and result, the trainer's failure) is
re-exported here, so neither reaches into :mod:`engine.loop` for a job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.loop.annotations import AnnotationCounts, export_annotations, import_annotations
from engine.loop.compare import compare_models
from engine.loop.defaults import DEFAULT_HOLDOUT
from engine.loop.errors import AnnotationError, RetrainError
from engine.loop.evaluate import evaluate_on
from engine.loop.gate import ModelComparison
from engine.loop.retrain import Retrain, RetrainOptions, RetrainResult, planned_epochs
from engine.loop.suggest import resolve_policy, suggest
from engine.loop.trainerprocess import STOP_WAIT_S, TrainerFailed
from engine.loop.trainingset import TrainingSet, build_training_set, training_set_dir
from engine.progress import CancelToken, Progress
from engine.service import SearchService
from engine.trainercontract import events
from engine.trainercontract.metrics import RetrievalReport
from engine.types import Explanation, MediaDetails, ModelInfo, SearchHit

__all__ = [
    "STOP_WAIT_S", "AnnotationCounts", "AnnotationError", "ModelComparison", "Retrain", "RetrainError",
    "RetrainOptions", "RetrainResult", "TrainerFailed", "Workspace", "planned_epochs",
    "Library", "Annotations", "Models", "Search",
]


class Workspace(SearchService):
    """A library's search service and its loop's jobs (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.library = Library(self)
        self.annotations = Annotations(self)
        self.models = Models(self)  # callable while ``workspace.models()`` is still called (transitional)
        self.search = Search(self)

    def retrain(self, options: RetrainOptions | None = None,
                on_event: Callable[[events.TrainerEvent], None] | None = None,
                on_output: Callable[[str], None] | None = None) -> Retrain:
        """The retraining job on this library (:class:`engine.loop.retrain.Retrain`): ``for p in job.run(cancel)``,
        then ``job.result``. ``polyseek retrain`` and the GUI's training dialog both run it."""
        return Retrain(self, options, on_event, on_output)

    def export_training_set(self, dest: Path | None = None, holdout: float = DEFAULT_HOLDOUT,
                            seed: int = 0) -> TrainingSet:
        """Write the retraining caption folder (default ``<library>/retrain/training-set``) and return its
        :class:`engine.loop.trainingset.TrainingSet`: split ``train`` = the annotated items not held aside plus every
        un-annotated item (A3VSE's D^u), split ``heldout`` = the held-aside annotated items, chosen from each
        item's content hash and ``seed`` so an item stays on its side across retrains."""
        dest = Path(dest) if dest is not None else training_set_dir(self.library_dir)
        return build_training_set(self.catalog, dest, holdout, seed)

    def evaluate_on(self, folder: Path, split: str | None, model: str | None = None,
                    distractors: Sequence[Path] = (), per_query: bool = False) -> RetrievalReport:
        """R@1/5/10 both ways and rsum of a registered model (None: zero-shot) on one split of a caption folder
        (:func:`engine.loop.evaluate.evaluate_on`; ``per_query``: with each query's rank)."""
        return evaluate_on(self, Path(folder), split, model, distractors, per_query=per_query)

    def compare_models(self, new_model: str, folder: Path, split: str | None, old_model: str | None = None,
                       seed: int = 0) -> ModelComparison:
        """A registered new model beside ``old_model`` (None: zero-shot) on the held-aside split of a retraining
        folder and the library's pseudo pairs, with the activation rule's decision
        (:func:`engine.loop.compare.compare_models`: the one rule the CLI and the GUI apply). Activates nothing."""
        return compare_models(self, new_model, old_model, Path(folder), split, seed)

    def suggest_annotations(self, n: int = 20, policy: str = "auto") -> list[tuple[int, float]]:
        """``(media_id, score)`` of the un-annotated items to annotate next, best first: ``uncertainty`` (the
        active PCME model's sigma), ``disagreement`` (the active model's K >= 2 heads), ``random``, or ``auto``
        (the first of these that applies); see :func:`engine.loop.suggest.suggest`."""
        return suggest(self.catalog, self.active_trained(), n, policy)

    def suggestion_policy(self, policy: str = "auto") -> str:
        """The policy :meth:`suggest_annotations` applies for ``policy`` now (``auto`` resolved against the active
        model: ``uncertainty``, ``disagreement`` or ``random``), so a list of suggestions can say why its order."""
        return resolve_policy(self.active_trained(), policy)

    def export_annotations(self, dest: Path, fmt: str = "folder") -> int:
        """Write the library's annotations (captions with their provenance, accepted and rejected pairs with their
        queries) as a caption folder (``folder``) or a COCO JSON (``coco``); returns the number of captions written
        (:class:`engine.loop.annotations.AnnotationCounts`: also the pairs, and ``skipped``, the annotated items a
        caption folder could not link because their files are missing or offline)."""
        return export_annotations(self.catalog, Path(dest), fmt)

    def import_annotations(self, path: Path) -> int:
        """Put the annotations of a caption folder or COCO JSON on the matching items, with the provenance the file
        gives (a third party's captions: ``imported``); returns how many captions were added
        (:class:`engine.loop.annotations.AnnotationCounts`: also the pairs). An annotation snapshot
        (:mod:`engine.library.catalog.snapshots`) is restored instead, with its provenance and pairs
        (:meth:`restore_snapshot`)."""
        from engine.library.catalog import snapshots

        if snapshots.is_snapshot_file(Path(path)):
            return self.restore_snapshot(Path(path)).captions
        return import_annotations(self.catalog, Path(path))


# -- the parts (issue #45): the workspace's face, one job each -------------------------------------------------
# Transitional: each part forwards to the workspace's methods of today; the parts are the API the CLI, the GUI and
# the tests move to, and the workspace's own forwarding methods go once nothing calls them.


class Library:
    """The library's folders, their indexing and items, browsing and pictures of items."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws

    def roots(self) -> list[Path]:
        return self._ws.roots()

    def add_root(self, path: Path) -> None:
        self._ws.add_root(path)

    def root_summary(self, path: Path) -> tuple[int, int, int]:
        return self._ws.root_summary(path)

    def remove_root(self, path: Path) -> Path | None:
        return self._ws.remove_root(path)

    def index(self, paths: list[Path] | None = None, cancel: CancelToken | None = None) -> Iterator[Progress]:
        return self._ws.index_paths(paths, cancel)

    def offline_roots(self) -> list:
        return self._ws.offline_roots()

    def counts(self) -> dict[str, int]:
        return self._ws.counts()

    def failures(self) -> list[tuple[str, str]]:
        return self._ws.failures()

    def assets_ready(self) -> bool:
        return self._ws.assets_ready()

    def media(self, media_id: int):
        return self._ws.media(media_id)

    def details(self, media_id: int) -> MediaDetails:
        return self._ws.media_details(media_id)

    def item(self, media_id: int) -> SearchHit:
        return self._ws.item(media_id)

    def browse(self, top: int = 60, offset: int = 0, sort: str = "newest", folder: Path | None = None,
               kind: str | None = None, annotation: str = "all") -> list[SearchHit]:
        return self._ws.browse(top, offset, sort, folder, kind, annotation)

    def browse_count(self, folder: Path | None = None, kind: str | None = None, annotation: str = "all") -> int:
        return self._ws.browse_count(folder, kind, annotation)

    def thumbnail(self, media_id: int, size: int = 256) -> Path:
        return self._ws.thumbnail(media_id, size)

    def preview_frames(self, media_id: int, n: int = 8) -> list[Path]:
        return self._ws.preview_frames(media_id, n)

    def file_thumbnail(self, path: Path, size: int = 256) -> Path:
        return self._ws.file_thumbnail(path, size)

    def missing_summary(self) -> tuple[int, int, int]:
        return self._ws.missing_summary()

    def purge_missing(self) -> tuple[int, int, int, Path | None]:
        return self._ws.purge_missing()


class Annotations:
    """What the user wrote: captions, accepted / rejected pairs, snapshots, transfer, what to annotate next."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws

    def captions(self, media_id: int) -> list:
        return self._ws.captions(media_id)

    def add_caption(self, media_id: int, text: str) -> int:
        return self._ws.add_caption(media_id, text)

    def update_caption(self, caption_id: int, text: str) -> None:
        self._ws.update_caption(caption_id, text)

    def delete_caption(self, caption_id: int) -> None:
        self._ws.delete_caption(caption_id)

    def accept_pair(self, query: str, media_id: int) -> int:
        return self._ws.accept_pair(query, media_id)

    def reject_pair(self, query: str, media_id: int) -> int:
        return self._ws.reject_pair(query, media_id)

    def delete_pair(self, pair_id: int) -> None:
        self._ws.delete_pair(pair_id)

    def states(self, media_ids: list[int], query: str | None = None) -> dict[int, Any]:
        return self._ws.annotation_states(media_ids, query)

    def progress(self) -> Any:
        return self._ws.annotation_progress()

    def version(self) -> tuple:
        return self._ws.annotation_version()

    def snapshots(self) -> list[Path]:
        return self._ws.annotation_snapshots()

    def restore_snapshot(self, path: Path):
        return self._ws.restore_snapshot(path)

    def export(self, dest: Path, fmt: str = "folder") -> int:
        return self._ws.export_annotations(dest, fmt)

    def import_file(self, path: Path) -> int:
        return self._ws.import_annotations(path)

    def suggest(self, n: int = 20, policy: str = "auto") -> list[tuple[int, float]]:
        return self._ws.suggest_annotations(n, policy)

    def suggestion_policy(self, policy: str = "auto") -> str:
        return self._ws.suggestion_policy(policy)


class Models:
    """The library's models: the list, activation (the one place a model becomes active), registering, renaming,
    deleting, re-embedding, and the retraining job with its measurements."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws

    def __call__(self) -> list[ModelInfo]:  # transitional: ``workspace.models()`` of today
        return self.all()

    def all(self) -> list[ModelInfo]:
        return SearchService.models(self._ws)

    def activate(self, name: str | None) -> None:
        self._ws.set_active_model(name)

    def switch(self, name: str, cancel: CancelToken | None = None) -> Iterator[Progress]:
        return self._ws.switch_model(name, cancel)

    def use_here(self, name: str | None) -> None:
        self._ws.search_with_model(name)

    def register(self, model_dir: Path, name: str | None = None) -> str:
        return self._ws.register_model(model_dir, name)

    def rename(self, name: str, new_name: str) -> None:
        self._ws.rename_model(name, new_name)

    def delete(self, name: str) -> None:
        self._ws.delete_model(name)

    def reindex(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        return self._ws.reindex(cancel)

    def active_trained(self):
        return self._ws.active_trained()

    def retrain(self, options: RetrainOptions | None = None,
                on_event: Callable[[events.TrainerEvent], None] | None = None,
                on_output: Callable[[str], None] | None = None) -> Retrain:
        return self._ws.retrain(options, on_event, on_output)

    def training_set(self, dest: Path | None = None, holdout: float = DEFAULT_HOLDOUT, seed: int = 0) -> TrainingSet:
        return self._ws.export_training_set(dest, holdout, seed)

    def evaluate(self, folder: Path, split: str | None, model: str | None = None,
                 distractors: Sequence[Path] = (), per_query: bool = False) -> RetrievalReport:
        return self._ws.evaluate_on(folder, split, model, distractors, per_query)

    def compare(self, new_model: str, folder: Path, split: str | None, old_model: str | None = None,
                seed: int = 0) -> ModelComparison:
        return self._ws.compare_models(new_model, folder, split, old_model, seed)


class Search:
    """Queries: a sentence, an example picture or clip, why an item ranked, the first search's warm-up."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws

    def text(self, text: str, top: int = 60, offset: int = 0, min_probability: float | None = None,
             kind: str | None = None, folder: Path | None = None) -> list[SearchHit]:
        return self._ws.search_text(text, top, offset, min_probability, kind, folder)

    def rank_text(self, text: str):
        return self._ws.rank_text(text)

    def example(self, path: Path, top: int = 60, offset: int = 0, kind: str | None = None,
                folder: Path | None = None, exclude_example: bool = False) -> list[SearchHit]:
        return self._ws.search_media(path, top, offset, kind, folder, exclude_example)

    def explain(self, query: str | Path, media_id: int) -> Explanation:
        return self._ws.explain(query, media_id)

    def carries_evidence(self, text: str) -> bool:
        return self._ws.query_carries_evidence(text)

    def warm(self, cancel: CancelToken | None = None) -> bool:
        return self._ws.warm_search(cancel)
