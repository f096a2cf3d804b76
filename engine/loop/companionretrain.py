"""A retrain's second run: the start's companion (:mod:`engine.search.companion`) retrained beside the model (issue
#42: "retraining warm-starts each shipped model it retrains and keeps the gate").

:class:`engine.loop.retrain.Retrain` starts the trainer on the same training set, warm-started from the start's
companion, into the new model's ``companion`` folder, and then the companion's own (the probabilistic one) into that
folder's ``companion``; :func:`companion_progress` turns each run's events into one stage's progress;
:func:`judge_companion` measures each beside the start's by the model's rule and keeps it only when the rule would
activate it, else the new version keeps the start's (:func:`carry_companion`). The probabilistic one is judged
only beside a kept heads companion (it searches as that one's companion).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from engine.library.catalog import CatalogError
from engine.loop.compare import compare_models, measure_models
from engine.loop.errors import RetrainError
from engine.loop.evaluate import evaluate_on
from engine.loop.gate import Measure, ModelComparison
from engine.progress import Cancelled, Progress
from engine.search.companion import CompanionSpec, carry_companion, read_companion, write_companion
from engine.search.modelrunner import ModelLoadError
from engine.state import LibraryState
from engine.trainercontract import events
from engine.trainercontract.runfolder import has_weights

log = logging.getLogger(__name__)

# The companion's run keeps the later of two epochs with the same validation rsum: on a few held-aside captions its
# rsum stopped moving after epoch 1, and that epoch was all it kept (docs/benchmarks.md, "A retrain retrains the
# companion too"). The model's run keeps session 22's recipe: on Flickr8k dev its best epoch was the last either way,
# and on the train slice, with it, ordinary searches read 74.3 against session 22's 76.7 without (names 60.2 / 57.6).
COMPANION_ARGS: tuple[str, ...] = ("--later-ties",)


def companion_stage(role: str) -> str:
    """What the training dialog's status line and the job's progress call a companion's run."""
    return f"training the {role} model"


def retrainable_companion(start: Path | None) -> CompanionSpec | None:
    """The companion of the model a retrain starts from, when it has the trainer weights a warm start needs (the
    shipped starter's does); None: no companion, or one shipped as ONNX only (then it is carried as it is)."""
    spec = read_companion(start) if start is not None else None
    return spec if spec is not None and has_weights(spec.folder) else None


@dataclass
class CompanionRetrain:
    """The start's companion retrained beside the model (issue #42: a retrain warm-starts each shipped model and
    keeps the gate): the same training set and warm-start recipe, measured and judged by the same rule as the model,
    against the start's companion. ``kept``: the new version searches with it; otherwise with the start's."""

    start: Path  # the companion folder it warm-started from
    method: str
    folder: Path  # the new model's own companion folder
    role: str = "heads"  # CompanionSpec.role: "heads" (the model's companion), "uncertainty" (the companion's)
    name: str | None = None  # its registration in the library (removed again when it is not kept)
    old_name: str | None = None  # the start's companion's registration
    comparison: ModelComparison | None = None
    kept: bool = False
    decision: str = ""
    further: CompanionRetrain | None = None  # the companion's own companion, retrained beside it

    def as_dict(self) -> dict[str, Any]:
        found = self.comparison

        def plain(value: Any) -> dict[str, Any] | None:
            return value.as_dict() if value is not None else None

        return {"method": self.method, "role": self.role, "start": str(self.start), "folder": str(self.folder),
                "name": self.name, "further": self.further.as_dict() if self.further is not None else None,
                "old_name": self.old_name, "kept": self.kept, "decision": self.decision,
                "before": plain(found.before if found else None), "after": plain(found.after if found else None),
                "heldout_interval": plain(found.heldout_interval if found else None),
                "pseudo_interval": plain(found.pseudo_interval if found else None)}

    def line(self) -> str:
        """One sentence for a terminal and the training dialog."""
        said = f" ({self.decision})" if self.decision else ""
        then = f"; {self.further.line()}" if self.further is not None else ""
        if self.kept:
            return f"the {self.role} model ({self.method}) was retrained with it and is kept{said}{then}"
        return f"the {self.role} model ({self.method}) was retrained with it but is not kept{said}; the new " \
               "version searches with its start's"


def companion_reasons(found: ModelComparison) -> str:
    """The rule's measures on the two companions, in the words of a companion kept or not (a companion is never
    "activated": it searches beside whichever version is)."""
    checks = found.verdict.checks if found.verdict is not None else ()
    if not checks:
        return "too little to compare it with the start's"
    failed = [check for check in checks if not check.passed]
    if any(check.measure is Measure.PSEUDO for check in failed):
        return "worse than the start's: " + ", ".join(check.text for check in failed)
    if failed:
        return "not shown better than the start's: " + ", ".join(check.text for check in failed)
    return "better than the start's: " + ", ".join(check.text for check in checks)


