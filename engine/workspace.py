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

from collections.abc import Callable, Sequence
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
from engine.service import SearchService
from engine.trainercontract import events

__all__ = [
    "STOP_WAIT_S", "AnnotationCounts", "AnnotationError", "ModelComparison", "Retrain", "RetrainError",
    "RetrainOptions", "RetrainResult", "TrainerFailed", "Workspace", "planned_epochs",
]


class Workspace(SearchService):
    """A library's search service and its loop's jobs (see the module docstring)."""

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
                    distractors: Sequence[Path] = (), per_query: bool = False) -> dict[str, Any]:
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
