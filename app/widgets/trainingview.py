"""What the training dialog shows: the method picker's descriptions, the run's position over all its epochs, and
the new model measured beside the one that was active (the retraining job's result, as a table)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.widgets.plaintext import plain_label, plain_tooltip
from engine.terms import MIN_MEANINGFUL_ITEMS, Figure, comparison_text, report_figure
from engine.types import ZERO_SHOT

METHODS = ("vse", "pvse", "pcme", "a3vse", "twobranch-embed", "twobranch-sim", "instance")
# One line per method for the picker, in a user's words. trainer/methods/registry.py holds the technical
# summaries, but importing it would load torch into the GUI; a test keeps both lists naming the same methods.
METHOD_DESCRIPTIONS = {
    "vse": "One vector per item and per sentence, hardest-negative triplet loss (VSE++): fast, a good default.",
    "pvse": "Several vectors per item (PVSE): one photo or clip can match different sentences about different "
            "parts of it.",
    "pcme": "Each item is a probability cloud (PCME): matches come with a probability and an uncertainty, so the "
            "p ≥ cutoff applies.",
    "a3vse": "Attention over regions, learns from a few captions plus your un-captioned items (A3VSE): made for a "
             "library's annotations.",
    "twobranch-embed": "Two-branch embedding network: ranking loss both ways with neighbourhood constraints.",
    "twobranch-sim": "Two-branch similarity network: a small network scores each sentence-item pair (logistic "
                     "loss).",
    "instance": "Dual-path network trained first to tell every item apart (instance loss), then to rank.",
}


@dataclass(slots=True)
class RunProgress:
    """Where a training run stands over all its epochs, from the trainer's events (the dialog's progress bar).

    The bar's value is ``epochs_done * steps_per_epoch + step`` of ``epochs * steps_per_epoch``, so it fills
    once over the whole run instead of once per epoch. The epoch length is learnt from the first step event and
    kept across a resume; until it is known every epoch counts as one step (a resume shows its finished epochs).
    """

    epochs: int
    epochs_done: int = 0
    step: int = 0  # steps done in the epoch after ``epochs_done``
    steps_per_epoch: int = 0  # 0: no step event seen yet
    known: bool = False  # whether any event has placed the run (the feature stage has the bar until then)

    def at_step(self, epoch: int, step: int, steps_per_epoch: int) -> None:
        """A step event: ``step`` of ``steps_per_epoch`` done in the 1-based ``epoch``."""
        self.epochs_done, self.step = max(0, epoch - 1), max(0, step)
        self.steps_per_epoch, self.known = max(1, steps_per_epoch), True

    def at_epoch_end(self, epoch: int) -> None:
        """An epoch event: ``epoch`` epochs are finished (and validated)."""
        self.epochs_done, self.step, self.known = max(0, epoch), 0, True

    def at_resume(self, epochs_done: int, step: int) -> None:
        """A resumed event: the checkpoint's finished epochs and the steps done of the next one."""
        self.epochs_done, self.step, self.known = max(0, epochs_done), max(0, step), True

    @property
    def epoch_count(self) -> int:
        """Epochs of the run: those asked for, or those already done by a resumed run that was asked for fewer."""
        return max(1, self.epochs, self.epochs_done)

    @property
    def total(self) -> int:
        """Steps of the whole run."""
        return self.epoch_count * max(1, self.steps_per_epoch)

    @property
    def done(self) -> int:
        """Steps done over the whole run."""
        per_epoch = max(1, self.steps_per_epoch)
        return min(self.total, self.epochs_done * per_epoch + min(self.step, per_epoch))

    @property
    def epoch(self) -> int:
        """The 1-based epoch being trained (after an epoch's end, that epoch until the next one starts)."""
        current = self.epochs_done + (1 if self.step > 0 or self.epochs_done == 0 else 0)
        return max(1, min(current, self.epoch_count))

    def label(self) -> str:
        """The bar's text, e.g. "epoch 3/12 · 41%" (``%p`` is QProgressBar's percentage)."""
        return f"epoch {self.epoch}/{self.epoch_count} · %p%"


def format_eta(seconds: float | None) -> str:
    """Seconds as "m:ss" or "h:mm:ss"; "—" when unknown."""
    if seconds is None or seconds < 0:
        return "—"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def describe_training_set(training_set: Any) -> str:
    """"42 annotated items with 97 captions · 9 of them held aside to compare models · 120 without captions"."""
    annotated, captions = int(training_set.n_annotated_items), int(training_set.n_captions)
    heldout, unannotated = int(training_set.n_heldout_items), int(training_set.n_unannotated)
    return (f"{annotated} annotated item{'s' if annotated != 1 else ''} with {captions} caption"
            f"{'s' if captions != 1 else ''} · {heldout} of them held aside to compare models · "
            f"{unannotated} item{'s' if unannotated != 1 else ''} without captions (used as un-annotated data)")


