"""The activation rule of the library loop: whether a new model, measured beside the active one, replaces it (the one
rule the CLI's retrain and the GUI's training dialog apply). Measuring both models is :mod:`engine.loop.compare`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from engine.loop.interval import BETTER, RsumInterval, report_interval
from engine.loop.trainingset import MIN_HELDOUT_ITEMS
from engine.trainercontract.reports import RetrievalReport

MIN_HELDOUT_ALONE = 10  # held-aside items the gate needs when they are its only measure
PSEUDO_TOLERANCE = 12.0  # rsum a retrain may lose on the pseudo pairs (noisy labels): 2 points of mean recall


class Measure(StrEnum):
    """The sets the rule measures both models on (a :class:`GateCheck`'s ``measure``)."""

    HELDOUT = "heldout"  # the held-aside annotations, searched among the check set's items
    PSEUDO = "pseudo"  # the library's pseudo pairs (:func:`engine.loop.trainingset.pseudo_check_set`)


def mean_r10(report: RetrievalReport | Mapping[str, Any]) -> float:
    """The mean of text->item and item->text R@10 of a retrieval report."""
    return RetrievalReport.from_dict(report).mean_r10


@dataclass(frozen=True, slots=True)
class GateCheck:
    """One measure of the rule: both models' rsum on a set, the rsum the new one may lose there (``tolerance``: on
    the pseudo pairs; 0 on the held-aside annotations, where its whole interval must lie above the old one's),
    whether it passed, and the words the decision says of it."""

    measure: Measure
    passed: bool
    old_rsum: float
    new_rsum: float
    tolerance: float
    items: int
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"measure": str(self.measure), "passed": self.passed, "old_rsum": self.old_rsum,
                "new_rsum": self.new_rsum, "tolerance": self.tolerance, "items": self.items, "text": self.text}

    @classmethod
    def from_dict(cls, data: Any) -> GateCheck:
        """Its JSON form read back; ``ValueError`` names what does not fit."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a gate check must be an object, got {data!r}")
        try:
            return cls(Measure(data["measure"]), bool(data["passed"]), float(data["old_rsum"]),
                       float(data["new_rsum"]), float(data["tolerance"]), int(data["items"]), str(data["text"]))
        except KeyError as exc:
            raise ValueError(f"a gate check has no {exc.args[0]!r}") from None


@dataclass(frozen=True, slots=True)
class GateDecision:
    """What :func:`gate` decided: whether the new model is activated, why in one line (``text``: what
    ``polyseek retrain`` prints and the training dialog shows), and the measures it rested on (none: too little
    to compare)."""

    activated: bool
    text: str
    checks: tuple[GateCheck, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``polyseek retrain --json``'s ``gate``)."""
        return {"activated": self.activated, "text": self.text, "checks": [c.as_dict() for c in self.checks]}

    @classmethod
    def from_dict(cls, data: Any) -> GateDecision:
        """Its JSON form read back; ``ValueError`` names what does not fit."""
        if not isinstance(data, Mapping) or not isinstance(data.get("activated"), bool) \
                or not isinstance(data.get("text"), str) or not isinstance(data.get("checks", []), list):
            raise ValueError(f"not a gate decision: {data!r}")
        return cls(data["activated"], data["text"], tuple(GateCheck.from_dict(c) for c in data.get("checks", [])))


