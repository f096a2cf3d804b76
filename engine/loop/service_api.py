"""What the library loop needs of the search service, as a structural type.

The loop's jobs (retraining, judging a new model, evaluating one, offering the starter) drive the one
:class:`engine.service.SearchService` of a library, and the service offers them to the CLI and the GUI
(``SearchService.judge_model``, ``evaluate_on``, ...). So that the loop sits below the service, as the layers
in ``pyproject.toml`` say, it names the service's members it uses here instead of importing it; tests may hand
it anything with these members.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from engine.features.encoders import Encoders
    from engine.features.featurestore import FeatureStore
    from engine.library.catalog import Catalog
    from engine.loop.gate import Judgement
    from engine.loop.trainingset import TrainingSet
    from engine.progress import CancelToken, Progress
    from engine.types import ModelInfo


class LoopService(Protocol):
    """The members of :class:`engine.service.SearchService` the library loop calls."""

    name: str
    catalog: Catalog
    features: FeatureStore
    encoders: Encoders
    library_dir: Path

    def models(self) -> list[ModelInfo]: ...

    def register_model(self, model_dir: Path, name: str | None = None) -> str: ...

    def set_active_model(self, name: str | None) -> None: ...

    def reindex(self, cancel: CancelToken | None = None) -> Iterator[Progress]: ...

    def export_training_set(self, dest: Path | None = None, holdout: float = 0.2, seed: int = 0) -> TrainingSet: ...

    def evaluate_on(self, folder: Path, split: str, model: str | None = None,
                    distractors: Sequence[Path] = ()) -> dict[str, Any]: ...

    def judge_model(self, new_model: str, folder: Path, split: str | None, old_model: str | None = None,
                    seed: int = 0) -> Judgement: ...
