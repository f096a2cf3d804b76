"""Measuring a new model beside the active one the same way (:func:`measure_models`), and with the activation rule
(:mod:`engine.loop.gate`) applied to the figures (:func:`compare_models`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from engine.library.captionfolder import load_caption_folder
from engine.loop.evaluate import Evaluate, evaluate_on
from engine.loop.gate import ModelComparison
from engine.loop.trainingset import pseudo_check_set
from engine.search.modelrunner import ModelLoadError
from engine.state import LibraryState
from engine.trainercontract.reports import RetrievalReport

log = logging.getLogger(__name__)


def _old_evaluator(evaluate: Evaluate, old_model: str | None,
                   out: ModelComparison) -> Callable[..., RetrievalReport | None]:
    """``evaluate`` for the old model: a broken old model must not block its successor (a warning, None)."""

    def old(on: Path, on_split: str | None, distractors: Sequence[Path] = ()) -> RetrievalReport | None:
        try:
            return evaluate(on, on_split, old_model, distractors)
        except (ModelLoadError, OSError, LookupError) as exc:
            out.warnings.append(f"the current model {old_model!r} could not be evaluated ({exc})")
            return None

    return old


def measure_models(evaluate: Evaluate, new_model: str, old_model: str | None, folder: Path,
                   split: str) -> ModelComparison:
    """A registered new model and the old one (None: zero-shot) on one split of a caption folder, by the same
    ``evaluate`` (:func:`engine.loop.evaluate.evaluate_on` on the library's state); no rule applies (a run on a
    caption folder of the user's own: they decide)."""
    out = ModelComparison(new_model, old_model)
    out.before = _old_evaluator(evaluate, old_model, out)(Path(folder), split)
    out.after = evaluate(Path(folder), split, new_model)
    out.parse_reports()
    return out


def compare_models(state: LibraryState, new_model: str, old_model: str | None, folder: Path, split: str | None,
                   seed: int = 0) -> ModelComparison:
    """Measure a registered new model and the old one (None: zero-shot) on the held-aside split of a training
    folder (``split`` None: nothing held aside) and on the library's pseudo pairs, then apply the rule
    (:meth:`ModelComparison.decide`, :func:`engine.loop.gate.gate`).
    The one evaluation path for the CLI's retrain and the GUI's training dialog; it activates nothing. Both
    models' reports keep their per-query ranks, so the gate states how sure each difference is
    (:meth:`ModelComparison.measure_intervals`)."""
    out = ModelComparison(new_model, old_model)
    evaluate = partial(evaluate_on, state, per_query=True)
    old = _old_evaluator(evaluate, old_model, out)
    pseudo = (pseudo_check_set(state.catalog, Path(folder).parent / "pseudo-check", seed)
              if old_model is not None else None)  # zero-shot wrote the pseudo captions itself
    if split is not None:
        # each held-aside caption searches its item among the other held-aside items and the check set's
        # un-annotated items, as a search runs in the library (a set of ten dog photos cannot show that a
        # new word for the dog was learnt; the same photos among a library's others can)
        distractors = [item.path for item in load_caption_folder(pseudo).items] if pseudo is not None else []
        out.before = old(folder, split, distractors)
        out.after = evaluate(folder, split, new_model, distractors)
    if pseudo is not None:
        out.pseudo_before = old(pseudo, None)
        if out.pseudo_before is not None:
            out.pseudo_after = evaluate(pseudo, None, new_model)
    out.measure_intervals()
    out.decide()
    return out
