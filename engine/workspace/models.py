"""``Workspace.models``: the library's models. The list, registering, renaming, deleting, re-embedding the library,
the retraining job and the measurements it takes, and the one place a model becomes active for the user:
:meth:`Models.switch` (the model made active, then the library re-embedded with it). A retrain only decides and
reports (:class:`engine.loop.retrain.RetrainResult`'s ``activated``); ``polyseek retrain`` and the training dialog
both switch by :meth:`Models.adopt` / :meth:`Models.switch` afterwards, and watch its progress."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from engine.loop.compare import compare_models
from engine.loop.defaults import DEFAULT_HOLDOUT
from engine.loop.evaluate import evaluate_on
from engine.loop.gate import ModelComparison
from engine.loop.retrain import Retrain, RetrainOptions, RetrainResult
from engine.loop.trainingset import TrainingSet, build_training_set, training_set_dir
from engine.progress import CancelToken, Progress, staged
from engine.state import LibraryState
from engine.state.models import model_infos, register_model, registered_name, set_active_model
from engine.trainercontract import events
from engine.trainercontract.reports import RetrievalReport
from engine.types import ZERO_SHOT, ModelInfo
from engine.workspace.library import Library


class Models:
    """The library's models: the list, activation (the one place a model becomes active), registering, renaming,
    deleting, re-embedding, and the retraining job with its measurements."""

    def __init__(self, state: LibraryState, library: Library) -> None:
        self._state = state
        self._library = library  # re-embedding re-indexes the library's folders

    def all(self) -> list[ModelInfo]:
        """Zero-shot ranking first, then the registered models; each says whether its text searches give a match
        probability (:func:`engine.state.models.model_infos`)."""
        return model_infos(self._state)

    def activate(self, name: str | None) -> None:
        """Make a registered model (by name, or a model directory registered on the way), or zero-shot, the
        library's active model, without re-embedding (:meth:`switch` does both)."""
        set_active_model(self._state, name)

    def switch(self, name: str, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Make ``name`` the library's active model, then re-embed the library with it: a generator of progress
        records. The one way a new model is switched to (a retrain the rule accepts, :meth:`adopt`; the GUI's
        "Use it and re-index")."""
        self.activate(name)
        yield Progress(0, 0, f"{name} is the active model")
        for progress in self.reindex(cancel):
            yield staged(progress, f"re-indexing with {name}")

    def adopt(self, result: RetrainResult, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """What a finished retrain decided: :meth:`switch` to its new model when the rule (or ``always_activate``)
        activated it, else nothing (the new model stays registered, one switch away)."""
        if result.activated and result.model_name is not None:
            yield from self.switch(result.model_name, cancel)

    def use_here(self, name: str | None) -> None:
        """Search with this model (name, model directory or zero-shot) through this workspace only; the library's
        active model stays as it is (``polyseek search --model``). ``None`` goes back to it."""
        with self._state.lock:
            self._state.model_here = None if name is None else (registered_name(self._state, name),)
        self._state.invalidate()

    def register(self, model_dir: Path, name: str | None = None) -> str:
        """Register a model directory written by ``polyseek train --out`` (its ONNX export must be there)."""
        return register_model(self._state, model_dir, name)

    def rename(self, name: str, new_name: str) -> None:
        """Call a registered model ``new_name`` (its folder on disk keeps its name; its index moves along)."""
        new_name = " ".join(str(new_name).split())
        if new_name in ("", ZERO_SHOT):
            raise ValueError(f"{new_name!r} cannot be a model's name")
        self._state.catalog.rename_model(name, new_name)
        index = self._state.library_dir / "index"
        if (index / name).exists():
            shutil.rmtree(index / new_name, ignore_errors=True)  # left by nothing registered now
            os.replace(index / name, index / new_name)
        self._state.invalidate()

    def delete(self, name: str) -> None:
        """Forget a registered model (its vectors and index; the model directory itself is left alone)."""
        self._state.catalog.delete_model(name)
        shutil.rmtree(self._state.library_dir / "index" / name, ignore_errors=True)
        self._state.invalidate()

    def reindex(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Re-index every root (new, changed, moved and deleted files; interrupted work resumes), then embed
        every item with the active model."""
        if self._library.roots():
            yield from self._library.index(None, cancel)
        else:
            trained = self._state.active_trained()
            if trained is not None:
                yield from trained.sync(cancel)

    def active_trained(self):
        """The active model's search (:class:`engine.search.trained.TrainedSearch`), or None while zero-shot
        ranking is active."""
        return self._state.active_trained()

    def retrain(self, options: RetrainOptions | None = None,
                on_event: Callable[[events.TrainerEvent], None] | None = None,
                on_output: Callable[[str], None] | None = None) -> Retrain:
        """The retraining job on this library (:class:`engine.loop.retrain.Retrain`): ``for p in job.run(cancel)``,
        then ``job.result``, then :meth:`adopt` it. ``polyseek retrain`` and the GUI's training dialog both run
        it."""
        return Retrain(self._state, options, on_event, on_output)

    def training_set(self, dest: Path | None = None, holdout: float = DEFAULT_HOLDOUT, seed: int = 0) -> TrainingSet:
        """Write the retraining caption folder (default ``<library>/retrain/training-set``) and return its
        :class:`engine.loop.trainingset.TrainingSet`: split ``train`` = the annotated items not held aside plus every
        un-annotated item (A3VSE's D^u), split ``heldout`` = the held-aside annotated items, chosen from each
        item's content hash and ``seed`` so an item stays on its side across retrains."""
        dest = Path(dest) if dest is not None else training_set_dir(self._state.library_dir)
        return build_training_set(self._state.catalog, dest, holdout, seed)

    def evaluate(self, folder: Path, split: str | None, model: str | None = None,
                 distractors: Sequence[Path] = (), per_query: bool = False) -> RetrievalReport:
        """R@1/5/10 both ways and rsum of a registered model (None: zero-shot) on one split of a caption folder
        (:func:`engine.loop.evaluate.evaluate_on`; ``per_query``: with each query's rank)."""
        return evaluate_on(self._state, Path(folder), split, model, distractors, per_query=per_query)

    def compare(self, new_model: str, folder: Path, split: str | None, old_model: str | None = None,
                seed: int = 0) -> ModelComparison:
        """A registered new model beside ``old_model`` (None: zero-shot) on the held-aside split of a retraining
        folder and the library's pseudo pairs, with the activation rule's decision
        (:func:`engine.loop.compare.compare_models`: the one rule the CLI and the GUI apply). Activates nothing."""
        return compare_models(self._state, new_model, old_model, Path(folder), split, seed)
