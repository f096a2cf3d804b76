"""The one definition of the figure the training dialog and the model manager show of a model: rsum on a stated set.

A figure is ``rsum`` (R@1 + R@5 + R@10 both ways, :func:`engine.trainercontract.metrics.retrieval_report`, 0-600)
with what it was measured on: the set (its name), how many items and captions, how many items a caption's item
was searched among, and how the items were ranked (``search``: the model beside the zero-shot semantics, as the app
ranks, :func:`engine.loop.evaluate.evaluate_trained`; ``model alone``: the trainer's own check). Two figures compare
only when all of that is the same (:meth:`Figure.same_measure`); every view says the set beside the number.

The floor. Under :data:`MIN_MEANINGFUL_ITEMS` items a figure is "not meaningful yet" and no comparison is made:
R@K on n items moves in steps of 100/n points per caption, and a ranking that knows nothing already scores
about ``100 * sum(min(1, K/n))`` per direction (:func:`chance_rsum`): on 3 items that is 467 of 600, so 533 and
533 say nothing about either model. At 30 items chance is down to 107 (under a fifth of the scale), one item
moves R@K by 3.3 points, and R@10 no longer holds a third of the set by construction; below about 20 chance is
over a quarter of the scale and R@10 covers half the set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.trainercontract.reports import ReportError, RetrievalReport
from engine.trainercontract.runfolder import CheckpointError, TrainerMetrics

MIN_MEANINGFUL_ITEMS = 30
KS = (1, 5, 10)
SEARCH = "ranked as the app searches"  # the model beside the zero-shot semantics
MODEL_ALONE = "the model alone"  # the trainer's check: the model's own scores


def chance_rsum(items: int, candidates: int | None = None, ks: Sequence[int] = KS) -> float:
    """The rsum a ranking that knows nothing scores on ``items`` items (item-to-text, approximated by one caption
    group per item) and text-to-item among ``candidates`` (default ``items``): ``100 * sum(min(1, K / n))`` for
    each direction."""
    n = max(1, int(items))
    pool = max(n, int(candidates or n))
    return 100.0 * sum(min(1.0, k / n) + min(1.0, k / pool) for k in ks)


@dataclass(frozen=True, slots=True)
class Figure:
    """A model's rsum on a stated set (the module docstring); ``set_name`` says which items, e.g. "held-aside
    annotations of this library" or "split “dev” of flickr-mini"."""

    rsum: float
    items: int
    captions: int
    set_name: str
    candidates: int | None = None  # text-to-item searched among this many items (None: ``items``)
    ranking: str = SEARCH

    @property
    def meaningful(self) -> bool:
        """Whether the set is large enough for R@K to mean something (:data:`MIN_MEANINGFUL_ITEMS`)."""
        return self.items >= MIN_MEANINGFUL_ITEMS

    @property
    def chance(self) -> float:
        """What a ranking that knows nothing scores here (:func:`chance_rsum`)."""
        return chance_rsum(self.items, self.candidates)

    def where(self) -> str:
        """"3 items (15 captions) of the held-aside annotations of this library, searched among 43"."""
        among = f", searched among {self.candidates:,}" if self.candidates and self.candidates > self.items else ""
        return (f"{self.items:,} item{'s' if self.items != 1 else ''} ({self.captions:,} caption"
                f"{'s' if self.captions != 1 else ''}) of {self.set_name}{among}, {self.ranking}")

    def text(self) -> str:
        """The figure with its set, or "not meaningful yet" with why: what every view shows for one model."""
        if not self.meaningful:
            return (f"not meaningful yet: {self.items} item{'s' if self.items != 1 else ''} of {self.set_name} "
                    f"(needs {MIN_MEANINGFUL_ITEMS}; chance alone scores rsum {self.chance:.0f} there)")
        return f"rsum {self.rsum:.1f} on {self.where()}"

    def same_measure(self, other: Figure | None) -> bool:
        """Whether ``other`` was measured on the same set, the same way (only then do the two compare)."""
        return other is not None and (self.set_name, self.items, self.captions, self.candidates, self.ranking) == (
            other.set_name, other.items, other.captions, other.candidates, other.ranking)


def report_figure(report: RetrievalReport | Mapping[str, Any] | None, set_name: str,
                  ranking: str = SEARCH) -> Figure | None:
    """The figure of a retrieval report (:class:`engine.trainercontract.metrics.RetrievalReport`: ``evaluate_on``,
    the trainer's ``metrics.json``; its JSON form is parsed); None without one or when it is not one."""
    if not report:
        return None
    try:
        report = RetrievalReport.from_dict(report)
    except ReportError:
        return None
    items, distractors = report.n_media, report.n_distractors or 0
    return Figure(report.rsum, items, report.n_captions, set_name, items + distractors if distractors else None,
                  ranking)


HELDOUT_SPLIT = "heldout"  # engine.loop.trainingset's split of the held-aside annotations


def model_figure(metrics: TrainerMetrics | Mapping[str, Any] | None) -> Figure | None:
    """A registered model's own figure: its trainer's ``metrics.json`` (the best epoch on the run's validation
    split, the model alone; :class:`engine.trainercontract.runfolder.TrainerMetrics`, or the record a catalog
    stored, parsed)."""
    if not metrics:
        return None
    if not isinstance(metrics, TrainerMetrics):
        try:
            metrics = TrainerMetrics.from_dict(metrics)
        except CheckpointError:
            return None
    split = metrics.split or ""
    name = ("the held-aside annotations it was trained beside" if split == HELDOUT_SPLIT
            else f"its validation split “{split}”" if split else "its validation data")
    return report_figure(metrics.report, name, MODEL_ALONE)


def comparison_text(old: Figure | None, new: Figure | None, old_name: str, new_name: str) -> str:
    """One line comparing two models: only on the same measure, only above the floor."""
    if new is None or old is None:
        return "The two models could not both be measured: no comparison."
    if not new.same_measure(old):
        return f"{old_name} and {new_name} were measured on different sets: their figures do not compare."
    if not new.meaningful:
        return (f"Not meaningful yet: only {new.items} item{'s' if new.items != 1 else ''} "
                f"({new.captions} caption{'s' if new.captions != 1 else ''}) of {new.set_name}. "
                f"Under {MIN_MEANINGFUL_ITEMS}, one item moves R@K by {100 / max(1, new.items):.0f} points and chance "
                f"alone scores rsum {new.chance:.0f} of 600: annotate more items and train again.")
    delta = new.rsum - old.rsum
    return (f"rsum {old.rsum:.1f} → {new.rsum:.1f} ({delta:+.1f}) on {new.where()}; chance alone scores "
            f"{new.chance:.0f}.")
