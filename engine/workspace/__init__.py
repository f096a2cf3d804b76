"""``Workspace``: one library opened for the CLI and the GUI, the one object they talk to, made of four parts, each
with one job over the library's shared state (:class:`engine.state.LibraryState`):

- ``ws.library`` (:mod:`.library`): folders, indexing, items, browsing, pictures of items;
- ``ws.annotations`` (:mod:`.annotations`): captions and verdicts, snapshots, annotations in and out, what to
  annotate next;
- ``ws.models`` (:mod:`.models`): the model list, registering, renaming, deleting, the retraining job and its
  measurements, and switching to a model (the one place a model becomes active for the user);
- ``ws.search`` (:mod:`.search`): a sentence, an example file, why an item ranked, the first search's warm-up.

The workspace itself only opens and closes the library and says when it changed. The parts sit above the library
loop (:mod:`engine.loop`, the jobs they run: retrain, evaluate, compare, suggest, annotation transfer), which takes
the shared state directly and imports downward only, so a job reaches each room once (docs/architecture.md).

The loop's vocabulary the CLI and the GUI need (the job, its options and result, the trainer's failure) is
re-exported here, so neither reaches into :mod:`engine.loop` for a job.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.loop.annotations import AnnotationCounts
from engine.loop.errors import AnnotationError, RetrainError
from engine.loop.gate import ModelComparison
from engine.loop.retrain import Retrain, RetrainOptions, RetrainResult, planned_epochs
from engine.loop.trainerprocess import STOP_WAIT_S, TrainerFailed
from engine.state import LibraryState
from engine.state.models import offer_starter
from engine.workspace.annotations import Annotations
from engine.workspace.library import Library
from engine.workspace.models import Models
from engine.workspace.search import Search

__all__ = [
    "STOP_WAIT_S", "AnnotationCounts", "AnnotationError", "Annotations", "Library", "ModelComparison", "Models",
    "Retrain", "RetrainError", "RetrainOptions", "RetrainResult", "Search", "TrainerFailed", "Workspace",
    "planned_epochs",
]


class Workspace:
    """A library opened for the CLI and the GUI: its four parts (see the module docstring).

    ``state`` is the library's shared state, which the parts work on; the engine's own tools (tests, benchmarks,
    ``tools/``) reach it, the GUI never does (it is typed against the parts)."""

    def __init__(self, state: LibraryState) -> None:
        self.state = state
        self.library = Library(state)
        self.annotations = Annotations(state)
        self.models = Models(state, self.library)
        self.search = Search(state)

    @classmethod
    def open(cls, name: str = "default", assets: Path | None = None) -> Workspace:
        """The workspace of a named library under ``engine.paths.home()``; a new library searches with the
        shipped starter model (:mod:`engine.search.starter`)."""
        state = LibraryState.open(name, assets)
        offer_starter(state)
        return cls(state)

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def library_dir(self) -> Path:
        """The library's folder (its catalog, thumbnails, model indexes, training sets)."""
        return self.state.library_dir

    def close(self) -> None:
        self.state.close()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change this process commits to the library: folders, items, captions,
        verdicts, models and their embeddings (on the thread that wrote it; the GUI hops to its own). Returns
        the function that unsubscribes. The GUI's one view of the library's counts and results follows this
        (``app/state.py``), so no view depends on the writer remembering to refresh it."""
        return self.state.catalog.on_commit(listener)

    def version(self) -> tuple:
        """A value that changes with every change of the library this process or another one commits."""
        return self.state.catalog.version()