def gate(result: ModelComparison) -> GateDecision:
    """Whether a retrained model replaces the active one, and why, as one line (:class:`GateDecision`).

    The rule: the new model is activated when it is BETTER on the held-aside annotations (at least
    :data:`MIN_HELDOUT_ITEMS` items, :data:`MIN_HELDOUT_ALONE` when there is no pseudo-pair check): the paired-bootstrap
    interval of its rsum difference (R@1+R@5+R@10 both ways, :mod:`engine.loop.interval`, measured by
    :func:`engine.loop.compare.compare_models`) lies wholly above zero; AND its rsum on the library's pseudo pairs
    (:func:`pseudo_check_set`; not measured when the old ranking is zero-shot, which wrote those captions) is not
    below the old one's by more than :data:`PSEUDO_TOLERANCE` (a guard against a collapse: a retrain that trains on
    pseudo pairs gains there whatever it learns, so that check cannot say "better"). Without held-aside items, or
    without per-query ranks to bootstrap, nothing says the new model is better and it is not activated. A model that
    is not activated stays registered (``polyseek models --activate NAME`` uses it).

    Why "better" and not "not worse" (issue #43, docs/benchmarks.md "the user's loop"): on a few dozen held-aside
    items "not worse within one query slipping each way" let through retrains after which the library's other
    photos lost 0.7-2 rsum (three of ten user-loop runs), while every retrain whose interval lay above zero (the
    user's own words; Flickr8k dev N = 100 in session 33) also helped the other photos. The product's promise is
    that a retrain never makes search worse; a retrain that cannot be told from its start gives the user nothing
    but that risk.
    """
    result.parse_reports()
    before, after, pseudo_before, pseudo_after = result.before, result.after, result.pseudo_before, result.pseudo_after
    checks: list[GateCheck] = []
    pseudo = pseudo_before is not None and pseudo_after is not None
    # fewer than 3 items: R@K moves 33+ points an item; alone (no pseudo-pair check, i.e. from zero-shot
    # ranking), a set needs 10 items: on 4, a model with a tenth of zero-shot's library-wide rsum passed
    least = MIN_HELDOUT_ITEMS if pseudo else MIN_HELDOUT_ALONE
    if before is not None and after is not None and after.n_media >= least:
        old, new, items = before.rsum, after.rsum, after.n_media
        interval = result.heldout_interval or report_interval(before, after)  # measured, or from their ranks
        better = interval is not None and interval.verdict == BETTER
        r10 = f"R@10 {before.mean_r10:.0f} -> {after.mean_r10:.0f}"
        stated = _stated(interval) if interval is not None else ", no per-query ranks to tell a difference by"
        checks.append(GateCheck(Measure.HELDOUT, better, old, new, 0.0, items,
                                f"held-aside rsum {old:.0f} -> {new:.0f} on {items} items ({r10}){stated}"))
    if pseudo_before is not None and pseudo_after is not None:
        old, new = pseudo_before.rsum, pseudo_after.rsum
        checks.append(GateCheck(Measure.PSEUDO, new >= old - PSEUDO_TOLERANCE, old, new, PSEUDO_TOLERANCE,
                                pseudo_after.n_media,
                                f"pseudo-pair rsum {old:.0f} -> {new:.0f}{_stated(result.pseudo_interval)}"))
    name, old_name = result.model_name, result.old_model or "zero-shot"
    if not any(check.measure is Measure.HELDOUT for check in checks):
        return GateDecision(False, f"not activated: too little to compare {name} with (fewer than {least} annotated "
                                   f"items held aside{'' if pseudo else ', and no pseudo pairs to check'}); "
                                   f"`polyseek models --activate {name}` uses it", tuple(checks))
    measured = ", ".join(check.text for check in checks)
    if all(check.passed for check in checks):
        return GateDecision(True, f"activated {name}: better than {old_name}: {measured}", tuple(checks))
    failed = [check for check in checks if not check.passed]
    why = "; ".join(f"{check.text}: {_FAILED[check.measure]} {old_name}" for check in failed)
    return GateDecision(False, f"not activated: {why}; {name} is kept, `polyseek models --activate {name}` uses it",
                        tuple(checks))


_FAILED = {Measure.HELDOUT: "not shown better than", Measure.PSEUDO: "worse than"}


def _stated(interval: RsumInterval | None) -> str:
    """", difference +13 (90 % interval -20..+41: cannot tell)", or "" when not measured."""
    return f", {interval.text()}" if interval is not None else ""


_REPORTS = ("before", "after", "pseudo_before", "pseudo_after")


@dataclass
class ModelComparison:
    """A new model measured beside the active one, and the gate's decision
    (:func:`engine.loop.compare.compare_models`). The intervals (:meth:`measure_intervals`) are None unless both
    reports of a set carry per-query ranks. A report given in its JSON form (a stand-in evaluation's) is parsed
    (:class:`~engine.trainercontract.metrics.RetrievalReport`)."""

    model_name: str
    old_model: str | None
    before: RetrievalReport | None = None
    after: RetrievalReport | None = None
    pseudo_before: RetrievalReport | None = None
    pseudo_after: RetrievalReport | None = None
    activated: bool = False
    decision: str = ""  # the verdict's text
    warnings: list[str] = field(default_factory=list)
    heldout_interval: RsumInterval | None = None  # new - old rsum on the held-aside annotations, with its interval
    pseudo_interval: RsumInterval | None = None  # the same on the library's pseudo pairs
    verdict: GateDecision | None = None  # what :meth:`decide` found

    def __post_init__(self) -> None:
        self.parse_reports()

    def parse_reports(self) -> None:
        """Each report given in its JSON form, parsed (:meth:`RetrievalReport.from_dict`)."""
        for name in _REPORTS:
            report = getattr(self, name)
            if report is not None and not isinstance(report, RetrievalReport):
                setattr(self, name, RetrievalReport.from_dict(report, name))

    def measure_intervals(self) -> None:
        """The paired-bootstrap intervals (:func:`engine.loop.interval.report_interval`) of both measures, where
        both of its reports carry per-query ranks of the same set; the reports then drop those ranks (the intervals
        summarise them; the reports go on into ``polyseek retrain --json`` and the dialog as the ``evaluate``
        record)."""
        self.parse_reports()
        self.heldout_interval = report_interval(self.before, self.after)
        self.pseudo_interval = report_interval(self.pseudo_before, self.pseudo_after)
        for name in _REPORTS:
            report = getattr(self, name)
            if report is not None:
                setattr(self, name, report.without_ranks())

    def decide(self) -> GateDecision:
        """Apply :func:`gate`: ``verdict``, ``activated`` and ``decision`` say what it found."""
        self.verdict = gate(self)
        self.activated, self.decision = self.verdict.activated, self.verdict.text
        return self.verdict