@dataclass(frozen=True, slots=True)
class Comparison:
    """The new model beside the model that was active, both measured by the engine on the same split."""

    new_name: str
    new: dict[str, Any]  # ``evaluate_on`` of the new model
    old_name: str
    old: dict[str, Any] | None  # ``evaluate_on`` of the active model; None when it could not be measured
    old_error: str | None
    data: Path
    split: str
    measured: bool = True  # False: nothing was held aside, so neither model could be measured fairly
    activated: bool = False  # the activation rule's decision (engine.loop.gate.gate, as `polyseek retrain`)
    decision: str = ""
    library: bool = False  # measured on the library's held-aside annotations (else a caption folder's split)
    heldout: int | None = None  # the library's held-aside items (None: a caption folder's split)
    interval: str = ""  # how sure the rsum differences are, in one line (RetrainResult.interval_line; "": not measured)
    companion: str = ""  # what became of the heads model retrained beside it (CompanionRetrain.line; "": none)

    @classmethod
    def of(cls, result: Any) -> Comparison:
        """The comparison a finished :class:`engine.loop.retrain.RetrainResult` holds (its typed reports in their
        JSON form, ``RetrievalReport.as_dict``, which is what this view reads)."""
        ts = result.training_set
        after = result.after.as_dict() if result.after is not None else {}
        before = result.before.as_dict() if result.before is not None else None
        return cls(str(result.model_name), after, result.old_model or ZERO_SHOT, before,
                   "; ".join(result.measure_warnings) or None, Path(result.data), str(result.val_split),
                   measured=ts is None or int(ts.n_heldout_items) > 0, activated=result.activated,
                   decision=result.decision, library=ts is not None,
                   heldout=int(ts.n_heldout_items) if ts is not None else None, interval=result.interval_line(),
                   companion=result.companion.line() if getattr(result, "companion", None) is not None else "")

    @property
    def set_name(self) -> str:
        """The set both models were measured on, as every figure names it."""
        return ("the held-aside annotations of this library" if self.library
                else f"split “{self.split}” of {self.data.name}")

    def figures(self) -> tuple[Figure | None, Figure | None]:
        """The old and the new model's figure (:mod:`engine.loop.figures`, the one definition the model manager
        shows too); None where a model was not measured."""
        if not self.measured:
            return None, None
        return report_figure(self.old, self.set_name), report_figure(self.new, self.set_name)

    @property
    def comparable(self) -> bool:
        """Both measured the same way on a set large enough to tell models apart (else no numbers are shown)."""
        old, new = self.figures()
        return new is not None and new.meaningful and new.same_measure(old)

    def missing(self, figure: Figure | None, error: str | None = None) -> str:
        """Why a model's row shows no numbers ("" when it shows them): not measured (and why), or measured on too
        few items to mean anything (:data:`engine.loop.figures.MIN_MEANINGFUL_ITEMS`)."""
        if not self.measured:
            return f"not measured: {self._too_few(self.heldout or 0)}, so nothing to compare on"
        if error:
            return f"not measured: {error}"
        if figure is None:
            return "not measured"
        if not figure.meaningful:
            return f"{self._too_few(figure.items)}: not meaningful yet (chance alone scores rsum {figure.chance:.0f})"
        return ""

    def _too_few(self, items: int) -> str:
        where = "held-aside items" if self.library else f"items in split “{self.split}”"
        return f"too few {where} ({items})"

    def note(self) -> str:
        """The lines under the table: the comparison (or why there is none), how sure its differences are (the
        paired-bootstrap intervals, when measured), what the curve measures instead, and the rule's decision."""
        if not self.measured:
            return ("Nothing was held aside (too few annotations), so the two models cannot be compared yet: "
                    "annotate more items and train again.")
        old, new = self.figures()
        text = comparison_text(old, new, self.old_name, self.new_name)
        if self.comparable:
            text += " Text → item recall (%) in the table; rsum adds R@1/5/10 of both directions."
        if self.old_error:
            text += f" The active model could not be measured: {self.old_error}"
        if self.interval:  # its own line: how sure the differences are (the decision below rests on the held-aside one)
            text += f"\n{self.interval[0].upper()}{self.interval[1:]}."
        text += ("\nThe curve above is the trainer's own check (the model alone, without the zero-shot semantics "
                 "the app ranks with): its figures differ from these.")
        if self.decision:  # a library retrain: the rule `polyseek retrain` applies has decided
            text += f"\n{self.decision[0].upper()}{self.decision[1:]}."
        if self.companion:
            text += f"\n{self.companion[0].upper()}{self.companion[1:]}."
        return text