def companion_progress(stream: Iterator[events.TrainerEvent], on_event: Callable[[Any], None], start: CompanionSpec,
                       method: str, folder: Path, epochs: int,
                       warnings: list[str]) -> Iterator[Progress]:
    """Follow the companion's trainer run (``stream``, its events): each step or epoch reaches ``on_event`` as one
    stage's progress (:func:`companion_stage`; the dialog's curve stays the model's). Returns the
    :class:`CompanionRetrain` (the generator's value); None when the run failed (``warnings`` says so, the new
    version keeps the start's); a cancelled run leaves nothing behind and re-raises."""
    try:
        for event in stream:
            if isinstance(event, events.Step | events.EpochEnd):
                done = event.epoch if isinstance(event, events.EpochEnd) else event.epoch - 1
                said = f"epoch {min(done + 1, epochs)} of {epochs}"
                stage = events.StageProgress(companion_stage(start.role), done, epochs, said)
                on_event(stage)
                yield Progress(done, epochs, f"{stage.stage}: {stage.message}")
    except Cancelled:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    except RetrainError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        warnings.append(f"the {start.role} model ({method}) could not be retrained ({exc}); the new version "
                        "searches with its start's")
        return None
    finally:
        stream.close()  # type: ignore[attr-defined]
    return CompanionRetrain(start.folder, method, folder, start.role)


def judge_companion(state: LibraryState, companion: CompanionRetrain, model_name: str, old_model: str | None,
                    start: Path | None, model_dir: Path, heldout: tuple[Path, str | None] | None,
                    folder_split: tuple[Path, str], seed: int) -> list[str]:
    """Measure the retrained companion and the start's the way the models were measured (registered as the new
    model's companion, :meth:`LibraryState.companion_record`), on the training set's held-aside split (``heldout``:
    its folder and split) or, for a caption folder's run (``heldout`` None), on ``folder_split``; keep the new one
    only when the rule would activate it (a caption folder's run: kept, its figures stated). Returns warnings."""
    new_spec = CompanionSpec(companion.folder.resolve(), companion.role)
    old_spec = read_companion(start) if start else None
    try:
        record, _ = state.companion_record(new_spec, model_name)
        companion.name = record.name
        if old_spec is not None:
            companion.old_name = state.companion_record(old_spec, old_model or "start")[0].name
        if heldout is None:
            found = measure_models(partial(evaluate_on, state), companion.name, companion.old_name, *folder_split)
        else:
            found = compare_models(state, companion.name, companion.old_name, heldout[0], heldout[1], seed)
    except (OSError, LookupError, ValueError, RetrainError, CatalogError, ModelLoadError) as exc:
        _drop(state, companion, start, model_dir, f"not measured: {exc}")
        return [f"the retrained heads model could not be measured ({exc})"]
    companion.comparison = found
    if heldout is None:
        _keep(companion, model_dir, "a caption folder's run: yours to judge")
    elif found.activated:
        _keep(companion, model_dir, companion_reasons(found))
    else:
        _drop(state, companion, start, model_dir, companion_reasons(found))
    warnings = list(found.warnings)
    further = companion.further
    if further is not None and companion.kept:  # judged as the kept companion's companion, against the start's own
        warnings += judge_companion(state, further, model_name, old_model, companion.start, companion.folder,
                                    heldout, folder_split, seed)
    elif further is not None:  # its folder went with the companion's
        further.kept, further.decision = False, f"its {companion.role} model is not kept"
    return warnings


def keep_untrained_companion(companion: CompanionRetrain, model_dir: Path) -> None:
    """No library to measure it in (a caption folder's run without one): it stays with the run it belongs to, and
    so does its own."""
    _keep(companion, model_dir, "no library to measure it in")
    if companion.further is not None:
        _keep(companion.further, companion.folder, "no library to measure it in")


def _keep(companion: CompanionRetrain, model_dir: Path, why: str) -> None:
    """The retrained companion searches beside the new version, with its start's own companion (the probabilistic
    one, not retrained) beside it as before."""
    carry_companion(companion.start, companion.folder)  # the start's own companion, until its retrain is judged
    write_companion(model_dir, CompanionSpec(companion.folder, companion.role))
    companion.kept, companion.decision = True, why


def _drop(state: LibraryState, companion: CompanionRetrain, start: Path | None, model_dir: Path, why: str) -> None:
    """The retrained companion is not kept: unregistered and removed; the new version keeps the start's."""
    if companion.name is not None:
        try:
            state.catalog.delete_model(companion.name)
        except CatalogError as exc:
            log.warning("could not unregister %s (%s)", companion.name, exc)
        companion.name = None
    shutil.rmtree(companion.folder, ignore_errors=True)
    carry_companion(start, model_dir)
    companion.kept, companion.decision = False, why