def headline(metrics: dict[str, Any] | None) -> tuple[float | None, float | None, float | None, float | None]:
    """Text-to-item R@1, R@5, R@10 and rsum of a retrieval report (``engine.trainercontract.metrics.retrieval_report``).

    Text-to-item is the direction a search runs in; rsum sums R@1/5/10 of both directions (the usual summary of
    cross-modal retrieval), so it also reflects item-to-text.
    """
    if not metrics:
        return None, None, None, None
    t2i = metrics.get("t2i") if isinstance(metrics.get("t2i"), dict) else {}

    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) else None

    return number(t2i.get("r1")), number(t2i.get("r5")), number(t2i.get("r10")), number(metrics.get("rsum"))


class ComparisonBox(QGroupBox):
    """The two models' R@1/5/10 and rsum in a table, the note under it, and "Use it and re-index"."""

    use_clicked = Signal()

    def __init__(self) -> None:
        super().__init__("New model beside the active one")
        # what both were measured on, its own wrapped line: in the title it made the box wider than the dialog, and
        # the note and the table's reasons were cut off at its right edge
        self.where = plain_label("", wrap=True)
        self.note = plain_label("", wrap=True)
        self.table = QTableWidget(2, 5)
        self.table.setHorizontalHeaderLabels(["Model", "R@1", "R@5", "R@10", "rsum"])
        self.table.horizontalHeaderItem(1).setToolTip("Text → item recall at 1 (%)")
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.use_button = QPushButton("Use it and re-index")
        self.use_button.setToolTip("Make the new model active and re-embed the library in the background")
        self.use_button.clicked.connect(self.use_clicked)
        self.use_button.hide()
        self.comparison: Comparison | None = None
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.use_button)
        box = QVBoxLayout(self)
        box.addWidget(self.where)
        box.addWidget(self.table)
        box.addWidget(self.note)  # its own row: several wrapped lines need the box's whole width
        box.addLayout(row)

    def show_comparison(self, comparison: Comparison, active: str | None = None) -> None:
        """Show ``comparison``; ``active``: the model active now, when it changed since (the user's "Use it and
        re-index"), else as the rule left it. A row without numbers says why in their place."""
        self.comparison = comparison
        new_active = comparison.activated if active is None else active == comparison.new_name
        old_active = not new_active if active is None else active == comparison.old_name
        old, new = comparison.figures()
        rows = ((f"{comparison.old_name} ({'active' if old_active else 'was active'})", comparison.old,
                 comparison.old_error, old),
                (f"{comparison.new_name} ({'new, active' if new_active else 'new'})", comparison.new, None, new))
        self.where.setText(f"Measured on {new.where()}." if new is not None else "")
        self.where.setVisible(new is not None)
        table = self.table
        table.clearSpans()
        for row, (label, metrics, error, figure) in enumerate(rows):
            why = comparison.missing(figure, error)
            cells = [label, *(f"{v:.1f}" if v is not None and not why else "—" for v in headline(metrics))]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if why:
                    item.setToolTip(plain_tooltip(why))
                table.setItem(row, column, item)
            if why:  # the reason where the numbers would be, not a row of dashes
                reason = QTableWidgetItem(why)
                reason.setForeground(table.palette().placeholderText())
                reason.setToolTip(plain_tooltip(why))
                table.setItem(row, 1, reason)
                table.setSpan(row, 1, 1, 4)
        self.note.setText(comparison.note())
        table.resizeRowsToContents()
        table.setFixedHeight(table.horizontalHeader().height() + sum(table.rowHeight(r) for r in range(2))
                             + 2 * table.frameWidth())
        self.use_button.setEnabled(not new_active)
        self.show()

    def setVisible(self, visible: bool) -> None:  # noqa: N802 - Qt's name
        """The "Use it and re-index" button may sit in the dialog's button row: it comes and goes with the box."""
        super().setVisible(visible)
        self.use_button.setVisible(visible)


def chart_title(held: int) -> tuple[str, str] | None:
    """The title and tooltip of the trainer's per-epoch check over ``held`` held-aside items, or None where there
    are too few for it to mean anything (the result table's floor, :data:`engine.loop.figures.MIN_MEANINGFUL_ITEMS`:
    one item alone scores rsum 600): then the chart stays empty and says why."""
    if held < MIN_MEANINGFUL_ITEMS:
        return None
    return (f"trainer's check: model alone, {held} held-aside items",
            f"rsum of the model alone on the {held} held-aside items after each epoch (epoch 0: the model it starts "
            "from); the table below ranks as the app does")
